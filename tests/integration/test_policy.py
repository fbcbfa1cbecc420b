"""Per-socket congestion control: rules and experiments applied by the sockops
program, seen in the kernel's own view (ss) and in the records; applications
that set TCP_CONGESTION themselves; the sysctl guard; and a daemon killed
with SIGKILL leaves every connection working. The programs attach to a cgroup
the test creates, and only the test's processes run in it."""
import json
import re
import shutil
import signal
import subprocess
import sys
import time

import pytest

from conftest import TCPSCOPE, TRAFFIC, Daemon, read_jsonl, sh, wait_for


def start_daemon(tmp, cgroup, config_text):
    home = tmp / "daemon"
    home.mkdir(exist_ok=True)
    cfg = home / "tcpscope.yaml"
    cfg.write_text(config_text)
    return Daemon(home, extra_args=("--config", str(cfg), "--cgroup", str(cgroup)))


def default_cc(net):
    return net.ns(net.srv, "cat", "/proc/sys/net/ipv4/tcp_congestion_control").stdout.strip()


def ss_congestion(net, ns):
    """{(local, peer): cc} of established TCP sockets, from the kernel (ss -tin)."""
    out = net.ns(ns, "ss", "-tinH", "state", "established").stdout.splitlines()
    result, key = {}, None
    for line in out:
        if not line.startswith((" ", "\t")):
            parts = line.split()
            key = (parts[2], parts[3]) if len(parts) >= 4 else None
        elif key:
            m = re.search(r"\b(cubic|bbr|reno|htcp|dctcp|vegas|westwood)\b", line)
            if m:
                result[key] = m.group(1)
    return result


def test_rule_sets_cubic_for_one_client_prefix_only(net, tmp_path, test_cgroup):
    net.cgroup = test_cgroup
    n = net.cli_v4.split(".")[2]
    other = f"198.18.{n}.3"
    net.ns(net.cli, "ip", "addr", "add", f"{other}/24", "dev", net.veth_cli)
    base = default_cc(net)
    assert base != "cubic", "the test needs a default other than the rule's algorithm"
    d = start_daemon(tmp_path, test_cgroup, f"""
cc_policy:
  rules:
    - name: cubic-for-one
      match: {{ prefixes: ["{other}/32"] }}
      cc: cubic
""")
    try:
        # Slow the server's sending so the connections stay open to be inspected.
        net.ns(net.srv, "tc", "qdisc", "add", "dev", net.veth_srv, "root", "tbf",
               "rate", "8mbit", "burst", "16kb", "latency", "500ms")
        server, _ = net.serve(tmp_path, net.srv_v4, 4)
        clients = [net.spawn(net.cli, sys.executable, str(TRAFFIC), "client", "--addr", net.srv_v4,
                             "--port", "8080", "--req", "10", "--resp", "3000000", "--source", src,
                             "--out", str(tmp_path / f"c{i}.jsonl"))
                   for i, src in enumerate([net.cli_v4, other, net.cli_v4, other])]
        seen = wait_for(lambda: (lambda m: m if len(m) == 4 else None)(ss_congestion(net, net.srv)),
                        20, what="4 established server sockets in ss")
        for (local, peer), cc in seen.items():
            assert cc == ("cubic" if peer.startswith(other + ":") else base), (peer, cc)
        for c in clients:
            c.wait(timeout=60)
        server.wait(timeout=60)

        recs = d.wait_records(net, 8)
        passive = [r for r in recs if r["dir"] == "passive"]
        assert len(passive) == 4
        for r in passive:
            if r["raddr"] == other:
                assert (r["cc"], r["cc_rule"]) == ("cubic", "cubic-for-one"), r
            else:
                assert (r["cc"], r["cc_rule"]) == (base, None), r
        # The clients' sockets talk to the server, which no rule names.
        assert all(r["cc"] == base and r["cc_rule"] is None for r in recs if r["dir"] == "active")
        assert d.metric_value("tcpscope_cc_assignments_total", {"rule": "cubic-for-one"}) == 2
    finally:
        assert d.stop() == 0, d.stderr_text()


def test_experiment_splits_flows_between_arms(net, tmp_path, test_cgroup):
    net.cgroup = test_cgroup
    d = start_daemon(tmp_path, test_cgroup, """
cc_policy:
  rules:
    - name: ab
      match: { peer_class: client }
      experiment: { name: bbr-vs-cubic, arms: { bbr: 50, cubic: 50 } }
""")
    try:
        n = 400
        server, _ = net.serve(tmp_path, net.srv_v4, n)
        clients = net.client(tmp_path, net.srv_v4, count=n, req=50, resp=500, parallel=8)
        server.wait(timeout=60)
        assert all("error" not in c for c in clients)
        passive = [r for r in d.wait_records(net, 2 * n) if r["dir"] == "passive"]
        assert len(passive) == n
        arms = {"bbr": 0, "cubic": 0}
        for r in passive:
            assert r["experiment"] == "bbr-vs-cubic" and r["cc_rule"] == "ab", r
            assert r["cc"] == r["arm"], r  # the kernel runs the arm it was given
            arms[r["arm"]] += 1
        # Binomial(400, 0.5): sd = 10; 4 sd either side is a 1-in-15000 false alarm.
        assert 160 <= arms["bbr"] <= 240, arms
        total = sum(d.metric_value("tcpscope_cc_assignments_total",
                                   {"experiment": "bbr-vs-cubic", "arm": a}) or 0 for a in arms)
        assert total == 2 * n  # both ends of every connection are in the cgroup

        # The policy in force, as an operator reads it.
        show = sh(str(TCPSCOPE), "policy", "show", "--server", d.url).stdout
        assert "ab" in show and "bbr-vs-cubic" in show and "50%" in show, show
        pj = json.loads(sh(str(TCPSCOPE), "policy", "show", "--server", d.url, "--json").stdout)
        assert pj["rules"][0]["assigned"] == 2 * n
        assert sum(a["assigned"] for a in pj["rules"][0]["experiment"]["arms"]) == 2 * n
    finally:
        assert d.stop() == 0, d.stderr_text()


@pytest.mark.parametrize("mode", ["respect", "enforce"])
def test_application_that_sets_its_own_cc(net, tmp_path, test_cgroup, mode):
    if shutil.which("iperf3") is None:
        pytest.skip("iperf3 not installed")
    net.cgroup = test_cgroup
    d = start_daemon(tmp_path, test_cgroup, f"""
cc_policy:
  app_override: {mode}
  rules:
    - name: all-cubic
      match: {{ peer_class: client }}
      cc: cubic
""")
    try:
        srv = net.spawn(net.srv, "iperf3", "-s", "-1", "-B", net.srv_v4, "-p", "5201")
        time.sleep(0.5)
        r = net.ns(net.cli, "iperf3", "-c", net.srv_v4, "-p", "5201", "-C", "bbr", "-n", "2M", "-J")
        srv.wait(timeout=30)
        result = json.loads(r.stdout)
        assert "error" not in result, result.get("error")
        data_port = result["start"]["connected"][0]["local_port"]
        recs = d.wait_records(net, 4)
        data = [x for x in recs if x["dir"] == "active" and x["lport"] == data_port]
        assert len(data) == 1
        rec = data[0]
        assert rec["app_set_cc"] is True
        if mode == "respect":
            assert (rec["cc"], rec["cc_rule"]) == ("bbr", None), rec
        else:
            assert (rec["cc"], rec["cc_rule"]) == ("cubic", "all-cubic"), rec
        observed = d.metric_value("tcpscope_app_cc_setsockopt_total", {"cc": "bbr", "action": "observed"})
        overridden = d.metric_value("tcpscope_app_cc_setsockopt_total", {"action": "overridden"}) or 0
        assert observed and observed >= 1
        assert (overridden >= 1) == (mode == "enforce")
    finally:
        assert d.stop() == 0, d.stderr_text()


def test_sysctl_guard_denies_while_running(net, tmp_path, test_cgroup):
    net.cgroup = test_cgroup
    # Inside the test's namespace, so the host's own setting is never touched;
    # a non-init namespace may only choose an allowed algorithm, e.g. reno.
    write = lambda: net.ns(net.cli, "sysctl", "-w", "net.ipv4.tcp_congestion_control=reno", check=False)
    d = start_daemon(tmp_path, test_cgroup, """
cc_policy:
  sysctl_guard: deny
""")
    try:
        r = write()
        assert r.returncode != 0 and "Operation not permitted" in r.stderr, (r.returncode, r.stderr)
        wait_for(lambda: d.metric_value("tcpscope_sysctl_writes_total",
                                        {"name": "net.ipv4.tcp_congestion_control", "action": "denied"}),
                 5, what="the denied write to be counted")
    finally:
        assert d.stop() == 0, d.stderr_text()
    r = write()
    assert r.returncode == 0, r.stderr


def test_sigkill_leaves_connections_working_and_nothing_attached(net, tmp_path, test_cgroup):
    net.cgroup = test_cgroup
    d = start_daemon(tmp_path, test_cgroup, """
cc_policy:
  rules:
    - name: all-cubic
      match: { peer_class: client }
      cc: cubic
""")
    # A connection open across the kill: the server echoes until EOF.
    echo = ("import socket,sys\n"
            "s=socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)\n"
            f"s.bind(('{net.srv_v4}', 7000)); s.listen(); open(sys.argv[1],'w').close()\n"
            "while True:\n"
            "  c,_=s.accept()\n"
            "  while True:\n"
            "    b=c.recv(65536)\n"
            "    if not b: break\n"
            "    c.sendall(b)\n"
            "  c.close()\n")
    ready = tmp_path / "echo.ready"
    net.spawn(net.srv, sys.executable, "-c", echo, str(ready))
    wait_for(ready.exists, 10, what="echo server")
    client = ("import socket,sys,time\n"
              f"c=socket.create_connection(('{net.srv_v4}', 7000))\n"
              "def rt(n):\n"
              "  c.sendall(b'x'*n); got=0\n"
              "  while got<n: got+=len(c.recv(65536))\n"
              "rt(100000); print('before', flush=True)\n"
              "sys.stdin.readline()\n"
              "rt(100000); print('after', flush=True)\n")
    p = subprocess.Popen(net._wrap(net.cli, [sys.executable, "-c", client]), stdin=subprocess.PIPE,
                         stdout=subprocess.PIPE, text=True)
    net.procs.append(p)
    assert p.stdout.readline().strip() == "before"
    d.proc.send_signal(signal.SIGKILL)
    d.proc.wait(timeout=10)
    d.stderr.close()

    # The kernel closed the links with the process: nothing stays attached.
    attached = sh("bpftool", "cgroup", "show", str(test_cgroup), check=False).stdout
    assert "cc_policy" not in attached and "guard_sysctl" not in attached, attached
    # The open connection keeps working, and new ones too.
    p.stdin.write("go\n")
    p.stdin.flush()
    assert p.stdout.readline().strip() == "after"
    p.stdin.close()
    p.wait(timeout=10)
    r = net.ns(net.cli, sys.executable, "-c",
               f"import socket; c=socket.create_connection(('{net.srv_v4}', 7000), timeout=5); "
               "c.sendall(b'ping'); assert c.recv(4) == b'ping'")
    assert r.returncode == 0, r.stderr
