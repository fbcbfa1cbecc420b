#!/usr/bin/env python3
"""Probes that measure a lab path from its two ends (run with ip netns exec).

  udp-recv  --bind A --port P --count N --out FILE [--ready FILE] [--timeout S]
            receives numbered datagrams; writes one JSON object: per datagram
            (seq, one-way delay ns) in arrival order, and the arrival times
            (when the process read it, CLOCK_MONOTONIC; and when the kernel
            received it, SO_TIMESTAMPNS, CLOCK_REALTIME: free of the receiving
            process's scheduling, for spacing measurements; kernel_delays_ns
            are the one-way delays by those stamps, moved to CLOCK_MONOTONIC
            by the clocks' offset at the receiver's start)
  udp-send  --addr A --port P --count N [--size B] [--pps R] [--burst]
            numbered datagrams stamped with CLOCK_MONOTONIC at sending
  listen    --bind A --port P --seconds S [--ready FILE]
            a listening socket (a TCP handshake completes without accept())
  connect-rtt --addr A --port P --count N
            times N TCP handshakes (connect() = SYN out .. SYN-ACK in), prints JSON

CLOCK_MONOTONIC is one clock for every network namespace of the host, so a
sender's stamp and a receiver's clock give the true one-way delay.
"""
import argparse
import json
import socket
import struct
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests/: testlib, also when run as a script
from testlib import add_peer_options, add_server_options  # noqa: E402

HEADER = struct.Struct("!IQ")  # seq, send time (CLOCK_MONOTONIC ns)
SO_TIMESTAMPNS = getattr(socket, "SO_TIMESTAMPNS", 35)   # = SCM_TIMESTAMPNS
TIMESPEC = struct.Struct("@qq")


def family_of(addr):
    return socket.AF_INET6 if ":" in addr else socket.AF_INET


def udp_recv(a):
    s = socket.socket(family_of(a.bind), socket.SOCK_DGRAM)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 8 << 20)
    s.setsockopt(socket.SOL_SOCKET, SO_TIMESTAMPNS, 1)
    s.bind((a.bind, a.port))
    s.settimeout(0.2)
    if a.ready:
        open(a.ready, "w").close()
    seqs, delays, arrivals, kernel, kernel_delays = [], [], [], [], []
    rt_offset = time.clock_gettime_ns(time.CLOCK_REALTIME) - time.monotonic_ns()
    deadline = time.monotonic() + a.timeout
    quiet_until = None
    while len(seqs) < a.count and time.monotonic() < deadline:
        try:
            data, anc, _, _ = s.recvmsg(65536, socket.CMSG_SPACE(TIMESPEC.size))
        except socket.timeout:
            # The sender is done once nothing came for `quiet` seconds after the first datagram.
            if quiet_until is not None and time.monotonic() > quiet_until:
                break
            continue
        now = time.monotonic_ns()
        seq, sent = HEADER.unpack_from(data)
        seqs.append(seq)
        delays.append(now - sent)
        arrivals.append(now)
        kts = None
        for level, kind, cdata in anc:
            if level == socket.SOL_SOCKET and kind == SO_TIMESTAMPNS:
                sec, nsec = TIMESPEC.unpack_from(cdata)
                kts = sec * 1_000_000_000 + nsec
        kernel.append(kts)
        kernel_delays.append(None if kts is None else kts - rt_offset - sent)
        quiet_until = time.monotonic() + a.quiet
    with open(a.out, "w") as f:
        json.dump({"seqs": seqs, "delays_ns": delays, "arrivals_ns": arrivals,
                   "kernel_arrivals_ns": kernel, "kernel_delays_ns": kernel_delays}, f)


def udp_send(a):
    s = socket.socket(family_of(a.addr), socket.SOCK_DGRAM)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 8 << 20)
    s.connect((a.addr, a.port))
    pad = b"p" * max(0, a.size - HEADER.size)
    interval = 0 if a.burst else 1e9 / a.pps
    t0 = time.monotonic_ns()
    sent = refused = 0
    for seq in range(a.count):
        if interval:
            due = t0 + int(seq * interval)
            while True:
                now = time.monotonic_ns()
                if now >= due:
                    break
                if due - now > 200_000:
                    time.sleep((due - now - 100_000) / 1e9)
        while True:
            try:
                s.send(HEADER.pack(seq, time.monotonic_ns()) + pad)
                sent += 1
                break
            except BlockingIOError:
                time.sleep(0.0001)
            except ConnectionRefusedError:
                # An ICMP error for an earlier datagram, reported on this
                # send (which did not go out): send it again. A datagram the
                # receiver missed still fails the receiver's check. (CI saw
                # one at seq 18 in a run whose receiver was bound.)
                refused += 1
            except OSError as e:  # ENOBUFS: the local queue was full; say so
                print(json.dumps({"error": str(e), "seq": seq}), file=sys.stderr)
                raise
    print(json.dumps({"sent": sent, "refused": refused, "seconds": (time.monotonic_ns() - t0) / 1e9}))


def listen(a):
    s = socket.socket(family_of(a.bind), socket.SOCK_STREAM)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.bind((a.bind, a.port))
    s.listen(4096)
    s.settimeout(0.2)
    if a.ready:
        open(a.ready, "w").close()
    deadline = time.monotonic() + a.seconds
    while time.monotonic() < deadline:
        try:
            c, _ = s.accept()
            c.close()
        except socket.timeout:
            pass


def connect_rtt(a):
    out = []
    for _ in range(a.count):
        s = socket.socket(family_of(a.addr), socket.SOCK_STREAM)
        s.settimeout(10)
        t0 = time.monotonic_ns()
        s.connect((a.addr, a.port))
        out.append(time.monotonic_ns() - t0)
        s.close()
        time.sleep(a.gap)
    print(json.dumps({"connect_ns": out}))


def main():
    p = argparse.ArgumentParser()
    sub = p.add_subparsers(dest="mode", required=True)
    r = sub.add_parser("udp-recv")
    add_server_options(r, timeout=60)
    r.add_argument("--quiet", type=float, default=1.0)
    s = sub.add_parser("udp-send")
    add_peer_options(s)
    s.add_argument("--count", type=int, required=True)
    s.add_argument("--size", type=int, default=100)
    s.add_argument("--pps", type=float, default=1000)
    s.add_argument("--burst", action="store_true", help="as fast as the socket takes them")
    l = sub.add_parser("listen")
    l.add_argument("--bind", required=True)
    l.add_argument("--port", type=int, required=True)
    l.add_argument("--seconds", type=float, default=30)
    l.add_argument("--ready")
    c = sub.add_parser("connect-rtt")
    add_peer_options(c)
    c.add_argument("--count", type=int, default=10)
    c.add_argument("--gap", type=float, default=0.02)
    a = p.parse_args()
    {"udp-recv": udp_recv, "udp-send": udp_send, "listen": listen,
     "connect-rtt": connect_rtt}[a.mode](a)


if __name__ == "__main__":
    main()
