"""pytest fixtures and helpers for the lab tests.

Not a conftest.py on purpose: tests/integration's test modules do
`from conftest import ...`, and a second conftest module in the same pytest
run would replace theirs. Test modules here import what they use from this
module instead, and this module loads tests/integration/conftest.py under its
own name to reuse its Daemon helper.

Every lab test module imports the autouse fixtures `lab_suite` and `lab_test`
(`from labfixtures import lab_suite, lab_test  # noqa: F401`). Together they
  * tear down, once per run, labs whose owner process died without doing it
    (a SIGKILLed or OOM-killed earlier run: its delay lines run in their own
    session and would otherwise outlive it; see lab.reap_orphans);
  * enforce the suite's time budget (TCPSCOPE_LAB_BUDGET_S, default 900 s, the
    15 minutes of issue 4): the time lab tests spend in setup, call and
    teardown is summed; a test still running when the budget runs out is
    interrupted (SIGALRM, during its call phase only, so fixtures always tear
    down), later lab tests fail at once, and the session fails at its end.
Importing this module also makes SIGTERM (and SIGHUP) unwind the run like
Ctrl-C: pytest tears down every fixture, so each Lab removes its namespaces
and delay lines; an atexit hook (lab.teardown_mine) is the net behind that.

A "session" fixture imported into several modules is one fixture per module
to pytest; the ones here keep their state in this module, so they act once
per process.
"""
import importlib.util
import json
import math
import os
import re
import shutil
import signal
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import lab as labmod  # noqa: E402  (the lab library next to this file)

sys.path.insert(0, str(HERE.parent / "kernel_profiles"))
import derive as kernel_profiles  # noqa: E402  (tests/kernel_profiles: kernels older than this one)

# This kernel (None), then Debian 12's 6.1 as its profile: the tracepoints it
# lacks hidden from the daemon, so that both fallbacks (send transfers from
# the ACKs, arrivals from the segments, tcp_probe) meet the lab's timing
# checks. 6.12's profile hides only the first of them; both kernels are
# booted for real in CI (tests/real_kernels), where timing cannot be checked.
KERNEL_PROFILES = [None, "debian12-6.1"]

_spec = importlib.util.spec_from_file_location(
    "tcpscope_integration_conftest", HERE.parent / "integration" / "conftest.py")
integration = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(integration)

Daemon = integration.Daemon
wait_for = integration.wait_for
stop_process = integration.stop_process
TRAFFIC = integration.TRAFFIC          # request/response client and server with ground truth
TCPSCOPE = integration.TCPSCOPE
PROBE = HERE / "probe.py"


def need_root_and_build(delayline=True):
    if os.geteuid() != 0:
        pytest.skip("needs root for network namespaces, TAP devices and BPF")
    if delayline:
        assert labmod.DELAYLINE.exists(), f"build first: {labmod.DELAYLINE} missing"


def need_tool(name):
    if shutil.which(name) is None:
        pytest.fail(f"{name} is not installed (scripts/dev.sh installs it)")


def read_jsonl(path):
    p = Path(path)
    return [json.loads(l) for l in p.read_text().splitlines() if l] if p.exists() else []


def start_daemon(lab, tmp: Path, extra_config="", kernel_profile=None, transfer_sampling_rate=1):
    """A tcpscope daemon whose config knows the lab's peer classes and ASNs,
    run as on `kernel_profile`'s kernel (KERNEL_PROFILES; None: this one),
    following the transfers of one flow in transfer_sampling_rate (None: the
    default's). The lab tracks it: if this process dies, reaping the lab
    stops it too."""
    assert TCPSCOPE.exists(), f"build first: {TCPSCOPE} missing"
    home = tmp / "daemon"
    home.mkdir(exist_ok=True)
    cfg = lab.tcpscope_config(home / "tcpscope.yaml", extra=extra_config)
    integration.WATCHED_NETNS.update(lab.netns_ids.values())  # the Daemon helper keeps only these
    d = Daemon(home, extra_args=("--config", str(cfg)), env=kernel_profiles.daemon_env(kernel_profile),
               transfer_sampling_rate=transfer_sampling_rate)
    d.kernel_profile = kernel_profile
    lab.track(d.proc.pid)
    return d


def records_in(daemon, lab, ns):
    """Flow records of the sockets in namespace `ns` of this lab."""
    ino = lab.netns_ids[ns]
    return [r for r in daemon.all_records()
            if r["netns"] == ino and r["start_ns"] >= lab.created_ns]


def wait_record(daemon, lab, ns, pred, what, timeout=20):
    """The one record in `ns` that satisfies pred (exactly one must)."""
    def find():
        got = [r for r in records_in(daemon, lab, ns) if pred(r)]
        return got or None
    got = wait_for(find, timeout, what=what)
    assert len(got) == 1, f"{what}: expected one record, got {len(got)}: {got}"
    return got[0]


class Traffic:
    """tests/integration/traffic.py run inside the lab's namespaces."""

    def __init__(self, lab, tmp: Path):
        self.lab, self.tmp = lab, tmp

    def serve(self, addr, count, port):
        out = self.tmp / f"server-{addr}-{port}.jsonl"
        ready = self.tmp / f"server-{addr}-{port}.ready"
        p = self.lab.popen(self.lab.server_ns, sys.executable, TRAFFIC, "serve", "--bind", addr,
                           "--port", port, "--count", count, "--out", out, "--ready", ready,
                           "--timeout", 120)
        wait_for(lambda: ready.exists() or p.poll() is not None, 10, what="traffic server start")
        assert p.poll() is None, p.stderr.read()
        return p, out

    def client(self, ns, addr, port, count=1, req=100, resp=1000, timeout=120, **opts):
        """opts: traffic.py client options, e.g. parallel=4, request_after=5."""
        out = self.tmp / f"client-{ns}-{port}-{time.monotonic_ns()}.jsonl"
        flags = [x for k, v in opts.items() for x in ("--" + k.replace("_", "-"), v)]
        r = self.lab.ns(ns, sys.executable, TRAFFIC, "client", "--addr", addr, "--port", port,
                        "--count", count, "--req", req, "--resp", resp, "--out", out,
                        "--timeout", timeout, *flags, timeout=timeout + 30)
        assert r.returncode == 0, r.stderr
        recs = read_jsonl(out)
        assert recs and all("error" not in c for c in recs), recs
        return recs


class SynArrivals:
    """When each client's first SYN to `port` reached the server namespace:
    ground truth for a passive record's start, taken where the server's
    kernel receives the frame (an AF_PACKET capture, the kernel's receive
    timestamp, CLOCK_REALTIME like the records' start_ns). Deriving it from
    the client's side (active start + one-way delay) also counts whatever
    held the SYN up before it reached the server (the client's own stack
    and qdisc, the delay line's reader on a busy machine) as tcpscope's
    error. A context manager: the capture runs from entry to exit;
    `first_ns[(client addr, client port)]` holds each 4-tuple's earliest
    SYN (a repeated SYN is not the start)."""

    def __init__(self, lab, port, tmp: Path):
        need_tool("tcpdump")
        self.lab, self.port = lab, port
        stem = f"syn-{port}-{time.monotonic_ns()}"
        self.out, self.err = tmp / f"{stem}.txt", tmp / f"{stem}.err"
        self.first_ns = {}

    def __enter__(self):
        self._out, self._err = open(self.out, "w"), open(self.err, "w")
        # Only SYNs without ACK to the port: a few hundred lines, whatever the
        # responses' size. -i any: every device of the server namespace.
        self.proc = self.lab.popen(self.lab.server_ns, "tcpdump", "-i", "any", "-n", "-l", "-tt",
                                   "--time-stamp-precision=nano",
                                   f"tcp dst port {self.port} and tcp[tcpflags] & (tcp-syn|tcp-ack) == tcp-syn",
                                   stdout=self._out, stderr=self._err)
        try:
            # tcpdump says "listening on ..." once its filter is attached.
            wait_for(lambda: self.proc.poll() is not None or "listening on" in self.err.read_text(), 10,
                     what="tcpdump start")
            assert self.proc.poll() is None, self.err.read_text()
        except BaseException:
            self._stop()
            raise
        return self

    def _stop(self):
        stop_process(self.proc, signal.SIGINT, timeout=10)
        self._out.close()
        self._err.close()

    def __exit__(self, *exc):
        # The last SYN is already in: the clients finished their connections.
        self._stop()
        line_re = re.compile(r"^(\d+)\.(\d{9}) .*IP6? (\S+)\.(\d+) > \S+: Flags \[S\]")
        for line in self.out.read_text().splitlines():
            m = line_re.match(line)
            if not m:
                continue
            t = int(m[1]) * 1_000_000_000 + int(m[2])
            k = (m[3], int(m[4]))
            self.first_ns[k] = min(t, self.first_ns.get(k, t))
        return False


def udp(lab, tmp_path, name, direction, count, port=7000, quiet=1.0, **send):
    """Sends `count` datagrams one way over path `name`; returns (receiver result, sender result)."""
    ep = lab.ep(name)
    if direction == "down":
        src_ns, dst_ns, dst = lab.server_ns, ep.client_ns, ep.client_v4[0]
    else:
        src_ns, dst_ns, dst = ep.client_ns, lab.server_ns, ep.server_v4
    out, ready = tmp_path / f"udp-{name}-{port}.json", tmp_path / f"udp-{name}-{port}.ready"
    # A test may send both ways on one path: the other direction's files must
    # not pass for this receiver's readiness (datagrams sent before it binds
    # are lost).
    out.unlink(missing_ok=True)
    ready.unlink(missing_ok=True)
    rx = lab.popen(dst_ns, sys.executable, PROBE, "udp-recv", "--bind", dst, "--port", port,
                   "--count", count, "--out", out, "--ready", ready, "--timeout", 60,
                   "--quiet", quiet)
    wait_for(lambda: ready.exists() or rx.poll() is not None, 10, what="udp receiver")
    args = [f"--{k.replace('_', '-')}" if v is True else f"--{k.replace('_', '-')}={v}"
            for k, v in send.items()]
    tx = lab.ns(src_ns, sys.executable, PROBE, "udp-send", "--addr", dst, "--port", port,
                "--count", count, *args, timeout=120)
    rx.wait(timeout=90)
    assert rx.returncode == 0, rx.stderr.read()
    return json.loads(out.read_text()), json.loads(tx.stdout)


def send_handoff_us(request):
    """How long xfer_peer.py's client took to hand a request to the kernel: it
    reads its send clock before sendall() and again after, so a preemption in
    between (tens of ms when the lab's delay line, nginx and the clients share
    two cores) lengthens the client's clock by at most this much."""
    return (request["sent"][0] - request["send"][0]) / 1000


def quantile(xs, q):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(q * len(xs)))]


# -- SIGTERM: unwind like Ctrl-C ------------------------------------------------

def _on_term(signum, frame):
    # Once: a second signal must not interrupt the teardown the first started.
    signal.signal(signum, lambda *_: None)
    print(f"\nlab: signal {signum}: stopping; tearing down labs", file=sys.stderr, flush=True)
    raise KeyboardInterrupt(f"signal {signum}")


def install_term_handler():
    """SIGTERM and SIGHUP raise KeyboardInterrupt in the main thread, so
    pytest (or any with-block) tears down as on Ctrl-C. Leaves a handler some
    other code installed alone."""
    if threading.current_thread() is not threading.main_thread():
        return
    for sig in (signal.SIGTERM, signal.SIGHUP):
        if signal.getsignal(sig) in (signal.SIG_DFL, None):
            signal.signal(sig, _on_term)


install_term_handler()


# -- the suite: orphans and the time budget -------------------------------------

SUITE_BUDGET_S = float(os.environ.get("TCPSCOPE_LAB_BUDGET_S", "900"))


class LabBudgetExceeded(Exception):
    pass


class _SuiteBudget:
    """A pytest plugin (registered by lab_suite) that sums the time of lab
    tests' phases and arms a SIGALRM for the rest of the budget around each
    lab test's call phase."""

    def __init__(self, budget_s):
        self.budget = budget_s
        self.spent = 0.0
        self.items = set()
        self.last_report = None
        self.interrupted = None
        self.current = None
        self.running = None   # the test pytest is running now (any test)

    def remaining(self):
        # Reported phases, plus the unreported part of a lab test under way
        # (not the time of other tests that ran since: the budget is the lab's).
        extra = 0.0
        if self.running in self.items and self.last_report is not None:
            extra = time.monotonic() - self.last_report
        return self.budget - self.spent - extra

    def _alarm(self, signum, frame):
        self.interrupted = self.current
        raise LabBudgetExceeded(
            f"the lab suite ran past its {self.budget:.0f} s budget (TCPSCOPE_LAB_BUDGET_S; "
            f"issue 4 wants it well under 15 minutes): interrupted {self.current}")

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_call(self, item):
        if item.nodeid not in self.items or \
                threading.current_thread() is not threading.main_thread():
            return (yield)
        self.current = item.nodeid
        old = signal.signal(signal.SIGALRM, self._alarm)
        signal.setitimer(signal.ITIMER_REAL, max(0.001, self.remaining()))
        try:
            return (yield)
        finally:
            signal.setitimer(signal.ITIMER_REAL, 0)
            signal.signal(signal.SIGALRM, old)

    def pytest_runtest_logstart(self, nodeid, location):
        self.running = nodeid
        self.last_report = time.monotonic()

    def pytest_runtest_logfinish(self, nodeid, location):
        self.running = None

    def pytest_runtest_logreport(self, report):
        if report.nodeid in self.items:
            self.spent += report.duration
            self.last_report = time.monotonic()


_suite = {"plugin": None, "reaped": None, "checked_at_end": False}


@pytest.fixture(scope="session", autouse=True)
def lab_suite(request):
    """Once per run: reap orphaned labs, start the budget. At the end: fail
    the session if the lab tests took longer than the budget."""
    if _suite["plugin"] is None:
        _suite["plugin"] = _SuiteBudget(SUITE_BUDGET_S)
        request.config.pluginmanager.register(_suite["plugin"], "tcpscope-lab-budget")
        _suite["reaped"] = labmod.reap_orphans() if os.geteuid() == 0 else []
        if _suite["reaped"]:
            print(f"\nlab: removed labs left by dead processes: {' '.join(_suite['reaped'])}",
                  file=sys.stderr)
    yield _suite
    if not _suite["checked_at_end"]:
        _suite["checked_at_end"] = True
        b = _suite["plugin"]
        spent = b.budget - b.remaining()
        if spent > b.budget:
            pytest.fail(f"the lab suite took {spent:.1f} s, over its {b.budget:.0f} s budget "
                        f"(TCPSCOPE_LAB_BUDGET_S)", pytrace=False)


@pytest.fixture(autouse=True)
def lab_test(request, lab_suite):
    """Counts this test against the suite's budget; fails it at once if the
    budget is already spent."""
    b = lab_suite["plugin"]
    b.items.add(request.node.nodeid)
    if b.running is None:   # the first lab test: its logstart came before the plugin
        b.running, b.last_report = request.node.nodeid, time.monotonic()
    if b.remaining() <= 0:
        pytest.fail(f"the lab suite's {b.budget:.0f} s budget is spent "
                    f"(TCPSCOPE_LAB_BUDGET_S); not run", pytrace=False)


# -- the delay line, checked before anything is measured through it ------------

_selfcheck = {}


@pytest.fixture(scope="session")
def delayline_checked(tmp_path_factory):
    """A quick self-check of the delay line (a few seconds): one-way delay,
    loss rate with exact accounting, and bottleneck rate, each measured from
    the ends of a fresh path. Fixtures that measure tcpscope through the lab
    depend on it, so they never run on a broken delay line, whichever test
    file runs first. (test_lab_delayline.py measures the same properties more
    thoroughly.) Runs once per process; a failure fails every dependant."""
    if "result" not in _selfcheck:
        need_root_and_build()
        try:
            _selfcheck["result"] = delayline_selfcheck(tmp_path_factory.mktemp("selfcheck"))
            print(f"\nlab: delay line self-check: {_selfcheck['result']['summary']}",
                  file=sys.stderr)
        except BaseException as e:
            _selfcheck["result"] = e
            raise
    if isinstance(_selfcheck["result"], BaseException):
        raise AssertionError(f"the delay line failed its self-check: {_selfcheck['result']}")
    return _selfcheck["result"]


def delayline_selfcheck(tmp: Path) -> dict:
    """One path, server -> client: 10 ms, 20 Mbit/s, a 500-frame buffer;
    client -> server: 20 ms, 10% loss. Returns what it measured; raises
    AssertionError on the first property off by more than its bound."""
    t0 = time.monotonic()
    Lab, Path_, Direction = labmod.Lab, labmod.Path, labmod.Direction
    rate, loss, n_loss = 20, 0.10, 3000
    lab = Lab([Path_("chk", down=Direction(delay_ms=10, rate_mbit=rate, queue=500),
                     up=Direction(delay_ms=20, loss=loss))],
              ipv6=False, workdir=tmp / "lab")
    with lab:
        res = {}
        # Delay, both directions, by the kernel's receive stamps (a busy
        # machine delays the receiving process, not the path). 100-byte
        # datagrams: 57 us of serialisation at 20 Mbit/s.
        for direction, want_ms, extra_ms in (("down", 10, 0.06), ("up", 20, 0)):
            # (Up crosses the 10% loss too: ~90 of the 100 arrive, enough for a median.)
            got, _ = udp(lab, tmp, "chk", direction, 100, port=7600 + len(res), pps=500,
                         quiet=0.3)
            assert got["seqs"] and None not in got["kernel_delays_ns"], "no kernel timestamps"
            d_ms = [d / 1e6 for d in got["kernel_delays_ns"]]
            med = statistics.median(d_ms)
            res[f"{direction}_delay_ms"] = (min(d_ms), med)
            assert min(d_ms) >= want_ms, f"{direction}: a datagram arrived early ({min(d_ms)} ms)"
            assert abs(med - want_ms - extra_ms) <= 0.03 * want_ms, \
                f"{direction}: median one-way delay {med:.3f} ms, configured {want_ms} ms"
        # Loss: binomial, exact accounting against the delay line's counters.
        before = lab.stats("chk")["up"]
        got, sent = udp(lab, tmp, "chk", "up", n_loss, port=7610, pps=20000, quiet=0.3)
        after = lab.stats("chk")["up"]
        dropped = n_loss - len(got["seqs"])
        sigma = math.sqrt(n_loss * loss * (1 - loss))
        res["loss"] = dropped / n_loss
        assert sent["sent"] == n_loss and after["frames_in"] - before["frames_in"] == n_loss, \
            (sent, before, after)
        assert after["dropped_loss"] - before["dropped_loss"] == dropped, (before, after, dropped)
        assert abs(dropped - loss * n_loss) <= 4.5 * sigma, \
            f"dropped {dropped} of {n_loss}, expected {loss * n_loss:.0f} +/- {sigma:.0f}"
        # Rate: a burst of full frames leaves the bottleneck one per 1514*8/rate.
        # Spacing by the kernel's receive stamps: a busy machine delays the
        # receiving process, not the delay line (SCHED_FIFO) or the stack.
        n_rate = 300
        got, _ = udp(lab, tmp, "chk", "down", n_rate, port=7620, burst=True, size=1472,
                     quiet=0.3)
        assert len(got["seqs"]) == n_rate, f"{n_rate - len(got['seqs'])} of {n_rate} frames lost"
        k = got["kernel_arrivals_ns"]
        assert None not in k, "no kernel receive timestamps"
        want_us = 1514 * 8 / rate
        gap_us = statistics.median(b - a for a, b in zip(k, k[1:])) / 1e3
        mean_us = (k[-1] - k[0]) / (n_rate - 1) / 1e3
        res["frame_gap_us"] = gap_us
        # The median gap is the rate; a stalled sender can only lengthen the
        # mean, never shorten it below the rate's spacing.
        assert abs(gap_us - want_us) <= 0.03 * want_us and mean_us >= 0.98 * want_us, \
            f"frames left every {gap_us:.1f} us (median; mean {mean_us:.1f}), " \
            f"{want_us:.1f} us at {rate} Mbit/s"
    res["seconds"] = time.monotonic() - t0
    res["summary"] = (
        f"delay down {res['down_delay_ms'][1]:.2f} ms (10), up {res['up_delay_ms'][1]:.2f} ms "
        f"(20); loss {res['loss']:.2%} (10%); frame gap {res['frame_gap_us']:.1f} us "
        f"({1514 * 8 / rate:.1f}); {res['seconds']:.1f} s")
    return res


def run_scenario_script(script, args, tmp_path, tag, out, timeout, cleanup=None):
    """Runs a scenario script (`args` plus --json OUT, --workdir, --tag TAG)
    in its own process group, so that on a timeout the scenario and its
    daemon go together; whatever its lab left is removed by tag, and then
    `cleanup()` runs, even when it fails, times out or the test is
    interrupted. Returns (returncode, stdout, stderr)."""
    p = subprocess.Popen([sys.executable, str(script), *args,
                          "--json", str(out), "--workdir", str(tmp_path / "work"), "--tag", tag],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                         start_new_session=True)

    def stop():
        # SIGTERM unwinds the scenario (its lab, nginx and daemon go down).
        os.killpg(p.pid, signal.SIGTERM)
        try:
            p.communicate(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(p.pid, signal.SIGKILL)
            p.communicate()

    try:
        stdout, stderr = p.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        stop()
        pytest.fail(f"the scenario did not finish within {timeout} s")
    finally:
        if p.poll() is None:   # this test was interrupted (SIGTERM, Ctrl-C, the budget)
            stop()
        labmod.down_all(tag)
        if cleanup:
            cleanup()
    return p.returncode, stdout, stderr
