#!/usr/bin/env python3
"""Bulk throughput: iperf3 over a veth between two network namespaces, one
stream and 8 parallel streams, with nothing attached (baseline) and with
tcpscope attached (the churn benchmark's config: 50-rule policy on a cgroup
holding iperf3, 1M-prefix ASN file, flow log on).

Each repetition runs baseline and tcpscope (alternating which goes first)
for both stream counts and each congestion control of --cc (the machine's
default and CUBIC), iperf3's client and server pinned to different CPUs;
the reported ratio is the median over repetitions of tcpscope / the baseline of
the same repetition. The daemon's start-up (ASN load) is outside every
measured window.

  bench/bulk.py [--seconds 10] [--reps 3] [--cc default,cubic] [--out FILE]
"""
import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import benchlib as B  # noqa: E402

STREAMS = (1, 8)


def iperf(net, seconds, streams, cc=None):
    # iperf3 (3.12) runs all streams in one thread per side. Left to the
    # scheduler on 2 CPUs, client and server sometimes share one and the
    # 8-stream rate flips between ~16 and ~21 Gbit/s from run to run (seen
    # with and without tcpscope); pinning them to different CPUs (-A) makes
    # the runs comparable.
    pin = ["-A", "0,1"] if (os.cpu_count() or 1) >= 2 else []
    # -C sets TCP_CONGESTION on the client's sockets (the policy's
    # app_override: respect keeps it), the server's follow the machine default.
    cc_args = ["-C", cc] if cc else []
    out = net.run(net.cli, "iperf3", "-c", net.srv_v4, "-p", "5201", "-t", seconds, "-P", streams,
                  *pin, *cc_args, "-J", timeout=seconds + 60).stdout
    j = json.loads(out)
    s = j["end"]["sum_received"]
    return {"gbit_per_s": round(8 * s["bytes"] / s["seconds"] / 1e9, 3),
            "retransmits": j["end"]["sum_sent"].get("retransmits", 0)}


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seconds", type=float, default=10)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--prefixes", type=int, default=1000000)
    ap.add_argument("--rules", type=int, default=50)
    # BBR paces every stream with its own timer: on a veth (no bottleneck but
    # the CPUs) 8 BBR streams reach ~19 Gbit/s and vary ±10 % run to run,
    # 8 CUBIC streams ~64 Gbit/s. Both are measured: the machine's default
    # (bbr here) is what an operator runs, CUBIC puts the most data per second
    # through tcpscope's per-data programs.
    ap.add_argument("--cc", default="default,cubic",
                    help="comma-separated: 'default' (the machine's) and/or names for iperf3 -C")
    ap.add_argument("--out")
    args = ap.parse_args()
    if os.geteuid() != 0:
        raise SystemExit("bulk.py: needs root")
    tmp = B.tmpdir("bulk")
    cg = B.Cgroup()
    net = None
    runs = []
    ccs = [c.strip() for c in args.cc.split(",") if c.strip()]
    default_cc = Path("/proc/sys/net/ipv4/tcp_congestion_control").read_text().strip()
    ccs = [default_cc if c == "default" else c for c in ccs]
    ccs = list(dict.fromkeys(ccs))
    cases = [(cc, streams) for cc in ccs for streams in STREAMS]
    try:
        pfx = B.write_pfx2as(tmp / "pfx2as.tsv", args.prefixes)
        net = B.NetPair(cgroup=cg)
        net.spawn(net.srv, "iperf3", "-s", "-B", net.srv_v4, "-p", "5201")
        time.sleep(0.5)
        iperf(net, 1, 1)  # warm-up
        for rep in range(args.reps):
            # Alternate which variant goes first and the order of the stream
            # counts, so neither variant always runs right after the daemon
            # started or right after the other's heaviest run.
            order = cases if rep % 2 == 0 else list(reversed(cases))
            variants = ("baseline", "tcpscope") if rep % 2 == 0 else ("tcpscope", "baseline")
            for variant in variants:
                if variant == "baseline":
                    for cc, streams in order:
                        r = iperf(net, args.seconds, streams, cc)
                        runs.append({"rep": rep, "variant": "baseline", "cc": cc, "streams": streams, **r,
                                     "loadavg_1m": B.loadavg()[0]})
                        B.log(f"rep {rep} baseline {cc} -P {streams}: {r['gbit_per_s']} Gbit/s")
                    continue
                port = B.free_port()
                cfg = B.write_config(tmp / "tcpscope.yaml", port=port, flow_log=tmp / "flows.ndjson",
                                     prefix_file=pfx, cgroup=cg.path, rules=args.rules)
                d = B.Tcpscope(tmp, cfg, port)
                try:
                    B.wait_cpu_idle(d.pid)  # the start (1M prefixes) is not part of the run
                    for cc, streams in order:
                        cpu0 = B.proc_cpu_seconds(d.pid)
                        r = iperf(net, args.seconds, streams, cc)
                        cpu = B.proc_cpu_seconds(d.pid) - cpu0
                        runs.append({"rep": rep, "variant": "tcpscope", "cc": cc, "streams": streams, **r,
                                     "daemon_cpu_s": round(cpu, 3), "loadavg_1m": B.loadavg()[0]})
                        B.log(f"rep {rep} tcpscope {cc} -P {streams}: {r['gbit_per_s']} Gbit/s")
                    lost = d.metric("tcpscope_records_lost_total")
                finally:
                    d.stop()
                runs[-1]["records_lost_total"] = lost
    finally:
        if net:
            net.close()
        cg.close()

    summary = []
    for cc, streams in cases:
        def of(variant):
            return {r["rep"]: r["gbit_per_s"] for r in runs
                    if r["variant"] == variant and r["streams"] == streams and r["cc"] == cc}
        base, with_ = of("baseline"), of("tcpscope")
        ratios = [with_[k] / base[k] for k in base if k in with_ and base[k] > 0]
        b = list(base.values())
        summary.append({"cc": cc, "streams": streams, "baseline_median_gbit_s": round(statistics.median(b), 2),
                        "tcpscope_median_gbit_s": round(statistics.median(with_.values()), 2),
                        "median_ratio": round(statistics.median(ratios), 4),
                        "mean_ratio": round(statistics.mean(ratios), 4),
                        "ratio_ci95": B.ci95(ratios),
                        "ratios": [round(x, 4) for x in ratios],
                        "baseline_spread_pct": round(100 * (max(b) - min(b)) / statistics.median(b), 1)})
    print(f"bulk throughput: iperf3 over veth, {args.seconds:g} s per run, {args.reps} repetitions")
    def ci(s):
        return f"{s['ratio_ci95'][0]:.3f}..{s['ratio_ci95'][1]:.3f}" if s["ratio_ci95"] else "-"
    print(B.fmt_table(["cc", "streams", "baseline Gbit/s", "tcpscope Gbit/s", "median ratio", "mean ratio, 95% CI",
                       "baseline spread %"],
                      [[s["cc"], s["streams"], s["baseline_median_gbit_s"], s["tcpscope_median_gbit_s"],
                        f"{s['median_ratio']:.3f}", f"{s['mean_ratio']:.3f} ({ci(s)})", s["baseline_spread_pct"]]
                       for s in summary]))
    B.write_result("bulk", {"benchmark": "bulk", "seconds_per_run": args.seconds, "reps": args.reps,
                            "asn_prefixes": args.prefixes, "policy_rules": args.rules,
                            "summary": summary, "runs": runs}, args.out)


if __name__ == "__main__":
    main()
