#!/usr/bin/env python3
"""What an edge server pays: nginx serving a 2 kB object to wrk across a veth
between two network namespaces, with nothing attached (baseline) and, one at
a time, interleaved with baselines:

  floor-flows       not tcpscope: the per-flow floor (bench/floor.bpf.c
                    "record": the state-change tracepoint, SK_STORAGE, one
                    ring record per flow), the least any tool that follows
                    every flow pays
  floor-transfers   not tcpscope: the transfer floor (bench/floor.bpf.c
                    "transfers": the per-flow floor plus the two per-call
                    hooks doing only a transfer's bounds)
  tcpscope          the shipped default config (no rules, no flow log)
  tcpscope-log      the same with the flow log on
  tcpscope-off      the default with transfers off (transfer_sampling_rate: 0):
                    no per-call hook is attached
  tcpscope-server, tcpscope-log-server
                    the same two told to leave wrk's namespace alone
                    (ignore_netns): only the server's end is followed, as on
                    an edge server whose clients are remote
  tcpscope-client   the default told to leave nginx's namespace alone: only
                    the connecting end is followed (an edge's connections to
                    origins and other PoPs)

Workloads (--workloads):

  close             short connections: every request on a new connection
                    (`Connection: close`), both ends on this host
  close-server      the same with nginx held to a share of one core (the
                    cpu controller's quota, --server-share), so that the
                    server is the bottleneck, not wrk; run with the -server
                    variants, it prices the server's end only
  keepalive         requests over kept-alive connections (two transfers per
                    request on each end)

nginx runs one worker, wrk two threads over --connections connections.

Each workload's runs alternate baseline, variant, baseline, ... for --rounds
rounds; a variant run's ratio is its rate over the mean of the baselines
either side, and each variant's median ratio is given with the spread of its
ratios (min-max). A baseline that moves is not a reason to report nothing:
the baselines' own spread is printed beside it, and the ratios are what
counts. Beside the ratios, CPU per unit from one more run per variant with
kernel.bpf_stats_enabled=1 (two clock reads per program run, so it is not
used for ratios): the programs' kernel time per connection (close) or per
request (keepalive) by program, and the process's own CPU (the daemon's, the
floor loader's) per unit. Records lost (the kernel's ring) and flows missed
(both ends of every connection: 2 per request in close) are counted in every
run.

  bench/edge.py [--workloads close,close-server,keepalive] [--variants ...]
                [--rounds 5] [--seconds 8] [--connections 64] [--server-share 0.5]
                [--no-cost] [--build NAME=DIR] [--out FILE]
  bench/edge.py --summary RUN.json ...   several runs side by side

Needs root. Prints tables, writes JSON (bench/results/edge.json by default).
"""
import argparse
import os
import re
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import benchlib as B  # noqa: E402
import floor as F  # noqa: E402
from bpf_cost import delta, prog_stats  # noqa: E402

SIZE = 2000
FLOORS = {"floor-flows": "record", "floor-transfers": "transfers"}
TCPSCOPE_VARIANTS = ["tcpscope", "tcpscope-log", "tcpscope-off", "tcpscope-server", "tcpscope-log-server",
                     "tcpscope-client"]
VARIANTS = list(FLOORS) + TCPSCOPE_VARIANTS
WORKLOADS = {
    "close": ["floor-flows", "floor-transfers", "tcpscope", "tcpscope-log", "tcpscope-off"],
    "close-server": ["tcpscope-server", "tcpscope-log-server"],
    "keepalive": ["floor-flows", "floor-transfers", "tcpscope", "tcpscope-log"],
}


class CpuQuota:
    """A cgroup of the cpu controller (v2, or v1's) holding processes to
    `share` of one core; None where no cpu controller is mounted."""

    @staticmethod
    def create(share):
        for line in open("/proc/self/mountinfo"):
            left, _, right = line.partition(" - ")
            fstype, opts = right.split()[0], right.split()[-1]
            mnt = Path(left.split()[4])
            period = 100000
            if fstype == "cgroup2":
                try:
                    if "cpu" not in (mnt / "cgroup.controllers").read_text().split():
                        continue
                    (mnt / "cgroup.subtree_control").write_text("+cpu")
                except OSError:
                    continue
                q = CpuQuota()
                q.path = mnt / f"tcpscope-bench-cpu-{os.getpid()}"
                q.path.mkdir(exist_ok=True)
                (q.path / "cpu.max").write_text(f"{int(share * period)} {period}")
            elif fstype == "cgroup" and "cpu" in opts.split(","):
                q = CpuQuota()
                q.path = mnt / f"tcpscope-bench-cpu-{os.getpid()}"
                q.path.mkdir(exist_ok=True)
                (q.path / "cpu.cfs_period_us").write_text(str(period))
                (q.path / "cpu.cfs_quota_us").write_text(str(int(share * period)))
            else:
                continue
            q.root, q.share = mnt, share
            return q
        return None

    def hold(self, pids):
        for pid in pids:
            (self.path / "cgroup.procs").write_text(str(pid))

    def close(self):
        B.remove_cgroup(self.path, self.root)


class EdgeNginx:
    """nginx with one worker serving a 2 kB static file, with keep-alive
    (wrk's `Connection: close` makes each request a connection of its own),
    no access log; `quota`: a CpuQuota that holds it."""

    def __init__(self, net, tmp, quota=None, port=8090):
        d = Path(tmp) / f"nginx-edge-{port}"
        (d / "www").mkdir(parents=True, exist_ok=True)
        (d / "www" / f"obj-{SIZE}").write_bytes(b"x" * SIZE)
        self.p = B.start_nginx(net, d, f"{net.srv_v4}:{port}", f"    root {d}/www;",
                               "  keepalive_timeout 300;\n  keepalive_requests 100000000;\n"
                               "  sendfile on;\n  tcp_nopush on;", workers=1)
        if quota:
            pids = [self.p.pid] + [int(x) for x in B.sh("pgrep", "-P", str(self.p.pid), check=False).stdout.split()]
            # The master is `ip netns exec`'s child; its workers are the master's.
            pids += [int(x) for p in list(pids) for x in B.sh("pgrep", "-P", str(p), check=False).stdout.split()]
            quota.hold(sorted(set(pids)))
        self.url = f"http://{net.srv_v4}:{port}/obj-{SIZE}"

    def close(self):
        B.stop_process(self.p)


def wrk(net, url, seconds, connections, close):
    extra = ("-H", "Connection: close") if close else ()
    return B.run_wrk(net, url, seconds, 2, connections, *extra)


class FloorVariant:
    def __init__(self, tmp, variant):
        self.observer = F.FloorObserver(type("Ctx", (), {"tmp": Path(tmp)})(), FLOORS[variant])
        self.observer.start()
        self.pid = self.observer.pid

    def counters(self):
        return {}

    def stop(self):
        self.observer.stop()
        s = self.observer.seen
        return {"records_lost": s["lost"], "records": s["records"], "transfer_records": s["transfers"]}


# --build NAME=DIR: variant "tcpscope@NAME" (any tcpscope variant) runs DIR's
# build of the daemon instead of this one, for a before-and-after in one run.
OTHER_BUILDS = {}


class TcpscopeVariant:
    def __init__(self, tmp, net, variant, tag):
        variant, _, build = variant.partition("@")
        binary = Path(OTHER_BUILDS[build]) / "tcpscope" if build else None
        port = B.free_port()
        self.log = Path(tmp) / f"flows-{tag}.ndjson" if "-log" in variant else None
        cfg = Path(tmp) / f"tcpscope-{tag}.yaml"
        # The shipped default, but for its port, the flow log and ignore_netns.
        text = f"listen: 127.0.0.1:{port}\n"
        if self.log:
            text += f"flow_log: {self.log}\n"
        if variant.startswith("tcpscope-off"):
            text += "transfer_sampling_rate: 0\n"  # transfers off: no per-call hook
        if variant.endswith("-server"):
            text += f"ignore_netns: [{net.cli}]\n"
        elif variant.endswith("-client"):
            text += f"ignore_netns: [{net.srv}]\n"
        cfg.write_text(text)
        self.d = B.Tcpscope(tmp, cfg, port, binary=binary)
        self.pid = self.d.pid

    def counters(self):
        m = self.d.metrics()
        return {k: B.metric_value(m, f"tcpscope_{k}_total") for k in
                ("records", "records_lost", "transfer_records", "transfer_records_lost")}

    def stop(self):
        self.d.stop()
        if self.log:
            self.log.unlink(missing_ok=True)
        return {}


def start_variant(tmp, net, variant, tag):
    return FloorVariant(tmp, variant) if variant in FLOORS else TcpscopeVariant(tmp, net, variant, tag)


def add_build_args(ap):
    ap.add_argument("--build", action="append", default=[], metavar="NAME=DIR",
                    help="another build of tcpscope: variants NAME@... run it (e.g. tcpscope@before)")


def check_variants(script, variants, args):
    """Exits with a message naming an unknown variant; registers --build."""
    for spec in args.build:
        name, _, directory = spec.partition("=")
        if not name or not (Path(directory) / "tcpscope").exists():
            raise SystemExit(f"{script}: --build {spec}: expected NAME=DIR with DIR/tcpscope")
        OTHER_BUILDS[name] = directory
    for v in variants:
        base, _, build = v.partition("@")
        if base not in VARIANTS or (build and (base in FLOORS or build not in OTHER_BUILDS)):
            raise SystemExit(f"{script}: unknown variant {v} (known: {VARIANTS}, and tcpscope variants "
                             f"@NAME of a --build)")


def measured_run(tmp, net, url, args, workload, variant, tag, stats=False):
    """One run of `variant`: attached, warmed up, measured, drained; with
    `stats`, its programs' kernel time and its process's CPU per unit."""
    close = workload != "keepalive"
    v = start_variant(tmp, net, variant, tag)
    try:
        wrk(net, url, 1, args.connections, close)  # warm-up, outside the window
        c0 = v.counters()
        if stats:
            with B.BpfStats():
                s0, cpu0 = prog_stats(v.pid), B.proc_cpu_seconds(v.pid)
                r = wrk(net, url, args.seconds, args.connections, close)
                B.wait_cpu_idle(v.pid, 10)
                s1, cpu1 = prog_stats(v.pid), B.proc_cpu_seconds(v.pid)
        else:
            r = wrk(net, url, args.seconds, args.connections, close)
            B.wait_cpu_idle(v.pid, 10)
        c1 = v.counters()
    finally:
        done = v.stop()
    unit = "conn" if close else "request"
    counts = {k: c1[k] - c0[k] for k in c1}  # the daemon's, over the measured window
    counts.update(done)                      # a floor's, over its life
    r["records_lost"] = counts.get("records_lost", 0) + counts.get("transfer_records_lost", 0)
    if close and "records" in c1:
        # Both ends of each request's connection (the server's only where
        # wrk's namespace is ignored), less the two of the scrape before the
        # run, which closes in the window.
        expected = (1 if variant.endswith(("-server", "-client")) else 2) * r["requests"]
        r["flows_missed"] = max(0, expected - (counts["records"] - 2))
    if stats:
        rows, total = delta(s0, s1, r["seconds"], r["requests"], unit)
        r["cost"] = {"kernel_ns_per_" + unit: total[f"ns_per_{unit}"],
                     "process_us_per_" + unit: round(1e6 * (cpu1 - cpu0) / max(r["requests"], 1), 3),
                     "programs": [x for x in rows if x["runs"]]}
    return r


def ratio_runs(tmp, net, url, args, workload, variants):
    close = workload != "keepalive"
    runs = []
    for i in range(args.rounds):
        for v in variants:
            runs.append({"variant": "baseline", **wrk(net, url, args.seconds, args.connections, close)})
            runs.append({"variant": v, **measured_run(tmp, net, url, args, workload, v, f"{workload}-{v}-{i}")})
            B.log(f"{workload} {v} round {i}: {runs[-1]['rate']:.0f}/s against {runs[-2]['rate']:.0f}/s")
    runs.append({"variant": "baseline", **wrk(net, url, args.seconds, args.connections, close)})
    rates = [r["rate"] for r in runs if r["variant"] == "baseline"]
    noise = {"baseline_runs": len(rates), "mean": round(statistics.mean(rates), 1),
             "spread_pct": round(100 * (max(rates) - min(rates)) / statistics.mean(rates), 2)}
    entry = {"runs": runs, "baseline": noise, "variants": {}}
    for v in variants:
        ratios = [r["rate"] / B.interleaved_baseline(runs, i) for i, r in enumerate(runs) if r["variant"] == v]
        v_runs = [r for r in runs if r["variant"] == v]
        entry["variants"][v] = {"ratios": [round(x, 4) for x in ratios],
                                "median_ratio": round(statistics.median(ratios), 4),
                                "spread": round(max(ratios) - min(ratios), 4),
                                "records_lost": sum(r["records_lost"] for r in v_runs),
                                "flows_missed": sum(r.get("flows_missed", 0) for r in v_runs)
                                if close and not v.startswith("floor") else None,
                                "failed_requests": sum(r["failed"] for r in v_runs)}
    return entry


def print_entry(workload, entry, args):
    unit = "conn" if workload != "keepalive" else "request"
    b = entry.get("baseline")
    if b:
        print(f"\n{workload}: baseline {b['mean']:.0f}/s over {b['baseline_runs']} runs (spread {b['spread_pct']} %)")
        for v, e in entry["variants"].items():
            print(f"  {v:<20} median {e['median_ratio']:.3f}, spread {e['spread']:.3f} ("
                  + ", ".join(f"{x:.3f}" for x in e["ratios"]) + f"); records lost {e['records_lost']}"
                  + (f", flows missed {e['flows_missed']}" if e["flows_missed"] is not None else ""))
    for v, c in entry.get("cost", {}).items():
        print(f"  {v:<20} kernel {c[f'kernel_ns_per_{unit}'] / 1000:.2f} µs per {unit}, its process "
              f"{c[f'process_us_per_{unit}']:.2f} µs per {unit} (bpf_stats on, {c['rate']:.0f}/s)")
        for row in c["programs"]:
            print(f"      {row['program']:<26} {row[f'runs_per_{unit}']:>7} runs/{unit} {row['ns_per_run']:>7} ns/run")


def summary(paths):
    """Several runs' results, side by side: per workload and variant, each
    run's median ratio, the median of those and their spread; the CPU per
    unit of each run's statistics run, and their median."""
    import json
    runs = [json.loads(Path(p).read_text()) for p in paths]
    for workload in WORKLOADS:
        entries = [r["workloads"].get(workload) for r in runs]
        entries = [e for e in entries if e and "variants" in e]
        if not entries:
            continue
        unit = "conn" if workload != "keepalive" else "request"
        print(f"\n{workload}: {len(entries)} runs, baselines spread "
              + ", ".join(f"{e['baseline']['spread_pct']:.1f} %" for e in entries))
        rows = []
        for v in entries[0]["variants"]:
            meds = [e["variants"][v]["median_ratio"] for e in entries if v in e["variants"]]
            costs = [e["cost"][v] for e in entries if v in e.get("cost", {})]
            kernel = [c[f"kernel_ns_per_{unit}"] / 1000 for c in costs]
            proc = [c[f"process_us_per_{unit}"] for c in costs]
            rows.append([v, ", ".join(f"{m:.3f}" for m in meds), f"{statistics.median(meds):.3f}",
                         f"{max(meds) - min(meds):.3f}",
                         f"{statistics.median(kernel):.2f}" if kernel else "", f"{statistics.median(proc):.2f}" if proc else "",
                         sum(e["variants"][v]["records_lost"] for e in entries if v in e["variants"]),
                         "—" if entries[0]["variants"][v]["flows_missed"] is None else
                         sum(e["variants"][v]["flows_missed"] for e in entries if v in e["variants"])])
        print(B.fmt_table(["variant", "median ratio of each run", "median", "spread",
                           f"kernel µs/{unit}", f"process µs/{unit}", "records lost", "flows missed"], rows))


def main():
    if len(sys.argv) > 2 and sys.argv[1] == "--summary":
        return summary(sys.argv[2:])
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--workloads", default=",".join(WORKLOADS))
    ap.add_argument("--variants", help="instead of each workload's own (see above)")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--seconds", type=float, default=8)
    ap.add_argument("--connections", type=int, default=64)
    ap.add_argument("--server-share", type=float, default=0.5, help="close-server: nginx's share of one core")
    ap.add_argument("--no-cost", action="store_true", help="skip the bpf_stats runs")
    ap.add_argument("--cost-only", action="store_true", help="only the bpf_stats runs")
    add_build_args(ap)
    ap.add_argument("--out")
    args = ap.parse_args()
    if os.geteuid() != 0:
        raise SystemExit("edge.py: needs root")
    workloads = args.workloads.split(",")
    if set(workloads) - set(WORKLOADS):
        raise SystemExit(f"edge.py: unknown workloads {sorted(set(workloads) - set(WORKLOADS))}")
    chosen = args.variants.split(",") if args.variants else None
    check_variants("edge.py", chosen or [], args)
    tmp = B.tmpdir("edge")
    result = {"benchmark": "edge", "seconds_per_run": args.seconds, "rounds": args.rounds,
              "connections": args.connections, "object_bytes": SIZE, "server_share": args.server_share,
              "workloads": {}}
    net = quota = None
    try:
        net = B.NetPair()
        for workload in workloads:
            if workload == "close-server":
                quota = CpuQuota.create(args.server_share)
                if quota is None:
                    B.log("close-server: no cpu controller mounted: skipped")
                    result["workloads"][workload] = {"skipped": "no cpu controller"}
                    continue
            server = EdgeNginx(net, tmp, quota)
            variants = chosen or WORKLOADS[workload]
            try:
                entry = {}
                if not args.cost_only:
                    entry = ratio_runs(tmp, net, server.url, args, workload, variants)
                if not args.no_cost:
                    entry["cost"] = {}
                    for v in variants:
                        r = measured_run(tmp, net, server.url, args, workload, v, f"{workload}-{v}-cost", stats=True)
                        entry["cost"][v] = {"rate": round(r["rate"]), **r["cost"]}
                result["workloads"][workload] = entry
                print_entry(workload, entry, args)
            finally:
                server.close()
                if quota:
                    quota.close()
                    quota = None
    finally:
        if net:
            net.close()
    B.write_result("edge", result, args.out)


if __name__ == "__main__":
    main()
