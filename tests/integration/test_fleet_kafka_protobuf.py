"""export.kafka.format: protobuf end to end on real parts: the real daemon
(test_compare's lab: two ASNs, CUBIC and BBR, flows and transfers) -> a real
Kafka broker (tests/fleet/servers.py) -> the messages as the broker holds
them -> current ClickHouse (chdb-core, ClickHouse 26.x, tests/fleet/chdb_front.py)
reading them with the shipped packaging/clickhouse/tcpscope.proto into the
shipped SQL's tables, applied as test_fleet_clickhouse_current.py applies
them (the Kafka table's engine Null, the view and MergeTree table the shipped
ones).

ClickHouse's Kafka engine parses each message's bytes with the Kafka table's
columns and kafka_format/kafka_schema; here all of a topic's messages, one
after the other, go through the same format with the same columns and
schema (format_schema): the `Protobuf` format is length-delimited, so a
buffer of several messages, each of one or more records, is read as those
records.

The rows must be the flow log's lines, field by field, and
`compare --clickhouse` on them must answer as it does on the same records
ingested from the JSON lines. Debian 12's ClickHouse 18.16 has no Protobuf
format at all: the last test shows it refusing one.
"""
import json
import re
import subprocess
import sys
import uuid

import pytest

from conftest import ROOT, wait_for
from test_compare import has_bbr, run_traffic, tcpscope
from test_fleet_clickhouse_current import KINDS, SQL_DIR, apply_shipped_sql, complete_lines
from test_fleet_export import (COMPARED, assert_clickhouse_agrees_with_flow_log, kafka_config, kafka_counts,
                               start_lab_daemon)

sys.path.insert(0, str(ROOT / "tests" / "fleet"))
from fleetfixtures import clickhouse, clickhouse_current, kafka_broker  # noqa: E402,F401
from servers import ServerError  # noqa: E402

SEL = ["--a", "cc=cubic,peer_class=lab", "--b", "cc=bbr,peer_class=lab"]


def canonical(row):
    """A row or a JSON line as one comparable text: JSON booleans are UInt8 columns."""
    return json.dumps({k: int(v) if isinstance(v, bool) else v for k, v in row.items()}, sort_keys=True)


def documented_schema(name):
    """The kafka_schema of the Kafka table that the SQL file's header says how
    to make: its sed command run on the file."""
    sql = (SQL_DIR / f"{name}.sql").read_text()
    command = re.findall(r'^--\s+sed -e "(s/\'JSONEachRow\'\)/.*/)" \\$', sql, re.M)
    assert len(command) == 1, f"{name}.sql: one sed command for protobuf"
    made = subprocess.run(["sed", "-e", command[0]], input=sql, capture_output=True, text=True, check=True).stdout
    engine = re.findall(rf"^ENGINE = Kafka\('kafka-1:9092', 'tcpscope\.{name}', 'tcpscope-clickhouse-{name}', "
                        r"'Protobuf'\) SETTINGS kafka_schema = '(tcpscope\.proto:\w+)';$", made, re.M)
    assert len(engine) == 1, f"{name}.sql with its sed: one Kafka table reading Protobuf"
    return engine[0]


def ingest_protobuf(ch, name, values, tmp_path):
    """The topic's messages into the Kafka-named table through ClickHouse's
    Protobuf format with the table's own columns and the documented schema
    (the file beside the SQL files), as its Kafka engine reads them."""
    path = tmp_path / f"{name}.protobuf"
    path.write_bytes(b"".join(values))
    columns = ch.query(f"SELECT arrayStringConcat(groupArray(concat(name, ' ', type)), ', ') FROM "
                       f"(SELECT name, type FROM system.columns WHERE database = 'tcpscope' AND table = '{name}_kafka' "
                       f"ORDER BY position)").strip()
    ch.query(f"INSERT INTO tcpscope.{name}_kafka SELECT * FROM file('{path}', 'Protobuf', '{columns}') "
             f"SETTINGS format_schema = '{SQL_DIR / documented_schema(name)}'")


def compare_answers(url):
    answers = {}
    for metric, unit, by in COMPARED:
        r = tcpscope("compare", "--clickhouse", url, "--metric", metric, "--unit", unit, "--by", by, *SEL, "--json")
        assert r.returncode == 0, r.stderr
        answers[(metric, unit, by)] = json.loads(r.stdout)
    return answers


def test_protobuf_from_kafka_into_current_clickhouse_equals_the_flow_log(net, tmp_path, kafka_broker,  # noqa: F811
                                                                          clickhouse_current):  # noqa: F811
    if not has_bbr():
        pytest.skip("the kernel offers no bbr")
    kafka, ch = kafka_broker, clickhouse_current
    tag = uuid.uuid4().hex[:8]
    topics = {"flows": f"p{tag}.flows", "transfers": f"p{tag}.transfers"}
    for t in topics.values():
        kafka.create_topic(t, partitions=3)
    daemon, clients = start_lab_daemon(net, tmp_path, kafka_config(kafka, topics, format="protobuf"))
    try:
        assert f"records to Kafka {kafka.bootstrap} as protobuf" in daemon.stderr_text()
        n_conn = run_traffic(net, tmp_path, clients)
        lab_flows = lambda: [r for r in daemon.all_records() if r["peer_class"] == "lab"]
        wait_for(lambda: len(lab_flows()) >= 2 * n_conn, 30, what=f"{2 * n_conn} lab flow records")
        wait_for(lambda: all(kafka_counts(daemon, k)["delivered"] == kafka_counts(daemon, k)["queued"] > 0
                             for k in KINDS), 30, what="every queued record delivered")
    finally:
        # Stopped, the daemon has written every record to both: the flow log
        # and the broker hold the same records.
        assert daemon.stop() == 0, daemon.stderr_text()
    lines = complete_lines(daemon.flow_log)
    by_kind = {kind: [json.loads(line) for line in lines if json.loads(line)["kind"] == kind] for kind in KINDS}

    apply_shipped_sql(ch)
    for kind, name in KINDS.items():
        held = kafka.consume(topics[name])
        # A message carries a drain's records of one bucket: one or several.
        assert 0 < len(held) <= len(by_kind[kind]), f"{name}: {len(held)} messages, {len(by_kind[kind])} records"
        ingest_protobuf(ch, name, [m.value for m in held], tmp_path)
        rows = [json.loads(line) for line in ch.query(f"SELECT * FROM tcpscope.{name} FORMAT JSONEachRow").splitlines()]
        assert sorted(rows[0]) == sorted(by_kind[kind][0]), f"{name}: the table's columns are the JSON line's keys"
        stored, logged = sorted(map(canonical, rows)), sorted(map(canonical, by_kind[kind]))
        for got, want in zip(stored, logged):
            assert got == want, f"{name}: stored\n{got}\nlogged\n{want}"
        assert len(stored) == len(logged)

    url = ch.http_url.replace("http://", f"http://{ch.user}:{ch.password}@")
    log = tmp_path / "flows.snapshot.ndjson"
    log.write_text("".join(line + "\n" for line in lines))
    assert_clickhouse_agrees_with_flow_log(url, log, SEL)
    from_protobuf = compare_answers(url)

    # The same records from their JSON lines, as format json delivers them.
    ch.query("DROP DATABASE tcpscope")
    apply_shipped_sql(ch)
    for kind, name in KINDS.items():
        ch.query(f"INSERT INTO tcpscope.{name}_kafka FORMAT JSONEachRow",
                 data="".join(json.dumps(r) + "\n" for r in by_kind[kind]).encode())
    assert compare_answers(url) == from_protobuf


def test_clickhouse_18_16_has_no_protobuf_format(clickhouse):  # noqa: F811
    """Why flows.sql and transfers.sql keep JSONEachRow for Debian 12's server."""
    assert clickhouse.query("SELECT version()").startswith("18.16")
    with pytest.raises(ServerError, match="Unknown format Protobuf"):
        clickhouse.query("SELECT 1 FORMAT Protobuf")
