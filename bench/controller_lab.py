#!/usr/bin/env python3
"""The closed loop in the lab: first the CDN study with uniform policies, then
the controller (README "Closed loop") from a 50/50 start.

Testbed (tests/lab): one server namespace running our nginx kept alive,
behind one shared uplink (100 Mbit/s, a deep buffer: 1650 frames, four BDPs
at 50 ms), and behind it client namespaces on their own delay lines, one
private ASN each:

    c1  client        50 ms, 50 Mbit/s, 0.1 % loss
    c2  client-lossy  50 ms, 50 Mbit/s, 1 % loss
    p1  pop-to-pop    15 ms, 500 Mbit/s, 0.01 % loss (so the uplink is its bottleneck)

Traffic: Poisson arrivals of kept-alive connections, each fetching 3-6
objects of the mix (80 % 10-90 kB, 17 % 3.2 MB, 3 % 5 MB) with short pauses
(traffic_mix.py, xfer_peer.py). What is judged is what the controller judges:
the server's send transfers, small ones (< 3 MB) by completion time, large
ones by throughput, per ASN.

Phases (--phases, default all; each with its own daemon):

  uniform   all CUBIC, then all BBR (the server namespace's default): per
            cohort the small transfers' completion time (p50, p90), the large
            ones' throughput (p50), the flows' retransmit share, and
            `tcpscope compare --flows` on both runs' log (fct and
            throughput by ASN): which CC is better where.
  loop      a controller rule over the lab's clients (arms [bbr, cubic],
            cohort asn) from equal shares: when each cohort decides and for
            which arm, against the uniform runs' verdicts; then, settled,
            the same figures as the uniform runs, beside them. Then a loss
            change on a path (the delay line's live `set`) and what its
            cohort does; then a restart (SIGTERM, start again on the same
            STATE_DIRECTORY): the cohorts' states and weights before and
            after.
  aa        the same with arms [cubic, cubic]: the share of cohorts that
            decided (all of them wrongly).

    TCPSCOPE_BUILD=build bench/controller_lab.py                 # ~15 min
    TCPSCOPE_BUILD=build bench/controller_lab.py --phases loop --duration 120
    TCPSCOPE_BUILD=build bench/controller_lab.py --smoke         # ~2 min: what CI runs (tests/lab/test_lab_controller.py)

It prints figures and writes them with --json FILE (bench/results/controller_lab.json
when run whole). It judges nothing: what reproduced and what did not is in the
figures, and in bench/README.md with the reasons.
"""
import argparse
import importlib.util
import json
import os
import statistics
import subprocess
import sys
import threading
import time
import urllib.request
from pathlib import Path as FsPath

HERE = FsPath(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "tests" / "lab"))

import lab as labmod  # noqa: E402
import traffic_mix  # noqa: E402

_spec = importlib.util.spec_from_file_location("cdn_bbr_vs_cubic", HERE.parent / "tests" / "lab" / "scenarios" /
                                               "cdn_bbr_vs_cubic.py")
scenario = importlib.util.module_from_spec(_spec)  # its Daemon
_spec.loader.exec_module(scenario)

TCPSCOPE = labmod.BUILD / "tcpscope"
THROUGHPUT_MIN_BYTES = 3_000_000
PATHS = [  # (preset, name, asn, connections per second)
    ("client", "c1", 64601, 0.5),
    ("client-lossy", "c2", 64602, 0.5),
    ("pop-to-pop", "p1", 64611, 0.8),
]
UPLINK = labmod.Direction(rate_mbit=100, queue=1650)
OBJECTS = dict(traffic_mix.DEFAULT_OBJECTS, large=[5_000_000])
KEEPALIVE = "3-6"


def read_records(flow_log: FsPath, kind):
    """The flow log's records of one kind ("flow" or "transfer")."""
    if not flow_log.exists():
        return []
    out = []
    with open(flow_log) as f:
        for line in f:
            if line.endswith("\n"):
                r = json.loads(line)
                if r.get("kind", "flow") == kind:
                    out.append(r)
    return out


class ControllerDaemon(scenario.Daemon):
    """The scenario's daemon with a state directory that outlives it (a
    restart is a new ControllerDaemon on the same one) and its controller API."""

    def __init__(self, config: FsPath, workdir: FsPath, state_dir: FsPath, name="tcpscope"):
        super().__init__(config, workdir, name=name, env=dict(os.environ, STATE_DIRECTORY=str(state_dir)))

    def api(self):
        with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/api/v1/controller", timeout=10) as r:
            return json.loads(r.read())

    def cohorts(self):
        """{cohort label: cohort document} of the first controller rule."""
        rules = self.api()["rules"]
        return {c["cohort"]: c for c in rules[0]["cohorts"]} if rules else {}

    def stderr_text(self):
        return self.stderr_path.read_text()

    def lines(self, kind):
        return read_records(self.flow_log, kind)


def controller_config(lab, path: FsPath, arms=("bbr", "cubic"), min_transfers=40, interval_s=5,
                      control_percent=10):
    """The lab's classes and ASNs, and one controller rule over its clients'
    prefixes (not the server's addresses: the clients' own sockets, in the
    same cgroup, are left alone) on nginx's port: the controller counts only
    sockets accepted on the rule's ports (control/evidence_gate.h)."""
    prefixes = []
    for ep in lab.endpoints.values():
        prefixes += [ep.class_v4] + ([ep.class_v6] if lab.ipv6 else [])
    extra = f"""snapshot_interval_s: 0
cc_policy:
  rules:
    - name: auto
      match: {{ prefixes: [{", ".join(json.dumps(p) for p in prefixes)}], lports: [{traffic_mix.Nginx.PORT}] }}
      controller:
        arms: [{", ".join(arms)}]
        cohort: asn
        control_percent: {control_percent}
        min_transfers: {min_transfers}
        interval_s: {interval_s}
"""
    return lab.tcpscope_config(path, extra=extra)


def run_traffic(lab, workdir, rates, duration_s, label, seed=1):
    """One phase of kept-alive traffic from every path at once; returns its
    wall-clock window (ns)."""
    nginx = traffic_mix.Nginx(lab, workdir / f"nginx-{label}", objects=OBJECTS, keepalive=True).start()
    t0 = time.time_ns()
    try:
        traffic_mix.run_mix(lab, nginx, rates, duration_s, seed=seed, out_dir=workdir, label=label,
                            objects=OBJECTS, keepalive=KEEPALIVE)
    finally:
        nginx.stop()
    return t0, time.time_ns()


def quantile(values, q):
    if not values:
        return None
    s = sorted(values)
    return s[int(q * (len(s) - 1))]


def cohort_figures(daemon, lab, window, asns, arm=None):
    """Per ASN: the server's send transfers in the window, small by xfer time,
    large by throughput, and the retransmit share of its flows."""
    srv = lab.netns_ids[lab.server_ns]
    lo, hi = window
    out = {}
    transfers = [t for t in daemon.lines("transfer") if t["netns"] == srv and t["direction"] == "send"
                 and lo <= t["start_ns"] <= hi and (arm is None or t.get("arm") == arm)]
    flows = [f for f in daemon.lines("flow") if f["netns"] == srv and lo <= f["start_ns"] <= hi
             and f["dir"] == "passive" and (arm is None or f.get("arm") == arm)]
    for asn in asns:
        small = [t["xfer_us"] / 1e3 for t in transfers if t["asn"] == asn and t["bytes"] < THROUGHPUT_MIN_BYTES]
        large = [t["bytes"] * 8 / t["xfer_us"] for t in transfers
                 if t["asn"] == asn and t["bytes"] >= THROUGHPUT_MIN_BYTES and t["xfer_us"] > 0
                 and 2 * t["rwnd_limited_us"] <= t["xfer_us"]]
        fl = [f for f in flows if f["asn"] == asn]
        segs = sum(f["segs_out"] for f in fl)
        out[asn] = {"n_small": len(small), "small_p50_ms": quantile(small, 0.5), "small_p90_ms": quantile(small, 0.9),
                    "n_large": len(large), "large_p50_mbps": quantile(large, 0.5),
                    "retrans_share": sum(f["retrans_segs"] for f in fl) / segs if segs else None}
    return out


def compare_verdicts(flow_log, metric):
    """`tcpscope compare --flows` by ASN, cubic (a) vs bbr (b)."""
    r = subprocess.run([str(TCPSCOPE), "compare", "--flows", str(flow_log), "--by", "asn", "--a", "cc=cubic",
                        "--b", "cc=bbr", "--metric", metric, "--json"], capture_output=True, text=True, timeout=120)
    if r.returncode not in (0, 1):
        raise RuntimeError(f"compare failed: {r.stderr}")
    doc = json.loads(r.stdout)
    return {g["group"]: {"verdict": g["verdict"], "diff": g["diff"], "n_a": g["n_a"], "n_b": g["n_b"]}
            for g in doc["groups"]}


def fmt(v, digits=1):
    return "-" if v is None else f"{v:.{digits}f}"


def print_figures(title, figs):
    print(f"  {title}")
    print(f"    {'ASN':>6} {'small n':>8} {'p50 ms':>8} {'p90 ms':>8} {'large n':>8} {'p50 Mbit/s':>11} {'retrans':>8}")
    for asn, f in figs.items():
        print(f"    {asn:>6} {f['n_small']:>8} {fmt(f['small_p50_ms']):>8} {fmt(f['small_p90_ms']):>8} "
              f"{f['n_large']:>8} {fmt(f['large_p50_mbps']):>11} "
              f"{fmt(None if f['retrans_share'] is None else 100 * f['retrans_share'], 2):>7}%")


def phase_uniform(lab, workdir, rates, duration, report):
    asns = [asn for _, _, asn, _ in PATHS]
    cfg = lab.tcpscope_config(workdir / "uniform.yaml", extra="snapshot_interval_s: 0\n")
    d = ControllerDaemon(cfg, workdir, workdir / "state-uniform", name="uniform")
    lab.track(d.proc.pid)
    try:
        for cc in ("cubic", "bbr"):
            lab.set_cc(cc)
            print(f"== uniform {cc}: {duration:.0f} s", flush=True)
            window = run_traffic(lab, workdir, rates, duration, f"uniform-{cc}")
            time.sleep(1.5)
            report["uniform"][cc] = cohort_figures(d, lab, window, asns)
            print_figures(f"all {cc}", report["uniform"][cc])
    finally:
        d.stop()
    for metric in ("fct", "throughput"):
        report["uniform"]["compare_" + metric] = compare_verdicts(d.flow_log, metric)
    print("  tcpscope compare --flows (a = cubic, b = bbr), send transfers:")
    for metric in ("fct", "throughput"):
        for asn, v in report["uniform"]["compare_" + metric].items():
            print(f"    {metric:>10} AS{asn}: {v['verdict']} ({fmt(100 * v['diff'] if v['diff'] is not None else None)}%,"
                  f" n {v['n_a']}/{v['n_b']})")


def poll_until(daemon, stop_at, every, on_poll):
    while time.monotonic() < stop_at:
        on_poll(daemon.cohorts())
        time.sleep(every)


def run_with_polls(lab, workdir, daemon, rates, duration, label, every, on_poll, seed=1):
    """Traffic in a thread, the controller polled meanwhile; the window."""
    result = {}

    def traffic():
        try:
            result["window"] = run_traffic(lab, workdir, rates, duration, label, seed=seed)
        except BaseException as e:  # noqa: BLE001  (re-raised below)
            result["error"] = e

    t = threading.Thread(target=traffic)
    t.start()
    while t.is_alive():
        on_poll(daemon.cohorts())
        t.join(timeout=every)
    if "error" in result:
        raise result["error"]
    on_poll(daemon.cohorts())
    return result["window"]


def summarize(cohorts):
    return {label: {"state": c["state"], "winner": c["winner"], "weights": c["weights"]} for label, c in cohorts.items()}


def phase_loop(lab, workdir, rates, duration, report, arms=("bbr", "cubic"), name="loop", min_transfers=40,
               interval_s=5, settle=True, loss_change=True, restart=True):
    state = workdir / f"state-{name}"
    state.mkdir(mode=0o700, exist_ok=True)
    cfg = controller_config(lab, workdir / f"{name}.yaml", arms=arms, min_transfers=min_transfers,
                            interval_s=interval_s)
    lab.set_cc("cubic")  # only the rule's flows are steered; the rest keep the default
    out = report.setdefault(name, {"decisions": {}})
    d = ControllerDaemon(cfg, workdir, state, name=name)
    lab.track(d.proc.pid)
    t0 = time.monotonic()

    def on_poll(cohorts):
        now = round(time.monotonic() - t0, 1)
        for label, c in cohorts.items():
            seen = out["decisions"].setdefault(label, [])
            key = (c["state"], c["winner"])
            if not seen or (seen[-1]["state"], seen[-1]["winner"]) != key:
                seen.append({"t_s": now, "state": c["state"], "winner": c["winner"], "weights": c["weights"]})

    try:
        print(f"== controller {list(arms)}: {duration:.0f} s from equal shares "
              f"(min_transfers {min_transfers}, every {interval_s} s)", flush=True)
        window = run_with_polls(lab, workdir, d, rates, duration, f"{name}-learn", interval_s, on_poll)
        for label, seen in out["decisions"].items():
            print(f"  cohort {label:>10}: " + " -> ".join(
                f"{s['state']}{'(' + s['winner'] + ')' if s['winner'] else ''} at {s['t_s']} s" for s in seen))
        asns = [asn for _, _, asn, _ in PATHS]
        if settle:
            # Settled: a second run with the weights the controller holds now.
            print(f"== controller settled: {duration:.0f} s more", flush=True)
            window = run_with_polls(lab, workdir, d, rates, duration, f"{name}-settled", interval_s, on_poll, seed=2)
            out["settled"] = cohort_figures(d, lab, window, asns)
            out["settled_weights"] = summarize(d.cohorts())
            print_figures("the mix under the controller", out["settled"])
        if loss_change:
            print("== loss change: p1 (pop-to-pop) 0.01 % -> 2 % both ways", flush=True)
            lab.set_path("p1", "both", loss=0.02)
            out["loss_change_at_s"] = round(time.monotonic() - t0, 1)
            run_with_polls(lab, workdir, d, rates, duration, f"{name}-loss", interval_s, on_poll, seed=3)
            lab.set_path("p1", "both", loss=0.0001)
            p1 = out["decisions"].get("64611", [])
            print("  cohort 64611 after the change: " + " -> ".join(
                f"{s['state']}{'(' + s['winner'] + ')' if s['winner'] else ''} at {s['t_s']} s"
                for s in p1 if s["t_s"] >= out["loss_change_at_s"]))
        out["final"] = summarize(d.cohorts())
    finally:
        d.stop()
    if restart:
        before = out["final"]
        d2 = ControllerDaemon(cfg, workdir, state, name=f"{name}-restarted")
        lab.track(d2.proc.pid)
        try:
            after = summarize(d2.cohorts())
            out["restart"] = {"before": before, "after": after, "same": before == after,
                              "restored": "controller state restored" in d2.stderr_text()}
            print(f"== restart: {len(after)} cohorts, states and weights "
                  f"{'the same' if before == after else 'DIFFERENT'} after the restart")
        finally:
            d2.stop()
    return out


def phase_aa(lab, workdir, rates, duration, report):
    out = phase_loop(lab, workdir, rates, duration, report, arms=("cubic", "cubic"), name="aa",
                     settle=False, loss_change=False, restart=False)
    final = out["final"]
    decided = [k for k, c in final.items() if c["state"] != "exploring"]
    out["decided_share"] = len(decided) / len(final) if final else None
    print(f"  A/A: {len(decided)} of {len(final)} cohorts decided")


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--phases", default="uniform,loop,aa")
    p.add_argument("--duration", type=float, default=120, help="seconds of traffic per run")
    p.add_argument("--rate-scale", type=float, default=1.0)
    p.add_argument("--json", help="write the figures here")
    p.add_argument("--workdir")
    p.add_argument("--smoke", action="store_true", help="the short run CI makes: loop and restart only")
    p.add_argument("--no-uplink", action="store_true", help="each path straight from the server, no shared uplink")
    args = p.parse_args(argv)
    report = smoke() if args.smoke else full(args)
    path = args.json or (str(HERE / "results" / "controller_lab.json") if args.phases == "uniform,loop,aa"
                         and not args.smoke else None)
    if path:
        FsPath(path).write_text(json.dumps(report, indent=1) + "\n")
        print(f"figures: {path}")


def full(args):
    workdir = FsPath(args.workdir or f"/tmp/tcpscope-controller-{os.getpid()}")
    workdir.mkdir(parents=True, exist_ok=True)
    paths = [labmod.Path.preset(preset, name=name, asn=asn) for preset, name, asn, _ in PATHS]
    rates = {name: rate * args.rate_scale for _, name, _, rate in PATHS}
    uplink = None if args.no_uplink else UPLINK
    report = {"paths": PATHS, "objects": OBJECTS, "keepalive": KEEPALIVE, "duration_s": args.duration,
              "uplink": None if uplink is None else {"rate_mbit": uplink.rate_mbit, "queue_frames": uplink.queue},
              "uniform": {}}
    phases = args.phases.split(",")
    with labmod.Lab(paths, workdir=workdir / "lab", uplink=uplink) as lab:
        if "uniform" in phases:
            phase_uniform(lab, workdir, rates, args.duration, report)
        if "loop" in phases:
            phase_loop(lab, workdir, rates, args.duration, report)
        if "aa" in phases:
            phase_aa(lab, workdir, rates, args.duration, report)
    return report


def smoke(workdir=None, duration=75):
    """The CI run: the lossy client path and a pop-to-pop path, the loop with
    min_transfers 12 every 2 s, then a restart. On the lossy path BBR's large
    transfers ran 12x CUBIC's throughput in the full runs, an effect a
    dozen transfers per arm show beyond doubt. Returns the report."""
    workdir = FsPath(workdir or f"/tmp/tcpscope-controller-smoke-{os.getpid()}")
    workdir.mkdir(parents=True, exist_ok=True)
    paths = [labmod.Path.preset("client-lossy", name="c2", asn=64602),
             labmod.Path.preset("pop-to-pop", name="p1", asn=64611)]
    report = {}
    with labmod.Lab(paths, workdir=workdir / "lab") as lab:
        out = phase_loop(lab, workdir, {"c2": 0.8, "p1": 0.6}, duration, report, min_transfers=12, interval_s=2,
                         settle=False, loss_change=False)
        # The clients' connections (nginx's readiness probe comes from the server itself).
        out["server_flows"] = [f for f in read_records(workdir / "loop.flows.ndjson", "flow")
                               if f["netns"] == lab.netns_ids[lab.server_ns] and f["dir"] == "passive"
                               and f["asn"] in (64602, 64611)]
    return report


if __name__ == "__main__":
    main()
