"""Kernel profiles (tests/kernel_profiles/): which tracepoints real kernels
have, read from the BTF of Debian's kernel image packages, and the daemon run
here as on those kernels by hiding exactly the tracepoints they lack.

The profiles are re-derived from the packages (apt-get download from the
Debian registry, cached in the build dir) and must match the committed files;
the BPF objects' CO-RE relocations are checked against each profile's BTF
with `bpftool gen min_core_btf`, which relocates without loading."""
import collections
import os
import re
import subprocess
import sys
import time

from pathlib import Path

import pytest

from conftest import BUILD, EMULATED, REQUESTS_PEER, ROOT, TCPSCOPE, Daemon, kernel_tracepoints, wait_for

sys.path.insert(0, str(ROOT / "tests" / "kernel_profiles"))
import core_check  # noqa: E402
import derive  # noqa: E402

PROFILES = sorted(derive.PROFILES)


def version_lines(env):
    out = subprocess.run([str(TCPSCOPE), "version"], env=env, capture_output=True, text=True, timeout=30, check=True)
    return out.stdout.splitlines()


@pytest.mark.real_kernel
def test_version_says_whether_ci_boots_this_kernel():
    """`tcpscope version` names the booted series this kernel is of, from the
    table the runner boots (src/kernel/booted_kernels.tsv), or says it is
    none and which CI boots."""
    release = os.uname().release
    table = [l.split("\t") for l in (ROOT / "src/kernel/booted_kernels.tsv").read_text().splitlines()
             if l.strip() and not l.startswith("#")]
    assert [len(row) for row in table] == [4] * len(table) and len(table) >= 2, table
    line = next(l.strip() for l in version_lines(None) if l.strip().startswith("booted in CI:"))
    booted = [name for name, _, pattern, _ in table if re.fullmatch(pattern, release)]
    if booted:
        assert line.startswith(f"booted in CI: yes, as {booted[0]} ("), line
    else:
        assert line.startswith("booted in CI: no (CI boots ") and all(row[0] in line for row in table), line


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
    assert derive.missing("debian12-6.1") == ["sk_data_ready", "tcp_sendmsg_locked", "sock_send_length", "sock_recv_length"]
    assert p["tcp_cong_state_set"] and p["tcp_probe"]


def bpf_objects():
    objs = sorted((BUILD / "bpf").glob("*.bpf.o"))  # bench/floor.bpf.o among them
    assert {o.name for o in objs} >= {"flow.bpf.o", "policy.bpf.o", "tcpscope.bpf.o"}, objs
    return objs


@pytest.mark.parametrize("name", PROFILES)
def test_core_relocations_resolve(name):
    """Every CO-RE relocation of every BPF object resolves against the
    profile's kernel BTF (Debian 12's 6.1, 6.12), but for reads behind
    bpf_core_field_exists() of a field that kernel lacks (which libbpf turns
    into constant false there)."""
    btf = derive.kernel_btf(name)[0]
    for obj in bpf_objects():
        _, missing, _ = core_check.relocations(btf, obj)
        assert core_check.unguarded(missing) == [], (obj, core_check.unguarded(missing))


def test_core_fields_debian12_lacks():
    """What 6.1 lacks, all behind field-existence checks: µs TCP timestamps
    and the SYN-ACK's RTO time (6.7), the 64-bit capability set (6.3)."""
    btf = derive.kernel_btf("debian12-6.1")[0]
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


@pytest.fixture(params=PROFILES)
def profile_daemon(request, tmp_path):
    env = derive.daemon_env(request.param)
    d = Daemon(tmp_path, env=env)
    try:
        yield request.param, env, d
    finally:
        d.stop()


def test_daemon_runs_as_on_the_profiles_kernel(profile_daemon, net, tmp_path):
    """Started with exactly the profile's missing tracepoints hidden, the
    daemon warns of each one it would have used, states what its records can
    hold (as `tcpscope version` does under the same profile), and records
    one flow per socket, whose one request and one response are a send
    transfer of one side and a receive transfer of the other: send transfers
    come from the ACKs there (tcp_probe), as tcp_sendmsg_locked is missing."""
    name, env, d = profile_daemon
    hidden_hooks = [tp for tp in derive.missing(name) if tp in derive.hook_tracepoints()]
    # Logged just after "running:", which is all Daemon() waits for.
    err = wait_for(lambda: "kernel: congestion-state times" in d.stderr_text() and d.stderr_text(), 10,
                   what="the capability lines")
    warned = re.findall(r"warning: this kernel has no tracepoint (\w+)", err)
    assert sorted(warned) == sorted(hidden_hooks), err

    said = [l.split("tcpscope: kernel: ", 1)[1] for l in err.splitlines() if l.startswith("tcpscope: kernel: ")]
    # The tick's line (docs/kernels.md) is the load's, not a capability `tcpscope version` states.
    ticks = [l for l in said if l.startswith("tick ")]
    assert len(ticks) == 1, err
    said = [l for l in said if not l.startswith("tick ")]
    version = [l.strip() for l in version_lines(env)]
    assert [l for l in version if l.split(":")[0] in ("transfers", "receive-side end", "congestion-state times")] == said
    assert len(said) == 3, err
    assert said[0].startswith("transfers: degraded (a send transfer starts when its first segment leaves, seen at "
                              "the next ACK (tcp_probe)"), said
    assert said[1] == ("receive-side end: at the last arrival (sk_data_ready)" if "sk_data_ready" not in hidden_hooks
                       else "receive-side end: at the last arrival (tcp_probe), but for data after this side's FIN"), \
        said
    assert said[2] == "congestion-state times: yes", said

    n = 3
    server, _ = net.serve(tmp_path, net.srv_v4, n)
    clients = []
    for _ in range(n):
        clients += net.client(tmp_path, net.srv_v4, req=2000, resp=50_000)
    server.wait(timeout=60)
    assert all("error" not in c for c in clients), clients
    recs = d.wait_records(net, 2 * n)
    assert len(recs) == 2 * n, recs
    for c in clients:
        key = (net.cli_v4, c["lport"], net.srv_v4, c["rport"])
        act = [r for r in recs if (r["laddr"], r["lport"], r["raddr"], r["rport"]) == key]
        pas = [r for r in recs if (r["raddr"], r["rport"], r["laddr"], r["lport"]) == key]
        assert len(act) == 1 and len(pas) == 1, (act, pas)
        # The request carries an 8-byte header (sizes), the response none.
        assert act[0]["bytes_received"] == 50_000 and pas[0]["bytes_received"] == 2000 + 8, (act, pas)
    # Of these flows only: a namespace's inode number can be another's later.
    transfers = [t for t in d.all_transfers() if t["flow_start_ns"] in {r["start_ns"] for r in recs}]
    by_socket = sorted((t["laddr"], t["lport"], t["raddr"], t["rport"], t["direction"], t["bytes"]) for t in transfers)
    assert by_socket == sorted([(r["laddr"], r["lport"], r["raddr"], r["rport"], "recv", r["bytes_received"])
                                for r in recs] + [(r["laddr"], r["lport"], r["raddr"], r["rport"], "send",
                                                   r["bytes_acked"]) for r in recs])


# Issue 29's load: one kept-alive connection, 12 responses of 20 kB to 4 MB.
RESPONSES = [20_000, 4_000_000, 50_000, 1_000_000, 100_000, 2_000_000, 30_000, 500_000, 250_000, 3_000_000,
             75_000, 150_000]


@pytest.mark.parametrize("name", [pytest.param(None, marks=pytest.mark.real_kernel), *PROFILES])
def test_kept_alive_responses_are_a_send_transfer_each(name, net, tmp_path):
    """Issue 29: each response on a kept-alive connection is one send
    transfer of the server and one receive transfer of the client, with
    exactly its bytes, on the profile's kernel (send transfers from the ACKs,
    tcp_probe) as on this one (None: every hook, tcp_sendmsg_locked). The
    transfers of each side take turns with the other's: a response's ACK of
    its last byte comes before the next request, and the request's before
    the response."""
    d = Daemon(tmp_path, env=derive.daemon_env(name))
    try:
        sizes = ",".join(str(n) for n in RESPONSES)
        ready = tmp_path / "server.ready"
        server = net.spawn(net.srv, sys.executable, "-c", REQUESTS_PEER, "server", net.srv_v4, "8092", sizes,
                           str(len(RESPONSES)), str(ready))
        wait_for(lambda: ready.exists() or server.poll() is not None, 10, what="server start")
        client = net.spawn(net.cli, sys.executable, "-c", REQUESTS_PEER, "client", net.srv_v4, "8092", sizes,
                           str(len(RESPONSES)))
        assert client.wait(timeout=60) == 0, client.stderr.read()
        assert server.wait(timeout=10) == 0, server.stderr.read()
        recs = d.wait_records(net, 2)
        assert len(recs) == 2, recs
        srv = next(r for r in recs if r["dir"] == "passive")
        cli = next(r for r in recs if r["dir"] == "active")
        assert srv["bytes_acked"] == sum(RESPONSES) and cli["bytes_received"] == sum(RESPONSES), (srv, cli)

        def transfers(rec):
            mine = [t for t in d.all_transfers() if t["netns"] == rec["netns"] and t["lport"] == rec["lport"]
                    and t["flow_start_ns"] == rec["start_ns"]]
            return sorted(mine, key=lambda t: t["seq"])
        moved = 2 * (sum(RESPONSES) + 100 * len(RESPONSES))  # each byte a send and a receive transfer's
        wait_for(lambda: sum(t["bytes"] for t in transfers(srv) + transfers(cli)) >= moved, 10,
                 what=f"transfers of {moved} bytes")
        ts, tc = transfers(srv), transfers(cli)
        sends = [t for t in ts if t["direction"] == "send"]
        print(f"\n{name or 'every hook'}: server send xfer_us {[t['xfer_us'] for t in sends]}"
              f" wait_us {[t['wait_us'] for t in sends]}", end="")
        assert [t["bytes"] for t in sends] == RESPONSES, [(t["seq"], t["bytes"]) for t in ts]
        # Without tcp_sendmsg_locked (hidden, or this kernel's own lack) a
        # send transfer starts at its first segment's departure.
        departs = name or "tcp_sendmsg_locked" not in kernel_tracepoints()
        assert {t["delimited_by"] for t in ts + tc if t["direction"] == "send"} == \
            {"departure" if departs else "write"}, ts + tc
        assert {t["delimited_by"] for t in ts + tc if t["direction"] == "recv"} == {"arrival"}, ts + tc
        assert sum(t["bytes"] for t in sends) == srv["bytes_acked"]
        # Each request is a send transfer of the client: a response came in since the last.
        assert [t["bytes"] for t in tc if t["direction"] == "send"] == [100] * len(RESPONSES), tc
        if EMULATED:
            # A receive transfer starts at an arrival min_rtt/2 after a send
            # began: the RTTs of an emulated CPU (a 6 ms handshake, then 0.2
            # ms) can merge responses there. Their bytes are exact all the same.
            assert sum(t["bytes"] for t in tc if t["direction"] == "recv") == sum(RESPONSES), tc
            assert sum(t["bytes"] for t in ts if t["direction"] == "recv") == 100 * len(RESPONSES), ts
            return
        assert [t["bytes"] for t in tc if t["direction"] == "recv"] == RESPONSES, [(t["seq"], t["bytes"]) for t in tc]
        for rec, mine, first in ((srv, ts, "recv"), (cli, tc, "send")):
            # Requests and responses alternate, the peer's request first.
            assert [t["direction"] for t in mine] == [first, ({"send", "recv"} - {first}).pop()] * len(RESPONSES), \
                [(t["seq"], t["direction"], t["bytes"]) for t in mine]
            assert [t["bytes"] for t in mine if t["direction"] != ("send" if rec is srv else "recv")] == \
                [100] * len(RESPONSES), mine
            for a, b in zip(mine, mine[1:]):
                assert a["start_ns"] <= a["end_ns"] <= b["start_ns"], (a, b)
            assert rec["start_ns"] <= mine[0]["start_ns"] and mine[-1]["end_ns"] <= rec["end_ns"], (rec, mine)
    finally:
        d.stop()


# One request, answered in three writes: the second 0.3 s after the first,
# the third 1.5 s after the second; the server closes right after the third.
PAUSING_PEER = """
import socket, sys, time
role, addr, port = sys.argv[1], sys.argv[2], int(sys.argv[3])
if role == "server":
    ls = socket.socket(); ls.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    ls.bind((addr, port)); ls.listen(1); open(sys.argv[4], "w").close()
    ls.settimeout(20); c, _ = ls.accept(); c.settimeout(20)
    got = 0
    while got < 100: got += len(c.recv(100 - got))
    for pause in (0, 0.3, 1.5):
        time.sleep(pause)
        c.sendall(b"r" * 50000)
    c.close()
else:
    c = socket.create_connection((addr, port), timeout=20)
    c.sendall(b"q" * 100)
    got = 0
    while got < 150000:
        b = c.recv(65536)
        if not b: raise SystemExit("peer closed early")
        got += len(b)
    c.close()
"""


@pytest.mark.parametrize("name", [None, *PROFILES])
def test_a_pause_of_a_second_with_nothing_in_flight_ends_a_send_transfer(name, net, tmp_path):
    """With no request in between, a write after a pause under a second with
    nothing in flight joins the running send transfer, and one after a
    second starts a new one, on the profile's kernel (from the ACKs) as on
    this one. (The server closes right after the last write: if that is
    before the write's first ACK, its start is taken at the close, as
    tcp_probe runs only in ESTABLISHED; on veth it mostly is not.)"""
    d = Daemon(tmp_path, env=derive.daemon_env(name))
    try:
        ready = tmp_path / "server.ready"
        server = net.spawn(net.srv, sys.executable, "-c", PAUSING_PEER, "server", net.srv_v4, "8094", str(ready))
        wait_for(lambda: ready.exists() or server.poll() is not None, 10, what="server start")
        client = net.spawn(net.cli, sys.executable, "-c", PAUSING_PEER, "client", net.srv_v4, "8094")
        assert client.wait(timeout=30) == 0, client.stderr.read()
        assert server.wait(timeout=10) == 0, server.stderr.read()
        recs = d.wait_records(net, 2)
        srv = next(r for r in recs if r["dir"] == "passive")

        def sends():
            return sorted((t for t in d.all_transfers() if t["netns"] == srv["netns"] and t["lport"] == srv["lport"]
                           and t["flow_start_ns"] == srv["start_ns"] and t["direction"] == "send"),
                          key=lambda t: t["seq"])
        wait_for(lambda: len(sends()) >= 2, 10, what="2 send transfers")
        ts = sends()
        assert [t["bytes"] for t in ts] == [100_000, 50_000], ts
        # The second one starts after the pause, about 1.5 s after the first
        # one's last ACK.
        gap = ts[1]["start_ns"] - ts[0]["end_ns"]
        assert 1.4e9 <= gap <= 2.5e9, (gap, ts)
        assert ts[0]["xfer_us"] >= 250_000, ts  # the 0.3 s pause is in it
    finally:
        d.stop()


@pytest.mark.parametrize("name", [None, *PROFILES])
def test_a_response_of_two_flights_is_one_send_transfer(name, net, tmp_path):
    """A response written in two parts, the second leaving with nothing in
    flight, is one send transfer, also where send transfers come from the
    ACKs and two programs look at each segment: the second must not take
    the response's last flight, ended by the request that acknowledges it,
    for a new transfer (before that was handled, 0.44 phantom transfers of
    the last flight's bytes per 100 kB nginx response on veth)."""
    n = 200
    d = Daemon(tmp_path, env=derive.daemon_env(name))
    try:
        # Each response 50,332 bytes, its last 332 written 2 ms after the rest;
        # the client's next request carries the ACK of those (it acknowledges
        # with its data).
        ready = tmp_path / "server.ready"
        server = net.spawn(net.srv, sys.executable, "-c", REQUESTS_PEER, "server", net.srv_v4, "8094", "50332",
                           str(n), str(ready), "332")
        wait_for(lambda: ready.exists() or server.poll() is not None, 10, what="server start")
        client = net.spawn(net.cli, sys.executable, "-c", REQUESTS_PEER, "client", net.srv_v4, "8094", "50332",
                           str(n))
        assert client.wait(timeout=60) == 0, client.stderr.read()
        assert server.wait(timeout=10) == 0, server.stderr.read()
        recs = d.wait_records(net, 2)
        srv = next(r for r in recs if r["dir"] == "passive")
        assert srv["bytes_acked"] == n * 50_332, srv
        sends = lambda: [t for t in d.all_transfers() if t["netns"] == srv["netns"] and t["lport"] == srv["lport"]
                         and t["flow_start_ns"] == srv["start_ns"] and t["direction"] == "send"]
        wait_for(lambda: len(sends()) >= n, 10, what=f"{n} send transfers")
        time.sleep(0.3)
        sizes = collections.Counter(t["bytes"] for t in sends())
        print(f"\n{name or 'every hook'}: server send transfers by bytes {dict(sizes)}", end="")
        assert sizes == {50_332: n}, sizes
    finally:
        d.stop()


@pytest.mark.parametrize("name", [None, *PROFILES])
def test_max_cwnd_outlives_a_restart_after_idle(name, net, tmp_path):
    """max_cwnd is the largest cwnd the flow had, not its cwnd at close: a
    4 MB response with CUBIC grows the server's cwnd, 0.5 s of idle (two
    RTOs and more) has the next send halve it twice (tcp_slow_start_after_idle:
    no congestion-state change to sample it before), and a 1 kB response
    follows before the close. Without tcp_sendmsg_locked, whose every call samples
    the cwnd, each received segment does (tcp_probe)."""
    # Outside the initial namespace the default may only be an allowed
    # algorithm (EPERM otherwise); the host's list comes back as it was.
    allowed = Path("/proc/sys/net/ipv4/tcp_allowed_congestion_control")
    before = allowed.read_text().strip()
    if "cubic" not in before.split():
        allowed.write_text(before + " cubic")
    d = None
    try:
        net.ns(net.srv, "sysctl", "-qw", "net.ipv4.tcp_congestion_control=cubic",
               "net.ipv4.tcp_slow_start_after_idle=1")
        d = Daemon(tmp_path, env=derive.daemon_env(name))
        ready = tmp_path / "server.ready"
        server = net.spawn(net.srv, sys.executable, "-c", REQUESTS_PEER, "server", net.srv_v4, "8095", "4000000,1000",
                           "2", str(ready))
        wait_for(lambda: ready.exists() or server.poll() is not None, 10, what="server start")
        client = net.spawn(net.cli, sys.executable, "-c", REQUESTS_PEER, "client", net.srv_v4, "8095", "4000000,1000",
                           "2", "0.5")
        assert client.wait(timeout=60) == 0, client.stderr.read()
        assert server.wait(timeout=10) == 0, server.stderr.read()
        srv = next(r for r in d.wait_records(net, 2) if r["dir"] == "passive")
        print(f"\n{name or 'every hook'}: server cc {srv['cc']} cwnd at close {srv['cwnd']}, "
              f"max_cwnd {srv['max_cwnd']}", end="")
        assert srv["cc"] == "cubic", srv
        assert srv["max_cwnd"] >= 3 * srv["cwnd"], srv
    finally:
        if d:
            d.stop()
        allowed.write_text(before)
