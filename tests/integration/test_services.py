"""Which service owns a socket: the daemon names it from the socket's cgroup
(docs/services.md), in the flow and transfer records and for compare.

The cgroups are made by hand under a directory of the test's own in the
cgroup v2 hierarchy, laid out as systemd and Docker lay theirs out, and the
servers and clients are real processes moved into them before they make
their sockets. Everything is removed afterwards, also when a test fails.
"""
import json
import os
import random
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

from conftest import TCPSCOPE, Daemon, cgroup2_root, metric_value, wait_for

# A server: listens on ADDR:PORT (with CC on the listener when given, which
# its accepted sockets inherit), answers each connection's 100-byte request
# with SIZE bytes, then waits HOLD seconds before closing.
SERVER = """
import socket, sys, threading, time
addr, port, size, hold, cc, ready = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), float(sys.argv[4]), sys.argv[5], sys.argv[6]
ls = socket.socket(socket.AF_INET6 if ":" in addr else socket.AF_INET)
ls.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
if cc != "-":
    ls.setsockopt(socket.IPPROTO_TCP, socket.TCP_CONGESTION, cc.encode())
ls.bind((addr, port)); ls.listen(128)
open(ready, "w").close()
def serve(c):
    got = 0
    while got < 100:
        b = c.recv(100 - got)
        if not b: break
        got += len(b)
    c.sendall(b"x" * size)
    time.sleep(hold)
    c.close()
while True:
    c, _ = ls.accept()
    threading.Thread(target=serve, args=(c,), daemon=True).start()
"""

# A client: COUNT connections to ADDR:PORT one after another, each sending
# 100 bytes and reading the whole answer, then closing first.
CLIENT = """
import socket, sys
addr, port, count, size = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
for _ in range(count):
    s = socket.create_connection((addr, port), timeout=20)
    s.sendall(b"q" * 100)
    got = 0
    while got < size:
        b = s.recv(65536)
        if not b: break
        got += len(b)
    assert got == size, got
    s.close()
"""

# A client that connects, sends a request, reads the 20,000-byte answer, says
# "answered" and closes when told to on its standard input.
HOLDING_CLIENT = """
import socket, sys
s = socket.create_connection((sys.argv[1], int(sys.argv[2])), timeout=20)
s.sendall(b"q" * 100)
got = 0
while got < 20000:
    b = s.recv(65536)
    if not b: break
    got += len(b)
print("answered", flush=True)
sys.stdin.readline()
s.close()
"""

CONTAINER_ID = "".join(random.choice("0123456789abcdef") for _ in range(64))


class CgroupTree:
    """Cgroups under a directory of the test's own; close() moves every
    process left in them to the root and removes them, deepest first."""

    def __init__(self):
        self.root = cgroup2_root()
        if self.root is None:
            pytest.skip("no cgroup v2 hierarchy mounted")
        self.base = self.root / f"tcpscope-test-{os.getpid()}-{random.randrange(1 << 20):05x}"
        self.base.mkdir()

    def make(self, relative):
        path = self.base / relative
        path.mkdir(parents=True, exist_ok=True)
        return path

    def close(self):
        for _ in range(50):
            dirs = sorted((p for p in self.base.rglob("*") if p.is_dir()), key=lambda p: -len(p.parts))
            for d in dirs + [self.base]:
                for pid in (d / "cgroup.procs").read_text().split() if (d / "cgroup.procs").exists() else []:
                    try:
                        (self.root / "cgroup.procs").write_text(pid)
                    except OSError:
                        pass
                try:
                    d.rmdir()
                except OSError:
                    pass
            if not self.base.exists():
                return
            time.sleep(0.1)


@pytest.fixture
def cgroups():
    tree = CgroupTree()
    yield tree
    tree.close()


def in_cgroup(cgroup, argv):
    """argv run by a shell that first moves itself into `cgroup`."""
    return ["sh", "-c", 'echo $$ > "$0/cgroup.procs" && exec "$@"', str(cgroup), *argv]


def start_server(net, tmp, cgroup, addr, port, size=20000, hold=0.0, cc="-", move_to=None):
    """move_to: a cgroup the server is moved into once it listens (as a
    listener PID 1 made for socket activation is handed to the service)."""
    ready = tmp / f"server-{port}.ready"
    p = subprocess.Popen(in_cgroup(cgroup, ["ip", "netns", "exec", net.srv, sys.executable, "-c", SERVER, addr,
                                            str(port), str(size), str(hold), cc, str(ready)]),
                         stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    net.procs.append(p)
    wait_for(lambda: ready.exists() or p.poll() is not None, 10, what="server start")
    assert p.poll() is None, p.stderr.read()
    if move_to:
        (move_to / "cgroup.procs").write_text(str(p.pid))
    return p


def run_client(net, cgroup, addr, port, count, size=20000):
    argv = ["ip", "netns", "exec", net.cli, sys.executable, "-c", CLIENT, addr, str(port), str(count), str(size)]
    r = subprocess.run(in_cgroup(cgroup, argv) if cgroup else argv, capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr


def remove_when_empty(cgroup):
    wait_for(lambda: not (cgroup / "cgroup.procs").read_text().split(), 5, what=f"{cgroup} empty")
    for _ in range(50):
        try:
            cgroup.rmdir()
            return
        except OSError:
            time.sleep(0.05)
    cgroup.rmdir()


def cgroup_id(path):
    """On cgroup v2 a directory's inode number is the cgroup's id."""
    return os.stat(path).st_ino


def start_daemon(tmp, config=""):
    cfg = tmp / "tcpscope.yaml"
    cfg.write_text(config)
    (tmp / "d").mkdir(exist_ok=True)
    return Daemon(tmp / "d", extra_args=["--config", str(cfg)],
                  env={**os.environ, "STATE_DIRECTORY": str(tmp / "d")})


@pytest.mark.real_kernel
def test_records_name_the_service_that_owns_the_socket(net, cgroups, tmp_path):
    """A server in a systemd service's cgroup and a client in a Docker
    container's scope: each end's flow records and transfer records name its
    own service, with the unit, the container id and the socket's cgroup."""
    if os.geteuid() != 0:
        pytest.skip("needs root to load BPF programs")
    web = cgroups.make("system.slice/web-a.service")
    container = cgroups.make(f"system.slice/docker-{CONTAINER_ID}.scope")
    d = start_daemon(tmp_path)
    try:
        start_server(net, tmp_path, web, net.srv_v4, 8080)
        run_client(net, container, net.srv_v4, 8080, 3)
        recs = d.wait_records(net, 6)
        server = [r for r in recs if r["dir"] == "passive"]
        client = [r for r in recs if r["dir"] == "active"]
        assert len(server) == 3 and len(client) == 3
        for r in server:
            assert (r["service"], r["unit"], r["container_id"], r["pod_uid"]) == \
                ("web-a.service", "web-a.service", "", ""), r
            assert r["sock_cgroup_id"] == cgroup_id(web) == r["cgroup_id"], r
        for r in client:
            assert (r["service"], r["unit"], r["container_id"]) == \
                (CONTAINER_ID[:12], f"docker-{CONTAINER_ID}.scope", CONTAINER_ID), r
            assert r["sock_cgroup_id"] == cgroup_id(container), r
        wait_for(lambda: len([t for t in d.all_transfers() if t["netns"] in net.netns_ids.values()]) >= 12, 10,
                 what="12 transfer records (a request and a response at each end of 3 flows)")
        transfers = [t for t in d.all_transfers() if t["netns"] in net.netns_ids.values()]
        for t in transfers:
            want = "web-a.service" if t["dir"] == "passive" else CONTAINER_ID[:12]
            assert t["service"] == want, t
    finally:
        assert d.stop() == 0, d.stderr_text()


def test_a_listener_made_in_the_root_cgroup_is_named_by_the_task_that_serves_it(net, cgroups, tmp_path):
    """A listener made in the root cgroup (as PID 1 makes a socket-activated
    service's in init.scope) tells nothing of the service: the accepted
    sockets are named from the cgroup of the task that serves them."""
    if os.geteuid() != 0:
        pytest.skip("needs root to load BPF programs")
    web = cgroups.make("system.slice/activated.service")
    d = start_daemon(tmp_path)
    try:
        start_server(net, tmp_path, cgroups.root, net.srv_v4, 8090, move_to=web)
        run_client(net, None, net.srv_v4, 8090, 2)
        server = [r for r in d.wait_records(net, 4) if r["dir"] == "passive"]
        assert len(server) == 2
        for r in server:
            assert r["sock_cgroup_id"] == cgroup_id(cgroups.root) and r["cgroup_id"] == cgroup_id(web), r
            assert (r["service"], r["unit"]) == ("activated.service", "activated.service"), r
    finally:
        assert d.stop() == 0, d.stderr_text()


def test_a_container_gone_before_its_flows_close_keeps_its_name_for_the_grace(net, cgroups, tmp_path):
    """A container's connection outlives the container: its process leaves
    the scope (as the container's last process would hand the socket on or
    exit with it still closing) and the scope is removed while the connection
    stays open. A record that comes within services.grace_seconds of the
    removal still names the container; past it the name is empty and
    tcpscope_service_unresolved_total counts it."""
    if os.geteuid() != 0:
        pytest.skip("needs root to load BPF programs")
    d = start_daemon(tmp_path, "services:\n  grace_seconds: 3\n")
    try:
        port = 8100
        start_server(net, tmp_path, cgroups.make("system.slice/web-b.service"), net.srv_v4, port)
        for hold, named in ((0.5, True), (6.0, False)):
            container = CONTAINER_ID[:-4] + f"{int(hold * 10):04d}"
            scope = cgroups.make(f"system.slice/docker-{container}.scope")
            time.sleep(0.5)  # a container runs a while before its first connection
            before = d.metric_value("tcpscope_service_unresolved_total") or 0
            client = subprocess.Popen(
                in_cgroup(scope, ["ip", "netns", "exec", net.cli, sys.executable, "-c", HOLDING_CLIENT, net.srv_v4,
                                  str(port)]),
                stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
            net.procs.append(client)
            assert client.stdout.readline().strip() == "answered", client.stderr.read()
            scope_id = cgroup_id(scope)
            (cgroups.root / "cgroup.procs").write_text(str(client.pid))  # out of the container
            remove_when_empty(scope)
            time.sleep(hold)
            client.stdin.write("close\n")
            client.stdin.flush()
            assert client.wait(10) == 0, client.stderr.read()
            wait_for(lambda: any(r["dir"] == "active" for r in d.records(net, "cli")
                                 if r["sock_cgroup_id"] == scope_id), 20, what="the container's record")
            rec = [r for r in d.records(net, "cli") if r["sock_cgroup_id"] == scope_id][0]
            if named:
                assert (rec["service"], rec["container_id"]) == (container[:12], container), rec
            else:
                assert (rec["service"], rec["container_id"]) == ("", ""), rec
                wait_for(lambda: (d.metric_value("tcpscope_service_unresolved_total") or 0) > before, 5,
                         what="tcpscope_service_unresolved_total to count it")
    finally:
        assert d.stop() == 0, d.stderr_text()


def test_compare_by_service_from_the_flow_log_and_the_daemon(net, cgroups, tmp_path):
    """Two services, each serving under CUBIC and BBR: compare --by service
    finds each service's flows in each arm, from the flow log and from the
    daemon, with the same counts."""
    if os.geteuid() != 0:
        pytest.skip("needs root to load BPF programs")
    d = start_daemon(tmp_path)
    counts = {("svc-a.service", "cubic"): 3, ("svc-a.service", "bbr"): 4,
              ("svc-b.service", "cubic"): 5, ("svc-b.service", "bbr"): 2}
    try:
        port = 8200
        for (service, cc), n in counts.items():
            start_server(net, tmp_path, cgroups.make(f"system.slice/{service}"), net.srv_v4, port, cc=cc)
            run_client(net, None, net.srv_v4, port, n)
            port += 1
        d.wait_records(net, 2 * sum(counts.values()))
        for source in (["--flows", str(d.flow_log)], ["--server", d.url]):
            r = subprocess.run([str(TCPSCOPE), "compare", *source, "--by", "service", "--a", "cc=cubic",
                                "--b", "cc=bbr", "--metric", "fct", "--unit", "flow", "--json"],
                               capture_output=True, text=True, timeout=60)
            assert r.returncode == 0, r.stderr
            out = json.loads(r.stdout)
            groups = {g["group"]: g for g in out["groups"]}
            for service in ("svc-a.service", "svc-b.service"):
                g = groups[service]
                assert (g["n_a"], g["n_b"]) == (counts[(service, "cubic")], counts[(service, "bbr")]), \
                    (source[0], g)
            # The daemon's sketches label services as its metrics do (top-N, "other"), and say so.
            folded = [n for n in out["notes"] if n.startswith("service: the daemon labels only its top-N")]
            assert len(folded) == (source[0] == "--server"), out["notes"]
    finally:
        assert d.stop() == 0, d.stderr_text()


# Makes COUNT cgroups one after another under BASE, each a unit
# "churn-<i>.service": moves itself in, connects to ADDR:PORT from the
# network namespace NETNS (entered with setns, so that the cgroup tree stays
# in view), closes, moves back to BASE and removes the cgroup.
CGROUP_CHURN = """
import ctypes, os, socket, sys
base, netns, addr, port, count = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4]), int(sys.argv[5])
libc = ctypes.CDLL(None, use_errno=True)
fd = os.open(netns, os.O_RDONLY)
if libc.setns(fd, 0x40000000) != 0:
    raise OSError(ctypes.get_errno(), "setns " + netns)
me = str(os.getpid())
open(os.path.join(base, "cgroup.procs"), "w").write(me)
for i in range(count):
    d = os.path.join(base, "churn-%d.service" % i)
    os.mkdir(d)
    open(os.path.join(d, "cgroup.procs"), "w").write(me)
    s = socket.create_connection((addr, port), timeout=10)
    s.sendall(b"q" * 100)
    s.close()
    open(os.path.join(base, "cgroup.procs"), "w").write(me)
    os.rmdir(d)
"""


def service_label_values(metrics, family):
    return {m for m in re.findall(r'^' + family + r'\{[^}]*service="([^"]*)"', metrics, re.M)}


def churn_cgroups(net, cgroups, tmp_path, count, top_n):
    """`count` cgroups made, used for one connection each and removed, one
    after another: every connection's record names its own unit, the
    metrics keep at most 2 * services.top_n service labels beside "other" and
    "", and once the grace is over the daemon knows no more cgroups than
    before."""
    if os.geteuid() != 0:
        pytest.skip("needs root to load BPF programs")
    d = start_daemon(tmp_path, f"services:\n  top_n: {top_n}\n  grace_seconds: 5\n")
    try:
        def known():
            m = d.metrics()
            return (metric_value(m, "tcpscope_service_cgroups", {"state": "live"}),
                    metric_value(m, "tcpscope_service_cgroups", {"state": "removed"}))
        live_before = wait_for(lambda: known()[0], 10, what="the first count of known cgroups")
        start_server(net, tmp_path, cgroups.make("system.slice/sink.service"), net.srv_v4, 8300, size=0)
        base = cgroups.make("churn.slice")
        t0 = time.monotonic()
        r = subprocess.run([sys.executable, "-c", CGROUP_CHURN, str(base), f"/run/netns/{net.cli}", net.srv_v4,
                            "8300", str(count)], capture_output=True, text=True, timeout=300)
        churn_s = time.monotonic() - t0
        assert r.returncode == 0, r.stderr
        wait_for(lambda: len(d.records(net, "cli")) >= count, 60,
                 what=lambda: f"{count} client records (have {len(d.records(net, 'cli'))}; {d.losses()})")
        names = [r["service"] for r in d.records(net, "cli")]
        assert sorted(names) == sorted(f"churn-{i}.service" for i in range(count)), \
            [n for n in names if not n.startswith("churn-")][:10]
        print(f"{count} cgroups made, used and removed in {churn_s:.1f} s")
        metrics = d.metrics()
        for family in ("tcpscope_flows_total", "tcpscope_bytes_acked_total"):
            labels = service_label_values(metrics, family)
            assert len(labels - {"other", ""}) <= 2 * top_n, (family, sorted(labels))
        wait_for(lambda: known()[1] == 0, 30, what="the removed cgroups forgotten after their grace")
        live_after, _ = known()
        # The test's own three (system.slice, sink.service, churn.slice), and
        # room for a unit the host starts meanwhile.
        assert live_after <= live_before + 3 + 5, (live_before, live_after)
    finally:
        assert d.stop() == 0, d.stderr_text()


def test_ten_thousand_short_lived_cgroups_hold_the_series_budget_and_leave_nothing(net, cgroups, tmp_path):
    churn_cgroups(net, cgroups, tmp_path, count=10000, top_n=5)


@pytest.mark.real_kernel
def test_cgroups_removed_before_the_daemon_reads_them_are_named_from_the_kernels_record(net, cgroups, tmp_path):
    """Each cgroup lives a fraction of a millisecond, so the daemon may read
    its directory's event only after it is gone: such a cgroup is named from
    what the kernel recorded of its making (bpf/cgroup.bpf.c)."""
    churn_cgroups(net, cgroups, tmp_path, count=300, top_n=5)


def test_a_rule_naming_a_service_sets_the_cc_of_that_services_sockets_only(net, cgroups, tmp_path):
    """cc_policy: a rule matching a service (by its unit's name) gives CUBIC
    to the connections its listener accepts, and to those of a cgroup of it
    made after the daemon started (a restarted unit); another service's,
    on the same peer class and any port, get the next rule's BBR."""
    if os.geteuid() != 0:
        pytest.skip("needs root to load BPF programs")
    config = ("cc_policy:\n  rules:\n"
              "    - name: video-cubic\n      match: { services: [video.service] }\n      cc: cubic\n"
              "    - name: rest-bbr\n      match: { peer_class: client }\n      cc: bbr\n")
    other = cgroups.make("system.slice/api.service")
    d = start_daemon(tmp_path, config)
    try:
        video = cgroups.make("system.slice/video.service")  # after the start, as a unit started later
        time.sleep(0.5)  # the daemon has read the new cgroup's event
        start_server(net, tmp_path, video, net.srv_v4, 8410)
        start_server(net, tmp_path, cgroups.make("system.slice/video.service/workers"), net.srv_v4, 8411)
        start_server(net, tmp_path, other, net.srv_v4, 8412)
        for port in (8410, 8411, 8412):
            run_client(net, None, net.srv_v4, port, 2)
        server = {}
        for r in d.wait_records(net, 12):
            if r["dir"] == "passive":
                server.setdefault(r["lport"], []).append((r["service"], r["cc"], r["cc_rule"]))
        assert server == {8410: [("video.service", "cubic", "video-cubic")] * 2,
                          8411: [("video.service", "cubic", "video-cubic")] * 2,
                          8412: [("api.service", "bbr", "rest-bbr")] * 2}, server
    finally:
        assert d.stop() == 0, d.stderr_text()
