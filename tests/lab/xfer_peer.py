#!/usr/bin/env python3
"""Both ends of kept-alive HTTP/1.1 exchanges with their own clocks, for
test_lab_transfers.py (ground truth for tcpscope's transfer records).

client: ONE TCP connection, a plan of requests sent one after the other
(GET, or POST with a body), a pause before each but the first. Raw sockets,
so every byte is counted exactly: for each request the bytes it sent
(request line + headers + body), the response's header and body bytes, and
three instants as [CLOCK_MONOTONIC, CLOCK_REALTIME] (the daemon's records
use CLOCK_REALTIME, so they can be set side by side):
  send   just before the request's first byte is handed to the kernel
  first  when recv() returned the response's first byte, + the kernel's
         receive timestamp of that segment (SO_TIMESTAMPNS, realtime)
  last   the same for the response's last body byte
The kernel timestamps are the arrivals themselves: a loaded machine that
wakes this process late does not move them. And `retrans`, the segments the
client's kernel retransmitted from the send to the response's last byte
(tcp_info's total_retrans): whether the request was repaired.
Prints one JSON object: the connection's 4-tuple and the requests.

    xfer_peer.py client --addr A --port P --plan '[{"path": "/x", "pause": 0.4},
                                                   {"method": "POST", "path": "/upload", "body": 1000000}]'

serve: an HTTP/1.1 keep-alive upstream (http.server, one thread per
connection). GET /delay?ms=M&bytes=N sleeps M ms after reading the request,
then writes the whole response in one sendall(); POST /upload reads the body
(Content-Length) and answers with a short JSON. Every request is logged (JSON
lines, --log) with the sleep it really took and the body bytes it read; an
upload's entry, written once its reply is acknowledged, with the segments
the server retransmitted for that reply (`reply_retrans`).
"""
import argparse
import json
import os
import socket
import struct
import sys
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import parse_qs, urlparse


SO_TIMESTAMPNS = getattr(socket, "SO_TIMESTAMPNS", 35)   # = SCM_TIMESTAMPNS (x86, arm64)
ANC = socket.CMSG_SPACE(16)


def now():
    return time.monotonic_ns(), time.time_ns()


def tcp_info(sock):
    """(tcpi_unacked, tcpi_total_retrans): offsets 24 and 100 of struct tcp_info."""
    info = sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_INFO, 104)
    return struct.unpack_from("I", info, 24)[0], struct.unpack_from("I", info, 100)[0]


def total_retrans(sock):
    return tcp_info(sock)[1]


def retrans_until_acked(sock, before, timeout=3.0):
    """The segments retransmitted since `before` (a total_retrans) once all
    that was sent is acknowledged (or `timeout` passed)."""
    deadline = time.monotonic() + timeout
    unacked, total = tcp_info(sock)
    while unacked and time.monotonic() < deadline:
        time.sleep(0.001)
        unacked, total = tcp_info(sock)
    return total - before


def recv_stamped(sock, view, n):
    """recv_into with the kernel's receive timestamp (CLOCK_REALTIME ns) of
    the last segment this read took data from (SO_TIMESTAMPNS): when the
    bytes arrived, however late this process woke up to read them."""
    got, anc, _, _ = sock.recvmsg_into([view[:n]], ANC)
    stamp = None
    for level, kind, data in anc:
        if level == socket.SOL_SOCKET and kind == SO_TIMESTAMPNS and len(data) >= 16:
            sec, nsec = struct.unpack("qq", data[:16])
            stamp = sec * 1_000_000_000 + nsec
    return got, stamp


def read_response(sock):
    """Reads one response (Content-Length framed), keeping none of the body.
    Returns (header bytes, body bytes, status, first, last): first/last are
    (monotonic, realtime, kernel arrival realtime) of the reads that returned
    the first and the last byte."""
    buf = bytearray(1 << 20)
    view = memoryview(buf)
    head = b""
    first = None
    while b"\r\n\r\n" not in head:
        # The first read takes one byte: its stamp is then the first
        # segment's (a read's stamp is that of the last segment it took from).
        n, stamp = recv_stamped(sock, view, 1 if first is None else 1 << 16)
        if not n:
            raise ConnectionError("connection closed inside the response header")
        if first is None:
            first = (*now(), stamp)
        head += bytes(view[:n])
    last = (*now(), stamp)
    hdr, _, rest = head.partition(b"\r\n\r\n")
    header_bytes = len(hdr) + 4
    lines = hdr.decode("latin-1").split("\r\n")
    status = int(lines[0].split()[1])
    length = 0
    for l in lines[1:]:
        k, _, v = l.partition(":")
        if k.strip().lower() == "content-length":
            length = int(v.strip())
    if len(rest) > length:
        raise ValueError("bytes beyond the response: the plans here never pipeline")
    # Count the body, keep none of it: the read loop must not fall behind.
    got = len(rest)
    while got < length:
        n, stamp = recv_stamped(sock, view, min(len(buf), length - got))
        if not n:
            raise ConnectionError(f"connection closed after {got} of {length} body bytes")
        got += n
        last = (*now(), stamp)
    return header_bytes, length, status, first, last


def client(args):
    plan = json.loads(args.plan)
    family = socket.AF_INET6 if ":" in args.addr else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.settimeout(args.timeout)
    sock.setsockopt(socket.SOL_SOCKET, SO_TIMESTAMPNS, 1)
    deadline = time.monotonic() + args.timeout
    t_connect = now()
    sock.connect((args.addr, args.port))
    laddr, lport = sock.getsockname()[:2]
    out = {"laddr": laddr, "lport": lport, "raddr": args.addr, "rport": args.port,
           "connect": t_connect, "requests": []}
    host = f"[{args.addr}]" if family == socket.AF_INET6 else args.addr
    for i, item in enumerate(plan):
        if i and item.get("pause"):
            time.sleep(item["pause"])
        if time.monotonic() > deadline:
            raise TimeoutError("the plan ran past --timeout")
        method = item.get("method", "GET")
        body = os.urandom(16) * (item.get("body", 0) // 16) + os.urandom(item.get("body", 0) % 16)
        head = (f"{method} {item['path']} HTTP/1.1\r\nHost: {host}:{args.port}\r\n"
                f"User-Agent: xfer_peer\r\nAccept: */*\r\n")
        if method == "POST":
            head += f"Content-Type: application/octet-stream\r\nContent-Length: {len(body)}\r\n"
        req = head.encode() + b"\r\n" + body
        retrans_before = total_retrans(sock)
        t_send = now()
        sock.sendall(req)
        t_sent = now()
        hb, bb, status, first, last = read_response(sock)
        retrans = total_retrans(sock) - retrans_before
        out["requests"].append({"path": item["path"], "method": method, "req_bytes": len(req),
                                "req_header_bytes": len(req) - len(body), "req_body_bytes": len(body),
                                "status": status, "header_bytes": hb, "body_bytes": bb,
                                "send": t_send, "sent": t_sent, "first": first, "last": last,
                                "retrans": retrans})
    sock.close()
    print(json.dumps(out))


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    log_path = None

    def log_message(self, *a):
        pass

    def _log(self, rec):
        with open(self.log_path, "a") as f:
            f.write(json.dumps(rec) + "\n")

    def _reply(self, body, ctype="application/octet-stream"):
        head = (f"HTTP/1.1 200 OK\r\nContent-Type: {ctype}\r\nContent-Length: {len(body)}\r\n"
                f"Connection: keep-alive\r\n\r\n").encode()
        self.wfile.write(head + body)   # one sendall(): unbuffered wfile
        return len(head)

    def do_GET(self):
        u = urlparse(self.path)
        q = parse_qs(u.query)
        if u.path != "/delay":
            self.send_error(404)
            return
        ms, n = float(q.get("ms", ["0"])[0]), int(q.get("bytes", ["100"])[0])
        t0 = time.monotonic_ns()
        time.sleep(ms / 1000)
        slept = time.monotonic_ns() - t0
        hb = self._reply(os.urandom(n))
        self._log({"path": self.path, "port": self.client_address[1], "slept_ns": slept,
                   "resp_header_bytes": hb, "resp_body_bytes": n})

    def do_POST(self):
        n = int(self.headers.get("Content-Length", "0"))
        got = 0
        while got < n:
            chunk = self.rfile.read(min(1 << 20, n - got))
            if not chunk:
                break
            got += len(chunk)
        body = json.dumps({"read": got}).encode()
        before = total_retrans(self.connection)
        hb = self._reply(body, "application/json")
        self._log({"path": self.path, "port": self.client_address[1], "body_read": got,
                   "resp_header_bytes": hb, "resp_body_bytes": len(body),
                   "reply_retrans": retrans_until_acked(self.connection, before)})


def serve(args):
    Handler.log_path = args.log
    family = socket.AF_INET6 if ":" in args.bind else socket.AF_INET

    class Server(ThreadingHTTPServer):
        address_family = family
        daemon_threads = True

    srv = Server((args.bind, args.port), Handler)
    Path(args.ready).write_text("ready")
    srv.timeout = 0.5
    deadline = time.monotonic() + args.timeout
    while time.monotonic() < deadline:   # bounded: the test stops it long before
        srv.handle_request()
    srv.server_close()


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = p.add_subparsers(dest="mode", required=True)
    c = sub.add_parser("client")
    c.add_argument("--addr", required=True)
    c.add_argument("--port", type=int, required=True)
    c.add_argument("--plan", required=True, help="JSON list of {method, path, body, pause}")
    c.add_argument("--timeout", type=float, default=60)
    s = sub.add_parser("serve")
    s.add_argument("--bind", required=True)
    s.add_argument("--port", type=int, required=True)
    s.add_argument("--log", required=True)
    s.add_argument("--ready", required=True)
    s.add_argument("--timeout", type=float, default=300)
    args = p.parse_args()
    (client if args.mode == "client" else serve)(args)


if __name__ == "__main__":
    sys.exit(main())
