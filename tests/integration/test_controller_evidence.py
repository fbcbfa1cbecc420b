"""Evidence no one can forge: a local, unprivileged user tries to steer the
closed loop with connections of their own, each of which learns its arm
(getsockopt TCP_CONGESTION) and makes BBR look slow (the far end reads a BBR
transfer slowly, so it takes long to finish):
  - a listener on a port anyone can bind, with an accomplice connecting in;
  - outgoing connections to an accomplice;
  - connections to the service itself, from this host: from its own address,
    and from another address of the host;
  - in a user and network namespace of the user's own (`unshare -rn`), a
    service on the "privileged" port 443 there and clients of it.
None of them counts: the controller takes evidence only from the service's
namespace (evidence_netns), its accepted sockets on the rule's ports, from
peers outside the host's local routing table (src/control/evidence_gate.h).
The same pattern from a remote client of the service does count, and flips
the decision: the attack is real, the gate is what stops it.

A service in a namespace of its own (a container's) is reached from the host
over a bridge, as over docker0: the bridge has an address of the host's
namespace, the daemon's, that the service's namespace does not know as
local. Fetches from it, and from every other address of the host, count
nothing either, while a remote client routed through the host counts each of
its requests."""
import json
import os
import random
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest
from conftest import ROOT, Daemon, remove_netns, sh, stop_process, wait_for

sys.path.insert(0, str(ROOT / "tests" / "lab"))
from traffic_mix import ACCESS_LOG_FIELDS, nginx_conf, object_name  # noqa: E402  (the lab's nginx)

# An arm-aware end: `serve ADDR PORT` accepts and, per connection,
# sends its CC's initial ("b" or "c") and 64 KiB; `fetch ADDR PORT N` opens N
# connections (8 at a time) and reads a "b" transfer 2 KiB per 5 ms through
# a 4 KiB receive buffer. `push` and `sink` are the same roles with the
# connection opened the other way: the pushing end connects and sends.
# `answer ADDR PORT` sends each connection 1000 bytes, one transfer;
# `get ADDR PORT N` reads them and prints how many answers were whole. An
# IPv6 ADDR listens with IPV6_V6ONLY.
ARM_AWARE = r'''
import socket, sys, threading, time
TCP_CONGESTION = 13
BODY = b"x" * 65536
ANSWER = b"a" * 1000
whole = []

def send_arm_and_body(c):
    cc = c.getsockopt(socket.IPPROTO_TCP, TCP_CONGESTION, 16).split(b"\0")[0]
    c.sendall(cc[:1] + BODY)
    c.close()

def read_as_told(c):
    first = c.recv(1)
    got = len(first)
    while True:
        b = c.recv(2048)
        if not b:
            break
        got += len(b)
        if first == b"b":
            time.sleep(0.005)
    c.close()

def answer(c):
    c.sendall(ANSWER)
    c.close()

def read_answer(c):
    got = b""
    while True:
        b = c.recv(4096)
        if not b:
            break
        got += b
    c.close()
    whole.append(got == ANSWER)

def small_buffer_socket(addr):
    s = socket.socket(socket.AF_INET6 if ":" in addr else socket.AF_INET, socket.SOCK_STREAM)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    return s

def listen(addr, port, handle):
    s = small_buffer_socket(addr)
    if ":" in addr:
        s.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.bind((addr, port))
    s.listen(128)
    while True:
        c, _ = s.accept()
        threading.Thread(target=handle, args=(c,), daemon=True).start()

def connect_n(addr, port, n, handle, source=None):
    def one():
        c = small_buffer_socket(addr)
        c.settimeout(30)
        if source:
            c.bind((source, 0))
        c.connect((addr, port))
        handle(c)
    for start in range(0, n, 8):
        ts = [threading.Thread(target=one) for _ in range(min(8, n - start))]
        for t in ts: t.start()
        for t in ts: t.join()

role, addr, port = sys.argv[1], sys.argv[2], int(sys.argv[3])
if role == "serve": listen(addr, port, send_arm_and_body)
elif role == "sink": listen(addr, port, read_as_told)
elif role == "fetch": connect_n(addr, port, int(sys.argv[4]), read_as_told, sys.argv[5] if len(sys.argv) > 5 else None)
elif role == "push": connect_n(addr, port, int(sys.argv[4]), send_arm_and_body)
elif role == "answer": listen(addr, port, answer)
elif role == "get":
    connect_n(addr, port, int(sys.argv[4]), read_answer)
    print(sum(whole))
'''

# The service on a privileged port: the rule names no port, so only those count.
SERVICE_PORT, HOSTILE_PORT, ACCOMPLICE_PORT = 443, 9090, 9091
NOBODY = ("setpriv", "--reuid=65534", "--regid=65534", "--clear-groups")


# A user's own namespace: the service and its clients on addresses its lo is given.
OWN_SERVICE, OWN_CLIENT = "198.19.250.1", "198.19.250.7"


def config(service_netns, min_transfers=20, lports="", evidence_user=None):
    user = f"\n        evidence_user: {evidence_user}" if evidence_user else ""
    return f"""
snapshot_interval_s: 0
cc_policy:
  rules:
    - name: auto
      match: {{ peer_class: client{lports} }}
      controller:
        arms: [bbr, cubic]
        cohort: peer_class
        control_percent: 10
        min_transfers: {min_transfers}
        interval_s: 1
        evidence_netns: [{service_netns}]{user}
"""


def status(d):
    with urllib.request.urlopen(d.url + "/api/v1/controller", timeout=10) as r:
        return json.loads(r.read())["rules"][0]


def client_cohort(d):
    return next((c for c in status(d)["cohorts"] if c["cohort"] == "client"), None)


def evidence_transfers(d):
    c = client_cohort(d)
    return 0 if c is None else sum(a["transfers"] for a in c["evidence"]["arms"].values())


def start(net, ns, role, addr, port, *prefix):
    """A listener; ready once the namespace lists its socket (a probe
    connection would be a record of its own)."""
    listeners = lambda: len(net.ns(ns, "ss", "-Hltn", f"sport = :{port}").stdout.splitlines())
    before = listeners()
    net.spawn(ns, *prefix, sys.executable, "-c", ARM_AWARE, role, addr, str(port))
    wait_for(lambda: listeners() > before, 10, what=f"{role} listening on {addr}:{port}")


def started_daemon(tmp_path, test_cgroup, config_text):
    state = tmp_path / "state"
    state.mkdir(mode=0o700)
    cfg = tmp_path / "tcpscope.yaml"
    cfg.write_text(config_text)
    home = tmp_path / "daemon"
    home.mkdir()
    return Daemon(home, extra_args=("--config", str(cfg), "--cgroup", str(test_cgroup)),
                  env=dict(os.environ, STATE_DIRECTORY=str(state)))


def gets(net, addr, port, n):
    """A remote client's `n` connections to addr:port; how many were answered whole."""
    return int(net.ns(net.cli, sys.executable, "-c", ARM_AWARE, "get", addr, str(port), str(n)).stdout)


def test_a_local_user_cannot_steer_the_loop_and_a_remote_client_can(net, tmp_path, test_cgroup):
    net.cgroup = test_cgroup
    state = tmp_path / "state"
    state.mkdir(mode=0o700)
    cfg = tmp_path / "tcpscope.yaml"
    cfg.write_text(config(net.srv))
    home = tmp_path / "daemon"
    home.mkdir()
    d = Daemon(home, extra_args=("--config", str(cfg), "--cgroup", str(test_cgroup)),
               env=dict(os.environ, STATE_DIRECTORY=str(state)))
    try:
        # The service: root, on the rule's port.
        start(net, net.srv, "serve", net.srv_v4, SERVICE_PORT)
        # The local user's listener, and an accomplice on the client side.
        start(net, net.srv, "serve", net.srv_v4, HOSTILE_PORT, *NOBODY)
        start(net, net.cli, "sink", net.cli_v4, ACCOMPLICE_PORT)
        # Another address of the service's host (a second NIC, a VIP).
        other_address = net.srv_v4.rsplit(".", 1)[0] + ".9"
        net.ns(net.srv, "ip", "addr", "add", f"{other_address}/32", "dev", "lo")
        # The user's own namespace, serving itself on its "privileged" 443.
        # Debian's python3: the user's own namespace cannot reach root's
        # files (a python under /root) that an outsider's caps could.
        own_ns = ("unshare", "-rn", "sh", "-c",
                  f"ip link set lo up && ip addr add {OWN_SERVICE}/32 dev lo && ip addr add {OWN_CLIENT}/32 dev lo && "
                  f"{{ /usr/bin/python3 -c \"$0\" serve {OWN_SERVICE} 443 & "
                  "for i in $(seq 100); do ss -Hltn 'sport = :443' | grep -q . && break; sleep 0.1; done; "
                  f"/usr/bin/python3 -c \"$0\" fetch {OWN_SERVICE} 443 60 {OWN_CLIENT}; kill $!; }}", ARM_AWARE)
        for _ in range(2):
            net.ns(net.cli, sys.executable, "-c", ARM_AWARE, "fetch", net.srv_v4, str(HOSTILE_PORT), "60")
            net.ns(net.srv, *NOBODY, sys.executable, "-c", ARM_AWARE, "push", net.cli_v4, str(ACCOMPLICE_PORT), "60")
            net.ns(net.srv, *NOBODY, sys.executable, "-c", ARM_AWARE, "fetch", net.srv_v4, str(SERVICE_PORT), "60")
            net.ns(net.srv, *NOBODY, sys.executable, "-c", ARM_AWARE, "fetch", net.srv_v4, str(SERVICE_PORT), "60",
                   other_address)
            r = net.ns(net.srv, *NOBODY, *own_ns, check=False)
            assert r.returncode == 0, r.stderr
        refused = lambda: status(d).get("records_refused", {})
        wait_for(lambda: all(refused().get(k, 0) for k in ("outgoing", "port", "local_peer", "netns")),
                 20, what=lambda: f"every hostile kind refused: {refused()}")
        time.sleep(3)  # three test intervals (interval_s 1) after 120 connections of each kind
        rule = status(d)
        assert rule["decisions"] == 0, rule
        assert evidence_transfers(d) == 0, client_cohort(d)
        r = refused()
        # Each hostile connection is refused at least for its data transfer:
        # from the host's own address and from its other one, both local.
        assert r["port"] >= 120 and r["outgoing"] >= 120 and r["local_peer"] >= 240 and r["netns"] >= 120, r
        assert d.metric_value("tcpscope_controller_records_refused_total",
                              {"rule": "auto", "reason": "local_peer"}) >= 240

        # The same pattern from a remote client of the service is evidence,
        # and BBR's slow transfers lose it the cohort.
        decided = lambda: (client_cohort(d) or {}).get("state") == "decided"
        for _ in range(6):
            net.ns(net.cli, sys.executable, "-c", ARM_AWARE, "fetch", net.srv_v4, str(SERVICE_PORT), "60")
            if decided():
                break
        wait_for(decided, 20, what=lambda: f"a decision on the remote clients' evidence: {client_cohort(d)}")
        assert client_cohort(d)["winner"] == "cubic", client_cohort(d)
    finally:
        assert d.stop() == 0, d.stderr_text()


class HostRoutedService:
    """Two namespaces joined to this host's own (the daemon's), the host
    routing between them: `svc`, a service's, a container's as Docker makes
    it (its veth's host end in a bridge, the bridge with the host's address:
    docker0); `cli`, a remote client's, as the internet behind a NIC (a veth
    whose host end has an address of the host). Forwarding is turned on for
    these two devices only. The namespaces take their veths with them; the
    bridge goes in close()."""

    def __init__(self, cgroup):
        n = random.randrange(2, 240, 2)
        for net in (n, n + 1):  # another run's, in the host's namespace
            assert not sh("ip", "-4", "route", "show", "match", f"198.19.{net}.1").stdout.count(f"198.19.{net}."), net
        tag = f"{os.getpid() % 10000}-{random.randrange(1 << 20):05x}"
        self.cgroup = cgroup
        self.svc, self.cli = f"tsh-s{tag}", f"tsh-c{tag}"
        self.bridge, self.host_to_cli = f"tshb{tag[-5:]}", f"tshc{tag[-5:]}"
        self.host_v4, self.svc_v4 = f"198.19.{n}.1", f"198.19.{n}.2"
        self.host_v6, self.svc_v6 = f"fd00:7c6:{n:x}::1", f"fd00:7c6:{n:x}::2"
        self.host_cli_side, self.cli_v4 = f"198.19.{n + 1}.1", f"198.19.{n + 1}.2"
        self.procs = []
        try:
            sh("ip", "netns", "add", self.svc)
            sh("ip", "netns", "add", self.cli)
            sh("ip", "link", "add", self.bridge, "type", "bridge")
            sh("ip", "link", "add", f"tshs{tag[-5:]}", "master", self.bridge, "up", "type", "veth",
               "peer", "name", "eth0", "netns", self.svc)
            sh("ip", "link", "add", self.host_to_cli, "type", "veth", "peer", "name", "eth0", "netns", self.cli)
            for host_dev, ns, host_v4, ns_v4 in ((self.bridge, self.svc, self.host_v4, self.svc_v4),
                                                 (self.host_to_cli, self.cli, self.host_cli_side, self.cli_v4)):
                sh("ip", "addr", "add", f"{host_v4}/24", "dev", host_dev)
                sh("sysctl", "-qw", f"net.ipv4.conf.{host_dev}.forwarding=1")
                sh("ip", "link", "set", host_dev, "up")
                self.ns(ns, "ip", "link", "set", "lo", "up")
                self.ns(ns, "ip", "addr", "add", f"{ns_v4}/24", "dev", "eth0")
                self.ns(ns, "ip", "link", "set", "eth0", "up")
                self.ns(ns, "ip", "route", "add", "default", "via", host_v4)
            sh("ip", "-6", "addr", "add", f"{self.host_v6}/64", "dev", self.bridge, "nodad")
            self.ns(self.svc, "ip", "-6", "addr", "add", f"{self.svc_v6}/64", "dev", "eth0", "nodad")
        except Exception:
            self.close()
            raise

    def ns(self, name, *cmd, check=True):
        return sh("ip", "netns", "exec", name, *cmd, check=check)

    def start_nginx(self, workdir: Path, port):
        """nginx in the service's namespace and the test's cgroup (where the
        policy programs give its sockets their arms); one request per
        connection."""
        (workdir / "www").mkdir(parents=True)
        (workdir / "logs").mkdir()
        (workdir / "tmp").mkdir()
        (workdir / "www" / object_name(10_000)).write_bytes(os.urandom(10_000))
        listens = [f"{self.svc_v4}:{port}", f"[{self.svc_v6}]:{port}"]
        (workdir / "nginx.conf").write_text(nginx_conf(workdir, listens, ACCESS_LOG_FIELDS, keepalive=False,
                                                        workers=1))
        self.procs.append(subprocess.Popen(
            ["sh", "-c", 'echo $$ > "$0/cgroup.procs" && exec "$@"', str(self.cgroup),
             "ip", "netns", "exec", self.svc, "nginx", "-p", str(workdir), "-c", str(workdir / "nginx.conf"),
             "-g", "daemon off;"], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True))
        # Ready once it listens (a probe request would be a record of its own).
        listening = lambda: self.ns(self.svc, "ss", "-Hltn", f"sport = :{port}").stdout.count("LISTEN") == 2
        wait_for(listening, 10, what=lambda: f"nginx listening: {(workdir / 'logs' / 'error.log').read_text()}")

    def close(self):
        for p in self.procs:
            stop_process(p, signal.SIGQUIT, timeout=10)
        remove_netns(self.svc, self.cli)
        sh("ip", "link", "del", self.bridge, check=False)


def fetch(n, url, runner=(), options=()):
    """`n` requests to `url`, one connection each (nginx closes after one),
    by curl with `options` run by `runner` (a namespace's, a user's). How
    many were answered 200."""
    r = sh(*runner, "curl", "-sS", *options, "-o", "/dev/null", "-w", "%{http_code}\\n", f"{url}?[1-{n}]",
           check=False)
    return r.stdout.split().count("200")


def test_a_container_takes_nothing_from_the_host_and_everything_from_a_remote_client(tmp_path, test_cgroup):
    if os.geteuid() != 0:
        pytest.skip("needs root for network namespaces")
    state = tmp_path / "state"
    state.mkdir(mode=0o700)
    net = HostRoutedService(test_cgroup)
    d = None
    try:
        cfg = tmp_path / "tcpscope.yaml"
        # min_transfers out of reach: the cohort keeps counting, nothing is decided.
        cfg.write_text(config(net.svc, min_transfers=100000))
        d = Daemon(tmp_path, extra_args=("--config", str(cfg), "--cgroup", str(test_cgroup)),
                   env=dict(os.environ, STATE_DIRECTORY=str(state)))
        port = 80  # privileged in the service's namespace: the rule names no port
        net.start_nginx(tmp_path / "nginx", port)
        obj = object_name(10_000)
        v4, v6 = f"http://{net.svc_v4}:{port}/{obj}", f"http://[{net.svc_v6}]:{port}/{obj}"
        refused = lambda: status(d).get("records_refused", {}).get("local_peer", 0)

        def host_fetches_count_nothing(n, url, *options):
            """A local user's `n` fetches: all answered, all refused as local."""
            before = refused()
            assert fetch(n, url, NOBODY, options) == n
            # Two records a connection: its flow and its response's transfer.
            wait_for(lambda: refused() - before >= 2 * n, 20,
                     what=lambda: f"{n} fetches of the host's refused: {refused() - before} records; "
                                  f"counted: {evidence_transfers(d)} transfers")
            assert evidence_transfers(d) == 0, client_cohort(d)

        # From the bridge's address (docker0's), over IPv4 and IPv6, and from
        # another address of the host (the client side's).
        host_fetches_count_nothing(40, v4)
        host_fetches_count_nothing(20, v6)
        host_fetches_count_nothing(20, v4, "--interface", net.host_cli_side)
        # An address the host gains while the daemon runs: its table is read
        # again on the route change (each 100 ms tick, given a second).
        gained = net.host_cli_side.rsplit(".", 1)[0] + ".9"
        sh("ip", "addr", "add", f"{gained}/32", "dev", net.host_to_cli)
        time.sleep(1)
        host_fetches_count_nothing(20, v4, "--interface", gained)
        # After a reload, the same.
        reloads = d.stderr_text().count("reloaded ")
        d.proc.send_signal(signal.SIGHUP)
        wait_for(lambda: d.stderr_text().count("reloaded ") > reloads, 20, what="the reload")
        host_fetches_count_nothing(20, v4)

        # A remote client, routed through the host: each of its requests counts.
        requests = 30
        assert fetch(requests, v4, ("ip", "netns", "exec", net.cli)) == requests
        wait_for(lambda: evidence_transfers(d) >= requests, 20,
                 what=lambda: f"the remote client's {requests} requests: {client_cohort(d)}")
        time.sleep(2)  # twenty ticks for anything more to arrive
        assert evidence_transfers(d) == requests, client_cohort(d)
    finally:
        net.close()
        if d:
            assert d.stop() == 0, d.stderr_text()


# A port anyone may bind, and the users of the service and of the takeover.
SHARED_PORT = 8080
WWW_DATA = ("setpriv", "--reuid=33", "--regid=33", "--clear-groups")


def refused_as(d, reason):
    return status(d).get("records_refused", {}).get(reason, 0)


def test_another_users_listener_on_the_services_port_counts_nothing(net, tmp_path, test_cgroup):
    """A port is a number, not who listens on it: the service (www-data)
    listens on its IPv4 address and port 8080, another user (nobody) on
    [::] and the same port with IPV6_V6ONLY, and learns each socket's arm.
    A remote client's requests to each are served; only the service's
    count (evidence_user), the other's are refused as `service`."""
    net.cgroup = test_cgroup
    d = started_daemon(tmp_path, test_cgroup,
                       config(net.srv, min_transfers=100000, lports=f", lports: [{SHARED_PORT}]",
                              evidence_user="www-data"))
    try:
        start(net, net.srv, "answer", net.srv_v4, SHARED_PORT, *WWW_DATA)
        start(net, net.srv, "answer", "::", SHARED_PORT, *NOBODY)
        requests = 30
        assert gets(net, net.srv_v6, SHARED_PORT, requests) == requests
        assert gets(net, net.srv_v4, SHARED_PORT, requests) == requests
        # Two records a connection are judged: its flow and its answer's transfer.
        wait_for(lambda: refused_as(d, "service") >= 2 * requests and evidence_transfers(d) >= requests, 20,
                 what=lambda: f"the takeover refused, the service counted: {status(d)}")
        time.sleep(2)  # twenty ticks for anything more to arrive
        assert evidence_transfers(d) == requests, client_cohort(d)
        assert refused_as(d, "service") == 2 * requests, status(d)
        assert d.metric_value("tcpscope_controller_records_refused_total",
                              {"rule": "auto", "reason": "service"}) == 2 * requests
    finally:
        assert d.stop() == 0, d.stderr_text()


def test_each_namespace_is_judged_by_its_own_unprivileged_port_start(net, tmp_path, test_cgroup):
    """The service's namespace makes ports below 9000 privileged, the
    daemon's keeps its own bound (below 8080): a rule that names no port
    counts the service's port 8080 there, as only a privileged process
    could listen on it, and any user's socket on it is the service's."""
    net.cgroup = test_cgroup
    own = int(Path("/proc/sys/net/ipv4/ip_unprivileged_port_start").read_text())
    assert own <= SHARED_PORT, own
    net.ns(net.srv, "sysctl", "-qw", "net.ipv4.ip_unprivileged_port_start=9000")
    d = started_daemon(tmp_path, test_cgroup, config(net.srv, min_transfers=100000))
    try:
        # nobody cannot listen on it there: the namespace's bound holds.
        r = net.ns(net.srv, *NOBODY, sys.executable, "-c", "import socket; socket.socket().bind(('', 8080))",
                   check=False)
        assert r.returncode != 0 and "Permission denied" in r.stderr, r
        start(net, net.srv, "answer", net.srv_v4, SHARED_PORT)
        requests = 20
        assert gets(net, net.srv_v4, SHARED_PORT, requests) == requests
        wait_for(lambda: evidence_transfers(d) >= requests, 20,
                 what=lambda: f"the service's requests counted: {status(d)}")
        time.sleep(2)
        assert evidence_transfers(d) == requests, client_cohort(d)
        assert refused_as(d, "port") == 0 and refused_as(d, "service") == 0, status(d)
    finally:
        assert d.stop() == 0, d.stderr_text()
