#!/usr/bin/env python3
"""The closed loop in the lab: does it pay? The controller (docs/policy.md
"Closed loop") against every uniform policy, the per-cohort oracle and a
bpftune-style learner, on the same arrivals.

The study (default; `--phases study`). One server namespace running our
nginx kept alive; each client cohort behind its own access bottleneck, as
in the CDN study's testbed (tests/lab delay lines), one private ASN each:

    c2  client 50 ms, 50 Mbit/s, one-BDP buffer, 1 % loss       1.0 conn/s, the mix
    p1  pop-to-pop 15 ms, 500 Mbit/s, 0.01 % loss               0.8 conn/s, small objects only
    n1  client 40 ms, clean, no rate limit                      0.5 conn/s, the mix
    h1  client 50 ms, 20 Mbit/s, eight-BDP buffer shared with   0.5 conn/s, the mix
        a long-lived CUBIC download to the same household
    i1  intra-pop: a plain veth, unshaped                       1.0 conn/s, the mix

The mix: kept-alive connections of 3-6 objects (80 % 10-90 kB, 17 % 3.2 MB,
3 % 5 MB) with short pauses (traffic_mix.py, xfer_peer.py), Poisson
arrivals. Judged as the controller judges: the server's send transfers,
small ones (< 3 MB) by completion time, large ones by throughput, per ASN.
Policies, each with its own daemon, in this order:

  all-cubic, all-bbr   a settled window (seed 2): which arm each cohort prefers,
                       by how much (the candidates that reproduce)
  oracle               each cohort on the arm its uniform runs found better
                       (one `cc:` rule per cohort), the same window
  learner              bench/bpftune_learner.py from a cold start: the learning
                       window (seed 1), then the settled one; its weights go
                       into an `experiment:` rule (rewrite, SIGHUP)
  controller           a `controller:` rule from a cold start, the same two
                       windows

Figures: per cohort and policy the objectives (p50 and mean); the score,
policy / oracle per cohort (oracle/policy for completion time,
policy/oracle for throughput, their mean where a cohort has both) and its
mean over cohorts; regret per minute of the learning window against the
oracle's settled figures, cumulative; the first five minutes' mean
throughput on the cohort of the largest effect; when each cohort decided.
`--shared-uplink` puts every path but the intra-pop one behind one
100 Mbit/s uplink with a deep buffer (the stress case).

    TCPSCOPE_BUILD=build bench/controller_lab.py --learn 1800 --settled 240   # ~85 min
    TCPSCOPE_BUILD=build bench/controller_lab.py --shared-uplink --learn 300 --settled 180
    TCPSCOPE_BUILD=build bench/controller_lab.py --smoke             # ~2 min: what CI runs (tests/lab/test_lab_controller.py)

`--phases candidates [--paths j1,...]`: all-CUBIC then all-BBR on more paths
that might prefer CUBIC (CANDIDATE_PATHS), the same arrivals.

The loop's machinery on the older testbed (every path behind the shared
uplink, unless --no-uplink): `--phases uniform,loop,aa`:

  uniform   all CUBIC, then all BBR: per cohort the small transfers'
            completion time (p50, p90), the large ones' throughput (p50),
            the flows' retransmit share, `tcpscope compare --flows` verdicts.
  loop      a controller rule from equal shares: when each cohort decides,
            the mix once settled, a loss change on a path and what its
            cohort does, a restart on the same STATE_DIRECTORY.
  aa        the same with arms [cubic, cubic]: the share of cohorts that
            decided (all of them wrongly).

It prints figures and writes them with --json FILE (bench/results/
controller_study.json, controller_study_shared_uplink.json,
controller_lab.json when run whole). It judges nothing: what reproduced and
what did not is in the figures, and in bench/README.md with the reasons.
"""
import argparse
import importlib.util
import json
import os
import statistics
import subprocess
import sys
import signal
import threading
import time
import urllib.request
from pathlib import Path as FsPath

HERE = FsPath(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "tests" / "lab"))
sys.path.insert(0, str(HERE))  # bpftune_learner, when this file is loaded as a module

import lab as labmod  # noqa: E402
import traffic_mix  # noqa: E402
from bpftune_learner import BpftuneStyleLearner  # noqa: E402

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


class FlowLogTail:
    """The flow log's new records since the last call, by kind."""

    def __init__(self, path: FsPath):
        self.path = path
        self.offset = 0

    def new(self, kind):
        if not self.path.exists():
            return []
        out = []
        with open(self.path, "rb") as f:
            f.seek(self.offset)
            for line in f:
                if not line.endswith(b"\n"):
                    break
                self.offset += len(line)
                r = json.loads(line)
                if r.get("kind", "flow") == kind:
                    out.append(r)
        return out


def read_records(flow_log: FsPath, kind):
    """The flow log's records of one kind ("flow" or "transfer")."""
    return FlowLogTail(flow_log).new(kind)


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


def clients_rule(lab, name, action, paths=None):
    """One rule over the lab's clients' prefixes (those of `paths`, default
    all; not the server's addresses: the clients' own sockets, in the same
    cgroup, are left alone) on nginx's port; `action` is its indented
    cc/experiment/controller lines. A controller counts only sockets
    accepted on the rule's ports (control/evidence_gate.h), and cross flows
    on other ports stay outside."""
    eps = [lab.ep(n) for n in paths] if paths else lab.endpoints.values()
    prefixes = [q for ep in eps for q in [ep.class_v4] + ([ep.class_v6] if lab.ipv6 else [])]
    return (f"    - name: {name}\n      match: {{ prefixes: [{', '.join(json.dumps(q) for q in prefixes)}], "
            f"lports: [{traffic_mix.Nginx.PORT}] }}\n" + action)


def plain_config(lab, path: FsPath, extra="") -> FsPath:
    """The lab's classes and ASNs, no open-flow snapshots (the runs read
    closed flows only), then `extra`: with none the kernel's default CC
    serves every flow."""
    return lab.tcpscope_config(path, extra="snapshot_interval_s: 0\n" + extra)


def policy_config(lab, path: FsPath, rules: str) -> FsPath:
    """The lab's classes and ASNs, and these cc_policy rules."""
    return plain_config(lab, path, "cc_policy:\n  rules:\n" + rules)


def controller_config(lab, path: FsPath, arms=("bbr", "cubic"), min_transfers=40, interval_s=5,
                      control_percent=10):
    return policy_config(lab, path, clients_rule(lab, "auto", f"""      controller:
        arms: [{", ".join(arms)}]
        cohort: asn
        control_percent: {control_percent}
        min_transfers: {min_transfers}
        interval_s: {interval_s}
        evidence_netns: [{lab.server_ns}]
"""))


def run_traffic(lab, workdir, rates, duration_s, label, seed=1, mixes=None):
    """One phase of kept-alive traffic from every path at once; returns its
    wall-clock window (ns). mixes: {path name: mix} where not the default."""
    nginx = traffic_mix.Nginx(lab, workdir / f"nginx-{label}", objects=OBJECTS, keepalive=True).start()
    t0 = time.time_ns()
    try:
        traffic_mix.run_mix(lab, nginx, rates, duration_s, seed=seed, out_dir=workdir, label=label,
                            objects=OBJECTS, keepalive=KEEPALIVE, mixes=mixes)
    finally:
        nginx.stop()
    return t0, time.time_ns()


def quantile(values, q):
    if not values:
        return None
    s = sorted(values)
    return s[int(q * (len(s) - 1))]


def server_transfers(daemon, lab, window):
    """The server's send transfers on nginx's port in the window, by ASN:
    [(start_ns, bytes, xfer_us)] with rwnd-limited large ones left out (the
    client's window, not the sender's CC, set their pace)."""
    srv = lab.netns_ids[lab.server_ns]
    lo, hi = window
    out = {}
    for t in daemon.lines("transfer"):
        if (t["netns"] == srv and t["direction"] == "send" and t["lport"] == traffic_mix.Nginx.PORT
                and lo <= t["start_ns"] <= hi and t["xfer_us"] > 0
                and (t["bytes"] < THROUGHPUT_MIN_BYTES or 2 * t["rwnd_limited_us"] <= t["xfer_us"])):
            out.setdefault(t["asn"], []).append((t["start_ns"], t["bytes"], t["xfer_us"]))
    return out


def window_objectives(daemon, lab, window, asns):
    """objectives() of each ASN's server transfers in the window."""
    tr = server_transfers(daemon, lab, window)
    return {asn: objectives(tr.get(asn, [])) for asn in asns}


def objectives(transfers):
    """Small transfers' completion time (ms) and large ones' throughput
    (Mbit/s): their medians, means and geometric means (the mean of log
    values is what the controller's test compares)."""
    small = [x / 1e3 for _, b, x in transfers if b < THROUGHPUT_MIN_BYTES]
    large = [b * 8 / x for _, b, x in transfers if b >= THROUGHPUT_MIN_BYTES]
    return {"n_small": len(small), "small_p50_ms": quantile(small, 0.5),
            "small_mean_ms": statistics.fmean(small) if small else None,
            "small_gmean_ms": statistics.geometric_mean(small) if small else None,
            "n_large": len(large), "large_p50_mbps": quantile(large, 0.5),
            "large_mean_mbps": statistics.fmean(large) if large else None,
            "large_gmean_mbps": statistics.geometric_mean(large) if large else None}


def cohort_figures(daemon, lab, window, asns):
    """objectives() per ASN, with the small transfers' p90 and the retransmit
    share of the cohort's flows."""
    srv = lab.netns_ids[lab.server_ns]
    lo, hi = window
    transfers = server_transfers(daemon, lab, window)
    flows = [f for f in daemon.lines("flow") if f["netns"] == srv and lo <= f["start_ns"] <= hi
             and f["dir"] == "passive"]
    out = {}
    for asn in asns:
        tr = transfers.get(asn, [])
        fl = [f for f in flows if f["asn"] == asn]
        segs = sum(f["segs_out"] for f in fl)
        out[asn] = {**objectives(tr),
                    "small_p90_ms": quantile([x / 1e3 for _, b, x in tr if b < THROUGHPUT_MIN_BYTES], 0.9),
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
    cfg = plain_config(lab, workdir / "uniform.yaml")
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


def run_with_polls(lab, workdir, rates, duration, label, every, on_poll, seed=1, mixes=None):
    """Traffic in a thread, on_poll() every `every` s meanwhile and once at
    the end; the window."""
    result = {}

    def traffic():
        try:
            result["window"] = run_traffic(lab, workdir, rates, duration, label, seed=seed, mixes=mixes)
        except BaseException as e:  # noqa: BLE001  (re-raised below)
            result["error"] = e

    t = threading.Thread(target=traffic)
    t.start()
    while t.is_alive():
        on_poll()
        t.join(timeout=every)
    if "error" in result:
        raise result["error"]
    on_poll()
    return result["window"]


def summarize(cohorts):
    return {label: {"state": c["state"], "winner": c["winner"], "weights": c["weights"]} for label, c in cohorts.items()}


class DecisionLog:
    """A controller daemon's cohorts as its API shows them, polled: each
    change of state or winner, when, and the test behind it."""

    def __init__(self):
        self.decisions, self.final = {}, {}

    def poll(self, d, t_s, _cfg=None):
        cohorts = d.cohorts()
        self.final.update(summarize(cohorts))
        for label, c in cohorts.items():
            seen = self.decisions.setdefault(label, [])
            if not seen or (seen[-1]["state"], seen[-1]["winner"]) != (c["state"], c["winner"]):
                seen.append({"t_s": t_s, "state": c["state"], "winner": c["winner"], "weights": c["weights"],
                             "decision": c["evidence"].get("last_decision")})


def phase_loop(lab, workdir, rates, duration, report, arms=("bbr", "cubic"), name="loop", min_transfers=40,
               interval_s=5, settle=True, loss_change=True, restart=True):
    state = workdir / f"state-{name}"
    state.mkdir(mode=0o700, exist_ok=True)
    cfg = controller_config(lab, workdir / f"{name}.yaml", arms=arms, min_transfers=min_transfers,
                            interval_s=interval_s)
    lab.set_cc("cubic")  # only the rule's flows are steered; the rest keep the default
    log = DecisionLog()
    out = report.setdefault(name, {})
    out["decisions"] = log.decisions
    d = ControllerDaemon(cfg, workdir, state, name=name)
    lab.track(d.proc.pid)
    t0 = time.monotonic()

    def on_poll():
        log.poll(d, round(time.monotonic() - t0, 1))

    try:
        print(f"== controller {list(arms)}: {duration:.0f} s from equal shares "
              f"(min_transfers {min_transfers}, every {interval_s} s)", flush=True)
        window = run_with_polls(lab, workdir, rates, duration, f"{name}-learn", interval_s, on_poll)
        for label, seen in out["decisions"].items():
            print(f"  cohort {label:>10}: " + " -> ".join(
                f"{s['state']}{'(' + s['winner'] + ')' if s['winner'] else ''} at {s['t_s']} s" for s in seen))
        asns = [asn for _, _, asn, _ in PATHS]
        if settle:
            # Settled: a second run with the weights the controller holds now.
            print(f"== controller settled: {duration:.0f} s more", flush=True)
            window = run_with_polls(lab, workdir, rates, duration, f"{name}-settled", interval_s,
                                    on_poll, seed=2)
            out["settled"] = cohort_figures(d, lab, window, asns)
            out["settled_weights"] = summarize(d.cohorts())
            print_figures("the mix under the controller", out["settled"])
        if loss_change:
            print("== loss change: p1 (pop-to-pop) 0.01 % -> 2 % both ways", flush=True)
            lab.set_path("p1", "both", loss=0.02)
            out["loss_change_at_s"] = round(time.monotonic() - t0, 1)
            run_with_polls(lab, workdir, rates, duration, f"{name}-loss", interval_s, on_poll,
                           seed=3)
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


# -- The study: the loop against every uniform policy, the oracle and a learner --

# Intra-pop: a plain veth, no shaping, a round trip of tens of microseconds.
# No link limits the rate, the CPUs do; with no fq qdisc BBR paces inside TCP.
INTRA_POP = ("i1", 64661, 1.0, labmod.Path.preset("intra-pop", name="i1", asn=64661), False)
STUDY_PATHS = [  # (name, ASN, connections per second, the path, a long-lived CUBIC cross flow on it)
    ("c2", 64602, 1.0, labmod.Path.preset("client-lossy", name="c2", asn=64602), False),
    ("p1", 64611, 0.8, labmod.Path.preset("pop-to-pop", name="p1", asn=64611), False),
    ("n1", 64621, 0.5, labmod.Path.symmetric("n1", delay_ms=20, peer_class="client", asn=64621), False),
    # A home link: 20 Mbit/s, 50 ms, a buffer of eight BDPs, shared with a
    # long-lived CUBIC download to another address of the same household.
    ("h1", 64631, 0.5, labmod.Path.symmetric("h1", delay_ms=25, rate_mbit=20, queue=660, peer_class="client",
                                             asn=64631, extra_clients=1), True),
    INTRA_POP,  # the cohort that prefers CUBIC
]
# Pop-to-pop traffic here is small objects only (fills, manifests): the seed
# study's candidate for CUBIC (its completion time).
STUDY_MIXES = {"p1": {"small": 1.0, "medium": 0.0, "large": 0.0}}
CROSS_PORT = 5201
CROSS_SENDER = ("import socket,sys,time\n"
                "s=socket.socket(socket.AF_INET)\n"
                "s.setsockopt(socket.IPPROTO_TCP, socket.TCP_CONGESTION, b'cubic')\n"
                "s.connect((sys.argv[1], int(sys.argv[2])))\n"
                "b=b'x'*65536; end=time.monotonic()+float(sys.argv[3])\n"
                "while time.monotonic()<end: s.sendall(b)\n")
CROSS_RECEIVER = ("import socket,sys\n"
                  "l=socket.socket(socket.AF_INET); l.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)\n"
                  "l.bind((sys.argv[1], int(sys.argv[2]))); l.listen(1); print('ready', flush=True)\n"
                  "c,_=l.accept()\n"
                  "while c.recv(1<<20): pass\n")
BIN_S = 60


class CrossFlows:
    """Long-lived CUBIC downloads from the server on the paths that have one,
    for one run (started before its traffic, stopped after)."""

    def __init__(self, lab, names, duration_s):
        self.procs = []
        for name in names:
            ep = lab.ep(name)
            rx = lab.popen(ep.client_ns, sys.executable, "-c", CROSS_RECEIVER, ep.client_v4[1], CROSS_PORT)
            if rx.stdout.readline().strip() != "ready":
                raise RuntimeError(f"cross-flow receiver on {name}: {rx.stderr.read()}")
            tx = lab.popen(lab.server_ns, sys.executable, "-c", CROSS_SENDER, ep.client_v4[1], CROSS_PORT,
                           duration_s + 60)
            self.procs += [tx, rx]
        time.sleep(5 if names else 0)  # the cross flow fills the buffer before the run starts

    def stop(self):
        for p in self.procs:
            p.kill()
            p.wait()


# More candidates for a cohort that prefers CUBIC, beyond the study's: paths
# where BBR v1's model is known to be weakest.
CANDIDATE_PATHS = [  # (name, ASN, connections per second, the path, a long-lived CUBIC cross flow on it)
    # Jitter both ways (frames keep their order): min_rtt far below the
    # typical RTT, where BBR's in-flight cap (2 x bandwidth x min_rtt) might bind.
    ("j1", 64641, 1.0, labmod.Path.symmetric("j1", delay_ms=1, jitter_ms=0.9, rate_mbit=500, queue=1000,
                                             peer_class="pop-to-pop", asn=64641), False),
    ("j2", 64642, 1.0, labmod.Path.symmetric("j2", delay_ms=10, jitter_ms=8, rate_mbit=50, queue=330,
                                             peer_class="client", asn=64642), False),
    # Jitter on the ACKs' way only: they arrive bunched.
    ("j3", 64643, 1.0, labmod.Path("j3", down=labmod.Direction(20, 0, 0, 100, 800),
                                   up=labmod.Direction(20, 15), peer_class="client", asn=64643), False),
    # A shallow buffer (0.9 BDP) at a 2 ms RTT, three connections a second.
    ("s1", 64651, 3.0, labmod.Path.symmetric("s1", delay_ms=1, rate_mbit=200, queue=30, peer_class="pop-to-pop",
                                             asn=64651), False),
    # A deep buffer (8 BDPs) at a 10 ms RTT, shared with a long-lived CUBIC flow.
    ("d1", 64652, 1.0, labmod.Path.symmetric("d1", delay_ms=5, rate_mbit=100, queue=700, peer_class="pop-to-pop",
                                             asn=64652, extra_clients=1), True),
    INTRA_POP,
]


def uniform_verdicts(figs, name_of):
    """From the uniform runs' figures ({"cubic": ..., "bbr": ...}, per ASN),
    per path: the better arm (better_arm) and BBR's effect on each objective."""
    out = {}
    for asn, name in name_of.items():
        arm, eff = better_arm(figs["cubic"][asn], figs["bbr"][asn])
        out[name] = {"asn": asn, "better": arm, "bbr_vs_cubic": eff}
    return out


def candidates_markdown(reports):
    """The candidates' runs side by side: BBR against CUBIC per path and run
    (a run may have only some of the paths: --paths)."""
    out = ["| path | run | small FCT p50 / mean / geometric mean | large throughput p50 / mean / geometric mean "
           "| small transfers cubic / bbr | better on the medians |", "| --- | --- | --- | --- | --- | --- |"]
    pct = lambda v: "–" if v is None else f"{100 * v:+.1f} %"  # noqa: E731
    names = list(dict.fromkeys(name for rep in reports for name in rep["verdicts"]))
    for name in names:
        for k, rep in ((k, rep) for k, rep in enumerate(reports, 1) if name in rep["verdicts"]):
            v, asn = rep["verdicts"][name], str(rep["verdicts"][name]["asn"])
            e = v["bbr_vs_cubic"]
            out.append(f"| {name} | {k} ({rep['started'][11:16]}) | "
                       + " / ".join(pct(e[f"small_{s}_fct"]) for s in ("p50", "mean", "gmean")) + " | "
                       + " / ".join(pct(e[f"large_{s}_throughput"]) for s in ("p50", "mean", "gmean")) + " | "
                       + f"{rep['figures']['cubic'][asn]['n_small']} / {rep['figures']['bbr'][asn]['n_small']} | "
                       + f"{v['better']} |")
    return "\n".join(out)


def print_verdicts(verdicts):
    for name, v in verdicts.items():
        print(f"    {name}: {v['better']} better; BBR vs CUBIC " + ", ".join(
            f"{k} {fmt(None if e is None else 100 * e)}%" for k, e in v["bbr_vs_cubic"].items()), flush=True)


def settled_figures(lab, workdir, paths, seconds, label, config, set_cc="cubic"):
    """One policy's run of `seconds` on the same arrivals (seed 2) as every
    other: objectives() per ASN."""
    rates = {name: rate for name, _, rate, _, _ in paths}
    cross = [name for name, *_, has_cross in paths if has_cross]
    name_of = {asn: name for name, asn, *_ in paths}
    d, win = run_policy(lab, workdir, rates, cross, [("settled", seconds, 2)], label, config, set_cc=set_cc)
    figs = window_objectives(d, lab, win["settled"], name_of)
    print_study(label, figs, name_of)
    return figs


def phase_candidates(lab, workdir, duration, report, paths):
    """All-CUBIC then all-BBR on the same arrivals: which arm each path's
    cohort prefers, and by how much on each objective."""
    figs = {cc: settled_figures(lab, workdir, paths, duration, f"all-{cc}", lambda path: plain_config(lab, path),
                                set_cc=cc) for cc in ("cubic", "bbr")}
    report["figures"] = figs
    report["verdicts"] = uniform_verdicts(figs, {asn: name for name, asn, *_ in paths})
    print_verdicts(report["verdicts"])
    return report


def oracle_config(lab, path, arms_by_path):
    """One `cc:` rule per cohort: the arm its uniform runs found better."""
    return policy_config(lab, path, "".join(clients_rule(lab, f"oracle-{name}", f"      cc: {arm}\n", [name])
                                            for name, arm in arms_by_path.items()))


def learner_config(lab, path, weights):
    return policy_config(lab, path, clients_rule(lab, "learner", "      experiment:\n        name: bpftune\n"
                                                 "        arms: { " + ", ".join(f"{a}: {w}" for a, w in weights.items())
                                                 + " }\n"))


def ratio_to_oracle(fig, oracle, stat):
    """The policy's objective over the oracle's (1 = the oracle; higher is
    better): oracle/policy for completion time, policy/oracle for throughput;
    the mean of the two where both exist."""
    parts = []
    if fig[f"small_{stat}_ms"] and oracle[f"small_{stat}_ms"]:
        parts.append(oracle[f"small_{stat}_ms"] / fig[f"small_{stat}_ms"])
    if fig[f"large_{stat}_mbps"] and oracle[f"large_{stat}_mbps"]:
        parts.append(fig[f"large_{stat}_mbps"] / oracle[f"large_{stat}_mbps"])
    return statistics.fmean(parts) if parts else None


def better_arm(cubic, bbr):
    """The arm the uniform runs found better on the medians' score above
    (BBR's figures over CUBIC's: the controller tests the mean of log values,
    a median's kin), with the effect on each objective's median, mean and
    geometric mean."""
    score = ratio_to_oracle(bbr, cubic, "p50")
    eff = {f"{kind}_{stat}_{what}": None if not (cubic.get(key) and bbr.get(key)) else bbr[key] / cubic[key] - 1
           for kind, what, unit in (("small", "fct", "ms"), ("large", "throughput", "mbps"))
           for stat in ("p50", "mean", "gmean") for key in [f"{kind}_{stat}_{unit}"]}
    return ("bbr" if score is not None and score > 1 else "cubic"), eff


class LearnerDriver:
    """Runs BpftuneStyleLearner on the daemon's closed flows (the server's
    accepted connections on nginx's port) and puts its weights into the
    daemon's experiment rule (rewrite, SIGHUP) when they change."""

    def __init__(self, lab, daemon, config_path, learner, asns):
        self.lab, self.daemon, self.config_path, self.learner = lab, daemon, config_path, learner
        self.asns = set(asns)  # the clients' (nginx's readiness probe comes from the server itself)
        self.tail = FlowLogTail(daemon.flow_log)
        self.applied = learner.weights()
        self.changes = []

    def poll(self, t_s):
        srv = self.lab.netns_ids[self.lab.server_ns]
        for f in self.tail.new("flow"):
            if (f["netns"] == srv and f["dir"] == "passive" and f["lport"] == traffic_mix.Nginx.PORT
                    and f["asn"] in self.asns):
                self.learner.observe(f["cc"], f["min_rtt_us"], f["delivery_rate_bps"])
        w = self.learner.weights()
        if w != self.applied:
            learner_config(self.lab, self.config_path, w)
            self.daemon.proc.send_signal(signal.SIGHUP)
            self.applied = w
            self.changes.append({"t_s": t_s, "weights": w, "cost": dict(self.learner.cost)})


def run_policy(lab, workdir, rates, cross, windows, label, config, poll=None, every=2.0, set_cc="cubic"):
    """One policy's daemon through consecutive windows [(name, seconds, seed)]:
    {window name: (t0_ns, t1_ns)}. poll(daemon, t_s, config path) runs every
    `every` s and once at the end."""
    lab.set_cc(set_cc)
    state = workdir / f"state-{label}"
    state.mkdir(mode=0o700, exist_ok=True)
    cfg = workdir / f"{label}.yaml"
    d = ControllerDaemon(config(cfg), workdir, state, name=label)
    lab.track(d.proc.pid)
    t0 = time.monotonic()
    on_poll = (lambda: poll(d, round(time.monotonic() - t0, 1), cfg)) if poll else (lambda: None)
    out = {}
    try:
        for wname, seconds, seed in windows:
            print(f"== {label} {wname}: {seconds:.0f} s", flush=True)
            xf = CrossFlows(lab, cross, seconds)
            try:
                out[wname] = run_with_polls(lab, workdir, rates, seconds, f"{label}-{wname}", every, on_poll,
                                            seed=seed, mixes=STUDY_MIXES)
            finally:
                xf.stop()
        time.sleep(1.5)  # the last connections' records
        on_poll()
    finally:
        d.stop()  # its rules leave the kernel with it; its flow log stays to be read
    return d, out


def binned_regret(transfers_by_asn, window, oracle_figs, asns):
    """Per BIN_S bin of the window: the mean over cohorts of 1 - (the bin's
    objective / the oracle's settled one) on means, and its running sum in
    minutes (1 = a whole minute of every cohort's objective lost)."""
    lo, hi = window
    bins = []
    cum = 0.0
    for k in range(int((hi - lo) / 1e9 // BIN_S)):
        b_lo, b_hi = lo + k * BIN_S * 10**9, lo + (k + 1) * BIN_S * 10**9
        ratios = []
        for asn in asns:
            fig = objectives([t for t in transfers_by_asn.get(asn, []) if b_lo <= t[0] < b_hi])
            r = ratio_to_oracle(fig, oracle_figs[asn], "mean")
            if r is not None:
                ratios.append(r)
        regret = 1 - statistics.fmean(ratios) if ratios else None
        cum += (regret or 0.0) * BIN_S / 60
        bins.append({"t_s": (k + 1) * BIN_S, "regret": regret, "cumulative": cum})
    return bins


def phase_study(lab, workdir, learn_s, settled_s, report, min_transfers, interval_s, paths=STUDY_PATHS):
    rates = {name: rate for name, _, rate, _, _ in paths}
    cross = [name for name, *_, has_cross in paths if has_cross]
    asns = [asn for _, asn, *_ in paths]
    name_of = {asn: name for name, asn, *_ in paths}
    figs = {}
    for cc in ("cubic", "bbr"):
        figs[f"all-{cc}"] = settled_figures(lab, workdir, paths, settled_s, f"all-{cc}",
                                            lambda path: plain_config(lab, path), set_cc=cc)
    verdicts = uniform_verdicts({"cubic": figs["all-cubic"], "bbr": figs["all-bbr"]}, name_of)
    oracle_arms = {name: v["better"] for name, v in verdicts.items()}
    effects = {v["asn"]: v["bbr_vs_cubic"] for v in verdicts.values()}
    report["oracle_arms"], report["effects"] = oracle_arms, effects
    print("  the oracle: " + ", ".join(f"{n} {a}" for n, a in oracle_arms.items()))
    print_verdicts(verdicts)
    figs["oracle"] = settled_figures(lab, workdir, paths, settled_s, "oracle",
                                     lambda path: oracle_config(lab, path, oracle_arms))
    # The cohort of the largest throughput effect: the cost of learning is
    # its first five minutes' mean large-object throughput against the oracle's.
    big = max(asns, key=lambda a: abs(effects[a]["large_mean_throughput"] or 0))

    def learning_run(label, config, poll, every):
        """From a cold start: the learning window, then the settled one."""
        d, win = run_policy(lab, workdir, rates, cross, [("learning", learn_s, 1), ("settled", settled_s, 2)],
                            label, config, poll=poll, every=every)
        figs[label] = window_objectives(d, lab, win["settled"], asns)
        print_study(label, figs[label], name_of)
        learning = server_transfers(d, lab, win["learning"])
        lo = win["learning"][0]
        first = objectives([t for t in learning.get(big, []) if t[0] < lo + 300 * 10**9])
        return {"regret": binned_regret(learning, win["learning"], figs["oracle"], asns),
                "first_5min": {"asn": big, "large_mean_mbps": first["large_mean_mbps"],
                               "of_oracle": None if not first["large_mean_mbps"] else
                               first["large_mean_mbps"] / figs["oracle"][big]["large_mean_mbps"]}}

    learner = BpftuneStyleLearner(["bbr", "cubic"])
    driver = {}

    def learner_poll(d, t_s, cfg_path):
        if "d" not in driver:
            driver["d"] = LearnerDriver(lab, d, cfg_path, learner, asns)
        driver["d"].poll(t_s)

    report["learner"] = learning_run("learner", lambda path: learner_config(lab, path, learner.weights()),
                                     learner_poll, 2.0)
    report["learner"].update(changes=driver["d"].changes, final_cost=learner.cost, closed=learner.closed)

    log = DecisionLog()
    report["controller"] = learning_run(
        "controller", lambda path: controller_config(lab, path, min_transfers=min_transfers, interval_s=interval_s),
        log.poll, interval_s)
    report["controller"].update(decisions=log.decisions, final=log.final)

    report["figures"] = figs
    report["scores"] = {pol: {stat: {str(asn): ratio_to_oracle(f[asn], figs["oracle"][asn], stat) for asn in asns}
                              for stat in ("p50", "mean")} for pol, f in figs.items()}
    for pol, sc in report["scores"].items():
        for stat in ("p50", "mean"):
            vals = [v for v in sc[stat].values() if v is not None]
            sc[f"aggregate_{stat}"] = statistics.fmean(vals) if vals else None
    print_scores(report, name_of)
    return report


def print_study(title, figs, name_of):
    print(f"  {title}")
    print(f"    {'cohort':>10} {'small n':>8} {'p50 ms':>8} {'mean ms':>8} {'large n':>8} {'p50 Mbit/s':>11} "
          f"{'mean Mbit/s':>12}")
    for asn, f in figs.items():
        print(f"    {name_of[asn] + ' ' + str(asn):>10} {f['n_small']:>8} {fmt(f['small_p50_ms']):>8} "
              f"{fmt(f['small_mean_ms']):>8} {f['n_large']:>8} {fmt(f['large_p50_mbps']):>11} "
              f"{fmt(f['large_mean_mbps']):>12}", flush=True)


def print_scores(report, name_of):
    print("  policy / oracle (median; mean), per cohort and the mean over cohorts:")
    for pol, sc in report["scores"].items():
        cells = " ".join(f"{name_of[int(a)]} {fmt(sc['p50'][a], 3)};{fmt(sc['mean'][a], 3)}" for a in sc["p50"])
        print(f"    {pol:>12}: {cells}  aggregate {fmt(sc['aggregate_p50'], 3)};{fmt(sc['aggregate_mean'], 3)}")
    for who in ("controller", "learner"):
        if who in report and report[who].get("regret"):
            r = report[who]["regret"]
            print(f"    {who} regret, cumulative minutes: " +
                  ", ".join(f"{b['t_s']} s {fmt(b['cumulative'], 2)}" for b in r))
            f5 = report[who]["first_5min"]
            print(f"    {who} first 5 min on AS{f5['asn']}: {fmt(f5['large_mean_mbps'])} Mbit/s mean, "
                  f"{fmt(f5['of_oracle'], 3)} of the oracle")


def markdown(report):
    """The study's tables as bench/README.md and docs/policy.md show them."""
    names = {str(v["asn"]): n for n, v in report["paths"].items()}
    figs, scores = report["figures"], report["scores"]
    pols = ["all-cubic", "all-bbr", "oracle", "learner", "controller"]
    out = ["| cohort | objective | " + " | ".join(pols) + " |", "| --- | --- |" + " --- |" * len(pols)]
    for asn, name in names.items():
        for key, label in (("small_p50_ms", "small FCT p50 ms"), ("small_mean_ms", "small FCT mean ms"),
                           ("large_p50_mbps", "large p50 Mbit/s"), ("large_mean_mbps", "large mean Mbit/s")):
            if figs["oracle"][asn][key] is not None:
                # sub-millisecond completion times (intra-pop) keep three digits
                out.append(f"| {name} (AS{asn}) | {label} | " + " | ".join(
                    fmt(figs[p][asn][key], 3 if (figs[p][asn][key] or 1) < 1 else 1) for p in pols) + " |")
    out += ["", "| score: policy / oracle | " + " | ".join(pols) + " |", "| --- |" + " --- |" * len(pols)]
    for asn, name in names.items():
        out.append(f"| {name} median; mean | " + " | ".join(
            f"{fmt(scores[p]['p50'][asn], 3)}; {fmt(scores[p]['mean'][asn], 3)}" for p in pols) + " |")
    out.append("| **aggregate** median; mean | " + " | ".join(
        f"**{fmt(scores[p]['aggregate_p50'], 3)}**; {fmt(scores[p]['aggregate_mean'], 3)}" for p in pols) + " |")
    # Cumulative regret: every minute of the first five, then every fifth and the last.
    bins = list(zip(report["controller"]["regret"], report["learner"]["regret"]))
    out += ["", "| minute | controller: cumulative regret | learner: cumulative regret |", "| --- | --- | --- |"]
    for k, (c, lrn) in enumerate(bins):
        minute = c["t_s"] // 60
        if minute <= 5 or minute % 5 == 0 or k == len(bins) - 1:
            out.append(f"| {minute} | {fmt(c['cumulative'], 2)} | {fmt(lrn['cumulative'], 2)} |")
    out.append("")
    for who in ("controller", "learner"):
        f5 = report[who]["first_5min"]
        out.append(f"{who}, first 5 min on AS{f5['asn']}: {fmt(f5['large_mean_mbps'])} Mbit/s mean, "
                   f"{fmt(f5['of_oracle'], 3)} of the oracle")
    out.append("")
    for label, seen in report["controller"]["decisions"].items():
        steps = []
        for d in seen:
            t = d.get("decision") or {}
            test = t.get("test") or {}
            change = (f" on {test['objective']} {100 * test['change']:+.1f}% [{100 * test['ci'][0]:+.1f}%, "
                      f"{100 * test['ci'][1]:+.1f}%]" if test.get("change") is not None and d["state"] != "exploring"
                      else "")
            steps.append(f"{d['state']}{'(' + d['winner'] + ')' if d['winner'] else ''} at {d['t_s']} s{change}")
        out.append(f"- cohort {label}: " + " -> ".join(steps))
    return "\n".join(out)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--phases", default="study",
                   help="study (default); candidates (uniform runs on more paths that might prefer CUBIC); "
                        "or any of uniform,loop,aa (the loop's machinery on the older testbed)")
    p.add_argument("--duration", type=float, default=120, help="seconds of traffic per run (uniform, loop, aa)")
    p.add_argument("--learn", type=float, default=600, help="study: seconds from a cold start")
    p.add_argument("--settled", type=float, default=300, help="study: seconds of the settled window")
    p.add_argument("--min-transfers", type=int, default=20, help="study: the controller's min_transfers")
    p.add_argument("--interval", type=int, default=10, help="study: the controller's interval_s")
    p.add_argument("--shared-uplink", action="store_true",
                   help="study: every path but the intra-pop one behind one shared uplink (the stress case)")
    p.add_argument("--rate-scale", type=float, default=1.0)
    p.add_argument("--paths", help="candidates: only these paths (comma-separated names; default all)")
    p.add_argument("--json", help="write the figures here")
    p.add_argument("--workdir")
    p.add_argument("--smoke", action="store_true", help="the short run CI makes: loop and restart only")
    p.add_argument("--no-uplink", action="store_true", help="uniform, loop, aa: each path straight from the server")
    p.add_argument("--markdown", metavar="JSON", nargs="+",
                   help="print a study's figures (its JSON), or candidates' runs side by side, as markdown tables")
    args = p.parse_args(argv)
    if args.markdown:
        reports = [json.loads(FsPath(f).read_text()) for f in args.markdown]
        print(candidates_markdown(reports) if "verdicts" in reports[0] else markdown(reports[0]))
        return
    if args.smoke:
        report, default = smoke(), None
    elif args.phases == "study":
        report = study(args)
        default = "controller_study_shared_uplink.json" if args.shared_uplink else "controller_study.json"
    elif args.phases == "candidates":
        report, default = candidates(args), None  # runs are kept side by side: --json
    else:
        report = full(args)
        default = "controller_lab.json" if args.phases == "uniform,loop,aa" else None
    path = args.json or (str(HERE / "results" / default) if default else None)
    if path:
        FsPath(path).write_text(json.dumps(report, indent=1) + "\n")
        print(f"figures: {path}")


def run_workdir(args, kind):
    workdir = FsPath(args.workdir or f"/tmp/tcpscope-controller-{kind}-{os.getpid()}")
    workdir.mkdir(parents=True, exist_ok=True)
    return workdir


def paths_report(paths):
    return {n: {"asn": asn, "connections_per_s": rate, "down": vars(path.down), "up": vars(path.up),
                "cross_flow": cross} for n, asn, rate, path, cross in paths}


def full(args):
    """The loop's machinery on the older testbed (PATHS behind the shared
    uplink, or --no-uplink): the phases of --phases."""
    workdir = run_workdir(args, "machinery")
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


def study(args):
    workdir = run_workdir(args, "study")
    uplink = UPLINK if args.shared_uplink else None
    # Behind the uplink an intra-pop path would no longer be unshaped: it stays out.
    paths = [(n, asn, rate * args.rate_scale, path, cross) for n, asn, rate, path, cross in STUDY_PATHS
             if not (uplink and path.veth)]
    report = {"paths": paths_report(paths),
              "uplink": None if uplink is None else {"rate_mbit": uplink.rate_mbit, "queue_frames": uplink.queue},
              "objects": OBJECTS, "keepalive": KEEPALIVE, "learn_s": args.learn, "settled_s": args.settled,
              "min_transfers": args.min_transfers, "interval_s": args.interval,
              "started": time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime())}
    with labmod.Lab([path for _, _, _, path, _ in paths], workdir=workdir / "lab", uplink=uplink) as lab:
        phase_study(lab, workdir, args.learn, args.settled, report, args.min_transfers, args.interval, paths)
    return report


def candidates(args):
    workdir = run_workdir(args, "candidates")
    wanted = args.paths.split(",") if args.paths else [p[0] for p in CANDIDATE_PATHS]
    unknown = set(wanted) - {p[0] for p in CANDIDATE_PATHS}
    if unknown:
        raise SystemExit(f"--paths: no candidate path {', '.join(sorted(unknown))} "
                         f"(known: {', '.join(p[0] for p in CANDIDATE_PATHS)})")
    paths = [p for p in CANDIDATE_PATHS if p[0] in wanted]
    report = {"paths": paths_report(paths),
              "objects": OBJECTS, "keepalive": KEEPALIVE, "duration_s": args.duration,
              "started": time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime())}
    with labmod.Lab([path for _, _, _, path, _ in paths], workdir=workdir / "lab") as lab:
        phase_candidates(lab, workdir, args.duration, report, paths)
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
