"""`tcpscope compare --prometheus URL` against Debian's real Prometheus
scraping the real daemon, on real traffic with two congestion controls
(the lab and the traffic generator of test_compare.py).

increase() counts exactly only over a range whose ends fall on samples of
series that already exist: a series created inside the range loses the
value of its first sample, and ends between samples are extrapolated. So a
warm-up round creates every series before the range starts, the range runs
from one scrape (T0, before the measured traffic) to a later one (T1, after
it), and the flow log is cut to the measured traffic. Then the counts per
group and arm must equal --flows' exactly, and each --flows median must lie
in the bucket --prometheus reports for it.
"""
import base64
import http.server
import json
import os
import subprocess
import sys
import threading
import time
import urllib.parse
import urllib.request
from pathlib import Path

import pytest

from conftest import TCPSCOPE, free_port, stop_process, wait_for
from testlib import FixedAnswer
from test_compare import PORTS, lab, run_traffic, tcpscope  # noqa: F401  (lab: a fixture)

PROMETHEUS = Path("/usr/bin/prometheus")
# Per (source address, cc): response sizes and counts, in every fct size class below 3 MB.
PLAN = [(30_000, 24), (300_000, 22), (1_500_000, 21)]
WARMUP = [(size, 2) for size, _ in PLAN]
# The lab series the measured traffic adds to, per histogram: for each cc the
# clients' requests (ASN 64500, lt_100k) and both sources' responses (64501,
# 64502) in 3 size classes; flows of both ends (3 ASNs) in 3 size classes.
SERIES = {'tcpscope_transfer_seconds_count{peer_class="lab",direction="send"}': 2 * (1 + 2 * 3),
          'tcpscope_flow_completion_seconds_count{peer_class="lab"}': 2 * 3 * 3}
SEL = ["--a", "cc=cubic,peer_class=lab", "--b", "cc=bbr,peer_class=lab"]


@pytest.fixture
def prometheus(lab, tmp_path):
    """Prometheus scraping the lab daemon every second; stopped whatever happens."""
    if not PROMETHEUS.exists():
        pytest.skip("needs Debian's prometheus package (/usr/bin/prometheus)")
    daemon, _ = lab
    port = free_port()
    config = tmp_path / "prometheus.yml"
    config.write_text(f"""
global:
  scrape_interval: 1s
  scrape_timeout: 1s
  evaluation_interval: 1s
scrape_configs:
  - job_name: tcpscope
    static_configs:
      - targets: ["127.0.0.1:{daemon.port}"]
""")
    log = open(tmp_path / "prometheus.log", "w")
    proc = subprocess.Popen([str(PROMETHEUS), f"--config.file={config}", f"--storage.tsdb.path={tmp_path / 'tsdb'}",
                             f"--web.listen-address=127.0.0.1:{port}"], stdout=log, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    try:
        wait_for(lambda: proc.poll() is not None or ready(url), 30, what="prometheus ready")
        assert proc.poll() is None, (tmp_path / "prometheus.log").read_text()[-2000:]
        yield url
    finally:
        stop_process(proc, timeout=15)
        log.close()


def ready(url):
    try:
        with urllib.request.urlopen(url + "/-/ready", timeout=2) as r:
            return r.status == 200
    except OSError:
        return False


def query(url, promql):
    with urllib.request.urlopen(url + "/api/v1/query?" + urllib.parse.urlencode({"query": promql}), timeout=10) as r:
        answer = json.load(r)
    assert answer["status"] == "success", answer
    return answer["data"]["result"]


def last_scrape(url):
    """The timestamp (unix s) of the newest successful scrape of the daemon.
    timestamp() of a plain selector is the sample's own time (of an
    expression such as `up == 1` it would be the evaluation time)."""
    result = query(url, 'timestamp(up{job="tcpscope"})')
    if not result or query(url, 'up{job="tcpscope"}')[0]["value"][1] != "1":
        return None
    return float(result[0]["value"][1])


def scrape_after(url, t):
    """Waits for a scrape that started after t; its timestamp."""
    wait_for(lambda: (last_scrape(url) or 0) > t, 20, what=f"a scrape after {t}")
    return last_scrape(url)


def lab_flows(daemon, since_ns):
    return [r for r in daemon.all_records() if r["peer_class"] == "lab" and r["start_ns"] >= since_ns]


def compare_json(*args):
    r = tcpscope("compare", *args, "--json")
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)


def test_prometheus_counts_and_buckets_agree_with_the_flow_log(lab, prometheus, net, tmp_path):
    daemon, sources = lab
    # Warm-up: every (asn, cc, size class) series exists before T0.
    missing = SERIES
    for round_ in range(5):
        run_traffic(net, tmp_path, sources, WARMUP, f"-warmup{round_}")
        t0 = scrape_after(prometheus, time.time() + 1)
        missing = {s: n for s, n in SERIES.items() if len(query(prometheus, f"{s} @ {t0:.3f}")) < n}
        if not missing:
            break
    assert not missing, f"series still missing after warm-up: {missing}"

    start_ns = time.time_ns()
    n_conn = run_traffic(net, tmp_path, sources, PLAN, "-measured")
    wait_for(lambda: len(lab_flows(daemon, start_ns)) >= 2 * n_conn, 30, what=f"{2 * n_conn} lab records")
    t1 = scrape_after(prometheus, time.time() + 1)
    # From 1 ms before T0 to 1 ms after T1: both scrapes inside, nothing to extrapolate.
    t0_ms, t1_ms = round(t0 * 1000), round(t1 * 1000)
    window = ("--range", f"{t1_ms - t0_ms + 2}ms", "--time", f"{(t1_ms + 1) / 1000:.3f}")

    # The flow log of the measured traffic only (flows and transfers started after T0).
    cut = tmp_path / "measured.ndjson"
    with open(daemon.flow_log) as src, open(cut, "w") as dst:
        for line in src:
            if line.endswith("\n") and json.loads(line).get("start_ns", 0) >= start_ns:
                dst.write(line)

    checked = 0
    for unit in ("transfer", "flow"):
        args = ("--metric", "fct", "--unit", unit, "--by", "asn", *SEL)
        exact = compare_json("--flows", str(cut), *args)
        binned = compare_json("--prometheus", prometheus, *window, *args)
        assert binned["source"] == f"prometheus {prometheus}"
        key = lambda g: (g["group"], g["size_class"])
        e_groups = {key(g): g for g in exact["groups"]}
        b_groups = {key(g): g for g in binned["groups"]}
        assert e_groups.keys() == b_groups.keys(), (unit, e_groups.keys(), b_groups.keys(), binned["notes"])
        assert {g for g, _ in e_groups} == {"64500", "64501", "64502"}, e_groups.keys()
        for k, e in e_groups.items():
            b = b_groups[k]
            where = f"fct per {unit} {k}"
            assert (e["n_a"], e["n_b"]) == (b["n_a"], b["n_b"]), where
            for arm in ("a", "b"):
                if e[f"n_{arm}"] == 0:
                    continue
                lo, hi = b[arm]["bucket_bounds"]["p50"]
                p50 = e[arm]["p50"]
                assert lo * (1 - 1e-9) < p50 <= (hi if hi is not None else float("inf")) * (1 + 1e-9), \
                    f"{where} {arm}: --flows median {p50} us outside the reported bucket ({lo}, {hi}]"
                checked += 1
            # No verdict finer than the buckets: a decided group's medians are two or more buckets apart.
            if b["verdict"] in ("b better", "a better"):
                assert b["resolution_note"] is None, where
                ca, cb = b["a"]["bucket_bounds"]["p50"], b["b"]["bucket_bounds"]["p50"]
                assert ca[1] is None or cb[1] is None or ca[1] < cb[0] or cb[1] < ca[0], where
            if b["resolution_note"] is not None:
                assert b["verdict"] == "no significant difference", where
    assert checked >= 12

    # --by service: the daemon's service label (the top-N by bytes, "other",
    # "" for the unknown owner, which Prometheus drops and compare reads back
    # as group "") against the owners' names in the flow log. The lab's few
    # services all fit in the top-N (services.top_n 20), so groups and counts
    # agree as for asn.
    for unit in ("transfer", "flow"):
        args = ("--metric", "fct", "--unit", unit, "--by", "service", *SEL)
        counts = lambda answer: {(g["group"], g["size_class"]): (g["n_a"], g["n_b"]) for g in answer["groups"]}
        exact = counts(compare_json("--flows", str(cut), *args))
        binned = compare_json("--prometheus", prometheus, *window, *args)
        assert exact, unit
        assert exact == counts(binned), (unit, binned["notes"])
        assert any("service \"other\"" in note for note in binned["notes"]), binned["notes"]

    table = tcpscope("compare", "--prometheus", prometheus, *window, "--metric", "fct", "--by", "asn", *SEL)
    assert table.returncode == 0, table.stderr
    words = " ".join(table.stdout.split())  # footnotes are wrapped
    for text in ("Histogram buckets", "geometric midpoint", "increase()", "source: prometheus"):
        assert text in words, text


class Junk(FixedAnswer):
    authorization = []  # the Authorization header of every request
    body = b"<html>this is not a query API</html>"
    content_type = "text/html"

    def seen(self):
        Junk.authorization.append(self.headers.get("Authorization"))


def test_unreachable_and_garbage_answers_fail_in_one_line():
    unreachable = f"http://127.0.0.1:{free_port()}"
    r = tcpscope("compare", "--prometheus", unreachable, *SEL, "--timeout-ms", "3000", timeout=30)
    assert r.returncode == 1, r
    assert r.stderr.count("\n") == 1, r.stderr
    assert r.stderr.startswith(f"tcpscope compare: GET {unreachable}/api/v1/query: connect"), r.stderr

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Junk)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        url = f"http://127.0.0.1:{server.server_address[1]}"
        # The daemon's password (TCPSCOPE_BASIC_AUTH) is not sent to the query API.
        r = subprocess.run([str(TCPSCOPE), "compare", "--prometheus", url, *SEL], capture_output=True, text=True,
                           timeout=30, env={**os.environ, "TCPSCOPE_BASIC_AUTH": "daemon:secret"})
        assert r.returncode == 1, r
        assert r.stderr == f"tcpscope compare: GET {url}/api/v1/query: answer is not JSON (not a Prometheus query " \
                           f"API?)\n", r.stderr
        assert Junk.authorization == [None]
        # Credentials in the URL are sent, and never shown.
        with_user = url.replace("http://", "http://reader:s3cret@")
        r = tcpscope("compare", "--prometheus", with_user, *SEL, timeout=30)
        assert r.returncode == 1 and "s3cret" not in r.stderr, r
        assert r.stderr.startswith("tcpscope compare: GET http://***@127.0.0.1:"), r.stderr
        assert Junk.authorization[-1] == "Basic " + base64.b64encode(b"reader:s3cret").decode()
    finally:
        server.shutdown()
        server.server_close()
