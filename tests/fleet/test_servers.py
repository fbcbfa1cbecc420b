"""The fixtures' own promises: Kafka keeps its port, topics and messages across
stop() and start(); Prometheus scrapes what it is given; the current engine's
HTTP front answers as ClickHouse's server."""
import base64
import http.server
import sys
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path

from servers import free_port, port_open, unique_name
from fleetfixtures import clickhouse_current, kafka_broker, prometheus_factory  # noqa: F401

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests/
from testlib import FixedAnswer  # noqa: E402


def test_kafka_restart_keeps_port_topics_and_messages(kafka_broker):
    topic = unique_name("fleet-test.restart.")
    kafka_broker.create_topic(topic, partitions=2)
    kafka_broker.produce(topic, [("k", "before"), (None, "line {\"a\":1}")])
    bootstrap = kafka_broker.bootstrap
    kafka_broker.stop()
    assert not kafka_broker.running() and not port_open(kafka_broker.port)
    try:
        time.sleep(1)
    finally:
        kafka_broker.start()
    assert kafka_broker.bootstrap == bootstrap
    assert topic in kafka_broker.topics()
    kafka_broker.produce(topic, [("k", "after")])
    got = kafka_broker.consume(topic)
    assert sorted((m.key or b"", m.value) for m in got) == [(b"", b'line {"a":1}'), (b"k", b"after"), (b"k", b"before")]
    assert [m.key for m in got if m.value.startswith(b"line")] == [None]


class _Metrics(FixedAnswer):
    body = b"# TYPE fleet_test_up gauge\nfleet_test_up 1\n"
    content_type = "text/plain; version=0.0.4"

    def status_for(self, path):
        return 200 if path == "/metrics" else 404


def test_prometheus_scrapes_a_target(prometheus_factory):
    server = http.server.ThreadingHTTPServer(("127.0.0.1", free_port()), _Metrics)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        prom = prometheus_factory([f"127.0.0.1:{server.server_port}"])
        targets = prom.wait_for_scrape("tcpscope", timeout=30)
        assert targets[0]["health"] == "up"
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and not prom.query("fleet_test_up"):
            time.sleep(0.5)
        assert [r["value"][1] for r in prom.query("fleet_test_up")] == ["1"]
    finally:
        server.shutdown()
        server.server_close()


def test_chdb_front_speaks_clickhouse_http(clickhouse_current):
    """The HTTP front answers as ClickHouse's server does for what its docstring
    lists, and passes the query through to the current engine."""
    ch = clickhouse_current
    assert int(ch.engine_version.split(".")[0]) >= 24, ch.engine_version

    def call(params=None, body=None, headers=None, auth=(ch.user, ch.password)):
        url = ch.http_url + ("?" + urllib.parse.urlencode(params) if params else "")
        h = dict(headers or {})
        if auth:
            h["Authorization"] = "Basic " + base64.b64encode(f"{auth[0]}:{auth[1]}".encode()).decode()
        req = urllib.request.Request(url, data=body, headers=h, method="POST" if body is not None else "GET")
        try:
            with urllib.request.urlopen(req, timeout=30) as r:
                return r.status, r.read().decode(), r.headers
        except urllib.error.HTTPError as e:
            return e.code, e.read().decode(), e.headers

    assert call(auth=None)[:2] == (200, "Ok.\n")
    assert call({"query": "SELECT version()"})[:2] == (200, ch.engine_version + "\n")
    ch.query("CREATE DATABASE fronttest")
    ch.query("CREATE TABLE fronttest.t (a UInt64, s Nullable(String)) ENGINE = MergeTree ORDER BY a")
    # An INSERT's rows in the body after the query; the whole query in the body.
    assert call({"query": "INSERT INTO fronttest.t FORMAT JSONEachRow"},
                b'{"a":18446744073709551615,"s":null}\n{"a":1,"s":"x"}\n')[0] == 200
    assert call(body=b"SELECT a, s FROM fronttest.t ORDER BY a")[:2] == (200, "1\tx\n18446744073709551615\t\\N\n")
    # database= and default_format=; a FORMAT in the query wins.
    status, out, _ = call({"query": "SELECT count() AS n FROM t", "database": "fronttest", "default_format": "JSONEachRow"})
    assert (status, out) == (200, '{"n":2}\n')
    assert call({"query": "SELECT currentDatabase() FORMAT CSV", "default_format": "JSON"})[1] == '"default"\n'
    assert call({"query": "SELECT 1", "user": ch.user, "password": ch.password}, auth=None)[:2] == (200, "1\n")
    assert call({"query": "SELECT 1"}, headers={"X-ClickHouse-User": ch.user, "X-ClickHouse-Key": ch.password},
                auth=None)[:2] == (200, "1\n")
    # Errors: the engine's text, its code, the server's status for it.
    status, out, headers = call({"query": "SELECT 1"}, auth=(ch.user, "wrong"))
    assert status == 403 and "AUTHENTICATION_FAILED" in out and headers["X-ClickHouse-Exception-Code"] == "516"
    status, out, headers = call({"query": "SELECT * FROM fronttest.nosuch"})
    assert status == 404 and out.startswith("Code: 60. DB::Exception:") and headers["X-ClickHouse-Exception-Code"] == "60"
    status, out, _ = call({"query": "SELEC 1"})
    assert status == 400 and out.startswith("Code: 62.")
    status, out, _ = call({"query": "SELECT 1", "max_threads": "1"})
    assert status == 404 and "max_threads" in out and "UNKNOWN_SETTING" in out
