#!/usr/bin/env python3
"""Keep-alive request rate: wrk over kept-alive connections to nginx, across a
veth between two network namespaces, with nothing attached (baseline) and with
tcpscope following every transfer:

  tcpscope-nolog    the shipped default: no flow log; the kernel follows the
                    transfers of one flow in 16 (transfer_sampling_rate: 16)
  tcpscope          the default with the flow log on (flows, and the followed
                    flows' transfers)
  tcpscope-every    flow log on, every flow's transfers followed (transfer_sampling_rate: 1)
  tcpscope-nolog-server, tcpscope-server
                    as tcpscope-nolog and tcpscope, told to leave wrk's network
                    namespace alone (ignore_netns): only the server's end is
                    followed, as on an edge server whose clients are remote
  floor-flows       not tcpscope: the per-flow floor (bench/floor.bpf.c "record":
                    the state-change tracepoint, SK_STORAGE, one ring record per
                    flow), the least any tool that follows every flow pays
  floor-transfers   not tcpscope: the transfer floor (bench/floor.bpf.c "transfers":
                    SK_STORAGE, the two per-call hooks doing only a transfer's
                    bounds, a 128-byte ring record per transfer, drained every
                    100 ms), what any tool that times every transfer pays here

With few kept-alive connections a run's sampled share of the requests is
lumpy (16 connections: each run samples whichever of its flows the hash
picks), so flow-log bytes per request are reported beside the ratios.

Every request is two transfers on each end (request and response), so this is
the load that costs tcpscope the most per byte.

For each response size, baseline and variant runs alternate, starting and
ending with a baseline; each variant run's ratio is to the mean of the
baselines either side. The baselines' spread is the noise: above
benchlib.MAX_BASELINE_SPREAD the size is reported invalid, without ratios.

Also reported, from the tcpscope runs: transfer records the kernel could not
hand over (tcpscope_transfer_records_lost_total, must be 0), records read per
request, and, in one extra run with kernel.bpf_stats_enabled=1 (which adds two
clock reads per program run, so it is not used for the ratios), the kernel
time of each program per request and the daemon's CPU time per transfer.
--profiles repeats that run as on older kernels (tests/kernel_profiles: the
tracepoints each lacks hidden from the daemon; "this" is this kernel), and
--cost-only leaves out the ratio runs. --floor adds the same statistics
run with the transfer floor (bench/floor.bpf.c "transfers": SK_STORAGE, the
two per-call hooks doing only a transfer's bounds, a 128-byte ring record
per transfer) in place of tcpscope: what any tool that times every transfer
pays here.

  bench/keepalive.py [--seconds 15] [--rounds 3] [--sizes 1000,100000] [--connections 16]
                     [--variants tcpscope,tcpscope-nolog] [--profiles this,linux-6.12,debian12-6.1]
(the statistics run is made for each variant, as on each profile)
                     [--cost-only] [--floor] [--out FILE]

Needs root. Prints a table, writes JSON (bench/results/keepalive.json by default).
"""
import argparse
import os
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests" / "kernel_profiles"))
import benchlib as B  # noqa: E402
import derive as kernel_profiles  # noqa: E402
from bpf_cost import delta, prog_stats  # noqa: E402


class KeepAliveNginx:
    """nginx serving one static file per size, with keep-alive (no request
    limit per connection) and no access log."""

    def __init__(self, net, tmp, sizes, port=8090):
        d = Path(tmp) / "nginx-keepalive"
        (d / "www").mkdir(parents=True, exist_ok=True)
        for size in sizes:
            (d / "www" / f"obj-{size}").write_bytes(b"x" * size)
        self.p = B.start_nginx(net, d, f"{net.srv_v4}:{port}", f"    root {d}/www;",
                               "  keepalive_timeout 300;\n  keepalive_requests 100000000;\n"
                               "  sendfile on;\n  tcp_nopush on;")
        self.url = f"http://{net.srv_v4}:{port}"

    def close(self):
        B.stop_process(self.p)


def wrk(net, url, seconds, connections):
    return B.run_wrk(net, url, seconds, 2, connections)


VARIANTS = ["tcpscope-nolog", "tcpscope", "tcpscope-every", "tcpscope-nolog-server", "tcpscope-server",
            "floor-flows", "floor-transfers"]
FLOORS = {"floor-flows": "record", "floor-transfers": "transfers"}


def start_tcpscope(tmp, net, tag, variant="tcpscope", profile=None):
    port = B.free_port()
    log = Path(tmp) / f"flows-{tag}.ndjson"
    cfg = B.write_config(Path(tmp) / f"tcpscope-{tag}.yaml", port=port,
                         flow_log=None if variant.startswith("tcpscope-nolog") else log, rules=0,
                         transfer_sampling_rate=1 if variant == "tcpscope-every" else None,
                         ignore_netns=[net.cli] if variant.endswith("-server") else ())
    return B.Tcpscope(tmp, cfg, port, env=kernel_profiles.daemon_env(profile)), log


def floor_run(tmp, net, url, args, variant):
    """One measured run with a floor attached after the warm-up."""
    import floor as F
    wrk(net, url, 1, args.connections)
    observer = F.FloorObserver(type("Ctx", (), {"tmp": Path(tmp)})(), FLOORS[variant])
    observer.start()
    try:
        r = wrk(net, url, args.seconds, args.connections)
    finally:
        observer.stop()
    r["transfer_records_lost"] = observer.seen["lost"]
    r["transfer_records_per_request"] = round(observer.seen["transfers"] / max(r["requests"], 1), 3)
    r["flow_log_bytes_per_request"] = 0
    return r


def tcpscope_run(tmp, net, url, args, variant, tag):
    """One measured run with tcpscope attached; start-up and the final drain
    are outside the window."""
    if variant in FLOORS:
        return floor_run(tmp, net, url, args, variant)
    d, log = start_tcpscope(tmp, net, tag, variant)
    try:
        wrk(net, url, 1, args.connections)  # warm-up, outside the window
        lost0 = d.metric("tcpscope_transfer_records_lost_total")
        read0 = d.metric("tcpscope_transfer_records_total")
        r = wrk(net, url, args.seconds, args.connections)
        time.sleep(1.5)  # the daemon's periodic drain
        r["transfer_records_lost"] = d.metric("tcpscope_transfer_records_lost_total") - lost0
        r["transfer_records_per_request"] = round((d.metric("tcpscope_transfer_records_total") - read0) /
                                                  max(r["requests"], 1), 3)
        r["flow_log_bytes"] = log.stat().st_size if log.exists() else 0
        # The 1 s warm-up's lines are in the log too.
        r["flow_log_bytes_per_request"] = round(r["flow_log_bytes"] / max(r["requests"], 1), 1)
    finally:
        d.stop()
        log.unlink(missing_ok=True)
    return r


def cost_run(tmp, net, url, args, profile=None, variant="tcpscope-nolog"):
    """Per-program kernel time per request and per transfer record, and the
    daemon's CPU per request and per transfer record, with BPF statistics on
    (not used for ratios), as on `profile`'s kernel (None: this one)."""
    d, log = start_tcpscope(tmp, net, f"cost-{profile or 'this'}-{variant}", variant, profile=profile)
    try:
        with B.BpfStats():
            wrk(net, url, 1, args.connections)
            s0, cpu0 = prog_stats(d.pid), B.proc_cpu_seconds(d.pid)
            read0 = d.metric("tcpscope_transfer_records_total")
            r = wrk(net, url, args.seconds, args.connections)
            time.sleep(1.5)
            s1, cpu1 = prog_stats(d.pid), B.proc_cpu_seconds(d.pid)
            transfers = d.metric("tcpscope_transfer_records_total") - read0
        rows, total = delta(s0, s1, r["seconds"], r["requests"], "request")
        kernel_ns = total.get("ns_per_request")
        return {"profile": profile or "this", "variant": variant, "requests_per_s": round(r["rate"]),
                "programs": rows, "total": total, "transfer_records": int(transfers),
                "transfer_records_per_request": round(transfers / max(r["requests"], 1), 3),
                "daemon_cpu_us_per_request": round(1e6 * (cpu1 - cpu0) / max(r["requests"], 1), 3),
                "kernel_ns_per_transfer": round(kernel_ns * r["requests"] / transfers)
                if transfers and kernel_ns is not None else None,
                "daemon_cpu_us_per_transfer": round(1e6 * (cpu1 - cpu0) / transfers, 2) if transfers else None}
    finally:
        d.stop()
        log.unlink(missing_ok=True)


def floor_cost_run(tmp, net, url, args, variant="floor-transfers"):
    """A floor's kernel time per request and per transfer record."""
    import floor as F
    ctx = type("Ctx", (), {"tmp": Path(tmp)})()
    observer = F.FloorObserver(ctx, FLOORS[variant])
    observer.start()
    try:
        # No warm-up: the loader counts its records only when it stops.
        with B.BpfStats():
            s0 = prog_stats(observer.pid)
            r = wrk(net, url, args.seconds, args.connections)
            time.sleep(0.5)
            s1 = prog_stats(observer.pid)
    finally:
        observer.stop()
    rows, total = delta(s0, s1, r["seconds"], r["requests"], "request")
    per_request = observer.seen["transfers"] / max(r["requests"], 1)
    kernel_ns = total.get("ns_per_request")
    return {"profile": "this", "variant": variant, "requests_per_s": round(r["rate"]), "programs": rows,
            "total": total,
            "transfer_records_per_request": round(per_request, 3),
            "kernel_ns_per_transfer": round(kernel_ns / per_request) if per_request and kernel_ns is not None else None,
            "daemon_cpu_us_per_transfer": None}


def ratio_runs(tmp, net, url, args, variants, size):
    """Baseline and variant runs, interleaved; their ratios and the noise."""
    runs = []
    for i in range(args.rounds):
        for v in variants:
            runs.append({"variant": "baseline", **wrk(net, url, args.seconds, args.connections)})
            runs.append({"variant": v, **tcpscope_run(tmp, net, url, args, v, f"{size}-{v}-{i}")})
    runs.append({"variant": "baseline", **wrk(net, url, args.seconds, args.connections)})
    noise = B.baseline_noise([r["rate"] for r in runs if r["variant"] == "baseline"])
    entry = {"runs": runs, "noise": noise, "variants": {}, "failed_requests": sum(r["failed"] for r in runs)}
    for v in variants:
        ratios = [r["rate"] / B.interleaved_baseline(runs, i) for i, r in enumerate(runs) if r["variant"] == v]
        v_runs = [r for r in runs if r["variant"] == v]
        entry["variants"][v] = {"ratios": [round(x, 4) for x in ratios],
                                "median_ratio": round(statistics.median(ratios), 4),
                                "transfer_records_lost": sum(r["transfer_records_lost"] for r in v_runs),
                                "transfer_records_per_request": [r["transfer_records_per_request"] for r in v_runs],
                                "flow_log_bytes_per_request": [r["flow_log_bytes_per_request"] for r in v_runs]}
    return entry


def print_ratios(entry, args):
    noise = entry["noise"]
    print(f"  baseline {noise['mean']:.0f} req/s (spread {noise['spread_pct']}%)")
    if noise["invalid"]:
        print(f"  invalid: {noise['invalid']}")
    for v, e in entry["variants"].items():
        print(f"  {v:<15} / baseline: median {B.ratio_text(noise, e['median_ratio'])}, runs "
              + ", ".join(B.ratio_text(noise, x) for x in e["ratios"])
              + f"; transfer records lost {e['transfer_records_lost']:g}, per request "
              + ", ".join(str(x) for x in e["transfer_records_per_request"])
              + "; flow log bytes per request " + ", ".join(str(x) for x in e["flow_log_bytes_per_request"]))
    print(f"  failed requests: {entry['failed_requests']}")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seconds", type=float, default=15)
    ap.add_argument("--rounds", type=int, default=3, help="tcpscope runs per size (baselines: one more)")
    ap.add_argument("--sizes", default="1000,100000")
    ap.add_argument("--connections", type=int, default=16)
    ap.add_argument("--variants", default=",".join(VARIANTS))
    ap.add_argument("--no-cost", action="store_true", help="skip the BPF-statistics run")
    ap.add_argument("--profiles", default="this",
                    help="the BPF-statistics run on these kernels: this, " + ", ".join(sorted(kernel_profiles.PROFILES)))
    ap.add_argument("--cost-only", action="store_true", help="only the BPF-statistics runs, no ratios")
    ap.add_argument("--floor", action="store_true", help="also the transfer floor's BPF-statistics run")
    ap.add_argument("--out")
    args = ap.parse_args()
    if os.geteuid() != 0:
        raise SystemExit("keepalive.py: needs root")
    sizes = [int(s) for s in args.sizes.split(",")]
    variants = args.variants.split(",")
    unknown = set(variants) - set(VARIANTS)
    if unknown:
        raise SystemExit(f"keepalive.py: unknown variants {sorted(unknown)} (known: {VARIANTS})")
    profiles = [None if p == "this" else p for p in args.profiles.split(",")]
    unknown = {p for p in profiles if p} - set(kernel_profiles.PROFILES)
    if unknown:
        raise SystemExit(f"keepalive.py: unknown profiles {sorted(unknown)} (known: this, "
                         f"{', '.join(sorted(kernel_profiles.PROFILES))})")
    if args.cost_only and args.no_cost:
        raise SystemExit("keepalive.py: --cost-only and --no-cost leave nothing to run")
    tmp = B.tmpdir("keepalive")
    result = {"benchmark": "keepalive", "seconds_per_run": args.seconds,
              "connections": args.connections, "sizes": {}}
    net = server = None
    try:
        net = B.NetPair()
        server = KeepAliveNginx(net, tmp, sizes)
        for size in sizes:
            url = f"{server.url}/obj-{size}"
            entry = {}
            if not args.cost_only:
                entry = ratio_runs(tmp, net, url, args, variants, size)
            if not args.no_cost:
                # Each variant, as on each profile (a floor only on this kernel).
                entry["cost"] = [floor_cost_run(tmp, net, url, args, v) if v in FLOORS
                                 else cost_run(tmp, net, url, args, p, v)
                                 for p in profiles for v in variants if p is None or v not in FLOORS]
                if args.floor and "floor-transfers" not in variants:
                    entry["cost"].append(floor_cost_run(tmp, net, url, args))
            result["sizes"][str(size)] = entry
            print(f"\n{size} B responses, {args.connections} kept-alive connections:")
            if "noise" in entry:
                print_ratios(entry, args)
            for c in entry.get("cost", []):
                print(f"  {c['variant']}, kernel as on {c['profile']}, per request (bpf_stats on, "
                      f"{c['requests_per_s']} req/s): {c['total'].get('ns_per_request')} ns in all, "
                      f"{c.get('transfer_records_per_request')} transfer records, {c['kernel_ns_per_transfer']} ns "
                      f"per transfer record; daemon {c.get('daemon_cpu_us_per_request')} us CPU per request, "
                      f"{c['daemon_cpu_us_per_transfer']} us per transfer record")
                for row in c["programs"]:
                    if row["runs"]:
                        print(f"    {row['program']:<24} {row['runs_per_request']:>7} runs/request "
                              f"{row['ns_per_run']:>8} ns/run")
    finally:
        if server:
            server.close()
        if net:
            net.close()
    B.write_result("keepalive", result, args.out)


if __name__ == "__main__":
    main()
