#!/usr/bin/env python3
"""A/A runs of the closed loop on few heavy connections from clients of
different RTTs, at the shipped defaults but for the arms: does a controller
decide when both arms are the same algorithm?

    TCPSCOPE_BUILD=build bench/controller_aa.py [--runs 30] [--seconds 300] [--json FILE]

The kernel draws an arm per connection, so a connection's requests share its
arm, its client and its path. Counted per transfer, two kept-alive
connections of clients 10 and 120 ms away made an A/A controller decide for
whichever arm drew the near client (after 90 s). Here each run is a
controller rule of its own (`arms: [cubic, cubic]`, `cohort: peer_class`,
every other key at its default: min_transfers 500, min_connections 4,
interval_s 30, control_percent 10, fdr 0.05) on a port of its own, with
2 to 16 kept-alive connections whose clients sit on paths of 10 to 120 ms RTT
(the lab's delay lines), each sending a 100-byte request for 2 kB as fast as
its path allows, for the run's seconds. All runs go at once, so 30 runs of 5
minutes take 5 minutes. Printed: per run the connections per arm, the most
transfers, whether its test ran (it needs min_connections per arm) and the
largest e-value it reached, and whether it decided.
It judges nothing."""
import argparse
import json
import os
import sys
import threading
import time
import urllib.request
from pathlib import Path as FsPath

HERE = FsPath(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import controller_lab  # noqa: E402  (its lab, daemon and config helpers)

labmod = controller_lab.labmod
RTTS_MS = [10, 20, 40, 60, 90, 120]
FIRST_PORT = 9100

SERVER = r'''
import socket, sys, threading
ports = [int(p) for p in sys.argv[2].split(",")]
BODY = b"r" * 2000
def serve(c):
    try:
        while True:
            got = 0
            while got < 100:
                b = c.recv(100 - got)
                if not b:
                    return
                got += len(b)
            c.sendall(BODY)
    finally:
        c.close()
def listen(port):
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.bind((sys.argv[1], port))
    s.listen(64)
    while True:
        c, _ = s.accept()
        threading.Thread(target=serve, args=(c,), daemon=True).start()
for p in ports:
    threading.Thread(target=listen, args=(p,), daemon=True).start()
open(sys.argv[3], "w").close()
threading.Event().wait()
'''

CLIENT = r'''
import socket, sys, threading, time
addr, until = sys.argv[1], time.time() + float(sys.argv[2])
def one(port, source):
    c = socket.create_connection((addr, port), timeout=30, source_address=(source, 0))
    while time.time() < until:
        c.sendall(b"q" * 100)
        got = 0
        while got < 2000:
            b = c.recv(65536)
            if not b:
                raise SystemExit("server closed")
            got += len(b)
    c.close()
ts = [threading.Thread(target=one, args=(int(p), s)) for p, s in (x.split("@") for x in sys.argv[3:])]
for t in ts: t.start()
for t in ts: t.join()
'''


def connections_of(run):
    return 2 + (7 * run) % 15  # 2 to 16, spread over the runs


def rules(lab, runs):
    out = ""
    for r in range(runs):
        out += f"""    - name: aa{r:02d}
      match: {{ lports: [{FIRST_PORT + r}] }}
      controller:
        arms: [cubic, cubic]
        cohort: peer_class
        evidence_netns: [{lab.server_ns}]
"""
    return out


def status(d):
    with urllib.request.urlopen(f"http://127.0.0.1:{d.port}/api/v1/controller", timeout=10) as r:
        return {rule["rule"]: rule for rule in json.loads(r.read())["rules"]}


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--runs", type=int, default=30)
    p.add_argument("--seconds", type=float, default=300)
    p.add_argument("--json", help="write the figures here")
    args = p.parse_args(argv)
    paths = [labmod.Path.symmetric(f"r{rtt}", delay_ms=rtt / 2, rate_mbit=100, queue=1000) for rtt in RTTS_MS]
    report = {"runs": [], "seconds": args.seconds, "rtts_ms": RTTS_MS}
    with labmod.Lab(paths) as lab:
        workdir = FsPath(lab.workdir)
        cfg = controller_lab.policy_config(lab, workdir / "aa.yaml", rules(lab, args.runs))
        state = workdir / "state-aa"
        state.mkdir(mode=0o700, exist_ok=True)
        lab.set_cc("cubic")
        d = controller_lab.ControllerDaemon(cfg, workdir, state, name="aa")
        lab.track(d.proc.pid)
        try:
            srv_addr = lab.ep(paths[0].name).server_v4
            ready = workdir / "server.ready"
            ports = ",".join(str(FIRST_PORT + r) for r in range(args.runs))
            server = lab.popen(lab.server_ns, sys.executable, "-c", SERVER, "0.0.0.0", ports, ready)
            lab.track(server.pid)
            deadline = time.monotonic() + 20
            while not ready.exists() and time.monotonic() < deadline:
                time.sleep(0.05)
            # Connection j of run r on the path of RTT j: the clients of a run differ.
            by_path = {ep_name: [] for ep_name in lab.endpoints}
            layout = []
            for r in range(args.runs):
                rtts = []
                for j in range(connections_of(r)):
                    path = paths[(r + j) % len(paths)]
                    ep = lab.ep(path.name)
                    by_path[path.name].append(f"{FIRST_PORT + r}@{ep.client_v4[0]}")
                    rtts.append(RTTS_MS[(r + j) % len(paths)])
                layout.append(rtts)
            clients = [lab.popen(lab.ep(name).client_ns, sys.executable, "-c", CLIENT,
                                 lab.ep(name).server_v4, args.seconds, *conns)
                       for name, conns in by_path.items() if conns]
            for c in clients:
                lab.track(c.pid)
            seen = {f"aa{r:02d}": {"max_e": None, "max_transfers": 0, "decided": False} for r in range(args.runs)}
            t0 = time.monotonic()
            while any(c.poll() is None for c in clients) and time.monotonic() - t0 < args.seconds + 60:
                for name, rule in status(d).items():
                    for c in rule["cohorts"]:
                        test = c["evidence"].get("test") or {}
                        s = seen[name]
                        if "e_value" in test:
                            s["max_e"] = max(s["max_e"] or 0.0, test["e_value"])
                        s["max_transfers"] = max(s["max_transfers"], min(
                            a["n_fct"] for a in c["evidence"]["arms"].values()))
                        s["decided"] = s["decided"] or c["state"] != "exploring"
                        s["connections"] = {arm: a["connections_fct"] for arm, a in c["evidence"]["arms"].items()}
                        s["waiting_for"] = test.get("waiting_for")
                time.sleep(5)
            failed = [c.stderr.read() for c in clients if c.wait(timeout=30) != 0]
            if failed:
                raise RuntimeError(f"clients failed: {failed[:2]}")
            final = status(d)
            for r in range(args.runs):
                name = f"aa{r:02d}"
                s = seen[name]
                s["decisions"] = final[name]["decisions"]
                report["runs"].append({"rule": name, "client_rtts_ms": layout[r], **s})
        finally:
            d.stop()
    decided = sum(1 for r in report["runs"] if r["decisions"] or r["decided"])
    report["decided_runs"] = decided
    tested = sum(1 for r in report["runs"] if r["max_e"] is not None)
    report["tested_runs"] = tested
    print(f"A/A, {args.runs} runs of {args.seconds:.0f} s at the shipped defaults (arms [cubic, cubic]), "
          f"2 to 16 kept-alive connections each from clients {RTTS_MS[0]} to {RTTS_MS[-1]} ms away:")
    print(f"  {'run':>4} {'conns':>5} {'per arm':>10} {'transfers/arm':>14} {'max e':>8}  decided")
    for r in report["runs"]:
        per_arm = "/".join(str(v) for v in r.get("connections", {}).values()) or "-"
        max_e = "untested" if r["max_e"] is None else f"{r['max_e']:.3g}"
        print(f"  {r['rule']:>4} {len(r['client_rtts_ms']):>5} {per_arm:>10} {r['max_transfers']:>14} "
              f"{max_e:>8}  {'yes' if r['decisions'] or r['decided'] else 'no'}")
    print(f"tested in {tested} of {args.runs} runs; decisions: {decided} of {args.runs} runs")
    if args.json:
        FsPath(args.json).write_text(json.dumps(report, indent=1) + "\n")


if __name__ == "__main__":
    main()
