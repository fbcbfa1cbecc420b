"""Kernel profiles (tests/kernel_profiles/): which tracepoints real kernels
have, read from the BTF of Debian's kernel image packages.

The profiles are re-derived from the packages (apt-get download from the
Debian registry, cached in the build dir) and must match the committed files;
the BPF objects' CO-RE relocations are checked against Debian 12's 6.1 BTF
with `bpftool gen min_core_btf`, which relocates without loading."""
import os
import re
import subprocess
import sys

import pytest

from conftest import BUILD, ROOT, TCPSCOPE

sys.path.insert(0, str(ROOT / "tests" / "kernel_profiles"))
import core_check  # noqa: E402
import derive  # noqa: E402

PROFILES = sorted(derive.PROFILES)


def missing_of(name):
    return [tp for tp, has in derive.read_profile(name).items() if not has]


def version_lines(env):
    out = subprocess.run([str(TCPSCOPE), "version"], env=env, capture_output=True, text=True, timeout=30, check=True)
    return out.stdout.splitlines()


@pytest.mark.parametrize("name", PROFILES)
def test_profile_is_what_the_kernel_package_says(name):
    """The committed profile is what its kernel's BTF says today (the package
    in its header may be an older build of the same kernel series)."""
    derived = derive.derive(name)
    committed = derive.profile_path(name).read_text()
    assert derive.body(derived) == derive.body(committed), (
        f"tests/kernel_profiles/{name}.profile differs from its kernel; rerun "
        f"tests/kernel_profiles/derive.py {name} --write\n{derived}")


def test_profiles_name_every_hook():
    """Every tracepoint the daemon attaches to (`tcpscope version` lists them,
    present or missing) is in derive.py's reading of kHooks and in every profile."""
    lines = version_lines(dict(os.environ))
    listed = set()
    for line in lines:
        m = re.match(r"\s+(?:missing )?tracepoints: (.*)$", line)
        if m:
            listed |= set(m.group(1).split())
    assert listed == set(derive.hook_tracepoints()), lines
    for name in PROFILES:
        assert listed <= set(derive.read_profile(name)), name


def test_debian12_lacks_what_the_issue_says():
    """Issue 29's list, checked against the profile derived from the real 6.1."""
    p = derive.read_profile("debian12-6.1")
    assert missing_of("debian12-6.1") == ["sk_data_ready", "tcp_sendmsg_locked", "sock_send_length", "sock_recv_length"]
    assert p["tcp_cong_state_set"] and p["tcp_rcv_space_adjust"] and p["tcp_probe"]


def bpf_objects():
    objs = sorted((BUILD / "bpf").glob("*.bpf.o"))  # bench/floor.bpf.o among them
    assert {o.name for o in objs} >= {"flow.bpf.o", "policy.bpf.o", "tcpscope.bpf.o"}, objs
    return objs


def test_core_relocations_resolve_on_debian12():
    """Every CO-RE relocation of every BPF object resolves against Debian
    12's 6.1 BTF, but for reads behind bpf_core_field_exists() of a field
    6.1 lacks (which libbpf turns into constant false there)."""
    btf = derive.kernel_btf("debian12-6.1")[0]
    for obj in bpf_objects():
        _, missing, log = core_check.relocations(btf, obj)
        assert core_check.unguarded(missing) == [], (obj, core_check.unguarded(missing))
    # What 6.1 lacks, all behind field-existence checks: µs TCP timestamps and
    # the SYN-ACK's RTO time (6.7), the 64-bit capability set (6.3).
    _, missing, _ = core_check.relocations(btf, BUILD / "bpf" / "tcpscope.bpf.o")
    assert {a for _, k, a in missing if k == "field_exists"} == {
        "struct tcp_sock.tcp_usec_ts", "struct tcp_sock.total_rto_time", "struct tcp_sock.total_rto",
        "struct cred.cap_effective.val"}


def test_core_check_finds_a_field_the_kernel_lacks(tmp_path):
    """The check fails when a field the programs read is missing: a BTF made
    of only the types policy.bpf.o uses lacks tcp_sock's fields that only
    flow.bpf.o reads. bpftool itself exits 0 there."""
    btf = derive.kernel_btf("debian12-6.1")[0]
    small = tmp_path / "policy-only.btf"
    subprocess.run(["bpftool", "gen", "min_core_btf", str(btf), str(small), str(BUILD / "bpf" / "policy.bpf.o")],
                   check=True, capture_output=True, timeout=300)
    _, missing, _ = core_check.relocations(small, BUILD / "bpf" / "flow.bpf.o")
    hard = core_check.unguarded(missing)
    assert any(a == "struct tcp_sock.srtt_us" for _, _, a in hard), hard
