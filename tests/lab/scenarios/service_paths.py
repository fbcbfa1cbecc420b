#!/usr/bin/env python3
"""Two services in containers-like sandboxes, three ways to talk: which path
costs what, as tcpscope sees it per service.

Each service has its own cgroup v2 and network namespace, as a container
has. The client service (system.slice/api.service, namespace tsl<TAG>-cli)
fetches a fixed-size object from the server service
(system.slice/web.service, nginx in tsl<TAG>-srv) over three paths, round
robin, one TCP connection per request:

    cli ── delay line 1 ms ── bridge tsl<TAG>br ── veth ── srv      path "bridge"
    cli ── delay line 2.5 ms ── host: routes ──── veth ── srv       path "host"
    cli ── delay line 4 ms ── host: nginx proxy ─ veth ── srv       path "proxy"
                              (system.slice/proxy.service)

"host" is a namespace of its own (tsl<TAG>-host) standing in for the
machine's own network stack: the bridge, the routing between the client's
and the server's links (net.ipv4.ip_forward=1 there) and the proxy all live
in it, so nothing of the real host's forwarding or routing changes while
other work runs on it. Each path has its own /24s in 198.19.0.0/16 and its
own peer class (`bridge`, `host`, `proxy`), so a record's peer class is the
path it took, and the delay line on the client's link gives each path its
own round trip (2, 5 and 8 ms), which the numbers must show.

The real daemon (`tcpscope run`) records everything; its flow log, cut to
the lab's namespaces, goes through `tcpscope compare --flows ... --json`:

    compare --by service    --a peer_class=bridge --b peer_class=proxy  --metric fct --unit flow
    compare --by peer_class --a service=api.service --b service=web.service --metric fct|rtt
    compare --by peer_class --a service=proxy.service,dir=passive --b service=proxy.service,dir=active

and the table printed is each path's median latency per service. Ground
truth beside it: the client's own clock per request (just before connect()
to the kernel's receive timestamp of the response's last byte, with
xfer_peer.py's read_response) and both nginx access logs.

    sudo TCPSCOPE_BUILD=build tests/lab/scenarios/service_paths.py [--requests 24] [--json FILE]

The client (what the scenario runs in the client namespace):

    service_paths.py client --target bridge=ADDR --target host=ADDR ... --port P --requests N
"""
import argparse
import json
import os
import signal
import socket
import statistics
import subprocess
import sys
import time
from pathlib import Path as FsPath

HERE = FsPath(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

import labfixtures  # noqa: E402  (the Daemon helper, cgroup2_root; SIGTERM unwinds)
import traffic_mix  # noqa: E402
import xfer_peer  # noqa: E402
from lab import PREFIX, Endpoint, Lab, Path, sh  # noqa: E402

TCPSCOPE = labfixtures.TCPSCOPE
PORT = 8080
OBJECT_BYTES = 20_000
# One-way delay of the client's link on each path (both directions).
PATH_DELAY_MS = {"bridge": 1.0, "host": 2.5, "proxy": 4.0}
API, WEB, PROXY = "api.service", "web.service", "proxy.service"
PAUSE_S = 0.02   # between requests: each connection has the paths to itself


class ServicePathsLab(Lab):
    """The three paths between the client and the server namespace. The
    lab's state file, teardown and orphan reaping are Lab's: the delay lines
    are its paths' (one per path, on the client's link), and deleting the
    three namespaces takes every veth, TAP, the bridge and the processes in
    them along."""

    def __init__(self, tag=None, workdir=None):
        super().__init__([Path.symmetric(name, delay_ms=d, peer_class=name)
                          for name, d in PATH_DELAY_MS.items()],
                         tag=tag, ipv6=False, workdir=workdir)
        self.client_ns = f"{PREFIX}{self.tag}-cli"
        self.host_ns = f"{PREFIX}{self.tag}-host"
        self.bridge = f"{PREFIX}{self.tag}br"
        net = [f"198.19.{self.base + k}" for k in range(5)]
        self.nets = {"bridge": [net[0]], "host": net[1:3], "proxy": net[3:5]}
        # Where the client connects on each path, and who accepts there.
        self.target = {"bridge": f"{net[0]}.3", "host": f"{net[2]}.2", "proxy": f"{net[3]}.1"}
        self.client_addr = {"bridge": f"{net[0]}.2", "host": f"{net[1]}.2", "proxy": f"{net[3]}.2"}
        self.server_listen = [f"{net[0]}.3", f"{net[2]}.2", f"{net[4]}.2"]
        self.proxy_bind, self.proxy_upstream = f"{net[4]}.1", f"{net[4]}.2"

    def _make_path(self, i, p):
        """Lab.up made the server namespace; the first path makes the rest."""
        if i == 0:
            for ns in (self.client_ns, self.host_ns):
                self._make_ns(ns)
            self.ns(self.host_ns, "sysctl", "-qw", "net.ipv4.ip_forward=1")
            self.ns(self.host_ns, "ip", "link", "add", self.bridge, "type", "bridge")
            self.ns(self.host_ns, "ip", "link", "set", self.bridge, "up")
        ep = Endpoint(path=p, index=i, client_ns=self.client_ns,
                      server_if=f"{PREFIX}{self.tag}{i}s", client_if=f"{PREFIX}{self.tag}{i}c",
                      server_v4=self.target[p.name], client_v4=[self.client_addr[p.name]],
                      server_v6="", client_v6=[], class_v4="", class_v6="")
        self.endpoints[p.name] = ep   # before the delay line starts: the state file lists its pid
        self._start_delayline(ep)
        sh("ip", "link", "set", ep.server_if, "netns", self.host_ns)
        sh("ip", "link", "set", ep.client_if, "netns", self.client_ns)
        # The server's side of the path: a veth from the host namespace.
        srv_if, host_if = f"{PREFIX}{self.tag}{i}b", f"{PREFIX}{self.tag}{i}h"
        sh("ip", "link", "add", srv_if, "netns", self.server_ns, "type", "veth",
           "peer", "name", host_if, "netns", self.host_ns)
        nets = self.nets[p.name]
        if p.name == "bridge":
            for dev in (ep.server_if, host_if):
                self.ns(self.host_ns, "ip", "link", "set", dev, "master", self.bridge)
            addrs = [(self.client_ns, ep.client_if, f"{nets[0]}.2"),
                     (self.server_ns, srv_if, f"{nets[0]}.3")]
        else:
            addrs = [(self.host_ns, ep.server_if, f"{nets[0]}.1"),
                     (self.client_ns, ep.client_if, f"{nets[0]}.2"),
                     (self.host_ns, host_if, f"{nets[1]}.1"),
                     (self.server_ns, srv_if, f"{nets[1]}.2")]
        for ns, dev, addr in addrs:
            self.ns(ns, "ip", "addr", "add", f"{addr}/24", "dev", dev)
        for ns, dev in ((self.host_ns, ep.server_if), (self.host_ns, host_if),
                        (self.client_ns, ep.client_if), (self.server_ns, srv_if)):
            self.ns(ns, "ip", "link", "set", dev, "up")
        if p.name == "host":
            # Routed by the host namespace; the proxy path has no such
            # routes: its two /24s meet only in the proxy.
            self.ns(self.client_ns, "ip", "route", "add", f"{nets[1]}.0/24", "via", f"{nets[0]}.1")
            self.ns(self.server_ns, "ip", "route", "add", f"{nets[0]}.0/24", "via", f"{nets[1]}.1")

    def tcpscope_config(self, path: FsPath, extra: str = "") -> FsPath:
        """Each path's /24s are its peer class; everything else is `unlabelled`."""
        text = "peer_classes:\n" + "".join(
            f"  - name: {name}\n    prefixes: [{', '.join(json.dumps(n + '.0/24') for n in nets)}]\n"
            for name, nets in self.nets.items())
        path.write_text(text + "default_peer_class: unlabelled\n" + extra)
        return path

    def warm_up(self):
        """Resolves every next hop before the first request (a UDP datagram
        to each: no flow for tcpscope), so no connection's first SYN waits
        for ARP across a delay line. Bounded: 5 s."""
        hops = {self.client_ns: list(self.target.values()),
                self.host_ns: [self.proxy_upstream]}
        send = ("import socket, sys\n"
                "s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)\n"
                "for a in sys.argv[1:]: s.sendto(b'arp', (a, 9))\n")
        for ns, addrs in hops.items():
            self.ns(ns, sys.executable, "-c", send, *addrs)
        deadline = time.monotonic() + 5
        while True:
            states = [e.get("state", []) for ns in hops
                      for e in json.loads(self.ns(ns, "ip", "-j", "neigh", "show").stdout or "[]")]
            if len(states) >= 4 and all("REACHABLE" in s or "STALE" in s or "DELAY" in s for s in states):
                return
            if time.monotonic() > deadline:
                raise RuntimeError(f"next hops not resolved within 5 s: {states}")
            time.sleep(0.02)


class ServiceCgroups:
    """system.slice/<unit> cgroups under a directory of this lab's own in the
    cgroup v2 hierarchy; the daemon names a socket's service from them
    (docs/services.md: the innermost *.service). close() removes them once
    their processes are gone."""

    def __init__(self, tag, create=True):
        """create=False: the lab's cgroups as they are, to close() what a
        killed scenario left."""
        root = labfixtures.integration.cgroup2_root()
        if root is None:
            raise RuntimeError("no cgroup v2 hierarchy mounted")
        self.root = root
        self.base = root / f"{PREFIX}{tag}-services"
        if create:
            self.base.mkdir()

    def make(self, unit):
        path = self.base / "system.slice" / unit
        path.mkdir(parents=True)
        return path

    def argv(self, cgroup, ns, *cmd):
        """cmd run in namespace `ns` by a shell that first moves itself into
        `cgroup`. `ip netns exec` remounts /sys, so the move comes before it."""
        return ["sh", "-c", 'echo $$ > "$0/cgroup.procs" && exec ip netns exec "$@"',
                str(cgroup), ns, *map(str, cmd)]

    def close(self):
        """Bounded: 50 rounds of moving stragglers to the root and removing
        directories deepest first."""
        for _ in range(50):
            if not self.base.exists():
                return
            dirs = sorted((p for p in self.base.rglob("*") if p.is_dir()), key=lambda p: -len(p.parts))
            for d in dirs + [self.base]:
                procs = d / "cgroup.procs"
                for pid in procs.read_text().split() if procs.exists() else []:
                    try:
                        (self.root / "cgroup.procs").write_text(pid)
                    except OSError:
                        pass   # exited meanwhile
                try:
                    d.rmdir()
                except OSError:
                    pass       # still busy: the next round
            time.sleep(0.1)
        if self.base.exists():
            raise RuntimeError(f"could not remove {self.base}")


class ServiceNginx:
    """Debian's nginx, started inside a cgroup and a namespace; no keep-alive,
    so each request is one connection. proxy_to: an upstream to proxy_pass
    to, from the address proxy_bind (then nothing is served from disk)."""

    def __init__(self, lab, cgroups, cgroup, ns, workdir: FsPath, listens, proxy_to=None, proxy_bind=None):
        self.lab, self.ns, self.dir, self.listens = lab, ns, workdir, listens
        self.dir.mkdir(parents=True, exist_ok=True)
        for d in ("www", "tmp", "logs"):
            (self.dir / d).mkdir(exist_ok=True)
        (self.dir / "www" / traffic_mix.object_name(OBJECT_BYTES)).write_bytes(os.urandom(OBJECT_BYTES))
        conf = traffic_mix.nginx_conf(self.dir, [f"{a}:{PORT}" for a in listens],
                                      traffic_mix.ACCESS_LOG_FIELDS, keepalive=False, workers=1)
        if proxy_to:
            # The same instance as the server's, with proxy_pass where the
            # server has its files: HTTP/1.0 upstream, one connection per request.
            conf = conf.replace(f"root {self.dir}/www;",
                                f"location / {{ proxy_pass http://{proxy_to}:{PORT}; "
                                f"proxy_bind {proxy_bind}; }}")
        (self.dir / "nginx.conf").write_text(conf)
        self.proc = subprocess.Popen(
            cgroups.argv(cgroup, ns, "nginx", "-p", self.dir, "-c", self.dir / "nginx.conf",
                         "-g", "daemon off;"),
            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        # Ready when every address listens: asked of the kernel (ss), not by
        # connecting, so no connection but the scenario's is ever made.
        deadline = time.monotonic() + 10
        while True:
            r = lab.ns(ns, "ss", "-Hltn", f"sport = :{PORT}", check=False)
            if all(f"{a}:{PORT}" in r.stdout for a in listens):
                return
            if self.proc.poll() is not None or time.monotonic() > deadline:
                err = (self.dir / "logs" / "error.log")
                raise RuntimeError(f"nginx in {ns} did not listen on {listens} (exit {self.proc.poll()}): "
                                   f"{err.read_text() if err.exists() else ''}")
            time.sleep(0.05)

    def stop(self):
        labfixtures.stop_process(self.proc, signal.SIGQUIT, timeout=15)

    def access_log(self):
        f = self.dir / "logs" / "access.jsonl"
        return [json.loads(l) for l in f.read_text().splitlines() if l] if f.exists() else []


def compare(flow_log: FsPath, by, a, b, metric):
    """`tcpscope compare --flows` on the lab's records, as JSON."""
    argv = [str(TCPSCOPE), "compare", "--flows", str(flow_log), "--by", by, "--a", a, "--b", b,
            "--metric", metric, "--json"]
    if metric == "fct":
        argv += ["--unit", "flow"]
    r = subprocess.run(argv, capture_output=True, text=True, timeout=60)
    if r.returncode != 0:
        raise RuntimeError(f"{' '.join(argv)} exited {r.returncode}: {r.stderr.strip()}")
    return {"argv": argv[1:], "result": json.loads(r.stdout)}


def run(args):
    workdir = FsPath(args.workdir or f"/tmp/{PREFIX}-service-paths-{os.getpid()}")
    workdir.mkdir(parents=True, exist_ok=True)
    lab = ServicePathsLab(tag=args.tag, workdir=workdir / "lab")
    report = {"tag": lab.tag, "requests_per_path": args.requests, "object_bytes": OBJECT_BYTES,
              "path_rtt_ms": {n: 2 * d for n, d in PATH_DELAY_MS.items()}}
    cgroups = None
    servers = []
    with lab:
        try:
            cgroups = ServiceCgroups(lab.tag)
            report["cgroups"] = str(cgroups.base)
            cg = {u: cgroups.make(u) for u in (API, WEB, PROXY)}
            report["netns"] = {"client": lab.netns_ids[lab.client_ns], "server": lab.netns_ids[lab.server_ns],
                               "host": lab.netns_ids[lab.host_ns]}
            report["addresses"] = {"target": lab.target, "client": lab.client_addr,
                                   "proxy_bind": lab.proxy_bind, "nets": lab.nets}
            home = workdir / "daemon"
            (home / "state").mkdir(parents=True, exist_ok=True)
            cfg = lab.tcpscope_config(home / "tcpscope.yaml")
            labfixtures.integration.WATCHED_NETNS.update(lab.netns_ids.values())
            daemon = labfixtures.Daemon(home, extra_args=("--config", str(cfg)),
                                        env={**os.environ, "STATE_DIRECTORY": str(home / "state")})
            lab.track(daemon.proc.pid)
            try:
                web = ServiceNginx(lab, cgroups, cg[WEB], lab.server_ns, workdir / "web", lab.server_listen)
                servers.append(web)
                proxy = ServiceNginx(lab, cgroups, cg[PROXY], lab.host_ns, workdir / "proxy",
                                     [lab.target["proxy"]], proxy_to=lab.proxy_upstream,
                                     proxy_bind=lab.proxy_bind)
                servers.append(proxy)
                lab.warm_up()
                t0 = time.monotonic()
                r = subprocess.run(
                    cgroups.argv(cg[API], lab.client_ns, sys.executable, __file__, "client",
                                 *[x for n, a in lab.target.items() for x in ("--target", f"{n}={a}")],
                                 "--port", PORT, "--requests", args.requests),
                    capture_output=True, text=True, timeout=120)
                if r.returncode != 0:
                    raise RuntimeError(f"the client exited {r.returncode}: {r.stderr.strip()}")
                report["client"] = json.loads(r.stdout)
                report["traffic_seconds"] = time.monotonic() - t0
                # Every connection makes one record per end: the client's 3N,
                # the server's 3N (N from the proxy), the proxy's 2N.
                want = 8 * args.requests
                ids = set(lab.netns_ids.values())

                def ours():
                    return [x for x in daemon.all_records() if x["netns"] in ids and x["start_ns"] >= lab.created_ns]
                labfixtures.wait_for(lambda: len(ours()) >= want, 20,
                                     what=lambda: f"{want} records (have {len(ours())}; {daemon.losses()})")
                time.sleep(0.5)   # one more drain: anything beyond the count shows up now
                records = ours()
                transfers = [x for x in daemon.all_transfers()
                             if x["netns"] in ids and x["start_ns"] >= lab.created_ns]
                report["lost"] = daemon.losses()
            finally:
                for s in servers:
                    s.stop()
                rc = daemon.stop()
                if rc != 0:
                    print(f"tcpscope exited {rc}: {daemon.stderr_text()[-2000:]}", file=sys.stderr)
            report["nginx"] = {"web": web.access_log(), "proxy": proxy.access_log()}
        finally:
            lab.down()   # the namespaces' processes first, so the cgroups empty
            if cgroups:
                cgroups.close()
    report["records"] = records
    flow_log = workdir / "lab-flows.ndjson"
    flow_log.write_text("".join(json.dumps(x) + "\n" for x in records + transfers))
    report["flow_log"] = str(flow_log)
    report["compare"] = {
        "by_service_fct": compare(flow_log, "service", "peer_class=bridge", "peer_class=proxy", "fct"),
        "by_service_host_fct": compare(flow_log, "service", "peer_class=bridge", "peer_class=host", "fct"),
        "by_path_fct": compare(flow_log, "peer_class", f"service={API}", f"service={WEB}", "fct"),
        "by_path_rtt": compare(flow_log, "peer_class", f"service={API}", f"service={WEB}", "rtt"),
        "proxy_legs_fct": compare(flow_log, "peer_class", f"service={PROXY},dir=passive",
                                  f"service={PROXY},dir=active", "fct"),
        "proxy_legs_rtt": compare(flow_log, "peer_class", f"service={PROXY},dir=passive",
                                  f"service={PROXY},dir=active", "rtt"),
    }
    report["table"] = latency_table(report)
    print_table(report["table"])
    if args.json:
        FsPath(args.json).write_text(json.dumps(report, indent=1))
    return 0


def groups(cmp):
    """{group value: group object} of a compare --json result (fct: its
    size classes' groups merged; the scenario has one size class)."""
    out = {}
    for g in cmp["result"]["groups"]:
        out.setdefault(g["group"], []).append(g)
    return out


def latency_table(report):
    """Per (path, service, side): flows, median FCT and RTT from compare, and
    the client's own median clock for the client's rows."""
    cmp = report["compare"]
    rows = []
    clock = {}
    for q in report["client"]["requests"]:
        clock.setdefault(q["path"], []).append((q["last"][2] - q["connect"][1]) / 1e3)
    for path in PATH_DELAY_MS:
        for key_fct, key_rtt, arm, service, side in (
                ("by_path_fct", "by_path_rtt", "a", API, "client"),
                ("proxy_legs_fct", "proxy_legs_rtt", "a", PROXY, "proxy, from the client"),
                ("proxy_legs_fct", "proxy_legs_rtt", "b", PROXY, "proxy, to the server"),
                ("by_path_fct", "by_path_rtt", "b", WEB, "server")):
            f = groups(cmp[key_fct]).get(path, [])
            t = groups(cmp[key_rtt]).get(path, [])
            n = sum(g[f"n_{arm}"] for g in f)
            if not n:
                continue
            rows.append({"path": path, "service": service, "side": side, "flows": n,
                         "fct_p50_us": [g[arm]["p50"] for g in f],
                         "rtt_p50_us": [g[arm]["p50"] for g in t],
                         "client_clock_p50_us": statistics.median(clock[path]) if side == "client" else None})
    return rows


def print_table(rows):
    print(f"\n{'path':7s} {'service':14s} {'side':24s} {'flows':>5s} {'FCT p50':>9s} {'RTT p50':>9s} "
          f"{'client clock p50':>17s}")
    for r in rows:
        fct = "/".join(f"{v / 1e3:.2f}" for v in r["fct_p50_us"] if v is not None)
        rtt = "/".join(f"{v / 1e3:.2f}" for v in r["rtt_p50_us"] if v is not None)
        clk = "" if r["client_clock_p50_us"] is None else f"{r['client_clock_p50_us'] / 1e3:.2f} ms"
        print(f"{r['path']:7s} {r['service']:14s} {r['side']:24s} {r['flows']:5d} {fct:>6s} ms "
              f"{rtt:>6s} ms {clk:>17s}")


# -- the client: what runs in the client namespace, in api.service ------------

def client(args):
    """args.requests rounds; each round one request per target, each on its
    own connection. Per request: the path, the 4-tuple, the instant just
    before connect() ([monotonic, realtime]) and read_response's stamps."""
    targets = [t.split("=", 1) for t in args.target]
    out = {"requests": []}
    deadline = time.monotonic() + args.timeout
    for _ in range(args.requests):
        for path, addr in targets:
            if time.monotonic() > deadline:
                raise TimeoutError(f"the requests ran past --timeout {args.timeout} s")
            sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            sock.settimeout(10)
            sock.setsockopt(socket.SOL_SOCKET, xfer_peer.SO_TIMESTAMPNS, 1)
            t_connect = xfer_peer.now()
            sock.connect((addr, args.port))
            laddr, lport = sock.getsockname()
            sock.sendall(f"GET /{traffic_mix.object_name(OBJECT_BYTES)} HTTP/1.1\r\nHost: {addr}\r\n"
                         f"Connection: close\r\n\r\n".encode())
            hb, bb, status, first, last = xfer_peer.read_response(sock)
            sock.close()
            if status != 200 or bb != OBJECT_BYTES:
                raise RuntimeError(f"{path} {addr}: status {status}, {bb} body bytes")
            out["requests"].append({"path": path, "laddr": laddr, "lport": lport, "raddr": addr,
                                    "rport": args.port, "connect": t_connect, "first": first,
                                    "last": last, "header_bytes": hb, "body_bytes": bb})
            time.sleep(PAUSE_S)
    print(json.dumps(out))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter,
                                 epilog=__doc__.split("\n\n", 1)[1])
    sub = ap.add_subparsers(dest="cmd")
    c = sub.add_parser("client", help="the client service's requests (run inside its namespace)")
    c.add_argument("--target", action="append", required=True, metavar="PATH=ADDR")
    c.add_argument("--port", type=int, required=True)
    c.add_argument("--requests", type=int, required=True)
    c.add_argument("--timeout", type=float, default=60)
    ap.add_argument("--requests", type=int, default=24, help="requests per path (>= 20: compare's minimum)")
    ap.add_argument("--workdir", help="configs, logs, the lab's flow log")
    ap.add_argument("--json", help="write the results here")
    ap.add_argument("--tag", help="the lab's tag (1-5 letters or digits), for `lab.py down --tag`")
    args = ap.parse_args()
    if args.cmd == "client":
        client(args)
        return 0
    if os.geteuid() != 0:
        ap.error("run as root: the lab needs network namespaces and cgroups, the daemon loads BPF")
    if not TCPSCOPE.exists():
        ap.error(f"build first: {TCPSCOPE} is needed (set TCPSCOPE_BUILD to the build directory)")
    return run(args)


if __name__ == "__main__":
    sys.exit(main())
