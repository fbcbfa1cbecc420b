"""Transfers (the flow log's "kind": "transfer" lines) against ground truth:
kept-alive HTTP/1.1, HTTP/2 and uploads on real paths, each exchange timed
and counted by its own client, server and nginx's log.

One lab for the module, the server namespace and the lossy path's client on
BBR (a 1% loss path keeps its rate with BBR; CUBIC would take tens of
seconds per segment there):
  r20    20 ms RTT, 100 Mbit/s, a deep buffer (1000 frames: no tail drops)
  lossy  50 ms RTT, 50 Mbit/s, 1% loss each way, 2100 frames (10 BDP, as in
         test_lab_truth: every drop is the emulated loss)
Servers: our own nginx (HTTP/1.1 keep-alive on one port, h2c on the next,
a JSON access log with $bytes_sent, $body_bytes_sent and $request_length per
request), and xfer_peer.py's Python upstream (a delay before answering,
uploads). The client is xfer_peer.py: ONE connection, raw socket, exact byte
counts, per request three instants (before the request's first byte is
handed to the kernel, the response's first byte read, its last byte read).

What is comparable, and the tolerances
--------------------------------------
Server send transfer vs the client's clock (client: request sent -> the
last byte's arrival, by the kernel's receive timestamp, SO_TIMESTAMPNS, so a
loaded machine waking the client late does not count). The server's
wait_us + xfer_us runs from the request's arrival to the ACK of the
response's last byte. The two differ by the request's one-way trip (client
only) and the final ACK's one-way trip (server only): the same delay line,
both directions idle then, so they cancel. What is left: the client's send
clock is read before sendall() and again after (a preemption in between is
measured per request, the handoff; TOL_SEND = 3 ms beyond it, measured
< 0.4 ms) and the receiver's delayed ACK of the last segment (makes the
server longer). Hence
    -TOL_SEND - handoff <= (wait_us + xfer_us) - client clock <= 1 ms + ack delay
with the ack delay measured (server send end_ns - last byte's kernel stamp
- one-way delay, one host clock) and bounded by the kernel's minimum
delayed-ACK timeout, 40 ms (TCP_ATO_MIN) + 2 ms (measured: 0.03-0.13 ms;
nginx's last segment is short, so the ACK goes out when the client reads).
Client receive transfer: start_ns and end_ns are the kernel's stamps of
the first and last byte's segments within 1 ms (TOL_STAMP: stamp at the
device, sk_data_ready after TCP's processing; measured within 0.1 ms), so
wait_us + xfer_us is the client's clock less at most TOL_SEND.
Throughput: the server's bytes / xfer_us covers first byte handed to TCP ->
last byte's ACK = the client's first-to-last arrival + the first byte's
one-way trip + the ACK's one-way trip (one RTT of an idle path: it is idle
before every response and after the last byte) + the ack delay. So the
client's comparable measure is response bytes (header + body, exact)
/ (last arrival - first arrival + the path's RTT); within 5% (measured
within 0.25%).
After a repair (retrans_segs > 0 in the response) the last byte may have
been stamped on its first arrival, before a retransmission filled the hole
ahead of it and delivered it; then only the client's read time bounds the
delivery: tcpscope's end must lie between the stamp and the read (+1 ms),
and the read may come up to TOL_READ = 10 ms after the delivery (it copies
all the hole held back; measured 2.9 ms).
Lossy path: a lost request (the client's clock includes its repair, the
server's arrival is the repaired copy) or a lost final ACK (the server
learns of the last byte a probe timeout + RTT later) moves the two clocks
apart by a retransmission timeout. Such exchanges are recognised by the
client's own count of its retransmissions during the exchange (tcp_info;
on kernels before 6.16 a request lost whole is retransmitted before any
ACK starts its send transfer, which then counts none, docs/records.md) /
retrans_segs of the server's response transfer, and checked against a
bound of one RTO (<= 1 s here) instead; all others keep the tight bounds. Bytes stay exact: retransmissions are not
payload twice.
HTTP/2: the frames are the payload. h2load counts every byte it read from
the connection ("traffic: N total"): the server's send transfers on that
connection sum to it exactly; the overlapping streams' transfer carries
their DATA ("data") plus framing, bounded below by 9 bytes per 16 kB DATA
frame (the largest h2load allows) and a HEADERS frame per stream, above by
9 bytes per 4 kB frame, 250 header bytes per stream and 200 bytes of
connection frames (SETTINGS, WINDOW_UPDATE, acks).
wait_us under an injected delay (the upstream sleeps D = 200 ms after
reading the request): the server's wait_us >= the sleep it really took and
< D + 25 ms (the Python upstream parses the request and writes the response
around the sleep; scheduling on a loaded 2-core machine: measured a few ms);
the client's receive wait_us = D + RTT + the same slack, never less.
"""
import json
import random
import statistics
import subprocess
import sys
import time

import pytest

from labfixtures import (HERE, KERNEL_PROFILES, TCPSCOPE, delayline_checked, kernel_profiles,  # noqa: F401
                         lab_suite, lab_test, labmod, need_root_and_build, need_tool, send_handoff_us,
                         start_daemon, stop_process, wait_for, wait_record)
from traffic_mix import Nginx, nginx_conf, object_name

Lab, Path, Direction = labmod.Lab, labmod.Path, labmod.Direction
ASN0 = 4_100_000_000 + random.randrange(0, 90_000_000)
PEER = HERE / "xfer_peer.py"

H1_PORT, H2_PORT, UP_PORT = 8480, 8481, 8490
SMALL, BIG = 50_000, 5_000_000
SEGMENTS = [2_000_000, 3_000_000, 4_000_000, 2_500_000]
H2_SIZES = [200_000, 500_000, 1_000_000]
DELAY_MS = 200
UPLOADS = [1_000_000, 2_000_000, 3_000_000]
XFER_LOG_FIELDS = ('"remote_addr":"$remote_addr"', '"remote_port":$remote_port', '"server_port":$server_port',
                   '"connection":$connection', '"connection_requests":$connection_requests',
                   '"bytes_sent":$bytes_sent', '"body_bytes_sent":$body_bytes_sent',
                   '"request_length":$request_length', '"status":$status', '"uri":"$uri"',
                   '"protocol":"$server_protocol"', '"msec":$msec')

TOL_SEND_US = 3_000        # the client's send clock vs the request's handoff, beyond the measured sendall()
TOL_READ_US = 10_000      # a read after a repair copies all the hole held back (<= 1 MB): 2.9 ms seen
TOL_STAMP_US = 1_000       # a kernel receive timestamp vs tcpscope's sk_data_ready time of that segment
ATO_MIN_US = 40_000        # the kernel's minimum delayed-ACK timeout
THROUGHPUT_TOL = 0.05
RTO_BOUND_US = 1_000_000   # one retransmission timeout on the lossy path (RTO >= 200 ms + 4 rttvar)
DELAY_SLACK_US = 25_000


@pytest.fixture(scope="module")
def lab(tmp_path_factory, delayline_checked):
    need_root_and_build()
    paths = [
        Path.symmetric("r20", delay_ms=10, rate_mbit=100, queue=1000, peer_class="xfer-r20",
                       asn=ASN0 + 1),
        Path.symmetric("lossy", delay_ms=25, rate_mbit=50, loss=0.01, queue=2100,
                       peer_class="xfer-lossy", asn=ASN0 + 2),
    ]
    with Lab(paths, ipv6=False, workdir=tmp_path_factory.mktemp("lab")) as lab:
        lab.set_cc("bbr")
        lab.set_cc("bbr", ns=lab.ep("lossy").client_ns)   # the uploads' sender there
        yield lab


@pytest.fixture(scope="module", params=KERNEL_PROFILES, ids=lambda p: p or "this-kernel")
def daemon(lab, tmp_path_factory, request):
    """The daemon as on this kernel and as on each kernel profile's: every
    test of the module runs against each (before 6.16 send transfers come
    from the ACKs, before 6.3 arrivals from the segments: tcp_probe)."""
    d = start_daemon(lab, tmp_path_factory.mktemp("xfer"), kernel_profile=request.param)
    yield d
    assert d.stop() == 0, d.stderr_text()


def check_delimiters(daemon, transfers):
    """Each transfer names how it was delimited: a send transfer by the
    write, or by its first segment's departure where the kernel has no
    tcp_sendmsg_locked; a receive transfer by its first arrival."""
    hidden = kernel_profiles.missing(daemon.kernel_profile) if daemon.kernel_profile else []
    send = "departure" if "tcp_sendmsg_locked" in hidden else "write"
    assert [t["delimited_by"] for t in transfers] == \
        [send if t["direction"] == "send" else "arrival" for t in transfers], transfers


class KeepAliveNginx(Nginx):
    """traffic_mix's nginx, but kept alive: HTTP/1.1 on `port`, h2c (prior
    knowledge) on port + 1, and a per-request log of what it sent. One
    worker, so that $connection names one connection."""

    def _conf(self):
        eps = list(self.lab.endpoints.values())
        listens = ([f"{ep.server_v4}:{self.port}" for ep in eps] +
                   [f"{ep.server_v4}:{self.port + 1} http2" for ep in eps])
        return nginx_conf(self.dir, listens, XFER_LOG_FIELDS, keepalive=True, workers=1)


@pytest.fixture(scope="module")
def nginx(lab, tmp_path_factory):
    need_tool("nginx")
    n = KeepAliveNginx(lab, tmp_path_factory.mktemp("nginx"), port=H1_PORT,
                       objects={"small": [SMALL], "big": [BIG], "segments": SEGMENTS,
                                "h2": H2_SIZES})
    try:
        n.start()
        yield n
    finally:
        n.stop()


@pytest.fixture(scope="module")
def upstream(lab, tmp_path_factory):
    """xfer_peer.py serve in the server namespace, on every server address."""
    tmp = tmp_path_factory.mktemp("upstream")
    log, ready = tmp / "upstream.jsonl", tmp / "ready"
    p = lab.popen(lab.server_ns, sys.executable, PEER, "serve", "--bind", "0.0.0.0",
                  "--port", UP_PORT, "--log", log, "--ready", ready, "--timeout", 600)
    try:
        wait_for(lambda: ready.exists() or p.poll() is not None, 10, what="upstream start")
        assert p.poll() is None, p.stderr.read()
        yield log
    finally:
        stop_process(p, timeout=5)


def read_jsonl(path):
    return [json.loads(l) for l in path.read_text().splitlines() if l] if path.exists() else []


def run_client(lab, ep, port, plan, timeout=90):
    r = lab.ns(ep.client_ns, sys.executable, PEER, "client", "--addr", ep.server_v4,
               "--port", port, "--plan", json.dumps(plan), "--timeout", timeout,
               timeout=timeout + 30)
    return json.loads(r.stdout)


def flow_and_transfers(daemon, lab, ns, tup, what):
    """The flow record of the connection `tup` (laddr, lport, raddr, rport)
    in namespace `ns` and its transfers in seq order. Waits for the flow
    record (written at close, after its transfers). Transfers are matched by
    namespace, 4-tuple and time (within the flow's life), not by
    flow_start_ns: that join key is checked on its own
    (test_transfers_carry_their_flow_records_start), so a wrong key does not
    hide what the other tests measure."""
    rec = wait_record(daemon, lab, ns, lambda r: (r["laddr"], r["lport"], r["raddr"],
                                                  r["rport"]) == tup, what=what)
    time.sleep(0.3)   # anything handed over with the close is in by now
    ino = lab.netns_ids[ns]
    xs = [t for t in daemon.all_transfers()
          if t["netns"] == ino and (t["laddr"], t["lport"], t["raddr"], t["rport"]) == tup
          and rec["start_ns"] - 1_000_000 <= t["start_ns"] <= rec["end_ns"] + 1_000_000]
    xs.sort(key=lambda t: t["seq"])
    off = sorted({t["flow_start_ns"] - rec["start_ns"] for t in xs} - {0})
    if off:
        print(f"\n{what}: flow_start_ns of {sum(t['flow_start_ns'] != rec['start_ns'] for t in xs)} "
              f"of {len(xs)} transfers differs from the flow record's start_ns by {off} ns", end="")
    return rec, xs


def both_sides(daemon, lab, ep, c):
    """Server-side and client-side (flow, transfers) of xfer_peer client run `c`."""
    srv = flow_and_transfers(daemon, lab, lab.server_ns,
                             (c["raddr"], c["rport"], c["laddr"], c["lport"]),
                             f"server record of client port {c['lport']}")
    cli = flow_and_transfers(daemon, lab, ep.client_ns,
                             (c["laddr"], c["lport"], c["raddr"], c["rport"]),
                             f"client record of port {c['lport']}")
    return srv, cli


def by_dir(xs, direction):
    return [t for t in xs if t["direction"] == direction]


def fmt_x(t):
    return (f"seq {t['seq']} {t['direction']} {t['bytes']} B xfer {t['xfer_us']} us "
            f"wait {t['wait_us']} us retrans {t['retrans_segs']}")


def check_seq(xs):
    seqs = [t["seq"] for t in xs]
    assert seqs == sorted(seqs) and len(set(seqs)) == len(seqs), seqs
    starts = [t["start_ns"] for t in xs]
    assert starts == sorted(starts), "transfers out of order"


def check_responses(lab, ep, c, srv_x, cli_x, label, throughput_min_bytes=1_000_000):
    """One server send transfer and one client receive transfer per response
    of client run `c` (in order); bytes exact; clocks within the module's
    tolerances (see the docstring). Returns rows of measured numbers."""
    reqs = c["requests"]
    sends, recvs = by_dir(srv_x, "send"), by_dir(cli_x, "recv")
    cli_sends = by_dir(cli_x, "send")
    assert len(sends) == len(reqs), \
        f"{label}: {len(sends)} server send transfers for {len(reqs)} responses: " \
        f"{[fmt_x(t) for t in srv_x]}"
    assert len(recvs) == len(reqs), \
        f"{label}: {len(recvs)} client receive transfers for {len(reqs)} responses: " \
        f"{[fmt_x(t) for t in cli_x]}"
    assert len(cli_sends) == len(reqs), [fmt_x(t) for t in cli_x]
    check_seq(sends)
    check_seq(recvs)
    rtt_us = ep.path.rtt_ms * 1000
    one_way_us = ep.path.up.delay_ms * 1000
    rows = []
    for i, (q, s, r, cs) in enumerate(zip(reqs, sends, recvs, cli_sends)):
        resp = q["header_bytes"] + q["body_bytes"]
        assert s["bytes"] == resp, (label, i, s["bytes"], resp)
        assert r["bytes"] == resp, (label, i, r["bytes"], resp)
        assert cs["bytes"] == q["req_bytes"], (label, i, cs["bytes"], q["req_bytes"])
        # The request's send (realtime, read just before sendall) to the
        # last byte's arrival: the kernel's receive timestamp of its segment.
        # After a repair the last byte may have arrived (and been stamped)
        # before a retransmission filled the hole ahead of it; it was
        # delivered then, which only the client's read time bounds.
        repaired_tail = s["retrans_segs"] > 0
        end_truth = q["last"][1] if repaired_tail else q["last"][2]
        clock = (end_truth - q["send"][1]) / 1000
        srv_sum = s["wait_us"] + s["xfer_us"]
        diff = srv_sum - clock
        ack_delay = (s["end_ns"] - end_truth) / 1000 - one_way_us
        # The client's receive transfer: its first and last arrival are the
        # kernel's receive timestamps of the first and last byte.
        first_off = (r["start_ns"] - q["first"][2]) / 1000
        last_off = (r["end_ns"] - end_truth) / 1000
        cli_short = clock - (r["wait_us"] + r["xfer_us"])
        # The client's send transfer never counts more than its kernel did.
        assert cs["retrans_segs"] <= q["retrans"], (label, i, cs["retrans_segs"], q["retrans"])
        repaired = s["retrans_segs"] > 0 or q["retrans"] > 0
        row = {"i": i, "bytes": resp, "clock_us": round(clock), "srv_wait_us": s["wait_us"],
               "srv_xfer_us": s["xfer_us"], "srv_minus_clock_us": round(diff),
               "ack_delay_us": round(ack_delay), "cli_recv_first_off_us": round(first_off),
               "cli_recv_last_off_us": round(last_off), "cli_recv_short_us": round(cli_short),
               "srv_retrans": s["retrans_segs"], "req_retrans": cs["retrans_segs"],
               "client_retrans": q["retrans"],
               "handoff_us": round(send_handoff_us(q))}
        if resp >= throughput_min_bytes:
            first_last = (end_truth - q["first"][2]) / 1000
            truth = resp / ((first_last + rtt_us) / 1e6)
            got = s["bytes"] / (s["xfer_us"] / 1e6)
            row.update(tput_client_Mbit=round(8 * truth / 1e6, 2),
                       tput_tcpscope_Mbit=round(8 * got / 1e6, 2),
                       tput_err=round(got / truth - 1, 4))
        rows.append(row)
        print(f"\n{label} #{i}: " + ", ".join(f"{k} {v}" for k, v in row.items() if k != "i"),
              end="")
        # The client's receive transfer starts and ends at the arrivals the
        # kernel stamped (stamp at the device, data_ready after TCP's
        # processing: microseconds), even with loss (a repair is in both);
        # its wait + xfer is the client's clock less the send's scheduling.
        assert abs(first_off) <= TOL_STAMP_US, (label, i, row)
        if repaired_tail:   # between the last byte's stamp and its read
            assert (q["last"][2] - r["end_ns"]) / 1000 <= TOL_STAMP_US and last_off <= TOL_STAMP_US, \
                (label, i, row)
        else:
            assert abs(last_off) <= TOL_STAMP_US, (label, i, row)
        assert -TOL_STAMP_US <= cli_short <= TOL_SEND_US + row["handoff_us"] + (TOL_READ_US if repaired_tail else 0), \
            (label, i, row)
        if repaired:
            assert abs(diff) <= RTO_BOUND_US, (label, i, row)
            continue
        assert -200 <= ack_delay <= ATO_MIN_US + 2000, (label, i, row)
        assert -TOL_SEND_US - row["handoff_us"] <= diff <= TOL_STAMP_US + max(0, ack_delay), (label, i, row)
        if "tput_err" in row:
            # The ack delay lengthens the server's interval: it is part of it,
            # not an error; 5% beyond that.
            err = s["bytes"] / ((s["xfer_us"] - max(0, ack_delay)) / 1e6) / truth - 1
            assert abs(row["tput_err"]) <= THROUGHPUT_TOL or \
                (ack_delay > 1000 and abs(err) <= THROUGHPUT_TOL), (label, i, row, err)
    return rows


def nginx_entries(nginx, c):
    log = [e for e in nginx.access_log() if e["remote_port"] == c["lport"]
           and e["remote_addr"] == c["laddr"]]
    log.sort(key=lambda e: e["connection_requests"])
    return log


def check_nginx_log(nginx, c, srv_x, label):
    log = nginx_entries(nginx, c)
    reqs = c["requests"]
    assert len(log) == len(reqs), (label, log)
    assert len({e["connection"] for e in log}) == 1, "more than one connection"
    sends = by_dir(srv_x, "send")
    for e, q, s in zip(log, reqs, sends):
        assert e["status"] == 200 and q["status"] == 200
        assert e["body_bytes_sent"] == q["body_bytes"], (label, e, q)
        assert e["bytes_sent"] == q["header_bytes"] + q["body_bytes"], (label, e, q)
        assert s["bytes"] == e["bytes_sent"], (label, e, fmt_x(s))


def pauses(rng, n, lo, hi):
    return [round(rng.uniform(lo, hi), 3) for _ in range(n)]


@pytest.mark.parametrize("path", ["r20", "lossy"])
def test_http1_keepalive_one_send_transfer_per_response(lab, daemon, nginx, path):
    """a. One connection, 4 x 50 kB, 5 MB, 2 x 50 kB, 0.3-0.6 s apart: one
    server send transfer per response, bytes = nginx's $bytes_sent, clocks
    and the 5 MB throughput vs the client's; one client receive transfer per
    response, bytes exact."""
    ep = lab.ep(path)
    rng = random.Random(f"a-{path}")
    sizes = [SMALL] * 4 + [BIG] + [SMALL] * 2
    plan = [{"path": "/" + object_name(s), "pause": p}
            for s, p in zip(sizes, [0] + pauses(rng, len(sizes) - 1, 0.3, 0.6))]
    c = run_client(lab, ep, H1_PORT, plan)
    (srec, srv_x), (crec, cli_x) = both_sides(daemon, lab, ep, c)
    print(f"\n{path} HTTP/1.1: server transfers {[fmt_x(t) for t in srv_x]}", end="")
    check_nginx_log(nginx, c, srv_x, path)
    check_responses(lab, ep, c, srv_x, cli_x, f"{path} HTTP/1.1")
    # The requests are the server's receive transfers, one each, bytes exact
    # (nginx's $request_length is the same count).
    recvs = by_dir(srv_x, "recv")
    assert [t["bytes"] for t in recvs] == [q["req_bytes"] for q in c["requests"]]
    assert [e["request_length"] for e in nginx_entries(nginx, c)] == \
        [q["req_bytes"] for q in c["requests"]]
    assert len(srv_x) == 2 * len(sizes)
    check_delimiters(daemon, srv_x + cli_x)


@pytest.mark.parametrize("path", ["r20", "lossy"])
def test_video_segments_one_transfer_each(lab, daemon, nginx, path):
    """d. A video-like client: one connection, 2-4 MB segments 0.5-1 s apart:
    one send transfer per segment, bytes exact, throughput within 5% of the
    client's."""
    ep = lab.ep(path)
    rng = random.Random(f"d-{path}")
    plan = [{"path": "/" + object_name(s), "pause": p}
            for s, p in zip(SEGMENTS, [0] + pauses(rng, len(SEGMENTS) - 1, 0.5, 1.0))]
    c = run_client(lab, ep, H1_PORT, plan)
    (srec, srv_x), (crec, cli_x) = both_sides(daemon, lab, ep, c)
    check_nginx_log(nginx, c, srv_x, path)
    rows = check_responses(lab, ep, c, srv_x, cli_x, f"{path} video")
    assert all("tput_err" in r for r in rows)


def h2load(lab, ep, n, m, uris, timeout=60):
    r = lab.ns(ep.client_ns, "h2load", "-n", n, "-c", 1, "-m", m,
               *[f"http://{ep.server_v4}:{H2_PORT}{u}" for u in uris], timeout=timeout)
    out = r.stdout
    import re
    t = re.search(r"traffic: .*?\((\d+)\) total, .*?\((\d+)\) headers .*?\((\d+)\) data", out)
    ok = re.search(r"requests: (\d+) total, (\d+) started, (\d+) done, (\d+) succeeded", out)
    assert t and ok, out
    assert int(ok.group(4)) == n, out
    return {"total": int(t.group(1)), "headers": int(t.group(2)), "data": int(t.group(3))}


def h2_connection(daemon, lab, ep, since_ns):
    """The one h2c connection from this path made since `since_ns`: server side."""
    def find():
        got = [r for r in daemon.all_records()
               if r["netns"] == lab.netns_ids[lab.server_ns] and r["lport"] == H2_PORT
               and r["raddr"] == ep.client_v4[0] and r["start_ns"] >= since_ns]
        return got or None
    got = wait_for(find, 20, what="the h2 connection's server record")
    assert len(got) == 1, got
    rec = got[0]
    time.sleep(0.3)
    xs = sorted((t for t in daemon.all_transfers()
                 if t["netns"] == rec["netns"] and t["lport"] == H2_PORT
                 and t["rport"] == rec["rport"]
                 and rec["start_ns"] - 1_000_000 <= t["start_ns"] <= rec["end_ns"] + 1_000_000),
                key=lambda t: t["seq"])
    return rec, xs


def h2_bounds(sizes):
    """Framing around `sizes` bodies: below, 16 kB DATA frames (9 bytes each)
    and a minimal HEADERS frame (9 + 1) per stream; above, 4 kB frames plus
    two extra per stream, 250 bytes of HEADERS per stream and 200 bytes of
    connection frames."""
    lo = sum(s + 9 * -(-s // 16384) + 10 for s in sizes)
    hi = sum(s + 9 * (-(-s // 4096) + 2) + 250 for s in sizes) + 200
    return lo, hi


def test_http2_overlapping_streams_are_one_transfer(lab, daemon, nginx):
    """b. h2load, one connection, 6 streams at once (200 kB, 500 kB, 1 MB
    twice): their responses overlap, so the server sends them as one run: ONE
    send transfer, bytes = DATA + framing within h2_bounds, and every byte
    h2load read from the connection is in the connection's send transfers."""
    need_tool("h2load")
    ep = lab.ep("r20")
    since = time.time_ns()
    uris = ["/" + object_name(s) for s in H2_SIZES]
    h = h2load(lab, ep, 6, 6, uris)
    rec, xs = h2_connection(daemon, lab, ep, since)
    sends = by_dir(xs, "send")
    sizes = H2_SIZES * 2
    lo, hi = h2_bounds(sizes)
    print(f"\nh2 concurrent: h2load {h}; sum of bodies {sum(sizes)}; bounds {lo}..{hi}; "
          f"server transfers {[fmt_x(t) for t in xs]}", end="")
    assert h["data"] == sum(sizes)
    assert sum(t["bytes"] for t in sends) == h["total"]
    big = [t for t in sends if t["bytes"] >= sum(sizes)]
    assert len(big) == 1, [fmt_x(t) for t in sends]
    assert lo <= big[0]["bytes"] <= hi, (lo, big[0]["bytes"], hi)
    # Anything else the server sent on it (none expected) is control frames.
    assert all(t["bytes"] <= 100 for t in sends if t is not big[0]), [fmt_x(t) for t in sends]


def test_http2_sequential_streams_are_one_transfer_each(lab, daemon, nginx):
    """b. h2load with one stream at a time (-m 1): each request is sent when
    the previous response has arrived, so the responses do not overlap: one
    send transfer each, bytes within h2_bounds of its body, summing to what
    h2load read."""
    need_tool("h2load")
    ep = lab.ep("r20")
    since = time.time_ns()
    n = 4
    size = H2_SIZES[0]
    h = h2load(lab, ep, n, 1, ["/" + object_name(size)])
    rec, xs = h2_connection(daemon, lab, ep, since)
    sends = by_dir(xs, "send")
    lo, hi = h2_bounds([size])
    print(f"\nh2 sequential: h2load {h}; bounds per response {lo}..{hi} (+200 the first); "
          f"server transfers {[fmt_x(t) for t in xs]}", end="")
    assert sum(t["bytes"] for t in sends) == h["total"]
    resp = [t for t in sends if t["bytes"] >= size]
    assert len(resp) == n, [fmt_x(t) for t in sends]
    for k, t in enumerate(resp):
        assert lo <= t["bytes"] <= hi + (200 if k == 0 else 0), (k, lo, t["bytes"], hi)
    assert all(t["bytes"] <= 100 for t in sends if t not in resp), [fmt_x(t) for t in sends]


def test_wait_covers_an_injected_server_delay(lab, daemon, upstream):
    """c. The upstream sleeps 200 ms before each answer (3 requests, kept
    alive, 0.4 s apart): the server's send wait_us covers the sleep it really
    took and exceeds it by < 25 ms; the client's receive wait_us is the
    delay + RTT (+ the same slack, never less)."""
    ep = lab.ep("r20")
    rtt_us = ep.path.rtt_ms * 1000
    plan = [{"path": f"/delay?ms={DELAY_MS}&bytes=20000", "pause": 0.4 if i else 0}
            for i in range(3)]
    c = run_client(lab, ep, UP_PORT, plan)
    (srec, srv_x), (crec, cli_x) = both_sides(daemon, lab, ep, c)
    log = [e for e in read_jsonl(upstream) if e["port"] == c["lport"]]
    sends, recvs = by_dir(srv_x, "send"), by_dir(cli_x, "recv")
    assert len(log) == 3 and len(sends) == 3 and len(recvs) == 3, \
        (log, [fmt_x(t) for t in srv_x], [fmt_x(t) for t in cli_x])
    for e, q, s, r in zip(log, c["requests"], sends, recvs):
        slept = e["slept_ns"] / 1000
        print(f"\ndelay {DELAY_MS} ms: upstream slept {slept:.0f} us; server send wait_us "
              f"{s['wait_us']} (+{s['wait_us'] - slept:.0f} us over the sleep); client recv wait_us "
              f"{r['wait_us']} (delay + RTT + {r['wait_us'] - DELAY_MS * 1000 - rtt_us} us); "
              f"bytes {s['bytes']} / {r['bytes']} (response {q['header_bytes'] + q['body_bytes']})",
              end="")
        assert s["bytes"] == r["bytes"] == q["header_bytes"] + q["body_bytes"]
        assert slept <= s["wait_us"] < DELAY_MS * 1000 + DELAY_SLACK_US, (slept, fmt_x(s))
        assert DELAY_MS * 1000 + rtt_us <= r["wait_us"] < DELAY_MS * 1000 + rtt_us + DELAY_SLACK_US, \
            fmt_x(r)


@pytest.mark.parametrize("path", ["r20", "lossy"])
def test_uploads_one_receive_transfer_each(lab, daemon, upstream, path):
    """e. POSTs of 1, 2 and 3 MB on one kept-alive connection, 0.4 s apart,
    to the upstream (which reads every body byte): one server receive transfer
    per upload, bytes = request header + body exactly as the client sent
    them. The client's clock up to the response's first byte = RTT + the
    server's xfer_us (first to last arrival) + the upstream's reply time
    (-1..+10 ms: reading the last chunk, writing the reply, waking the
    client); on the lossy path (the client on BBR there too) an upload whose
    response or last segment was repaired may take one RTO more."""
    ep = lab.ep(path)
    rtt_us = ep.path.rtt_ms * 1000
    plan = [{"method": "POST", "path": "/upload", "body": b, "pause": 0.4 if i else 0}
            for i, b in enumerate(UPLOADS)]
    c = run_client(lab, ep, UP_PORT, plan)
    (srec, srv_x), (crec, cli_x) = both_sides(daemon, lab, ep, c)
    log = [e for e in read_jsonl(upstream) if e["port"] == c["lport"]]
    recvs = by_dir(srv_x, "recv")
    print(f"\n{path} uploads: server transfers {[fmt_x(t) for t in srv_x]}", end="")
    assert [e["body_read"] for e in log] == UPLOADS
    assert len(recvs) == len(UPLOADS), [fmt_x(t) for t in srv_x]
    check_seq(recvs)
    ups, replies = by_dir(cli_x, "send"), by_dir(srv_x, "send")
    assert len(ups) == len(replies) == len(UPLOADS), ([fmt_x(t) for t in cli_x], [fmt_x(t) for t in srv_x])
    for q, e, r, up, reply in zip(c["requests"], log, recvs, ups, replies):
        clock = (q["first"][2] - q["send"][1]) / 1000
        extra = clock - rtt_us - r["xfer_us"]
        print(f"\n{path} upload {q['req_body_bytes']} B: server recv {r['bytes']} B (sent {q['req_bytes']} = "
              f"{q['req_header_bytes']} header + {q['req_body_bytes']} body), xfer_us {r['xfer_us']}; "
              f"client clock to response {clock:.0f} us = RTT + xfer_us + {extra:.0f} us; "
              f"client send transfer {up['bytes']} B retrans {up['retrans_segs']}, "
              f"reply retrans {reply['retrans_segs']}", end="")
        assert r["bytes"] == q["req_bytes"] == up["bytes"]
        # Ground truth for a repair: each side's own tcp_info (a reply lost
        # whole counts no retransmission in its transfer before 6.16).
        assert up["retrans_segs"] <= q["retrans"] and reply["retrans_segs"] <= e["reply_retrans"], \
            (fmt_x(up), q["retrans"], fmt_x(reply), e["reply_retrans"])
        if q["retrans"] or e["reply_retrans"]:
            assert -1000 <= extra <= RTO_BOUND_US, (clock, fmt_x(r))
        else:
            assert -1000 <= extra <= 10_000, (clock, fmt_x(r))


def test_transfers_carry_their_flow_records_start(lab, daemon, nginx):
    """SPEC: a transfer's flow_start_ns equals its flow record's start_ns
    (the join key between the two kinds of line). One connection held for
    ~11 s (11 small GETs 1.05 s apart): longer than the daemon's 10 s
    refresh of its monotonic-to-realtime offset, so transfers are converted
    before and after a refresh and the flow record after it. Every
    transfer's flow_start_ns must still be the record's start_ns, exactly."""
    ep = lab.ep("r20")
    plan = [{"path": "/" + object_name(SMALL), "pause": 1.05 if i else 0} for i in range(11)]
    c = run_client(lab, ep, H1_PORT, plan)
    for (rec, xs), side in zip(both_sides(daemon, lab, ep, c), ("server", "client")):
        assert len(xs) == 2 * len(plan), (side, [fmt_x(t) for t in xs])
        keys = [(t["seq"], t["flow_start_ns"] - rec["start_ns"]) for t in xs]
        print(f"\n{side}: flow record start_ns {rec['start_ns']}; transfers' flow_start_ns - it, "
              f"by seq: {keys}", end="")
        assert all(t["flow_start_ns"] == rec["start_ns"] for t in xs), \
            f"{side}: (seq, flow_start_ns - flow record's start_ns) {keys}"


def test_compare_gives_a_verdict_on_transfers(lab, daemon, nginx):
    """`compare --flows` on this daemon's flow log decides between the two
    paths per transfer, on each kernel profile: 24 responses of 50 kB on one
    kept-alive connection per path, back to back, complete faster on the
    20 ms path than on the 50 ms one with 1 % loss (one connection per path
    shows no difference per flow: it is one flow)."""
    n = 24
    plan = [{"path": "/" + object_name(SMALL), "pause": 0}] * n
    for name in ("r20", "lossy"):
        ep = lab.ep(name)
        both_sides(daemon, lab, ep, run_client(lab, ep, H1_PORT, plan))   # waits for the records
    r = subprocess.run([str(TCPSCOPE), "compare", "--flows", str(daemon.flow_log), "--a", "peer_class=xfer-r20",
                        "--b", "peer_class=xfer-lossy", "--by", "all", "--metric", "fct", "--unit", "transfer",
                        "--json"], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    groups = {g["size_class"]: g for g in json.loads(r.stdout)["groups"]}
    small = groups.get("lt_100k")
    assert small, groups
    print(f"\n{daemon.kernel_profile or 'this kernel'}: fct per transfer, lt_100k: n {small['n_a']}/{small['n_b']}, "
          f"p50 {small['a']['p50']} / {small['b']['p50']}, verdict {small['verdict']}", end="")
    assert small["n_a"] >= n and small["n_b"] >= n, small
    assert small["verdict"] == "a better", small
