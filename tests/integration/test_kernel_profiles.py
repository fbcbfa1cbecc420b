"""Kernel profiles (tests/kernel_profiles/): which tracepoints real kernels
have, read from the BTF of Debian's kernel image packages.

The profiles are re-derived from the packages (apt-get download from the
Debian registry, cached in the build dir) and must match the committed files."""
import os
import re
import subprocess
import sys

import pytest

from conftest import ROOT, TCPSCOPE

sys.path.insert(0, str(ROOT / "tests" / "kernel_profiles"))
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
