#!/usr/bin/env python3
"""Prints the Markdown tables of bench/README.md from bench/results/*.json.

  bench/report.py [RESULTS_DIR]
"""
import json
import sys
from pathlib import Path

import benchlib as B

RESULTS = Path(sys.argv[1]) if len(sys.argv) > 1 else Path(__file__).resolve().parent / "results"


def load(name):
    p = RESULTS / f"{name}.json"
    return json.loads(p.read_text()) if p.exists() else None


def table(headers, rows):
    out = ["| " + " | ".join(headers) + " |", "| " + " | ".join("---" for _ in headers) + " |"]
    out += ["| " + " | ".join(str(c) for c in r) + " |" for r in rows]
    return "\n".join(out)


def machine(d):
    m = d["machine"]
    loads = [r[k] for r in d.get("runs", []) for k in ("loadavg_1m_before", "loadavg_1m") if k in r]
    load = (f"1-minute load average {min(loads):.1f}–{max(loads):.1f} before its runs" if loads else
            f"load average {m['loadavg_at_start'][0]:.2f} at start / {m['loadavg_at_end'][0]:.2f} at end")
    return f"{m['time']}, kernel {m['kernel']}, {m['cpus']} CPUs, default CC {m['default_cc']}, {load}"


def noise_of(d):
    """The baseline's noise and validity, judged by today's rule
    (benchlib.baseline_noise) whenever the result was written."""
    return B.baseline_noise([r["rate"] for r in d["runs"] if r["variant"] == "baseline"])


def churn(d, title):
    n = noise_of(d)
    print(f"### {title}\n")
    print(f"{d['client_threads']} clients, {d['seconds_per_run']:g} s per run, {machine(d)}. Baseline "
          f"{n['mean']:.0f} conn/s over {n['baseline_runs']} interleaved runs, stdev {n['stdev_pct']}% "
          f"(min {n['min_ratio']:.3f}, max {n['max_ratio']:.3f} of their mean).\n")
    if n["invalid"]:
        print(f"**Run invalid**: {n['invalid']}. Its ratios are not shown.\n")
    rows = []
    for v in d["variants"]:
        if "skipped" in v:
            rows.append([v["variant"], "skipped: " + v["skipped"], "", "", "", "", ""])
            continue
        lost = v.get("records_lost_total", v.get("lost_reported", "—"))
        rows.append([f"`{v['variant']}`", f"{v['rate']:.0f}", f"**{B.ratio_text(n, v['ratio'])}**",
                     f"{v['observer_cpu_s']:.2f} ({v['observer_cpu_pct_core']:.1f}% of a core)",
                     f"{v['peak_rss_kib'] / 1024:.1f}",
                     f"{v['flows_missed']} / {v['flows_expected']} ({100 * v['missed_fraction']:.2f}%)", lost])
    print(table(["variant", "conn/s", "ratio to baseline", "observer CPU s", "peak RSS MiB",
                 "flows missed / expected", "lost (tool's own count)"], rows))
    for v in d["variants"]:
        if v["variant"].startswith("tcpscope") and "skipped" not in v and not n["invalid"]:
            print(f"\n`{v['variant']}`: {v['flows_per_s']:.0f} flows/s, daemon user+system CPU "
                  f"{v['cpu_pct_core_per_10k_flows_s']:.2f}% of a core per 10k flows/s.", end="")
    print("\n")


def churn_runs(files):
    """Ratios of every churn run kept in the results directory, side by side."""
    runs = [(f.stem, json.loads(f.read_text())) for f in files]
    names = []
    for _, d in runs:
        for v in d["variants"]:
            if v["variant"] not in names:
                names.append(v["variant"])
    print("### Connection churn (loadgen), every run\n")
    def head(stem, d):
        loads = [r["loadavg_1m_before"] for r in d["runs"]]
        return (f"{stem} (started {d['machine']['time'][11:16]}Z, load {min(loads):.1f}–{max(loads):.1f}, "
                f"baseline stdev {noise_of(d)['stdev_pct']}%)")
    headers = ["variant"] + [head(stem, d) for stem, d in runs]
    rows = []
    for n in names:
        row = [f"`{n}`"]
        for _, d in runs:
            v = next((x for x in d["variants"] if x["variant"] == n), None)
            row.append("—" if not v or "skipped" in v else
                       f"{B.ratio_text(noise_of(d), v['ratio'])} (missed {v['flows_missed']})")
        rows.append(row)
    print(table(headers, rows))
    print()


def bulk(d):
    print(f"### Bulk throughput\n\n{d['reps']} repetitions of {d['seconds_per_run']:g} s, {machine(d)}.\n")
    def ci(s):
        c = s.get("ratio_ci95")
        return f"{s['mean_ratio']:.3f} ({c[0]:.3f}..{c[1]:.3f})" if c else "-"
    print(table(["cc", "streams", "baseline Gbit/s (median)", "tcpscope Gbit/s (median)", "median ratio",
                 "mean ratio (95% CI)", "ratios per repetition", "baseline spread"],
                [[s.get("cc", "default"), s["streams"], s["baseline_median_gbit_s"], s["tcpscope_median_gbit_s"],
                  f"**{s['median_ratio']:.3f}**", ci(s),
                  ", ".join(f"{x:.3f}" for x in s["ratios"]), f"{s['baseline_spread_pct']}%"] for s in d["summary"]]))
    print()


def floor(d):
    n = noise_of(d)
    print(f"### The floor of the design (loadgen churn)\n\n{d['reps']} repetitions of {d['seconds_per_run']:g} s, "
          f"baseline {n['mean']:.0f} conn/s (stdev {n['stdev_pct']}% over {n['baseline_runs']} runs), {machine(d)}.\n")
    if n["invalid"]:
        print(f"**Run invalid**: {n['invalid']}. Its ratios are not shown.\n")
    rows = []
    for v in d["variants"]:
        c = v.get("ci95")
        shown = not n["invalid"]
        rows.append([f"`{v['variant']}`", f"**{B.ratio_text(n, v['mean_ratio'])}**",
                     f"{c[0]:.3f}..{c[1]:.3f}" if c and shown else "-",
                     ", ".join(f"{x:.3f}" for x in v["ratios"]) if shown else "-",
                     v["extra_us_per_conn"] if shown else "-",
                     "n/a" if v["variant"] == "dispatch" else f"{v['flows_missed']}/{v['flows_expected']}"])
    print(table(["variant", "mean ratio", "95% CI", "ratios", "rate cost, µs per connection (2 cores ÷ rate)", "missed/expected"], rows))
    print()


def bpf_cost(d):
    print(f"### BPF program cost (bpf_stats)\n\n{machine(d)}.\n")
    for phase, unit, title in (("churn", "conn", "churn"), ("bulk_P1", "GB", "bulk, 1 stream"),
                               ("bulk_P8", "GB", "bulk, 8 streams")):
        p = d.get(phase)
        if not p:
            continue
        rate = f"{p['connections_per_s']} conn/s" if unit == "conn" else f"{p['gbit_per_s']} Gbit/s"
        print(f"{title} ({rate}):\n")
        rows = [[f"`{r['program']}`", r["runs_per_s"], r[f"runs_per_{unit}"], r["ns_per_run"], r[f"ns_per_{unit}"],
                 r["cpu_pct_core"]] for r in p["programs"] if r["runs"]]
        rows.append(["**total**", "", "", "", p["total"][f"ns_per_{unit}"], p["total"]["cpu_pct_core"]])
        print(table(["program", "runs/s", f"runs per {unit}", "ns/run", f"ns per {unit}", "% of a core"], rows))
        print()


def scale(d):
    e = d["extrapolated_1m_flows"]
    print(f"### Memory at scale\n\n{d['connections']} open connections ({d['sockets']} sockets on this host), "
          f"{d['asn_prefixes']} ASN prefixes, {machine(d)}.\n")
    print(table(["what", "measured"], [
        ["slab growth, connections open, no tcpscope", f"{d['without']['slab_growth_kib'] / 1024:.1f} MiB"],
        ["slab growth, connections open, tcpscope running", f"{d['with']['slab_growth_kib'] / 1024:.1f} MiB"],
        [f"**tcpscope kernel memory per socket** (sk_storage; {d.get('kernel_bytes_per_socket_method', 'slab')})",
         f"**{d['kernel_bytes_per_socket']} B**"],
        ["cross-check: slab difference per socket (noisy on a shared machine)",
         f"{d.get('kernel_bytes_per_socket_slab_crosscheck', d['kernel_bytes_per_socket'])} B"],
        *[[f"slab growth per socket in `{k}`, with − without", f"{v} B"]
          for k, v in d.get("slab_bytes_per_socket_by_cache", {}).items() if abs(v) >= 32],
        ["BPF maps, fixed (memlock; ring buffer included)", f"{d['kernel_maps_memlock_bytes'] / 1048576:.1f} MiB"],
        ["daemon RSS, no ASN data", f"{d['daemon_rss_kib_no_asn'] / 1024:.1f} MiB"],
        [f"daemon RSS, {d['asn_prefixes']} ASN prefixes loaded", f"{d['daemon_rss_kib_asn_loaded'] / 1024:.1f} MiB"],
        ["daemon start-up with them", f"{d['daemon_start_seconds_with_asn']} s"],
        [f"daemon RSS with {d['sockets']} open flows (after a snapshot)", f"{d['with']['daemon_rss_kib'] / 1024:.1f} MiB"],
        ["**daemon memory per open flow**", f"**{d['daemon_bytes_per_open_flow']} B**"],
        ["1M open flows, kernel (extrapolated)", f"{e['kernel_mib']} MiB"],
        ["1M open flows, daemon RSS (extrapolated)", f"{e['daemon_rss_mib']} MiB"],
    ]))
    print()


def micro(d):
    print(f"### Daemon pipeline micro-benchmarks\n\n{d['context']['date']}, load average "
          f"{d['context'].get('load_avg', [0])[0]:.2f}.\n")
    rows = []
    for b in d["benchmarks"]:
        rate = b.get("items_per_second")
        extra = ", ".join(f"{k}={b[k]:.4g}" for k in ("series", "bytes_per_series", "heap_MiB", "label_sets", "bytes")
                          if k in b)
        rows.append([f"`{b['name']}`", f"{b['cpu_time']:.4g} {b['time_unit']}",
                     f"{rate / 1e6:.2f} M/s" if rate else "", extra])
    print(table(["benchmark", "CPU time per item / iteration", "items per second, one core", "counters"], rows))
    print()


def main():
    if (d := load("micro")):
        micro(d)
    if (d := load("churn")):
        churn(d, f"Connection churn ({d.get('load', 'loadgen')})")
    runs = sorted(RESULTS.glob("churn_run*.json")) + ([RESULTS / "churn.json"] if (RESULTS / "churn.json").exists() else [])
    if len(runs) > 1:
        churn_runs(runs)
    if (d := load("churn_nginx")):
        churn(d, "Connection churn (nginx + wrk)")
    if (d := load("floor")):
        floor(d)
    if (d := load("bulk")):
        bulk(d)
    if (d := load("bpf_cost")):
        bpf_cost(d)
    if (d := load("scale")):
        scale(d)


if __name__ == "__main__":
    main()
