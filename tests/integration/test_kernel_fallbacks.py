"""Kernels older than this machine's lack some tracepoints (Debian 12's stock
6.1 has neither sk_data_ready nor tcp_sendmsg_locked). The daemon must still
start there, say what the records lose, and keep every record exact where it
can. This machine has every hook, so the test hides some from the loader
(TCPSCOPE_TEST_MISSING_TRACEPOINTS, read only while loading) and checks the
fallbacks against the same ground truth as the full set. Many hosts also have
no kernel config to read (CONFIG_HZ): the daemon measures the tick there."""
import gzip
import os
import re

import pytest

from conftest import TCPSCOPE, Daemon

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
    assert {"on_state_change", "on_destroy", "on_segment", "on_segment_twin"} <= attached
    assert not attached & {"on_data_ready", "on_sendmsg", "on_cong_state"}
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



@pytest.mark.real_kernel
@pytest.mark.parametrize("fixture", ["daemon", "old_kernel_daemon"])
def test_the_segment_that_completes_the_handshake_is_counted(fixture, request, net, tmp_path):
    """A listener with TCP_DEFER_ACCEPT (nginx's `listen ... deferred`), like
    a lossy path that drops the client's last handshake ACK, has the
    client's first data segment complete the handshake. TCP processes that
    segment in SYN_RECV, where tcp_probe does not show it, and the next
    segments through tcp_rcv_established, where it does. Each upload is the
    server's one receive transfer, with every byte, with every hook and with
    the arrivals from the segments."""
    d = request.getfixturevalue(fixture)
    n = 4
    server, _ = net.serve(tmp_path, net.srv_v4, n, defer_accept_s=5)
    clients = net.client(tmp_path, net.srv_v4, count=n, req=200_000, resp=0)
    server.wait(timeout=60)
    assert all("error" not in c for c in clients), clients
    recs = d.wait_records(net, 2 * n)
    for c in clients:
        key = (net.cli_v4, c["lport"], net.srv_v4, c["rport"])
        pas = [r for r in recs if (r["raddr"], r["rport"], r["laddr"], r["lport"]) == key]
        assert len(pas) == 1 and pas[0]["bytes_received"] == 200_008, pas
        xfers = [t for t in d.all_transfers() if (t["raddr"], t["rport"], t["laddr"], t["lport"]) == key]
        assert [(t["direction"], t["bytes"]) for t in xfers] == [("recv", 200_008)], xfers

# The daemon in a mount namespace of its own where no kernel config can be
# read, as in a container without /boot or on a minimal image: an empty /boot,
# and /proc/config.gz (where the kernel has one) masked with /dev/null, as
# container runtimes mask /proc files. Debian's kernels have no
# /proc/config.gz; the namespace goes with the daemon.
WITHOUT_KERNEL_CONFIG = """#!/bin/sh
exec unshare --mount --propagation private sh -c \\
  'mount -t tmpfs tcpscope-no-config /boot && { [ ! -e /proc/config.gz ] || mount --bind /dev/null /proc/config.gz; } &&
   exec "$0" "$@"' TCPSCOPE "$@"
"""


def config_hz_seen_here():
    """CONFIG_HZ as this test (outside the daemon's namespace) reads it, or None."""
    for path, opener in ((f"/boot/config-{os.uname().release}", open), ("/proc/config.gz", gzip.open)):
        try:
            with opener(path, "rt") as f:
                m = re.search(r"^CONFIG_HZ=(\d+)$", f.read(), re.M)
        except OSError:
            continue
        if m:
            return int(m.group(1))
    return None


@pytest.mark.real_kernel
def test_the_tick_comes_from_the_kernel_config_where_one_is_read(tmp_path):
    expected = config_hz_seen_here()
    if expected is None:
        pytest.skip("no kernel config readable here (the next test covers that)")
    d = Daemon(tmp_path)
    try:
        err = d.stderr_text()
        lines = [l for l in err.splitlines() if l.startswith("tcpscope: kernel: tick ")]
        assert re.fullmatch(rf"tcpscope: kernel: tick {expected} Hz, CONFIG_HZ of "
                            rf"(/boot/config-{re.escape(os.uname().release)}|/proc/config\.gz)", "\n".join(lines)), err
    finally:
        d.stop()


@pytest.mark.real_kernel
def test_starts_without_a_kernel_config_and_measures_the_tick(net, tmp_path):
    """libbpf refuses the whole object when it finds no kernel config for a
    kconfig extern (CONFIG_HZ): the daemon resolves it itself, from the
    jiffies it measures, says so in one line, and the transfers' jiffies-based
    times (busy_us, rwnd_limited_us, sndbuf_limited_us) are time, not 0."""
    wrapper = tmp_path / "tcpscope-without-kernel-config"
    wrapper.write_text(WITHOUT_KERNEL_CONFIG.replace("TCPSCOPE", str(TCPSCOPE)))
    wrapper.chmod(0o755)
    d = Daemon(tmp_path, binary=wrapper)
    try:
        err = d.stderr_text()
        release = re.escape(os.uname().release)
        m = re.search(r"^tcpscope: kernel: tick (\d+) Hz, measured: the jiffies advanced [\d.]+ per second over "
                      rf"200 ms; no kernel config \(/boot/config-{release}: No such file or directory \(errno 2\), "
                      r"/proc/config\.gz: (sets no CONFIG_HZ|No such file or directory \(errno 2\))\)$", err, re.M)
        assert m, err
        expected = config_hz_seen_here()
        if expected is not None:
            assert int(m.group(1)) == expected, (err, expected)
        # 1 MB at 20 Mbit/s, about 400 ms: 100 ticks and more at any HZ.
        net.ns(net.srv, "tc", "qdisc", "add", "dev", net.veth_srv, "root", "tbf",
               "rate", "20mbit", "burst", "32kb", "latency", "400ms")
        server, _ = net.serve(tmp_path, net.srv_v4, 1)
        [c] = net.client(tmp_path, net.srv_v4, req=100, resp=1_000_000)
        server.wait(timeout=60)
        assert "error" not in c, c
        recs = d.wait_records(net, 2)
        assert len(recs) == 2, recs
        key = (net.srv_v4, c["rport"], net.cli_v4, c["lport"])
        sent = [t for t in d.all_transfers()
                if (t["laddr"], t["lport"], t["raddr"], t["rport"]) == key and t["direction"] == "send"]
        assert len(sent) == 1 and sent[0]["bytes"] >= 1_000_000, sent
        t = sent[0]
        # The three states exclude each other, so their sum is the transfer's
        # time, counted in whole ticks at both ends: at most a tick more.
        tick_us = 1e6 / int(m.group(1))
        for part in ("busy_us", "rwnd_limited_us", "sndbuf_limited_us"):
            assert t[part] <= t["xfer_us"], (part, t)
        accrued = t["busy_us"] + t["rwnd_limited_us"] + t["sndbuf_limited_us"]
        assert 0.5 * t["xfer_us"] <= accrued <= t["xfer_us"] + tick_us, t
    finally:
        d.stop()
