"""Traffic for the restart tests (test_restarts.py), run inside the network
namespace it should load (the container's, through nsenter -n):

  restart_traffic.py DIR [--rate N] [--seconds S]

* churn: a client makes N connections a second to a server on
  127.0.0.1:18080; each sends a 100-byte request, reads a 20 kB response and
  closes (the client first). Each connection's client port and the time the
  client closed it (CLOCK_REALTIME ns) are a line of DIR/connections.tsv.
* one long download from 127.0.0.1:18081: the server writes 16 kB every
  20 ms from the start until the churn ends, then closes. DIR/long.json
  gets its client port, its bytes, the time before connect() and the time
  the last byte was read.

DIR/ready appears when both run; creating DIR/stop ends the churn, then the
download. Everything ends after S seconds (default 300) in any case.
"""
import argparse
import json
import socket
import threading
import time
from pathlib import Path

CHURN_PORT, LONG_PORT = 18080, 18081
REQUEST, RESPONSE = 100, 20000
TICK_BYTES, TICK_SECONDS = 16384, 0.02


def listener(port):
    s = socket.socket()
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.bind(("127.0.0.1", port))
    s.listen(512)
    return s


def read_exactly(sock, n):
    got = 0
    while got < n:
        chunk = sock.recv(min(65536, n - got))
        if not chunk:
            raise ConnectionError(f"closed after {got} of {n} bytes")
        got += len(chunk)


def churn_server(ls, done):
    ls.settimeout(0.5)
    response = b"r" * RESPONSE
    while not done.is_set():
        try:
            s, _ = ls.accept()
        except socket.timeout:
            continue
        with s:
            s.settimeout(10)
            read_exactly(s, REQUEST)
            s.sendall(response)
            s.recv(1)  # the client's FIN: it closes first


def long_server(ls, churn_over, deadline):
    s, _ = ls.accept()
    with s:
        chunk = b"l" * TICK_BYTES
        while not churn_over.is_set() and time.monotonic() < deadline:
            s.sendall(chunk)
            time.sleep(TICK_SECONDS)


def long_client(out, result):
    start = time.time_ns()
    c = socket.create_connection(("127.0.0.1", LONG_PORT))
    port = c.getsockname()[1]
    total, last = 0, start
    with c:
        while True:
            chunk = c.recv(65536)
            if not chunk:
                break
            total += len(chunk)
            last = time.time_ns()
    result.update(client_port=port, bytes=total, connect_ns=start, last_byte_ns=last)
    (out / "long.json").write_text(json.dumps(result))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("dir", type=Path)
    ap.add_argument("--rate", type=float, default=400)
    ap.add_argument("--seconds", type=float, default=300)
    args = ap.parse_args()
    out = args.dir
    deadline = time.monotonic() + args.seconds
    churn_ls, long_ls = listener(CHURN_PORT), listener(LONG_PORT)
    churn_over, server_done = threading.Event(), threading.Event()
    threads = [threading.Thread(target=churn_server, args=(churn_ls, server_done), daemon=True),
               threading.Thread(target=long_server, args=(long_ls, churn_over, deadline), daemon=True)]
    long_result = {}
    threads.append(threading.Thread(target=long_client, args=(out, long_result), daemon=True))
    for t in threads:
        t.start()
    (out / "ready").touch()
    request = b"q" * REQUEST
    with open(out / "connections.tsv", "w") as log:
        t0, i = time.monotonic(), 0
        while not (out / "stop").exists() and time.monotonic() < deadline:
            ahead = t0 + i / args.rate - time.monotonic()
            if ahead > 0:
                time.sleep(ahead)
            i += 1
            c = socket.create_connection(("127.0.0.1", CHURN_PORT), timeout=10)
            port = c.getsockname()[1]
            c.sendall(request)
            read_exactly(c, RESPONSE)
            c.close()
            log.write(f"{port}\t{time.time_ns()}\n")
            log.flush()
    churn_over.set()
    threads[2].join(timeout=max(1, deadline - time.monotonic()))
    server_done.set()
    threads[0].join(timeout=5)
    (out / "done").touch()


if __name__ == "__main__":
    main()
