"""The lab A/A of issue 48 (item 1): no decision in 240 s.

arms [cubic, cubic], `cohort: peer_class`, one cohort holding two clients
10 ms and 120 ms away. Each client keeps ONE connection alive for the whole
run, fetching a 10 kB object back to back (the near one carries about ten
times the far one's transfers), and the two land in different arms: the
kernel draws the arm per connection, the open-flow snapshot says which it
drew, and the far client reconnects (before sending anything) until it has
the other arm. Beside them each client opens one-request connections
(curl, `Connection: close`) at 0.25/s. The controller tests every 5 s from
100 transfers per arm on; /api/v1/controller is polled every 3 s and the
cohort must never be decided.

This is the shape on which the test decided A/A runs while each arm's
degrees of freedom were its connection count minus 1 (994 of 1000 runs of
sequential_test_test.cc's simulation): each arm's mean is its heavy
connection's, the two heavy connections differ by their path's RTT, and the
light connections' spread is all the variance sees. So the test also
checks that the evidence has that shape (the test ran, the arms' means
differ by more than the K - 1 test's bound allows) and prints what the
K - 1 test would have said on the same sums (the controller's saved state),
beside what the daemon said (dof from Kish's effective number of
connections, sequential_test.h).

nginx serves this run's kept-alive connections without the 1000-request cap
traffic_mix's configuration has: a heavy connection closed at 1000 requests
would reconnect and draw its arm again, and the arms would no longer hold
one heavy connection each.
"""
import importlib.util
import json
import math
import statistics
import subprocess
import sys
import threading
import time
import urllib.request

import pytest

from labfixtures import (HERE, delayline_checked, lab_suite, lab_test, need_root_and_build,  # noqa: F401
                         stop_process)

BENCH = HERE.parent.parent / "bench" / "controller_lab.py"
_spec = importlib.util.spec_from_file_location("controller_lab", BENCH)
bench = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(bench)
labmod, traffic_mix = bench.labmod, bench.traffic_mix

RUN_S = 180
POLL_S = 3
INTERVAL_S = 5
MIN_TRANSFERS = 100
LIGHT_RATE = 0.25            # one-request connections per second from each client
OBJECT = 10_000              # every response: 10 kB, within the initial window
MAX_ARM_DRAWS = 10           # the far client's connections until it has the other arm (1 in 2^10 fails)
TAU = 0.1                    # cohort_test.cc's kMixingScale
FDR = 0.05                   # the rule's default

HEAVY_CLIENT = r'''
import re, socket, sys, time
addr, port, path, seconds = sys.argv[1], int(sys.argv[2]), sys.argv[3], float(sys.argv[4])
c = socket.create_connection((addr, port), timeout=30)
print(c.getsockname()[1], flush=True)
if sys.stdin.readline().strip() != "go":
    c.close()
    sys.exit(0)
request = f"GET {path} HTTP/1.1\r\nHost: {addr}\r\n\r\n".encode()
until, n, buf = time.monotonic() + seconds, 0, b""
def more():
    b = c.recv(1 << 16)
    if not b:
        sys.exit(f"the server closed the connection after {n} responses")
    return b
while time.monotonic() < until:
    c.sendall(request)
    while b"\r\n\r\n" not in buf:
        buf += more()
    head, _, buf = buf.partition(b"\r\n\r\n")
    length = int(re.search(rb"(?i)\r\ncontent-length: *(\d+)", head)[1])
    while len(buf) < length:
        buf += more()
    buf = buf[length:]
    n += 1
c.close()
print(n, flush=True)
'''


class UncappedKeepaliveNginx(traffic_mix.Nginx):
    """traffic_mix's nginx with kept-alive connections that are never closed
    for their number of requests."""

    def _conf(self):
        conf = super()._conf()
        assert "keepalive_requests 1000;" in conf, "traffic_mix's nginx.conf changed: revisit this override"
        return conf.replace("keepalive_requests 1000;", "keepalive_requests 1000000;")


class HeavyConnection:
    """One kept-alive connection from a client namespace, opened at once and
    held idle until go(): its port is known before it carries anything."""

    def __init__(self, lab, name, seconds):
        ep = lab.ep(name)
        self.name, self.raddr = name, ep.client_v4[0]
        self.proc = lab.popen(ep.client_ns, sys.executable, "-c", HEAVY_CLIENT, ep.server_v4,
                              traffic_mix.Nginx.PORT, "/" + traffic_mix.object_name(OBJECT), seconds,
                              stdin=subprocess.PIPE)
        line = self.proc.stdout.readline().strip()
        if not line.isdigit():
            raise AssertionError(f"heavy client on {name} did not connect: {line!r} {self.proc.stderr.read()}")
        self.rport = int(line)

    def go(self):
        self.proc.stdin.write("go\n")
        self.proc.stdin.close()

    def close_unused(self):
        self.proc.stdin.write("quit\n")
        self.proc.stdin.close()
        self.proc.wait(timeout=10)

    def responses(self, timeout):
        self.proc.wait(timeout=timeout)
        out, err = self.proc.stdout.read(), self.proc.stderr.read()
        assert self.proc.returncode == 0, f"heavy client on {self.name}: {err.strip()}"
        return int(out.split()[-1])

    def kill(self):
        if self.proc.poll() is None:
            stop_process(self.proc)


def get_json(daemon, path):
    with urllib.request.urlopen(f"http://127.0.0.1:{daemon.port}{path}", timeout=10) as r:
        return json.loads(r.read())


def arm_of(daemon, lab, conn, timeout=15):
    """The arm the kernel drew for `conn`, from the open-flow snapshot."""
    srv = lab.netns_ids[lab.server_ns]
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for f in get_json(daemon, "/api/v1/flows"):
            if (f["netns"] == srv and f["dir"] == "passive" and f["lport"] == traffic_mix.Nginx.PORT
                    and f["raddr"] == conn.raddr and f["rport"] == conn.rport):
                assert f.get("arm"), f"the controller rule gave no arm to {conn.name}'s connection: {f}"
                return f["arm"]
        time.sleep(0.5)
    raise AssertionError(f"no open-flow snapshot of {conn.name}'s connection (port {conn.rport}) "
                         f"within {timeout} s")


# -- the sequential test on the saved sums, with either degrees of freedom ----

def variance(r):
    """ClusteredRatio::variance(): the delta method over connections."""
    k = r["clusters"]
    if k < 2 or r["x"] <= 0:
        return 0.0
    ratio = r["y"] / r["x"]
    residual = max(0.0, r["yy"] - 2 * ratio * r["xy"] + ratio * ratio * r["xx"])
    return k / (k - 1) * residual / (r["x"] ** 2)


def log_e(t, nu, rho):
    return -0.5 * math.log1p(rho) + (nu + 1) / 2 * (math.log1p(t * t / nu) - math.log1p(t * t / (nu * (1 + rho))))


def t_bound(nu, rho, alpha=FDR):
    """The |t| at which e reaches 1/alpha (inf: never)."""
    target = math.log(1 / alpha)
    if nu / 2 * math.log1p(rho) <= target:
        return math.inf
    lo, hi = 0.0, 1.0
    while log_e(hi, nu, rho) < target:
        hi *= 2
    for _ in range(100):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if log_e(mid, nu, rho) < target else (lo, mid)
    return hi


def mixture_test(other, winner, dof_per_arm):
    """mixture_sprt(other, winner) with each arm's degrees of freedom
    dof_per_arm(arm sums): e, dof, t, the change of winner from other."""
    va, vb = variance(other), variance(winner)
    v = va + vb
    ka, kb = dof_per_arm(other), dof_per_arm(winner)
    nu = v * v / (va * va / ka + vb * vb / kb)
    diff = winner["y"] / winner["x"] - other["y"] / other["x"]
    t = diff / math.sqrt(v)
    rho = TAU * TAU / v
    return {"e": math.exp(min(log_e(t, nu, rho), 690)), "dof": nu, "t": t, "diff": diff,
            "change": math.expm1(diff), "V": v, "t_bound": t_bound(nu, rho)}


def kish_dof(r):
    return r["x"] ** 2 / r["xx"] - 1


def count_dof(r):
    return r["clusters"] - 1


def connection_levels(daemon, lab):
    """The server's send transfers on nginx's port by connection: {(raddr, rport):
    {arm, n, mean and sd of log xfer_us}}, as the controller's fct objective takes them."""
    srv = lab.netns_ids[lab.server_ns]
    by_conn = {}
    for t in daemon.lines("transfer"):
        if (t["netns"] == srv and t["direction"] == "send" and t["lport"] == traffic_mix.Nginx.PORT
                and t["xfer_us"] > 0 and t["bytes"] < bench.THROUGHPUT_MIN_BYTES):
            c = by_conn.setdefault((t["raddr"], t["rport"]), {"arm": t["arm"], "logs": []})
            c["logs"].append(math.log(t["xfer_us"]))
    return {k: {"arm": c["arm"], "n": len(c["logs"]), "mean": statistics.fmean(c["logs"]),
                "sd": statistics.pstdev(c["logs"])} for k, c in by_conn.items()}


def test_an_aa_cohort_with_one_heavy_connection_per_arm_never_decides(tmp_path, delayline_checked):
    need_root_and_build()
    paths = [labmod.Path.symmetric("near", delay_ms=5), labmod.Path.symmetric("far", delay_ms=60)]
    t_start = time.monotonic()
    with labmod.Lab(paths, ipv6=False, workdir=tmp_path / "lab") as lab:
        lab.set_cc("cubic")
        cfg = lab.tcpscope_config(tmp_path / "aa.yaml", extra=(
            "snapshot_interval_s: 1\ncc_policy:\n  rules:\n" + bench.clients_rule(lab, "aa", f"""      controller:
        arms: [cubic, cubic]
        cohort: peer_class
        min_transfers: {MIN_TRANSFERS}
        interval_s: {INTERVAL_S}
        evidence_netns: [{lab.server_ns}]
""")))
        state = tmp_path / "state"
        state.mkdir(mode=0o700)
        nginx = UncappedKeepaliveNginx(lab, tmp_path / "nginx", objects={"small": [OBJECT]}, keepalive=True)
        d = bench.ControllerDaemon(cfg, tmp_path, state, name="aa")
        lab.track(d.proc.pid)
        heavies, polls, traffic = [], [], {}
        try:
            nginx.start()
            near = HeavyConnection(lab, "near", RUN_S)
            heavies.append(near)
            near_arm = arm_of(d, lab, near)
            for draw in range(MAX_ARM_DRAWS):
                far = HeavyConnection(lab, "far", RUN_S)
                heavies.append(far)
                far_arm = arm_of(d, lab, far)
                if far_arm != near_arm:
                    break
                far.close_unused()
            assert far_arm != near_arm, f"the far client drew {near_arm} {MAX_ARM_DRAWS} times"
            print(f"\nheavy connections: near -> {near_arm}, far -> {far_arm} (draw {draw + 1})")

            def light():
                try:
                    traffic["result"] = traffic_mix.run_mix(
                        lab, nginx, {"near": LIGHT_RATE, "far": LIGHT_RATE}, RUN_S, mix={"small": 1.0},
                        objects={"small": [OBJECT]}, out_dir=tmp_path, label="light")
                except BaseException as e:  # noqa: BLE001  (reported below)
                    traffic["error"] = e

            near.go()
            far.go()
            t0 = time.monotonic()
            light_thread = threading.Thread(target=light, daemon=True)
            light_thread.start()
            while light_thread.is_alive() and time.monotonic() < t0 + RUN_S + 200:
                doc = d.cohorts()
                polls.append((round(time.monotonic() - t0, 1), doc))
                assert all(c["state"] == "exploring" for c in doc.values()), \
                    f"an A/A cohort decided at {polls[-1][0]} s: {json.dumps(doc, indent=1)}"
                light_thread.join(timeout=POLL_S)
            assert "error" not in traffic, f"one-request connections: {traffic['error']}"
            assert "result" in traffic, "the one-request clients did not finish"
            responses = {h.name: h.responses(timeout=60) for h in (near, far)}
            # The last transfers reach the controller and it tests them once more.
            time.sleep(INTERVAL_S + 2)
            rule = d.api()["rules"][0]
            final = {c["cohort"]: c for c in rule["cohorts"]}
            polls.append((round(time.monotonic() - t0, 1), final))
        finally:
            for h in heavies:
                h.kill()
            nginx.stop()
            d.stop()  # writes the saved state
            (tmp_path / "polls.json").write_text(json.dumps(polls))  # for a failure's post-mortem
        saved = json.loads((state / "controller.json").read_text())
        levels = connection_levels(d, lab)

    # Decided and reverted between two polls would leave it exploring: the counters say.
    assert (rule["decisions"], rule["reverts"]) == (0, 0), rule
    assert set(final) == {"client"}, f"one cohort, the peer class: {list(final)}"
    cohort = final["client"]
    assert cohort["state"] == "exploring", cohort
    test = cohort["evidence"]["test"]
    assert test.get("e_value") is not None and test.get("dof") is not None, f"the cohort was never tested: {test}"
    arms = cohort["evidence"]["arms"]
    ev = next(c for c in saved["rules"]["aa"]["cohorts"] if c["label"] == "client")["evidence"]
    names = list(cohort["weights"])  # the arms in order: cubic, cubic#2
    sums = {names[i]: a["fct"] for i, a in enumerate(ev)}

    print(f"run {RUN_S} s, {len(polls)} polls; heavy responses: near {responses['near']}, far {responses['far']}")
    for name in names:
        a = arms[name]
        k_eff = sums[name]["x"] ** 2 / sums[name]["xx"]
        print(f"  arm {name:>8}: {a['transfers']} transfers (fct {a['n_fct']}) of {a['connections_fct']} "
              f"connections, fct p50 {a.get('fct_p50_ms', 0):.1f} ms; Kish K_eff {k_eff:.4f}")
    print(f"  daemon's test: {test['objective']} {test['arm']} vs {test.get('against')} change {test['change']:+.4f} "
          f"ci {test['ci']} e {test['e_value']:.4g} dof {test['dof']:.4f}")
    max_e = max((c["evidence"]["test"].get("e_value", 1) for _, doc in polls for c in doc.values()
                 if c["evidence"].get("test")), default=None)
    print(f"  largest e over the polls: {max_e}; every 30 s (t: e, dof): " + ", ".join(
        f"{t:.0f} s: {c['evidence']['test']['e_value']:.3g}, {c['evidence']['test']['dof']:.3f}"
        for t, doc in polls[::10] for c in doc.values() if (c["evidence"].get("test") or {}).get("e_value") is not None))

    # The daemon's numbers, from its saved sums (Kish), then the K - 1 test on the same sums.
    winner, other = sums[test["arm"]], sums[test["against"]]
    kish, by_count = mixture_test(other, winner, kish_dof), mixture_test(other, winner, count_dof)
    for label, r in (("K_eff - 1", kish), ("K - 1", by_count)):
        print(f"  {label:>9} dof: change {r['change']:+.4f} t {r['t']:.1f} (bound {r['t_bound']:.1f}) "
              f"dof {r['dof']:.4f} e {r['e']:.4g} sd {math.sqrt(r['V']):.4f}")
    assert kish["dof"] == pytest.approx(test["dof"], rel=1e-6) and \
        kish["e"] == pytest.approx(test["e_value"], rel=1e-6), (kish, test)

    # Per connection: the heavy ones, and the light ones by client.
    by_client = {}
    for (raddr, rport), c in levels.items():
        by_client.setdefault(raddr, []).append((rport, c))
    heavy_levels = {}
    for h in (near, far):
        c = levels[(h.raddr, h.rport)]
        heavy_levels[h.name] = c
        assert c["arm"] == (near_arm if h is near else far_arm), c
        print(f"  heavy {h.name}: arm {c['arm']}, {c['n']} transfers, log xfer_us mean {c['mean']:.3f} "
              f"(= {math.exp(c['mean']) / 1e3:.2f} ms) sd {c['sd']:.3f}")
        lights = [x for p, x in by_client[h.raddr] if p != h.rport and x["n"] == 1]
        lm = [x["mean"] for x in lights]
        print(f"  light {h.name}: {len(lights)} connections, log xfer_us mean {statistics.fmean(lm):.3f} "
              f"sd {statistics.pstdev(lm):.3f}; per arm " + ", ".join(
                  f"{a} {sum(1 for x in lights if x['arm'] == a)}" for a in names))
    gap = heavy_levels["far"]["mean"] - heavy_levels["near"]["mean"]
    print(f"  heavy far - near: {gap:.3f} in log units (the simulation's levels: N(0, 0.5), "
          f"a difference of sd {0.5 * math.sqrt(2):.3f})")
    print(f"  took {time.monotonic() - t_start:.0f} s")

    # The evidence has the shape that fooled the K - 1 test: one heavy
    # connection per arm, the near one carrying most transfers, and on those
    # sums the K - 1 test is far past its bound.
    assert heavy_levels["near"]["n"] > 5 * heavy_levels["far"]["n"], heavy_levels
    assert by_count["e"] >= 1 / FDR, by_count
