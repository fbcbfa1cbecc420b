#!/usr/bin/env python3
"""What transfer sampling costs in accuracy: per-ASN transfer-time quantiles
from every flow's transfers against those from the flows the kernel follows
at the default transfer_sampling_rate (16), in the lab's CDN scenario.

The run: tests/lab/scenarios/cdn_bbr_vs_cubic.py in its keep-alive mode
(each client connection fetches 3-6 objects of the mix, 10-90 kB, 3.2 MB
and --large-mb, with short pauses; Poisson arrivals on four paths, each its
own private ASN: two client paths 50 ms / 50 Mbit/s at 0.1 % and 1 % loss,
pop-to-pop 15 ms, intra-pop unshaped), once with the server on CUBIC and
once on BBR. The scenario starts the real tcpscope daemon with
--transfer-sampling-rate 1: the kernel follows every flow, so its flow log
holds every transfer. The lab, nginx and the daemon are the scenario's; it
removes them when it ends, and this script removes whatever its lab tag
left (tests/lab/lab.py down_all) and checks no namespace of it remains.

The analysis: the server's send transfers (dir "passive", direction
"send", on nginx's port, from the lab's client addresses: the objects as
served), per ASN (both CC runs together) and pooled over the ASNs ("all"),
and per ASN split by size (bytes < 3 MB, >= 3 MB).

  exact     every transfer of the group
  sampled   the transfers of the flows whose (lport, rport) the kernel's
            hash picks at rate --rate (default 16): the same flows the
            kernel follows at the default (src/record/transfer_sampling.h,
            transfer_sampled(); no cc_policy rule follows a flow for its
            evidence in the lab's config)

For p50 and p90 of xfer_us (quantiles by linear interpolation, numpy's
default): the exact and the sampled quantile, and a 95 % interval for the
sampled one from the units it really has: a cluster bootstrap over the
sampled flows (connections drawn with replacement, each with all its
transfers; --resamples 2000, seeded by --seed), percentile interval.
Reported: whether the exact quantile is inside that interval, the relative
error (sampled - exact) / exact, the interval's half-width relative to the
exact value, transfers and flows, exact and sampled. Groups with fewer
than --min-sampled (20) sampled transfers, or fewer than 2 sampled flows,
are skipped and listed as such.

One run's sample is one draw: whether one interval holds the exact value
says little. The hash's other residues (hash mod rate = 1 .. rate-1) are
rate-1 more disjoint samples of the same size, each what another hash
would have picked; unless --no-replicates, every group is also
bootstrapped on each of them, and the share of intervals that hold the
exact quantile (their coverage, ideally ~95 %) is reported per quantile
and size group.

    bench/sampling_accuracy.py [--duration 300] [--rate-scale 2] [--large-mb 5]
                               [--keepalive 3-6] [--pause 0.05-0.5] [--seed 1]
                               [--rate 16] [--resamples 2000] [--min-sampled 20]
                               [--no-replicates] [--keep-workdir] [--out FILE]
    bench/sampling_accuracy.py --analyse DIR     # a kept workdir again, no run

The full run (defaults: ~11,700 server send transfers in ~2,600 flows,
~700 of them in ~160 flows sampled) takes ~11 minutes on an idle 2-core
machine: two 300 s windows of arrivals (each ~10 s of tail for the last
downloads), the lab, the scenario's own report and this analysis. Each
unit of --rate-scale is ~20 objects per second of --duration over both
runs; the client paths stay below half their bottleneck up to
--rate-scale 2 (with --large-mb 5).

The daemon follows every flow on the host, not only the lab's: run it on
an otherwise idle machine. Other traffic makes the flow log huge (the
scenario reads it whole into memory), slows everything and can make the
daemon lose records; "not in the log" (the clients' answers without a
server send transfer) and the daemon's loss counters are reported.

Needs root (network namespaces, BPF), nginx and a build (TCPSCOPE_BUILD,
default build/: tcpscope and tcpscope_delayline). Prints a table, writes
JSON (bench/results/sampling_accuracy.json by default). Never pass/fail.
"""
import argparse
import itertools
import json
import os
import random
import shlex
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections import Counter, defaultdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import benchlib as B  # noqa: E402

sys.path.insert(0, str(B.ROOT / "tests" / "lab"))
import lab as labmod  # noqa: E402
sys.path.insert(0, str(B.ROOT / "tests" / "integration"))
# The kernel's choice (src/record/transfer_sampling.h), as the tests compute it.
from conftest import sampled, sampling_hash  # noqa: E402

SCENARIO = B.ROOT / "tests" / "lab" / "scenarios" / "cdn_bbr_vs_cubic.py"
QUANTILES = (0.5, 0.9)
SPLIT_BYTES = 3_000_000
SIZE_GROUPS = ("all", "lt_3MB", "ge_3MB")


def quantile(sorted_xs, q):
    """Linear interpolation between order statistics (numpy's default, R type 7)."""
    n = len(sorted_xs)
    h = (n - 1) * q
    i = int(h)
    if i + 1 >= n:
        return float(sorted_xs[-1])
    return sorted_xs[i] + (h - i) * (sorted_xs[i + 1] - sorted_xs[i])


# ---------------------------------------------------------------- the run


def run_scenario(args, workdir):
    """The scenario in keep-alive mode, in its own process group; its report
    (JSON) and stdout land in workdir. Whatever its lab tag left is removed
    afterwards, however it ended."""
    tag = f"a{random.randrange(1 << 12):03x}"
    report = workdir / "scenario.json"
    cmd = [sys.executable, str(SCENARIO), "--keepalive", args.keepalive, "--pause", args.pause,
           "--duration", f"{args.duration:g}", "--rate-scale", f"{args.rate_scale:g}",
           "--large-mb", f"{args.large_mb:g}", "--seed", str(args.seed),
           "--json", str(report), "--workdir", str(workdir), "--tag", tag]
    env = dict(os.environ, TCPSCOPE_BUILD=str(B.BUILD))
    B.log(f"scenario (lab tag {tag}): {shlex.join(cmd)}")
    # Arrivals for --duration per CC, then up to the client's grace (120 s)
    # for the last connections, twice; set-up and the scenario's own analysis.
    timeout = 2 * (args.duration + 240) + 300
    t0 = time.monotonic()
    out = open(workdir / "scenario.stdout", "w")
    err = open(workdir / "scenario.stderr", "w")
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=err, text=True, env=env,
                         start_new_session=True)
    timer = threading.Timer(timeout, lambda: _stop_group(p))
    timer.start()
    try:
        for line in p.stdout:
            out.write(line)
            if line.startswith("==") or line.startswith("WARNING"):
                B.log(line.rstrip())
        p.wait()
    finally:
        timer.cancel()
        if p.poll() is None:   # interrupted (Ctrl-C, SIGTERM)
            _stop_group(p)
        out.close()
        err.close()
        labmod.down_all(tag)
    seconds = time.monotonic() - t0
    left = [ns for ns in B.sh("ip", "netns", "list", check=False).stdout.split("\n")
            if ns.startswith(f"{labmod.PREFIX}{tag}")]
    if p.returncode != 0:
        raise SystemExit(f"sampling_accuracy.py: the scenario exited {p.returncode} after {seconds:.0f} s "
                         f"(timeout {timeout:.0f} s):\n{(workdir / 'scenario.stderr').read_text()[-3000:]}")
    return {"command": shlex.join(cmd), "tag": tag, "seconds": round(seconds, 1),
            "leftover_netns": left,
            "run_args": {k: getattr(args, k) for k in ("duration", "rate_scale", "large_mb", "keepalive",
                                                       "pause", "seed")}}


def _stop_group(p):
    """SIGTERM unwinds the scenario (lab, nginx, daemon); SIGKILL if it hangs."""
    try:
        os.killpg(p.pid, signal.SIGTERM)
        p.wait(30)
    except ProcessLookupError:
        pass
    except subprocess.TimeoutExpired:
        os.killpg(p.pid, signal.SIGKILL)
        p.wait()


# ---------------------------------------------------------------- the data


def load(workdir):
    """The server's send transfers of the run and the totals around them."""
    report = json.loads((workdir / "scenario.json").read_text())
    ports = {r["port"] for r in report["runs"].values()}
    path_of = {}   # client address -> path name
    for name, info in report["paths"].items():
        for a in info["client_v4"]:
            path_of[a] = name
    asn_of_path = {name: info["asn"] for name, info in report["paths"].items()}
    # The daemon sees the whole host: a busy one writes millions of other
    # lines. Only lines that can be the lab server's are parsed.
    needles = [f'"lport":{p},' for p in ports]
    lines = transfer_lines = 0
    rates = Counter()
    dirs = Counter()
    wrong_asn = 0
    rows = []
    with open(workdir / "flows.ndjson") as f:
        for line in f:
            lines += 1
            if '"kind":"transfer"' not in line:
                continue
            transfer_lines += 1
            if not any(n in line for n in needles):
                continue
            t = json.loads(line)
            if t["lport"] not in ports or t["raddr"] not in path_of:
                continue
            dirs[(t["dir"], t["direction"])] += 1
            if t["dir"] != "passive" or t["direction"] != "send":
                continue
            rates[t["sampling_rate"]] += 1
            path = path_of[t["raddr"]]
            if t["asn"] != asn_of_path[path]:
                wrong_asn += 1
            rows.append({"asn": t["asn"], "path": path, "cc": t["cc"], "lport": t["lport"],
                         "rport": t["rport"], "bytes": t["bytes"], "xfer_us": t["xfer_us"],
                         # One connection: the 4-tuple and its start (ports are reused).
                         "flow": (t["raddr"], t["rport"], t["lport"], t["flow_start_ns"])})
    # What the clients asked for and got: each request ought to be one send
    # transfer of the server's.
    requests = sum(len(c.get("conn", {}).get("requests", []))
                   for run in report["runs"].values() for conns in run["flows"].values() for c in conns)
    connections = sum(len(conns) for run in report["runs"].values() for conns in run["flows"].values())
    totals = {
        "flow_log_lines": lines, "flow_log_transfer_lines": transfer_lines,
        "lab_transfers_by_dir_direction": {f"{d}/{k}": n for (d, k), n in sorted(dirs.items())},
        "server_send_transfers": len(rows),
        "server_send_flows": len({r["flow"] for r in rows}),
        "server_send_transfers_by_cc": dict(Counter(r["cc"] for r in rows)),
        "sampling_rate_in_records": {str(k): v for k, v in sorted(rates.items())},
        "transfers_whose_asn_is_not_their_paths": wrong_asn,
        "client_connections": connections, "client_requests_answered": requests,
        "server_send_transfers_missing": requests - len(rows),
        "records_lost": report.get("lost"),
        "scenario_server_send_transfers": sum(1 for run in report["runs"].values()
                                              for t in run["server_transfers"] if t["direction"] == "send"),
    }
    paths = {name: {"asn": info["asn"], "peer_class": info["peer_class"], "rtt_ms": info["rtt_ms"],
                    "up_loss": info["up_loss"]} for name, info in report["paths"].items()}
    return rows, totals, paths, report


# ---------------------------------------------------------------- the statistics


def by_flow(rows):
    flows = defaultdict(list)
    for r in rows:
        flows[r["flow"]].append(r["xfer_us"])
    return list(flows.values())


def bootstrap(flows, resamples, rng):
    """Cluster bootstrap: 95 % percentile intervals of each quantile, flows
    drawn with replacement, every transfer of a drawn flow kept."""
    k = len(flows)
    est = {q: [] for q in QUANTILES}
    chain = itertools.chain.from_iterable
    for _ in range(resamples):
        xs = sorted(chain(rng.choices(flows, k=k)))
        for q in QUANTILES:
            est[q].append(quantile(xs, q))
    out = {}
    for q, v in est.items():
        v.sort()
        out[q] = (quantile(v, 0.025), quantile(v, 0.975))
    return out


def group_stats(rows, rate, residue, resamples, seed_key, min_sampled):
    """The exact quantiles of `rows` and those of the flows whose hash mod
    rate is `residue` (0: the kernel's own choice), with their intervals;
    None (and why) when the sample is too small."""
    sample = [r for r in rows if sampling_hash(r["lport"], r["rport"]) & (rate - 1) == residue]
    flows = by_flow(sample)
    n = {"transfers_exact": len(rows), "flows_exact": len({r["flow"] for r in rows}),
         "transfers_sampled": len(sample), "flows_sampled": len(flows)}
    if len(sample) < min_sampled or len(flows) < 2:
        return n, None
    exact = sorted(r["xfer_us"] for r in rows)
    samp = sorted(r["xfer_us"] for r in sample)
    ci = bootstrap(flows, resamples, random.Random(seed_key))
    qs = {}
    for q in QUANTILES:
        e, s = quantile(exact, q), quantile(samp, q)
        lo, hi = ci[q]
        qs[f"p{int(q * 100)}"] = {
            "exact_us": round(e, 1), "sampled_us": round(s, 1),
            "ci95_us": [round(lo, 1), round(hi, 1)],
            "exact_inside": lo <= e <= hi,
            "rel_error_pct": round(100 * (s - e) / e, 2) if e else None,
            "ci_half_width_pct": round(100 * (hi - lo) / 2 / e, 2) if e else None,
        }
    return n, qs


def groups(rows):
    """(asn or "all", size group) -> rows."""
    out = {}
    asns = sorted({r["asn"] for r in rows})
    for asn in ["all", *asns]:
        sel = rows if asn == "all" else [r for r in rows if r["asn"] == asn]
        out[(asn, "all")] = sel
        out[(asn, "lt_3MB")] = [r for r in sel if r["bytes"] < SPLIT_BYTES]
        out[(asn, "ge_3MB")] = [r for r in sel if r["bytes"] >= SPLIT_BYTES]
    return out


def analyse(rows, args):
    results, skipped = [], []
    replicate = defaultdict(lambda: {"inside": 0, "intervals": 0, "skipped": 0})
    for (asn, size), sel in groups(rows).items():
        n, qs = group_stats(sel, args.rate, 0, args.resamples, f"{args.seed}/{asn}/{size}/0",
                            args.min_sampled)
        entry = {"asn": asn, "size": size, **n}
        if qs is None:
            skipped.append(entry)
        else:
            results.append({**entry, "quantiles": qs})
        if not args.replicates:
            continue
        # The same on every other residue of the hash: rate - 1 more samples.
        for residue in range(1, args.rate):
            n, qs = group_stats(sel, args.rate, residue, args.resamples,
                                f"{args.seed}/{asn}/{size}/{residue}", args.min_sampled)
            for q in (f"p{int(x * 100)}" for x in QUANTILES):
                key = ("asn" if asn != "all" else "all", size, q)
                if qs is None:
                    replicate[key]["skipped"] += 1
                    continue
                replicate[key]["intervals"] += 1
                replicate[key]["inside"] += qs[q]["exact_inside"]
    coverage = [{"asns": k[0], "size": k[1], "quantile": k[2], **v,
                 "coverage_pct": round(100 * v["inside"] / v["intervals"], 1) if v["intervals"] else None}
                for k, v in sorted(replicate.items(), key=lambda kv: (kv[0][0] != "asn", SIZE_GROUPS.index(kv[0][1]),
                                                                      kv[0][2]))]
    return results, skipped, coverage


# ---------------------------------------------------------------- output


def ms(us):
    """Milliseconds to about three significant digits (intra-pop transfers take microseconds)."""
    v = us / 1e3
    return f"{v:.{3 if v < 1 else 2 if v < 10 else 1 if v < 100 else 0}f}"


def print_report(result, paths):
    t = result["totals"]
    a = result["args"]
    run = {**a, **result["scenario"].get("run_args", {})}   # --analyse: the run's own
    label = {p["asn"]: f"{n} ({p['peer_class']})" for n, p in paths.items()}
    print(f"\nsampling accuracy, lab CDN scenario (keep-alive {run['keepalive']} objects per connection, "
          f"{run['duration']:g} s per CC x CUBIC and BBR, rate scale {run['rate_scale']:g}, "
          f"objects {result['object_sizes']})")
    print(f"  flow log: {t['flow_log_lines']} lines, {t['flow_log_transfer_lines']} transfer lines; "
          f"sampling_rate in the server's send transfers: {t['sampling_rate_in_records']}")
    print(f"  server send transfers (dir passive, direction send): {t['server_send_transfers']} in "
          f"{t['server_send_flows']} flows (by CC {t['server_send_transfers_by_cc']}); "
          f"the clients got {t['client_requests_answered']} answers on {t['client_connections']} connections "
          f"({t['server_send_transfers_missing']} not in the log)")
    print(f"  sampled = the flows the kernel follows at transfer_sampling_rate {a['rate']} "
          f"(transfer_sampled(lport, rport, {a['rate']}), src/record/transfer_sampling.h): "
          f"{t['sampled_transfers']} transfers in {t['sampled_flows']} flows")
    if t["transfers_whose_asn_is_not_their_paths"]:
        print(f"  WARNING: {t['transfers_whose_asn_is_not_their_paths']} transfers carry another ASN than their path's")
    if t["records_lost"] and any(t["records_lost"].values()):
        print(f"  WARNING: the daemon (host-wide) lost or dropped records: {t['records_lost']} "
              f"(other traffic on the host?)")
    print(f"  xfer_us quantiles (ms); 95 % interval: cluster bootstrap over the sampled flows, "
          f"{a['resamples']} resamples, seed {a['seed']}; err = (sampled - exact) / exact; "
          f"+- = interval half-width / exact\n")
    rows = []
    for g in result["groups"]:
        for q, v in g["quantiles"].items():
            rows.append([str(g["asn"]), "" if g["asn"] == "all" else label.get(g["asn"], ""), g["size"], q,
                         ms(v["exact_us"]), ms(v["sampled_us"]),
                         f"[{ms(v['ci95_us'][0])}, {ms(v['ci95_us'][1])}]",
                         "yes" if v["exact_inside"] else "NO",
                         f"{v['rel_error_pct']:+.1f}%" if v["rel_error_pct"] is not None else "-",
                         f"{v['ci_half_width_pct']:.1f}%" if v["ci_half_width_pct"] is not None else "-",
                         f"{g['transfers_exact']}/{g['transfers_sampled']}",
                         f"{g['flows_exact']}/{g['flows_sampled']}"])
    print(B.fmt_table(["asn", "path", "size", "q", "exact", "sampled", "95% interval", "inside", "err",
                       "+-", "xfers ex/sa", "flows ex/sa"], rows))
    if result["skipped"]:
        print(f"\n  skipped (fewer than {a['min_sampled']} sampled transfers or 2 sampled flows): " +
              "; ".join(f"{g['asn']} {g['size']} ({g['transfers_sampled']} transfers, "
                        f"{g['flows_sampled']} flows of {g['transfers_exact']}/{g['flows_exact']})"
                        for g in result["skipped"]))
    if result["replicate_coverage"]:
        print(f"\n  coverage over the hash's other {a['rate'] - 1} residues (each a disjoint 1/{a['rate']} "
              f"sample of the flows, as another hash would pick): exact inside the interval")
        for c in result["replicate_coverage"]:
            cov = "-" if c["coverage_pct"] is None else f"{c['coverage_pct']:.0f}%"
            print(f"    {c['asns']:<4} {c['size']:<7} {c['quantile']}: {c['inside']} of {c['intervals']} "
                  f"({cov}){', skipped ' + str(c['skipped']) if c['skipped'] else ''}")
    ins = [v["exact_inside"] for g in result["groups"] for v in g["quantiles"].values()]
    print(f"\n  kernel's sample: exact inside the interval in {sum(ins)} of {len(ins)} (group, quantile) pairs")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--duration", type=float, default=300, help="seconds of arrivals per CC run")
    ap.add_argument("--rate-scale", type=float, default=2.0,
                    help="the scenario's --rate-scale: arrival rates (and concurrency) times this")
    ap.add_argument("--large-mb", type=float, default=5, help="size of the mix's large objects (MB)")
    ap.add_argument("--keepalive", default="3-6", metavar="MIN-MAX", help="objects per connection")
    ap.add_argument("--pause", default="0.05-0.5", metavar="LO-HI", help="seconds between a connection's objects")
    ap.add_argument("--seed", type=int, default=1, help="the scenario's arrivals and the bootstrap")
    ap.add_argument("--rate", type=int, default=16, help="the sampling rate judged (a power of two)")
    ap.add_argument("--resamples", type=int, default=2000)
    ap.add_argument("--min-sampled", type=int, default=20, help="sampled transfers a group needs")
    ap.add_argument("--no-replicates", dest="replicates", action="store_false",
                    help="bootstrap only the kernel's own sample, not the hash's other residues")
    ap.add_argument("--workdir", help="where the scenario's files go (default: a temporary directory)")
    ap.add_argument("--keep-workdir", action="store_true", help="keep it (flow log, scenario report) after")
    ap.add_argument("--analyse", metavar="DIR", help="analyse a kept workdir again; no run")
    ap.add_argument("--out")
    args = ap.parse_args()
    if args.rate < 1 or args.rate & (args.rate - 1):
        ap.error("--rate must be a power of two")
    started = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    scenario = None
    own_workdir = False
    if args.analyse:
        # Never runs anything: the run's own record, if the directory has it.
        workdir = Path(args.analyse)
        for f in ("scenario.json", "flows.ndjson"):
            if not (workdir / f).exists():
                raise SystemExit(f"sampling_accuracy.py: {workdir / f} missing: not a kept workdir")
        prev = workdir / "sampling_accuracy.run.json"
        scenario = json.loads(prev.read_text()) if prev.exists() else {}
    else:
        if os.geteuid() != 0:
            raise SystemExit("sampling_accuracy.py: needs root")
        if shutil.which("nginx") is None:
            raise SystemExit("sampling_accuracy.py: nginx is not installed")
        B.tcpscope_binary()
        # SIGTERM unwinds like Ctrl-C: the scenario is stopped, its lab removed.
        signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
        if args.workdir:
            workdir = Path(args.workdir)
            workdir.mkdir(parents=True, exist_ok=True)
        else:
            workdir = B.tmpdir("sampling-accuracy")
            own_workdir = True
    try:
        if not args.analyse:
            scenario = run_scenario(args, workdir)
            (workdir / "sampling_accuracy.run.json").write_text(json.dumps(scenario) + "\n")
            if scenario["leftover_netns"]:
                B.log(f"warning: namespaces of the lab left: {scenario['leftover_netns']}")
        t0 = time.monotonic()
        rows, totals, paths, report = load(workdir)
        if not rows:
            raise SystemExit(f"sampling_accuracy.py: no server send transfers in {workdir / 'flows.ndjson'}")
        picked = [r for r in rows if sampled(r["lport"], r["rport"], args.rate)]
        totals["sampled_transfers"] = len(picked)
        totals["sampled_flows"] = len({r["flow"] for r in picked})
        sizes = sorted({s for v in report["objects"].values() for s in v})
        results, skipped, coverage = analyse(rows, args)
        result = {
            "benchmark": "sampling_accuracy", "date": started,
            "command": shlex.join([sys.argv[0], *sys.argv[1:]]),
            "args": {k: v for k, v in vars(args).items()},
            "scenario": scenario,
            "what": ("server send transfers (dir passive, direction send) of the lab CDN scenario, "
                     "xfer_us; exact: all; sampled: the flows transfer_sampled(lport, rport, rate) "
                     "picks, i.e. the flows the kernel follows at that rate; 95 % interval: cluster "
                     "bootstrap over the sampled flows; both CC runs pooled per ASN"),
            "object_sizes": f"{sizes[0] / 1e3:g} kB - {sizes[-1] / 1e6:g} MB "
                            f"({', '.join(f'{s / 1e3:g}k' for s in sizes)}; plus the response header)",
            "paths": paths, "totals": totals, "groups": results, "skipped": skipped,
            "replicate_coverage": coverage,
            "analysis_seconds": None,
        }
        result["analysis_seconds"] = round(time.monotonic() - t0, 1)
        print_report(result, paths)
        print(f"\n  scenario {scenario.get('seconds', '?')} s, analysis {result['analysis_seconds']} s"
              + (f"; lab namespaces left: {scenario['leftover_netns'] or 'none'}"
                 if "leftover_netns" in scenario else ""))
        B.write_result("sampling_accuracy", result, args.out)
    finally:
        if own_workdir and not args.keep_workdir:
            shutil.rmtree(workdir, ignore_errors=True)
        elif not args.analyse:
            B.log(f"kept {workdir} (--analyse {workdir} analyses it again)")


if __name__ == "__main__":
    main()
