#!/usr/bin/env python3
"""Request/response traffic with known sizes, and the ground truth tests compare
tcpscope's records against: bytes each side really moved, the kernel's own
tcp_info at the end of each connection, and a client clock started before
connect(): `clock_us` stops when the client has read the last byte; with
`client --stamp-arrival`, `arrival_clock_us` stops at the receive timestamp
the kernel hands over with that last read (SO_TIMESTAMPNS), which a client
the scheduler woke late does not stretch. On the tests' veth pairs that is
the last segment's arrival, 25-80 us before the flow record's end; behind the
lab's delay line it is not (one 2 MB download's was 55 ms early). It is
opt-in, for the tests that compare clocks: receive timestamps on any socket
switch the kernel's timestamping on for every packet on the host.

Runs inside a test network namespace (ip netns exec NS python3 traffic.py ...).
Protocol: the client sends an 8-byte header (request size, response size),
then the request; the server reads it all, sends the response, waits for the
client's FIN, and closes. Every connection prints one JSON line.

Idle before close (the trailing idle time a flow's FCT must exclude):
`client --idle-before-close MS` waits MS after its last byte before its FIN;
`serve --idle-before-close MS` closes first, MS after the client acknowledged
its last byte, and `client --peer-closes-first` then reads to the server's FIN
before sending its own.
"""
import argparse
import array
import fcntl
import json
import os
import socket
import struct
import sys
import termios
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests/: testlib, also when run as a script
from testlib import add_peer_options, add_server_options  # noqa: E402

TCP_INFO = 11
TCPI_OPT_ECN = 8  # tcpi_options (linux/tcp.h): ECN was negotiated
SO_TIMESTAMPNS = getattr(socket, "SO_TIMESTAMPNS", 35)  # asm-generic/socket.h; Python may lack the name
CHUNK = 65536


def tcp_info(sock):
    """The fields of struct tcp_info the tests compare against (linux/tcp.h offsets)."""
    raw = sock.getsockopt(socket.IPPROTO_TCP, TCP_INFO, 256)
    total_retrans = struct.unpack_from("I", raw, 100)[0]
    bytes_acked, bytes_received = struct.unpack_from("QQ", raw, 120)
    min_rtt = struct.unpack_from("I", raw, 148)[0] if len(raw) >= 152 else 0
    delivered_ce = struct.unpack_from("I", raw, 196)[0] if len(raw) >= 200 else 0
    return {"total_retrans": total_retrans, "bytes_acked": bytes_acked,
            "bytes_received": bytes_received, "min_rtt_us": min_rtt,
            "rtt_us": struct.unpack_from("I", raw, 68)[0], "snd_cwnd": snd_cwnd(raw),
            "ecn": bool(raw[5] & TCPI_OPT_ECN), "delivered_ce": delivered_ce}


def snd_cwnd(raw_or_sock):
    """tcpi_snd_cwnd (segments)."""
    raw = raw_or_sock
    if not isinstance(raw, bytes):
        raw = raw_or_sock.getsockopt(socket.IPPROTO_TCP, TCP_INFO, 104)
    return struct.unpack_from("I", raw, 80)[0]


def wait_all_acked(sock, timeout=30):
    """Until the peer has acknowledged every byte sent (TIOCOUTQ: bytes not yet acked)."""
    deadline = time.monotonic() + timeout
    buf = array.array("i", [0])
    while time.monotonic() < deadline:
        fcntl.ioctl(sock.fileno(), termios.TIOCOUTQ, buf, True)
        if buf[0] == 0:
            return
        time.sleep(0.001)
    raise TimeoutError(f"{buf[0]} bytes still unacknowledged after {timeout}s")


def recv_exact(sock, n):
    got = 0
    parts = []
    while got < n:
        b = sock.recv(min(CHUNK, n - got))
        if not b:
            raise ConnectionError(f"peer closed after {got} of {n} bytes")
        parts.append(b)
        got += len(b)
    return b"".join(parts) if len(parts) < 64 else None


def recv_exact_stamped(sock, n):
    """recv_exact on a socket with SO_TIMESTAMPNS on, returning the receive
    timestamp handed over with the last read, in CLOCK_MONOTONIC (None for
    no bytes, or none handed over). TCP puts the timestamp of the last
    segment each recvmsg() read in its control data, in CLOCK_REALTIME."""
    if n == 0:
        return None
    got, stamp = 0, None
    while got < n:
        b, anc, _, _ = sock.recvmsg(min(CHUNK, n - got), socket.CMSG_SPACE(16))
        if not b:
            raise ConnectionError(f"peer closed after {got} of {n} bytes")
        got += len(b)
        for level, kind, data in anc:
            if level == socket.SOL_SOCKET and kind == SO_TIMESTAMPNS and len(data) >= 16:
                sec, nsec = struct.unpack_from("qq", data)
                stamp = sec * 1_000_000_000 + nsec
    return None if stamp is None else stamp - realtime_offset_ns()


def realtime_offset_ns():
    """CLOCK_REALTIME minus CLOCK_MONOTONIC, from the tightest of a few
    bracketed reads."""
    best = None
    for _ in range(5):
        a = time.monotonic_ns()
        r = time.time_ns()
        b = time.monotonic_ns()
        if best is None or b - a < best[0]:
            best = (b - a, r - (a + b) // 2)
    return best[1]


def endpoint(sock, peer=True):
    a = sock.getpeername() if peer else sock.getsockname()
    return a[0], a[1]


def serve(args):
    family = socket.AF_INET6 if ":" in args.bind else socket.AF_INET
    ls = socket.socket(family, socket.SOCK_STREAM)
    ls.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    ls.bind((args.bind, args.port))
    if args.defer_accept:
        ls.setsockopt(socket.IPPROTO_TCP, socket.TCP_DEFER_ACCEPT, args.defer_accept)
    ls.listen(4096)
    out = open(args.out, "a", buffering=1)
    lock = threading.Lock()
    ready = args.ready
    if ready:
        open(ready, "w").close()
    deadline = time.monotonic() + args.timeout

    def handle(conn):
        try:
            conn.settimeout(30)
            req_size, resp_size = struct.unpack("!II", recv_exact(conn, 8))
            recv_exact(conn, req_size)
            if args.reset:
                # Abortive close: SO_LINGER {on, 0} makes close() send a RST.
                conn.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
                info = tcp_info(conn)
                laddr, lport = endpoint(conn, peer=False)
                raddr, rport = endpoint(conn)
                conn.close()
                rec = {"side": "server", "laddr": laddr, "lport": lport, "raddr": raddr,
                       "rport": rport, "received": req_size, "sent": 0, "reset": True, **info}
            else:
                chunk = args.chunk or CHUNK
                payload = b"s" * min(resp_size, chunk)
                left = resp_size
                cwnd_max = 0
                while left > 0:
                    # The cwnd the kernel has as this send call starts: what
                    # a sampler at each send call can have seen at most.
                    cwnd_max = max(cwnd_max, snd_cwnd(conn))
                    n = conn.send(payload[:min(left, len(payload))])
                    left -= n
                if args.idle_before_close:
                    # Close first, after an idle wait from the moment the
                    # client acknowledged our last byte: the transfer's end
                    # and our FIN are at least this far apart.
                    wait_all_acked(conn)
                    time.sleep(args.idle_before_close / 1000)
                    conn.shutdown(socket.SHUT_WR)
                # Wait for the client's FIN so every byte is acknowledged and
                # tcp_info is final before we read it.
                while conn.recv(CHUNK):
                    pass
                info = tcp_info(conn)
                laddr, lport = endpoint(conn, peer=False)
                raddr, rport = endpoint(conn)
                conn.close()
                rec = {"side": "server", "laddr": laddr, "lport": lport, "raddr": raddr,
                       "rport": rport, "received": req_size, "sent": resp_size,
                       "sampled_max_cwnd": cwnd_max, **info}
            with lock:
                out.write(json.dumps(rec) + "\n")
        except Exception as e:  # a test asserts on the records, not on this
            with lock:
                out.write(json.dumps({"side": "server", "error": repr(e)}) + "\n")

    served = 0
    ls.settimeout(0.5)
    threads = []
    while served < args.count and time.monotonic() < deadline:
        try:
            conn, _ = ls.accept()
        except socket.timeout:
            continue
        t = threading.Thread(target=handle, args=(conn,), daemon=True)
        t.start()
        threads.append(t)
        served += 1
        threads = [x for x in threads if x.is_alive()]
    for t in threads:
        t.join(timeout=30)
    ls.close()


def one_client(args, family, idx):
    req, resp = args.req, args.resp
    s = socket.socket(family, socket.SOCK_STREAM)
    s.settimeout(60)
    if args.stamp_arrival:
        s.setsockopt(socket.SOL_SOCKET, SO_TIMESTAMPNS, 1)
    if args.source or args.source_port:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        s.bind((args.source or "", args.source_port + idx if args.source_port else 0))
    t0 = time.monotonic_ns()             # before connect(): what tcpscope measures
    try:
        s.connect((args.addr, args.port))
    except OSError as e:
        s.close()
        return {"side": "client", "connect_error": e.errno, "error": os.strerror(e.errno or 0)}
    if args.request_after:
        # The request leaves this long after the handshake's last ACK rather
        # than right behind it.
        time.sleep(args.request_after / 1000)
    s.sendall(struct.pack("!II", req, resp) + b"c" * req)
    t_sent = time.monotonic_ns()         # after the request: the proxy-log trap
    try:
        if args.stamp_arrival:
            arrived = recv_exact_stamped(s, resp)
        else:
            recv_exact(s, resp)
    except (ConnectionError, OSError) as e:
        laddr, lport = endpoint(s, peer=False)
        s.close()
        return {"side": "client", "lport": lport, "laddr": laddr, "reset": True, "error": repr(e)}
    t1 = time.monotonic_ns()             # last byte read
    laddr, lport = endpoint(s, peer=False)
    raddr, rport = endpoint(s)
    try:
        if args.peer_closes_first:
            # The server closes first (after its own idle wait): read to its
            # FIN before sending ours.
            while s.recv(CHUNK):
                pass
        elif args.idle_before_close:
            # Idle after the last byte before closing: the peer sees our FIN
            # this long after the transfer ended.
            time.sleep(args.idle_before_close / 1000)
        # Half-close and wait for the server's FIN before reading tcp_info: that
        # FIN acknowledges ours, so no retransmit of our FIN can follow the snapshot.
        s.shutdown(socket.SHUT_WR)
        while s.recv(CHUNK):
            pass
    except OSError:
        pass
    info = tcp_info(s)
    s.close()
    return {"side": "client", "laddr": laddr, "lport": lport, "raddr": raddr, "rport": rport,
            "sent": req, "received": resp, "clock_us": (t1 - t0) // 1000,
            **({"arrival_clock_us": None if arrived is None else (arrived - t0) // 1000}
               if args.stamp_arrival else {}),
            "clock_after_send_us": (t1 - t_sent) // 1000, **info}


def client(args):
    family = socket.AF_INET6 if ":" in args.addr else socket.AF_INET
    out = open(args.out, "a", buffering=1)
    lock = threading.Lock()
    counter = {"next": 0}
    deadline = time.monotonic() + args.timeout

    def worker():
        while time.monotonic() < deadline:
            with lock:
                if counter["next"] >= args.count:
                    return
                idx = counter["next"]
                counter["next"] += 1
            rec = one_client(args, family, idx)
            with lock:
                out.write(json.dumps(rec) + "\n")

    threads = [threading.Thread(target=worker) for _ in range(args.parallel)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()


def main():
    p = argparse.ArgumentParser()
    sub = p.add_subparsers(dest="mode", required=True)
    s = sub.add_parser("serve")
    add_server_options(s)
    s.add_argument("--reset", action="store_true")
    s.add_argument("--idle-before-close", type=float, default=0, metavar="MS",
                   help="after the response, wait MS then close first (shutdown) before the client does")
    s.add_argument("--chunk", type=int, default=0, help="bytes per send() call (default 64 KiB)")
    s.add_argument("--defer-accept", type=int, default=0, metavar="S",
                   help="TCP_DEFER_ACCEPT (nginx's `listen ... deferred`): the handshake's last ACK is "
                        "dropped, and the client's first data segment completes the handshake")
    c = sub.add_parser("client")
    add_peer_options(c)
    c.add_argument("--count", type=int, default=1)
    c.add_argument("--req", type=int, default=100)
    c.add_argument("--resp", type=int, default=1000)
    c.add_argument("--parallel", type=int, default=1)
    c.add_argument("--request-after", type=float, default=0, metavar="MS",
                   help="wait this long after connect() before sending the request")
    c.add_argument("--source", help="local address to connect from")
    c.add_argument("--source-port", type=int, default=0,
                   help="local port of the first connection, the next ones' one more each (0: the kernel's)")
    c.add_argument("--out", required=True)
    c.add_argument("--timeout", type=float, default=120)
    c.add_argument("--idle-before-close", type=float, default=0, metavar="MS",
                   help="wait MS after the last byte read before closing")
    c.add_argument("--stamp-arrival", action="store_true",
                   help="report arrival_clock_us, from the last byte's receive timestamp")
    c.add_argument("--peer-closes-first", action="store_true",
                   help="read to the server's FIN before closing (use with serve --idle-before-close)")
    args = p.parse_args()
    (serve if args.mode == "serve" else client)(args)


if __name__ == "__main__":
    sys.exit(main())
