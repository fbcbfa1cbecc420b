"""packaging/clickhouse/*.sql and `compare --clickhouse` on current ClickHouse.

The only ClickHouse server a registry here serves is Debian 12's 18.16, which
test_fleet_export.py and tests/fleet/test_clickhouse_schema.py run with a real
Kafka broker. Here the engine is chdb-core's (ClickHouse 26.x in-process,
tests/fleet/chdb_front.py) behind an HTTP front that speaks ClickHouse's HTTP
interface, and the records are a real flow log: test_compare's lab (the real
daemon, two ASNs, CUBIC and BBR, flows and transfers).

Each SQL file is applied as its header says, statement by statement, with one
change: the Kafka table's engine is Null instead of Kafka (chdb's Kafka engine
cannot be counted on). A materialized view fires on every INSERT into the table
it selects from, whatever that table's engine, so the view and the MergeTree
table are the shipped ones, and the log's lines go into the Kafka-named table
the way the Kafka engine hands a message's rows on: JSONEachRow, with the input
format settings the files leave at their defaults.
"""
import json
import sys

from conftest import ROOT, sampled, wait_for
from test_compare import RELATIVE_ACCURACY, lab, run_traffic, tail_log, tcpscope  # noqa: F401  (lab: the fixture)
from test_fleet_export import assert_clickhouse_agrees_with_flow_log, assert_stored_as_logged

sys.path.insert(0, str(ROOT / "tests" / "fleet"))
from fleetfixtures import clickhouse_current  # noqa: E402,F401

SQL_DIR = ROOT / "packaging" / "clickhouse"
KINDS = {"flow": "flows", "transfer": "transfers"}


def kafka_engine(name):
    return f"ENGINE = Kafka('kafka-1:9092', 'tcpscope.{name}', 'tcpscope-clickhouse-{name}', 'JSONEachRow')"


def apply_shipped_sql(ch):
    for name in KINDS.values():
        sql = (SQL_DIR / f"{name}.sql").read_text()
        assert sql.count(kafka_engine(name)) == 1, f"{name}.sql: the Kafka table on its documented defaults"
        sql = sql.replace(kafka_engine(name), "ENGINE = Null")
        ch.execute_script(sql)
        ch.execute_script(sql)  # again: IF NOT EXISTS everywhere
    ch.execute_script((SQL_DIR / "ttl.sql").read_text())


def complete_lines(path):
    """The log's lines as they are now: the daemon may be writing the next."""
    text = path.read_text()
    return text[:text.rfind("\n") + 1].splitlines()


def test_shipped_sql_and_compare_on_current_clickhouse(lab, net, tmp_path, clickhouse_current):  # noqa: F811
    ch = clickhouse_current
    print(f"chdb-core {ch.package_version}: ClickHouse {ch.engine_version}")
    assert int(ch.engine_version.split(".")[0]) >= 24, ch.engine_version
    apply_shipped_sql(ch)
    for name in KINDS.values():
        ddl = ch.query(f"SHOW CREATE TABLE tcpscope.{name} FORMAT TSVRaw")
        assert "ORDER BY (peer_class, asn, cc, start_ns)" in ddl, ddl
        assert "TTL toDateTime(intDiv(start_ns, 1000000000)) + toIntervalDay(30)" in ddl, ddl  # ttl.sql

    daemon, sources = lab
    n_conn = run_traffic(net, tmp_path, sources)
    lab_flows = lambda: [r for r in daemon.all_records() if r["peer_class"] == "lab" and r["start_ns"] >= net.created_ns]
    wait_for(lambda: len(lab_flows()) >= 2 * n_conn, 30, what=f"{2 * n_conn} lab flow records")

    # Every line of the log, into the Kafka table of its kind; compare --flows
    # reads the same lines.
    log = tmp_path / "flows.snapshot.ndjson"
    lines = complete_lines(daemon.flow_log)
    log.write_text("".join(line + "\n" for line in lines))
    by_kind = {kind: [line for line in lines if json.loads(line)["kind"] == kind] for kind in KINDS}
    assert len(by_kind["flow"]) + len(by_kind["transfer"]) == len(lines)
    for kind, name in KINDS.items():
        ch.query(f"INSERT INTO tcpscope.{name}_kafka FORMAT JSONEachRow",
                 data="".join(line + "\n" for line in by_kind[kind]).encode())
        # The view moved every row; the Null table keeps none.
        assert int(ch.query(f"SELECT count() FROM tcpscope.{name}")) == len(by_kind[kind]), name
        assert int(ch.query(f"SELECT count() FROM tcpscope.{name}_kafka")) == 0, name
    assert_stored_as_logged(ch, lab_flows()[0])

    url = ch.http_url.replace("http://", f"http://{ch.user}:{ch.password}@")
    sel = ["--a", "cc=cubic,peer_class=lab", "--b", "cc=bbr,peer_class=lab"]
    assert_clickhouse_agrees_with_flow_log(url, log, sel)

    # Transfers of two sampling rates (as a reload from 1 to 4 would mix
    # them): both readers count only the flows rate 4 follows, compare --flows
    # by the daemon's hash of the ports and ClickHouse by intHash64, and must agree. Every
    # other flow's transfers are of each rate, so that both rates have every
    # kind of transfer whatever order the traffic logged them in.
    transfers = [json.loads(line) for line in by_kind["transfer"]]
    flows = sorted({t["flow_start_ns"] for t in transfers})
    at_4 = set(flows[1::2])
    rate_1 = [t for t in transfers if t["flow_start_ns"] not in at_4]
    rate_4 = [t for t in transfers if t["flow_start_ns"] in at_4]
    mixed = rate_1 + [dict(t, sampling_rate=4) for t in rate_4 if sampled(t["lport"], t["rport"], 4)]
    assert 0 < len(mixed) - len(rate_1) < len(rate_4)
    mixed_lines = [json.dumps(t) for t in mixed]
    ch.query("TRUNCATE TABLE tcpscope.transfers")
    ch.query("INSERT INTO tcpscope.transfers_kafka FORMAT JSONEachRow",
             data="".join(line + "\n" for line in mixed_lines).encode())
    mixed_log = tmp_path / "flows.mixed.ndjson"
    mixed_log.write_text("".join(line + "\n" for line in by_kind["flow"] + mixed_lines))
    assert_clickhouse_agrees_with_flow_log(url, mixed_log, sel)
    for source in (["--flows", str(mixed_log)], ["--clickhouse", url]):
        r = tcpscope("compare", *source, *sel, "--metric", "fct", "--unit", "transfer")
        assert r.returncode == 0 and "sampling rates 1 to 4" in r.stdout, r.stdout + r.stderr

    # A key the tables have no column for (a newer tcpscope's): dropped, the line kept.
    newer = by_kind["flow"][0][:-1] + ',"a_newer_key":1}\n'
    ch.query("INSERT INTO tcpscope.flows_kafka FORMAT JSONEachRow", data=newer.encode())
    assert int(ch.query("SELECT count() FROM tcpscope.flows")) == len(by_kind["flow"]) + 1

    # A refused login is one line naming the server, and exit 1.
    r = tcpscope("compare", "--clickhouse", ch.http_url.replace("http://", f"http://{ch.user}:wrong@"), *sel)
    assert r.returncode == 1
    assert r.stderr.count("\n") == 1 and "HTTP 403" in r.stderr and "AUTHENTICATION_FAILED" in r.stderr, r.stderr


def test_compare_quantiles_on_current_clickhouse(tmp_path, clickhouse_current):  # noqa: F811
    """--quantiles from ClickHouse: test_compare's log with a known tail, the
    tail quantiles within the sketches' 1 % of --flows' exact ones, and null
    where an arm is too small to hold one."""
    ch = clickhouse_current
    apply_shipped_sql(ch)
    log = tmp_path / "tail.ndjson"
    values = tail_log(log)
    ch.query("TRUNCATE TABLE tcpscope.flows")
    try:
        ch.query("INSERT INTO tcpscope.flows_kafka FORMAT JSONEachRow", data=log.read_bytes())
        assert int(ch.query("SELECT count() FROM tcpscope.flows")) == sum(len(v) for v in values.values())
        url = ch.http_url.replace("http://", f"http://{ch.user}:{ch.password}@")
        args = ["--a", "cc=cubic", "--b", "cc=bbr", "--by", "all", "--metric", "rtt",
                "--quantiles", "50,99.9,99.99", "--json"]
        exact, fleet = (json.loads(r.stdout) for r in (tcpscope("compare", "--flows", str(log), *args),
                                                       tcpscope("compare", "--clickhouse", url, *args)))
        [e], [c] = exact["groups"], fleet["groups"]
        assert (c["n_a"], c["n_b"]) == (e["n_a"], e["n_b"]) == (20_000, 5_000)
        for arm in ("a", "b"):
            for q in ("p50", "p99.9", "p99.99"):
                x, y = e[arm][q], c[arm][q]
                if x is None:
                    assert y is None, (arm, q)
                else:
                    assert abs(y - x) / x <= RELATIVE_ACCURACY + 1e-9, (arm, q, x, y)
        assert e["a"]["p99.99"] == 28_000_000 and e["b"]["p99.99"] is None
    finally:
        ch.query("TRUNCATE TABLE tcpscope.flows")
