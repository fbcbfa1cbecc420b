"""`tcpscope compare` and `tcpscope flows` against a running daemon and its
flow log, on real traffic with two congestion controls.

The server namespace listens on two ports, one whose sockets use CUBIC and
one BBR (TCP_CONGESTION on the listener, inherited by accepted sockets; the
clients set the same CC on theirs). Two client source addresses map to two
ASNs. `compare --flows LOG` (exact values) and `compare --server URL` (the
daemon's sketches) must then report the same counts exactly and the same
quantiles within the sketch's stated relative error, for flows and for
transfers. A hand-written mixed log checks which lines each unit reads,
without a daemon.

Run as a script (inside a namespace) this file is also the traffic generator:
  test_compare.py serve --bind ADDR --count N   (ports 8080 cubic, 8081 bbr)
  test_compare.py client --addr ADDR --source SRC --plan JSON
  test_compare.py hold --addr ADDR --port P --cc CC --seconds S
"""
import argparse
import json
import select
import socket
import struct
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
import xml.etree.ElementTree as ET
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests/: testlib, also when run as a script
from testlib import add_peer_options, add_server_options  # noqa: E402

PORTS = {"cubic": 8080, "bbr": 8081}
CHUNK = 65536
RELATIVE_ACCURACY = 0.01  # the daemon's sketches (FlowSketch::kDefaultRelativeAccuracy)


# --------------------------------------------------------------------------
# Traffic (runs inside the test namespaces)

def recv_exact(sock, n):
    got = 0
    while got < n:
        b = sock.recv(min(CHUNK, n - got))
        if not b:
            raise ConnectionError(f"peer closed after {got} of {n} bytes")
        got += len(b)


def serve(args):
    listeners = []
    for cc, port in PORTS.items():
        ls = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        ls.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        # Accepted sockets inherit the listener's congestion control.
        ls.setsockopt(socket.IPPROTO_TCP, socket.TCP_CONGESTION, cc.encode())
        ls.bind((args.bind, port))
        ls.listen(1024)
        ls.setblocking(False)
        listeners.append(ls)
    Path(args.ready).touch()

    def handle(conn):
        try:
            conn.settimeout(30)
            hdr = b""
            while len(hdr) < 8:
                b = conn.recv(8 - len(hdr))
                if not b:
                    return
                hdr += b
            req, resp = struct.unpack("!II", hdr)
            recv_exact(conn, req)
            payload = b"s" * CHUNK
            left = resp
            while left > 0:
                left -= conn.send(payload[:min(left, CHUNK)])
            while conn.recv(CHUNK):  # the client's FIN: everything is acknowledged
                pass
        except OSError:
            pass
        finally:
            conn.close()

    served, threads = 0, []
    deadline = time.monotonic() + args.timeout
    while served < args.count and time.monotonic() < deadline:
        readable, _, _ = select.select(listeners, [], [], 0.5)
        for ls in readable:
            try:
                conn, _ = ls.accept()
            except (socket.timeout, BlockingIOError):
                continue
            t = threading.Thread(target=handle, args=(conn,), daemon=True)
            t.start()
            threads.append(t)
            served += 1
    for t in threads:
        t.join(timeout=30)


def one_flow(addr, source, cc, req, resp):
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        s.settimeout(30)
        s.setsockopt(socket.IPPROTO_TCP, socket.TCP_CONGESTION, cc.encode())
        s.bind((source, 0))
        s.connect((addr, PORTS[cc]))
        s.sendall(struct.pack("!II", req, resp) + b"c" * req)
        recv_exact(s, resp)
        return None
    except OSError as e:
        return repr(e)
    finally:
        s.close()


def client(args):
    """Runs the plan [[cc, response bytes, count], ...] from one source address
    with 4 connections in parallel; prints the number of failures."""
    jobs = [(cc, size) for cc, size, count in json.loads(args.plan) for _ in range(count)]
    lock = threading.Lock()
    errors = []

    def worker():
        while True:
            with lock:
                if not jobs:
                    return
                cc, size = jobs.pop()
            err = one_flow(args.addr, args.source, cc, 200, size)
            if err:
                with lock:
                    errors.append(err)

    threads = [threading.Thread(target=worker) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    print(json.dumps({"errors": errors}))
    return 1 if errors else 0


def hold(args):
    """One idle connection kept open for a while (for `tcpscope flows`)."""
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.setsockopt(socket.IPPROTO_TCP, socket.TCP_CONGESTION, args.cc.encode())
    s.connect((args.addr, args.port))
    print("connected", flush=True)
    time.sleep(args.seconds)
    s.close()


def main():
    p = argparse.ArgumentParser()
    sub = p.add_subparsers(dest="mode", required=True)
    s = sub.add_parser("serve")
    add_server_options(s, port=False, out=False, ready_required=True)
    c = sub.add_parser("client")
    c.add_argument("--addr", required=True)
    c.add_argument("--source", required=True)
    c.add_argument("--plan", required=True)
    h = sub.add_parser("hold")
    add_peer_options(h)
    h.add_argument("--cc", required=True)
    h.add_argument("--seconds", type=float, required=True)
    args = p.parse_args()
    return {"serve": serve, "client": client, "hold": hold}[args.mode](args)


if __name__ == "__main__":
    sys.exit(main())


# --------------------------------------------------------------------------
# Tests

import pytest  # noqa: E402  (not needed when this file runs as the traffic generator)

from conftest import TCPSCOPE, Daemon, wait_for  # noqa: E402

THIS = Path(__file__).resolve()
# Per (source address, cc): flows of each response size. Sizes put flows in
# every fct size class (lt_100k, 100k_1m, 1m_3m) and above throughput_min_bytes.
PLAN = [(30_000, 30), (300_000, 24), (1_500_000, 22), (4_000_000, 22)]
ASN_OF_SOURCE = {1: 64501, 3: 64502}  # last octet -> ASN
SERVER_ASN = 64500


def tcpscope(*args, timeout=120):
    return subprocess.run([str(TCPSCOPE), *args], capture_output=True, text=True, timeout=timeout)


def has_bbr():
    with open("/proc/sys/net/ipv4/tcp_available_congestion_control") as f:
        if "bbr" in f.read().split():
            return True
    return subprocess.run(["modprobe", "tcp_bbr"], capture_output=True).returncode == 0


@pytest.fixture
def lab(net, tmp_path):
    if not has_bbr():
        pytest.skip("the kernel offers no bbr")
    n = net.cli_v4.split(".")[2]
    prefix = f"198.18.{n}"
    net.ns(net.cli, "ip", "addr", "add", f"{prefix}.3/24", "dev", net.veth_cli)
    pfx2as = tmp_path / "pfx2as.tsv"
    pfx2as.write_text(f"{prefix}.1\t32\t{ASN_OF_SOURCE[1]}\n{prefix}.3\t32\t{ASN_OF_SOURCE[3]}\n"
                      f"{prefix}.2\t32\t{SERVER_ASN}\n")
    config = tmp_path / "tcpscope.yaml"
    config.write_text(f"""
asn:
  prefix_file: {pfx2as}
peer_classes:
  - name: lab
    prefixes: ["{prefix}.0/24"]
snapshot_interval_s: 1
""")
    home = tmp_path / "daemon"
    home.mkdir()
    d = Daemon(home, extra_args=("--config", str(config)))
    yield d, [f"{prefix}.1", f"{prefix}.3"]
    assert d.stop() == 0, d.stderr_text()


def run_traffic(net, tmp_path, sources, plan=PLAN, tag=""):
    """Every (cc, size, count) of `plan` from each source; the connection count."""
    per_source = sum(count for _, count in plan) * len(PORTS)
    ready = tmp_path / f"server{tag}.ready"
    server = net.spawn(net.srv, sys.executable, str(THIS), "serve", "--bind", net.srv_v4,
                       "--count", str(per_source * len(sources)), "--ready", str(ready))
    wait_for(lambda: ready.exists() or server.poll() is not None, 10, what="server start")
    assert server.poll() is None, server.stderr.read()
    spec = json.dumps([[cc, size, count] for cc in PORTS for size, count in plan])
    for src in sources:
        r = net.ns(net.cli, sys.executable, str(THIS), "client", "--addr", net.srv_v4, "--source", src,
                   "--plan", spec, check=False)
        assert r.returncode == 0, r.stdout + r.stderr
    server.wait(timeout=60)
    return per_source * len(sources)


def distributions_served(url):
    try:
        with urllib.request.urlopen(url + "/api/v1/distributions?a=cc%3Dcubic&b=cc%3Dbbr", timeout=10):
            return True
    except urllib.error.HTTPError as e:
        if e.code == 404:
            return False
        raise


def compare_json(*args):
    r = tcpscope("compare", *args, "--json")
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)


def test_server_mode_agrees_with_the_flow_log(lab, net, tmp_path):
    daemon, sources = lab
    if not distributions_served(daemon.url):
        pytest.skip("the daemon under test answers 404 for /api/v1/distributions (a build older than "
                    "compare --server support), so compare --server has nothing to read")
    n_conn = run_traffic(net, tmp_path, sources)
    # Both ends of every connection are in the lab class; wait until the log
    # has them all: the sketches got each record before the log did.
    lab_records = lambda: [r for r in daemon.all_records() if r["peer_class"] == "lab"
                           and r.get("kind", "flow") == "flow" and r["start_ns"] >= net.created_ns]
    wait_for(lambda: len(lab_records()) >= 2 * n_conn, 30, what=f"{2 * n_conn} lab records")
    time.sleep(0.5)
    recs = lab_records()
    assert len(recs) == 2 * n_conn
    assert {r["cc"] for r in recs} == {"cubic", "bbr"}

    sel = ["--a", "cc=cubic,peer_class=lab", "--b", "cc=bbr,peer_class=lab"]
    for metric, unit, by in (("fct", "flow", "asn"), ("throughput", "flow", "asn"), ("fct", "transfer", "asn"),
                             ("throughput", "transfer", "asn"), ("rtt", "flow", "peer_class"),
                             ("retrans", "flow", "asn")):
        args = ("--metric", metric, "--unit", unit, "--by", by, *sel)
        exact = compare_json("--flows", str(daemon.flow_log), *args)
        sketched = compare_json("--server", daemon.url, *args)
        assert exact["unit"] == sketched["unit"] == unit
        if metric == "throughput" and unit == "transfer" and not exact["groups"]:
            # The Python clients can read slower than a veth carries: then
            # every large response was limited by their window, and left out.
            assert sketched["groups"] == [], sketched
            big = [t for t in daemon.all_transfers() if t["peer_class"] == "lab" and t["direction"] == "send"
                   and t["bytes"] >= 3_000_000 and t["start_ns"] >= net.created_ns]
            assert big and all(2 * t["rwnd_limited_us"] > t["xfer_us"] for t in big), big[:3]
            continue
        assert exact["relative_accuracy"] == 0
        assert sketched["relative_accuracy"] == RELATIVE_ACCURACY
        key = lambda g: (g["group"], g["size_class"])
        e_groups = {key(g): g for g in exact["groups"]}
        s_groups = {key(g): g for g in sketched["groups"]}
        assert e_groups.keys() == s_groups.keys(), (metric, unit)
        for k, e in e_groups.items():
            s = s_groups[k]
            where = f"{metric} per {unit} by {by} {k}"
            assert (e["n_a"], e["n_b"]) == (s["n_a"], s["n_b"]), where
            for arm in ("a", "b"):
                for q in ("p50", "p90", "p99"):
                    x, y = e[arm][q], s[arm][q]
                    if x is None:
                        assert y is None, where
                    elif x == 0:
                        assert y == 0, where
                    else:
                        assert abs(y - x) / x <= RELATIVE_ACCURACY + 1e-9, f"{where} {arm} {q}: {x} vs {y}"
            # Nothing collapsed on real traffic; the effect size is the same
            # statistic in both modes; an interval is two numbers or null
            # with a reason, never [x, null].
            assert s["sketch_collapsed"] is False, where
            assert e["diff_statistic"] == s["diff_statistic"], where
            for g in (e, s):
                if g["ci"] is None:
                    assert isinstance(g["ci_reason"], str) and g["ci_reason"], where
                else:
                    assert len(g["ci"]) == 2 and all(isinstance(v, (int, float)) for v in g["ci"]), where
                    assert g["ci_reason"] is None, where
            if e["diff"] is not None:
                # 1 + diff is a ratio of two medians, each within 1 %.
                assert abs(e["diff"] - s["diff"]) <= 0.0203 * (1 + abs(e["diff"])), where

        if metric == "fct" and unit == "flow":
            # Every completed lab flow below 3 MB is in exactly one group.
            want = sum(1 for r in recs if r["outcome"] == "ok" and not r.get("partial")
                       and 0 < r["bytes_acked"] + r["bytes_received"] < 3_000_000 and r["fct_us"] > 0)
            assert sum(g["n_a"] + g["n_b"] for g in exact["groups"]) == want
            groups = {g["group"] for g in exact["groups"]}
            assert groups == {str(a) for a in ASN_OF_SOURCE.values()} | {str(SERVER_ASN)}, groups
            sizes = {g["size_class"] for g in exact["groups"]}
            assert sizes == {"lt_100k", "100k_1m", "1m_3m"}, sizes
            for g in exact["groups"]:
                assert g["n_a"] >= 20 and g["n_b"] >= 20, g
                assert g["verdict"] != "insufficient data", g


def test_flow_log_mode_table_json_and_plot(lab, net, tmp_path):
    daemon, sources = lab
    n_conn = run_traffic(net, tmp_path, sources)
    wait_for(lambda: sum(1 for r in daemon.all_records()
                         if r["peer_class"] == "lab" and r.get("kind", "flow") == "flow") >= 2 * n_conn, 30,
             what="lab records")
    # One request per connection: whole flows, at least 20 per arm and group.
    sel = ["--a", "cc=cubic,peer_class=lab", "--b", "cc=bbr,peer_class=lab", "--by", "asn", "--unit", "flow"]

    # gzip-compressed logs read the same.
    gz = tmp_path / "flows.ndjson.gz"
    subprocess.run(f"gzip -c {daemon.flow_log} > {gz}", shell=True, check=True)
    plain = compare_json("--flows", str(daemon.flow_log), *sel)
    packed = compare_json("--flows", str(gz), *sel)
    assert [(g["group"], g["n_a"], g["n_b"], g["a"]["p50"]) for g in plain["groups"]] == \
           [(g["group"], g["n_a"], g["n_b"], g["a"]["p50"]) for g in packed["groups"]]
    for g in plain["groups"]:
        assert g["verdict"] in ("b better", "a better", "no significant difference")
        assert g["p_value"] <= g["q_value"] <= 1
        lo, hi = g["ci"]
        assert lo <= g["diff"] <= hi

    plot = tmp_path / "fct.svg"
    table = tcpscope("compare", "--flows", str(daemon.flow_log), *sel, "--plot", str(plot))
    assert table.returncode == 0, table.stderr
    for text in ("size_class", "verdict", "Benjamini-Hochberg", "bootstrap", "fewer than 20 flows"):
        assert text in table.stdout, text
    root = ET.parse(plot).getroot()  # raises on malformed XML
    assert root.tag == "{http://www.w3.org/2000/svg}svg"
    paths = root.iter("{http://www.w3.org/2000/svg}path")
    classes = [p.get("class") for p in paths]
    assert classes.count("cdf-a") == len(plain["groups"]) == classes.count("cdf-b")


def test_flows_shows_open_connections_enriched(lab, net, tmp_path):
    daemon, sources = lab
    ready = tmp_path / "server.ready"
    server = net.spawn(net.srv, sys.executable, str(THIS), "serve", "--bind", net.srv_v4, "--count", "1",
                       "--ready", str(ready), "--timeout", "30")
    wait_for(lambda: ready.exists() or server.poll() is not None, 10, what="server start")
    holder = net.spawn(net.cli, sys.executable, str(THIS), "hold", "--addr", net.srv_v4,
                       "--port", str(PORTS["bbr"]), "--cc", "bbr", "--seconds", "20")
    assert holder.stdout.readline().strip() == "connected"

    def ours():
        r = tcpscope("flows", "--server", daemon.url, "--json", "--filter", "peer_class=lab,cc=bbr")
        assert r.returncode == 0, r.stderr
        return [f for f in json.loads(r.stdout) if f["rport"] == PORTS["bbr"] or f["lport"] == PORTS["bbr"]]

    flows = wait_for(lambda: len(ours()) >= 2 and ours(), 10, what="both ends of the open connection")
    by_dir = {f["dir"]: f for f in flows}
    assert by_dir["active"]["asn"] == SERVER_ASN
    assert by_dir["passive"]["asn"] == ASN_OF_SOURCE[1]
    table = tcpscope("flows", "--server", daemon.url, "--filter", "peer_class=lab", "--sort", "age")
    assert table.returncode == 0, table.stderr
    assert "CLASS" in table.stdout and "lab" in table.stdout and str(ASN_OF_SOURCE[1]) in table.stdout
    # --watch: a bounded number of refreshes, one JSON array per line each.
    watched = tcpscope("flows", "--server", daemon.url, "--json", "--filter", "peer_class=lab,cc=bbr",
                       "--watch", "1", "--count", "2")
    assert watched.returncode == 0, watched.stderr
    frames = [json.loads(line) for line in watched.stdout.splitlines()]
    assert len(frames) == 2
    assert all(any(f["rport"] == PORTS["bbr"] or f["lport"] == PORTS["bbr"] for f in frame) for frame in frames)
    holder.kill()


def mixed_log(path):
    """A flow log as a daemon with transfers writes it, plus lines from before
    transfers (no "kind") and a kind this version does not know. Per cc, 30
    connections, each a flow record and three transfers: a 50 kB request
    received, a 50 kB response sent and a 4 MB response sent (every fifth one
    receiver-window limited). BBR's transfers take 20 % less time."""
    lines = []
    for cc, scale in (("cubic", 1.0), ("bbr", 0.8)):
        for i in range(30):
            common = {"family": 4, "laddr": "198.18.0.2", "lport": 443, "raddr": "198.18.0.1",
                      "rport": 40000 + i, "dir": "passive", "cc": cc, "peer_class": "client", "asn": 64501,
                      "as_org": "", "cc_rule": "client-ab", "experiment": "bbr-vs-cubic", "arm": cc,
                      "netns": 4026531840}
            start = 1_700_000_000_000_000_000 + i * 10_000_000_000
            flow = dict(common, start_ns=start, end_ns=start + 2_000_000_000, fct_us=1_500_000 + i,
                        duration_us=2_000_000, outcome="ok", srtt_us=20000 + i, min_rtt_us=15000,
                        rttvar_us=1000, bytes_acked=4_050_000, bytes_received=50_000, segs_out=3000,
                        segs_in=1000, retrans_segs=i % 3, lost_segs=0)
            if i % 4:
                flow = {"kind": "flow", **flow}  # every fourth as before transfers: no kind
            lines.append(flow)
            for seq, (direction, size, us) in enumerate((("recv", 50_000, 400), ("send", 50_000, 2000),
                                                          ("send", 4_000_000, 400_000))):
                xfer_us = int((us + 10 * i) * scale)
                lines.append(dict(common, kind="transfer", flow_start_ns=start, seq=seq, direction=direction,
                                  start_ns=start + seq * 100_000_000,
                                  end_ns=start + seq * 100_000_000 + xfer_us * 1000, xfer_us=xfer_us,
                                  wait_us=None if direction == "recv" else 100, bytes=size, retrans_segs=0,
                                  srtt_us=20000, min_rtt_us=15000, busy_us=xfer_us,
                                  rwnd_limited_us=xfer_us if size > 3_000_000 and i % 5 == 0 else 0,
                                  sndbuf_limited_us=0))
    lines.append({"kind": "heartbeat", "cc": "cubic", "outcome": "ok", "bytes_acked": 1, "fct_us": 1})
    path.write_text("".join(json.dumps(r) + "\n" for r in lines))


def test_units_on_a_hand_written_mixed_log(tmp_path):
    log = tmp_path / "flows.ndjson"
    mixed_log(log)
    sel = ["--flows", str(log), "--a", "cc=cubic", "--b", "cc=bbr", "--by", "peer_class"]

    # fct per transfer (the default): the responses (send transfers), by the
    # transfer's size; the requests (recv) are read but give no sample.
    fct = compare_json(*sel)
    assert fct["unit"] == "transfer" and fct["value_unit"] == "us"
    assert "xfer_us" in fct["description"]
    [g] = fct["groups"]
    assert (g["size_class"], g["n_a"], g["n_b"]) == ("lt_100k", 30, 30)
    assert g["verdict"] == "b better", g
    assert any("180 transfer records" in n for n in fct["notes"]), fct["notes"]

    # Selections on a transfer's own fields.
    passive = compare_json(*sel, "--a", "cc=cubic,direction=send", "--b", "cc=bbr,direction=send,dir=passive")
    [g] = passive["groups"]
    assert (g["n_a"], g["n_b"]) == (30, 30)
    received = compare_json(*sel, "--a", "cc=cubic,direction=recv", "--b", "cc=bbr,direction=recv")
    assert received["groups"] == [], received

    # Throughput per transfer: the 4 MB sends the receiver's window did not limit.
    tput = compare_json(*sel, "--metric", "throughput")
    assert tput["unit"] == "transfer" and tput["value_unit"] == "bit/s"
    [g] = tput["groups"]
    assert (g["n_a"], g["n_b"]) == (24, 24)
    # bits/s over xfer_us, as flow throughput; the median is one of the middle two.
    cubic = sorted(8 * 4_000_000 / ((400_000 + 10 * i) / 1e6) for i in range(30) if i % 5)
    assert g["a"]["p50"] in (pytest.approx(cubic[11], rel=1e-9), pytest.approx(cubic[12], rel=1e-9))
    assert g["verdict"] == "b better", g

    # --unit flow: the flow records, with and without "kind"; one size class above
    # throughput_min_bytes, so nothing for fct and every flow for throughput.
    flows = compare_json(*sel, "--unit", "flow")
    assert flows["unit"] == "flow" and flows["groups"] == []
    flow_tput = compare_json(*sel, "--metric", "throughput", "--unit", "flow")
    assert (flow_tput["groups"][0]["n_a"], flow_tput["groups"][0]["n_b"]) == (30, 30)
    assert any("30 flows in A" in n for n in flow_tput["notes"]), flow_tput["notes"]

    # rtt and retrans are per flow, and refuse --unit transfer in one line.
    assert compare_json(*sel, "--metric", "rtt")["unit"] == "flow"
    r = tcpscope("compare", *sel, "--metric", "retrans", "--unit", "transfer")
    assert r.returncode == 2
    assert r.stderr.splitlines()[0].startswith("tcpscope compare: --unit transfer: retrans is compared per flow only")

    # The table says which unit it compared.
    table = tcpscope("compare", *sel)
    assert table.returncode == 0, table.stderr
    assert "unit: transfer" in table.stdout and "fewer than 20 transfers" in table.stdout

    # A log from before transfers: --unit transfer finds nothing and says to use --unit flow.
    old = tmp_path / "old.ndjson"
    old.write_text("".join(line + "\n" for line in log.read_text().splitlines()
                           if '"kind": "transfer"' not in line and '"kind": "heartbeat"' not in line))
    nothing = compare_json("--flows", str(old), *sel[2:])
    assert nothing["groups"] == []
    assert any("--unit flow" in n for n in nothing["notes"]), nothing["notes"]


# A known tail: A (cubic) holds 20,000 flows, the body 20,000..39,969 us of
# srtt and 30 outliers of 1, 2, .. 30 s; B (bbr) holds 5,000, the body
# 20,000..24,989 us and 10 outliers of 1 .. 10 s. Lines shuffled.
TAIL = {"cubic": (20_000, 30), "bbr": (5_000, 10)}


def tail_log(path):
    """A flow log of TAIL, and the sorted srtt_us of each cc."""
    import random
    values = {cc: sorted([20_000 + i for i in range(n - k)] + [1_000_000 * (j + 1) for j in range(k)])
              for cc, (n, k) in TAIL.items()}
    start = time.time_ns() - 3_600_000_000_000  # within ClickHouse's TTL
    lines = []
    for cc, vs in values.items():
        for i, v in enumerate(vs):
            s = start + i * 1_000_000
            lines.append({"kind": "flow", "start_ns": s, "end_ns": s + 2_000_000_000, "fct_us": 50_000,
                          "duration_us": 2_000_000, "family": 4, "laddr": "198.18.0.2", "lport": 443,
                          "raddr": "198.18.0.1", "rport": 1024 + i % 60000, "dir": "passive", "outcome": "ok",
                          "cc": cc, "srtt_us": v, "min_rtt_us": 15_000, "rttvar_us": 1000, "bytes_acked": 20_000,
                          "bytes_received": 300, "segs_out": 20, "segs_in": 10, "retrans_segs": 0, "lost_segs": 0,
                          "peer_class": "client", "asn": 64501, "as_org": "", "cc_rule": None,
                          "experiment": None, "arm": None})
    random.Random(7).shuffle(lines)
    path.write_text("".join(json.dumps(r) + "\n" for r in lines))
    return values


def order_statistic(values, q):
    """compare's q-quantile: the order statistic of rank floor(q (n - 1))."""
    return values[int(q * (len(values) - 1))]


def test_quantiles_on_a_flow_log_with_a_known_tail(tmp_path):
    log = tmp_path / "tail.ndjson"
    values = tail_log(log)
    args = ["--flows", str(log), "--a", "cc=cubic", "--b", "cc=bbr", "--by", "all", "--metric", "rtt"]
    r = compare_json(*args, "--quantiles", "99.99,99.9")
    [g] = r["groups"]
    assert (g["n_a"], g["n_b"]) == (20_000, 5_000)
    # The exact order statistics: ranks 19979 and 19997 of A are outliers 10 and 28.
    assert g["a"]["p99.9"] == order_statistic(values["cubic"], 0.999) == 10_000_000
    assert g["a"]["p99.99"] == order_statistic(values["cubic"], 0.9999) == 28_000_000
    assert g["b"]["p99.9"] == order_statistic(values["bbr"], 0.999) == 5_000_000
    # 5,000 flows cannot hold p99.99 (it needs 10,000): null, not a number.
    assert g["b"]["p99.99"] is None
    assert set(g["a"]) == {"p99.9", "p99.99", "mean"}
    assert r["quantiles"] == [{"key": "p99.9", "q": 0.999, "min_n": 1000},
                              {"key": "p99.99", "q": 0.9999, "min_n": 10000}]
    # The default keeps p50, p90, p99.
    default = compare_json(*args)
    assert [q["key"] for q in default["quantiles"]] == ["p50", "p90", "p99"]
    assert default["groups"][0]["a"]["p99"] == order_statistic(values["cubic"], 0.99) == 20_000 + 19_799

    # The table: a column per quantile and arm, n/a and its reason.
    plot = tmp_path / "rtt.svg"
    table = tcpscope("compare", *args, "--quantiles", "50,99.9,99.99", "--plot", str(plot))
    assert table.returncode == 0, table.stderr
    header = next(line for line in table.stdout.splitlines() if line.startswith("group"))
    assert header.split()[:9] == ["group", "n_a", "n_b", "A", "p50", "A", "p99.9", "A", "p99.99"], header
    row = table.stdout.splitlines()[table.stdout.splitlines().index(header) + 1]
    assert "28.00s" in row and "n/a" in row, row
    assert "p99.99: 10000) cannot hold it: n/a" in " ".join(table.stdout.split()), table.stdout
    # The plot marks each quantile an arm holds: 3 in A, 2 in B.
    root = ET.parse(plot).getroot()
    marks = [(c.get("class"), c.get("data-quantile"), float(c.get("data-value")))
             for c in root.iter("{http://www.w3.org/2000/svg}circle")]
    assert sorted(marks) == sorted([("quantile-a", "p50", order_statistic(values["cubic"], 0.5)),
                                    ("quantile-a", "p99.9", 10_000_000), ("quantile-a", "p99.99", 28_000_000),
                                    ("quantile-b", "p50", order_statistic(values["bbr"], 0.5)),
                                    ("quantile-b", "p99.9", 5_000_000)]), marks

    # A bad value is named, exit 2.
    r = tcpscope("compare", *args, "--quantiles", "50,100")
    assert r.returncode == 2
    assert r.stderr.splitlines()[0].endswith('"100" is not one'), r.stderr
