"""Per-socket congestion control: rules and experiments applied by the sockops
program, seen in the kernel's own view (ss) and in the records; applications
that set TCP_CONGESTION themselves; the sysctl guard; and a daemon killed
with SIGKILL leaves every connection working. The programs attach to a cgroup
the test creates, and only the test's processes run in it."""
import collections
import contextlib
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time

import pytest

from conftest import TCPSCOPE, TRAFFIC, Daemon, echo_server, sampled, sh, wait_for


def start_daemon(tmp, cgroup, config_text):
    home = tmp / "daemon"
    home.mkdir(exist_ok=True)
    cfg = home / "tcpscope.yaml"
    cfg.write_text(config_text)
    return Daemon(home, extra_args=("--config", str(cfg), "--cgroup", str(cgroup)))


@contextlib.contextmanager
def policy_daemon(tmp, cgroup, config_text):
    """The daemon of start_daemon, which must stop cleanly after the test's body."""
    d = start_daemon(tmp, cgroup, config_text)
    try:
        yield d
    finally:
        assert d.stop() == 0, d.stderr_text()


def one_rule(name, action, match="{ peer_class: client }", settings=()):
    """A cc_policy of one rule: `action` is its cc or experiment line,
    `settings` are more of cc_policy's own lines."""
    return "\n".join(["cc_policy:", *(f"  {line}" for line in settings), "  rules:", f"    - name: {name}",
                      f"      match: {match}", f"      {action}"]) + "\n"


def second_client_address(net):
    """Another IPv4 address on the client's veth, in its subnet: a client the
    rules can tell from the first."""
    n = net.cli_v4.split(".")[2]
    other = f"198.18.{n}.3"
    net.ns(net.cli, "ip", "addr", "add", f"{other}/24", "dev", net.veth_cli)
    return other


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


# A client that holds its connection open until told to close: prints its
# local port once connected (and a first round trip done), then one line
# per command on stdin ("rt": another round trip, "cc NAME": setsockopt
# TCP_CONGESTION, anything else: close and exit).
HELD_CLIENT = ("import socket,sys\n"
               "c=socket.create_connection((sys.argv[1], int(sys.argv[2])), timeout=10)\n"
               "def rt(n=1000):\n"
               "  c.sendall(b'x'*n); got=0\n"
               "  while got<n: got+=len(c.recv(65536))\n"
               "rt(); print(c.getsockname()[1], flush=True)\n"
               "for line in sys.stdin:\n"
               "  w=line.split()\n"
               "  if w and w[0]=='rt': rt(); print('ok', flush=True)\n"
               "  elif w and w[0]=='cc':\n"
               "    try: c.setsockopt(socket.IPPROTO_TCP, socket.TCP_CONGESTION, w[1].encode()); print('ok', flush=True)\n"
               "    except OSError as e: print('err', e.errno, flush=True)\n"
               "  else: break\n"
               "c.close()\n")


class HeldClient:
    def __init__(self, net, addr, port, user=None):
        as_user = ["setpriv", f"--reuid={user}", "--regid=nogroup", "--clear-groups"] if user else []
        self.p = subprocess.Popen(net._wrap(net.cli, [*as_user, sys.executable, "-c", HELD_CLIENT, addr, str(port)]),
                                  stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        net.procs.append(self.p)
        self.lport = int(self.p.stdout.readline())

    def cmd(self, line):
        self.p.stdin.write(line + "\n")
        self.p.stdin.flush()
        return self.p.stdout.readline().strip()

    def close(self):
        self.p.stdin.write("close\n")
        self.p.stdin.flush()
        self.p.stdin.close()
        assert self.p.wait(timeout=10) == 0


def reload(d, times_before):
    d.proc.send_signal(signal.SIGHUP)
    wait_for(lambda: d.stderr_text().count("tcpscope: reloaded") > times_before, 20, what="reload")
    assert "reload failed" not in d.stderr_text(), d.stderr_text()


def test_rule_sets_cubic_for_one_client_prefix_only(net, tmp_path, test_cgroup):
    net.cgroup = test_cgroup
    other = second_client_address(net)
    base = default_cc(net)
    assert base != "cubic", "the test needs a default other than the rule's algorithm"
    with policy_daemon(tmp_path, test_cgroup,
                       one_rule("cubic-for-one", "cc: cubic", match=f'{{ prefixes: ["{other}/32"] }}')) as d:
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


def test_sockops_is_attached_only_while_rules_exist(net, tmp_path, test_cgroup):
    """sock_ops runs on every new connection: with no rule it is not attached
    at all; a reload that adds one attaches it (after the daemon dropped its
    capabilities but CAP_NET_ADMIN) and the rule applies; a reload that
    removes the last detaches it. setsockopt and sysctl stay attached."""
    net.cgroup = test_cgroup
    base = default_cc(net)
    assert base != "cubic", "the test needs a default other than the rule's algorithm"
    no_rules = "cc_policy:\n  rules: []\n"
    all_cubic = one_rule("all-cubic", "cc: cubic", match="{ prefixes: [198.18.0.0/15] }")
    d = start_daemon(tmp_path, test_cgroup, no_rules)
    cfg = tmp_path / "daemon" / "tcpscope.yaml"

    def shown():
        return sh("bpftool", "cgroup", "show", str(test_cgroup)).stdout

    seen = 0

    def passive_ccs(n):
        nonlocal seen
        server, _ = net.serve(tmp_path, net.srv_v4, n)
        for _ in range(n):
            net.client(tmp_path, net.srv_v4, req=10, resp=10)
        server.wait(timeout=30)
        new = d.wait_records(net, seen + 2 * n)[seen:]
        seen += 2 * n
        return [(r["cc"], r["cc_rule"]) for r in new if r["dir"] == "passive"]

    try:
        assert "cc_policy" not in shown() and "watch_setsockopt" in shown() and "guard_sysctl" in shown()
        assert "(cc_policy" not in d.stderr_text() and ",cc_policy" not in d.stderr_text()
        assert passive_ccs(2) == [(base, None)] * 2

        cfg.write_text(all_cubic)
        reload(d, 0)
        assert "cc_policy" in shown()
        assert passive_ccs(2) == [("cubic", "all-cubic")] * 2

        cfg.write_text(no_rules)
        reload(d, 1)
        assert "cc_policy" not in shown() and "watch_setsockopt" in shown()
        assert passive_ccs(2) == [(base, None)] * 2
    finally:
        assert d.stop() == 0, d.stderr_text()


@pytest.mark.real_kernel
def test_experiment_splits_flows_between_arms(net, tmp_path, test_cgroup):
    net.cgroup = test_cgroup
    with policy_daemon(tmp_path, test_cgroup,
                       one_rule("ab", "experiment: { name: bbr-vs-cubic, arms: { bbr: 50, cubic: 50 } }")) as d:
        n = 400
        server, _ = net.serve(tmp_path, net.srv_v4, n)
        clients = net.client(tmp_path, net.srv_v4, count=n, req=50, resp=500, parallel=8)
        server.wait(timeout=60)
        assert all("error" not in c for c in clients)
        recs = d.wait_records(net, 2 * n)
        passive = [r for r in recs if r["dir"] == "passive"]
        assert len(passive) == n and len(recs) == 2 * n
        # Both ends of every connection are in the cgroup and in the
        # experiment: every record runs the arm it was given.
        for r in recs:
            assert r["experiment"] == "bbr-vs-cubic" and r["cc_rule"] == "ab", r
            assert r["arm"] in ("bbr", "cubic") and r["cc"] == r["arm"], r
        arms = {"bbr": 0, "cubic": 0}
        for r in passive:
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


def test_an_experiments_flows_have_every_transfer_at_the_default_sampling(net, tmp_path, test_cgroup):
    """At the default transfer_sampling_rate (16) the kernel follows every
    transfer of the flows an experiment assigns (sampling_rate 1): they are
    its evidence. An experiment with follow_transfers: false, and every flow
    no rule assigned, are followed only where the hash of their ports picks
    them (sampling_rate 16). The flow records are all there either way."""
    net.cgroup = test_cgroup
    other = second_client_address(net)
    config = ("cc_policy:\n  rules:\n"
              f"    - name: ab\n      match: {{ prefixes: [{net.cli_v4}/32] }}\n"
              "      experiment: { name: ab, arms: { bbr: 50, cubic: 50 } }\n"
              f"    - name: flows-only\n      match: {{ prefixes: [{other}/32] }}\n"
              "      experiment: { name: flows-only, arms: { bbr: 50, cubic: 50 }, follow_transfers: false }\n")
    home = tmp_path / "daemon"
    home.mkdir()
    (home / "tcpscope.yaml").write_text(config)
    d = Daemon(home, extra_args=("--config", str(home / "tcpscope.yaml"), "--cgroup", str(test_cgroup)),
               transfer_sampling_rate=None)
    try:
        n = 64
        server, _ = net.serve(tmp_path, net.srv_v4, 2 * n)
        for source in (net.cli_v4, other):
            clients = net.client(tmp_path, net.srv_v4, count=n, req=50, resp=500, parallel=4, source=source)
            assert all("error" not in c for c in clients)
        server.wait(timeout=60)
        recs = d.wait_records(net, 4 * n)
        assert len(recs) == 4 * n
        transfers = collections.defaultdict(list)
        for t in d.all_transfers():
            transfers[(t["netns"], t["lport"], t["rport"], t["flow_start_ns"])].append(t)
        followed = {"ab": 0, "flows-only": 0, None: 0}
        for r in recs:
            mine = transfers.get((r["netns"], r["lport"], r["rport"], r["start_ns"]), [])
            rule = r["cc_rule"] if r["dir"] == "passive" else None
            assert (rule is None) == (r["dir"] == "active"), r  # the rules match the client's address
            if rule == "ab":
                assert sorted(t["direction"] for t in mine) == ["recv", "send"], (r, mine)
                assert all(t["sampling_rate"] == 1 and t["experiment"] == "ab" for t in mine), mine
            else:
                assert all(t["sampling_rate"] == 16 for t in mine), mine
                assert bool(mine) == sampled(r["lport"], r["rport"], 16), (r, mine)
            followed[rule] += bool(mine)
        assert followed["ab"] == n
        # 64 flows at 1 in 16: 4 expected; all 64 is what a rule that did not
        # say follow_transfers: false would give.
        assert followed["flows-only"] < n / 2, followed
        print(f"\nflows with transfer records: {followed}", end="")
    finally:
        assert d.stop() == 0, d.stderr_text()


@pytest.mark.parametrize("mode", ["respect", pytest.param("enforce", marks=pytest.mark.real_kernel)])
def test_application_that_sets_its_own_cc(net, tmp_path, test_cgroup, mode):
    if shutil.which("iperf3") is None:
        pytest.skip("iperf3 not installed")
    net.cgroup = test_cgroup
    with policy_daemon(tmp_path, test_cgroup,
                       one_rule("all-cubic", "cc: cubic", settings=[f"app_override: {mode}"])) as d:
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
        assert overridden == (d.metric_value("tcpscope_app_cc_setsockopt_total",
                                             {"cc": "bbr", "action": "overridden"}) or 0)
        if mode == "enforce":
            # Chosen before connect(): the rule overrides it at connect, and
            # counts it under the name the application asked for.
            echo_server(net, tmp_path, net.srv_v4, 7004)
            code = ("import socket,sys; s=socket.socket(); "
                    "s.setsockopt(socket.IPPROTO_TCP, socket.TCP_CONGESTION, b'bbr'); "
                    "s.connect((sys.argv[1], 7004)); s.sendall(b'x'); s.recv(1); s.close()")
            net.ns(net.cli, sys.executable, "-c", code, net.srv_v4)
            wait_for(lambda: d.metric_value("tcpscope_app_cc_setsockopt_total",
                                            {"cc": "bbr", "action": "overridden"}) == overridden + 1,
                     5, what="the pre-connect choice counted as overridden under bbr")
        assert d.metric_value("tcpscope_app_cc_setsockopt_total", {"action": "refused"}) is None


def test_flow_open_across_two_reloads_keeps_its_rule(net, tmp_path, test_cgroup):
    """Sockets are tagged with the install that chose their CC, not the
    generation: after two reloads the generation is reused by another policy,
    and the record must still name the rule (and arm) that chose."""
    net.cgroup = test_cgroup
    policy = lambda name: one_rule(f"rule-{name}",
                                   f"experiment: {{ name: exp-{name}, arms: {{ cubic: 50, reno: 50 }} }}")
    home = tmp_path / "daemon"
    with policy_daemon(tmp_path, test_cgroup, policy("a")) as d:
        echo_server(net, tmp_path, net.srv_v4, 7001)
        held = HeldClient(net, net.srv_v4, 7001)
        for i, name in enumerate(("b", "c")):
            (home / "tcpscope.yaml").write_text(policy(name))
            reload(d, i)
        assert held.cmd("rt") == "ok"
        fresh = HeldClient(net, net.srv_v4, 7001)  # opened under rule-c
        held.close()
        fresh.close()
        recs = [r for r in d.wait_records(net, 4) if 7001 in (r["lport"], r["rport"])]
        assert len(recs) == 4, recs
        for r in recs:
            opened_under = "a" if held.lport in (r["lport"], r["rport"]) else "c"
            assert (r["cc_rule"], r["experiment"]) == (f"rule-{opened_under}", f"exp-{opened_under}"), r
            assert r["arm"] in ("cubic", "reno") and r["cc"] == r["arm"], r
        pj = json.loads(sh(str(TCPSCOPE), "policy", "show", "--server", d.url, "--json").stdout)
        assert pj["install"] == 3 and pj["rules"][0]["name"] == "rule-c", pj


def test_asn_lports_and_ipv6_rules_in_the_kernel(net, tmp_path, test_cgroup):
    net.cgroup = test_cgroup
    other = second_client_address(net)
    base = default_cc(net)
    assert base not in ("cubic", "reno"), "the test needs a default other than the rules' algorithms"
    pfx2as = tmp_path / "pfx2as.tsv"
    pfx2as.write_text(f"{other}\t32\t64777\n")
    with policy_daemon(tmp_path, test_cgroup, f"""
asn:
  prefix_file: {pfx2as}
cc_policy:
  rules:
    - name: asn-cubic
      match: {{ asns: [64777] }}
      cc: cubic
    - name: port-reno
      match: {{ lports: [9090] }}
      cc: reno
    - name: v6-cubic
      match: {{ prefixes: ["{net.cli_v6}/128"] }}
      cc: cubic
""") as d:
        for addr, port in ((net.srv_v4, 8080), (net.srv_v4, 9090), (net.srv_v6, 8080)):
            echo_server(net, tmp_path, addr, port)
        flows = [  # (source, server, port): (cc, rule) of the server's socket
            ((other, net.srv_v4, 8080), ("cubic", "asn-cubic")),
            ((net.cli_v4, net.srv_v4, 9090), ("reno", "port-reno")),
            ((other, net.srv_v4, 9090), ("cubic", "asn-cubic")),  # first match wins
            ((net.cli_v6, net.srv_v6, 8080), ("cubic", "v6-cubic")),
            ((net.cli_v4, net.srv_v4, 8080), (base, None)),
        ]
        script = ("import socket,sys\n"
                  "fam=socket.AF_INET6 if ':' in sys.argv[2] else socket.AF_INET\n"
                  "c=socket.socket(fam); c.bind((sys.argv[1], 0)); c.connect((sys.argv[2], int(sys.argv[3])))\n"
                  "c.sendall(b'ping'); assert c.recv(4) == b'ping'; c.close()\n")
        for (src, dst, port), _ in flows:
            net.ns(net.cli, sys.executable, "-c", script, src, dst, str(port))
        recs = d.wait_records(net, 2 * len(flows))
        passive = {(r["raddr"], r["lport"]): r for r in recs if r["dir"] == "passive"}
        assert len(passive) == len(flows), recs
        for (src, _, port), want in flows:
            r = passive[(src, port)]
            assert (r["cc"], r["cc_rule"]) == want, (src, port, r)
        # The clients' sockets: their peers (the servers) match no rule and
        # their local ports are ephemeral.
        active = [r for r in recs if r["dir"] == "active"]
        assert len(active) == len(flows)
        assert all((r["cc"], r["cc_rule"]) == (base, None) for r in active), active
        assert d.metric_value("tcpscope_cc_assignments_total", {"rule": "asn-cubic"}) == 2
        assert d.metric_value("tcpscope_cc_assignments_total", {"rule": "port-reno"}) == 1
        assert d.metric_value("tcpscope_cc_assignments_total", {"rule": "v6-cubic"}) == 1


def test_application_cc_after_the_rule_and_unknown_names(net, tmp_path, test_cgroup):
    """respect: an application that replaces the rule's CC after connect takes
    the assignment back (counted as revoked); a name the kernel does not offer
    fails for the application, changes nothing and is counted as "other"."""
    net.cgroup = test_cgroup
    with policy_daemon(tmp_path, test_cgroup,
                       one_rule("all-cubic", "cc: cubic", settings=["app_override: respect"])) as d:
        echo_server(net, tmp_path, net.srv_v4, 7002)
        changed = HeldClient(net, net.srv_v4, 7002)
        assert changed.cmd("cc reno") == "ok"
        assert changed.cmd("rt") == "ok"
        bogus = HeldClient(net, net.srv_v4, 7002)
        assert bogus.cmd("cc no-such-cc-x") == "err 2"  # ENOENT
        changed.close()
        bogus.close()
        recs = [r for r in d.wait_records(net, 4) if r["dir"] == "active"]
        by_port = {r["lport"]: r for r in recs}
        r = by_port[changed.lport]
        assert (r["cc"], r["cc_rule"], r["app_set_cc"]) == ("reno", None, True), r
        r = by_port[bogus.lport]
        assert (r["cc"], r["cc_rule"], r["app_set_cc"]) == ("cubic", "all-cubic", False), r

        def counted():
            return d.metric_value("tcpscope_cc_assignments_revoked_total", {"rule": "all-cubic"}) == 1 and \
                d.metric_value("tcpscope_app_cc_setsockopt_total", {"cc": "other", "action": "observed"}) == 1
        wait_for(counted, 5, what="revoked assignment and the unknown name counted")
        assert d.metric_value("tcpscope_app_cc_setsockopt_total", {"cc": "reno", "action": "observed"}) == 1
        assert d.metric_value("tcpscope_cc_assignments_total", {"rule": "all-cubic"}) == 4
        assert "no-such-cc" not in d.metrics()


def test_application_cc_the_kernel_refuses_is_counted_as_refused(net, tmp_path, test_cgroup):
    """An unprivileged application naming an algorithm outside
    tcp_allowed_congestion_control gets EPERM from the kernel: counted as
    refused, not as the application's choice, and its flow's record says the
    application set nothing. Root naming the same one is observed."""
    available = open("/proc/sys/net/ipv4/tcp_available_congestion_control").read().split()
    allowed = open("/proc/sys/net/ipv4/tcp_allowed_congestion_control").read().split()
    restricted = [c for c in available if c not in allowed]
    if not restricted:
        pytest.skip(f"every available algorithm is allowed here ({' '.join(available)})")
    cc = restricted[0]
    net.cgroup = test_cgroup
    with policy_daemon(tmp_path, test_cgroup, "") as d:
        echo_server(net, tmp_path, net.srv_v4, 7003)
        user = HeldClient(net, net.srv_v4, 7003, user="nobody")
        assert user.cmd(f"cc {cc}") == "err 1"  # EPERM
        root = HeldClient(net, net.srv_v4, 7003)
        assert root.cmd(f"cc {cc}") == "ok"
        user.close()
        root.close()
        recs = {r["lport"]: r for r in d.wait_records(net, 4) if r["dir"] == "active"}
        assert recs[user.lport]["app_set_cc"] is False, recs[user.lport]
        assert (recs[root.lport]["cc"], recs[root.lport]["app_set_cc"]) == (cc, True), recs[root.lport]
        wait_for(lambda: d.metric_value("tcpscope_app_cc_setsockopt_total", {"cc": cc, "action": "refused"}) == 1,
                 5, what="the refused call to be counted")
        assert d.metric_value("tcpscope_app_cc_setsockopt_total", {"cc": cc, "action": "observed"}) == 1


def test_sysctl_guard_observe_counts_and_logs(net, tmp_path, test_cgroup):
    net.cgroup = test_cgroup
    d = start_daemon(tmp_path, test_cgroup, """
cc_policy:
  sysctl_guard: observe
""")
    try:
        r = net.ns(net.cli, "sysctl", "-w", "net.ipv4.tcp_congestion_control=reno", check=False)
        assert r.returncode == 0, r.stderr
        assert net.ns(net.cli, "cat", "/proc/sys/net/ipv4/tcp_congestion_control").stdout.strip() == "reno"
        wait_for(lambda: d.metric_value("tcpscope_sysctl_writes_total",
                                        {"name": "net.ipv4.tcp_congestion_control", "action": "observed",
                                         "netns": "other"}) == 1,
                 5, what="the observed write to be counted")
        line = wait_for(lambda: next((l for l in d.stderr_text().splitlines() if "sysctl: write" in l), None),
                        5, what="the write in the log")
        netns = os.stat(f"/run/netns/{net.cli}").st_ino
        assert re.search(r'net\.ipv4\.tcp_congestion_control="reno" by pid \d+ \(sysctl\) in network namespace '
                         rf'{netns} \(not the host\'s\): observed', line), line
        assert d.metric_value("tcpscope_sysctl_writes_total", {"netns": "host"}) is None
        assert d.metric_value("tcpscope_sysctl_writes_total", {"action": "denied"}) is None
    finally:
        assert d.stop() == 0, d.stderr_text()


def in_cgroup(cgroup, *cmd):
    """Runs cmd as a process of `cgroup`, where the sysctl hook is attached."""
    return sh("sh", "-c", 'echo $$ > "$0/cgroup.procs" && exec "$@"', str(cgroup), *cmd, check=False)


@pytest.mark.real_kernel
def test_sysctl_guard_denies_the_hosts_writes_only(net, tmp_path, test_cgroup):
    """sysctl_guard: deny refuses writes to the host's CC sysctls; another
    network namespace's are its own (a container runtime's, or any user's
    `unshare -rn`): observed and counted as netns="other", never denied,
    and they cannot pass for the host's in the counters or the log."""
    net.cgroup = test_cgroup
    cc = "/proc/sys/net/ipv4/tcp_congestion_control"
    allowed = "/proc/sys/net/ipv4/tcp_allowed_congestion_control"
    host_cc, host_allowed = open(cc).read().strip(), open(allowed).read().strip()
    with policy_daemon(tmp_path, test_cgroup, """
cc_policy:
  sysctl_guard: deny
""") as d:
        # The host's: the values they already have, so even a guard that
        # failed would change nothing.
        for name, value in (("net.ipv4.tcp_congestion_control", host_cc),
                            ("net.ipv4.tcp_allowed_congestion_control", host_allowed)):
            r = in_cgroup(test_cgroup, "sysctl", "-w", f"{name}={value}")
            assert r.returncode != 0 and "Operation not permitted" in r.stderr, (name, r.returncode, r.stderr)
            wait_for(lambda: d.metric_value("tcpscope_sysctl_writes_total",
                                            {"name": name, "action": "denied", "netns": "host"}) == 1,
                     5, what=f"the denied write to {name} to be counted")
        assert open(cc).read().strip() == host_cc and open(allowed).read().strip() == host_allowed
        # The test's namespace (root in it, as a container runtime would be).
        r = net.ns(net.cli, "sysctl", "-w", "net.ipv4.tcp_congestion_control=reno", check=False)
        assert r.returncode == 0, r.stderr
        # An unprivileged user's own namespace.
        r = in_cgroup(test_cgroup, "setpriv", "--reuid=nobody", "--regid=nogroup", "--clear-groups",
                      "unshare", "-rn", "sh", "-c", f"echo reno > {cc} && cat {cc}")
        assert r.returncode == 0 and r.stdout.strip() == "reno", (r.returncode, r.stdout, r.stderr)
        wait_for(lambda: d.metric_value("tcpscope_sysctl_writes_total",
                                        {"name": "net.ipv4.tcp_congestion_control", "action": "observed",
                                         "netns": "other"}) == 2,
                 5, what="both other-namespace writes to be counted as observed")
        assert d.metric_value("tcpscope_sysctl_writes_total", {"action": "denied", "netns": "other"}) is None
        assert d.metric_value("tcpscope_sysctl_writes_total", {"action": "observed", "netns": "host"}) is None
        assert open(cc).read().strip() == host_cc
        log = wait_for(lambda: [l for l in d.stderr_text().splitlines() if "sysctl: write" in l]
                       if d.stderr_text().count("sysctl: write") >= 4 else None, 5, what="four writes in the log")
        assert sum("in the host's network namespace: denied (sysctl_guard: deny)" in l for l in log) == 2, log
        assert sum("(not the host's): observed" in l for l in log) == 2, log
        policy = json.loads(sh(str(TCPSCOPE), "policy", "show", "--server", d.url, "--json").stdout)
        assert policy["sysctl_writes"]["net.ipv4.tcp_congestion_control"] == {
            "observed": 0, "denied": 1, "observed_other_netns": 2}, policy["sysctl_writes"]


def test_sigkill_leaves_connections_working_and_nothing_attached(net, tmp_path, test_cgroup):
    net.cgroup = test_cgroup
    d = start_daemon(tmp_path, test_cgroup, one_rule("all-cubic", "cc: cubic"))
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
    base = default_cc(net)
    assert base != "cubic", "the test needs a default other than the rule's algorithm"
    p = subprocess.Popen(net._wrap(net.cli, [sys.executable, "-c", client]), stdin=subprocess.PIPE,
                         stdout=subprocess.PIPE, text=True)
    net.procs.append(p)
    assert p.stdout.readline().strip() == "before"
    # The rule was in force: the open connection runs cubic.
    assert set(ss_congestion(net, net.srv).values()) == {"cubic"}, ss_congestion(net, net.srv)
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
    # A new connection works and, the policy gone, runs the system default
    # at both ends (in the kernel's own view).
    held = HeldClient(net, net.srv_v4, 7000)
    try:
        for ns in (net.srv, net.cli):
            seen = wait_for(lambda: ss_congestion(net, ns), 5, what="the new connection in ss")
            assert list(seen.values()) == [base], (ns, seen)
    finally:
        held.close()
