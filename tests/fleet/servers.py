"""Real servers for the fleet tests: Apache Kafka, ClickHouse, Prometheus.

Each class starts one real server on 127.0.0.1 on free ports, with its data,
config and log in a temp dir of its own, waits (bounded in time) until it
answers, and stops it: SIGTERM to its process group, a bounded wait, then
SIGKILL, and the temp dir removed. Each is a context manager, so a test or a
bench script that fails still stops it:

    with KafkaBroker() as kafka, ClickHouseServer() as ch:
        kafka.create_topic("t", partitions=3)
        ch.query("SELECT 1")

What they run (scripts/dev.sh installs the Debian packages):
  KafkaBroker       Apache Kafka (org.apache.kafka:kafka_2.13, KAFKA_VERSION) from Maven
                    Central, on Debian's OpenJDK 17, one KRaft node that is broker and
                    controller. The jars are fetched once with mvn (tests/fleet/kafka/pom.xml)
                    into $TCPSCOPE_TEST_CACHE (default /var/cache/tcpscope-tests); later
                    runs need no network.
  ClickHouseServer  Debian 12's clickhouse-server (18.16.1), foreground, own config.
  PrometheusServer  Debian 12's prometheus (2.42), own config and TSDB dir.

Nothing here needs a Python package outside the standard library: Kafka is
driven through Kafka's own Java tools (TopicCommand, ConsoleProducer,
ConsoleConsumer, GetOffsetShell) run from the same jars.

A server that cannot start raises ServerError with what to do (which package
is missing, the tail of the server's log).
"""

from __future__ import annotations

import base64
import concurrent.futures
import contextlib
import dataclasses
import fcntl
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.parse
import urllib.request
import uuid
from pathlib import Path
from typing import Callable, Iterable, Mapping, Sequence

HERE = Path(__file__).resolve().parent
KAFKA_POM = HERE / "kafka" / "pom.xml"
KAFKA_VERSION = os.environ.get("TCPSCOPE_KAFKA_VERSION", "4.1.1")
HOST = "127.0.0.1"


class ServerError(RuntimeError):
    """A server could not be started or did not answer in time."""


# ---------------------------------------------------------------- helpers


def unique_name(prefix: str) -> str:
    """A name no other test (or concurrent run) uses: prefix + 10 hex digits."""
    return f"{prefix}{uuid.uuid4().hex[:10]}"


def free_port() -> int:
    """A TCP port free on 127.0.0.1 now (bind to port 0, read it back, close)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((HOST, 0))
        return s.getsockname()[1]


def distinct_free_ports(n: int) -> list[int]:
    """n ports free_port() found, no two the same (a server's several listeners)."""
    ports: list[int] = []
    while len(ports) < n:
        port = free_port()
        if port not in ports:
            ports.append(port)
    return ports


def port_open(port: int, host: str = HOST) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.settimeout(0.5)
        return s.connect_ex((host, port)) == 0


def cache_dir() -> Path:
    """Where downloads are kept between runs: $TCPSCOPE_TEST_CACHE, else
    /var/cache/tcpscope-tests, else (not writable) ~/.cache/tcpscope-tests."""
    env = os.environ.get("TCPSCOPE_TEST_CACHE")
    candidates = [Path(env)] if env else [Path("/var/cache/tcpscope-tests"), Path.home() / ".cache" / "tcpscope-tests"]
    for c in candidates:
        try:
            c.mkdir(parents=True, exist_ok=True)
            if os.access(c, os.W_OK):
                return c
        except OSError:
            continue
    raise ServerError(f"no writable cache dir among {', '.join(map(str, candidates))} (set TCPSCOPE_TEST_CACHE)")


def tail(path: Path, lines: int = 40) -> str:
    try:
        text = Path(path).read_text(errors="replace")
    except OSError:
        return f"({path}: no log)"
    return "\n".join(text.splitlines()[-lines:])


def need_executable(name: str, package: str) -> str:
    path = shutil.which(name) or next((p for p in (f"/usr/sbin/{name}", f"/usr/bin/{name}") if os.access(p, os.X_OK)), None)
    if not path:
        raise ServerError(f"{name} not found: install the Debian package {package} "
                          f"(scripts/dev.sh installs it: apt-get install -y {package})")
    return path


def wait_until(what: str, check: Callable[[], object], timeout: float, *, interval: float = 0.2,
               proc: subprocess.Popen | None = None, log: Path | None = None):
    """Calls check() until it returns something truthy (returned), at most
    `timeout` seconds and a bounded number of times. A dead `proc` ends it at
    once. Raises ServerError with the tail of `log`."""
    deadline = time.monotonic() + timeout
    tries = max(1, int(timeout / interval) + 1)
    last_error = None
    for _ in range(tries):
        if proc is not None and proc.poll() is not None:
            raise ServerError(f"{what}: the process exited with {proc.returncode}\n--- {log}:\n{tail(log) if log else ''}")
        try:
            result = check()
            if result:
                return result
        except Exception as e:  # noqa: BLE001 - a check may fail in many ways before a server is up
            last_error = e
        if time.monotonic() >= deadline:
            break
        time.sleep(interval)
    raise ServerError(f"{what}: not done after {timeout:.0f} s (last error: {last_error!r})"
                      + (f"\n--- {log}:\n{tail(log)}" if log else ""))


def stop_process(proc: subprocess.Popen | None, timeout: float = 30.0) -> None:
    """SIGTERM to the process group, wait up to `timeout`, then SIGKILL."""
    if proc is None or proc.poll() is not None:
        return
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGTERM)
    try:
        proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=10)
    # Anything else left in the group (children that ignored SIGTERM).
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGKILL)


def spawn(argv: Sequence[str], log: Path, cwd: Path, env: Mapping[str, str] | None = None) -> subprocess.Popen:
    """Starts argv in a process group of its own, stdout and stderr to `log`."""
    with open(log, "ab") as out:
        return subprocess.Popen(list(argv), stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
                                cwd=cwd, env=dict(env) if env is not None else None, start_new_session=True)


class _Server:
    """Context-manager plumbing shared by the servers."""

    name = "server"

    def __init__(self, workdir: str | os.PathLike | None = None, keep: bool = False, start_timeout: float = 60):
        self.start_timeout = start_timeout  # seconds start() waits for the server to answer
        self._own_dir = workdir is None
        self.dir = Path(tempfile.mkdtemp(prefix=f"tcpscope-{self.name}-")) if workdir is None else Path(workdir)
        self.dir.mkdir(parents=True, exist_ok=True)
        self.keep = keep or bool(os.environ.get("TCPSCOPE_KEEP_SERVER_DIRS"))
        self.proc: subprocess.Popen | None = None
        self.start_seconds: float | None = None  # how long the last start() took

    def __enter__(self):
        try:
            self.start()
        except BaseException:
            self.close()
            raise
        return self

    def __exit__(self, *exc):
        self.close()
        return False

    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def stop(self) -> None:
        stop_process(self.proc)
        self.proc = None

    def close(self) -> None:
        """stop() and remove the temp dir (unless kept)."""
        try:
            self.stop()
        finally:
            if self._own_dir and not self.keep:
                shutil.rmtree(self.dir, ignore_errors=True)

    def start(self) -> None:  # pragma: no cover - overridden
        raise NotImplementedError


# ---------------------------------------------------------------- Kafka


@dataclasses.dataclass
class KafkaMessage:
    partition: int
    offset: int
    key: bytes | None
    value: bytes


def java_major() -> int:
    java = need_executable("java", "openjdk-17-jre-headless")
    out = subprocess.run([java, "-version"], capture_output=True, text=True, timeout=60).stderr
    m = re.search(r'version "(\d+)(?:\.(\d+))?', out)
    if not m:
        raise ServerError(f"cannot read the Java version from: {out.strip()}")
    major = int(m.group(1))
    return int(m.group(2)) if major == 1 else major


def kafka_jars(version: str = KAFKA_VERSION) -> Path:
    """The dir of Kafka `version`'s jars in the cache, fetched with mvn the first time."""
    root = cache_dir()
    dest = root / f"kafka-{version}"
    done = dest / ".complete"
    if done.exists():
        return dest
    mvn = need_executable("mvn", "maven")
    with open(root / f"kafka-{version}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # another test run may be fetching the same jars
        if done.exists():
            return dest
        staging = Path(tempfile.mkdtemp(prefix=f"kafka-{version}.", dir=root))
        try:
            r = subprocess.run([mvn, "-q", "-B", "-f", str(KAFKA_POM), "dependency:copy-dependencies",
                                f"-Dkafka.version={version}", "-DincludeScope=runtime",
                                f"-DoutputDirectory={staging}"],
                               capture_output=True, text=True, timeout=900)
            if r.returncode != 0 or not list(staging.glob("kafka_2.13-*.jar")):
                raise ServerError(f"mvn could not fetch Kafka {version} (exit {r.returncode}):\n"
                                  f"{(r.stdout + r.stderr)[-4000:]}")
            (staging / ".complete").write_text(f"org.apache.kafka:kafka_2.13:{version}\n")
            shutil.rmtree(dest, ignore_errors=True)
            staging.rename(dest)
        finally:
            shutil.rmtree(staging, ignore_errors=True)
    return dest


_LOG4J2_FILE = """\
status = warn
appender.file.type = File
appender.file.name = FILE
appender.file.fileName = {log}
appender.file.layout.type = PatternLayout
appender.file.layout.pattern = [%d] %p %m (%c)%n
rootLogger.level = INFO
rootLogger.appenderRef.file.ref = FILE
logger.raft.name = org.apache.kafka.raft
logger.raft.level = WARN
"""

_LOG4J2_TOOLS = """\
status = warn
appender.err.type = Console
appender.err.name = STDERR
appender.err.target = SYSTEM_ERR
appender.err.layout.type = PatternLayout
appender.err.layout.pattern = [%d] %p %m (%c)%n
rootLogger.level = WARN
rootLogger.appenderRef.err.ref = STDERR
"""

# Separators for the console consumer's output: text no JSON record holds.
_KEY_SEP = "<<tcpscope-fleet:key>>"
_FIELD_SEP = "<<tcpscope-fleet:field>>"
_LINE_SEP = "<<tcpscope-fleet:end>>\n"
_NULL = "<<tcpscope-fleet:null>>"


class KafkaBroker(_Server):
    """One Apache Kafka 4.x node in KRaft mode (broker and controller).

    .bootstrap is "127.0.0.1:PORT". stop() and start() again keep the port,
    the controller port, the cluster and the data: topics and messages
    survive a restart."""

    name = "kafka"

    def __init__(self, version: str = KAFKA_VERSION, workdir=None, keep: bool = False,
                 heap: str = "512m", extra_properties: Mapping[str, str] | None = None, start_timeout: float = 120,
                 launcher: Sequence[str] = ()):
        super().__init__(workdir, keep, start_timeout)
        self.version = version
        # A prefix for every Java process, the broker's and its tools': e.g.
        # nsenter into another network namespace, whose 127.0.0.1 it then serves.
        self.launcher = list(launcher)
        self.heap = heap
        self.extra_properties = dict(extra_properties or {})
        self.port, self.controller_port = distinct_free_ports(2)
        self.data_dir = self.dir / "data"
        self.log = self.dir / "kafka.log"          # the broker's log4j output
        self.stdout_log = self.dir / "kafka.stdout.log"
        self.properties = self.dir / "server.properties"
        self.cluster_id = base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
        self._jars: Path | None = None
        self._formatted = False

    @property
    def bootstrap(self) -> str:
        return f"{HOST}:{self.port}"

    # -- java plumbing

    def _java(self, main: str, args: Sequence[str], *, tool: bool = True, heap: str | None = None) -> list[str]:
        if self._jars is None:
            if java_major() < 17:
                raise ServerError("Kafka 4 needs Java 17 or later: apt-get install -y openjdk-17-jre-headless")
            self._jars = kafka_jars(self.version)
        log4j = self.dir / ("log4j2-tools.properties" if tool else "log4j2.properties")
        opts = [f"-Xmx{heap or ('256m' if tool else self.heap)}", "-Djava.awt.headless=true",
                f"-Dlog4j2.configurationFile={log4j}", f"-Dkafka.logs.dir={self.dir}"]
        if tool:
            opts += ["-XX:TieredStopAtLevel=1", "-XX:+UseSerialGC"]  # short-lived: start fast
        else:
            opts += [f"-Xms{heap or self.heap}", "-XX:+UseG1GC", "-XX:MaxGCPauseMillis=20"]
        return [*self.launcher, need_executable("java", "openjdk-17-jre-headless"), *opts, "-cp", f"{self._jars}/*",
                main, *args]

    def _port_open(self, port: int) -> bool:
        if not self.launcher:
            return port_open(port)
        probe = f"import socket; socket.create_connection(({HOST!r}, {port}), 1)"
        return subprocess.run([*self.launcher, sys.executable, "-c", probe], capture_output=True,
                              timeout=30).returncode == 0

    def run_tool(self, main: str, args: Sequence[str], *, input: bytes | None = None,
                 timeout: float = 120) -> subprocess.CompletedProcess:
        """Runs one of Kafka's Java command-line classes; raises on failure."""
        argv = self._java(main, args)
        try:
            r = subprocess.run(argv, input=input, capture_output=True, timeout=timeout, cwd=self.dir,
                               start_new_session=True)
        except subprocess.TimeoutExpired as e:
            raise ServerError(f"{main} {' '.join(args)}: no answer in {timeout} s\n"
                              f"{(e.stderr or b'').decode(errors='replace')[-3000:]}") from None
        if r.returncode != 0:
            raise ServerError(f"{main} {' '.join(args)} exited with {r.returncode}:\n"
                              f"{r.stderr.decode(errors='replace')[-3000:]}\n--- broker log:\n{tail(self.log, 20)}")
        return r

    # -- life cycle

    def _write_config(self) -> None:
        props = {
            "process.roles": "broker,controller",
            "node.id": "1",
            "controller.quorum.bootstrap.servers": f"{HOST}:{self.controller_port}",
            "listeners": f"PLAINTEXT://{HOST}:{self.port},CONTROLLER://{HOST}:{self.controller_port}",
            "advertised.listeners": f"PLAINTEXT://{HOST}:{self.port}",
            "controller.listener.names": "CONTROLLER",
            "inter.broker.listener.name": "PLAINTEXT",
            "listener.security.protocol.map": "CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT",
            "log.dirs": str(self.data_dir),
            "num.partitions": "1",
            "default.replication.factor": "1",
            "min.insync.replicas": "1",
            "offsets.topic.replication.factor": "1",
            "offsets.topic.num.partitions": "1",  # one partition: the first consumer group starts fast
            "transaction.state.log.replication.factor": "1",
            "transaction.state.log.min.isr": "1",
            "transaction.state.log.num.partitions": "1",
            "share.coordinator.state.topic.replication.factor": "1",
            "share.coordinator.state.topic.min.isr": "1",
            "group.initial.rebalance.delay.ms": "0",
            "auto.create.topics.enable": "true",
            "log.retention.hours": "168",
            "log.segment.bytes": str(64 * 1024 * 1024),
            **self.extra_properties,
        }
        self.properties.write_text("".join(f"{k}={v}\n" for k, v in props.items()))
        (self.dir / "log4j2.properties").write_text(_LOG4J2_FILE.format(log=self.log))
        (self.dir / "log4j2-tools.properties").write_text(_LOG4J2_TOOLS)

    def start(self) -> None:
        """Starts the broker (formats its storage the first time) and waits until it
        serves. Again after stop(): the same ports, cluster and data."""
        if self.running():
            return
        t0 = time.monotonic()
        if not self._formatted:
            self._write_config()
            # "=": a base64 id can begin with "-", which argparse would take for an option.
            self.run_tool("kafka.tools.StorageTool",
                          ["format", f"--cluster-id={self.cluster_id}", "--config", str(self.properties), "--standalone"],
                          timeout=180)
            self._formatted = True
        for p in (self.port, self.controller_port):
            if self._port_open(p):
                raise ServerError(f"port {p} is taken by another process: the broker cannot start on it again")
        started_marks = self.log.read_text(errors="replace").count("Kafka Server started") if self.log.exists() else 0
        self.proc = spawn(self._java("kafka.Kafka", [str(self.properties)], tool=False), self.stdout_log, self.dir)

        def started():
            text = self.log.read_text(errors="replace") if self.log.exists() else ""
            return text.count("Kafka Server started") > started_marks and self._port_open(self.port)

        try:
            wait_until(f"Kafka {self.version} on {self.bootstrap}", started, self.start_timeout, interval=0.25,
                       proc=self.proc, log=self.log)
        except ServerError as e:
            raise ServerError(f"{e}\n--- {self.stdout_log}:\n{tail(self.stdout_log, 20)}") from None
        self.start_seconds = time.monotonic() - t0

    # -- topics and messages

    def create_topic(self, name: str, partitions: int = 1, config: Mapping[str, str] | None = None) -> None:
        args = ["--bootstrap-server", self.bootstrap, "--create", "--if-not-exists", "--topic", name,
                "--partitions", str(partitions), "--replication-factor", "1"]
        for k, v in (config or {}).items():
            args += ["--config", f"{k}={v}"]
        self.run_tool("org.apache.kafka.tools.TopicCommand", args)

    def topics(self) -> list[str]:
        r = self.run_tool("org.apache.kafka.tools.TopicCommand", ["--bootstrap-server", self.bootstrap, "--list"])
        return [t for t in r.stdout.decode().split() if t]

    def end_offsets(self, topic: str) -> dict[int, int]:
        """{partition: the offset after its last message}."""
        r = self.run_tool("org.apache.kafka.tools.GetOffsetShell",
                          ["--bootstrap-server", self.bootstrap, "--topic", topic, "--time", "-1"])
        offsets = {}
        for line in r.stdout.decode().splitlines():
            t, part, off = line.rsplit(":", 2)
            if t == topic:
                offsets[int(part)] = int(off)
        return offsets

    def count(self, topic: str) -> int:
        """How many messages the topic holds (end offsets; no compaction or deletion here)."""
        return sum(self.end_offsets(topic).values())

    def produce(self, topic: str, messages: Iterable[bytes | str | tuple], timeout: float = 120) -> None:
        """Sends messages, each a value or a (key, value) pair (key None: no key),
        acks=all. Values and keys cannot hold a newline (the console producer
        reads one message per line)."""
        lines = []
        for m in messages:
            key, value = m if isinstance(m, tuple) else (None, m)
            key = _NULL if key is None else key
            key, value = (x.decode() if isinstance(x, bytes) else x for x in (key, value))
            if "\n" in key or "\n" in value or _KEY_SEP in key:
                raise ValueError("a message's key and value must not hold a newline")
            lines.append(f"{key}{_KEY_SEP}{value}\n")
        self.run_tool("org.apache.kafka.tools.ConsoleProducer",
                      ["--bootstrap-server", self.bootstrap, "--topic", topic,
                       "--property", "parse.key=true", "--property", f"key.separator={_KEY_SEP}",
                       "--property", f"null.marker={_NULL}",
                       "--producer-property", "acks=all", "--producer-property", "linger.ms=5"],
                      input="".join(lines).encode(), timeout=timeout)

    def produce_payload(self, topic: str, payload: bytes | str, timeout: float = 120) -> None:
        """Sends one message whose value is `payload` exactly, newlines and all (an
        NDJSON batch as a sink may send it), no key, acks=all. Through Kafka's
        ProducerPerformance tool with one record from a payload file."""
        payload = payload.encode() if isinstance(payload, str) else payload
        if _KEY_SEP.encode() in payload:
            raise ValueError("the payload holds the separator this helper uses")
        fd, path = tempfile.mkstemp(prefix="payload.", dir=self.dir)
        try:
            with os.fdopen(fd, "wb") as f:
                f.write(payload)
            self.run_tool("org.apache.kafka.tools.ProducerPerformance",
                          ["--topic", topic, "--num-records", "1", "--throughput", "-1",
                           "--payload-file", path, "--payload-delimiter", _KEY_SEP,
                           "--producer-props", f"bootstrap.servers={self.bootstrap}", "acks=all"],
                          timeout=timeout)
        finally:
            os.unlink(path)

    def consume(self, topic: str, timeout: float = 60) -> list[KafkaMessage]:
        """Every message the topic holds now, with partition, offset, key and value,
        ordered by (partition, offset): each partition is read up to the end
        offset it had when called, even while producers go on appending (one
        reader over the whole topic that stops after as many messages could
        return new ones of one partition instead of old ones of another)."""
        ends = {p: e for p, e in self.end_offsets(topic).items() if e > 0}
        with concurrent.futures.ThreadPoolExecutor(max_workers=max(1, len(ends))) as pool:
            parts = pool.map(lambda pe: self._consume_partition(topic, *pe, timeout), sorted(ends.items()))
            return [m for part in parts for m in part]

    def _consume_partition(self, topic: str, partition: int, end: int, timeout: float) -> list[KafkaMessage]:
        """Offsets 0 .. end-1 of one partition (nothing is compacted or deleted here)."""
        r = self.run_tool("org.apache.kafka.tools.consumer.ConsoleConsumer",
                          ["--bootstrap-server", self.bootstrap, "--topic", topic,
                           "--partition", str(partition), "--offset", "earliest",
                           "--max-messages", str(end), "--timeout-ms", str(int(timeout * 1000)),
                           "--property", "print.partition=true", "--property", "print.offset=true",
                           "--property", "print.key=true", "--property", f"key.separator={_FIELD_SEP}",
                           "--property", f"line.separator={_LINE_SEP}", "--property", f"null.literal={_NULL}"],
                          timeout=timeout + 60)
        out = r.stdout.decode("utf-8", errors="surrogateescape")
        records = out.split(_LINE_SEP)
        if records and records[-1] == "":
            records.pop()
        messages = []
        for rec in records:
            fields = rec.split(_FIELD_SEP, 3)
            if len(fields) != 4:
                raise ServerError(f"cannot parse the console consumer's record {rec[:200]!r}")
            part, off, key, value = fields
            messages.append(KafkaMessage(partition=int(part.removeprefix("Partition:")),
                                         offset=int(off.removeprefix("Offset:")),
                                         key=None if key == _NULL else key.encode("utf-8", "surrogateescape"),
                                         value=value.encode("utf-8", "surrogateescape")))
        if [m.offset for m in messages] != list(range(end)) or any(m.partition != partition for m in messages):
            raise ServerError(f"{topic}[{partition}]: read {len(messages)} messages, not offsets 0..{end - 1}, "
                              f"in {timeout} s\n{r.stderr.decode(errors='replace')[-2000:]}")
        return messages


# ---------------------------------------------------------------- ClickHouse

_CH_CONFIG = """\
<?xml version="1.0"?>
<yandex>
    <logger>
        <level>{log_level}</level>
        <log>{dir}/clickhouse-server.log</log>
        <errorlog>{dir}/clickhouse-server.err.log</errorlog>
        <size>100M</size>
        <count>1</count>
        <console>0</console>
    </logger>
    <listen_host>127.0.0.1</listen_host>
    <http_port>{http_port}</http_port>
    <tcp_port>{tcp_port}</tcp_port>
    <path>{dir}/data/</path>
    <tmp_path>{dir}/tmp/</tmp_path>
    <user_files_path>{dir}/user_files/</user_files_path>
    <format_schema_path>{dir}/format_schemas/</format_schema_path>
    <users_config>{dir}/users.xml</users_config>
    <default_profile>default</default_profile>
    <default_database>default</default_database>
    <timezone>UTC</timezone>
    <mark_cache_size>268435456</mark_cache_size>
    <uncompressed_cache_size>268435456</uncompressed_cache_size>
    <max_concurrent_queries>100</max_concurrent_queries>
    <max_connections>256</max_connections>
    <keep_alive_timeout>3</keep_alive_timeout>
    <builtin_dictionaries_reload_interval>3600</builtin_dictionaries_reload_interval>
{extra}</yandex>
"""

_CH_USERS = """\
<?xml version="1.0"?>
<yandex>
    <profiles>
        <default>
            <max_memory_usage>4000000000</max_memory_usage>
            <load_balancing>random</load_balancing>
            <!-- 18.16's Kafka engine writes a block once it holds max_block_size rows or the
                 topic goes quiet; a daemon on this host never lets it go quiet (it records
                 the transfers of its own Kafka connection), so the default 65536 would hold
                 a test's records for minutes. -->
            <max_block_size>1024</max_block_size>
        </default>
    </profiles>
    <users>
        <default>
            <password></password>
            <networks><ip>127.0.0.1</ip><ip>::1</ip></networks>
            <profile>default</profile>
            <quota>default</quota>
        </default>
    </users>
    <quotas>
        <default>
            <interval>
                <duration>3600</duration>
                <queries>0</queries><errors>0</errors><result_rows>0</result_rows>
                <read_rows>0</read_rows><execution_time>0</execution_time>
            </interval>
        </default>
    </quotas>
</yandex>
"""


# As packaging/clickhouse/*.sql's headers tell an operator of ClickHouse 18.16:
# a new consumer group reads the topic from its start, so what was produced
# while the group was still joining is not skipped.
KAFKA_FROM_TOPIC_START = "<kafka><auto_offset_reset>smallest</auto_offset_reset></kafka>"


class ClickHouseHttp:
    """A client of ClickHouse's HTTP interface at `http_url`: what the tests
    send to any ClickHouse, the server (ClickHouseServer) or the current
    engine behind its HTTP front (chdb_front.ChdbClickHouse), as `user`."""

    user, password = "default", ""

    @property
    def http_url(self) -> str:  # pragma: no cover - overridden
        raise NotImplementedError

    def query(self, sql: str, data: bytes | None = None, timeout: float = 60, **settings) -> str:
        """Runs one statement over HTTP and returns the response body. With `data`,
        `sql` is an INSERT ... FORMAT ... and `data` its rows. Raises ServerError
        with ClickHouse's message on an error."""
        if data is None:
            url, body = self.http_url, sql.encode()
            if settings:
                url += "?" + urllib.parse.urlencode(settings)
        else:
            url = self.http_url + "?" + urllib.parse.urlencode({"query": sql, **settings})
            body = data
        auth = base64.b64encode(f"{self.user}:{self.password}".encode()).decode()
        req = urllib.request.Request(url, data=body, method="POST", headers={"Authorization": f"Basic {auth}"})
        try:
            with urllib.request.urlopen(req, timeout=timeout) as r:
                return r.read().decode()
        except urllib.error.HTTPError as e:
            raise ServerError(f"ClickHouse: {e.read().decode(errors='replace').strip()}\n--- query:\n{sql[:2000]}") from None

    def query_json(self, sql: str, **settings) -> list[dict]:
        """Rows of a SELECT as dicts (FORMAT JSONEachRow appended)."""
        out = self.query(sql.rstrip().rstrip(";") + " FORMAT JSONEachRow", **settings)
        return [json.loads(line) for line in out.splitlines() if line.strip()]

    def execute_script(self, sql: str) -> None:
        """Runs a multi-statement file (as clickhouse-client --multiquery would) over
        HTTP, one statement at a time. Comments are dropped; statements are cut at
        ';' outside quotes."""
        for stmt in split_sql(sql):
            self.query(stmt)


class ClickHouseServer(ClickHouseHttp, _Server):
    """clickhouse-server in the foreground with its own config.xml and users.xml
    (user default, no password, 127.0.0.1 only), data and logs in its temp dir.

    `extra_config` is XML put inside <yandex> (e.g. a <kafka> section of
    librdkafka settings). The log level is `log_level`, else
    $TCPSCOPE_CLICKHOUSE_LOG_LEVEL, else information."""

    name = "clickhouse"

    def __init__(self, workdir=None, keep: bool = False, extra_config: str = "", start_timeout: float = 60,
                 log_level: str | None = None):
        binary = need_executable("clickhouse-server", "clickhouse-server")
        super().__init__(workdir, keep, start_timeout)
        self.binary = binary
        self.http_port, self.tcp_port = distinct_free_ports(2)
        self.extra_config = extra_config
        self.log_level = log_level or os.environ.get("TCPSCOPE_CLICKHOUSE_LOG_LEVEL", "information")
        self.log = self.dir / "clickhouse-server.log"
        self.err_log = self.dir / "clickhouse-server.err.log"
        self.stdout_log = self.dir / "clickhouse-server.stdout.log"
        self.config = self.dir / "config.xml"

    @property
    def http_url(self) -> str:
        return f"http://{HOST}:{self.http_port}/"

    def start(self) -> None:
        if self.running():
            return
        t0 = time.monotonic()
        for sub in ("data", "tmp", "user_files", "format_schemas"):
            (self.dir / sub).mkdir(exist_ok=True)
        self.config.write_text(_CH_CONFIG.format(dir=self.dir, http_port=self.http_port, tcp_port=self.tcp_port,
                                                 log_level=self.log_level, extra=self.extra_config))
        (self.dir / "users.xml").write_text(_CH_USERS)
        # 18.16 runs as root as it is (newer servers want the owner of the data dir);
        # under another user, that user owns the temp dir anyway.
        self.proc = spawn([self.binary, f"--config-file={self.config}"], self.stdout_log, self.dir)

        def ping():
            with urllib.request.urlopen(self.http_url + "ping", timeout=2) as r:
                return r.read().strip() == b"Ok."

        try:
            wait_until(f"clickhouse-server on {self.http_url}", ping, self.start_timeout, proc=self.proc, log=self.err_log)
        except ServerError as e:
            raise ServerError(f"{e}\n--- {self.stdout_log}:\n{tail(self.stdout_log, 20)}") from None
        self.start_seconds = time.monotonic() - t0


def split_sql(sql: str) -> list[str]:
    """Statements of a SQL script: '--' and '/* */' comments dropped, cut at ';'
    outside quotes (single, double, back)."""
    out, cur, i, quote = [], [], 0, None
    while i < len(sql):
        c = sql[i]
        if quote:
            cur.append(c)
            if c == "\\" and i + 1 < len(sql):
                cur.append(sql[i + 1])
                i += 1
            elif c == quote:
                quote = None
        elif c in "'\"`":
            quote = c
            cur.append(c)
        elif sql.startswith("--", i):
            j = sql.find("\n", i)
            i = len(sql) if j < 0 else j
            continue
        elif sql.startswith("/*", i):
            j = sql.find("*/", i + 2)
            i = len(sql) if j < 0 else j + 2
            continue
        elif c == ";":
            stmt = "".join(cur).strip()
            if stmt:
                out.append(stmt)
            cur = []
        else:
            cur.append(c)
        i += 1
    stmt = "".join(cur).strip()
    if stmt:
        out.append(stmt)
    return out


# ---------------------------------------------------------------- Prometheus


class PrometheusServer(_Server):
    """Debian's prometheus with a generated config scraping `scrape_targets`:
    a list of "host:port" (one job, "tcpscope") or {job: ["host:port", ...]}."""

    name = "prometheus"

    def __init__(self, scrape_targets: Sequence[str] | Mapping[str, Sequence[str]], scrape_interval: str = "1s",
                 metrics_path: str = "/metrics", workdir=None, keep: bool = False, start_timeout: float = 60):
        binary = need_executable("prometheus", "prometheus")
        super().__init__(workdir, keep, start_timeout)
        self.binary = binary
        if isinstance(scrape_targets, Mapping):
            self.jobs = {job: list(t) for job, t in scrape_targets.items()}
        else:
            self.jobs = {"tcpscope": list(scrape_targets)}
        self.scrape_interval = scrape_interval
        self.metrics_path = metrics_path
        self.port = free_port()  # kept across restarts, and so is the URL
        self.url = f"http://{HOST}:{self.port}"
        self.log = self.dir / "prometheus.log"
        self.config = self.dir / "prometheus.yml"

    def _write_config(self) -> None:
        # JSON is YAML: no YAML writer needed.
        config = {
            "global": {"scrape_interval": self.scrape_interval, "scrape_timeout": self.scrape_interval,
                       "evaluation_interval": self.scrape_interval},
            "scrape_configs": [{"job_name": job, "metrics_path": self.metrics_path,
                                "static_configs": [{"targets": targets}]} for job, targets in self.jobs.items()],
        }
        self.config.write_text(json.dumps(config, indent=2) + "\n")

    def start(self) -> None:
        if self.running():
            return
        t0 = time.monotonic()
        self._write_config()
        (self.dir / "data").mkdir(exist_ok=True)
        self.proc = spawn([self.binary, f"--config.file={self.config}", f"--storage.tsdb.path={self.dir / 'data'}",
                           f"--web.listen-address={HOST}:{self.port}", "--web.enable-lifecycle",
                           "--log.level=info"], self.log, self.dir)
        wait_until(f"prometheus on {self.url}", lambda: self._get("/-/ready", raw=True), self.start_timeout,
                   proc=self.proc, log=self.log)
        self.start_seconds = time.monotonic() - t0

    def _get(self, path: str, raw: bool = False, **params):
        url = self.url + path + ("?" + urllib.parse.urlencode(params) if params else "")
        with urllib.request.urlopen(url, timeout=5) as r:
            body = r.read()
        return body if raw else json.loads(body)

    def targets(self) -> list[dict]:
        """The active targets (/api/v1/targets)."""
        return self._get("/api/v1/targets")["data"]["activeTargets"]

    def query(self, promql: str) -> list[dict]:
        """An instant query's result vector (/api/v1/query)."""
        r = self._get("/api/v1/query", query=promql)
        if r.get("status") != "success":
            raise ServerError(f"prometheus query {promql!r}: {r}")
        return r["data"]["result"]

    def wait_for_scrape(self, job: str = "tcpscope", timeout: float = 60) -> list[dict]:
        """Waits until every target of `job` has been scraped successfully
        (health "up"); returns those targets."""
        want = len(self.jobs.get(job, ()))
        if not want:
            raise ValueError(f"no job {job!r} in {list(self.jobs)}")

        def scraped():
            ts = [t for t in self.targets() if t.get("labels", {}).get("job") == job]
            return ts if len(ts) == want and all(t.get("health") == "up" for t in ts) else None

        try:
            return wait_until(f"prometheus scraping job {job}", scraped, timeout, interval=0.25, proc=self.proc)
        except ServerError as e:
            with contextlib.suppress(Exception):
                e.args = (f"{e.args[0]}\ntargets: {json.dumps(self.targets())[:2000]}",)
            raise
