"""Fixtures for tests that load the real BPF programs and run real traffic.

Each test gets its own pair of network namespaces joined by a veth, with
addresses from 198.18.0.0/15 and fd00::/8 that exist only inside them. The
daemon sees every TCP socket on the host; tests pick out their own flows by
the namespace inode the record carries, so other traffic cannot confuse them.
Everything created is removed even when a test fails.
"""
import functools
import json
import os
import random
import re
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests"))
from testlib import (EMULATED, RECORD_BYTES, metric_value, remove_netns, stop_process,  # noqa: E402,F401
                     wait_for)  # (shared with bench/ and tests/lab)
BUILD = Path(os.environ.get("TCPSCOPE_BUILD", ROOT / "build"))
TCPSCOPE = BUILD / "tcpscope"
TRAFFIC = Path(__file__).with_name("traffic.py")


def pytest_configure(config):
    config.addinivalue_line(
        "markers", "real_kernel: also run on each kernel CI boots in a VM (tests/real_kernels/run.py); "
        "needs no timing precision there")


def pytest_report_header(config):
    return f"kernel {os.uname().release}"


def pytest_report_teststatus(report, config):
    """A real-kernel test's result names the kernel it ran on."""
    if report.when == "call" and "real_kernel" in report.keywords and config.option.verbose > 0:
        word = "PASSED" if report.passed else "FAILED" if report.failed else "SKIPPED"
        return report.outcome, word[0] if word != "PASSED" else ".", f"{word} on kernel {os.uname().release}"
    return None


# Network namespaces (inode numbers) made by the tests' NetPairs: the only
# ones whose flow records the Daemon helper keeps.
WATCHED_NETNS = set()
NETNS_FIELD = re.compile(rb'"netns":(\d+)')


def sh(*cmd, check=True, **kw):
    return subprocess.run(cmd, check=check, capture_output=True, text=True, **kw)


@functools.lru_cache(maxsize=None)
def kernel_tracepoints():
    """The tracepoints of tcpscope's hooks that this kernel has, as `tcpscope version` lists them."""
    out = subprocess.run([str(TCPSCOPE), "version"], capture_output=True, text=True, check=True).stdout
    return set(re.search(r"^  tracepoints:(.*)$", out, re.M).group(1).split())


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def loadgen_binary():
    """bench/loadgen.cc, compiled into the build dir if missing (by benchlib,
    as the benchmarks do): no test depends on another having built it."""
    sys.path.insert(0, str(ROOT / "bench"))
    try:
        from benchlib import loadgen_binary as build
    finally:
        sys.path.pop(0)
    return build()


class Daemon:
    """A running `tcpscope run` with its flow log and metrics endpoint."""

    def __init__(self, tmp: Path, extra_args=(), env=None, flow_log_stdout=False, nice=0, transfer_sampling_rate=1,
                 binary=TCPSCOPE, port=None):
        """flow_log_stdout: run with `--flow-log -` and read the records from
        the daemon's standard output (captured in a file). nice: run at this
        niceness (the systemd unit's Nice=-5: nice=-5). transfer_sampling_rate:
        the flag's value, every transfer by default (the tests check each);
        None leaves the config's. binary: another build of tcpscope (a
        sanitizer's). port: the one to listen on, for clients that connect
        before the daemon has started (a free one by default)."""
        self.flow_log = tmp / ("daemon.stdout" if flow_log_stdout else "flows.ndjson")
        self.port = port or free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.stderr_path = tmp / "daemon.stderr"
        self.stderr = open(self.stderr_path, "w")
        self.stdout = open(self.flow_log, "w") if flow_log_stdout else None
        self.proc = subprocess.Popen(
            [*(["nice", "-n", str(nice)] if nice else []),
             str(binary), "run", "--listen", f"127.0.0.1:{self.port}",
             "--flow-log", "-" if flow_log_stdout else str(self.flow_log),
             *([] if transfer_sampling_rate is None else ["--transfer-sampling-rate", str(transfer_sampling_rate)]),
             *extra_args],
            stdout=self.stdout or subprocess.DEVNULL, stderr=self.stderr, env=env)
        try:
            wait_for(lambda: "running:" in self.stderr_text() or self.proc.poll() is not None,
                     30, what="daemon start")
        except AssertionError:
            stop_process(self.proc, signal.SIGKILL)  # not left running; said below
        if self.proc.poll() is not None:
            self.stderr.close()
            if self.stdout:
                self.stdout.close()
            raise RuntimeError(f"tcpscope did not start (exit {self.proc.returncode}, -9: killed after 30 s): "
                               f"{self.stderr_text()}")
        self._offset = 0
        self._records = []
        self._transfers = []

    def stderr_text(self):
        return self.stderr_path.read_text() if self.stderr_path.exists() else ""

    def all_records(self):
        """Every flow record of a test's namespaces written so far (read incrementally).
        The daemon sees every flow on the host: records of other namespaces
        (the host's own traffic, other work on the machine) are skipped
        unparsed, so a busy host cannot blow up the test's memory. Transfer
        lines ("kind": "transfer") are kept apart: all_transfers()."""
        self._read_flow_log()
        return self._records

    def all_transfers(self):
        """Every transfer record of a test's namespaces written so far."""
        self._read_flow_log()
        return self._transfers

    def _read_flow_log(self):
        if self.flow_log.exists():
            with open(self.flow_log, "rb") as f:
                f.seek(self._offset)
                for line in f:
                    if not line.endswith(b"\n"):
                        break  # half-written: read it next time
                    self._offset += len(line)
                    m = NETNS_FIELD.search(line)
                    if m and int(m.group(1)) in WATCHED_NETNS:
                        r = json.loads(line)
                        (self._transfers if r.get("kind") == "transfer" else self._records).append(r)

    def records(self, net, side=None):
        """Records of the sockets in `net`'s namespaces (both, or side "cli"/"srv").
        Namespace inode numbers are recycled, so flows that began before the
        namespaces were made are not theirs."""
        ids = {net.netns_ids[side]} if side else set(net.netns_ids.values())
        return [r for r in self.all_records()
                if r["netns"] in ids and r["start_ns"] >= net.created_ns]

    def wait_records(self, net, count, side=None, timeout=20):
        def have():
            # Which flows came, and whether the daemon lost any on the way,
            # so a timeout says which are missing rather than how many.
            recs = self.records(net, side)
            seen = ", ".join(f'{r["dir"]} {r["laddr"]}:{r["lport"]}-{r["raddr"]}:{r["rport"]}' for r in recs)
            return f"{count} records (have {len(recs)}: {seen}; {self.losses()})"
        wait_for(lambda: len(self.records(net, side)) >= count, timeout, what=have)
        time.sleep(0.3)  # anything beyond the expected count would show up now
        return self.records(net, side)

    def losses(self):
        """What a timeout waiting for records should show: every counter of
        records or kernel events the daemon lost, and the tail of its stderr."""
        try:
            lost = [line for line in self.metrics().splitlines()
                    if line.startswith(("tcpscope_records_lost", "tcpscope_transfer_records_lost",
                                        "tcpscope_flow_log_dropped", "tcpscope_state_changes_missed",
                                        "tcpscope_bpf_recursion_misses"))]
        except OSError as e:
            lost = [f"no metrics: {e}"]
        return f"{lost}; stderr: {self.stderr_text()[-2000:]}"

    def metrics(self):
        with urllib.request.urlopen(self.url + "/metrics", timeout=10) as r:
            return r.read().decode()

    def metric_value(self, name, labels=None):
        return metric_value(self.metrics(), name, labels)

    def snapshot_namespaces(self):
        """The last open-flow snapshot's namespaces by result, from one scrape."""
        text = self.metrics()
        return {r: metric_value(text, "tcpscope_snapshot_namespaces", {"result": r})
                for r in ("read", "empty", "skipped", "failed")}

    def stop(self, sig=signal.SIGTERM, timeout=20):
        stop_process(self.proc, sig, timeout)
        self.stderr.close()
        if self.stdout:
            self.stdout.close()
        return self.proc.returncode


# One kept-alive connection, request after request: 100 bytes up, a response
# of argv[4]'s sizes in turn down. The server's optional argv[7], TAIL: each
# response in two writes, its last TAIL bytes 2 ms after the rest (on a veth,
# after everything before them was acknowledged). The client's optional
# argv[6]: seconds of idle before each request but the first.
REQUESTS_PEER = """
import socket, sys, time
role, addr, port, sizes, count = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4], int(sys.argv[5])
sizes = [int(s) for s in sizes.split(",")]
tail = int(sys.argv[7]) if role == "server" and len(sys.argv) > 7 else 0
pause = float(sys.argv[6]) if role == "client" and len(sys.argv) > 6 else 0
def read(s, n):
    while n > 0:
        b = s.recv(min(n, 1 << 20))
        if not b: raise SystemExit("peer closed early")
        n -= len(b)
if role == "server":
    ls = socket.socket(); ls.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    ls.bind((addr, port)); ls.listen(1); open(sys.argv[6], "w").close()
    ls.settimeout(20); c, _ = ls.accept(); c.settimeout(20)
    if tail:
        c.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    for i in range(count):
        read(c, 100)
        c.sendall(b"r" * (sizes[i % len(sizes)] - tail))
        if tail:
            time.sleep(0.002)
            c.sendall(b"t" * tail)
    read(c, 0); c.close()
else:
    c = socket.create_connection((addr, port), timeout=20)
    for i in range(count):
        if i:
            time.sleep(pause)
        c.sendall(b"q" * 100)
        read(c, sizes[i % len(sizes)])
    c.close()
"""


# A TCP echo server: every connection gets back what it sends.
ECHO_SERVER = ("import socket,sys,threading\n"
               "fam=socket.AF_INET6 if ':' in sys.argv[1] else socket.AF_INET\n"
               "s=socket.socket(fam); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)\n"
               "s.bind((sys.argv[1], int(sys.argv[2]))); s.listen(); open(sys.argv[3],'w').close()\n"
               "def echo(c):\n"
               "  while True:\n"
               "    b=c.recv(65536)\n"
               "    if not b: break\n"
               "    c.sendall(b)\n"
               "  c.close()\n"
               "while True:\n"
               "  c,_=s.accept(); threading.Thread(target=echo, args=(c,), daemon=True).start()\n")


def echo_server(net, tmp, addr, port):
    ready = tmp / f"echo-{port}.ready"
    net.spawn(net.srv, sys.executable, "-c", ECHO_SERVER, addr, str(port), str(ready))
    wait_for(ready.exists, 10, what="echo server")


class NetPair:
    """Two namespaces, `cli` and `srv`, joined by a veth pair, dual-stack."""

    def __init__(self):
        n = random.randrange(1, 250)
        tag = f"{os.getpid() % 10000}-{random.randrange(1 << 20):05x}"
        self.cli, self.srv = f"tsc-c{tag}", f"tsc-s{tag}"
        self.veth_cli, self.veth_srv = f"tsvc{tag[-5:]}", f"tsvs{tag[-5:]}"
        self.cli_v4, self.srv_v4 = f"198.18.{n}.1", f"198.18.{n}.2"
        self.cli_v6, self.srv_v6 = f"fd00:7c5:{n:x}::1", f"fd00:7c5:{n:x}::2"
        self.procs = []
        self.created_ns = time.time_ns()
        try:
            self._build()
        except Exception:
            self.close()
            raise

    def _build(self):
        sh("ip", "netns", "add", self.cli)
        sh("ip", "netns", "add", self.srv)
        sh("ip", "link", "add", self.veth_cli, "netns", self.cli, "type", "veth",
           "peer", "name", self.veth_srv, "netns", self.srv)
        for ns, dev, v4, v6 in ((self.cli, self.veth_cli, self.cli_v4, self.cli_v6),
                                (self.srv, self.veth_srv, self.srv_v4, self.srv_v6)):
            self.ns(ns, "ip", "link", "set", "lo", "up")
            self.ns(ns, "ip", "addr", "add", f"{v4}/24", "dev", dev)
            self.ns(ns, "ip", "-6", "addr", "add", f"{v6}/64", "dev", dev, "nodad")
            self.ns(ns, "ip", "link", "set", dev, "up")
        self.netns_ids = {"cli": os.stat(f"/run/netns/{self.cli}").st_ino,
                          "srv": os.stat(f"/run/netns/{self.srv}").st_ino}
        WATCHED_NETNS.update(self.netns_ids.values())

    # When set, every process the pair starts runs in this cgroup (where a
    # test attaches the policy programs).
    cgroup = None

    def _wrap(self, name, cmd):
        argv = ["ip", "netns", "exec", name, *cmd]
        if self.cgroup:
            argv = ["sh", "-c", 'echo $$ > "$0/cgroup.procs" && exec "$@"', str(self.cgroup), *argv]
        return argv

    def ns(self, name, *cmd, check=True):
        return sh(*self._wrap(name, cmd), check=check)

    def spawn(self, name, *cmd):
        p = subprocess.Popen(self._wrap(name, cmd),
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        self.procs.append(p)
        return p

    def serve(self, tmp, addr, count, port=8080, reset=False, idle_before_close_ms=0, chunk=0, defer_accept_s=0):
        """idle_before_close_ms: the server closes first, that long after its
        last send (pair with client(peer_closes_first=True)). chunk: bytes
        per send() call (the server samples its cwnd before each).
        defer_accept_s: TCP_DEFER_ACCEPT on the listener."""
        out = tmp / f"server-{port}.jsonl"
        ready = tmp / f"server-{port}.ready"
        ready.unlink(missing_ok=True)
        args = [sys.executable, str(TRAFFIC), "serve", "--bind", addr, "--port", str(port),
                "--count", str(count), "--out", str(out), "--ready", str(ready)]
        if reset:
            args.append("--reset")
        if idle_before_close_ms:
            args += ["--idle-before-close", str(idle_before_close_ms)]
        if chunk:
            args += ["--chunk", str(chunk)]
        if defer_accept_s:
            args += ["--defer-accept", str(defer_accept_s)]
        p = self.spawn(self.srv, *args)
        wait_for(lambda: ready.exists() or p.poll() is not None, 10, what="server start")
        assert p.poll() is None, p.stderr.read()
        return p, out

    def client(self, tmp, addr, count=1, req=100, resp=1000, parallel=1, port=8080, timeout=120,
               source=None, realtime=False, idle_before_close_ms=0, peer_closes_first=False, source_port=0):
        """realtime: for tests that compare clocks: run the client SCHED_FIFO,
        so its wall clock stops when the last byte arrives rather than when a
        busy machine next schedules it, and have it report that arrival's
        receive timestamp (arrival_clock_us: traffic.py --stamp-arrival).
        idle_before_close_ms: wait that long after the last byte before closing.
        peer_closes_first: read to the server's FIN before closing.
        source_port: the first connection's local port, the next ones' one
        more each (0: the kernel's choice)."""
        out = tmp / f"client-{port}-{random.randrange(1 << 30)}.jsonl"
        extra = ["--source", source] if source else []
        if idle_before_close_ms:
            extra += ["--idle-before-close", str(idle_before_close_ms)]
        if peer_closes_first:
            extra.append("--peer-closes-first")
        if source_port:
            extra += ["--source-port", str(source_port)]
        rt = []
        if realtime:
            rt = ["chrt", "-f", "20"]
            extra.append("--stamp-arrival")
        r = self.ns(self.cli, *rt, sys.executable, str(TRAFFIC), "client", "--addr", addr,
                    "--port", str(port), "--count", str(count), "--req", str(req),
                    "--resp", str(resp), "--parallel", str(parallel), "--out", str(out),
                    "--timeout", str(timeout), *extra)
        assert r.returncode == 0, r.stderr
        return [json.loads(l) for l in out.read_text().splitlines() if l]

    def close(self):
        for p in self.procs:
            if p.poll() is None:
                p.kill()
            p.wait()
        remove_netns(self.cli, self.srv)


def read_jsonl(path):
    return [json.loads(l) for l in Path(path).read_text().splitlines() if l]


@pytest.fixture(scope="session")
def daemon(tmp_path_factory):
    if os.geteuid() != 0:
        pytest.skip("needs root to load BPF programs")
    assert TCPSCOPE.exists(), f"build first: {TCPSCOPE} missing"
    d = Daemon(tmp_path_factory.mktemp("daemon"))
    yield d
    rc = d.stop()
    assert rc == 0, f"daemon exited {rc}: {d.stderr_text()}"


def cgroup2_root():
    for line in open("/proc/self/mountinfo"):
        left, _, right = line.partition(" - ")
        if right.split()[0] == "cgroup2" and left.split()[3] == "/":
            return Path(left.split()[4])
    return None


@pytest.fixture
def test_cgroup():
    """A cgroup v2 of the test's own; removed afterwards (processes moved out)."""
    root = cgroup2_root()
    if root is None:
        pytest.skip("no cgroup v2 hierarchy mounted")
    cg = root / f"tcpscope-test-{os.getpid()}-{random.randrange(1 << 20):05x}"
    cg.mkdir()
    yield cg
    for _ in range(50):
        pids = (cg / "cgroup.procs").read_text().split()
        for pid in pids:
            try:
                (root / "cgroup.procs").write_text(pid)
            except OSError:
                pass
        try:
            cg.rmdir()
            break
        except OSError:
            time.sleep(0.1)


@pytest.fixture
def net():
    if os.geteuid() != 0:
        pytest.skip("needs root for network namespaces")
    pair = NetPair()
    yield pair
    pair.close()


def sampling_hash(lport, rport):
    """record/transfer_sampling.h's sampling_hash: ClickHouse's intHash64 of
    the two ports, the smaller in the upper 16 bits."""
    m = (1 << 64) - 1
    x = (min(lport, rport) << 16 | max(lport, rport)) ^ 0x4CF2D2BAAE6DA887
    x ^= x >> 33
    x = (x * 0xff51afd7ed558ccd) & m
    x ^= x >> 33
    x = (x * 0xc4ceb9fe1a85ec53) & m
    x ^= x >> 33
    return x


def sampled(lport, rport, rate):
    """Whether the kernel follows the transfers of a flow of these two ports at
    `rate` (record/transfer_sampling.h's transfer_sampled)."""
    return sampling_hash(lport, rport) & (rate - 1) == 0
