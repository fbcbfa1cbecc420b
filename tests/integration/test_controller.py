"""The closed loop's controller, through the real daemon and kernel: records
of a controller rule carry its experiment and arm, the kernel draws each
cohort's arm by the weights the controller keeps (per ASN, else per peer
class), decisions survive a restart (STATE_DIRECTORY), a corrupt state is
reported, moved aside and ignored, and a SIGHUP that removes the controller returns its
flows to the static policy at once. Whether it decides right is measured in
the lab (tests/lab/test_lab_controller.py, bench/controller_lab.py); the
statistics themselves in tests/unit/control."""
import json
import os
import random
import re
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from conftest import TCPSCOPE, Daemon, echo_server, sh, wait_for

CONNECT = ("import socket,sys\n"
           "for _ in range(int(sys.argv[4])):\n"
           "  c=socket.socket(); c.bind((sys.argv[1], 0)); c.connect((sys.argv[2], int(sys.argv[3])))\n"
           "  c.sendall(b'x'*200)\n"
           "  got=0\n"
           "  while got<200: got+=len(c.recv(65536))\n"
           "  c.close()\n")

def controller_config(pfx2as, netns, min_transfers=1000000):
    return f"""
asn:
  prefix_file: {pfx2as}
cc_policy:
  rules:
    - name: auto
      match: {{ peer_class: client, lports: [8080] }}
      controller:
        arms: [bbr, cubic]
        cohort: asn
        control_percent: 10
        min_transfers: {min_transfers}
        interval_s: 1
        evidence_netns: [{netns}]
"""


def get_json(d, path):
    with urllib.request.urlopen(d.url + path, timeout=10) as r:
        return json.loads(r.read())


class Setup:
    def __init__(self, net, tmp_path, test_cgroup):
        net.cgroup = test_cgroup
        self.net, self.tmp, self.cgroup = net, tmp_path, test_cgroup
        n = net.cli_v4.split(".")[2]
        self.other = f"198.18.{n}.3"  # in ASN 64777; cli_v4 is in no ASN: pooled into "client"
        net.ns(net.cli, "ip", "addr", "add", f"{self.other}/24", "dev", net.veth_cli)
        self.pfx2as = tmp_path / "pfx2as.tsv"
        self.pfx2as.write_text(f"{self.other}\t32\t64777\n")
        self.state = tmp_path / "state"
        self.state.mkdir(mode=0o700)
        self.cfg = tmp_path / "tcpscope.yaml"
        echo_server(net, tmp_path, net.srv_v4, 8080)
        self.runs = 0

    def daemon(self, config_text, missing_tracepoints=()):
        self.cfg.write_text(config_text)
        self.runs += 1
        home = self.tmp / f"run{self.runs}"
        home.mkdir()
        env = dict(os.environ, STATE_DIRECTORY=str(self.state))
        if missing_tracepoints:
            env["TCPSCOPE_TEST_MISSING_TRACEPOINTS"] = ",".join(missing_tracepoints)
        return Daemon(home, extra_args=("--config", str(self.cfg), "--cgroup", str(self.cgroup)), env=env)

    def connections(self, d, src, n):
        """The server's records of n new connections from src."""
        def of_src():
            return [r for r in d.records(self.net, "srv") if r["raddr"] == src]
        before = len(of_src())
        self.net.ns(self.net.cli, sys.executable, "-c", CONNECT, src, self.net.srv_v4, "8080", str(n))
        wait_for(lambda: len(of_src()) >= before + n, 20, what=f"{n} records from {src}")
        return of_src()[before:]


def test_cohort_weights_steer_the_kernel_and_survive_a_restart(net, tmp_path, test_cgroup):
    s = Setup(net, tmp_path, test_cgroup)
    d = s.daemon(controller_config(s.pfx2as, s.net.srv))
    try:
        recs = s.connections(d, net.cli_v4, 60)
        for r in recs:
            assert (r["cc_rule"], r["experiment"]) == ("auto", "controller"), r
            assert r["arm"] in ("bbr", "cubic") and r["cc"] == r["arm"], r
        arms = {a: sum(r["arm"] == a for r in recs) for a in ("bbr", "cubic")}
        assert min(arms.values()) >= 10, arms  # 50/50 while exploring: Binomial(60, .5), 4.4 sd
        wait_for(lambda: any(c["cohort"] == "client" and c["evidence"]["test"]
                             for c in get_json(d, "/api/v1/controller")["rules"][0]["cohorts"]), 10,
                 what="the client cohort, tested once")
        doc = get_json(d, "/api/v1/controller")
        rule = doc["rules"][0]
        assert (rule["rule"], rule["cohort"], rule["arms"]) == ("auto", "asn", ["bbr", "cubic"]), rule
        pool = next(c for c in rule["cohorts"] if c["cohort"] == "client")
        assert (pool["kind"], pool["state"], pool["winner"], pool["weights"]) == \
            ("peer_class", "exploring", None, {"bbr": 50, "cubic": 50}), pool
        assert "min_transfers" in pool["evidence"]["test"]["waiting_for"]
        show = sh(str(TCPSCOPE), "policy", "show", "--server", d.url).stdout
        assert "controller (cohort asn)" in show and "controller of rule auto" in show, show
        assert "exploring" in show, show
    finally:
        assert d.stop() == 0, d.stderr_text()

    # The state the daemon saved at SIGTERM, with decisions written into it
    # as the controller writes them: the pool decided for BBR, ASN 64777 a
    # cohort of its own decided for CUBIC. Weights 100/0 make every draw
    # certain.
    path = s.state / "controller.json"
    saved = json.loads(path.read_text())
    cohorts = saved["rules"]["auto"]["cohorts"]
    pool = next(c for c in cohorts if c["label"] == "client")
    pool.update(state="decided", winner=0, weights=[100, 0], decided_at_s=1.0)
    asn = dict(pool, label="64777", is_asn=True, kernel_key=64777, winner=1, weights=[0, 100])
    cohorts.append(asn)
    path.write_text(json.dumps(saved))

    d = s.daemon(controller_config(s.pfx2as, s.net.srv))
    try:
        assert f"controller state restored from {path}" in d.stderr_text()
        rule = get_json(d, "/api/v1/controller")["rules"][0]
        by = {c["cohort"]: c for c in rule["cohorts"]}
        assert (by["client"]["state"], by["client"]["winner"], by["client"]["weights"]) == \
            ("decided", "bbr", {"bbr": 100, "cubic": 0}), by
        assert (by["64777"]["kind"], by["64777"]["winner"]) == ("asn", "cubic"), by
        assert d.metric_value("tcpscope_controller_weight_percent",
                              {"rule": "auto", "cohort": "64777", "arm": "cubic"}) == 100
        assert d.metric_value("tcpscope_controller_cohorts", {"rule": "auto", "state": "decided"}) == 2
        pooled = s.connections(d, net.cli_v4, 30)
        own = s.connections(d, s.other, 30)
        assert all(r["arm"] == "bbr" == r["cc"] and r["asn"] == 0 for r in pooled), pooled
        # The trie names ASN 64777 because it has a cohort: its weights win over its class's.
        assert all(r["arm"] == "cubic" == r["cc"] and r["asn"] == 64777 for r in own), own

        # SIGHUP without the controller: its flows go to the static rule at once.
        s.cfg.write_text(f"""
asn:
  prefix_file: {s.pfx2as}
cc_policy:
  rules:
    - name: clients-reno
      match: {{ peer_class: client }}
      cc: reno
""")
        d.proc.send_signal(signal.SIGHUP)
        wait_for(lambda: "tcpscope: reloaded" in d.stderr_text(), 20, what="reload")
        assert get_json(d, "/api/v1/controller")["rules"] == []
        after = s.connections(d, s.other, 10)
        assert all((r["cc"], r["cc_rule"], r["experiment"]) == ("reno", "clients-reno", None) for r in after), \
            [(r["cc"], r["cc_rule"], r["experiment"], r["arm"]) for r in after]
    finally:
        assert d.stop() == 0, d.stderr_text()


@pytest.mark.parametrize("corrupt,why", [('{"version": 1, "rules": {"auto": {"arms": ', "not valid JSON"),
                                         ('{"version": 99, "rules": {}}', "not a version 1 to")],
                         ids=["corrupt", "newer_version"])
def test_a_corrupt_state_is_moved_aside_and_ignored(net, tmp_path, test_cgroup, corrupt, why):
    """Corrupt, or a newer version's after a downgrade."""
    s = Setup(net, tmp_path, test_cgroup)
    (s.state / "controller.json").write_text(corrupt)
    d = s.daemon(controller_config(s.pfx2as, s.net.srv))
    try:
        err = d.stderr_text()
        assert "controller state ignored: " in err and why in err, err
        aside = sorted(s.state.glob("controller.json.unreadable-*"))
        assert len(aside) == 1 and f"moved to {aside[0]}" in err, err
        assert aside[0].read_text() == corrupt
        assert get_json(d, "/api/v1/controller")["rules"][0]["cohorts"] == []
        assert all(r["experiment"] == "controller" for r in s.connections(d, net.cli_v4, 5))
    finally:
        assert d.stop() == 0, d.stderr_text()
    # The next save writes a valid state in its place; the one set aside stays.
    json.loads((s.state / "controller.json").read_text())
    assert aside[0].read_text() == corrupt


def test_without_send_transfers_the_status_says_so(net, tmp_path, test_cgroup):
    """On a kernel with neither tcp_sendmsg_locked nor tcp_probe (hidden
    here) no send transfer is ever made: /api/v1/controller says that, for
    the controller and for each cohort's test, instead of waiting for
    min_transfers."""
    s = Setup(net, tmp_path, test_cgroup)
    d = s.daemon(controller_config(s.pfx2as, s.net.srv, min_transfers=5), missing_tracepoints=("tcp_sendmsg_locked", "tcp_probe"))
    none = "no send transfers on this kernel (they need tcp_sendmsg_locked, Linux 6.16, or tcp_probe)"
    try:
        assert get_json(d, "/api/v1/controller")["note"] == none
        s.connections(d, net.cli_v4, 20)
        wait_for(lambda: any(c["cohort"] == "client" and c["evidence"]["test"]
                             for c in get_json(d, "/api/v1/controller")["rules"][0]["cohorts"]), 10,
                 what="the client cohort, tested once")
        pool = next(c for c in get_json(d, "/api/v1/controller")["rules"][0]["cohorts"] if c["cohort"] == "client")
        assert pool["state"] == "exploring" and pool["evidence"]["test"]["waiting_for"] == none, pool
        assert all(t["direction"] == "recv" for t in d.all_transfers()), "a send transfer on this kernel"
    finally:
        assert d.stop() == 0, d.stderr_text()


HOLD = ("import socket,sys\n"
        "conns=[]\n"
        "for _ in range(int(sys.argv[4])):\n"
        "  c=socket.socket(); c.bind((sys.argv[1], 0)); c.connect((sys.argv[2], int(sys.argv[3])))\n"
        "  c.sendall(b'x'*200)\n"
        "  got=0\n"
        "  while got<200: got+=len(c.recv(65536))\n"
        "  conns.append(c)\n"
        "print('open', flush=True)\n"
        "sys.stdin.readline()\n"
        "for c in conns: c.close()\n"
        "print('closed', flush=True)\n")


def test_connections_whose_close_records_were_lost_leave_the_table(net, tmp_path, test_cgroup):
    """200 kept-open connections are counted; with the daemon stopped, a
    burst of 1,500 others fills its 256 KiB ring and then the 200 close, so
    their close records are lost. The next pass of the socket iterator
    (snapshot_interval_s: 1) finds none of them open in the server's
    namespace: they leave the connection table, and new connections are
    counted, none refused. A namespace the pass cannot enter (here a file in
    /run/netns that is none) is named in the log and holds up nothing."""
    s = Setup(net, tmp_path, test_cgroup)
    d = s.daemon(controller_config(s.pfx2as, s.net.srv) + "ring_buffer_bytes: 262144\nsnapshot_interval_s: 1\n")
    hold = None
    not_a_namespace = Path("/run/netns") / f"tcpscope-test-not-a-namespace-{os.getpid()}"

    def rule():
        return get_json(d, "/api/v1/controller")["rules"][0]

    def transfers():
        return sum(a["transfers"] for c in rule()["cohorts"] for a in c["evidence"]["arms"].values())
    try:
        hold = subprocess.Popen(["ip", "netns", "exec", net.cli, sys.executable, "-c", HOLD, net.cli_v4, net.srv_v4,
                                 "8080", "200"], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        assert hold.stdout.readline().strip() == "open"
        wait_for(lambda: rule()["open_connections"] == 200, 20, what="200 open connections in the table")
        before = rule()
        d.proc.send_signal(signal.SIGSTOP)
        try:
            s.net.ns(s.net.cli, sys.executable, "-c", CONNECT, s.other, s.net.srv_v4, "8080", "1500")
            hold.stdin.write("\n")
            hold.stdin.flush()
            assert hold.stdout.readline().strip() == "closed"

            def server_ends_open():
                out = s.net.ns(s.net.srv, "ss", "-Htn", "state", "connected", "dst", s.net.cli_v4).stdout
                return len(out.splitlines())
            # The server's ends close, into the full ring, before the daemon runs again.
            wait_for(lambda: server_ends_open() == 0, 20, what="the server's ends of the 200 closed")
        finally:
            d.proc.send_signal(signal.SIGCONT)
        not_a_namespace.write_text("")
        wait_for(lambda: (d.metric_value("tcpscope_records_lost_total") or 0) > 0, 10, what="records lost")
        wait_for(lambda: rule()["open_connections"] == 0, 10,
                 what=lambda: f"an empty connection table: {rule()['open_connections']} open, last snapshot's "
                              f"namespaces {d.snapshot_namespaces()}, daemon: {d.stderr_text()[-1500:]}")
        after = rule()
        print(f"\n200 open connections, their close records behind a full ring: "
              f"{after['connections_closed_unseen']} left the table unseen, "
              f"{d.metric_value('tcpscope_records_lost_total'):.0f} records lost", end="")
        assert before["connections_closed_unseen"] == 0, before
        assert after["connections_closed_unseen"] >= 190, after
        counted = transfers()
        s.connections(d, s.net.cli_v4, 50)
        wait_for(lambda: transfers() >= counted + 50, 10, what="50 new connections counted")
        assert rule()["records_refused"]["connection_cap"] == 0, rule()
        assert d.snapshot_namespaces()["failed"] == 1, d.snapshot_namespaces()
        assert f"not read, the first: entering {not_a_namespace}: Invalid argument" in d.stderr_text()
    finally:
        not_a_namespace.unlink(missing_ok=True)
        if hold and hold.poll() is None:
            hold.kill()
            hold.wait()
        d.proc.send_signal(signal.SIGCONT)
        assert d.stop() == 0, d.stderr_text()


FORBIDDEN_AFTER_DETACH = ("BPF_LINK_CREATE", "BPF_ITER_CREATE", "BPF_MAP_UPDATE_ELEM", "BPF_RAW_TRACEPOINT_OPEN",
                          "BPF_PROG_ATTACH")


def bpf_after_detach(trace_prefix):
    """The daemon's bpf() calls of FORBIDDEN_AFTER_DETACH made after it closed
    its first live link (the detach), from strace -ff -ttt files; and
    whether a detach was seen."""
    lines = []
    for f in trace_prefix.parent.glob(trace_prefix.name + ".*"):
        lines += [l.split(" ", 1) for l in f.read_text().splitlines() if " " in l]
    links, detached, after = set(), False, []
    for _, call in sorted(lines, key=lambda l: float(l[0])):
        ret = re.search(r"= (\d+)$", call)
        if call.startswith(("bpf(BPF_LINK_CREATE", "bpf(BPF_RAW_TRACEPOINT_OPEN")) and ret and not detached:
            links.add(int(ret.group(1)))
        m = re.match(r"close\((\d+)\)", call)
        if m and int(m.group(1)) in links:
            detached = True
        if detached and call.startswith(tuple(f"bpf({c}" for c in FORBIDDEN_AFTER_DETACH)):
            after.append(call[:120])
    return detached, after


def test_a_stop_starts_nothing_after_the_detach(net, tmp_path, test_cgroup):
    """20 stops, each at a random moment 0.5 to 2.5 s after the start, of a
    daemon whose controller tests every second and whose socket iterator
    runs every second, under strace: once it has closed its first link (the
    detach), no link, iterator, attachment or map update follows."""
    s = Setup(net, tmp_path, test_cgroup)
    s.cfg.write_text(controller_config(s.pfx2as, s.net.srv) + "snapshot_interval_s: 1\n")
    rng = random.Random(48)
    for run in range(20):
        home = tmp_path / f"stop{run}"
        home.mkdir()
        prefix = home / "trace"
        wrapper = home / "tcpscope-under-strace"
        wrapper.write_text(f"#!/bin/sh\nexec strace -f -ff -ttt -qq --seccomp-bpf -e trace=bpf,close -o {prefix} "
                           f"{TCPSCOPE} \"$@\"\n")
        wrapper.chmod(0o755)
        env = dict(os.environ, STATE_DIRECTORY=str(s.state))
        d = Daemon(home, extra_args=("--config", str(s.cfg), "--cgroup", str(s.cgroup)), env=env, binary=wrapper)
        try:
            time.sleep(rng.uniform(0.5, 2.5))
            daemon_pid = int(sh("pgrep", "-P", str(d.proc.pid), "-x", "tcpscope").stdout.split()[0])
            os.kill(daemon_pid, signal.SIGTERM)
            assert d.proc.wait(timeout=30) == 0, d.stderr_text()
        finally:
            if d.proc.poll() is None:
                d.proc.kill()
                d.proc.wait()
        detached, after = bpf_after_detach(prefix)
        assert detached, f"run {run}: no link closed at stop"
        assert after == [], f"run {run}: after the detach: {after}"
