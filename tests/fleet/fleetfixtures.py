"""Fixtures for the fleet tests: real Kafka, ClickHouse and Prometheus servers
on 127.0.0.1 (tests/fleet/servers.py). A test module imports the ones it uses
(`from fleetfixtures import kafka_broker  # noqa: F401`): as a conftest.py its
module name would clash with tests/integration's, whose tests import theirs.

  kafka_broker        one Kafka 4.x KRaft node for the session (KafkaBroker)
  clickhouse          one clickhouse-server for the session (ClickHouseServer)
  prometheus_factory  call it with scrape targets to get a started PrometheusServer;
                      every one started is stopped when the test ends
  clickhouse_current  ClickHouse's current engine (chdb-core) behind an HTTP front, for one
                      test (chdb_front.ChdbClickHouse; user "reader", a password of its own)

Session-scoped servers are shared: a test makes its own topics, consumer groups
and databases (servers.unique_name() helps) rather than assuming an empty server, and a
test that stops kafka_broker starts it again before it ends.

A server that cannot start fails the test with what is missing (the Debian
package scripts/dev.sh installs, mvn's error for Kafka's jars, or the pip install of
chdb-core that scripts/dev.sh test makes). With
TCPSCOPE_FLEET_SKIP_UNAVAILABLE=1 it skips instead, for a machine that cannot
have them.
"""
import os
import sys
import uuid
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
from servers import KAFKA_FROM_TOPIC_START, ClickHouseServer, KafkaBroker, PrometheusServer, ServerError  # noqa: E402
from chdb_front import ChdbClickHouse  # noqa: E402


def _unavailable(what: str, e: Exception):
    message = f"{what} could not be started: {e}"
    if os.environ.get("TCPSCOPE_FLEET_SKIP_UNAVAILABLE") == "1":
        pytest.skip(message)
    pytest.fail(message, pytrace=False)


def _session_server(make, what):
    try:
        server = make()
        server.__enter__()
    except ServerError as e:
        _unavailable(what, e)
    return server


@pytest.fixture(scope="session")
def kafka_broker():
    broker = _session_server(KafkaBroker, "Kafka")
    try:
        yield broker
    finally:
        broker.close()


@pytest.fixture(scope="session")
def clickhouse():
    server = _session_server(lambda: ClickHouseServer(extra_config=KAFKA_FROM_TOPIC_START), "ClickHouse")
    try:
        yield server
    finally:
        server.close()


@pytest.fixture
def clickhouse_current():
    server = _session_server(lambda: ChdbClickHouse(user="reader", password=uuid.uuid4().hex), "ClickHouse (chdb-core)")
    try:
        yield server
    finally:
        server.close()


@pytest.fixture
def prometheus_factory():
    started = []

    def make(scrape_targets, scrape_interval="1s", **kwargs):
        try:
            server = PrometheusServer(scrape_targets, scrape_interval=scrape_interval, **kwargs)
            started.append(server)
            server.start()
        except ServerError as e:
            _unavailable("Prometheus", e)
        return server

    try:
        yield make
    finally:
        for server in started:
            server.close()
