"""The end-to-end scenario (scenarios/cdn_bbr_vs_cubic.py), run as a user runs
it but short: every download curl made is a flow tcpscope exported, in the
right peer class and with the congestion control the server used, and the
distributions it printed agree with the paths' physics."""
import json
import os
import random
import signal
import subprocess
import sys

import pytest

from labfixtures import HERE, TCPSCOPE, labmod, need_root_and_build, need_tool

SCENARIO = HERE / "scenarios" / "cdn_bbr_vs_cubic.py"


def test_cdn_scenario_accounts_for_every_flow(tmp_path):
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
    try:
        stdout, stderr = p.communicate(timeout=300)
    except subprocess.TimeoutExpired:
        os.killpg(p.pid, signal.SIGTERM)
        try:
            p.communicate(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(p.pid, signal.SIGKILL)
            p.communicate()
        pytest.fail("the scenario did not finish within 300 s")
    finally:
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
            small = sum(1 for f in flows if f["size"] < 100_000)
            big = sum(1 for f in flows if f["size"] >= 3_000_000)
            where = f"{pc}/{cc}"
            assert row["curl_started"] > 0, f"{where}: no traffic"
            assert row["curl_ok"] == row["curl_started"], f"{where}: failed downloads"
            # One passive flow per download, labelled with the server's CC.
            # (Another tcpscope daemon with cc_policy rules on this host would
            # change the CC of these sockets too: its sock_ops program sees them.)
            assert row["flows_exported"] == row["curl_started"], (where, row)
            assert row["flows_ok_in_log"] == row["curl_started"], (where, row)
            # The histograms hold exactly the small / >= 3 MB downloads (the
            # HTTP response header adds a few hundred bytes to each object).
            assert row["fct_small_n"] == small, (where, row["fct_small_n"], small)
            assert row["throughput_n"] == big, (where, row["throughput_n"], big)
            med = row["fct_small_log_s"]["0.5"]
            if small:
                # Server side: SYN in .. ACK of the last byte is at least two
                # round trips (handshake, request/response) on shaped paths.
                if rtt[pc] > 0:
                    assert med >= 2 * rtt[pc] / 1e3, (where, med)
                else:
                    assert med < 0.010, (where, med)
                # The proxy-log clock starts after the handshake and ends when
                # the last byte is handed to the kernel: it is shorter.
                ng = row["nginx_request_time_small_s"]["0.5"]
                assert ng is not None and ng < med, (where, ng, med)
