"""Enrichment and the Prometheus exporter against real traffic: client
addresses mapped to private ASNs (one MaxMind DB built here, one pfx2as file)
and peer classes; after known traffic, the scraped series match the flow log
exactly, a real Prometheus server agrees, and bad ASN data is refused at start
and survived at SIGHUP."""
import collections
import json
import shutil
import signal
import subprocess
import sys
import time
import urllib.parse
import urllib.request
from pathlib import Path

import pytest

from conftest import ROOT, TCPSCOPE, TRAFFIC, Daemon, free_port, sh, wait_for

MAKE_MMDB = ROOT / "tests" / "data" / "asn" / "make_test_mmdb.pl"
OUR_ASNS = {64500, 64512, 64513, 64514, 65001}


class Lab:
    """One server, one client namespace with five source addresses, each
    standing for a different AS / peer class."""

    def __init__(self, net, tmp: Path):
        self.net = net
        n = net.cli_v4.split(".")[2]
        self.sources = {  # source address -> (asn, as_org, peer_class)
            f"198.18.{n}.1": (64512, "Test Wireless", "client"),
            f"198.18.{n}.3": (64513, "", "client"),
            f"198.18.{n}.5": (64514, "", "pop-to-pop"),
            # in the MMDB's /24, but the config's /32 makes it intra-pop
            f"198.18.{n}.7": (64999, "Whole Lab Net", "intra-pop"),
            net.cli_v6: (65001, "Test Six", "client"),
        }
        for addr in self.sources:
            if addr not in (net.cli_v4, net.cli_v6):
                net.ns(net.cli, "ip", "addr", "add", f"{addr}/24", "dev", net.veth_cli)
        # The MaxMind DB knows .1, the v6 client and the servers; the pfx2as
        # file knows .3 and .5 (and, more specifically, the v4 server).
        networks = tmp / "networks.tsv"
        # (later lines override earlier ones where they overlap)
        networks.write_text(f"198.18.{n}.0/24\t64999\tWhole Lab Net\n"
                            f"198.18.{n}.1/32\t64512\tTest Wireless\n"
                            f"{net.cli_v6}/128\t65001\tTest Six\n"
                            f"{net.srv_v6}/128\t64500\tTest Origin\n")
        self.mmdb = tmp / "asn.mmdb"
        sh("perl", str(MAKE_MMDB), "--input", str(networks), "--output", str(self.mmdb))
        self.pfx2as = tmp / "pfx2as.tsv"
        self.pfx2as.write_text(f"198.18.{n}.3\t32\t64513\n198.18.{n}.5\t32\t64514\n"
                               f"198.18.{n}.2\t32\t64500\n")
        self.config = tmp / "tcpscope.yaml"
        self.config.write_text(f"""
asn:
  mmdb: {self.mmdb}
  prefix_file: {self.pfx2as}
peer_classes:
  - name: intra-pop
    prefixes: ["198.18.{n}.7/32"]
  - name: pop-to-pop
    asns: [64514]
  - name: origin
    asns: [64500]
default_peer_class: client
snapshot_interval_s: 1
""")

    def run_traffic(self, tmp):
        net = self.net
        plan = []  # (source, count, req, resp)
        for i, src in enumerate(self.sources):
            plan.append((src, 3 + i, 1000 * (i + 1), 20000 * (i + 1)))
        v4 = [p for p in plan if ":" not in p[0]]
        v6 = [p for p in plan if ":" in p[0]]
        s4, _ = net.serve(tmp, net.srv_v4, sum(p[1] for p in v4), port=8080)
        s6, _ = net.serve(tmp, net.srv_v6, sum(p[1] for p in v6), port=8081)
        for src, count, req, resp in plan:
            dst, port = (net.srv_v6, 8081) if ":" in src else (net.srv_v4, 8080)
            out = net.client(tmp, dst, count=count, req=req, resp=resp, port=port, source=src)
            assert all("error" not in c for c in out), out
        s4.wait(timeout=60)
        s6.wait(timeout=60)
        return plan


def series(metrics_text, name):
    """{frozenset(labels): value} for one metric name."""
    out = {}
    for line in metrics_text.splitlines():
        if not line.startswith(name + "{"):
            continue
        labels_part, value = line.rsplit(" ", 1)
        body = labels_part[len(name) + 1:-1]
        labels = dict(kv.split("=", 1) for kv in body.split(","))
        out[frozenset((k, v.strip('"')) for k, v in labels.items())] = float(value)
    return out


def sum_by(series_map, keys, keep=lambda d: True):
    agg = collections.Counter()
    for labels, v in series_map.items():
        d = dict(labels)
        if keep(d):
            agg[tuple(d[k] for k in keys)] += v
    return agg


@pytest.fixture
def lab(net, tmp_path):
    if shutil.which("perl") is None:
        pytest.skip("perl is needed to build the test MaxMind DB")
    return Lab(net, tmp_path)


@pytest.fixture
def lab_daemon(lab, tmp_path):
    home = tmp_path / "daemon"
    home.mkdir()
    d = Daemon(home, extra_args=("--config", str(lab.config)))
    yield d
    assert d.stop() == 0, d.stderr_text()


def test_records_are_enriched_and_metrics_match_the_flow_log(lab, lab_daemon, net, tmp_path):
    plan = lab.run_traffic(tmp_path)
    n_conn = sum(p[1] for p in plan)
    recs = lab_daemon.wait_records(net, 2 * n_conn)
    assert len(recs) == 2 * n_conn

    # Enrichment: the server's records carry the client address's ASN, org and class;
    # the clients' records carry the server's (origin, 64500).
    for r in recs:
        if r["dir"] == "passive":
            asn, org, cls = lab.sources[r["raddr"]]
            assert (r["asn"], r["as_org"], r["peer_class"]) == (asn, org, cls), r
        else:
            assert (r["asn"], r["peer_class"]) == (64500, "origin"), r
            assert r["as_org"] in ("", "Test Origin")

    # Every series of our ASNs equals the sum over the flow log's records.
    time.sleep(0.5)
    text = lab_daemon.metrics()
    ours = lambda d: d["asn"] not in ("0", "other") and int(d["asn"]) in OUR_ASNS | {64999}
    want = collections.defaultdict(collections.Counter)
    for r in recs:
        key = (r["peer_class"], str(r["asn"]), r["cc"])
        want["tcpscope_flows_total"][key] += 1
        want["tcpscope_bytes_acked_total"][key] += r["bytes_acked"]
        want["tcpscope_bytes_received_total"][key] += r["bytes_received"]
        want["tcpscope_segments_out_total"][key] += r["segs_out"]
        want["tcpscope_retransmitted_segments_total"][key] += r["retrans_segs"]
        want["tcpscope_flow_completion_seconds_count"][key] += 1
    for name, expected in want.items():
        got = sum_by(series(text, name), ("peer_class", "asn", "cc"), ours)
        expected = {k: v for k, v in expected.items() if v}
        got = {k: v for k, v in got.items() if v}
        assert got == expected, name

    # Flow counts by direction and outcome as well.
    got = sum_by(series(text, "tcpscope_flows_total"), ("asn", "dir", "outcome"), ours)
    exp = collections.Counter((str(r["asn"]), r["dir"], r["outcome"]) for r in recs)
    assert got == exp

    # promtool accepts the exposition.
    if shutil.which("promtool"):
        p = subprocess.run(["promtool", "check", "metrics"], input=text, capture_output=True, text=True)
        assert p.returncode == 0, p.stdout + p.stderr


def test_prometheus_server_sees_per_asn_counts(lab, lab_daemon, net, tmp_path):
    prom = shutil.which("prometheus")
    if prom is None:
        pytest.skip("Debian's prometheus package is not installed")
    plan = lab.run_traffic(tmp_path)
    n_conn = sum(p[1] for p in plan)
    recs = lab_daemon.wait_records(net, 2 * n_conn)
    expected = collections.Counter(str(r["asn"]) for r in recs if r["dir"] == "passive")

    port = free_port()
    cfg = tmp_path / "prometheus.yml"
    cfg.write_text(f"""
global:
  scrape_interval: 1s
scrape_configs:
  - job_name: tcpscope
    static_configs:
      - targets: ["127.0.0.1:{lab_daemon.port}"]
""")
    log = open(tmp_path / "prometheus.log", "w")
    p = subprocess.Popen([prom, f"--config.file={cfg}", f"--storage.tsdb.path={tmp_path / 'tsdb'}",
                          f"--web.listen-address=127.0.0.1:{port}"], stdout=log, stderr=log)
    try:
        q = 'sum by (asn) (tcpscope_flows_total{dir="passive",asn=~"64512|64513|64514|64999|65001"})'
        url = f"http://127.0.0.1:{port}/api/v1/query?" + urllib.parse.urlencode({"query": q})

        def answer():
            try:
                with urllib.request.urlopen(url, timeout=5) as r:
                    data = json.load(r)
            except OSError:
                return None
            got = {s["metric"]["asn"]: int(float(s["value"][1])) for s in data["data"]["result"]}
            return got if got == dict(expected) else None

        got = wait_for(answer, 60, interval=1, what="Prometheus to return the per-ASN counts")
        assert got == dict(expected)
    finally:
        p.terminate()
        p.wait(timeout=30)
        log.close()


def test_unreadable_asn_database_at_start_is_one_line(tmp_path):
    garbage = tmp_path / "garbage.mmdb"
    garbage.write_bytes(b"\x00not a maxmind db\xff" * 100)
    cfg = tmp_path / "bad.yaml"
    cfg.write_text(f"asn:\n  mmdb: {garbage}\n")
    r = subprocess.run([str(TCPSCOPE), "run", "--config", str(cfg), "--listen", f"127.0.0.1:{free_port()}"],
                       capture_output=True, text=True, timeout=30)
    assert r.returncode != 0
    lines = [l for l in r.stderr.splitlines() if l.strip()]
    assert len(lines) == 1, r.stderr
    assert str(garbage) in lines[0] or "garbage.mmdb" in lines[0]


def test_sighup_with_broken_asn_data_keeps_the_old_data(lab, lab_daemon, net, tmp_path):
    lab.run_traffic(tmp_path)
    plan_conn = sum(3 + i for i in range(len(lab.sources)))
    lab_daemon.wait_records(net, 2 * plan_conn)
    before = lab_daemon.metric_value("tcpscope_flows_total", {"asn": "64513"})
    assert before and before > 0

    lab.pfx2as.write_text("this is\tnot a\tprefix file\n")
    lab_daemon.proc.send_signal(signal.SIGHUP)
    wait_for(lambda: lab_daemon.metric_value("tcpscope_config_reloads_total", {"result": "failed"}), 10,
             what="the failed reload to be counted")
    assert "reload failed" in lab_daemon.stderr_text()
    assert lab_daemon.proc.poll() is None

    # The old prefix data is still in force and the counters keep counting.
    lab.run_traffic(tmp_path)
    lab_daemon.wait_records(net, 4 * plan_conn)
    after = lab_daemon.metric_value("tcpscope_flows_total", {"asn": "64513"})
    assert after == 2 * before


def test_long_lived_flow_is_visible_while_it_runs(lab, lab_daemon, net, tmp_path):
    """A download still in progress shows in /api/v1/flows and the active-flow
    gauge (snapshots every second in this config), enriched like finished ones."""
    net.ns(net.srv, "tc", "qdisc", "add", "dev", net.veth_srv, "root", "tbf",
           "rate", "4mbit", "burst", "16kb", "latency", "500ms")
    src = next(a for a, (asn, _, cls) in lab.sources.items() if asn == 64514)  # pop-to-pop
    server, _ = net.serve(tmp_path, net.srv_v4, 1)
    client = net.spawn(net.cli, sys.executable, str(TRAFFIC), "client", "--addr", net.srv_v4,
                       "--port", "8080", "--req", "10", "--resp", "3000000", "--source", src,
                       "--out", str(tmp_path / "slow.jsonl"))

    def open_flow():
        with urllib.request.urlopen(lab_daemon.url + "/api/v1/flows", timeout=5) as r:
            flows = json.load(r)
        mine = [f for f in flows if f["raddr"] == src and f["dir"] == "passive"]
        return mine[0] if mine and mine[0]["bytes_acked"] > 100_000 else None

    f = wait_for(open_flow, 15, interval=0.2, what="the running download in /api/v1/flows")
    assert f["peer_class"] == "pop-to-pop" and f["asn"] == 64514
    assert f["outcome"] == "ok" and f["srtt_us"] > 0 and f["cwnd"] > 0
    assert client.poll() is None, "the transfer should still be running"
    gauge = lab_daemon.metric_value("tcpscope_active_flows", {"peer_class": "pop-to-pop"})
    assert gauge is not None and gauge >= 1
    client.wait(timeout=60)
    server.wait(timeout=60)
