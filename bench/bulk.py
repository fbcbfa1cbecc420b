#!/usr/bin/env python3
"""Bulk throughput: iperf3 over a veth between two network namespaces, one
stream and 8 parallel streams, with nothing attached (baseline) and with
tcpscope attached (the churn benchmark's config: 50-rule policy on a cgroup
holding iperf3, 1M-prefix ASN file, flow log on).

Each repetition runs baseline and tcpscope (alternating which goes first)
for both stream counts, iperf3's client and server pinned to different CPUs;
the reported ratio is the median over repetitions of tcpscope / the baseline of
the same repetition. The daemon's start-up (ASN load) is outside every
measured window.

  sudo bench/bulk.py [--seconds 10] [--reps 3] [--out FILE]
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


def iperf(net, seconds, streams):
    # iperf3 (3.12) runs all streams in one thread per side. Left to the
    # scheduler on 2 CPUs, client and server sometimes share one and the
    # 8-stream rate flips between ~16 and ~21 Gbit/s from run to run (seen
    # with and without tcpscope); pinning them to different CPUs (-A) makes
    # the runs comparable.
    pin = ["-A", "0,1"] if (os.cpu_count() or 1) >= 2 else []
    out = net.run(net.cli, "iperf3", "-c", net.srv_v4, "-p", "5201", "-t", seconds, "-P", streams,
                  *pin, "-J", timeout=seconds + 60).stdout
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
    ap.add_argument("--out")
    args = ap.parse_args()
    if os.geteuid() != 0:
        raise SystemExit("bulk.py: needs root")
    tmp = B.tmpdir("bulk")
    cg = B.Cgroup()
    net = None
    runs = []
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
            order = STREAMS if rep % 2 == 0 else tuple(reversed(STREAMS))
            variants = ("baseline", "tcpscope") if rep % 2 == 0 else ("tcpscope", "baseline")
            for variant in variants:
                if variant == "baseline":
                    for streams in order:
                        r = iperf(net, args.seconds, streams)
                        runs.append({"rep": rep, "variant": "baseline", "streams": streams, **r,
                                     "loadavg_1m": B.loadavg()[0]})
                        B.log(f"rep {rep} baseline -P {streams}: {r['gbit_per_s']} Gbit/s")
                    continue
                port = B.free_port()
                cfg = B.write_config(tmp / "tcpscope.yaml", port=port, flow_log=tmp / "flows.ndjson",
                                     prefix_file=pfx, cgroup=cg.path, rules=args.rules)
                d = B.Tcpscope(tmp, cfg, port)
                try:
                    B.wait_cpu_idle(d.pid)  # the start (1M prefixes) is not part of the run
                    for streams in order:
                        cpu0 = B.proc_cpu_seconds(d.pid)
                        r = iperf(net, args.seconds, streams)
                        cpu = B.proc_cpu_seconds(d.pid) - cpu0
                        runs.append({"rep": rep, "variant": "tcpscope", "streams": streams, **r,
                                     "daemon_cpu_s": round(cpu, 3), "loadavg_1m": B.loadavg()[0]})
                        B.log(f"rep {rep} tcpscope -P {streams}: {r['gbit_per_s']} Gbit/s")
                    lost = d.metric("tcpscope_records_lost_total")
                finally:
                    d.stop()
                runs[-1]["records_lost_total"] = lost
    finally:
        if net:
            net.close()
        cg.close()

    summary = []
    for streams in STREAMS:
        base = {r["rep"]: r["gbit_per_s"] for r in runs if r["variant"] == "baseline" and r["streams"] == streams}
        with_ = {r["rep"]: r["gbit_per_s"] for r in runs if r["variant"] == "tcpscope" and r["streams"] == streams}
        ratios = [with_[k] / base[k] for k in base if k in with_ and base[k] > 0]
        b = list(base.values())
        summary.append({"streams": streams, "baseline_median_gbit_s": round(statistics.median(b), 2),
                        "tcpscope_median_gbit_s": round(statistics.median(with_.values()), 2),
                        "median_ratio": round(statistics.median(ratios), 4),
                        "ratios": [round(x, 4) for x in ratios],
                        "baseline_spread_pct": round(100 * (max(b) - min(b)) / statistics.median(b), 1)})
    print(f"bulk throughput: iperf3 over veth, {args.seconds:g} s per run, {args.reps} repetitions")
    print(B.fmt_table(["streams", "baseline Gbit/s", "tcpscope Gbit/s", "median ratio", "baseline spread %"],
                      [[s["streams"], s["baseline_median_gbit_s"], s["tcpscope_median_gbit_s"],
                        f"{s['median_ratio']:.3f}", s["baseline_spread_pct"]] for s in summary]))
    B.write_result("bulk", {"benchmark": "bulk", "seconds_per_run": args.seconds, "reps": args.reps,
                            "asn_prefixes": args.prefixes, "policy_rules": args.rules,
                            "summary": summary, "runs": runs}, args.out)


if __name__ == "__main__":
    main()
