#!/usr/bin/env python3
"""Kernel-side cost of tcpscope's BPF programs, per program, under connection
churn and under bulk transfer: `kernel.bpf_stats_enabled=1` (on for this
script only; it adds two clock reads per program run, so the other benchmarks
leave it off) and `bpftool prog show` run_cnt / run_time_ns deltas.

  bench/bpf_cost.py [--seconds 20] [--out FILE]

tcpscope runs with the churn benchmark's config (50-rule policy on a cgroup
holding the load generator and the server, 1M-prefix ASN file, no flow log).
"""
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import benchlib as B  # noqa: E402


def prog_stats(pid):
    out = {}
    for p in B.bpf_programs_of(pid).values():
        out[p["id"]] = {"name": p["name"], "type": p["type"], "run_cnt": p.get("run_cnt", 0),
                        "run_time_ns": p.get("run_time_ns", 0), "recursion_misses": p.get("recursion_misses", 0)}
    return out


def delta(before, after, seconds, units, unit_name):
    rows = []
    for pid_, a in after.items():
        b = before.get(pid_, {"run_cnt": 0, "run_time_ns": 0})
        cnt = a["run_cnt"] - b["run_cnt"]
        ns = a["run_time_ns"] - b["run_time_ns"]
        rows.append({"program": a["name"], "type": a["type"], "runs": cnt,
                     "runs_per_s": round(cnt / seconds), f"runs_per_{unit_name}": round(cnt / units, 3) if units else None,
                     "ns_per_run": round(ns / cnt, 1) if cnt else None,
                     "recursion_misses": a["recursion_misses"] - b.get("recursion_misses", 0),
                     "cpu_pct_core": round(100 * ns / 1e9 / seconds, 3),
                     f"ns_per_{unit_name}": round(ns / units, 1) if units else None})
    rows.sort(key=lambda r: -r["cpu_pct_core"])
    total_ns = sum((after[k]["run_time_ns"] - before.get(k, {"run_time_ns": 0})["run_time_ns"]) for k in after)
    return rows, {"cpu_pct_core": round(100 * total_ns / 1e9 / seconds, 3),
                  f"ns_per_{unit_name}": round(total_ns / units, 1) if units else None}


def print_rows(title, rows, total, unit_name):
    print(title)
    table = [[r["program"], r["runs_per_s"], r[f"runs_per_{unit_name}"], r["ns_per_run"], r[f"ns_per_{unit_name}"],
              r["cpu_pct_core"]] for r in rows]
    table.append(["total", "", "", "", total[f"ns_per_{unit_name}"], total["cpu_pct_core"]])
    print(B.fmt_table(["program", "runs/s", f"runs/{unit_name}", "ns/run", f"ns/{unit_name}", "% of a core"], table))


def main():
    args = B.parse_root_churn_args("bpf_cost.py", __doc__, seconds=20)
    result = {"benchmark": "bpf_cost", "seconds_per_run": args.seconds}
    with B.churn_with_tcpscope("bpfcost", args) as (tmp, net, server, d):
        iperf = None
        try:
            with B.BpfStats():
                B.churn(net, server, 1, args.threads)  # warm-up
                s0 = prog_stats(d.pid)
                r = B.churn(net, server, args.seconds, args.threads)
                s1 = prog_stats(d.pid)
                rows, total = delta(s0, s1, r["seconds"], r["connections"], "conn")
                result["churn"] = {"connections_per_s": round(r["rate"]), "programs": rows, "total": total}
                print_rows(f"churn: {r['rate']:.0f} conn/s (2 sockets per connection, both on this host)",
                           rows, total, "conn")

                iperf = net.spawn(net.srv, "iperf3", "-s", "-B", net.srv_v4, "-p", "5201")
                time.sleep(0.5)
                for streams in (1, 8):
                    s0 = prog_stats(d.pid)
                    out = net.run(net.cli, "iperf3", "-c", net.srv_v4, "-p", "5201", "-t", args.seconds,
                                  "-P", streams, "-J", timeout=args.seconds + 60).stdout
                    s1 = prog_stats(d.pid)
                    j = json.loads(out)
                    gbytes = j["end"]["sum_received"]["bytes"] / 1e9
                    secs = j["end"]["sum_received"]["seconds"]
                    rows, total = delta(s0, s1, secs, gbytes, "GB")
                    result[f"bulk_P{streams}"] = {"gbit_per_s": round(8 * gbytes / secs, 2), "programs": rows,
                                                  "total": total}
                    print()
                    print_rows(f"bulk, iperf3 -P {streams}: {8 * gbytes / secs:.1f} Gbit/s", rows, total, "GB")
        finally:
            if iperf:
                B.stop_process(iperf)
    B.write_result("bpf_cost", result, args.out)


if __name__ == "__main__":
    main()
