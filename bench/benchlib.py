"""Shared pieces of the system benchmarks (churn.py, bulk.py, scale.py, bpf_cost.py).

Everything here creates its own network namespaces (198.18.0.0/15 only), cgroup
and temporary files, and removes them again, even when a run fails.
"""
import argparse
import contextlib
import json
import os
import random
import re
import shutil
import statistics
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))
from testlib import WaitTimeout, metric_value, proc_mem_kib, remove_netns, stop_process, wait_for  # noqa: E402,F401  (shared with the tests; proc_mem_kib for the benchmarks)
BUILD = Path(os.environ.get("TCPSCOPE_BUILD", ROOT / "build"))
RESULTS = Path(os.environ.get("TCPSCOPE_BENCH_RESULTS", ROOT / "bench" / "results"))
TICK = os.sysconf("SC_CLK_TCK")
PAGE = os.sysconf("SC_PAGE_SIZE")


def log(*a):
    print("bench:", *a, file=sys.stderr, flush=True)


def sh(*cmd, check=True, **kw):
    return subprocess.run(cmd, check=check, capture_output=True, text=True, **kw)


def loadavg():
    return [float(x) for x in Path("/proc/loadavg").read_text().split()[:3]]


def machine_info():
    cc = Path("/proc/sys/net/ipv4/tcp_congestion_control").read_text().strip()
    # Run-time statistics add two clock reads to every BPF program run: a
    # leftover "1" (an interrupted bpf_cost.py) taxes every BPF variant.
    stats = Path("/proc/sys/kernel/bpf_stats_enabled")
    bpf_stats = stats.read_text().strip() if stats.exists() else None
    if bpf_stats == "1":
        print("bench: warning: kernel.bpf_stats_enabled=1 (left on?): BPF variants pay for it",
              file=sys.stderr)
    return {"kernel": os.uname().release, "cpus": os.cpu_count(), "default_cc": cc,
            "bpf_stats_enabled": bpf_stats, "loadavg_at_start": loadavg(),
            "time": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}


def tcpscope_binary():
    p = BUILD / "tcpscope"
    if not p.exists():
        raise SystemExit(f"bench: {p} missing: build first (cmake --build {BUILD}) or set TCPSCOPE_BUILD")
    return p


def loadgen_binary():
    """bench/loadgen.cc, compiled into the build dir when missing or older than its source."""
    src = ROOT / "bench" / "loadgen.cc"
    out = BUILD / "bench-loadgen"
    if not out.exists() or out.stat().st_mtime < src.stat().st_mtime:
        cxx = os.environ.get("CXX", "c++")
        r = sh(cxx, "-O2", "-std=c++17", "-pthread", "-o", str(out), str(src), check=False)
        if r.returncode != 0:
            raise SystemExit(f"bench: compiling {src} failed:\n{r.stderr}")
    return out


# ---------------------------------------------------------------- processes


def proc_cpu_seconds(pid):
    """utime + stime of the process and of its waited-for children, seconds."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    # fields[0] is state (field 3); utime/stime/cutime/cstime are fields 14-17.
    return sum(int(fields[i]) for i in (11, 12, 13, 14)) / TICK


# A peer that attaches to a tracepoint by name (libbpf-tools, bcc) reads the
# tracepoint's ID from tracefs; a fresh machine has neither tracefs nor debugfs
# mounted. The peer runs in a mount namespace of its own where both are
# mounted: nothing outside it changes, and the mounts go when the peer exits,
# however it exits. The exec chain keeps the peer's PID that of the process
# started, so its BPF programs are found under that PID.
_TRACEFS_SETUP = (
    "mountpoint -q /sys/kernel/tracing || mount -t tracefs tracefs /sys/kernel/tracing || exit 97; "
    "mountpoint -q /sys/kernel/debug || mount -t debugfs debugfs /sys/kernel/debug || exit 97; "
    'exec "$@"')


def with_tracefs(argv):
    """argv, run where tracefs and debugfs are mounted (exit code 97 if they cannot be)."""
    return ["unshare", "--mount", "--propagation", "private", "--", "sh", "-c", _TRACEFS_SETUP, argv[0], *argv]


def wait_cpu_idle(pid, limit_s=60):
    """Until the process used < 5% of a core over 0.5 s (it has caught up)."""
    if pid is None:
        return
    deadline = time.monotonic() + limit_s
    last = proc_cpu_seconds(pid)
    while time.monotonic() < deadline:
        time.sleep(0.5)
        now = proc_cpu_seconds(pid)
        if now - last < 0.025:
            return
        last = now


# ---------------------------------------------------------------- network


class Cgroup:
    """A cgroup v2 directory of the benchmark's own (where the policy programs attach)."""

    def __init__(self):
        self.root = None
        for line in open("/proc/self/mountinfo"):
            left, _, right = line.partition(" - ")
            if right.split()[0] == "cgroup2" and left.split()[3] == "/":
                self.root = Path(left.split()[4])
                break
        if self.root is None:
            raise SystemExit("bench: no cgroup v2 hierarchy mounted")
        self.path = self.root / f"tcpscope-bench-{os.getpid()}"
        self.path.mkdir(exist_ok=True)

    def close(self):
        for _ in range(50):
            for pid in (self.path / "cgroup.procs").read_text().split():
                try:
                    (self.root / "cgroup.procs").write_text(pid)
                except OSError:
                    pass
            try:
                self.path.rmdir()
                return
            except OSError:
                time.sleep(0.1)


class MemoryCgroup:
    """A memory cgroup of its own (v2, or v1's memory controller) whose kernel
    memory counter isolates what one process's BPF maps hold from the rest
    of the machine's slab churn. None when neither is available."""

    @staticmethod
    def create():
        cands = []
        for line in open("/proc/self/mountinfo"):
            left, _, right = line.partition(" - ")
            fstype, opts = right.split()[0], right.split()[-1]
            mnt = Path(left.split()[4])
            if fstype == "cgroup2":
                try:
                    if "memory" in (mnt / "cgroup.controllers").read_text().split():
                        cands.append((mnt, 2))
                except OSError:
                    pass
            elif fstype == "cgroup" and "memory" in opts.split(","):
                cands.append((mnt, 1))
        for mnt, version in cands:
            path = mnt / f"tcpscope-bench-mem-{os.getpid()}"
            try:
                path.mkdir(exist_ok=True)
            except OSError:
                continue
            m = MemoryCgroup()
            m.path, m.version, m.root = path, version, mnt
            if m.kernel_bytes() is not None:
                return m
            m.close()
        return None

    def kernel_bytes(self):
        try:
            if self.version == 1:
                return int((self.path / "memory.kmem.usage_in_bytes").read_text())
            for line in (self.path / "memory.stat").read_text().splitlines():
                if line.startswith("kernel "):
                    return int(line.split()[1])
        except (OSError, ValueError):
            return None
        return None

    def close(self):
        remove_cgroup(self.path, self.root)


def remove_cgroup(path, root):
    """Moves what is left in the cgroup at `path` to the hierarchy's `root`
    and removes it; tried for up to 5 s (an exiting process stays listed
    for a moment)."""
    for _ in range(50):
        try:
            for pid in (path / "cgroup.procs").read_text().split():
                (root / "cgroup.procs").write_text(pid)
            path.rmdir()
            return
        except OSError:
            time.sleep(0.1)


class NetPair:
    """Namespaces `cli` and `srv` joined by a veth pair, 198.18.N.1 <-> 198.18.N.2.
    Processes started through it run in `cgroup` when one is given."""

    def __init__(self, cgroup=None, sysctls=True):
        n = random.randrange(1, 250)
        tag = f"{os.getpid() % 100000}"
        self.cli, self.srv = f"tsb-c{tag}", f"tsb-s{tag}"
        self.veth_cli, self.veth_srv = f"tsbc{tag}", f"tsbs{tag}"
        self.cli_v4, self.srv_v4 = f"198.18.{n}.1", f"198.18.{n}.2"
        self.cgroup = cgroup
        self.procs = []
        self.created_ns = time.time_ns()
        try:
            self._build(sysctls)
        except Exception:
            self.close()
            raise

    def _build(self, sysctls):
        for ns in (self.cli, self.srv):
            sh("ip", "netns", "del", ns, check=False)  # a leftover of a killed run
            sh("ip", "netns", "add", ns)
        sh("ip", "link", "add", self.veth_cli, "netns", self.cli, "type", "veth",
           "peer", "name", self.veth_srv, "netns", self.srv)
        for ns, dev, v4 in ((self.cli, self.veth_cli, self.cli_v4), (self.srv, self.veth_srv, self.srv_v4)):
            self.run(ns, "ip", "link", "set", "lo", "up")
            self.run(ns, "ip", "addr", "add", f"{v4}/24", "dev", dev)
            self.run(ns, "ip", "link", "set", dev, "up")
            if sysctls:
                # Room for many connections: these are per network namespace.
                self.run(ns, "sysctl", "-q", "-w", "net.core.somaxconn=65535",
                         "net.ipv4.tcp_max_syn_backlog=65535", "net.ipv4.ip_local_port_range=1024 65535")
        self.netns_ids = {"cli": os.stat(f"/run/netns/{self.cli}").st_ino,
                          "srv": os.stat(f"/run/netns/{self.srv}").st_ino}

    def wrap(self, ns, cmd, host_sys=False):
        # `ip netns exec` mounts a fresh /sys; nsenter keeps the host's (and so
        # the cgroup2 mount) in view, for a command that moves between cgroups.
        enter = ["nsenter", f"--net=/run/netns/{ns}"] if host_sys else ["ip", "netns", "exec", ns]
        argv = [*enter, *map(str, cmd)]
        if self.cgroup:
            argv = ["sh", "-c", 'echo $$ > "$0/cgroup.procs" && exec "$@"', str(self.cgroup.path), *argv]
        return argv

    def run(self, ns, *cmd, check=True, timeout=None):
        return sh(*self.wrap(ns, cmd), check=check, timeout=timeout)

    def spawn(self, ns, *cmd, host_sys=False, **kw):
        kw.setdefault("stdout", subprocess.DEVNULL)
        kw.setdefault("stderr", subprocess.PIPE)
        p = subprocess.Popen(self.wrap(ns, cmd, host_sys), text=True, **kw)
        self.procs.append(p)
        return p

    def close(self):
        for p in self.procs:
            if p.poll() is None:
                p.kill()
            try:
                p.wait(10)
            except subprocess.TimeoutExpired:
                pass
        remove_netns(self.cli, self.srv)


class ChurnServer:
    """bench-loadgen serve in the server namespace. cgroups: that many
    cgroups made under net's cgroup (`svc-N.service`, as systemd names
    units), a listener in each on ports port, port+1, ..., so that the
    connections belong to that many services; spread: how the client picks
    among them (even, or zipf: the i-th with weight 1/i). one_cgroup: the
    same listeners and ports, all in one cgroup (one service): the load's
    shape without the services."""

    def __init__(self, net, tmp, port=8080, threads=2, req=100, resp=1000, cgroups=0, spread="even",
                 one_cgroup=False):
        ready = Path(tmp) / f"serve-{port}.ready"
        ready.unlink(missing_ok=True)
        argv = [loadgen_binary(), "serve", "--bind", net.srv_v4, "--port", port,
                "--threads", threads, "--req", req, "--resp", resp, "--ready", ready]
        self.cgroup_dirs = []
        if cgroups:
            home = net.cgroup.path
            self.cgroup_dirs = [home / f"svc-{i}.service" for i in range(1 if one_cgroup else cgroups)]
            for d in self.cgroup_dirs:
                d.mkdir(exist_ok=True)
            listener_dirs = self.cgroup_dirs * cgroups if one_cgroup else self.cgroup_dirs
            argv += ["--cgroups", ",".join(map(str, listener_dirs)), "--home-cgroup", home]
        self.p = net.spawn(net.srv, *argv, host_sys=bool(cgroups))
        wait_for(lambda: ready.exists() or self.p.poll() is not None, 30, "churn server start")
        if self.p.poll() is not None:
            raise RuntimeError(f"churn server exited: {self.p.stderr.read()}")
        self.port, self.req, self.resp = port, req, resp
        self.port_count, self.spread = max(1, cgroups), spread

    def remove_cgroups(self):
        """After the server is gone: its cgroups, empty now."""
        for d in self.cgroup_dirs:
            try:
                d.rmdir()
            except OSError:
                pass

    def run_client(self, net, seconds, threads):
        r = net.run(net.cli, loadgen_binary(), "churn", "--addr", net.srv_v4, "--port", self.port,
                    "--threads", threads, "--seconds", seconds, "--req", self.req, "--resp", self.resp,
                    "--port-count", self.port_count, "--spread", self.spread, timeout=seconds + 60)
        return json.loads(r.stdout)


def start_nginx(net, d, listen, server_body, http_extra="", workers=2):
    """Debian's nginx in the server namespace, its config, pid and logs in
    directory `d`, one server block listening on `listen`; returns the process
    once it serves."""
    d = Path(d)
    d.mkdir(parents=True, exist_ok=True)
    (d / "nginx.conf").write_text(f"""
worker_processes {workers};
daemon off;
pid {d}/nginx.pid;
error_log {d}/error.log;
worker_rlimit_nofile 16384;
events {{ worker_connections 8192; }}
http {{
  access_log off;
{http_extra}
  client_body_temp_path {d}/body;
  proxy_temp_path {d}/proxy;
  fastcgi_temp_path {d}/fastcgi;
  uwsgi_temp_path {d}/uwsgi;
  scgi_temp_path {d}/scgi;
  server {{
    listen {listen} backlog=65535 reuseport;
{server_body}
  }}
}}
""")
    p = net.spawn(net.srv, "nginx", "-c", d / "nginx.conf", "-p", d)
    wait_for(lambda: (d / "nginx.pid").exists() or p.poll() is not None, 10, "nginx start")
    if p.poll() is not None:
        raise RuntimeError(f"nginx exited: {p.stderr.read()} {(d / 'error.log').read_text()}")
    time.sleep(0.3)
    return p


class NginxServer:
    """nginx answering `return 200` with a 1000-byte body, no access log, no
    keep-alive (it closes first, as loadgen's server does); the client is wrk
    with "Connection: close", one connection per request."""

    def __init__(self, net, tmp, port=8081, workers=2, resp=1000):
        body = "x" * resp
        self.p = start_nginx(net, Path(tmp) / "nginx", f"{net.srv_v4}:{port}",
                             f'    location / {{ return 200 "{body}"; }}', "  keepalive_timeout 0;", workers)
        self.port = port

    def run_client(self, net, seconds, threads):
        # 16 connections per client thread keep both CPUs busy: with 2 per
        # thread the run was latency-bound (3-4 % idle) and its rate followed
        # how the host scheduled idle vCPUs more than what ran on them.
        r = run_wrk(net, f"http://{net.srv_v4}:{self.port}/", seconds, min(threads, 2), threads * 16,
                    "-H", "Connection: close")
        return {"connections": r["requests"], "failed": r["failed"], "first_errno": 0, "seconds": r["seconds"],
                "threads": threads, "rate": r["rate"]}


def run_wrk(net, url, seconds, threads, connections, *extra):
    """wrk from the client namespace: {requests, failed, seconds, rate}."""
    r = net.run(net.cli, "wrk", "-t", threads, "-c", connections, "-d", f"{seconds:g}s", *extra, url,
                timeout=seconds + 60)
    m = re.search(r"(\d+) requests in ([\d.]+)(us|ms|s|m|h)\b", r.stdout)
    if not m:
        raise RuntimeError(f"wrk output not understood: {r.stdout} {r.stderr}")
    n = int(m.group(1))
    secs = float(m.group(2)) * {"us": 1e-6, "ms": 1e-3, "s": 1, "m": 60, "h": 3600}[m.group(3)]
    errs = re.search(r"Socket errors: connect (\d+), read (\d+), write (\d+), timeout (\d+)", r.stdout)
    non2xx = re.search(r"Non-2xx or 3xx responses: (\d+)", r.stdout)
    failed = (sum(int(x) for x in errs.groups()) if errs else 0) + (int(non2xx.group(1)) if non2xx else 0)
    return {"requests": n, "failed": failed, "seconds": secs, "rate": n / secs}


def churn(net, server, seconds, threads):
    """One churn run from the client namespace: {connections, failed, seconds, rate}."""
    return server.run_client(net, seconds, threads)


# ---------------------------------------------------------------- tcpscope


BENCH_ASN = 64497  # the benchmark's own /24: its flows are told apart by this label


def write_pfx2as(path, n_prefixes, seed=1, own=None):
    """A CAIDA-format prefix-to-AS file with n_prefixes distinct IPv4 prefixes
    shaped like a BGP table (mostly /24, some /16-/23, few /8-/15) over 60k
    ASNs, plus 198.18.0.0/15 (AS 64496) and, when `own` names a NetPair, its
    /24 as AS 64497, so that tcpscope_flows_total{asn="64497"} counts the
    benchmark's flows and nobody else's."""
    rng = random.Random(seed)
    seen = set()
    lines = ["198.18.0.0\t15\t64496\n"]
    if own is not None:
        lines.append(own.cli_v4.rsplit(".", 1)[0] + f".0\t24\t{BENCH_ASN}\n")
    seen.add((0xC6120000, 15))
    while len(lines) < n_prefixes:
        r = rng.random()
        length = 24 if r < 0.6 else rng.randint(16, 23) if r < 0.9 else rng.randint(8, 15)
        addr = rng.getrandbits(32) & (0xFFFFFFFF << (32 - length)) & 0xFFFFFFFF
        if (addr >> 24) in (0, 10, 127, 198, 224, 240, 255) or (addr, length) in seen:
            continue
        seen.add((addr, length))
        a = f"{addr >> 24}.{(addr >> 16) & 255}.{(addr >> 8) & 255}.{addr & 255}"
        lines.append(f"{a}\t{length}\t{rng.randint(1000, 61000)}\n")
    Path(path).write_text("".join(lines))
    return path


def policy_rules_yaml(n_rules=50, match_port=None):
    """n_rules cc_policy rules; the bench traffic (198.18.0.0/15) only matches
    the last one, so every flow is checked against all of them. That rule sets
    the machine's default CC, so the traffic behaves as in the baseline and
    only the policy's cost differs."""
    default_cc = Path("/proc/sys/net/ipv4/tcp_congestion_control").read_text().strip()
    other_cc = "cubic" if default_cc != "cubic" else "reno"
    rules = []
    for i in range(n_rules - 1):
        cc = other_cc if i % 2 else default_cc
        if i < 30:
            m = f"{{ prefixes: [10.{i}.0.0/16, \"fd00:{i:x}::/32\"] }}"
        elif i < 40:
            m = f"{{ peer_class: pop-to-pop, asns: [{64600 + i}] }}"
        elif i < 45:
            m = f"{{ lports: [{20000 + i}] }}"
        else:
            m = f"{{ peer_class: intra-pop, lports: [{21000 + i}, {22000 + i}] }}"
        rules.append(f"    - name: rule-{i}\n      match: {m}\n      cc: {cc}\n")
    rules.append(f"    - name: bench-traffic\n      match: {{ prefixes: [198.18.0.0/15] }}\n      cc: {default_cc}\n")
    return "".join(rules)


def write_config(path, *, port, flow_log=None, prefix_file=None, cgroup=None, rules=50,
                 snapshot_interval_s=10, peer_classes=True, transfer_sampling_rate=None, ignore_netns=()):
    """transfer_sampling_rate: None leaves the default. ignore_netns: the
    namespaces tcpscope leaves alone (a load generator's: the view of an
    edge server whose clients are remote)."""
    text = [f"listen: 127.0.0.1:{port}\n"]
    if ignore_netns:
        text.append(f"ignore_netns: [{', '.join(ignore_netns)}]\n")
    if flow_log:
        text.append(f"flow_log: {flow_log}\n")
    if transfer_sampling_rate:
        text.append(f"transfer_sampling_rate: {transfer_sampling_rate}\n")
    text.append("asn:\n  top_n: 50\n")
    if prefix_file:
        text.append(f"  prefix_file: {prefix_file}\n")
    if peer_classes:
        text.append("peer_classes:\n"
                    "  - name: intra-pop\n    prefixes: [10.20.0.0/16]\n"
                    "  - name: pop-to-pop\n    prefixes: [10.0.0.0/8, \"fd00::/8\"]\n"
                    "  - name: origin\n    asns: [64500]\n"
                    "default_peer_class: client\n")
    text.append("cc_policy:\n  app_override: respect\n  sysctl_guard: observe\n")
    text.append("  rules:\n" + policy_rules_yaml(rules) if rules else "  rules: []\n")
    if cgroup:
        text.append(f"cgroup: {cgroup}\n")
    text.append(f"snapshot_interval_s: {snapshot_interval_s}\n")
    Path(path).write_text("".join(text))
    return path


def add_churn_args(ap, seconds):
    """The options of a churn run with the churn benchmark's tcpscope config."""
    ap.add_argument("--seconds", type=float, default=seconds)
    ap.add_argument("--threads", type=int, default=4)
    ap.add_argument("--prefixes", type=int, default=1000000)
    ap.add_argument("--rules", type=int, default=50)
    ap.add_argument("--out")


def parse_root_churn_args(script, doc, seconds):
    """A churn benchmark's options (add_churn_args), parsed, with `doc` (the
    script's docstring) as its help; the benchmark needs root."""
    ap = argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_churn_args(ap, seconds=seconds)
    args = ap.parse_args()
    if os.geteuid() != 0:
        raise SystemExit(f"{script}: needs root")
    return args


@contextlib.contextmanager
def churn_with_tcpscope(name, args):
    """Load generator, server and tcpscope as in the churn benchmark (the
    `rules`-rule policy on a cgroup holding both, a `prefixes`-line ASN file,
    no flow log), torn down on exit: yields (tmp, net, server, daemon)."""
    tmp = tmpdir(name)
    cg = Cgroup()
    net = d = None
    try:
        loadgen_binary()
        pfx = write_pfx2as(tmp / "pfx2as.tsv", args.prefixes)
        net = NetPair(cgroup=cg)
        server = ChurnServer(net, tmp)
        port = free_port()
        cfg = write_config(tmp / "tcpscope.yaml", port=port, prefix_file=pfx, cgroup=cg.path, rules=args.rules)
        d = Tcpscope(tmp, cfg, port)
        yield tmp, net, server, d
    finally:
        if d:
            d.stop()
        if net:
            net.close()
        cg.close()


def free_port():
    import socket
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Tcpscope:
    """`tcpscope run --config FILE`; start-up (ASN load) is outside any measured window."""

    def __init__(self, tmp, config, port, memcg=None, env=None, binary=None):
        """memcg: a MemoryCgroup to start the daemon in (its BPF maps are
        charged to the cgroup of the process that creates them). env: the
        daemon's environment (default: this process's). binary: another
        build's tcpscope (default: this build's)."""
        tmp = Path(tmp)
        self.url = f"http://127.0.0.1:{port}"
        self.stderr_path = tmp / f"tcpscope-{port}.stderr"
        self.stderr = open(self.stderr_path, "w")
        t0 = time.monotonic()
        argv = [str(binary or tcpscope_binary()), "run", "--config", str(config)]
        if memcg:
            argv = ["sh", "-c", 'echo $$ > "$0/cgroup.procs" && exec "$@"', str(memcg.path), *argv]
        self.p = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=self.stderr, env=env)
        self.pid = self.p.pid
        try:
            wait_for(lambda: "running:" in self.stderr_path.read_text() or self.p.poll() is not None,
                     300, "tcpscope start")
        except WaitTimeout:
            stop_process(self.p)
            raise
        if self.p.poll() is not None:
            raise RuntimeError(f"tcpscope did not start: {self.stderr_path.read_text()}")
        self.start_seconds = time.monotonic() - t0

    def metrics(self):
        # Each scrape is a connection on this host: the daemon records both
        # of its ends (a benchmark counting records subtracts them).
        self.scrapes = getattr(self, "scrapes", 0) + 1
        with urllib.request.urlopen(self.url + "/metrics", timeout=30) as r:
            return r.read().decode()

    def metric(self, name, labels=None):
        """Sum of the samples of `name` whose labels include `labels` ({name: value})."""
        return metric_value(self.metrics(), name, labels)

    def stop(self):
        rc = stop_process(self.p, timeout=60)
        self.stderr.close()
        return rc


def count_lines(path):
    """Lines (records, flow and transfer) in an NDJSON file; 0 if it is missing."""
    n = 0
    try:
        with open(path, "rb") as f:
            while chunk := f.read(1 << 24):
                n += chunk.count(b"\n")
    except FileNotFoundError:
        pass
    return n


def count_flow_log(path, netns_ids, since_ns=0, detail=None):
    """Flow records (not transfer lines) of the benchmark's namespaces in an
    NDJSON flow log. With a dict as `detail`, also counts them per namespace,
    outcome and partial flag (to tell which end of a connection a missing
    record belongs to)."""
    n = 0
    ids = {str(i) for i in netns_ids}
    if not Path(path).exists():
        return 0
    with open(path) as f:
        for line in f:
            # Cheap pre-filter; the JSON parse only when needed.
            if line.startswith('{"kind":"transfer"'):
                continue
            m = re.search(r'"netns":(\d+)', line)
            if not m or m.group(1) not in ids:
                continue
            if since_ns or detail is not None:
                r = json.loads(line)
                if r["start_ns"] < since_ns:
                    continue
                if detail is not None:
                    for k in (f"netns_{r['netns']}", f"outcome_{r['outcome']}", f"partial_{r['partial']}"):
                        detail[k] = detail.get(k, 0) + 1
            n += 1
    return n


# ---------------------------------------------------------------- bpf


def _fdinfo_ids(pid, key):
    """Ids named by `key` (prog_id / map_id) in the fdinfo of a process's
    file descriptors: its programs, the programs behind its links, its maps.
    (This bpftool does not attribute programs to processes itself.)"""
    ids = set()
    fdinfo = Path(f"/proc/{pid}/fdinfo")
    for f in fdinfo.iterdir():
        try:
            for line in f.read_text().splitlines():
                if line.startswith(key + ":"):
                    ids.add(int(line.split()[1]))
        except (OSError, ValueError):
            pass
    return ids


def bpf_programs_of(pid):
    """bpftool's view of the BPF programs a process holds: {id: prog json}."""
    ids = _fdinfo_ids(pid, "prog_id")
    r = sh("bpftool", "-j", "prog", "show", check=False)
    if r.returncode != 0:
        return {}
    return {p["id"]: p for p in json.loads(r.stdout or "[]") if p["id"] in ids}


def bpf_maps_of(pid):
    r = sh("bpftool", "-j", "map", "show", check=False)
    if r.returncode != 0:
        return []
    ids = _fdinfo_ids(pid, "map_id")
    return [m for m in json.loads(r.stdout or "[]") if m["id"] in ids]


class BpfStats:
    """kernel.bpf_stats_enabled=1 for the lifetime of the object (restored after)."""

    def __enter__(self):
        self.old = Path("/proc/sys/kernel/bpf_stats_enabled").read_text().strip()
        Path("/proc/sys/kernel/bpf_stats_enabled").write_text("1")
        return self

    def __exit__(self, *exc):
        Path("/proc/sys/kernel/bpf_stats_enabled").write_text(self.old)


# ---------------------------------------------------------------- output


# A ratio to the baseline is only as good as the baseline is steady. A run
# whose baseline runs spread by more than this ((max - min) / mean) moved by
# more than the effects it is meant to show (a few percent): it is reported
# as invalid, with its spread, and its ratios are not printed.
MAX_BASELINE_SPREAD = 0.10


def baseline_noise(rates, limit=MAX_BASELINE_SPREAD):
    """Mean, stdev and spread of the baseline runs' rates, and whether the
    run is valid; `invalid` says why not (None when valid)."""
    mean = statistics.mean(rates)
    spread = (max(rates) - min(rates)) / mean
    noise = {"baseline_runs": len(rates), "mean": round(mean, 1),
             "stdev_pct": round(100 * statistics.stdev(rates) / mean, 2) if len(rates) > 1 else None,
             "min_ratio": round(min(rates) / mean, 4), "max_ratio": round(max(rates) / mean, 4),
             "spread_pct": round(100 * spread, 2), "max_spread_pct": round(100 * limit, 2), "invalid": None}
    if len(rates) < 2:
        noise["invalid"] = "one baseline run: its noise is unknown"
    elif spread > limit:
        noise["invalid"] = (f"the baseline runs spread {100 * spread:.1f}% (min {min(rates) / mean:.3f}, "
                            f"max {max(rates) / mean:.3f} of their mean), more than the {100 * limit:.0f}% "
                            f"a ratio can stand (a busy machine, or a load whose rate is not steady)")
    return noise


def ratio_text(noise, ratio, digits=3):
    """A ratio as printed: none at all when the run is invalid."""
    return "invalid" if noise["invalid"] else f"{ratio:.{digits}f}"


def interleaved_baseline(runs, i):
    """The reference rate of variant run `i` in a sequence where baseline
    runs alternate with variant runs: the mean of the baselines either side."""
    before = next((runs[j]["rate"] for j in range(i - 1, -1, -1) if runs[j]["variant"] == "baseline"), None)
    after = next((runs[j]["rate"] for j in range(i + 1, len(runs)) if runs[j]["variant"] == "baseline"), None)
    return statistics.mean([x for x in (before, after) if x is not None])


# Student's t, two-sided 95 %, by degrees of freedom (1..10); beyond, ~2.
T95 = (12.71, 4.30, 3.18, 2.78, 2.57, 2.45, 2.36, 2.31, 2.26, 2.23)


def ci95(xs, digits=3):
    """95 % confidence interval of the mean of repeated ratios: what the
    repetitions can resolve on this machine (None with fewer than 2)."""
    if len(xs) < 2:
        return None
    half = (T95[len(xs) - 2] if len(xs) - 1 <= len(T95) else 2.0) * statistics.stdev(xs) / len(xs) ** 0.5
    m = statistics.mean(xs)
    return [round(m - half, digits), round(m + half, digits)]


def fmt_table(headers, rows):
    cols = [[str(h)] + [str(r[i]) for r in rows] for i, h in enumerate(headers)]
    widths = [max(len(c) for c in col) for col in cols]
    lines = ["  ".join(str(h).ljust(w) for h, w in zip(headers, widths))]
    lines.append("  ".join("-" * w for w in widths))
    for r in rows:
        lines.append("  ".join(str(v).rjust(w) if isinstance(v, (int, float)) else str(v).ljust(w)
                               for v, w in zip(r, widths)))
    return "\n".join(lines)


def write_result(name, data, out=None):
    out = Path(out) if out else RESULTS / f"{name}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    data.setdefault("machine", dict(START_INFO))
    data["machine"]["loadavg_at_end"] = loadavg()
    out.write_text(json.dumps(data, indent=2) + "\n")
    log(f"wrote {out}")
    return out


def tmpdir(name):
    d = Path(os.environ.get("TMPDIR", "/tmp")) / f"tcpscope-{name}-{os.getpid()}"
    shutil.rmtree(d, ignore_errors=True)
    d.mkdir(parents=True)
    return d


# Taken when a benchmark script starts (it imports this module first), so a
# result states the load average before the run, not after it.
START_INFO = machine_info()
