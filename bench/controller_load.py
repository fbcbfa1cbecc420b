#!/usr/bin/env python3
"""The closed loop under load: does the ring's loop ever wait on the controller?

A daemon with 64 controller rules (`interval_s: 1`: every rule tested and the
state saved every second), 63 of them each holding `--held` open connections
with their sums in its connection table, the 64th over connection churn at
the machine's limit (bench-loadgen, `--threads` clients); two clients ask
/api/v1/controller with a query string of their own each time, in a loop,
and /healthz is asked every 100 ms. For `--seconds` it prints and writes
(bench/results/controller_load.json): connections churned and their rate,
records the kernel lost, the slowest /healthz, the controller answers, the
daemon's tcpscope_loop_longest_pass_seconds (the longest the loop took over
one wake-up), the open connections the controller keeps and the saved
state's size. It judges nothing.

  bench/controller_load.py [--seconds 600] [--held 300] [--threads 2]
"""
import argparse
import json
import subprocess
import os
import sys
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path

import benchlib as bl

RULES = 64
CHURN_PORT = 8080
HELD_PORTS = range(9001, 9001 + RULES - 1)

# Listens on every held port in the server namespace and echoes.
ECHO = """
import resource, selectors, socket, sys
hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]; resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
sel = selectors.DefaultSelector()
for port in range(int(sys.argv[2]), int(sys.argv[3])):
    s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.bind((sys.argv[1], port)); s.listen(4096); s.setblocking(False)
    sel.register(s, selectors.EVENT_READ, None)
open(sys.argv[4], "w").close()
while True:
    for key, _ in sel.select():
        if key.data is None:
            c, _ = key.fileobj.accept(); c.setblocking(False)
            sel.register(c, selectors.EVENT_READ, "c")
        else:
            try:
                d = key.fileobj.recv(65536)
            except OSError:
                d = b""
            if d:
                key.fileobj.sendall(d)
            else:
                sel.unregister(key.fileobj); key.fileobj.close()
"""

# Opens `held` connections to each port, one exchange each, and keeps them.
HOLD = """
import resource, socket, sys, time
hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]; resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
conns = []
for port in range(int(sys.argv[2]), int(sys.argv[3])):
    for _ in range(int(sys.argv[4])):
        c = socket.create_connection((sys.argv[1], port)); c.sendall(b"x" * 200)
        got = 0
        while got < 200: got += len(c.recv(65536))
        conns.append(c)
print(len(conns), flush=True)
time.sleep(1e9)
"""


def config(path, net, state_port):
    rules = []
    for i, port in enumerate([CHURN_PORT, *HELD_PORTS]):
        rules.append(f"""    - name: r{i}
      match: {{ lports: [{port}] }}
      controller:
        arms: [bbr, cubic]
        cohort: peer_class
        interval_s: 1
        evidence_netns: [{net.srv}]
""")
    path.write_text(f"listen: 127.0.0.1:{state_port}\nsnapshot_interval_s: 5\n"
                    "cc_policy:\n  rules:\n" + "".join(rules))
    return path


def get(url, timeout=30):
    t0 = time.monotonic()
    try:
        with urllib.request.urlopen(url, timeout=timeout) as r:
            body = r.read()
            return r.status, body, time.monotonic() - t0
    except urllib.error.HTTPError as e:
        return e.code, b"", time.monotonic() - t0


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seconds", type=float, default=600)
    ap.add_argument("--held", type=int, default=300, help="open connections per held rule (63 rules: within the 20,000 descriptors a process gets here)")
    ap.add_argument("--threads", type=int, default=2, help="churn client threads")
    ap.add_argument("--out")
    args = ap.parse_args()
    if os.geteuid() != 0:
        raise SystemExit("controller_load.py: needs root")
    tmp = bl.tmpdir("controller-load")
    net = bl.NetPair()
    daemon = None
    try:
        state = tmp / "state"
        state.mkdir(mode=0o700)
        port = bl.free_port()
        cfg = config(tmp / "tcpscope.yaml", net, port)
        daemon = bl.Tcpscope(tmp, cfg, port, env=dict(os.environ, STATE_DIRECTORY=str(state)))
        ready = tmp / "echo.ready"
        net.spawn(net.srv, sys.executable, "-c", ECHO, net.srv_v4, HELD_PORTS.start, HELD_PORTS.stop, ready)
        bl.wait_for(ready.exists, 10, "echo server")
        holder = net.spawn(net.cli, sys.executable, "-c", HOLD, net.srv_v4, HELD_PORTS.start, HELD_PORTS.stop,
                           args.held, stdout=subprocess.PIPE)
        held = int(holder.stdout.readline())
        bl.log(f"{held} connections held open on {len(HELD_PORTS)} rules' ports")
        server = bl.ChurnServer(net, tmp, port=CHURN_PORT, threads=2)

        stop = threading.Event()
        answers, health = [], []

        def controller_client(n):
            i = 0
            while not stop.is_set():
                i += 1
                status, _, seconds = get(f"{daemon.url}/api/v1/controller?client={n}&i={i}")
                answers.append((status, seconds))

        def health_probe():
            while not stop.is_set():
                status, _, seconds = get(daemon.url + "/healthz")
                health.append((status, seconds))
                time.sleep(0.1)

        threads = [threading.Thread(target=controller_client, args=(n,)) for n in range(2)]
        threads.append(threading.Thread(target=health_probe))
        for t in threads:
            t.start()
        try:
            churned = bl.churn(net, server, args.seconds, args.threads)
        finally:
            stop.set()
            for t in threads:
                t.join(60)
        time.sleep(2)  # the last drains and a tick
        status = json.loads(get(daemon.url + "/api/v1/controller")[1])
        saved = state / "controller.json"
        result = {
            "seconds": args.seconds, "rules": RULES, "held_connections": held,
            "churned_connections": churned["connections"], "churn_rate_per_s": churned["rate"],
            "records_lost": daemon.metric("tcpscope_records_lost_total"),
            "transfer_records_lost": daemon.metric("tcpscope_transfer_records_lost_total"),
            "loop_longest_pass_s": daemon.metric("tcpscope_loop_longest_pass_seconds"),
            "healthz_probes": len(health), "healthz_not_200": sum(s != 200 for s, _ in health),
            "healthz_slowest_s": max(s for _, s in health),
            "controller_answers": len(answers), "controller_answers_not_200": sum(s != 200 for s, _ in answers),
            "controller_answer_slowest_s": max(s for _, s in answers),
            "controller_open_connections": sum(r["open_connections"] for r in status["rules"]),
            "saved_state_bytes": saved.stat().st_size if saved.exists() else 0,
        }
        print(bl.fmt_table(["figure", "value"], [[k, v] for k, v in result.items()]))
        bl.write_result("controller_load", result, args.out)
    finally:
        if daemon:
            daemon.stop()
        net.close()


if __name__ == "__main__":
    main()
