"""Kernels older than this machine's lack some tracepoints (Debian 12's stock
6.1 has neither sk_data_ready nor tcp_sendmsg_locked). The daemon must still
start there, say what the records lose, and keep every record exact where it
can. This machine has every hook, so the test hides some from the loader
(TCPSCOPE_TEST_MISSING_TRACEPOINTS, read only while loading) and checks the
fallbacks against the same ground truth as the full set."""
import os
import re

import pytest

from conftest import Daemon

HIDDEN = ("sk_data_ready", "tcp_sendmsg_locked", "tcp_cong_state_set")


@pytest.fixture
def old_kernel_daemon(tmp_path):
    env = dict(os.environ, TCPSCOPE_TEST_MISSING_TRACEPOINTS=",".join(HIDDEN))
    d = Daemon(tmp_path, env=env)
    try:
        yield d
    finally:
        d.stop()


def test_starts_and_names_what_it_lacks(old_kernel_daemon):
    err = old_kernel_daemon.stderr_text()
    m = re.search(r"running: \d+ BPF programs attached \(([^)]*)\)", err)
    assert m, err
    attached = set(m.group(1).split(","))
    assert {"on_state_change", "on_state_change_nested", "on_segment", "on_segment_twin"} <= attached
    assert not attached & {"on_data_ready", "on_data_ready_twin", "on_sendmsg", "on_cong_state"}
    warnings = [l for l in err.splitlines() if "warning: this kernel has no tracepoint" in l]
    assert len(warnings) == len(HIDDEN), err
    for tp in HIDDEN:
        assert any(tp in w for w in warnings), (tp, warnings)


def test_receive_side_end_from_the_segments(old_kernel_daemon, net, tmp_path):
    """An upload (the server only receives): without sk_data_ready the
    passive record's end is the last payload segment's arrival as tcp_probe
    sees it, so its FCT agrees with the sender's (whose end is the ACK of its
    last byte); and the client's idle time before its FIN is not counted."""
    d = old_kernel_daemon
    # 20 Mbit/s on the client's egress: 1 MB takes about 400 ms.
    net.ns(net.cli, "tc", "qdisc", "add", "dev", net.veth_cli, "root", "tbf",
           "rate", "20mbit", "burst", "32kb", "latency", "400ms")
    n = 4
    # The client's idle timer starts when sendall() returns, which is while
    # the tbf still drains the last ~400 ms of the upload: 1 s of idle leaves
    # at least ~0.5 s between the last payload and the FIN.
    idle_ms = 1000
    server, _ = net.serve(tmp_path, net.srv_v4, n)
    clients = []
    for _ in range(n):
        clients += net.client(tmp_path, net.srv_v4, req=1_000_000, resp=0, idle_before_close_ms=idle_ms)
    server.wait(timeout=60)
    assert all("error" not in c for c in clients), clients
    recs = d.wait_records(net, 2 * n)
    assert len(recs) == 2 * n
    for c in clients:
        key = (net.cli_v4, c["lport"], net.srv_v4, c["rport"])
        act = [r for r in recs if (r["laddr"], r["lport"], r["raddr"], r["rport"]) == key]
        pas = [r for r in recs if (r["raddr"], r["rport"], r["laddr"], r["lport"]) == key]
        assert len(act) == 1 and len(pas) == 1, (act, pas)
        a, p = act[0], pas[0]
        assert p["bytes_received"] == 1_000_008 and a["bytes_acked"] == 1_000_008  # + the 8-byte header
        assert a["fct_us"] > 300_000, a
        # The passive record starts about when the SYN arrived and ends at the
        # last arrival; the active one ends when the last byte's ACK came back.
        tol = max(2000, 0.02 * a["fct_us"])
        assert abs(p["fct_us"] - a["fct_us"]) <= tol, (p["fct_us"], a["fct_us"])
        # The client idled before its FIN: neither end counts that time.
        assert p["duration_us"] - p["fct_us"] >= 0.4 * idle_ms * 1000, p
        assert a["duration_us"] - a["fct_us"] >= 0.4 * idle_ms * 1000, a
        # The upload is the server's one receive transfer, ending where the
        # record's receive side does, and the client's one send transfer
        # (from the ACKs: no tcp_sendmsg_locked), ending with the ACK of its
        # last byte, where the active record's data ends.
        xfers = [t for t in d.all_transfers() if (t["raddr"], t["rport"], t["laddr"], t["lport"]) == key]
        assert [t["direction"] for t in xfers] == ["recv"], xfers
        assert xfers[0]["bytes"] == 1_000_008, xfers
        assert abs(xfers[0]["end_ns"] - (p["start_ns"] + p["fct_us"] * 1000)) <= 2_000, (xfers, p)
        sent = [t for t in d.all_transfers() if (t["laddr"], t["lport"], t["raddr"], t["rport"]) == key]
        assert [(t["direction"], t["bytes"]) for t in sent] == [("send", 1_000_008)], sent
        assert abs(sent[0]["end_ns"] - (a["start_ns"] + a["fct_us"] * 1000)) <= 2_000, (sent, a)
