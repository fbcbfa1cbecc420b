#!/usr/bin/env python3
"""CUBIC vs BBR on the CDN testbed, as tcpscope sees it.

Builds the lab of the CDN BBR study (client paths: 50 ms RTT, 50 Mbit/s, 0.1%
and 1% loss; pop-to-pop: 15 ms RTT, 0.01% loss; intra-pop: unshaped), starts
the real tcpscope daemon with a config whose peer_classes map each client
namespace's prefix to its class (and a private ASN per path), then runs the
traffic mix (nginx + curl, Poisson arrivals, small / ~3 MB / large objects)
once with the server on CUBIC and once on BBR. It prints, per peer class and
congestion control, the distributions tcpscope exported:

  * flow completion time of every size class (tcpscope_flow_completion_seconds,
    size_class lt_100k, 100k_1m, 1m_3m, ge_3m), from the daemon's /metrics
    histogram and exactly from its flow log; classes the mix has no objects
    in show n=0;
  * throughput of flows >= 3 MB (tcpscope_flow_throughput_bytes_per_second);
  * beside them, the proxy-log view nginx gives of the same objects
    ($request_time), which starts only once the request has arrived.

and then per path (each has its own ASN, so two paths of one class are apart):
the passive flows tcpscope_flows_total counted for the path's ASN against the
downloads curl made on it, and the path's throughput quantiles against its
bottleneck (the payload share of the rate: rate * 1448/1514).

    sudo TCPSCOPE_BUILD=build tests/lab/scenarios/cdn_bbr_vs_cubic.py               # ~1.5 min
    sudo TCPSCOPE_BUILD=build tests/lab/scenarios/cdn_bbr_vs_cubic.py --duration 300 --large-mb 20

Keep-alive mode (--keepalive [MIN-MAX], default 3-6): each client connection
fetches several objects of the mix one after the other with short random
pauses (--pause LO-HI s, default 0.05-0.5), like a browser or a video player
(traffic_mix.py with xfer_peer.py: per request its own clock, request sent ->
the kernel's receive timestamp of the last body byte). Connection arrival
rates are the object rates divided by the mean objects per connection, so
the paths carry the same load. Every response is then a transfer in
tcpscope's flow log ("kind": "transfer") inside one flow ("kind": "flow"),
and the report adds, per size class and CC, the clients' median
per-request clock beside the server's send transfers' median
(wait_us + xfer_us) and the flows' median fct_us (a kept-alive flow spans
several objects and the pauses, and is classed by all its bytes).
In both modes each peer class also shows its send transfers' wait + xfer
quantiles beside the flow FCT.

    sudo TCPSCOPE_BUILD=build tests/lab/scenarios/cdn_bbr_vs_cubic.py --keepalive

--json FILE writes everything printed, and the per-flow ground truth, as JSON.
"""
import argparse
import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path as FsPath

HERE = FsPath(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

import lab as labmod  # noqa: E402
import traffic_mix  # noqa: E402
from testlib import stop_process  # noqa: E402  (lab put tests/ on the path)

TCPSCOPE = labmod.BUILD / "tcpscope"

# The testbed. Flow arrival rates (per second) load each client path to about
# a third of its 50 Mbit/s with the default mix (mean object ~1.2 MB).
PATHS = [
    ("client", "c1", 64601, 2.0),
    ("client-lossy", "c2", 64602, 2.0),
    ("pop-to-pop", "p1", 64611, 3.0),
    ("intra-pop", "i1", 64621, 3.0),
]
QUANTILES = (0.5, 0.9, 0.99)
# tcpscope's default size classes (SPEC.md): boundaries and names.
SIZE_BOUNDS = (100_000, 1_000_000, 3_000_000)
SIZE_CLASSES = ("lt_100k", "100k_1m", "1m_3m", "ge_3m")
THROUGHPUT_MIN_BYTES = 3_000_000
PAYLOAD_SHARE = 1448 / 1514   # a full frame's TCP payload (with timestamps) of its bytes


def size_class(nbytes):
    return SIZE_CLASSES[sum(1 for b in SIZE_BOUNDS if nbytes >= b)]


class Daemon:
    """The real tcpscope daemon (`tcpscope run`), flow log and /metrics.
    name: its files in workdir are NAME.flows.ndjson and NAME.stderr (default:
    flows.ndjson, tcpscope.stderr); env: its environment (e.g. STATE_DIRECTORY)."""

    def __init__(self, config, workdir: FsPath, name=None, env=None):
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            self.port = s.getsockname()[1]
        self.flow_log = workdir / (f"{name}.flows.ndjson" if name else "flows.ndjson")
        self.stderr_path = workdir / f"{name or 'tcpscope'}.stderr"
        self.stderr = open(self.stderr_path, "w")
        self.proc = subprocess.Popen(
            [str(TCPSCOPE), "run", "--config", str(config), "--listen",
             f"127.0.0.1:{self.port}", "--flow-log", str(self.flow_log),
             "--transfer-sampling-rate", "1"],  # the study reads every transfer
            stdout=subprocess.DEVNULL, stderr=self.stderr, env=env)
        deadline = time.monotonic() + 30
        while "running:" not in self.stderr_path.read_text():
            if self.proc.poll() is not None or time.monotonic() > deadline:
                self.stop()
                raise RuntimeError(f"tcpscope did not start: {self.stderr_path.read_text()}")
            time.sleep(0.05)

    def metrics(self):
        import urllib.request
        with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/metrics", timeout=10) as r:
            return r.read().decode()

    def _lines(self):
        if not self.flow_log.exists():
            return []
        return [json.loads(l) for l in self.flow_log.read_text().splitlines() if l.strip()]

    def records(self):
        """Flow records ("kind": "flow"); transfer lines are transfers()."""
        return [r for r in self._lines() if r.get("kind", "flow") == "flow"]

    def transfers(self):
        """Transfer records ("kind": "transfer"): one per run of data one way."""
        return [r for r in self._lines() if r.get("kind") == "transfer"]

    def split(self):
        lines = self._lines()
        return ([r for r in lines if r.get("kind", "flow") == "flow"],
                [r for r in lines if r.get("kind") == "transfer"])

    def stop(self):
        stop_process(self.proc)
        self.stderr.close()
        return self.proc.returncode


def parse_histograms(text, name):
    """{frozenset(labels minus le): [(le, cumulative count), ...]} for one histogram."""
    out = {}
    for m in re.finditer(rf"^{name}_bucket\{{([^}}]*)\}} (\S+)$", text, re.M):
        labels = dict(re.findall(r'(\w+)="([^"]*)"', m.group(1)))
        le = labels.pop("le")
        out.setdefault(frozenset(labels.items()), []).append(
            (float("inf") if le == "+Inf" else float(le), float(m.group(2))))
    return out


def merge(hists, **want):
    """Cumulative buckets summed over every series whose labels match `want`."""
    total = {}
    for labels, buckets in hists.items():
        d = dict(labels)
        if all(d.get(k) == v for k, v in want.items()):
            for le, c in buckets:
                total[le] = total.get(le, 0) + c
    return sorted(total.items())


def histogram_quantile(q, buckets):
    """Prometheus' histogram_quantile: linear interpolation inside the bucket."""
    if not buckets or buckets[-1][1] == 0:
        return None
    n = buckets[-1][1]
    rank = q * n
    prev_le, prev_c = 0.0, 0.0
    for le, c in buckets:
        if c >= rank:
            if le == float("inf"):
                return prev_le
            return prev_le + (le - prev_le) * ((rank - prev_c) / (c - prev_c) if c > prev_c else 0)
        prev_le, prev_c = le, c
    return prev_le


def quantile(xs, q):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(q * len(xs)))] if xs else None


def fmt(v, scale, unit):
    return "-" if v is None else f"{v * scale:.1f}{unit}"


def median(xs):
    xs = sorted(xs)
    n = len(xs)
    if not n:
        return None
    return xs[n // 2] if n % 2 else (xs[n // 2 - 1] + xs[n // 2]) / 2


def is_keepalive(f):
    return "sizes" in f


def conn_ok(f):
    """The client's connection did all it planned, every answer a 200."""
    if is_keepalive(f):
        reqs = f.get("conn", {}).get("requests", [])
        return f["exit"] == 0 and len(reqs) == len(f["sizes"]) and \
            all(q["status"] == 200 for q in reqs)
    return f["exit"] == 0 and f["curl"].get("http_code") == 200


def conn_bytes(f):
    """Bytes of the connection, as its size class counts them: the object
    (one-object mode; the response header adds a few hundred bytes, and no
    object of the mix is that close to a boundary), or, kept alive, exactly
    every request and response byte the client counted."""
    if is_keepalive(f):
        reqs = f.get("conn", {}).get("requests", [])
        if len(reqs) == len(f["sizes"]):
            return sum(q["req_bytes"] + q["header_bytes"] + q["body_bytes"] for q in reqs)
        return sum(f["sizes"])
    return f["size"]


def client_clock_us(q):
    """A kept-alive request's own clock: just before the request was handed to
    the kernel -> the kernel's receive timestamp of the response's last byte
    (its read time if the kernel gave no stamp)."""
    last = q["last"][2] if q["last"][2] is not None else q["last"][1]
    return (last - q["send"][1]) / 1000


def requests_of(flows_by_path):
    """Every request of the kept-alive connections: (path, connection, request)."""
    return [(name, f, q) for name, fs in flows_by_path.items() for f in fs
            if is_keepalive(f) and conn_ok(f) for q in f["conn"]["requests"]]


def response_bytes(q):
    return q["header_bytes"] + q["body_bytes"]


def transfer_us(t):
    """A send transfer's request-to-done time: wait_us (request's arrival ->
    the response's first byte handed to TCP) + xfer_us (-> the ACK of its last byte)."""
    return (t["wait_us"] or 0) + t["xfer_us"]


def keepalive_table(report):
    """Per size class x CC: requests and the clients' median clock, the server's
    send transfers and their median wait + xfer, the server's flows (classed
    by all their bytes) and their median fct_us, and the fct_us of the flows
    that carried the class's requests."""
    table = {}
    for cc, run in report["runs"].items():
        reqs = requests_of(run["flows"])
        sends = [t for t in run["server_transfers"] if t["direction"] == "send"]
        flows = run["server_flows"]
        by_tuple = {(r["raddr"], r["rport"]): r for r in flows}
        for sc in SIZE_CLASSES:
            rq = [(n, f, q) for n, f, q in reqs if size_class(response_bytes(q)) == sc]
            xs = [transfer_us(t) for t in sends if size_class(t["bytes"]) == sc]
            fl = [r["fct_us"] for r in flows
                  if size_class(r["bytes_acked"] + r["bytes_received"]) == sc]
            carrying = {(f["conn"]["laddr"], f["conn"]["lport"]) for _, f, _ in rq}
            carry = [by_tuple[k]["fct_us"] for k in carrying if k in by_tuple]
            cm = median([client_clock_us(q) for _, _, q in rq])
            table.setdefault(sc, {})[cc] = {
                "n_requests": len(rq), "client_median_ms": cm and cm / 1e3,
                "n_transfers": len(xs), "transfer_median_ms": median(xs) and median(xs) / 1e3,
                "n_flows": len(fl), "flow_median_fct_ms": median(fl) and median(fl) / 1e3,
                "n_carrying_flows": len(carry),
                "carrying_flow_median_fct_ms": median(carry) and median(carry) / 1e3,
            }
    return table


def print_keepalive_table(table):
    print()
    print("Kept-alive connections, server side, per size class (by bytes: a request by its "
          "response, a transfer by its bytes, a flow by ALL its bytes):")
    print("  class    cc     | req  client p50 | xfers  wait+xfer p50 | flows  fct p50 | "
          "flows carrying the class's requests: n  fct p50  (x client p50)")
    for sc, by_cc in table.items():
        for cc, r in by_cc.items():
            ratio = (r["carrying_flow_median_fct_ms"] / r["client_median_ms"]
                     if r["client_median_ms"] and r["carrying_flow_median_fct_ms"] else None)
            print("  %-8s %-6s | %4d %10s | %5d %14s | %5d %8s | %4d %8s  %s" % (
                sc, cc, r["n_requests"], fmt(r["client_median_ms"], 1, "ms"),
                r["n_transfers"], fmt(r["transfer_median_ms"], 1, "ms"),
                r["n_flows"], fmt(r["flow_median_fct_ms"], 1, "ms"),
                r["n_carrying_flows"], fmt(r["carrying_flow_median_fct_ms"], 1, "ms"),
                "-" if ratio is None else f"x{ratio:.1f}"))


def run(args):
    workdir = FsPath(args.workdir or f"/tmp/tcpscope-cdn-{os.getpid()}")
    workdir.mkdir(parents=True, exist_ok=True)
    paths = [labmod.Path.preset(preset, name=name, asn=asn) for preset, name, asn, _ in PATHS]
    rates = {name: rate * args.rate_scale for _, name, _, rate in PATHS}
    objects = dict(traffic_mix.DEFAULT_OBJECTS, large=[int(args.large_mb * 1e6)])
    report = {"duration_s": args.duration, "objects": objects, "runs": {}, "classes": {},
              "keepalive": None}
    if args.keepalive:
        lo, hi = traffic_mix.parse_range(args.keepalive, int)
        # The same object rate as one object per connection: the same load.
        rates = {n: r / ((lo + hi) / 2) for n, r in rates.items()}
        report["keepalive"] = {"objects_per_conn": [lo, hi],
                               "pause_s": list(traffic_mix.parse_range(args.pause))}
    with labmod.Lab(paths, tag=args.tag, workdir=workdir / "lab", seed=args.seed) as lab:
        cfg = lab.tcpscope_config(workdir / "tcpscope.yaml", extra="snapshot_interval_s: 0\n")
        daemon = Daemon(cfg, workdir)
        lab.track(daemon.proc.pid)   # reaped with the lab if this process is killed
        try:
            for cc in ("cubic", "bbr"):
                # Accepted sockets inherit the listener's congestion control,
                # so nginx starts after the namespace's default is set.
                lab.set_cc(cc)
                nginx = traffic_mix.Nginx(lab, workdir / f"nginx-{cc}", objects=objects,
                                          keepalive=bool(args.keepalive)).start()
                what = (f"connections of {args.keepalive} objects, {args.pause} s apart"
                        if args.keepalive else "downloads")
                print(f"== {cc}: {args.duration:.0f} s of Poisson arrivals of {what} "
                      f"({', '.join(f'{n} {r:.3g}/s' for n, r in rates.items())})", flush=True)
                t0 = time.monotonic()
                t0_ns = time.time_ns()
                try:
                    flows = traffic_mix.run_mix(lab, nginx, rates, args.duration,
                                                seed=args.seed, out_dir=workdir, label=cc,
                                                keepalive=args.keepalive, pause=args.pause)
                finally:
                    nginx.stop()
                report["runs"][cc] = {"flows": flows, "nginx": nginx.access_log(),
                                      "seconds": time.monotonic() - t0,
                                      "window_ns": [t0_ns, time.time_ns()],
                                      "port": nginx.port}
            time.sleep(1.5)  # the daemon drains its ring buffer every 100 ms
            metrics = daemon.metrics()
            # The flow log holds flow records ("kind": "flow") and transfer
            # records ("kind": "transfer"); each list keeps its own kind.
            all_flows, all_transfers = daemon.split()
            records = [r for r in all_flows
                       if r["netns"] == lab.netns_ids[lab.server_ns]
                       and r["start_ns"] >= lab.created_ns]
            transfers = [t for t in all_transfers
                         if t["netns"] == lab.netns_ids[lab.server_ns]
                         and t["start_ns"] >= lab.created_ns]
            client_ns = {lab.netns_ids[ep.client_ns] for ep in lab.endpoints.values()}
            client_transfers = [t for t in all_transfers if t["netns"] in client_ns
                                and t["start_ns"] >= lab.created_ns]
        finally:
            rc = daemon.stop()
            if rc != 0:
                print(f"tcpscope exited {rc}: {daemon.stderr_path.read_text()}", file=sys.stderr)
        report["paths"] = {ep.path.name: {"peer_class": ep.path.peer_class, "asn": ep.path.asn,
                                          "client_v4": ep.client_v4, "rtt_ms": ep.path.rtt_ms,
                                          "up_loss": ep.path.up.loss}
                           for ep in lab.endpoints.values()}
    # Raw per-run lists of the server's transfers and flows on nginx's port
    # (the lab's clients only: nginx's own start-up probe comes from the
    # server's address), and the clients' send transfers (their requests).
    lab_addrs = {a for ep in lab.endpoints.values() for a in ep.client_v4 + ep.client_v6}
    keep = ("flow_start_ns", "laddr", "lport", "raddr", "rport", "seq", "direction", "start_ns",
            "end_ns", "xfer_us", "wait_us", "bytes", "retrans_segs", "srtt_us", "min_rtt_us",
            "cc", "peer_class", "asn")
    for cc, run_ in report["runs"].items():
        port = run_["port"]
        lo_ns, hi_ns = run_["window_ns"]
        run_["server_transfers"] = [{k: t[k] for k in keep} for t in transfers
                                    if t["lport"] == port and t["raddr"] in lab_addrs
                                    and t["cc"] == cc]
        run_["server_flows"] = [r for r in records if r["lport"] == port
                                and r["raddr"] in lab_addrs and r["cc"] == cc]
        run_["client_send_transfers"] = [{k: t[k] for k in keep} for t in client_transfers
                                         if t["rport"] == port and t["direction"] == "send"
                                         and lo_ns <= t["start_ns"] <= hi_ns]
    # After teardown the delay lines have written their final counters.
    for name, ep_info in report["paths"].items():
        f = workdir / "lab" / f"{name}.stats.json"
        if f.exists():
            ep_info["stats"] = json.loads(f.read_text())

    # What the daemon could not write: the daemon sees the whole host, and
    # other traffic on it (a benchmark) can overrun the flow log's queue.
    report["lost"] = {}
    for name in ("tcpscope_flow_log_dropped_total", "tcpscope_records_lost_total",
                 "tcpscope_transfer_records_lost_total"):
        m = re.search(rf"^{name}(?:{{[^}}]*}})? (\S+)$", metrics, re.M)
        report["lost"][name] = float(m.group(1)) if m else None
    if any(report["lost"].values()):
        print(f"WARNING: records lost or dropped: {report['lost']} (other traffic on the host?)")
    fct = parse_histograms(metrics, "tcpscope_flow_completion_seconds")
    # Exported in bytes/s (Prometheus' base unit); reported here in bits/s
    # beside the paths' bottlenecks, which are link rates.
    thr = {labels: [(8 * le, c) for le, c in buckets]
           for labels, buckets in parse_histograms(metrics, "tcpscope_flow_throughput_bytes_per_second").items()}
    flows_total = {}   # (peer_class, asn, cc, outcome) -> passive flows
    for m in re.finditer(r"^tcpscope_flows_total\{([^}]*)\} (\S+)$", metrics, re.M):
        d = dict(re.findall(r'(\w+)="([^"]*)"', m.group(1)))
        if d.get("dir") == "passive":
            k = (d["peer_class"], d["asn"], d["cc"], d["outcome"])
            flows_total[k] = flows_total.get(k, 0) + float(m.group(2))

    def addrs_of(names):
        return {a for n in names for a in lab.ep(n).client_v4 + lab.ep(n).client_v6}

    def nbytes(r):
        return r["bytes_acked"] + r["bytes_received"]

    def tput(r):
        return 8 * nbytes(r) / (r["fct_us"] / 1e6)

    def quantiles(xs, scale=1.0):
        return {str(q): quantile([x * scale for x in xs], q) for q in QUANTILES}

    classes = list(dict.fromkeys(p.peer_class for p in paths))
    print()
    print("Per peer class, server side (passive flows), as exported by tcpscope.")
    print("FCT per size class: /metrics histogram quantiles | exact, from the flow log | "
          "nginx $request_time (proxy-log view)")
    print("Throughput of flows >= 3 MB: /metrics histogram quantiles | exact, from the flow log")
    for pc in classes:
        names = [n for _, n, _, _ in PATHS if lab.ep(n).path.peer_class == pc]
        addrs = addrs_of(names)
        for cc in ("cubic", "bbr"):
            recs = [r for r in records if r["raddr"] in addrs and r["cc"] == cc and
                    r["outcome"] == "ok"]
            curl = [f for n in names for f in report["runs"][cc]["flows"][n]]
            sends = [t for t in report["runs"][cc]["server_transfers"]
                     if t["raddr"] in addrs and t["direction"] == "send"]
            reqs = requests_of({n: report["runs"][cc]["flows"][n] for n in names})
            nginx_log = [e for e in report["runs"][cc]["nginx"] if e["remote_addr"] in addrs]
            fct_rows = {}
            for sc in SIZE_CLASSES:
                b = merge(fct, peer_class=pc, cc=cc, size_class=sc)
                log_s = [r["fct_us"] / 1e6 for r in recs
                         if nbytes(r) > 0 and not r.get("partial", False)
                         and size_class(nbytes(r)) == sc]
                fct_rows[sc] = {
                    "n": int(b[-1][1]) if b else 0,
                    "buckets": b,
                    "curl_n": sum(1 for f in curl if size_class(conn_bytes(f)) == sc),
                    "metrics_s": {str(q): histogram_quantile(q, b) for q in QUANTILES},
                    "log_s": quantiles(log_s),
                    "log_values_s": sorted(log_s),
                    # $bytes_sent is the object plus nginx's response header.
                    "nginx_request_time_s": quantiles(
                        [e["request_time"] for e in nginx_log
                         if size_class(e["bytes_sent"]) == sc]),
                    # Transfers: the server's send transfers (responses) of
                    # this size, request arrival -> ACK of the last byte.
                    "transfer_n": sum(1 for t in sends if size_class(t["bytes"]) == sc),
                    "transfer_s": quantiles([transfer_us(t) / 1e6 for t in sends
                                             if size_class(t["bytes"]) == sc]),
                    # Kept alive: the clients' own per-request clocks.
                    "client_n": sum(1 for _, _, q in reqs if size_class(response_bytes(q)) == sc),
                    "client_s": quantiles([client_clock_us(q) / 1e6 for _, _, q in reqs
                                           if size_class(response_bytes(q)) == sc]),
                }
            big = [tput(r) for r in recs if nbytes(r) >= THROUGHPUT_MIN_BYTES and r["fct_us"] > 0]
            tb = merge(thr, peer_class=pc, cc=cc)
            row = {
                "flows_exported": sum(v for (c, _, k, _), v in flows_total.items()
                                      if c == pc and k == cc),
                "flows_ok_in_log": len(recs),
                "curl_ok": sum(1 for f in curl if conn_ok(f)),
                "curl_started": len(curl),
                "fct": fct_rows,
                "throughput_n": int(tb[-1][1]) if tb else 0,
                "throughput_metrics_bps": {str(q): histogram_quantile(q, tb) for q in QUANTILES},
                "throughput_log_bps": quantiles(big),
            }
            report["classes"].setdefault(pc, {})[cc] = row
            print(f"\n[{pc} / {cc}] flows: {row['flows_exported']:.0f} exported, "
                  f"{row['curl_ok']} of {row['curl_started']} client connections ok"
                  + (f" ({len(reqs)} requests)" if args.keepalive else ""))
            for sc, f in fct_rows.items():
                print("  FCT %-8s n=%-4d %s | %s | nginx %s" % (
                    sc, f["n"],
                    " ".join(f"p{int(q * 100)} {fmt(f['metrics_s'][str(q)], 1e3, 'ms')}"
                             for q in QUANTILES),
                    " ".join(fmt(f["log_s"][str(q)], 1e3, "ms") for q in QUANTILES),
                    " ".join(fmt(f["nginx_request_time_s"][str(q)], 1e3, "ms")
                             for q in QUANTILES)))
            for sc, f in fct_rows.items():
                if not f["transfer_n"] and not f["client_n"]:
                    continue
                print("  XFER %-8s n=%-4d wait+xfer %s" % (
                    sc, f["transfer_n"],
                    " ".join(f"p{int(q * 100)} {fmt(f['transfer_s'][str(q)], 1e3, 'ms')}"
                             for q in QUANTILES))
                    + ("" if not args.keepalive else " | client n=%d %s" % (
                        f["client_n"], " ".join(fmt(f["client_s"][str(q)], 1e3, "ms")
                                                for q in QUANTILES))))
            print("  throughput   n=%-4d %s | %s" % (
                row["throughput_n"],
                " ".join(f"p{int(q * 100)} {fmt(row['throughput_metrics_bps'][str(q)], 1e-6, 'M')}"
                         for q in QUANTILES),
                " ".join(fmt(row["throughput_log_bps"][str(q)], 1e-6, "M") for q in QUANTILES)))

    print()
    print("Per path (its own ASN): passive flows exported for the ASN vs curl downloads; "
          "throughput of flows >= 3 MB against the path's bottleneck")
    for _, name, asn, _ in PATHS:
        ep = lab.ep(name)
        addrs = addrs_of([name])
        down = ep.path.down
        limit = None if ep.path.veth or not down.rate_mbit else \
            down.rate_mbit * 1e6 * PAYLOAD_SHARE
        for cc in ("cubic", "bbr"):
            recs = [r for r in records if r["raddr"] in addrs and r["cc"] == cc]
            curl = report["runs"][cc]["flows"][name]
            tb = merge(thr, peer_class=ep.path.peer_class, asn=str(asn), cc=cc)
            big = sorted(tput(r) for r in recs
                         if r["outcome"] == "ok" and not r.get("partial", False)
                         and nbytes(r) >= THROUGHPUT_MIN_BYTES and r["fct_us"] > 0)
            prow = {
                "asn": asn, "peer_class": ep.path.peer_class,
                "flows_exported_asn": sum(v for (c, a, k, _), v in flows_total.items()
                                          if a == str(asn) and k == cc),
                "flows_exported_asn_other_class": sum(
                    v for (c, a, k, _), v in flows_total.items()
                    if a == str(asn) and k == cc and c != ep.path.peer_class),
                "curl_started": len(curl),
                "log_asns": sorted({r["asn"] for r in recs}),
                "log_flows": len(recs),
                "goodput_limit_bps": limit,
                "throughput_buckets": tb,
                "throughput_metrics_bps": {str(q): histogram_quantile(q, tb) for q in QUANTILES},
                "throughput_log_values_bps": big,
                "throughput_log_bps": quantiles(big),
            }
            report.setdefault("per_path", {}).setdefault(name, {})[cc] = prow
            lim = "unshaped" if limit is None else f"limit {limit / 1e6:.1f}M"
            print(f"  {name:3s} asn {asn} {cc:5s}: {prow['flows_exported_asn']:.0f} flows "
                  f"exported for the ASN, {prow['curl_started']} downloads; throughput n="
                  f"{len(big)} " + " ".join(
                      f"p{int(q * 100)} {fmt(prow['throughput_metrics_bps'][str(q)], 1e-6, 'M')}"
                      for q in QUANTILES) +
                  f" | max {fmt(big[-1] if big else None, 1e-6, 'M')} ({lim})")
    if args.keepalive:
        report["keepalive_table"] = keepalive_table(report)
        print_keepalive_table(report["keepalive_table"])
    if args.json:
        FsPath(args.json).write_text(json.dumps(report, indent=1, default=str))
    return 0


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter,
                                 epilog=__doc__.split("\n\n", 1)[1])
    ap.add_argument("--duration", type=float, default=20, help="seconds of arrivals per CC")
    ap.add_argument("--large-mb", type=float, default=10,
                    help="size of the large objects (CUBIC moves ~4 Mbit/s on the 1%% loss path, "
                         "so the last large download sets how long a run takes)")
    ap.add_argument("--rate-scale", type=float, default=1.0, help="multiply every arrival rate")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--workdir", help="where configs, logs and results go")
    ap.add_argument("--json", help="write the results here")
    ap.add_argument("--tag", help="the lab's tag (4 characters), for `lab.py down --tag`")
    ap.add_argument("--keepalive", nargs="?", const="3-6", metavar="MIN-MAX",
                    help="kept-alive connections of MIN-MAX objects each (default 3-6)")
    ap.add_argument("--pause", default="0.05-0.5", metavar="LO-HI",
                    help="seconds between a kept-alive connection's objects (default 0.05-0.5)")
    args = ap.parse_args()
    if os.geteuid() != 0:
        ap.error("run as root: the lab needs network namespaces and the daemon loads BPF")
    for tool in ("nginx", "curl"):
        if subprocess.run(["which", tool], capture_output=True).returncode != 0:
            ap.error(f"{tool} is not installed (scripts/dev.sh installs it)")
    if not TCPSCOPE.exists() or not labmod.DELAYLINE.exists():
        ap.error(f"build first: {TCPSCOPE} and {labmod.DELAYLINE} are needed "
                 "(set TCPSCOPE_BUILD to the build directory)")
    # SIGTERM unwinds like Ctrl-C: the lab, nginx and the daemon are torn down.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    return run(args)


if __name__ == "__main__":
    sys.exit(main())
