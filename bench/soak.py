#!/usr/bin/env python3
"""Soak test: tcpscope under steady connection churn for a long time.

    bench/soak.py --minutes 30 [--build build] [--out soak.json]

Makes two network namespaces joined by a veth (198.18.254.0/24, only inside
them), starts `tcpscope run` with a peer class for them, and runs request /
response traffic (tests/integration/traffic.py) between them without pause,
with mixed response sizes. Every few seconds it scrapes /metrics and /healthz
and samples the daemon's RSS, threads and open fds; every few minutes it
rotates the flow log (rename + SIGHUP, as logrotate does). At the end it
checks that every connection made was counted (tcpscope_flows_total of the
soak's class = 2 per connection: both ends are on this host).

Prints a table per minute and a summary; writes every sample as JSON. It
reports figures, it does not pass or fail on them: records lost and failed
scrapes should be 0, RSS flat after the warm-up. Not run in CI.
"""
import argparse
import json
import os
import re
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))
from testlib import metric_value as metric, remove_netns  # noqa: E402  (shared with the tests)
TRAFFIC = ROOT / "tests" / "integration" / "traffic.py"
CLI_NS, SRV_NS = f"tsoak-c{os.getpid()}", f"tsoak-s{os.getpid()}"
VETH_CLI, VETH_SRV = f"tsokc{os.getpid() % 100000}", f"tsoks{os.getpid() % 100000}"
CLI_ADDR, SRV_ADDR = "198.18.254.1", "198.18.254.2"
PORT = 8080
# Response sizes the clients cycle through: small API calls to bulk transfers.
RESPONSE_SIZES = [1000, 20000, 200000, 2000000]


def sh(*cmd, check=True):
    return subprocess.run(cmd, check=check, capture_output=True, text=True)


def in_ns(ns, *cmd):
    return ["ip", "netns", "exec", ns, *cmd]


def make_namespaces():
    sh("ip", "netns", "add", CLI_NS)
    sh("ip", "netns", "add", SRV_NS)
    sh("ip", "link", "add", VETH_CLI, "netns", CLI_NS, "type", "veth", "peer", "name", VETH_SRV, "netns", SRV_NS)
    for ns, dev, addr in ((CLI_NS, VETH_CLI, CLI_ADDR), (SRV_NS, VETH_SRV, SRV_ADDR)):
        sh(*in_ns(ns, "ip", "link", "set", "lo", "up"))
        sh(*in_ns(ns, "ip", "addr", "add", f"{addr}/24", "dev", dev))
        sh(*in_ns(ns, "ip", "link", "set", dev, "up"))
        # Hours of churn from one address: reuse TIME_WAIT ports, use them all.
        sh(*in_ns(ns, "sysctl", "-qw", "net.ipv4.tcp_tw_reuse=1"))
        sh(*in_ns(ns, "sysctl", "-qw", "net.ipv4.ip_local_port_range=10000 65000"))


def free_port():
    import socket
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def scrape(url, timeout=10):
    t0 = time.monotonic()
    try:
        with urllib.request.urlopen(url, timeout=timeout) as r:
            return r.status, r.read().decode(), time.monotonic() - t0
    except urllib.error.HTTPError as e:  # an answer all the same (e.g. /healthz 503)
        return e.code, e.read().decode(errors="replace"), time.monotonic() - t0


def proc_sample(pid):
    status = Path(f"/proc/{pid}/status").read_text()
    rss_kb = int(re.search(r"^VmRSS:\s+(\d+)", status, re.M).group(1))
    threads = int(re.search(r"^Threads:\s+(\d+)", status, re.M).group(1))
    return {"rss_mb": rss_kb / 1024, "threads": threads, "fds": len(os.listdir(f"/proc/{pid}/fd"))}


class Churn:
    """Client processes in the client namespace, one after the other per
    worker, until stopped; counts the connections that completed."""

    def __init__(self, tmp, workers, parallel, batch):
        self.tmp, self.workers, self.parallel, self.batch = tmp, workers, parallel, batch
        self.stop = threading.Event()
        self.lock = threading.Lock()
        self.completed = 0
        self.errors = 0
        self.threads = [threading.Thread(target=self.run, args=(i,), daemon=True) for i in range(workers)]

    def start(self):
        for t in self.threads:
            t.start()

    def run(self, worker):
        n = 0
        while not self.stop.is_set():
            resp = RESPONSE_SIZES[(worker + n) % len(RESPONSE_SIZES)]
            out = self.tmp / f"client-{worker}.jsonl"
            out.unlink(missing_ok=True)
            r = subprocess.run(in_ns(CLI_NS, sys.executable, str(TRAFFIC), "client", "--addr", SRV_ADDR,
                                     "--port", str(PORT), "--count", str(self.batch), "--req", "200",
                                     "--resp", str(resp), "--parallel", str(self.parallel), "--out", str(out),
                                     "--timeout", "120"), capture_output=True, text=True)
            lines = [json.loads(l) for l in out.read_text().splitlines() if l] if out.exists() else []
            with self.lock:
                self.completed += sum(1 for l in lines if "error" not in l)
                self.errors += sum(1 for l in lines if "error" in l) + (r.returncode != 0)
            n += 1

    def finish(self):
        self.stop.set()
        for t in self.threads:
            t.join(timeout=180)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--minutes", type=float, default=30)
    ap.add_argument("--build", default=os.environ.get("TCPSCOPE_BUILD", str(ROOT / "build")))
    ap.add_argument("--out", default="soak.json")
    ap.add_argument("--scrape-every", type=float, default=5, help="seconds between scrapes")
    ap.add_argument("--rotate-every", type=float, default=5, help="minutes between flow-log rotations")
    ap.add_argument("--workers", type=int, default=2, help="client processes at a time")
    ap.add_argument("--parallel", type=int, default=4, help="connections at a time per client process")
    ap.add_argument("--batch", type=int, default=200, help="connections per client process")
    args = ap.parse_args()
    if os.geteuid() != 0:
        sys.exit("soak: run as root (BPF programs, network namespaces)")
    tcpscope = Path(args.build) / "tcpscope"
    if not tcpscope.exists():
        sys.exit(f"soak: {tcpscope} missing; build first (scripts/dev.sh build)")

    tmp = Path(tempfile.mkdtemp(prefix="tcpscope-soak."))
    daemon = server = None
    samples, minutes_rows = [], []
    scrapes_failed = scrapes_ok = unhealthy = 0
    rotations = 0
    try:
        make_namespaces()
        config = tmp / "soak.yaml"
        config.write_text(f'peer_classes:\n  - name: soak\n    prefixes: ["{CLI_ADDR}/32", "{SRV_ADDR}/32"]\n'
                          "snapshot_interval_s: 10\n")
        port = free_port()
        url = f"http://127.0.0.1:{port}"
        flow_log = tmp / "flows.ndjson"
        stderr = open(tmp / "daemon.stderr", "w")
        daemon = subprocess.Popen([str(tcpscope), "run", "--config", str(config), "--listen", f"127.0.0.1:{port}",
                                   "--flow-log", str(flow_log)], stdout=subprocess.DEVNULL, stderr=stderr)
        deadline = time.monotonic() + 30
        while "running:" not in (tmp / "daemon.stderr").read_text():
            if daemon.poll() is not None or time.monotonic() > deadline:
                sys.exit("soak: tcpscope did not start: " + (tmp / "daemon.stderr").read_text())
            time.sleep(0.1)
        total_seconds = args.minutes * 60
        server = subprocess.Popen(in_ns(SRV_NS, sys.executable, str(TRAFFIC), "serve", "--bind", SRV_ADDR,
                                        "--port", str(PORT), "--count", str(10 ** 9), "--out", "/dev/null",
                                        "--ready", str(tmp / "ready"), "--timeout", str(total_seconds + 600)),
                                  stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        while not (tmp / "ready").exists():
            if server.poll() is not None:
                sys.exit("soak: traffic server did not start: " + server.stderr.read().decode())
            time.sleep(0.05)

        churn = Churn(tmp, args.workers, args.parallel, args.batch)
        churn.start()
        t0 = time.monotonic()
        next_rotation = args.rotate_every * 60
        minute_scrapes = []
        print(f"soak: {args.minutes} min, daemon pid {daemon.pid}, samples to {args.out}")
        print(f"{'min':>4} {'rss MB':>7} {'threads':>7} {'fds':>4} {'conns':>8} {'conn/s':>7} {'records':>9} "
              f"{'lost':>5} {'fl drop':>7} {'scrapes':>7} {'failed':>6} {'p99 ms':>7}")
        last_minute, last_conns = 0, 0
        while (elapsed := time.monotonic() - t0) < total_seconds:
            time.sleep(args.scrape_every)
            elapsed = time.monotonic() - t0
            sample = {"t": round(elapsed, 1), **proc_sample(daemon.pid), "connections": churn.completed}
            try:
                status, body, took = scrape(url + "/metrics")
                # /healthz 503 is an answer: "not drained in time" under overload.
                hstatus, hbody, _ = scrape(url + "/healthz")
                ok = status == 200 and hstatus in (200, 503) and body.endswith("\n") and "tcpscope_build_info" in body
                unhealthy += hstatus == 503
                sample.update({"healthz": hstatus, "healthz_body": hbody.strip(),"scrape_s": round(took, 4), "records": metric(body, "tcpscope_records_total"),
                               "lost": metric(body, "tcpscope_records_lost_total"),
                               "flow_log_dropped": metric(body, "tcpscope_flow_log_dropped_total"),
                               "flows_soak": metric(body, "tcpscope_flows_total", {"peer_class": "soak"})})
            except OSError as e:
                ok, sample["error"] = False, repr(e)
            scrapes_ok += ok
            scrapes_failed += not ok
            sample["ok"] = ok
            samples.append(sample)
            if "scrape_s" in sample:
                minute_scrapes.append(sample["scrape_s"])
            if elapsed >= next_rotation:  # logrotate: move the file, SIGHUP reopens it
                flow_log.rename(tmp / "flows.ndjson.1")
                daemon.send_signal(signal.SIGHUP)
                time.sleep(1)
                (tmp / "flows.ndjson.1").unlink()
                rotations += 1
                next_rotation += args.rotate_every * 60
            if int(elapsed // 60) > last_minute or elapsed >= total_seconds:
                last_minute = int(elapsed // 60)
                conns = churn.completed
                p99 = sorted(minute_scrapes)[int(0.99 * (len(minute_scrapes) - 1))] * 1000 if minute_scrapes else 0
                row = {"minute": last_minute, "rss_mb": round(sample["rss_mb"], 1), "threads": sample["threads"],
                       "fds": sample["fds"], "connections": conns,
                       "conn_per_s": round((conns - last_conns) / 60, 1), "records": sample.get("records"),
                       "lost": sample.get("lost"), "flow_log_dropped": sample.get("flow_log_dropped"),
                       "scrapes_ok": scrapes_ok, "scrapes_failed": scrapes_failed, "scrape_p99_ms": round(p99, 1)}
                minutes_rows.append(row)
                print(f"{row['minute']:>4} {row['rss_mb']:>7} {row['threads']:>7} {row['fds']:>4} {conns:>8} "
                      f"{row['conn_per_s']:>7} {int(row['records'] or 0):>9} {int(row['lost'] or 0):>5} "
                      f"{int(row['flow_log_dropped'] or 0):>7} {scrapes_ok:>7} {scrapes_failed:>6} {p99:>7.1f}",
                      flush=True)
                last_conns, minute_scrapes = conns, []

        churn.finish()
        connections = churn.completed
        # Every connection made is two records (client and server side).
        expected = 2 * connections
        settle = time.monotonic() + 30
        counted = None
        while time.monotonic() < settle:
            _, body, _ = scrape(url + "/metrics")
            counted = metric(body, "tcpscope_flows_total", {"peer_class": "soak"}) or 0
            if counted >= expected:
                break
            time.sleep(1)
        lost_kernel = metric(body, "tcpscope_records_lost_total") or 0

        warm = [s["rss_mb"] for s in samples if s["t"] >= 60] or [s["rss_mb"] for s in samples]
        k = max(1, len(warm) // 5)
        rss_first, rss_last = statistics.median(warm[:k]), statistics.median(warm[-k:])
        ts = [s["t"] for s in samples if s["t"] >= 60] or [s["t"] for s in samples]
        slope = (statistics.linear_regression(ts, warm).slope * 3600) if len(warm) > 2 else 0.0
        summary = {
            "minutes": args.minutes, "connections": connections, "client_errors": churn.errors,
            "records_expected": expected, "records_counted": counted,
            "records_missing": expected - (counted or 0), "records_lost_kernel": lost_kernel,
            "scrapes_ok": scrapes_ok, "scrapes_failed": scrapes_failed, "healthz_503": unhealthy,
            "scrape_p99_ms": round(1000 * sorted(s["scrape_s"] for s in samples if "scrape_s" in s)[
                int(0.99 * (len([s for s in samples if "scrape_s" in s]) - 1))], 1) if samples else None,
            "rss_mb_start": round(rss_first, 1), "rss_mb_end": round(rss_last, 1),
            "rss_mb_max": round(max(s["rss_mb"] for s in samples), 1), "rss_slope_mb_per_hour": round(slope, 2),
            "flow_log_rotations": rotations, "daemon_alive": daemon.poll() is None,
        }
        Path(args.out).write_text(json.dumps({"summary": summary, "minutes": minutes_rows, "samples": samples},
                                             indent=1))
        # Records of the whole host at the end, minus the soak's own.
        other = (metric(body, "tcpscope_records_total") or 0) - 2 * connections
        summary["records_from_other_traffic"] = other
        print("\nsummary")
        for k_, v in summary.items():
            print(f"  {k_:24} {v}")
        print(f"  (records_missing and records_lost_kernel should be 0, scrapes_failed 0, healthz_503 0\n"
              f"   unless the host was overloaded: tcpscope sees every TCP flow of the host,\n"
              f"   rss flat after warm-up: start {summary['rss_mb_start']} MB, end {summary['rss_mb_end']} MB)")
    finally:
        if server and server.poll() is None:
            server.kill()
        if daemon and daemon.poll() is None:
            daemon.send_signal(signal.SIGTERM)
            try:
                rc = daemon.wait(timeout=30)
                print(f"  daemon exit code after SIGTERM: {rc}")
            except subprocess.TimeoutExpired:
                daemon.kill()
                print("  daemon did not stop within 30 s of SIGTERM")
        remove_netns(CLI_NS, SRV_NS)
        subprocess.run(["rm", "-rf", str(tmp)])


if __name__ == "__main__":
    main()
