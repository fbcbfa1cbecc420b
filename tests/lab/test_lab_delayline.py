"""The delay line itself, measured from the two ends of a path before anything
is measured through it: one-way delay and RTT, jitter without reordering,
loss rate, bottleneck rate, tail drop at a full queue, MTU-sized frames.

Paths are IPv4-only with static neighbour entries, so every frame the delay
line counts is one the test sent: its counters must add up exactly."""
import json
import math
import statistics
import sys
import time

import pytest

from labfixtures import (PROBE, lab_suite, lab_test, labmod, need_root_and_build,  # noqa: F401
                         need_tool, quantile, udp, wait_for)

Lab, Path, Direction = labmod.Lab, labmod.Path, labmod.Direction


@pytest.fixture
def make_lab(tmp_path):
    need_root_and_build()
    labs = []

    def make(*paths, **kw):
        lab = Lab(list(paths), ipv6=False, workdir=tmp_path / f"lab{len(labs)}", **kw)
        labs.append(lab)
        return lab.up()

    yield make
    for lab in labs:
        lab.down()


def test_one_way_delay_and_rtt_are_the_configured_ones(make_lab, tmp_path):
    # Asymmetric on purpose: the two directions are independent. Path "z" has
    # no delay: what a datagram takes over it is the fixed cost of getting
    # through the lab (the sender's stack, two TAPs, the delay line's reader and
    # writer waking up), which the configured delay comes on top of.
    lab = make_lab(Path("p", down=Direction(delay_ms=10), up=Direction(delay_ms=25)),
                   Path("z", down=Direction(delay_ms=0), up=Direction(delay_ms=0)))
    for direction, want_ms in (("down", 10), ("up", 25)):
        base, _ = udp(lab, tmp_path, "z", direction, 500, pps=500)
        got, _ = udp(lab, tmp_path, "p", direction, 500, pps=500)
        for name, r in (("z", base), ("p", got)):
            assert r["seqs"] == list(range(500)), f"{name} {direction}: lost or reordered datagrams"
        fixed_ms = statistics.median(d / 1e6 for d in base["delays_ns"])
        d_ms = [d / 1e6 for d in got["delays_ns"]]
        med = statistics.median(d_ms)
        late = lab.stats("p")[direction]
        print(f"\n{direction}: without delay: median {fixed_ms:.3f} ms; {want_ms} ms configured: "
              f"min {min(d_ms):.3f} median {med:.3f} p99 {quantile(d_ms, 0.99):.3f} ms; the delay "
              f"line wrote frames {late['late_ns_sum'] / late['frames_out'] / 1e3:.0f} µs after "
              f"their due time on average, {late['late_hist']}")
        assert min(d_ms) >= want_ms, f"{direction}: a datagram arrived early: {min(d_ms)} ms"
        assert fixed_ms <= 0.5, f"{direction}: {fixed_ms} ms through a path without delay"
        assert abs(med - fixed_ms - want_ms) <= 0.02 * want_ms, \
            f"{direction}: median {med} ms, of which {fixed_ms} ms without delay"

    # The round trip as TCP sees it: connect() is SYN out .. SYN-ACK in.
    ep = lab.ep("p")
    ready = tmp_path / "listen.ready"
    lab.popen(lab.server_ns, sys.executable, PROBE, "listen", "--bind", ep.server_v4,
              "--port", 7100, "--seconds", 20, "--ready", ready)
    wait_for(ready.exists, 10, what="listener")
    r = lab.ns(ep.client_ns, sys.executable, PROBE, "connect-rtt", "--addr", ep.server_v4,
               "--port", 7100, "--count", 20)
    rtt_ms = [x / 1e6 for x in json.loads(r.stdout)["connect_ns"]]
    print(f"handshake RTT (35 ms configured): min {min(rtt_ms):.3f} median "
          f"{statistics.median(rtt_ms):.3f} max {max(rtt_ms):.3f} ms")
    assert min(rtt_ms) >= 35
    assert abs(statistics.median(rtt_ms) - 35) <= 0.05 * 35


def test_jitter_spreads_delay_without_reordering(make_lab, tmp_path):
    lab = make_lab(Path("j", down=Direction(delay_ms=20, jitter_ms=5)),
                   Path("r", down=Direction(delay_ms=20, jitter_ms=5)))
    lab.control("r", "set a-to-b reorder=1")
    got, _ = udp(lab, tmp_path, "j", "down", 1000, pps=200)
    assert got["seqs"] == list(range(1000)), "jitter reordered frames (reorder was not asked for)"
    d_ms = [d / 1e6 for d in got["delays_ns"]]
    spread = quantile(d_ms, 0.9) - quantile(d_ms, 0.1)
    print(f"\nin order: delay min {min(d_ms):.2f} p10 {quantile(d_ms, 0.1):.2f} p90 "
          f"{quantile(d_ms, 0.9):.2f} max {max(d_ms):.2f} ms")
    # Never early; late only by the receiving process's scheduling (a busy
    # machine can delay a Python receiver by milliseconds, rarely).
    assert min(d_ms) >= 15 and quantile(d_ms, 0.99) <= 25 + 1, (min(d_ms), max(d_ms))
    assert spread >= 3, f"delays hardly vary (p90-p10 {spread:.2f} ms): jitter not applied"

    # With reorder=1 the delay is uniform on [15, 25] ms and frames 5 ms apart overtake.
    got, _ = udp(lab, tmp_path, "r", "down", 1000, pps=200, port=7001)
    assert sorted(got["seqs"]) == list(range(1000))
    overtaken = sum(1 for a, b in zip(got["seqs"], got["seqs"][1:]) if b < a)
    d_ms = [d / 1e6 for d in got["delays_ns"]]
    print(f"reorder=1: {overtaken} overtakes, mean delay {statistics.mean(d_ms):.2f} ms, "
          f"sd {statistics.pstdev(d_ms):.2f} ms (uniform: {10 / math.sqrt(12):.2f})")
    assert overtaken > 0
    assert abs(statistics.mean(d_ms) - 20) < 0.6
    assert 0.8 * 10 / math.sqrt(12) < statistics.pstdev(d_ms) < 1.2 * 10 / math.sqrt(12)


def test_loss_rate_and_exact_accounting(make_lab, tmp_path):
    p, n = 0.02, 20000
    lab = make_lab(Path("l", up=Direction(delay_ms=1, loss=p)))
    got, sent = udp(lab, tmp_path, "l", "up", n, pps=20000)
    stats = lab.stats("l")["up"]
    received = len(got["seqs"])
    assert sent["sent"] == n
    # Every datagram reached the delay line; what it did not drop arrived.
    assert stats["frames_in"] == n, stats
    assert stats["dropped_loss"] == n - received, (stats, received)
    assert stats["dropped_queue"] == stats["dropped_write"] == stats["dropped_overflow"] == 0
    sigma = math.sqrt(n * p * (1 - p))
    print(f"\nloss {p:.1%} configured: dropped {n - received} of {n} "
          f"({(n - received) / n:.3%}; expected {n * p:.0f} +/- {sigma:.0f})")
    assert abs((n - received) - n * p) <= 4.5 * sigma


def test_bottleneck_rate_and_tail_drop(make_lab, tmp_path):
    # A burst into a 10 Mbit/s bottleneck with a 100-frame buffer: the buffer
    # fills, the rest is tail-dropped, and what passes leaves at the rate.
    rate, queue, n = 10, 100, 1000
    lab = make_lab(Path("b", down=Direction(delay_ms=5, rate_mbit=rate, queue=queue)))
    got, sent = udp(lab, tmp_path, "b", "down", n, burst=True, size=1472)  # 1514-byte frames
    stats = lab.stats("b")["down"]
    received = len(got["seqs"])
    assert stats["frames_in"] == n and stats["max_frame_bytes"] == 1514, stats
    assert stats["dropped_queue"] == n - received and stats["dropped_loss"] == 0, stats
    assert stats["max_queue_frames"] == queue
    # While the burst arrives (a few ms) the bottleneck drains a few more frames.
    drained = sent["seconds"] * rate * 1e6 / (1514 * 8)
    print(f"\nburst of {n} frames in {sent['seconds'] * 1000:.1f} ms: {received} passed, "
          f"{stats['dropped_queue']} tail-dropped (buffer {queue}, {drained:.0f} drained meanwhile)")
    assert queue <= received <= queue + drained + 5
    assert got["seqs"] == sorted(got["seqs"])
    gaps = [b - a for a, b in zip(got["arrivals_ns"], got["arrivals_ns"][1:])]
    gap_us = statistics.median(gaps) / 1e3
    want_us = 1514 * 8 / rate
    print(f"frames left the bottleneck every {gap_us:.1f} us (1514 bytes at {rate} Mbit/s: "
          f"{want_us:.1f} us)")
    assert abs(gap_us - want_us) <= 0.03 * want_us


def test_tcp_through_50mbit_path_runs_at_the_rate(make_lab, tmp_path):
    need_tool("iperf3")
    rate = 50
    lab = make_lab(Path.symmetric("t", delay_ms=10, rate_mbit=rate, queue=200))
    ep = lab.ep("t")
    srv = lab.popen(lab.server_ns, "iperf3", "-s", "-1", "-B", ep.server_v4, "-p", 5301)
    time.sleep(0.3)
    # Download (server sends), 6 s, the first 2 s (slow start) left out of the result.
    cli = lab.popen(ep.client_ns, "iperf3", "-c", ep.server_v4, "-p", 5301, "-R", "-t", 6,
                    "-O", 2, "-J")
    time.sleep(4)
    s1 = lab.stats("t")["down"]
    time.sleep(2)
    s2 = lab.stats("t")["down"]
    out, err = cli.communicate(timeout=60)
    srv.wait(timeout=10)
    assert cli.returncode == 0, err
    res = json.loads(out)["end"]["sum_received"]
    wire = (s2["bytes_out"] - s1["bytes_out"]) * 8 / ((s2["last_out_ns"] - s1["last_out_ns"]) / 1e9)
    # Goodput: full segments carry 1448 payload bytes in 1514-byte frames.
    want_goodput = rate * 1e6 * 1448 / 1514
    print(f"\n{rate} Mbit/s bottleneck: frames left at {wire / 1e6:.2f} Mbit/s, "
          f"iperf3 goodput {res['bits_per_second'] / 1e6:.2f} Mbit/s "
          f"(payload share of the rate: {want_goodput / 1e6:.2f}); "
          f"largest frame {s2['max_frame_bytes']} bytes")
    assert abs(wire - rate * 1e6) <= 0.02 * rate * 1e6
    assert abs(res["bits_per_second"] - want_goodput) <= 0.05 * want_goodput
    # No GSO super-frames: pacing is per MTU-sized frame, as on a real link.
    assert s2["max_frame_bytes"] <= 1514


def test_a_shared_uplink_is_one_bottleneck_for_every_path(make_lab, tmp_path):
    """Lab(uplink=...): two paths' downloads at once share the server's uplink
    (their frames together leave it at its rate, each path gets a share),
    while each path keeps its own RTT. CUBIC: behind this deep uplink BBR's
    RTT unfairness left the 10 ms path 9.9 % of it, which says nothing about
    the delay line."""
    need_tool("iperf3")
    rate = 40
    lab = make_lab(Path.symmetric("a", delay_ms=5, rate_mbit=500, queue=2000),
                   Path.symmetric("b", delay_ms=20, rate_mbit=500, queue=2000),
                   uplink=Direction(rate_mbit=rate, queue=1000))
    rtts = {}
    for name in ("a", "b"):
        ep = lab.ep(name)
        srv = lab.popen(lab.server_ns, "python3", "-c",
                        "import socket,sys\ns=socket.socket(); s.bind((sys.argv[1], 5400)); s.listen()\n"
                        "c,_=s.accept(); c.close()", ep.server_v4)
        time.sleep(0.3)
        r = lab.ns(ep.client_ns, "curl", "-s", "-o", "/dev/null", "-w", "%{time_connect}",
                   f"http://{ep.server_v4}:5400/", check=False)
        srv.wait(timeout=10)
        rtts[name] = float(r.stdout) * 1e3
    assert 10 <= rtts["a"] <= 10 * 1.05 + 1 and 40 <= rtts["b"] <= 40 * 1.05 + 1, rtts
    servers, clients = [], []
    for i, name in enumerate(("a", "b")):
        ep = lab.ep(name)
        servers.append(lab.popen(lab.server_ns, "iperf3", "-s", "-1", "-B", ep.server_v4, "-p", 5310 + i))
    time.sleep(0.3)
    for i, name in enumerate(("a", "b")):
        clients.append(lab.popen(lab.ep(name).client_ns, "iperf3", "-c", lab.ep(name).server_v4, "-p", 5310 + i,
                                 "-R", "-t", 8, "-O", 2, "-J", "-C", "cubic"))
    time.sleep(4)
    s1 = lab.stats("uplink")["down"]
    time.sleep(3)
    s2 = lab.stats("uplink")["down"]
    goodput = []
    for cli, srv in zip(clients, servers):
        out, err = cli.communicate(timeout=60)
        srv.wait(timeout=10)
        assert cli.returncode == 0, err
        goodput.append(json.loads(out)["end"]["sum_received"]["bits_per_second"])
    wire = (s2["bytes_out"] - s1["bytes_out"]) * 8 / ((s2["last_out_ns"] - s1["last_out_ns"]) / 1e9)
    payload = rate * 1e6 * 1448 / 1514
    print(f"\nuplink {rate} Mbit/s shared by two paths (10 and 40 ms): frames left at {wire / 1e6:.2f} Mbit/s, "
          f"goodput {goodput[0] / 1e6:.2f} + {goodput[1] / 1e6:.2f} Mbit/s (payload share {payload / 1e6:.2f})")
    assert abs(wire - rate * 1e6) <= 0.02 * rate * 1e6
    assert sum(goodput) <= payload * 1.02
    assert sum(goodput) >= payload * 0.9
    assert min(goodput) >= 0.1 * payload, "both paths get a share of the uplink"
