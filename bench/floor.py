#!/usr/bin/env python3
"""The floor: how close to the baseline churn rate can any tool that tracks
every flow the way the issues ask (the state-change tracepoint, per-socket
SK_STORAGE, one record per flow through a ring buffer) get on this host?

Loads, one at a time, the programs of bench/floor.bpf.c, each the least a
tool can run at one step of that design, and runs the loadgen churn of
bench/churn.py with each, between baselines:

  dispatch         the state-change tracepoint with an empty program
  storage          + SK_STORAGE created at the first SYN, read at CLOSE
  record           + a 256-byte record per flow through a ring buffer, drained
                   every 100 ms (the least a flow-record tool does)
  hash             `record` with a preallocated hash keyed by the socket in
                   place of SK_STORAGE (tcplife's way; ruled out by issue 2
                   because it can fill up): the storage's own share
  transfers        the transfer floor: `record` plus tcp_sendmsg_locked and
                   sk_data_ready doing only what a transfer's bounds need
                   (a send starts at a write with nothing outstanding after
                   data came in, a receive at an arrival after a send); an
                   ended transfer is a 128-byte record, the open ones ride in
                   a 512-byte close record, as tcpscope's do
  tcpscope-default tcpscope with the shipped default config (no rules, no flow log)
  tcpscope-default-log  the same with the flow log on (flows, and the transfers
                   of the flows the kernel follows: one in 16, the default)
  tcpscope-default-every, tcpscope-default-log-every
                   the same two with every flow's transfers followed
                   (transfer_sampling_rate: 1)
  tcpscope-default-server, tcpscope-default-log-server
                   the same two with the load generator's namespace left alone
                   (ignore_netns): only the server's ends, as on an edge server
  tcpscope-nolog   tcpscope as in churn.py (50-rule policy, 1M prefixes)
  tcpscope         the same with the flow log on, transfer lines included (the
                   daemon's CPU per line written is printed beside it)

Each variant's ratio is to the mean of the baselines either side of it; with
--reps > 1 the mean ratio and its 95 % interval are given. Before them, the
CPU each variant costs per connection, which the baselines' noise does not
move: one more run each with kernel.bpf_stats_enabled=1 (two clock reads per
program run, so not used for the ratios) gives its programs' kernel time per
connection, and the loader's or daemon's own CPU per connection beside it.

  bench/floor.py [--seconds 20] [--reps 2] [--variants a,b,...] [--no-cost] [--out FILE]

Needs root. Prints a table, writes JSON (bench/results/floor.json by default).
"""
import argparse
import os
import json
import signal
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import benchlib as B  # noqa: E402
import churn as C  # noqa: E402
from bpf_cost import delta, prog_stats  # noqa: E402

FLOOR_VARIANTS = ["dispatch", "storage", "record", "hash", "transfers"]
TCPSCOPE_VARIANTS = ["tcpscope-default", "tcpscope-default-log", "tcpscope-nolog", "tcpscope"]
# Run when named in --variants.
MORE_TCPSCOPE_VARIANTS = ["tcpscope-default-every", "tcpscope-default-log-every", "tcpscope-default-server",
                          "tcpscope-default-log-server"]
ALL_VARIANTS = FLOOR_VARIANTS + TCPSCOPE_VARIANTS


def floor_binary():
    p = B.BUILD / "tcpscope-bench-floor"
    if not p.exists():
        raise SystemExit(f"bench: {p} missing: build first (cmake --build {B.BUILD})")
    return p


class FloorObserver(C.Observer):
    """bench/floor.c holding one program of floor.bpf.c."""

    def __init__(self, ctx, variant):
        self.ctx, self.variant, self.name = ctx, variant, variant

    def start(self):
        ready = self.ctx.tmp / f"floor-{self.variant}.ready"
        ready.unlink(missing_ok=True)
        self.err_path = self.ctx.tmp / f"floor-{self.variant}.err"
        self.err = open(self.err_path, "w")
        self.p = subprocess.Popen([floor_binary(), self.variant, ready], stdout=subprocess.PIPE,
                                  stderr=self.err, text=True)
        self.pid = self.p.pid
        B.wait_for(lambda: ready.exists() or self.p.poll() is not None, 30, f"floor {self.variant} attach")
        if self.p.poll() is not None:
            raise RuntimeError(f"floor {self.variant} exited: {self.err_path.read_text()[-3000:]}")

    def drained(self):
        time.sleep(0.3)  # the loader drains every 100 ms

    def stop(self):
        if not hasattr(self, "p"):
            return
        self.p.send_signal(signal.SIGINT)
        out, _ = self.p.communicate(timeout=30)
        self.err.close()
        if self.p.returncode != 0:
            raise RuntimeError(f"floor {self.variant} failed ({self.p.returncode}): "
                               f"{self.err_path.read_text()[-3000:]}")
        self.seen = json.loads(out.strip().splitlines()[-1])

    def result(self, connections):
        s = self.seen
        expected = 2 * connections
        if self.variant in ("record", "hash", "transfers"):
            recorded = s["records"]
        elif self.variant == "storage":
            recorded = s["closed"]
        else:
            recorded = None  # the empty program keeps nothing
        r = {"loader": s, "flows_expected": expected, "records_lost_total": s["lost"],
             "transfer_records": s["transfers"]}
        if recorded is not None:
            r.update(flows_recorded=recorded, flows_missed=max(0, expected - recorded))
        else:
            r.update(flows_recorded=0, flows_missed=0)
        return r


def make_observer(ctx, name):
    if name in FLOOR_VARIANTS:
        return FloorObserver(ctx, name)
    if name in TCPSCOPE_VARIANTS + MORE_TCPSCOPE_VARIANTS:
        return C.make_observer(ctx, name)[0]
    raise SystemExit(f"unknown variant {name}")


def cost_run(ctx, name):
    """Kernel time of the variant's programs and its process's CPU, per
    connection (both ends), with BPF statistics on."""
    observer = make_observer(ctx, name)
    try:
        observer.start()
        with B.BpfStats():
            s0, cpu0 = prog_stats(observer.pid), B.proc_cpu_seconds(observer.pid)
            r = B.churn(ctx.net, ctx.server, ctx.args.seconds, ctx.args.threads)
            observer.drained()
            s1, cpu1 = prog_stats(observer.pid), B.proc_cpu_seconds(observer.pid)
    finally:
        observer.stop()
    rows, total = delta(s0, s1, r["seconds"], r["connections"], "conn")
    return {"variant": name, "rate": r["rate"], "connections": r["connections"],
            "kernel_ns_per_conn": total["ns_per_conn"],
            "process_us_per_conn": round(1e6 * (cpu1 - cpu0) / r["connections"], 3) if r["connections"] else None,
            "programs": [x for x in rows if x["runs"]]}


def ratios(runs):
    """Each variant run's rate over the mean of the baselines either side."""
    out = {}
    for i, r in enumerate(runs):
        if r["variant"] == "baseline":
            continue
        ref = B.interleaved_baseline(runs, i)
        r["baseline_ref_rate"] = round(ref, 1)
        r["ratio"] = round(r["rate"] / ref, 4)
        out.setdefault(r["variant"], []).append(r)
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seconds", type=float, default=20)
    ap.add_argument("--reps", type=int, default=2)
    ap.add_argument("--threads", type=int, default=4, help="parallel clients")
    ap.add_argument("--server-threads", type=int, default=2)
    ap.add_argument("--variants", default=",".join(ALL_VARIANTS))
    ap.add_argument("--prefixes", type=int, default=1000000, help="tcpscope's pfx2as file")
    ap.add_argument("--rules", type=int, default=50, help="tcpscope's cc_policy rules")
    ap.add_argument("--no-cost", action="store_true", help="skip the BPF-statistics runs")
    ap.add_argument("--out", help="JSON output (default bench/results/floor.json)")
    args = ap.parse_args()
    args.load = "loadgen"
    if os.geteuid() != 0:
        raise SystemExit("floor.py: needs root (network namespaces, BPF)")
    names = [v for v in args.variants.split(",") if v and v != "baseline"]

    ctx = C.Ctx()
    ctx.args = args
    ctx.tmp = B.tmpdir("floor")
    ctx.cgroup = B.Cgroup()
    ctx.net = None
    runs, costs = [], []
    try:
        floor_binary()
        B.tcpscope_binary()
        B.loadgen_binary()
        ctx.net = B.NetPair(cgroup=ctx.cgroup)
        if {"tcpscope-nolog", "tcpscope"} & set(names):
            ctx.pfx2as = B.write_pfx2as(ctx.tmp / "pfx2as.tsv", args.prefixes, own=ctx.net)
        ctx.server = C.ChurnServerWrap(ctx)
        B.churn(ctx.net, ctx.server, min(2.0, args.seconds), args.threads)  # warm-up
        if not args.no_cost:
            costs = [cost_run(ctx, name) for name in names]
        runs.append(C.measured_run(ctx, "baseline"))
        for rep in range(args.reps):
            for name in names:
                runs.append(C.measured_run(ctx, name, make_observer(ctx, name)))
                runs.append(C.measured_run(ctx, "baseline"))
    finally:
        if ctx.net:
            ctx.net.close()
        ctx.cgroup.close()

    noise = B.baseline_noise([r["rate"] for r in runs if r["variant"] == "baseline"])
    mean = noise["mean"]
    by_variant = ratios(runs)
    rows, summary = [], []
    for name in names:
        rs = by_variant.get(name, [])
        if not rs:
            continue
        rx = [r["ratio"] for r in rs]
        m = statistics.mean(rx)
        ci = B.ci95(rx, digits=4)
        # Extra CPU per connection the variant costs: the baseline's CPU time
        # per connection is (2 cores / baseline rate); a ratio q leaves the
        # machine busy for 1/q of it.
        extra_us = 2e6 / mean * (1 / m - 1)
        missed = sum(r["flows_missed"] for r in rs)
        expected = sum(r["flows_expected"] for r in rs)
        s = {"variant": name, "ratios": rx, "mean_ratio": round(m, 4),
             "ci95": ci,
             "extra_us_per_conn": round(extra_us, 2), "flows_missed": missed, "flows_expected": expected,
             "records_lost": sum(r.get("records_lost_total") or 0 for r in rs)}
        lines = sum(r.get("flow_log_lines") or 0 for r in rs)
        if lines:
            # The daemon's whole CPU (ring, pipeline, metrics, the log) over
            # the lines it wrote, flows and transfers.
            s["flow_log_lines"] = lines
            s["daemon_cpu_us_per_line"] = round(1e6 * sum(r["observer_cpu_s"] for r in rs) / lines, 3)
        summary.append(s)
        rows.append([name, B.ratio_text(noise, m), f"{ci[0]:.3f}–{ci[1]:.3f}" if ci and not noise["invalid"] else "",
                     f"{extra_us:.2f}" if not noise["invalid"] else "invalid", f"{missed}/{expected}" if name != "dispatch" else "n/a",
                     s.get("daemon_cpu_us_per_line", "")])
    if costs:
        print("CPU per connection (both ends; bpf_stats on, so a little above the ratio runs' cost):")
        print(B.fmt_table(["variant", "conn/s", "kernel µs/conn", "process µs/conn", "programs (ns/conn)"],
                          [[c["variant"], f"{c['rate']:.0f}", f"{c['kernel_ns_per_conn'] / 1000:.2f}",
                            f"{c['process_us_per_conn']:.2f}",
                            ", ".join(f"{p['program']} {p['ns_per_conn']:.0f}" for p in c["programs"][:6])]
                           for c in costs]))
    print(f"floor (loadgen churn): {args.threads} clients, {args.seconds:g} s per run, {args.reps} reps, "
          f"baseline {noise['mean']:.0f} conn/s (stdev {noise['stdev_pct']}% over {noise['baseline_runs']} runs)")
    print(B.fmt_table(["variant", "ratio", "95% CI", "rate cost µs/conn", "missed/expected", "daemon µs/line"], rows))
    if noise["invalid"]:
        print(f"RUN INVALID: {noise['invalid']}; no ratio is printed.")
    B.write_result("floor", {"benchmark": "floor", "seconds_per_run": args.seconds, "reps": args.reps,
                             "client_threads": args.threads, "server_threads": args.server_threads,
                             "request_bytes": 100, "response_bytes": 1000, "baseline_noise": noise,
                             "variants": summary, "runs": runs, "cpu_per_connection": costs}, args.out)


if __name__ == "__main__":
    main()
