"""Every TCP connection becomes exactly one record per socket, and the record's
numbers agree with ground truth: bytes the test moved, the kernel's tcp_info
for that socket, a client clock started before connect()."""
import collections
import socket
import subprocess
import sys
import time

import pytest

from conftest import TRAFFIC, read_jsonl, wait_for


def by_tuple(records):
    """(laddr, lport, raddr, rport) -> records; duplicates stay visible."""
    idx = collections.defaultdict(list)
    for r in records:
        idx[(r["laddr"], r["lport"], r["raddr"], r["rport"])].append(r)
    return idx


@pytest.mark.parametrize("family", [4, 6])
def test_exactly_one_record_per_connection_both_directions(daemon, net, tmp_path, family):
    n = 300
    cli_addr, srv_addr = (net.cli_v4, net.srv_v4) if family == 4 else (net.cli_v6, net.srv_v6)
    server, server_out = net.serve(tmp_path, srv_addr, n)
    clients = net.client(tmp_path, srv_addr, count=n, req=200, resp=3000, parallel=8)
    server.wait(timeout=60)
    assert all("error" not in c for c in clients), [c for c in clients if "error" in c][:3]
    servers = read_jsonl(server_out)
    assert len(clients) == n and len(servers) == n

    ids = net.netns_ids
    recs = daemon.wait_records(net, 2 * n)
    assert len(recs) == 2 * n, f"expected {2 * n} records, got {len(recs)}"
    active = [r for r in recs if r["netns"] == ids["cli"]]
    passive = [r for r in recs if r["netns"] == ids["srv"]]
    assert len(active) == n and len(passive) == n
    assert all(r["dir"] == "active" for r in active)
    assert all(r["dir"] == "passive" for r in passive)
    assert all(r["family"] == family and r["outcome"] == "ok" for r in recs)

    # One record per socket: every client socket and every accepted socket,
    # none missing, none twice.
    act, pas = by_tuple(active), by_tuple(passive)
    for c in clients:
        key = (cli_addr, c["lport"], srv_addr, c["rport"])
        assert len(act.get(key, [])) == 1, f"client socket {key}: {act.get(key)}"
    for s in servers:
        key = (srv_addr, s["lport"], cli_addr, s["rport"])
        assert len(pas.get(key, [])) == 1, f"server socket {key}: {pas.get(key)}"

    # The owner of the socket: the client process for active opens, the
    # accepting server process for passive ones (not whatever ran the softirq).
    assert all(r["comm"].startswith("python") and r["pid"] > 0 for r in recs)
    assert all(r["cc"] for r in recs)


def test_bytes_match_what_was_moved(daemon, net, tmp_path):
    sizes = [(0, 0), (1, 1), (100, 70000), (250000, 10), (1_000_000, 3_000_000)]
    server, server_out = net.serve(tmp_path, net.srv_v4, len(sizes))
    clients = []
    for req, resp in sizes:
        clients += net.client(tmp_path, net.srv_v4, req=req, resp=resp)
    server.wait(timeout=60)
    ids = net.netns_ids
    recs = by_tuple(daemon.wait_records(net, 2 * len(sizes)))
    servers = {(s["raddr"], s["rport"]): s for s in read_jsonl(server_out)}
    for c in clients:
        # what the client really wrote and read: header (8 bytes) + request / response
        a = recs[(net.cli_v4, c["lport"], net.srv_v4, c["rport"])][0]
        assert a["bytes_acked"] == c["sent"] + 8
        assert a["bytes_received"] == c["received"]
        s = servers[(net.cli_v4, c["lport"])]
        p = recs[(net.srv_v4, s["lport"], net.cli_v4, s["rport"])][0]
        assert p["bytes_received"] == s["received"] + 8
        assert p["bytes_acked"] == s["sent"]


def test_retransmits_equal_tcp_info(daemon, net, tmp_path):
    # A tiny tbf queue on the server's egress drops bursts: real retransmits.
    net.ns(net.srv, "tc", "qdisc", "add", "dev", net.veth_srv, "root", "tbf",
           "rate", "20mbit", "burst", "4kb", "limit", "6kb")
    n = 6
    server, server_out = net.serve(tmp_path, net.srv_v4, n)
    clients = net.client(tmp_path, net.srv_v4, count=n, req=100, resp=2_000_000, parallel=3)
    server.wait(timeout=120)
    recs = by_tuple(daemon.wait_records(net, 2 * n))
    servers = read_jsonl(server_out)
    total = 0
    for s in servers:
        p = recs[(net.srv_v4, s["lport"], net.cli_v4, s["rport"])][0]
        assert p["retrans_segs"] == s["total_retrans"], (p, s)
        total += p["retrans_segs"]
    for c in clients:
        a = recs[(net.cli_v4, c["lport"], net.srv_v4, c["rport"])][0]
        assert a["retrans_segs"] == c["total_retrans"]
    assert total > 0, "the shaped path should have forced retransmits"


@pytest.mark.parametrize("resp", [300_000, 2_000_000])
def test_fct_matches_client_clock_from_before_connect(daemon, net, tmp_path, resp):
    # 20 Mbit/s on the server's egress: the transfer takes 120-800 ms.
    net.ns(net.srv, "tc", "qdisc", "add", "dev", net.veth_srv, "root", "tbf",
           "rate", "20mbit", "burst", "32kb", "latency", "400ms")
    n = 5
    server, _ = net.serve(tmp_path, net.srv_v4, n)
    clients = []
    for _ in range(n):
        clients += net.client(tmp_path, net.srv_v4, req=200, resp=resp, realtime=True)
    server.wait(timeout=60)
    recs = by_tuple(daemon.wait_records(net, 2 * n))
    for c in clients:
        a = recs[(net.cli_v4, c["lport"], net.srv_v4, c["rport"])][0]
        tol = max(1000, 0.02 * c["clock_us"])
        assert abs(a["fct_us"] - c["clock_us"]) <= tol, (a["fct_us"], c["clock_us"])
        assert a["fct_us"] <= a["duration_us"]
        assert c["clock_us"] > 100_000


def test_refused_connection(daemon, net, tmp_path):
    recs_before = len(daemon.records(net))
    out = net.client(tmp_path, net.srv_v4, port=9)  # nothing listens: RST
    assert out[0]["connect_error"] == 111
    recs = daemon.wait_records(net, 1, side="cli")
    assert len(recs) == 1 and recs_before == 0
    r = recs[0]
    assert r["outcome"] == "refused" and r["dir"] == "active" and r["rport"] == 9
    assert r["bytes_acked"] == 0 and r["bytes_received"] == 0


def test_syn_timeout(daemon, net, tmp_path):
    # Drop SYNs in the server namespace; one SYN retry makes the kernel give up in ~3 s.
    net.ns(net.srv, "nft", "add", "table", "inet", "tsdrop")
    net.ns(net.srv, "nft", "add", "chain", "inet", "tsdrop", "in",
           "{ type filter hook input priority 0; policy accept; }")
    net.ns(net.srv, "nft", "add", "rule", "inet", "tsdrop", "in", "tcp", "dport", "8081", "drop")
    net.ns(net.cli, "sysctl", "-qw", "net.ipv4.tcp_syn_retries=1")
    out = net.client(tmp_path, net.srv_v4, port=8081)
    assert out[0]["connect_error"] == 110
    r = daemon.wait_records(net, 1, side="cli")[0]
    assert r["outcome"] == "timeout" and r["dir"] == "active"
    assert r["duration_us"] >= 2_500_000
    assert r["retrans_segs"] >= 1


def test_reset_connection(daemon, net, tmp_path):
    server, server_out = net.serve(tmp_path, net.srv_v6, 1, reset=True)
    out = net.client(tmp_path, net.srv_v6, req=10, resp=100)
    server.wait(timeout=30)
    assert out[0].get("reset"), out
    recs = daemon.wait_records(net, 2)
    assert len(recs) == 2
    assert {r["dir"]: r["outcome"] for r in recs} == {"active": "reset", "passive": "reset"}


def test_burst_loses_no_records(daemon, net, tmp_path):
    """Thousands of connections per second: every one arrives, none is lost."""
    lost_before = daemon.metric_value("tcpscope_records_lost_total") or 0
    n = 6000
    server, _ = net.serve(tmp_path, net.srv_v4, n)
    start = time.monotonic()
    clients = net.client(tmp_path, net.srv_v4, count=n, req=10, resp=10, parallel=16)
    elapsed = time.monotonic() - start
    server.wait(timeout=120)
    assert sum(1 for c in clients if "error" not in c) == n
    recs = daemon.wait_records(net, 2 * n, timeout=60)
    assert len(recs) == 2 * n
    lost = daemon.metric_value("tcpscope_records_lost_total")
    assert lost is not None and lost - lost_before == 0
    print(f"\n{n} connections in {elapsed:.1f}s ({n / elapsed:.0f}/s, {2 * n} records), 0 lost")


def test_start_without_privilege_is_one_clear_line(tmp_path):
    """Not root: exit non-zero with one line that says what is missing."""
    import shutil
    if shutil.which("setpriv") is None:
        pytest.skip("setpriv (util-linux) not installed")
    from conftest import TCPSCOPE, free_port
    r = subprocess.run(["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups",
                        "--inh-caps=-all", "--bounding-set=-all",
                        str(TCPSCOPE), "run", "--listen", f"127.0.0.1:{free_port()}"],
                       capture_output=True, text=True, timeout=30)
    assert r.returncode != 0
    lines = [l for l in r.stderr.splitlines() if l.strip()]
    assert len(lines) == 1, r.stderr
    assert "not permitted" in lines[0] and "CAP_BPF" in lines[0], lines[0]
