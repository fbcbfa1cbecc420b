"""The shipped ClickHouse schema (packaging/clickhouse/*.sql) on a real server fed
from a real Kafka broker: flow and transfer lines as tcpscope writes them go
into Kafka, ClickHouse's Kafka engine tables read them, the materialized views
move them into the MergeTree tables, and every value comes back exact.

The SQL files are applied the way their headers say (clickhouse-client
--multiquery, the broker, topics and group rewritten with the same literal
substitution as the documented sed), into a database of this test's own.
"""
import json
import re
import subprocess
import shutil
from pathlib import Path

import pytest

from servers import ServerError, split_sql, unique_name, wait_until
from fleetfixtures import clickhouse, kafka_broker  # noqa: F401

ROOT = Path(__file__).resolve().parents[2]
SCHEMA = ROOT / "packaging" / "clickhouse"
SRC = ROOT / "src" / "record"

U64_MAX = 2**64 - 1
U32_MAX = 2**32 - 1
I64_MAX = 2**63 - 1

# ------------------------------------------------------------ the record formats

# The keys of a flow line and of a transfer line, in the writer's order (the
# tables of src/record/record_fields.h). test_schema_has_every_key checks this
# list against them.
ENDPOINTS = ["family", "laddr", "lport", "raddr", "rport", "dir"]
ENRICHMENT = ["peer_class", "asn", "as_org", "cc_rule", "experiment", "arm"]
OWNER = ["service", "unit", "container_id", "pod_uid", "sock_cgroup_id"]
FLOW_KEYS = (["kind", "start_ns", "end_ns", "fct_us", "duration_us"] + ENDPOINTS +
             ["outcome", "cc", "srtt_us", "min_rtt_us", "rttvar_us", "cwnd", "max_cwnd", "ssthresh", "mss",
              "bytes_acked", "bytes_received", "bytes_retrans", "segs_out", "segs_in", "retrans_segs", "lost_segs",
              "delivery_rate_bps", "pacing_rate_bps"] + ENRICHMENT +
             ["app_set_cc", "pid", "comm", "cgroup_id", "netns", "partial",
              "ca_open_us", "ca_disorder_us", "ca_cwr_us", "ca_recovery_us", "ca_loss_us", "ecn", "delivered_ce"] +
             OWNER)
TRANSFER_KEYS = (["kind", "flow_start_ns"] + ENDPOINTS +
                 ["seq", "direction", "delimited_by", "sampling_rate", "start_ns", "end_ns", "xfer_us", "wait_us", "bytes", "retrans_segs",
                  "srtt_us", "min_rtt_us", "busy_us", "rwnd_limited_us", "sndbuf_limited_us", "cc"] +
                 ENRICHMENT + ["netns"] + OWNER)


def writer_keys(table):
    """The keys of record_fields.h's TCPSCOPE_<table>_FIELDS, in order, after
    "kind": its FIELD rows, with the groups it includes expanded."""
    text = (SRC / "record_fields.h").read_text().replace("\\\n", "\n")
    macros = dict(re.findall(r"#define (TCPSCOPE_\w+_FIELDS)\(FIELD(?:, N)?\)(.*?)\n\n", text, re.S))

    def expand(name):
        return [k for group, key in re.findall(r"(TCPSCOPE_\w+_FIELDS)\(FIELD|FIELD\((\w+),", macros[name])
                for k in (expand(group) if group else [key])]
    return ["kind"] + expand(f"TCPSCOPE_{table}_FIELDS")


def utf8_text(raw: bytes) -> str:
    """`raw` as text by the daemon's rule (src/text/json_text.h): valid UTF-8 as
    itself, each byte of an invalid sequence a U+FFFD of its own (Python's
    errors="replace" makes one of a cut sequence)."""
    out, i = [], 0
    while i < len(raw):
        c = raw[i]
        n = 1 if c < 0x80 else 2 if c >> 5 == 6 else 3 if c >> 4 == 14 else 4 if c >> 3 == 30 else 0
        try:
            out.append(raw[i:i + n].decode() if n and i + n <= len(raw) else None)
        except UnicodeDecodeError:
            out.append(None)
        if out[-1] is None:
            out[-1], n = "\ufffd", 1
        i += n
    return "".join(out)


SHORT_ESCAPES = {'"': '\\"', "\\": "\\\\", "\b": "\\b", "\f": "\\f", "\n": "\\n", "\r": "\\r", "\t": "\\t"}


def daemon_escape(raw: bytes) -> str:
    """A JSON string as the daemon writes it (put_json_string): the text of
    utf8_text(), controls (U+0000-U+001F, U+007F) escaped."""
    out = ['"']
    for ch in utf8_text(raw):
        if ch in SHORT_ESCAPES:
            out.append(SHORT_ESCAPES[ch])
        elif ord(ch) < 0x20 or ord(ch) == 0x7F:
            out.append(f"\\u{ord(ch):04x}")
        else:
            out.append(ch)
    out.append('"')
    return "".join(out)


def line(record: dict, keys) -> str:
    """One flow-log line as the daemon writes it: its key order, every string
    (str as UTF-8, or bytes as they are) as daemon_escape writes it."""
    assert list(record) == list(keys), set(record) ^ set(keys)
    parts = []
    for k in keys:
        v = record[k]
        if isinstance(v, str):
            v = v.encode()
        parts.append(f'"{k}":' + (daemon_escape(v) if isinstance(v, bytes) else json.dumps(v)))
    return "{" + ",".join(parts) + "}"


def flow(**over):
    r = {
        "kind": "flow", "start_ns": 1764000000123456789, "end_ns": 1764000000987654321,
        "fct_us": 812345, "duration_us": 864197,
        "family": 4, "laddr": "198.18.0.1", "lport": 443, "raddr": "198.19.255.254", "rport": 51234, "dir": "passive",
        "outcome": "ok", "cc": "cubic",
        "srtt_us": 1250, "min_rtt_us": 980, "rttvar_us": 310, "cwnd": 10, "max_cwnd": 87, "ssthresh": 2147483647,
        "mss": 1448, "bytes_acked": 1048576, "bytes_received": 517, "bytes_retrans": 0,
        "segs_out": 731, "segs_in": 366, "retrans_segs": 0, "lost_segs": 0,
        "delivery_rate_bps": 953212345, "pacing_rate_bps": 1906424690,
        "peer_class": "internet", "asn": 64500, "as_org": "Example Net", "cc_rule": None, "experiment": None,
        "arm": None, "app_set_cc": False, "pid": 4242, "comm": b"nginx", "cgroup_id": 8812, "netns": 4026531840,
        "partial": False, "ca_open_us": 860000, "ca_disorder_us": 0, "ca_cwr_us": 0, "ca_recovery_us": 4197,
        "ca_loss_us": 0, "ecn": True, "delivered_ce": 12,
        "service": "nginx.service", "unit": "nginx.service", "container_id": "", "pod_uid": "", "sock_cgroup_id": 8812,
    }
    r.update(over)
    return r


def transfer(**over):
    r = {
        "kind": "transfer", "flow_start_ns": 1764000000123456789,
        "family": 4, "laddr": "198.18.0.1", "lport": 443, "raddr": "198.19.255.254", "rport": 51234, "dir": "passive",
        "seq": 0, "direction": "send", "delimited_by": "write", "sampling_rate": 16,
        "start_ns": 1764000000200000000, "end_ns": 1764000000400000000,
        "xfer_us": 200000, "wait_us": 150, "bytes": 1048576, "retrans_segs": 0, "srtt_us": 1250, "min_rtt_us": 980,
        "busy_us": 200000, "rwnd_limited_us": 0, "sndbuf_limited_us": 0, "cc": "cubic",
        "peer_class": "internet", "asn": 64500, "as_org": "Example Net", "cc_rule": None, "experiment": None,
        "arm": None, "netns": 4026531840,
        "service": "web/api-7c9f8d6b5-x2k4z", "unit": "cri-containerd-" + "ab" * 32 + ".scope",
        "container_id": "ab" * 32, "pod_uid": "0f1e2d3c-4b5a-6978-8796-a5b4c3d2e1f0", "sock_cgroup_id": 12345,
    }
    r.update(over)
    return r


V6_LONG = "2001:db8:ffff:ffff:ffff:ffff:ffff:fffe"
UTF8_COMM = "wörker ✓".encode()  # 15 bytes: the kernel's comm is 16 with its NUL
CUT_COMM = b"cut-name-abcd" + "中".encode()[:2]  # the kernel's 15 bytes end inside a character

FLOWS = [
    # IPv6, u64 max counters, u32 max kernel counters, nulls, true, Int64 max times.
    flow(start_ns=1764000001000000001, end_ns=I64_MAX, duration_us=I64_MAX, fct_us=0,
         family=6, laddr=V6_LONG, raddr="::1", lport=65535, rport=1, dir="active", outcome="reset", cc="bbr",
         srtt_us=U32_MAX, min_rtt_us=U32_MAX, rttvar_us=U32_MAX, cwnd=U32_MAX, max_cwnd=U32_MAX,
         ssthresh=U32_MAX, mss=U32_MAX, bytes_acked=U64_MAX, bytes_received=U64_MAX, bytes_retrans=U64_MAX,
         segs_out=U32_MAX, segs_in=U32_MAX, retrans_segs=U32_MAX, lost_segs=U32_MAX,
         delivery_rate_bps=U64_MAX, pacing_rate_bps=U64_MAX, asn=U32_MAX, app_set_cc=True, pid=U32_MAX,
         cgroup_id=U64_MAX, netns=U32_MAX, ca_open_us=U64_MAX, ca_disorder_us=U64_MAX, ca_cwr_us=U64_MAX,
         ca_recovery_us=U64_MAX, ca_loss_us=U64_MAX, delivered_ce=U32_MAX, comm=b"curl",
         sock_cgroup_id=U64_MAX, service="", unit="", container_id="", pod_uid=""),
    # IPv4, every optional string set, partial, a UTF-8 comm and control bytes, escapes.
    flow(start_ns=1764000002000000002, peer_class="datacenter \"eu\\west\"", as_org="Società Ørsted ✓",
         cc_rule="bulk-bbr", experiment="cc-ab-2026", arm="treatment", partial=True,
         comm=UTF8_COMM),
    flow(start_ns=1764000003000000003, comm=b"tab\there\nnl\x01\x1f\x7f\x08\x0c\"q\\", outcome="timeout",
         bytes_acked=0, bytes_received=0, segs_out=0, segs_in=0, delivery_rate_bps=0, pacing_rate_bps=0),
    # A comm cut mid-character (each of its bytes a U+FFFD), a CJK and a broken organisation.
    flow(start_ns=1764000005000000005, comm=CUT_COMM, as_org="中国电信", service="视频 \"live\"\\eu ✓"),
    flow(start_ns=1764000006000000006, comm=b"\xc0\xaf\xed\xa0\x80\x80", as_org=b"T\xfcrk Telekom"),
    # A failed handshake: no addresses known, every counter 0, ns times 0 (as a partial flow's could be).
    flow(start_ns=0, end_ns=0, fct_us=0, duration_us=0, family=0, laddr="", raddr="", lport=0, rport=0,
         outcome="refused", cc="", srtt_us=0, min_rtt_us=0, rttvar_us=0, cwnd=0, max_cwnd=0, ssthresh=0, mss=0,
         bytes_acked=0, bytes_received=0, segs_out=0, segs_in=0, delivery_rate_bps=0, pacing_rate_bps=0,
         peer_class="", asn=0, as_org="", pid=0, comm=b"", cgroup_id=0, netns=0, ca_open_us=0, ca_recovery_us=0),
    # IPv6 text with embedded IPv4 (inet_ntop's forms); empty optional strings (not null).
    flow(start_ns=1764000004000000004, family=6, laddr="::ffff:198.18.0.1", raddr="64:ff9b::c612:1",
         cc_rule="", experiment="", arm=""),
]

TRANSFERS = [
    transfer(start_ns=1764000001100000001, wait_us=None, direction="recv", delimited_by="arrival", seq=0),
    transfer(start_ns=1764000001200000002, flow_start_ns=1764000001000000001, family=6, laddr=V6_LONG,
             raddr="::1", seq=U32_MAX, bytes=U64_MAX, retrans_segs=U32_MAX, srtt_us=U32_MAX,
             min_rtt_us=U32_MAX, busy_us=U32_MAX, rwnd_limited_us=U32_MAX, sndbuf_limited_us=U32_MAX,
             end_ns=I64_MAX, xfer_us=I64_MAX, wait_us=I64_MAX, asn=U32_MAX, netns=U32_MAX,
             cc_rule="bulk-bbr", experiment="cc-ab-2026", arm="control", as_org="Ωmega ✓"),
    transfer(start_ns=1764000001300000003, wait_us=0, bytes=0, xfer_us=0, seq=7, delimited_by="departure",
             sampling_rate=1 << 31),
    transfer(start_ns=0, flow_start_ns=0, end_ns=0, xfer_us=0, family=0, laddr="", raddr="", lport=0, rport=0,
             wait_us=None, bytes=0, srtt_us=0, min_rtt_us=0, busy_us=0, cc="", peer_class="", asn=0, as_org="",
             netns=0),
]


def flow_lines():
    return [line(r, FLOW_KEYS) for r in FLOWS]


def transfer_lines():
    return [line(r, TRANSFER_KEYS) for r in TRANSFERS]


def expected_rows(lines):
    """What each line means as JSON: the values ClickHouse must store."""
    rows = []
    for text in lines:
        row = json.loads(text)
        rows.append({k: int(v) if isinstance(v, bool) else v for k, v in row.items()})
    return rows


# ------------------------------------------------------------ the schema files


def columns_of(sql: str, table: str):
    """[(name, type)] of `CREATE TABLE ... table (...)` in sql."""
    m = re.search(r"CREATE TABLE IF NOT EXISTS " + re.escape(table) + r"\s*\((.*?)\)\s*ENGINE", sql, re.S)
    assert m, f"no CREATE TABLE {table}"
    cols = []
    for item in m.group(1).split(",\n"):
        name, typ = item.strip().rstrip(",").split(None, 1)
        cols.append((name, typ.strip()))
    return cols


def rewrite(sql: str, *, broker: str, topic: str, group: str, database: str, default_topic: str,
            default_group: str) -> str:
    """The header's sed: the quoted broker, topic and group replaced wherever they
    are, and (for a database of the test's own) every tcpscope. table prefix."""
    engine = f"ENGINE = Kafka('kafka-1:9092', '{default_topic}', '{default_group}', 'JSONEachRow');"
    assert sql.count(engine) == 1, f"the Kafka table should be on the documented defaults: {engine}"
    sql = sql.replace(f"'{default_topic}'", f"'{topic}'")
    sql = sql.replace("'kafka-1:9092'", f"'{broker}'").replace(f"'{default_group}'", f"'{group}'")
    assert sql.count(f"ENGINE = Kafka('{broker}', '{topic}', '{group}', 'JSONEachRow');") == 1
    sql = re.sub(r"\btcpscope\.", f"{database}.", sql)
    return sql.replace("CREATE DATABASE IF NOT EXISTS tcpscope;", f"CREATE DATABASE IF NOT EXISTS {database};")


@pytest.mark.parametrize("name,keys,table", [
    ("flows", FLOW_KEYS, "FLOW"),
    ("transfers", TRANSFER_KEYS, "TRANSFER"),
])
def test_schema_has_every_key(name, keys, table):
    """Every key the daemon writes has a column of the Kafka table, which the
    MergeTree table copies and the view moves whole."""
    assert writer_keys(table) == keys, "the writer's keys changed: update this test and the SQL"
    sql = (SCHEMA / f"{name}.sql").read_text()
    kafka_cols = columns_of(sql, f"tcpscope.{name}_kafka")
    assert [c for c, _ in kafka_cols] == keys
    # The MergeTree table takes the Kafka table's columns and the view all of them.
    assert f"CREATE TABLE IF NOT EXISTS tcpscope.{name} AS tcpscope.{name}_kafka\nENGINE = MergeTree" in sql
    assert f"CREATE MATERIALIZED VIEW IF NOT EXISTS tcpscope.{name}_mv TO tcpscope.{name} AS\n" \
           f"SELECT * FROM tcpscope.{name}_kafka;" in sql
    types = dict(kafka_cols)
    for k in ("laddr", "raddr", "comm", "as_org", "peer_class", "cc"):
        assert k not in types or types[k] == "String"
    for k in ("cc_rule", "experiment", "arm"):
        assert types[k] == "Nullable(String)"
    assert sql.lstrip().startswith("--"), "the file begins with a comment saying what it creates"
    assert "--multiquery" in sql.split("CREATE", 1)[0]


# ------------------------------------------------------------ on the real servers


def clickhouse_version(ch):
    return tuple(int(x) for x in ch.query("SELECT version()").strip().split(".")[:2])


def apply_sql(ch, sql: str):
    """As the header says: clickhouse-client --multiquery < file."""
    client = shutil.which("clickhouse-client")
    if client is None:
        pytest.fail("clickhouse-client not found: apt-get install -y clickhouse-client (scripts/dev.sh does)")
    r = subprocess.run([client, "--host", "127.0.0.1", "--port", str(ch.tcp_port), "--multiquery"],
                       input=sql.encode(), capture_output=True, timeout=120)
    if r.returncode != 0:
        raise ServerError(f"clickhouse-client --multiquery exited with {r.returncode}: "
                          f"{r.stderr.decode(errors='replace')}\n--- sql:\n{sql}")


@pytest.fixture(scope="module")
def pipeline(kafka_broker, clickhouse):
    """The two schema files applied into a database of this module's own, on
    topics of its own (3 partitions each) on the test broker."""
    database = unique_name("tcpscope_test_")
    topics = {"flows": unique_name("fleet-test.flows."), "transfers": unique_name("fleet-test.transfers.")}
    # A group per table, as the files have: on 18.16 two Kafka tables in one group starve
    # each other (each stream subscribes and unsubscribes, so the group keeps rebalancing).
    groups = {name: unique_name(f"fleet-test-clickhouse-{name}-") for name in topics}
    for topic in topics.values():
        kafka_broker.create_topic(topic, partitions=3)
    applied = {}
    for name, topic in topics.items():
        sql = rewrite((SCHEMA / f"{name}.sql").read_text(), broker=kafka_broker.bootstrap, topic=topic,
                      group=groups[name], database=database, default_topic=f"tcpscope.{name}",
                      default_group=f"tcpscope-clickhouse-{name}")
        apply_sql(clickhouse, sql)
        apply_sql(clickhouse, sql)  # again: IF NOT EXISTS everywhere
        applied[name] = sql
    yield {"database": database, "topics": topics, "sql": applied, "groups": groups}
    for name in topics:  # the view first, so nothing is consumed into a dropped table
        for suffix in ("_mv", "_kafka", ""):
            clickhouse.query(f"DROP TABLE IF EXISTS {database}.{name}{suffix}")
    clickhouse.query(f"DROP DATABASE IF EXISTS {database}")


def wait_for_rows(ch, table: str, want: int, timeout: float = 120, kafka=None, group=None):
    seen = []

    def count():
        n = int(ch.query(f"SELECT count() FROM {table}").strip())
        seen.append(n)
        assert n <= want, f"{table} holds {n} rows, more than the {want} produced"
        return n == want
    try:
        wait_until(f"{want} rows in {table}", count, timeout, interval=0.5, proc=ch.proc, log=ch.err_log)
    except ServerError as e:
        groups = ""
        if kafka is not None and group is not None:
            groups = kafka.run_tool("org.apache.kafka.tools.consumer.group.ConsumerGroupCommand",
                                    ["--bootstrap-server", kafka.bootstrap, "--describe", "--group", group]
                                    ).stdout.decode()
        raise ServerError(f"{e}\nrow counts seen: {sorted(set(seen))}\nconsumer group {group}:\n{groups}") from None


def compare(got_rows, want_rows, sort_key):
    got = sorted(got_rows, key=lambda r: (int(r[sort_key[0]]), int(r[sort_key[1]])))
    want = sorted(want_rows, key=lambda r: (r[sort_key[0]], r[sort_key[1]]))
    assert len(got) == len(want)
    for g, w in zip(got, want):
        assert list(g) == list(w), "the MergeTree table's columns are the record's keys, in order"
        for k, v in w.items():
            # 64-bit integers come back as JSON strings (output_format_json_quote_64bit_integers).
            gv = g[k]
            if isinstance(v, int) and gv is not None:
                gv = int(gv)
            assert gv == v and type(gv) is type(v), f"{k}: sent {v!r}, ClickHouse holds {g[k]!r}"


def test_records_round_trip_through_kafka_into_mergetree(kafka_broker, clickhouse, pipeline):
    db, topics = pipeline["database"], pipeline["topics"]
    flows, transfers = flow_lines(), transfer_lines()
    # Keys as a sink might set them (the flow's identity); ClickHouse ignores them.
    kafka_broker.produce(topics["flows"], [(f"flow-{i}", text) for i, text in enumerate(flows)])
    kafka_broker.produce(topics["transfers"], [(None, text) for text in transfers])

    # What the broker holds is what was sent, byte for byte.
    held = kafka_broker.consume(topics["flows"])
    assert sorted(m.value.decode() for m in held) == sorted(flows)
    assert sorted(m.key for m in held) == sorted(f"flow-{i}".encode() for i in range(len(flows)))
    assert {m.partition for m in held} <= {0, 1, 2}
    assert all(m.key is None for m in kafka_broker.consume(topics["transfers"]))

    wait_for_rows(clickhouse, f"{db}.flows", len(flows), kafka=kafka_broker, group=pipeline["groups"]["flows"])
    wait_for_rows(clickhouse, f"{db}.transfers", len(transfers), kafka=kafka_broker,
                  group=pipeline["groups"]["transfers"])
    compare(clickhouse.query_json(f"SELECT * FROM {db}.flows"), expected_rows(flows), ("start_ns", "end_ns"))
    compare(clickhouse.query_json(f"SELECT * FROM {db}.transfers"), expected_rows(transfers),
            ("start_ns", "seq"))

    # Text arrives as the UTF-8 it is; what was not UTF-8 arrives as U+FFFD, one per byte.
    got = clickhouse.query(f"SELECT start_ns, comm, as_org FROM {db}.flows WHERE start_ns IN "
                           f"(1764000002000000002, 1764000005000000005, 1764000006000000006) ORDER BY start_ns "
                           f"FORMAT TSV").splitlines()
    assert [row.split("\t")[1:] for row in got] == [
        ["wörker ✓", "Società Ørsted ✓"], ["cut-name-abcd\ufffd\ufffd", "中国电信"],
        ["\ufffd" * 6, "T\ufffdrk Telekom"]], got
    assert bytes.fromhex(clickhouse.query(f"SELECT hex(comm) FROM {db}.flows WHERE start_ns = 1764000005000000005 "
                                          f"FORMAT TSV").strip()) == b"cut-name-abcd" + "\ufffd\ufffd".encode()

    # The partitions are UTC days of start_ns; the sorting key is the one documented.
    parts = clickhouse.query(f"SELECT DISTINCT partition FROM system.parts WHERE database = '{db}' "
                             f"AND table = 'flows' AND active ORDER BY partition FORMAT TSV").split()
    # start_ns 0 is day 0: 18.16 shows Date 0 as 0000-00-00, current ClickHouse as 1970-01-01.
    assert "2025-11-24" in parts and ({"0000-00-00", "1970-01-01"} & set(parts)), parts
    ddl = clickhouse.query(f"SHOW CREATE TABLE {db}.flows FORMAT TSVRaw")
    assert "ORDER BY (peer_class, asn, cc, start_ns)" in ddl, ddl


def test_more_lines_in_one_message_and_more_messages(kafka_broker, clickhouse, pipeline):
    """A sink may send one line per message, the line with its newline as the
    daemon writes it, or a batch of NDJSON lines in one message: every line
    arrives, once."""
    db, topics = pipeline["database"], pipeline["topics"]
    before = int(clickhouse.query(f"SELECT count() FROM {db}.transfers").strip())
    batch = [transfer(start_ns=1764100000000000000 + i, seq=i, wait_us=None if i % 2 else i) for i in range(200)]
    lines = [line(r, TRANSFER_KEYS) for r in batch]
    kafka_broker.produce(topics["transfers"], lines[:150])             # 150 messages, no newline
    kafka_broker.produce_payload(topics["transfers"], lines[150] + "\n")  # one line as written, "}\n"
    kafka_broker.produce_payload(topics["transfers"], "\n".join(lines[151:]) + "\n")  # 49 lines in one
    wait_for_rows(clickhouse, f"{db}.transfers", before + len(batch), kafka=kafka_broker,
                  group=pipeline["groups"]["transfers"])
    got = clickhouse.query_json(f"SELECT seq, wait_us FROM {db}.transfers WHERE start_ns >= 1764100000000000000")
    assert sorted((int(r["seq"]), r["wait_us"] if r["wait_us"] is None else int(r["wait_us"])) for r in got) == \
        [(i, None if i % 2 else i) for i in range(200)]


def test_a_key_without_a_column_is_refused(clickhouse, pipeline):
    """18.16's JSONEachRow refuses a line with a key the table has no column
    for (a newer tcpscope's line), as flows.sql's header says; the MergeTree
    table reads it as the Kafka table would."""
    text = flow_lines()[0][:-1] + ',"a_newer_key":1}\n'
    with pytest.raises(ServerError, match="Unknown field found while parsing JSONEachRow format: a_newer_key"):
        clickhouse.query(f"INSERT INTO {pipeline['database']}.flows FORMAT JSONEachRow", data=text.encode())


@pytest.mark.parametrize("name", ["flows", "transfers"])
def test_the_headers_upgrade_brings_tables_made_before_the_owner_columns_up_to_date(kafka_broker, clickhouse,
                                                                                      name):
    """Tables made by the schema as it was before the owner's columns
    (service ... sock_cgroup_id), upgraded as the file's header says (the
    MergeTree table altered, the view and the Kafka table dropped and the
    file applied again), have the file's columns in its order and take the
    newer line."""
    database = unique_name("tcpscope_upgrade_")
    topic, group = unique_name(f"fleet-test.{name}."), unique_name(f"fleet-test-clickhouse-{name}-")
    sql = (SCHEMA / f"{name}.sql").read_text()
    old = re.sub(r",\n    service String,\n    unit String,\n    container_id String,\n    pod_uid String,"
                 r"\n    sock_cgroup_id UInt64\n\)", "\n)", sql)
    assert old != sql, "the owner's columns close the Kafka table's column list"

    def ours(text):
        return rewrite(text, broker=kafka_broker.bootstrap, topic=topic, group=group, database=database,
                       default_topic=f"tcpscope.{name}", default_group=f"tcpscope-clickhouse-{name}")
    alter = re.findall(rf"^--   (ALTER TABLE tcpscope\.{name} ADD COLUMN service .*)$", sql, re.M)
    drop = re.findall(rf"^--   (DROP TABLE tcpscope\.\w+_mv; DROP TABLE tcpscope\.\w+_kafka)$",
                      (SCHEMA / "flows.sql").read_text(), re.M)
    assert len(alter) == 1 and len(drop) == 1, "the header names the ALTER and the DROPs"
    kafka_broker.create_topic(topic, partitions=1)
    try:
        apply_sql(clickhouse, ours(old))
        clickhouse.query(re.sub(r"\btcpscope\.", f"{database}.", alter[0]))
        for stmt in drop[0].replace("flows", name).split(";"):
            clickhouse.query(re.sub(r"\btcpscope\.", f"{database}.", stmt.strip()))
        apply_sql(clickhouse, ours(sql))
        want = [c for c, _ in columns_of(sql, f"tcpscope.{name}_kafka")]
        for table in (name, f"{name}_kafka"):
            got = [r["name"] for r in clickhouse.query_json(f"DESCRIBE TABLE {database}.{table}")]
            assert got == want, table
        text = (flow_lines() if name == "flows" else transfer_lines())[0]
        clickhouse.query(f"INSERT INTO {database}.{name} FORMAT JSONEachRow", data=(text + "\n").encode())
        row = clickhouse.query_json(f"SELECT service, sock_cgroup_id FROM {database}.{name}")
        sent = json.loads(text)
        assert [(r["service"], int(r["sock_cgroup_id"])) for r in row] == [(sent["service"], sent["sock_cgroup_id"])]
    finally:
        for suffix in ("_mv", "_kafka", ""):
            clickhouse.query(f"DROP TABLE IF EXISTS {database}.{name}{suffix}")
        clickhouse.query(f"DROP DATABASE IF EXISTS {database}")


def test_ttl_sql_on_this_server(clickhouse, pipeline):
    """ttl.sql is for ClickHouse 19.6 and later; 18.16 rejects it with a syntax
    error, as its header says."""
    db = pipeline["database"]
    sql = (SCHEMA / "ttl.sql").read_text()
    assert sql.lstrip().startswith("--")
    statements = split_sql(re.sub(r"\btcpscope\.", f"{db}.", sql))
    assert [s.split()[2] for s in statements] == [f"{db}.flows", f"{db}.transfers"]
    if clickhouse_version(clickhouse) >= (19, 6):
        for s in statements:
            clickhouse.query(s)
        ddl = clickhouse.query(f"SHOW CREATE TABLE {db}.flows FORMAT TSVRaw")
        assert "TTL" in ddl and "INTERVAL 30 DAY" in ddl
    else:
        with pytest.raises(ServerError, match="Syntax error"):
            clickhouse.query(statements[0])


def test_int_hash64_picks_the_flows_the_kernel_follows(clickhouse):
    """compare --clickhouse brings transfers of several sampling rates to the
    largest with src/compare/clickhouse_source.cc's expression of the two
    port columns; the kernel and the daemon follow flows by their copies
    (bpf/transfer.h, src/record/transfer_sampling.h, whose unit test holds
    26.9's intHash64 values): this server must give the same."""
    got = clickhouse.query("SELECT intHash64(toUInt64(1234567890123456789)), "
                           "intHash64(toUInt64(toInt64(-5))) FORMAT TSV").split()
    assert got == ["8838629509554173056", "13263830642547698461"], got
    # The ports' expression is intHash64 of the smaller port in the upper
    # 16 bits, the larger in the lower, whichever end's record it reads.
    for lport, rport in ((443, 50000), (50000, 443), (8080, 8080), (65535, 1)):
        ports = f"toUInt16({lport}), toUInt16({rport})"
        key = min(lport, rport) << 16 | max(lport, rport)
        got = clickhouse.query(f"SELECT intHash64(bitOr(bitShiftLeft(toUInt64(least({ports})), 16), "
                               f"toUInt64(greatest({ports})))), intHash64(toUInt64({key})) FORMAT TSV").split()
        assert got[0] == got[1], (lport, rport, got)
