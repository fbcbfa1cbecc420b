"""pytest fixtures and helpers for the lab tests.

Not a conftest.py on purpose: tests/integration's test modules do
`from conftest import ...`, and a second conftest module in the same pytest
run would replace theirs. Test modules here import what they use from this
module instead, and this module loads tests/integration/conftest.py under its
own name to reuse its Daemon helper.
"""
import importlib.util
import json
import os
import shutil
import sys
import time
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import lab as labmod  # noqa: E402  (the lab library next to this file)

_spec = importlib.util.spec_from_file_location(
    "tcpscope_integration_conftest", HERE.parent / "integration" / "conftest.py")
integration = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(integration)

Daemon = integration.Daemon
wait_for = integration.wait_for
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


def start_daemon(lab, tmp: Path, extra_config=""):
    """A tcpscope daemon whose config knows the lab's peer classes and ASNs."""
    assert TCPSCOPE.exists(), f"build first: {TCPSCOPE} missing"
    home = tmp / "daemon"
    home.mkdir(exist_ok=True)
    cfg = lab.tcpscope_config(home / "tcpscope.yaml", extra=extra_config)
    integration.WATCHED_NETNS.update(lab.netns_ids.values())  # the Daemon helper keeps only these
    return Daemon(home, extra_args=("--config", str(cfg)))


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

    def client(self, ns, addr, port, count=1, req=100, resp=1000, timeout=120):
        out = self.tmp / f"client-{ns}-{port}-{time.monotonic_ns()}.jsonl"
        r = self.lab.ns(ns, sys.executable, TRAFFIC, "client", "--addr", addr, "--port", port,
                        "--count", count, "--req", req, "--resp", resp, "--out", out,
                        "--timeout", timeout, timeout=timeout + 30)
        assert r.returncode == 0, r.stderr
        recs = read_jsonl(out)
        assert recs and all("error" not in c for c in recs), recs
        return recs
