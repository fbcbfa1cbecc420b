"""export.kafka end to end on real servers: the daemon -> a real Kafka broker
-> ClickHouse's Kafka engine -> the MergeTree tables of
packaging/clickhouse/*.sql, and `compare --clickhouse` on them against
`compare --flows` on the daemon's own flow log of the same traffic. Then the
faults: the broker away for 30 s under load, and a ClickHouse that is
unreachable or answers garbage.

The servers (tests/fleet/servers.py) are started and stopped by the tests:
Apache Kafka 4.x from Maven Central on Debian's OpenJDK, Debian's
clickhouse-server.
"""
import http.server
import json
import re
import socket
import sys
import threading
import time
import uuid
from pathlib import Path

import pytest

from conftest import ROOT, Daemon, free_port, metric_value, wait_for
from testlib import FixedAnswer
from test_compare import PORTS, RELATIVE_ACCURACY, has_bbr, run_traffic, tcpscope

sys.path.insert(0, str(ROOT / "tests" / "fleet"))
from servers import KAFKA_FROM_TOPIC_START, ClickHouseServer, KafkaBroker  # noqa: E402

SQL_DIR = ROOT / "packaging" / "clickhouse"


@pytest.fixture(scope="module")
def kafka():
    with KafkaBroker() as broker:
        yield broker


# A consumer group's first read starts at the topic's beginning, not at its
# end: 18.16's Kafka engine joins the group a few seconds after the table is
# made, and records the daemon wrote before that would be skipped
# (packaging/clickhouse/flows.sql says the same to operators).


@pytest.fixture(scope="module")
def clickhouse():
    with ClickHouseServer(extra_config=KAFKA_FROM_TOPIC_START) as ch:
        yield ch


def apply_schema(ch, kafka, topics):
    """The shipped SQL, pointed at the test's broker and topics."""
    for unit, topic in topics.items():
        sql = (SQL_DIR / f"{unit}.sql").read_text()
        sql = sql.replace("'kafka-1:9092'", f"'{kafka.bootstrap}'").replace(f"'tcpscope.{unit}'", f"'{topic}'")
        ch.execute_script(sql)


def fresh_pipeline(kafka, clickhouse, partitions):
    """Topics of their own and the shipped schema reading them into an empty
    tcpscope database; returns the topics ({"flows": ..., "transfers": ...})."""
    tag = uuid.uuid4().hex[:8]
    topics = {"flows": f"t{tag}.flows", "transfers": f"t{tag}.transfers"}
    for t in topics.values():
        kafka.create_topic(t, partitions=partitions)
    clickhouse.query("DROP DATABASE IF EXISTS tcpscope")
    apply_schema(clickhouse, kafka, topics)
    return topics


def kafka_config(kafka, topics, **extra):
    lines = [f'    brokers: ["{kafka.bootstrap}"]', f"    topic_flows: {topics['flows']}",
             f"    topic_transfers: {topics['transfers']}", "    linger_ms: 5"]
    lines += [f"    {k}: {v}" for k, v in extra.items()]
    return "export:\n  kafka:\n" + "\n".join(lines) + "\n"


def kafka_counts(daemon, kind):
    return {result: daemon.metric_value("tcpscope_kafka_records_total", {"kind": kind, "result": result})
            for result in ("queued", "delivered", "failed", "dropped")}


def start_lab_daemon(net, tmp_path, extra_config):
    """test_compare's lab: a second client address, the two clients in AS64501
    and AS64502 (the server in AS64500), all of them peer class "lab"; the
    daemon with `extra_config` too. Returns it and the clients' addresses."""
    prefix = f"198.18.{net.cli_v4.split('.')[2]}"
    net.ns(net.cli, "ip", "addr", "add", f"{prefix}.3/24", "dev", net.veth_cli)
    pfx2as = tmp_path / "pfx2as.tsv"
    pfx2as.write_text(f"{prefix}.1\t32\t64501\n{prefix}.3\t32\t64502\n{prefix}.2\t32\t64500\n")
    config = tmp_path / "tcpscope.yaml"
    config.write_text(f"asn:\n  prefix_file: {pfx2as}\npeer_classes:\n  - name: lab\n"
                      f"    prefixes: [\"{prefix}.0/24\"]\n" + extra_config)
    home = tmp_path / "daemon"
    home.mkdir()
    return Daemon(home, extra_args=("--config", str(config))), [f"{prefix}.1", f"{prefix}.3"]


@pytest.fixture
def lab(net, tmp_path, kafka, clickhouse):
    """test_compare's lab (two ASNs, cubic and bbr) with the records going to Kafka."""
    if not has_bbr():
        pytest.skip("the kernel offers no bbr")
    topics = fresh_pipeline(kafka, clickhouse, partitions=3)
    d, clients = start_lab_daemon(net, tmp_path, kafka_config(kafka, topics))
    try:
        yield d, clients
    finally:
        assert d.stop() == 0, d.stderr_text()


# What compare --clickhouse is checked on: metric, unit, grouping.
COMPARED = (("fct", "flow", "asn"), ("throughput", "flow", "asn"), ("fct", "transfer", "asn"),
            ("throughput", "transfer", "cc"), ("rtt", "flow", "peer_class"), ("retrans", "flow", "asn"),
            ("fct", "flow", "size_class"))


def assert_clickhouse_agrees_with_flow_log(url, flow_log, sel):
    """compare --clickhouse URL against compare --flows LOG of the same records,
    arms `sel`, for each of COMPARED: the same groups, the same counts in each,
    every p50/p90/p99 within the sketches' relative accuracy."""
    for metric, unit, by in COMPARED:
        args = ["--metric", metric, "--unit", unit, "--by", by, *sel, "--json"]
        r = tcpscope("compare", "--flows", str(flow_log), *args)
        assert r.returncode == 0, r.stderr
        exact = json.loads(r.stdout)
        r = tcpscope("compare", "--clickhouse", url, *args)
        assert r.returncode == 0, r.stderr
        fleet = json.loads(r.stdout)
        where = f"{metric} per {unit} by {by}"
        assert fleet["source"].startswith("clickhouse "), fleet["source"]
        assert fleet["relative_accuracy"] == RELATIVE_ACCURACY
        key = lambda g: (g["group"], g["size_class"])
        e_groups = {key(g): g for g in exact["groups"]}
        c_groups = {key(g): g for g in fleet["groups"]}
        assert e_groups.keys() == c_groups.keys(), where
        assert e_groups or (metric, unit) == ("throughput", "transfer"), where
        for k, e in e_groups.items():
            c = c_groups[k]
            assert (e["n_a"], e["n_b"]) == (c["n_a"], c["n_b"]), f"{where} {k}"
            for arm in ("a", "b"):
                for q in ("p50", "p90", "p99"):
                    x, y = e[arm][q], c[arm][q]
                    if x is None or x == 0:
                        assert y == x, f"{where} {k} {arm} {q}"
                    else:
                        assert abs(y - x) / x <= RELATIVE_ACCURACY + 1e-9, f"{where} {k} {arm} {q}: {x} vs {y}"


def assert_stored_as_logged(ch, row, **settings):
    """Every value of the flow record `row` is in tcpscope.flows exactly as
    the flow log has it."""
    got = json.loads(ch.query(
        "SELECT * FROM tcpscope.flows WHERE start_ns = {start_ns} AND lport = {lport} AND rport = {rport} "
        "FORMAT JSONEachRow".format(**row), **settings))
    for k, v in row.items():
        want = int(v) if isinstance(v, bool) else v
        assert got[k] == want, (k, got[k], want)


def test_clickhouse_compare_equals_the_flow_log(lab, net, tmp_path, clickhouse):
    daemon, sources = lab
    n_conn = run_traffic(net, tmp_path, sources)
    lab_flows = lambda: [r for r in daemon.all_records() if r["peer_class"] == "lab" and r["start_ns"] >= net.created_ns]
    wait_for(lambda: len(lab_flows()) >= 2 * n_conn, 30, what=f"{2 * n_conn} lab flow records")
    lab_transfers = [t for t in daemon.all_transfers() if t["peer_class"] == "lab"]

    def in_clickhouse(table):
        return int(clickhouse.query(f"SELECT count() FROM tcpscope.{table} WHERE peer_class = 'lab'").strip())

    # ClickHouse's Kafka engine flushes a block every few seconds.
    wait_for(lambda: in_clickhouse("flows") >= 2 * n_conn and in_clickhouse("transfers") >= len(lab_transfers),
             120, what=lambda: f"the lab records in ClickHouse: flows {in_clickhouse('flows')} of {2 * n_conn}, "
                               f"transfers {in_clickhouse('transfers')} of {len(lab_transfers)}")
    time.sleep(1)
    assert in_clickhouse("flows") == 2 * n_conn
    assert in_clickhouse("transfers") == len(lab_transfers)
    # 64-bit integers as JSON numbers: 18.16 quotes them by default.
    assert_stored_as_logged(clickhouse, lab_flows()[0], output_format_json_quote_64bit_integers=0)

    sel = ["--a", "cc=cubic,peer_class=lab", "--b", "cc=bbr,peer_class=lab"]
    assert_clickhouse_agrees_with_flow_log(clickhouse.http_url, daemon.flow_log, sel)

    # --where and a time range narrow both arms; nothing before the traffic.
    since = str(net.created_ns // 1_000_000_000 - 1)
    r = tcpscope("compare", "--clickhouse", clickhouse.http_url, "--metric", "fct", "--unit", "flow", "--by", "asn",
                 *sel, "--where", "asn=64501", "--since", since, "--json")
    assert r.returncode == 0, r.stderr
    assert {g["group"] for g in json.loads(r.stdout)["groups"]} == {"64501"}
    r = tcpscope("compare", "--clickhouse", clickhouse.http_url, "--metric", "fct", "--unit", "flow", *sel,
                 "--until", since, "--json")
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["groups"] == []

    counts = kafka_counts(daemon, "flow")
    assert counts["dropped"] == counts["failed"] == 0, counts
    assert counts["delivered"] >= 2 * n_conn


def test_broker_away_for_30s_under_load(net, tmp_path, kafka):
    """The ring keeps draining into the flow log while the broker is away; what
    the 1 MiB queue holds is delivered once the broker is back, on its own;
    what did not fit is counted as dropped; every record is counted once."""
    tag = uuid.uuid4().hex[:8]
    topics = {"flows": f"o{tag}.flows", "transfers": f"o{tag}.transfers"}
    for t in topics.values():
        kafka.create_topic(t, partitions=3)
    config = tmp_path / "tcpscope.yaml"
    config.write_text(kafka_config(kafka, topics, queue_bytes=1048576))
    home = tmp_path / "daemon"
    home.mkdir()
    daemon = Daemon(home, extra_args=("--config", str(config)))
    server = None
    try:
        server, _ = net.serve(tmp_path, net.srv_v4, 100000, port=8080)
        net.client(tmp_path, net.srv_v4, count=200, parallel=4)
        wait_for(lambda: kafka_counts(daemon, "flow")["delivered"] >= 400, 30, what="delivery before the outage")

        kafka.stop()
        down_at = time.monotonic()
        conns = 0
        while time.monotonic() - down_at < 30:
            net.client(tmp_path, net.srv_v4, count=500, parallel=8)
            conns += 500
        during = kafka_counts(daemon, "flow")
        # Every connection's client end reached the flow log while the broker was away.
        clients = lambda: len(daemon.records(net, "cli"))
        wait_for(lambda: clients() >= 200 + conns, 30,
                 what=lambda: f"the client end of every connection in the flow log: {clients()} of {200 + conns}")
        assert daemon.metric_value("tcpscope_records_lost_total") == 0
        assert during["dropped"] > 0, during  # more than 1 MiB of records went unsent
        health = daemon.stderr_text()
        assert "kafka export" in health, health

        kafka.start()
        wait_for(lambda: daemon.metric_value("tcpscope_kafka_queue_bytes") == 0, 90,
                 what="the queue drained after the broker came back")
        time.sleep(1)
        flows, transfers = kafka_counts(daemon, "flow"), kafka_counts(daemon, "transfer")
        assert flows["failed"] == transfers["failed"] == 0, (flows, transfers)
        assert flows["queued"] == flows["delivered"], flows
        # Each record the ring gave the daemon is counted once, queued or
        # dropped (one scrape: the daemon samples both on the same tick).
        text = daemon.metrics()
        handed = metric_value(text, "tcpscope_records_total")
        counted = sum(metric_value(text, "tcpscope_kafka_records_total", {"kind": "flow", "result": r})
                      for r in ("queued", "dropped"))
        assert counted == handed, (counted, handed)
        # The broker holds what was delivered, none twice (idempotence): its
        # records (a JSON line each) lie between the delivered counts read
        # before and after it (each scrape is a connection, whose records go
        # on being delivered). Under this load a drain's records of a bucket
        # share a message.
        for kind, topic in (("flow", topics["flows"]), ("transfer", topics["transfers"])):
            before = kafka_counts(daemon, kind)["delivered"]
            messages = kafka.consume(topic)
            held = sum(m.value.count(b"\n") for m in messages)
            time.sleep(0.5)  # the daemon samples its counters every 100 ms
            after = kafka_counts(daemon, kind)["delivered"]
            assert before <= held <= after, (kind, before, held, after)
            assert len(messages) < held / 2, (kind, len(messages), held)
        assert "kafka export" in daemon.stderr_text() and "recovered" in daemon.stderr_text()
    finally:
        if not kafka.running():
            kafka.start()
        rc = daemon.stop()
        assert rc == 0, daemon.stderr_text()


class GarbageHandler(FixedAnswer):
    body = b"<html>not clickhouse</html>"


def test_clickhouse_unreachable_or_garbage_is_one_line_and_nonzero(clickhouse):
    sel = ["--a", "cc=cubic", "--b", "cc=bbr"]
    closed = free_port()
    r = tcpscope("compare", "--clickhouse", f"http://127.0.0.1:{closed}", *sel)
    assert r.returncode == 1
    assert r.stderr.count("\n") == 1 and "Connection refused" in r.stderr, r.stderr

    srv = http.server.HTTPServer(("127.0.0.1", 0), GarbageHandler)
    t = threading.Thread(target=srv.serve_forever, daemon=True)
    t.start()
    try:
        r = tcpscope("compare", "--clickhouse", f"http://127.0.0.1:{srv.server_port}", *sel)
    finally:
        srv.shutdown()
        srv.server_close()
    assert r.returncode == 1
    assert r.stderr.count("\n") == 1 and "malformed answer" in r.stderr, r.stderr

    # A ClickHouse without the tables says which.
    r = tcpscope("compare", "--clickhouse", clickhouse.http_url, "--database", "nosuchdb", *sel)
    assert r.returncode == 1
    assert r.stderr.count("\n") == 1 and "nosuchdb" in r.stderr, r.stderr
