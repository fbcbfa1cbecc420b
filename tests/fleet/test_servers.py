"""The fixtures' own promises: Kafka keeps its port, topics and messages across
stop() and start(); Prometheus scrapes what it is given."""
import http.server
import threading
import time

from servers import free_port, port_open, unique_name
from fleetfixtures import kafka_broker, prometheus_factory  # noqa: F401


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


class _Metrics(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        body = b"# TYPE fleet_test_up gauge\nfleet_test_up 1\n"
        self.send_response(200 if self.path == "/metrics" else 404)
        self.send_header("Content-Type", "text/plain; version=0.0.4")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


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
