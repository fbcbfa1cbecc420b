"""What the benchmarks (bench/), the integration tests and the lab share:
waiting for a condition, stopping a process, reading a Prometheus exposition,
a process's memory, removing a network namespace with everything in it, and
the size of one flow record in the ring.

Imported by path (bench/benchlib.py, tests/integration/conftest.py,
tests/package/test_deb.py, tests/fleet/test_servers.py put tests/ on
sys.path); nothing here depends on pytest."""
import http.server
import os
import re
import signal
import subprocess
import time

RECORD_BYTES = 296 + 8  # struct tcpscope_flow_event + the ring buffer's record header


# Set by tests/real_kernels/run.py in a VM that emulates its CPU (QEMU's
# TCG): every wait for a condition gets TIME_SCALE times longer, and a test
# skips the checks that rest on timing (RTT-based rules, FCT against a
# clock), keeping the rest. Such a VM checks correctness, not timing.
EMULATED = os.environ.get("TCPSCOPE_TEST_EMULATED") == "1"
TIME_SCALE = float(os.environ.get("TCPSCOPE_TEST_TIME_SCALE", "1"))


class WaitTimeout(AssertionError):
    """A wait_for that ran out of time (an AssertionError, so pytest shows it as a failed check)."""


def wait_for(pred, timeout, what="condition", interval=0.05):
    """pred()'s first truthy value within `timeout` seconds (times TIME_SCALE);
    `what` (text, or a callable for text known only at the end) names it in
    the timeout's message."""
    timeout *= TIME_SCALE
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        v = pred()
        if v:
            return v
        time.sleep(interval)
    raise WaitTimeout(f"timed out after {timeout}s waiting for {what() if callable(what) else what}")


def stop_process(p, sig=signal.SIGTERM, timeout=20):
    """Stops a Popen child that may have exited already: `sig`, then SIGKILL
    when it has not exited within `timeout` seconds. Returns its exit code."""
    if p.poll() is None:
        p.send_signal(sig)
        try:
            p.wait(timeout)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()
    return p.returncode


_SAMPLE = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{.*\})?\s+(\S+)$")


def metric_value(text, name, labels=None):
    """The sum of `name`'s samples in a Prometheus text exposition whose labels
    include `labels` ({name: value}); None when there is none."""
    total, found = 0.0, False
    for line in text.splitlines():
        if line.startswith("#") or not line.startswith(name):
            continue
        m = _SAMPLE.match(line)
        if not m or m.group(1) != name:
            continue
        if labels and not all(f'{k}="{v}"' in (m.group(2) or "") for k, v in labels.items()):
            continue
        total += float(m.group(3))
        found = True
    return total if found else None


def proc_mem_kib(pid):
    """(VmRSS, VmHWM) of a process in KiB."""
    rss = hwm = 0
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                rss = int(line.split()[1])
            elif line.startswith("VmHWM:"):
                hwm = int(line.split()[1])
    return rss, hwm


def remove_netns(*names):
    """Kills every process in each named network namespace, then deletes it;
    a namespace that is not there is skipped."""
    for ns in names:
        pids = subprocess.run(["ip", "netns", "pids", ns], capture_output=True, text=True).stdout.split()
        for pid in pids:
            try:
                os.kill(int(pid), signal.SIGKILL)
            except (ProcessLookupError, ValueError):
                pass
        subprocess.run(["ip", "netns", "del", ns], capture_output=True, text=True)


def add_server_options(parser, *, port=True, out=True, ready_required=False, timeout=120):
    """The options of the test servers that helper scripts run in a network
    namespace (tests/integration/traffic.py, tests/lab/probe.py, ...): where it
    listens, how many connections or datagrams it takes, where it writes what
    it saw, the file it creates once listening, and how long it waits at most."""
    parser.add_argument("--bind", required=True)
    if port:
        parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--count", type=int, required=True)
    if out:
        parser.add_argument("--out", required=True)
    parser.add_argument("--ready", required=ready_required)
    parser.add_argument("--timeout", type=float, default=timeout)


def add_peer_options(parser):
    """A client's server: --addr and --port."""
    parser.add_argument("--addr", required=True)
    parser.add_argument("--port", type=int, required=True)


class FixedAnswer(http.server.BaseHTTPRequestHandler):
    """A stand-in HTTP server's handler: every GET gets `body` (with
    `content_type` when set) and status_for(path); nothing is logged. A test
    subclasses it with its own answer."""

    body = b""
    content_type = None

    def status_for(self, path):
        return 200

    def seen(self):
        """Called with each request before it is answered."""

    def do_GET(self):  # noqa: N802  (http.server's name)
        self.seen()
        self.send_response(self.status_for(self.path))
        if self.content_type:
            self.send_header("Content-Type", self.content_type)
        self.send_header("Content-Length", str(len(self.body)))
        self.end_headers()
        self.wfile.write(self.body)

    def log_message(self, *args):
        pass
