#!/usr/bin/env python3
"""CDN-like traffic through the lab: a real HTTP server (nginx) in the server
namespace, real clients (curl) in every client namespace, Poisson flow
arrivals and a mix of object sizes.

Library (used by scenarios/):
    nginx = Nginx(lab, workdir, objects=DEFAULT_OBJECTS); nginx.start() ... nginx.stop()
    results = run_mix(lab, nginx, {"c1": 2.0, "p1": 3.0}, duration_s=30, seed=1)

CLI, the client side (what run_mix starts in each client namespace):
    ip netns exec NS traffic_mix.py client --url http://ADDR:PORT --rate 2 --duration 30 \
        --mix small:0.8,medium:0.17,large:0.03 --out FILE [--keepalive 3-6 --pause 0.05-0.5]

By default each flow is one HTTP/1.1 request on its own TCP connection (curl,
no keep-alive), so each object is one flow in tcpscope. For every flow curl's
own timings are kept (time_connect, time_total; curl starts its clock before
connect()), and nginx logs $request_time, the "proxy log" view that starts
only once the request has arrived.

Keep-alive mode (--keepalive MIN-MAX, nginx started with keepalive=True):
each arrival is ONE connection that fetches MIN..MAX objects of the mix one
after the other, a random pause (--pause LO-HI seconds) before each but the
first, like a browser or a video player. The client is xfer_peer.py (raw
socket): per request its exact bytes, the instant just before the request
was handed to the kernel and the kernel's receive timestamps (SO_TIMESTAMPNS)
of the response's first and last byte, so each object has its own clock
(request sent -> last byte arrived) however late a loaded machine wakes the
client. The connection is one flow in tcpscope, each response one transfer.
"""
import argparse
import json
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path as FsPath
from urllib.parse import urlsplit

HERE = FsPath(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
from testlib import stop_process  # noqa: E402  (shared with bench/ and tests/integration)

# Object sizes of the mix (bytes). Small objects stay under 100 kB (web
# objects, API responses); medium ones are ~3 MB (video segments), at least
# tcpscope's throughput_min_bytes so they feed the throughput histogram; a few
# large downloads of 20 MB.
DEFAULT_OBJECTS = {
    "small": [10_000, 25_000, 50_000, 90_000],
    "medium": [3_200_000],
    "large": [20_000_000],
}
DEFAULT_MIX = {"small": 0.80, "medium": 0.17, "large": 0.03}


def object_name(size):
    return f"obj-{size}.bin"


# The access log's fields, one JSON object per request: "key":$variable, the
# variable quoted where nginx's value is text. $request_time starts when nginx
# reads the request's first bytes: the proxy-log clock.
ACCESS_LOG_FIELDS = ('"remote_addr":"$remote_addr"', '"remote_port":$remote_port', '"request_time":$request_time',
                     '"bytes_sent":$bytes_sent', '"status":$status', '"uri":"$uri"',
                     '"connection_requests":$connection_requests')


def nginx_conf(d, listens, log_fields, keepalive, workers):
    """nginx.conf of an instance whose files are all under `d` (www/ served,
    tmp/, logs/): one server on `listens` (the listen directives' arguments),
    logs/access.jsonl with `log_fields` per request; kept-alive connections
    serve up to 1000 requests, otherwise each serves one."""
    listen_lines = "\n".join(f"    listen {l};" for l in listens)
    keepalive_lines = ("keepalive_timeout 120s;\n  keepalive_requests 1000;" if keepalive
                       else "keepalive_timeout 0;")
    return f"""
user root;
worker_processes {workers};
pid {d}/nginx.pid;
lock_file {d}/nginx.lock;
error_log {d}/logs/error.log warn;
events {{ worker_connections 4096; }}
http {{
  access_log off;
  log_format access escape=json '{{{",".join(log_fields)}}}';
  client_body_temp_path {d}/tmp/body;
  proxy_temp_path {d}/tmp/proxy;
  fastcgi_temp_path {d}/tmp/fastcgi;
  uwsgi_temp_path {d}/tmp/uwsgi;
  scgi_temp_path {d}/tmp/scgi;
  sendfile on;
  tcp_nopush on;
  {keepalive_lines}
  types {{ }}
  default_type application/octet-stream;
  server {{
{listen_lines}
    root {d}/www;
    access_log {d}/logs/access.jsonl access;
  }}
}}
"""


class Nginx:
    """Our own nginx instance: config, objects and logs in `workdir`, listening
    only on the server namespace's addresses of the lab's paths."""

    PORT = 8080

    def __init__(self, lab, workdir: FsPath, objects=None, port=PORT, keepalive=False):
        self.lab, self.dir, self.port = lab, FsPath(workdir), port
        self.objects = objects or DEFAULT_OBJECTS
        self.keepalive = keepalive
        self.proc = None

    def _write_files(self):
        www = self.dir / "www"
        www.mkdir(parents=True, exist_ok=True)
        for sizes in self.objects.values():
            for size in sizes:
                f = www / object_name(size)
                if not f.exists() or f.stat().st_size != size:
                    with open(f, "wb") as out:
                        block = os.urandom(1 << 16)
                        left = size
                        while left > 0:
                            out.write(block[:min(left, len(block))])
                            left -= len(block)
        for d in ("tmp", "logs"):
            (self.dir / d).mkdir(exist_ok=True)
        (self.dir / "nginx.conf").write_text(self._conf())

    def _conf(self):
        """Two workers; one connection per object unless keepalive=True."""
        listens = []
        for ep in self.lab.endpoints.values():
            listens.append(f"{ep.server_v4}:{self.port}")
            if self.lab.ipv6:
                listens.append(f"[{ep.server_v6}]:{self.port}")
        return nginx_conf(self.dir, listens, ACCESS_LOG_FIELDS, self.keepalive, workers=2)

    def start(self):
        self._write_files()
        self.proc = self.lab.popen(self.lab.server_ns, "nginx", "-p", self.dir, "-c",
                                   self.dir / "nginx.conf", "-g", "daemon off;",
                                   stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        ep = next(iter(self.lab.endpoints.values()))
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"nginx did not start: {self.proc.stderr.read()} "
                                   f"{(self.dir / 'logs' / 'error.log').read_text()}")
            r = self.lab.ns(self.lab.server_ns, "curl", "-s", "-o", "/dev/null", "-w",
                            "%{http_code}", f"http://{ep.server_v4}:{self.port}/"
                            f"{object_name(min(min(v) for v in self.objects.values()))}",
                            check=False)
            if r.stdout == "200":
                return self
            time.sleep(0.1)
        raise RuntimeError("nginx did not answer within 10 s")

    def stop(self):
        if self.proc:
            stop_process(self.proc, signal.SIGQUIT, timeout=15)   # graceful: finish open requests
        self.proc = None

    def access_log(self):
        f = self.dir / "logs" / "access.jsonl"
        return [json.loads(l) for l in f.read_text().splitlines() if l] if f.exists() else []

    def url(self, name, family=4):
        ep = self.lab.ep(name)
        host = ep.server_v4 if family == 4 else f"[{ep.server_v6}]"
        return f"http://{host}:{self.port}"


def parse_mix(text):
    mix = {}
    for item in text.split(","):
        k, _, v = item.partition(":")
        mix[k] = float(v)
    return mix


def parse_range(text, kind=float):
    lo, _, hi = str(text).partition("-")
    lo = kind(lo)
    return lo, kind(hi) if hi else lo


def keepalive_plan(rng, kinds, weights, objects, n_range, pause_range):
    """One kept-alive connection: sizes of its objects and the pause before
    each (0 before the first)."""
    n = rng.randint(*n_range)
    sizes = [rng.choice(objects[rng.choices(kinds, weights)[0]]) for _ in range(n)]
    pauses = [0.0] + [round(rng.uniform(*pause_range), 3) for _ in range(n - 1)]
    return sizes, pauses


def client(args):
    """Poisson arrivals of downloads, run inside one client namespace: curl,
    one object per connection; or (--keepalive) xfer_peer.py, several objects
    per connection."""
    rng = random.Random(args.seed)
    mix = parse_mix(args.mix)
    objects = json.loads(args.objects)
    kinds = [k for k in mix if mix[k] > 0]
    weights = [mix[k] for k in kinds]
    out = open(args.out, "w", buffering=1)
    running = []   # (proc, record)
    t0 = time.monotonic()
    next_at = t0 + rng.expovariate(args.rate)
    end = t0 + args.duration
    started = skipped = 0

    def reap(block=False):
        for proc, rec in list(running):
            if block:
                try:
                    proc.wait(timeout=max(0.0, args.grace - (time.monotonic() - end)))
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait()
            if proc.poll() is None:
                continue
            running.remove((proc, rec))
            stdout = proc.stdout.read()
            rec["exit"] = proc.returncode
            key = "conn" if args.keepalive else "curl"
            try:
                rec[key] = json.loads(stdout) if stdout else {}
            except ValueError:
                rec[key] = {"unparsed": stdout[:200]}
            if args.keepalive and proc.returncode != 0:
                rec["stderr"] = proc.stderr.read()[-500:]
            out.write(json.dumps(rec) + "\n")

    while time.monotonic() < end:
        now = time.monotonic()
        if now < next_at:
            time.sleep(min(next_at - now, 0.01))
            reap()
            continue
        next_at += rng.expovariate(args.rate)
        if args.keepalive:
            sizes, pauses = keepalive_plan(rng, kinds, weights, objects,
                                           parse_range(args.keepalive, int),
                                           parse_range(args.pause))
        else:
            kind = rng.choices(kinds, weights)[0]
            size = rng.choice(objects[kind])
        if len(running) >= args.max_inflight:
            skipped += 1  # an overloaded client would queue; we count instead
            continue
        if args.keepalive:
            rec = {"sizes": sizes, "pauses": pauses, "t_start": now - t0, "ns": args.label}
            u = urlsplit(args.url)
            plan = [{"path": "/" + object_name(s), "pause": p} for s, p in zip(sizes, pauses)]
            proc = subprocess.Popen(
                [sys.executable, str(HERE / "xfer_peer.py"), "client", "--addr", u.hostname,
                 "--port", str(u.port), "--plan", json.dumps(plan),
                 "--timeout", str(args.max_time)],
                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        else:
            rec = {"kind": kind, "size": size, "t_start": now - t0, "ns": args.label}
            proc = subprocess.Popen(
                ["curl", "-s", "-o", "/dev/null", "--max-time", str(args.max_time),
                 "-H", "Connection: close", "-w", "%{json}",
                 f"{args.url}/{object_name(size)}"],
                stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        running.append((proc, rec))
        started += 1
    reap(block=True)
    print(json.dumps({"started": started, "skipped": skipped}))


def run_mix(lab, nginx, rates, duration_s, seed=1, mix=None, objects=None, out_dir=None,
            family=4, label="", keepalive=None, pause=None, mixes=None):
    """Runs the mix from every client namespace named in `rates` (path name ->
    connections per second) at once; returns {path name: [connection result, ...]}.
    mixes: {path name: mix} for paths whose mix is not `mix`.
    keepalive="MIN-MAX": that many objects per connection (nginx must keep
    connections alive), pause="LO-HI" seconds before each but the first."""
    extra = ["--keepalive", keepalive, "--pause", pause or "0.05-0.5"] if keepalive else []
    out_dir = FsPath(out_dir or nginx.dir)
    mix = mix or DEFAULT_MIX
    objects = objects or nginx.objects
    procs = {}
    for i, (name, rate) in enumerate(rates.items()):
        out = out_dir / f"mix-{label}-{name}.jsonl"
        procs[name] = (lab.popen(
            lab.ep(name).client_ns, sys.executable, HERE / "traffic_mix.py", "client",
            "--url", nginx.url(name, family), "--rate", rate, "--duration", duration_s,
            "--mix", ",".join(f"{k}:{v}" for k, v in (mixes or {}).get(name, mix).items()),
            "--objects", json.dumps(objects), "--seed", seed * 1000 + i, "--out", out,
            "--label", name, *extra), out)
    results = {}
    for name, (p, out) in procs.items():
        stdout, stderr = p.communicate(timeout=duration_s + 180)
        if p.returncode != 0:
            raise RuntimeError(f"traffic_mix client in {name} failed: {stderr}")
        results[name] = [json.loads(l) for l in out.read_text().splitlines() if l]
    return results


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = p.add_subparsers(dest="mode", required=True)
    c = sub.add_parser("client", help="Poisson downloads (run inside a client namespace)")
    c.add_argument("--url", required=True, help="http://SERVER:PORT")
    c.add_argument("--rate", type=float, required=True, help="connection arrivals per second")
    c.add_argument("--duration", type=float, required=True, help="seconds of arrivals")
    c.add_argument("--mix", default=",".join(f"{k}:{v}" for k, v in DEFAULT_MIX.items()))
    c.add_argument("--objects", default=json.dumps(DEFAULT_OBJECTS),
                   help="JSON {kind: [sizes]}; the server must have obj-SIZE.bin for each")
    c.add_argument("--seed", type=int, default=1)
    c.add_argument("--out", required=True)
    c.add_argument("--label", default="")
    c.add_argument("--max-inflight", type=int, default=64)
    c.add_argument("--max-time", type=float, default=120,
                   help="seconds per connection (curl --max-time, xfer_peer --timeout)")
    c.add_argument("--keepalive", help="MIN-MAX objects per kept-alive connection (xfer_peer.py)")
    c.add_argument("--pause", default="0.05-0.5",
                   help="LO-HI seconds before each object of a connection but the first")
    c.add_argument("--grace", type=float, default=120,
                   help="seconds after the last arrival to let flows finish")
    args = p.parse_args()
    client(args)


if __name__ == "__main__":
    main()
