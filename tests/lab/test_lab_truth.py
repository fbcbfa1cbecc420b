"""Every number tcpscope reports, checked against ground truth on emulated
paths with real delay, loss and bandwidth limits (the delay line is tested on
its own in test_lab_delayline.py).

One lab for the module: a 20 ms path, a 50 ms / 50 Mbit/s client path, and a
50 ms / 50 Mbit/s path whose loss each retransmit test sets itself. Each path's
client prefix has its own peer class and a private ASN drawn for this run, so
the daemon's metric series of a path belong to this module alone. Tests use
disjoint paths or ports and do not depend on order."""
import json
import math
import random
import re
import threading
import time

import pytest

from labfixtures import (Traffic, labmod, need_root_and_build, need_tool, start_daemon,
                         wait_for, wait_record)

Lab, Path, Direction = labmod.Lab, labmod.Path, labmod.Direction
ASN0 = 4_200_000_000 + random.randrange(0, 90_000_000)


@pytest.fixture(scope="module")
def lab(tmp_path_factory):
    need_root_and_build()
    paths = [
        Path.symmetric("r20", delay_ms=10, peer_class="lab-r20", asn=ASN0 + 1),
        Path.symmetric("r50", delay_ms=25, rate_mbit=50, queue=210, peer_class="lab-r50",
                       asn=ASN0 + 2),
        # A deep buffer (10 BDP): BBR's startup cannot overflow it, so every
        # drop on this path is the emulated loss.
        Path.symmetric("lossy", delay_ms=25, rate_mbit=50, queue=2100, peer_class="lab-lossy",
                       asn=ASN0 + 3),
    ]
    with Lab(paths, workdir=tmp_path_factory.mktemp("lab")) as lab:
        yield lab


@pytest.fixture(scope="module")
def daemon(lab, tmp_path_factory):
    d = start_daemon(lab, tmp_path_factory.mktemp("truth"))
    yield d
    assert d.stop() == 0, d.stderr_text()


def key(r):
    return (r["laddr"], r["lport"], r["raddr"], r["rport"])


def client_and_server_records(daemon, lab, ep, client):
    """The active record (client namespace) and the passive one (server
    namespace) of the connection a traffic.py client made."""
    a = wait_record(daemon, lab, ep.client_ns,
                    lambda r: key(r) == (client["laddr"], client["lport"], client["raddr"],
                                         client["rport"]),
                    what=f"client record of port {client['lport']}")
    p = wait_record(daemon, lab, lab.server_ns,
                    lambda r: (r["raddr"], r["rport"]) == (client["laddr"], client["lport"]),
                    what=f"server record of client port {client['lport']}")
    return a, p


@pytest.mark.parametrize("path,rtt_ms,family", [("r20", 20, 4), ("r50", 50, 4), ("r50", 50, 6)])
def test_rtt_matches_the_emulated_path(lab, daemon, tmp_path, path, rtt_ms, family):
    """min_rtt within 5% and srtt within 10% of the emulated RTT, on flows too
    small to queue (20 kB: one initial window, no standing queue)."""
    ep = lab.ep(path)
    port = 8100 + 10 * ep.index + family
    server_addr = ep.server_v4 if family == 4 else ep.server_v6
    t = Traffic(lab, tmp_path)
    server, _ = t.serve(server_addr, 5, port)
    clients = [t.client(ep.client_ns, server_addr, port, req=200, resp=20_000)[0]
               for _ in range(5)]
    server.wait(timeout=30)
    rtt_us = rtt_ms * 1000
    for c in clients:
        for r in client_and_server_records(daemon, lab, ep, c):
            assert r["family"] == family
            print(f"\n{path} IPv{family} {r['dir']}: min_rtt {r['min_rtt_us']} us, srtt {r['srtt_us']} us "
                  f"(emulated {rtt_us} us)", end="")
            assert abs(r["min_rtt_us"] - rtt_us) <= 0.05 * rtt_us, (r["dir"], r["min_rtt_us"])
            assert abs(r["srtt_us"] - rtt_us) <= 0.10 * rtt_us, (r["dir"], r["srtt_us"])
            assert r["min_rtt_us"] >= rtt_us  # a delay line never delivers early


@pytest.mark.parametrize("resp", [300_000, 2_000_000])
def test_fct_from_the_first_syn_is_the_client_clock_and_proxy_clock_is_short_by_one_rtt(
        lab, daemon, tmp_path, resp):
    """fct_us agrees with a client clock started before connect() within
    max(1 ms, 2%); a clock started after the request was sent (what a proxy or
    an application log measures) misses the handshake, about one RTT."""
    ep = lab.ep("r50")
    rtt_us = ep.path.rtt_ms * 1000
    port = 8200 + (resp // 100_000)
    t = Traffic(lab, tmp_path)
    server, _ = t.serve(ep.server_v4, 3, port)
    clients = [t.client(ep.client_ns, ep.server_v4, port, req=200, resp=resp)[0]
               for _ in range(3)]
    server.wait(timeout=60)
    for c in clients:
        a, _ = client_and_server_records(daemon, lab, ep, c)
        err = a["fct_us"] - c["clock_us"]
        late = a["fct_us"] - c["clock_after_send_us"]
        print(f"\n{resp} B: fct_us {a['fct_us']}, clock before connect {c['clock_us']} "
              f"(diff {err:+d} us), clock after send {c['clock_after_send_us']} "
              f"(short by {late} us = {late / rtt_us:.2f} RTT)", end="")
        assert abs(err) <= max(1000, 0.02 * c["clock_us"]), (a["fct_us"], c["clock_us"])
        assert 0.9 * rtt_us <= late <= 1.2 * rtt_us, (a["fct_us"], c["clock_after_send_us"])
        assert abs(err) * 5 < late  # tcpscope is not the one that is off


@pytest.mark.parametrize("cc,loss", [("cubic", 0.01), ("bbr", 0.02)])
def test_retransmits_equal_iperf3_and_track_the_loss(lab, daemon, tmp_path, cc, loss):
    """An iperf3 upload through a lossy path: retrans_segs of the data
    connection equals what iperf3 reports for it, and the retransmit rate
    tracks the loss the delay line applied.

    iperf3 reads tcp_info once more when it stops writing, while data it wrote
    may still be queued or in flight; retransmits of that tail happen after its
    reading. So the path loses packets only until 2 s before the end, and the
    tail drains losslessly: both counts then cover the same retransmits."""
    need_tool("iperf3")
    ep = lab.ep("lossy")
    lab.set_path("lossy", "both", loss=0)
    port = 5400 + (0 if cc == "cubic" else 1)
    srv = lab.popen(lab.server_ns, "iperf3", "-s", "-1", "-B", ep.server_v4, "-p", port)
    time.sleep(0.3)
    before = lab.stats("lossy")["up"]
    lab.set_path("lossy", "up", loss=loss)    # client -> server carries the data
    duration = 8
    at_switch = {}

    def end_loss():
        lab.set_path("lossy", "up", loss=0)
        at_switch.update(lab.stats("lossy")["up"])

    stop = threading.Timer(duration - 2, end_loss)
    stop.start()
    try:
        cli = lab.popen(ep.client_ns, "iperf3", "-c", ep.server_v4, "-p", port, "-t", duration,
                        "-C", cc, "-J")
        out, err = cli.communicate(timeout=duration + 30)
    finally:
        stop.cancel()
        lab.set_path("lossy", "up", loss=0)
    srv.wait(timeout=10)
    assert cli.returncode == 0, err
    assert at_switch, "the loss was not switched off before iperf3 ended"
    after = lab.stats("lossy")["up"]
    res = json.loads(out)
    data_port = res["start"]["connected"][0]["local_port"]
    reported = res["end"]["streams"][0]["sender"]["retransmits"]
    rec = wait_record(daemon, lab, ep.client_ns,
                      lambda r: r["lport"] == data_port and r["raddr"] == ep.server_v4,
                      what=f"iperf3 data connection (port {data_port})")
    dropped = after["dropped_loss"] - before["dropped_loss"]
    assert dropped == at_switch["dropped_loss"] - before["dropped_loss"]
    assert after["dropped_queue"] == before["dropped_queue"], "tail drops besides the loss"
    lossy_frames = at_switch["frames_in"] - before["frames_in"]
    print(f"\n{cc}, {loss:.0%} loss for {duration - 2} of {duration} s: iperf3 retransmits "
          f"{reported}, tcpscope retrans_segs {rec['retrans_segs']} of {rec['segs_out']} segments; "
          f"the delay line dropped {dropped} of the {lossy_frames} frames sent while lossy "
          f"({dropped / lossy_frames:.3%}); retransmit rate over that window "
          f"{rec['retrans_segs'] / lossy_frames:.3%}")
    # iperf3 ends its data connections abruptly (the receiver closes with
    # unread data, hence RST): the outcome is iperf3's, not under test here.
    assert rec["cc"] == cc
    assert rec["retrans_segs"] == reported
    # Every dropped data segment is sent again; the control connection's few
    # frames may have taken a drop or two of their own.
    assert dropped - 2 <= rec["retrans_segs"] <= 1.1 * dropped + 3
    # The retransmit rate tracks the loss: binomial bounds on the frames sent
    # while the path was lossy.
    sigma = math.sqrt(lossy_frames * loss * (1 - loss))
    assert abs(rec["retrans_segs"] - loss * lossy_frames) <= 4.5 * sigma + 3, \
        (rec["retrans_segs"], lossy_frames, loss)


def throughput_series(daemon, asn):
    """(sum, count) of tcpscope_flow_throughput_bits_per_second for one ASN."""
    text = daemon.metrics()
    vals = {}
    for suffix in ("sum", "count"):
        total = 0.0
        for m in re.finditer(rf'^tcpscope_flow_throughput_bits_per_second_{suffix}\{{([^}}]*)\}} (\S+)$',
                             text, re.M):
            if f'asn="{asn}"' in m.group(1):
                total += float(m.group(2))
        vals[suffix] = total
    return vals["sum"], vals["count"]


def test_throughput_of_a_30mb_transfer_is_bytes_over_time(lab, daemon, tmp_path):
    """A 30 MB download on the 50 Mbit/s path: the throughput tcpscope exports
    is within 5% of what the client measured (bytes / its own clock)."""
    ep = lab.ep("r50")
    size = 30_000_000
    sum0, n0 = throughput_series(daemon, ep.path.asn)
    t = Traffic(lab, tmp_path)
    server, _ = t.serve(ep.server_v4, 1, 8300)
    c = t.client(ep.client_ns, ep.server_v4, 8300, req=100, resp=size)[0]
    server.wait(timeout=60)
    a, p = client_and_server_records(daemon, lab, ep, c)
    moved = c["sent"] + 8 + c["received"]              # what the client wrote and read
    truth = 8 * moved / (c["clock_us"] / 1e6)
    wait_for(lambda: throughput_series(daemon, ep.path.asn)[1] == n0 + 1, 10,
             what="the transfer in tcpscope_flow_throughput_bits_per_second")
    sum1, _ = throughput_series(daemon, ep.path.asn)
    exported = sum1 - sum0
    per_record = {r["dir"]: 8 * (r["bytes_acked"] + r["bytes_received"]) / (r["fct_us"] / 1e6)
                  for r in (a, p)}
    print(f"\n30 MB over 50 Mbit/s: client {truth / 1e6:.2f} Mbit/s, /metrics (server side) "
          f"{exported / 1e6:.2f}, flow log active {per_record['active'] / 1e6:.2f} / passive "
          f"{per_record['passive'] / 1e6:.2f} Mbit/s")
    assert p["bytes_acked"] + p["bytes_received"] == moved
    assert abs(exported - truth) <= 0.05 * truth
    for d, v in per_record.items():
        assert abs(v - truth) <= 0.05 * truth, (d, v, truth)
    # And it is the path's rate: goodput of a 50 Mbit/s link, less slow start.
    assert 0.80 * 47.8e6 <= truth <= 47.8e6 * 1.01
