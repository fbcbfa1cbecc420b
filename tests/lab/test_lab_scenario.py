"""The end-to-end scenario (scenarios/cdn_bbr_vs_cubic.py), run as a user runs
it but short: every download curl made is a flow tcpscope exported, in the
right peer class, in its own path's ASN (two client paths of one class side by
side) and with the congestion control the server used, and the distributions
it printed agree with the flow log and with the paths' physics. The delay line
passes its self-check first (labfixtures.delayline_checked)."""
import json
import os
import random
import signal
import subprocess
import sys

import pytest

from labfixtures import (HERE, TCPSCOPE, delayline_checked, lab_suite, lab_test,  # noqa: F401
                         labmod, need_root_and_build, need_tool)

SCENARIO = HERE / "scenarios" / "cdn_bbr_vs_cubic.py"


def cumulative(values, le):
    return sum(1 for v in values if v <= le)


def assert_histogram_is_the_log(buckets, values, what):
    """Every cumulative bucket count of an exported histogram equals the number
    of exact flow-log values at or below its bound."""
    assert buckets, f"{what}: no histogram exported"
    got = [(le, int(c)) for le, c in buckets]
    want = [(le, cumulative(values, le)) for le, _ in buckets]
    assert got == want, f"{what}: /metrics buckets {got} != flow log {want}"


def test_cdn_scenario_accounts_for_every_flow(tmp_path, delayline_checked):
    need_root_and_build()
    need_tool("nginx")
    need_tool("curl")
    assert TCPSCOPE.exists(), f"build first: {TCPSCOPE} missing"
    out = tmp_path / "cdn.json"
    tag = f"s{random.randrange(1 << 12):03x}"
    # Its own process group: on a timeout the scenario and its daemon go
    # together, then whatever its lab left is removed by tag.
    p = subprocess.Popen([sys.executable, str(SCENARIO), "--duration", "8", "--large-mb", "5",
                          "--json", str(out), "--workdir", str(tmp_path / "work"), "--tag", tag],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                         start_new_session=True)
    def stop():
        # SIGTERM unwinds the scenario (its lab, nginx and daemon go down).
        os.killpg(p.pid, signal.SIGTERM)
        try:
            p.communicate(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(p.pid, signal.SIGKILL)
            p.communicate()

    try:
        stdout, stderr = p.communicate(timeout=300)
    except subprocess.TimeoutExpired:
        stop()
        pytest.fail("the scenario did not finish within 300 s")
    finally:
        if p.poll() is None:   # this test was interrupted (SIGTERM, Ctrl-C, the budget)
            stop()
        labmod.down_all(tag)
    print(stdout)
    assert p.returncode == 0, stderr
    rep = json.loads(out.read_text())
    rtt = {info["peer_class"]: info["rtt_ms"] for info in rep["paths"].values()}
    assert set(rep["classes"]) == {"client", "pop-to-pop", "intra-pop"}
    for pc, by_cc in rep["classes"].items():
        for cc in ("cubic", "bbr"):
            row = by_cc[cc]
            names = [n for n, info in rep["paths"].items() if info["peer_class"] == pc]
            flows = [f for n in names for f in rep["runs"][cc]["flows"][n]]
            big = sum(1 for f in flows if f["size"] >= 3_000_000)
            where = f"{pc}/{cc}"
            assert row["curl_started"] > 0, f"{where}: no traffic"
            assert row["curl_ok"] == row["curl_started"], f"{where}: failed downloads"
            # One passive flow per download, labelled with the server's CC.
            # (Another tcpscope daemon with cc_policy rules on this host would
            # change the CC of these sockets too: its sock_ops program sees them.)
            assert row["flows_exported"] == row["curl_started"], (where, row)
            assert row["flows_ok_in_log"] == row["curl_started"], (where, row)
            # Every size class: the histogram holds exactly the downloads of
            # that size (the HTTP response header adds a few hundred bytes to
            # each object: no object of the mix is that close to a boundary),
            # bucket for bucket what the flow log says.
            assert set(row["fct"]) == {"lt_100k", "100k_1m", "1m_3m", "ge_3m"}
            for sc, f in row["fct"].items():
                assert f["n"] == f["curl_n"], (where, sc, f["n"], f["curl_n"])
                if f["n"]:
                    assert_histogram_is_the_log(f["buckets"], f["log_values_s"],
                                                f"{where} FCT {sc}")
                    assert f["metrics_s"]["0.5"] is not None
            assert row["fct"]["lt_100k"]["n"] > 0 and row["fct"]["ge_3m"]["n"] > 0, where
            assert row["throughput_n"] == big, (where, row["throughput_n"], big)
            med = row["fct"]["lt_100k"]["log_s"]["0.5"]
            # Server side: SYN in .. ACK of the last byte is at least two
            # round trips (handshake, request/response) on shaped paths.
            if rtt[pc] > 0:
                assert med >= 2 * rtt[pc] / 1e3, (where, med)
            else:
                assert med < 0.010, (where, med)
            # The proxy-log clock starts after the handshake and ends when
            # the last byte is handed to the kernel: it is shorter.
            ng = row["fct"]["lt_100k"]["nginx_request_time_s"]["0.5"]
            assert ng is not None and ng < med, (where, ng, med)

    # Side by side: each path has its own ASN (c1 and c2 share the class
    # "client"); the flows tcpscope counted for an ASN are exactly the
    # downloads made on that path, and every flow-log record of the path
    # carries its ASN.
    per_path = rep["per_path"]
    assert set(per_path) == set(rep["paths"])
    asns = {info["asn"] for info in rep["paths"].values()}
    assert len(asns) == len(rep["paths"]) and 0 not in asns
    client_paths = [n for n, info in rep["paths"].items() if info["peer_class"] == "client"]
    assert len(client_paths) >= 2, "two client paths side by side"
    client_limit = 0.0
    for name, by_cc in per_path.items():
        asn = rep["paths"][name]["asn"]
        for cc in ("cubic", "bbr"):
            row = by_cc[cc]
            where = f"path {name} (asn {asn})/{cc}"
            assert row["curl_started"] > 0, where
            assert row["flows_exported_asn"] == row["curl_started"], (where, row)
            assert row["flows_exported_asn_other_class"] == 0, (where, row)
            assert row["log_flows"] == row["curl_started"], (where, row)
            assert row["log_asns"] == [asn], (where, row["log_asns"])
            # Throughput of the path's >= 3 MB flows: the ASN's histogram is
            # the flow log's values, and none beats the path's bottleneck.
            vals = row["throughput_log_values_bps"]
            if not vals:
                continue
            assert_histogram_is_the_log(row["throughput_buckets"], vals, f"{where} throughput")
            limit = row["goodput_limit_bps"]
            if limit is None:
                continue
            if row["peer_class"] == "client":
                client_limit = max(client_limit, limit)
            assert max(vals) <= 1.01 * limit, (where, max(vals), limit)
            # The histogram's quantiles cannot leave the bucket holding the limit.
            bound = min(le for le, _ in row["throughput_buckets"] if le >= limit)
            for q, v in row["throughput_metrics_bps"].items():
                assert v is not None and 0 < v <= bound, (where, q, v, bound)
            assert all(0 < v for v in vals)
    # And on the unshaped path the median flow is faster than the client
    # paths' bottleneck lets any flow be: the limits are what bind there.
    for cc in ("cubic", "bbr"):
        i_vals = [v for n, by_cc in per_path.items() for v in
                  by_cc[cc]["throughput_log_values_bps"] if by_cc[cc]["goodput_limit_bps"] is None]
        if i_vals and client_limit:
            assert sorted(i_vals)[len(i_vals) // 2] > client_limit, (cc, i_vals, client_limit)
