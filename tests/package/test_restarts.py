"""Restarts and upgrades under the packaged unit lose no record (docs/packaging.md
"Restarts"), in a container booted with systemd (test_systemd_boot.py's):

* under churn (connections on the container's loopback, a record per end)
  and one long download open across everything: `systemctl restart`, a
  crash (kill -9, then systemd's Restart=), an upgrade to the same tree
  under a higher version: every connection has exactly one record per end
  in the flow log and in Kafka, but those the crashed daemon had read and
  not yet written (counted and printed); the download's records are whole,
  with its true bytes and FCT, and so are its transfers;
* an upgrade to a build of another record layout: detected, one line, the
  new daemon starts afresh and records what closes after it;
* a crash while the ring is too small for the downtime: what did not fit
  is counted in tcpscope_records_lost_total, the rest recovered;
* a daemon that never comes back: what the store held goes once the unit
  stops restarting (StartLimitBurst x RestartSec); `systemctl stop` leaves
  no program, link or map.

The Kafka broker runs in the container's network namespace (nsenter -n), so
the daemon reaches it on 127.0.0.1 under the unit's own confinement.
"""
import json
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from test_deb import BUILD, deb, project_version, sh  # noqa: F401 (deb: fixture)
from test_systemd_boot import UNIT, Container, container_debs

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests" / "fleet"))
from servers import KafkaBroker  # noqa: E402

TRAFFIC = Path(__file__).resolve().parent / "restart_traffic.py"
FLOW_LOG = "/var/log/tcpscope/flows.ndjson"
CHURN_PORT, LONG_PORT = 18080, 18081
TOPIC_FLOWS, TOPIC_TRANSFERS = "tcpscope.flows", "tcpscope.transfers"
EXPERIMENT = "restart-ab"  # a cc_policy rule on the servers' ports


def next_layout_deb(deb, workdir):
    """The package with the daemon built for the next record layout
    (CMake's tcpscope_next_layout), under a higher version."""
    sh("cmake", "--build", str(BUILD), "--target", "tcpscope_next_layout")
    tree = workdir / "next-layout"
    sh("dpkg-deb", "-R", str(deb), str(tree))
    shutil.copy(BUILD / "tcpscope_next_layout", tree / "usr/bin/tcpscope")
    sh("strip", "--strip-unneeded", str(tree / "usr/bin/tcpscope"))
    control = tree / "DEBIAN/control"
    control.write_text(re.sub(r"(?m)^Version: .*$", f"Version: {project_version()}+test2", control.read_text()))
    (tree / "DEBIAN/md5sums").unlink(missing_ok=True)
    out = workdir / "tcpscope_next_layout.deb"
    sh("dpkg-deb", "--root-owner-group", "-b", str(tree), str(out))
    return out


@pytest.fixture
def container(deb, tmp_path):
    debs = container_debs(deb, tmp_path)
    shutil.copy(next_layout_deb(deb, tmp_path), debs / "tcpscope_3.deb")
    c = Container(tmp_path, debs)
    try:
        yield Service(c, tmp_path)
    finally:
        c.stop()


class Service:
    """The container's tcpscope.service, and the container's network
    namespace for what runs beside it."""

    def __init__(self, c, tmp):
        self.c, self.tmp = c, tmp
        self.netns_inode = os.stat(f"/proc/{c.leader}/ns/net").st_ino
        self.nsenter = ["nsenter", "-t", str(c.leader), "-n", "--"]
        # One record per connection end: no client port may come back
        # within the test (TIME_WAIT reuse on loopback is on by default).
        for setting in ("net.ipv4.tcp_tw_reuse=0", "net.ipv4.ip_local_port_range=10000 60999"):
            sh(*self.nsenter, "sysctl", "-q", "-w", setting)
        # The container's cgroup v2 root (the parent of its init's), where
        # the policy's programs attach: the traffic runs in a child of it.
        mount = next(l.split()[1] for l in Path("/proc/self/mounts").read_text().splitlines()
                     if l.split()[2] == "cgroup2")
        init = next(l[3:] for l in Path(f"/proc/{c.leader}/cgroup").read_text().splitlines() if l.startswith("0::"))
        self.cgroup_root = Path(mount + str(Path(init).parent))

    def install(self, n):
        self.c.run("dpkg", "-i", "--force-confold", f"/debs/tcpscope_{n}.deb")

    def configure(self, experiment=False, **settings):
        lines = ["listen: 127.0.0.1:9810", f"flow_log: {FLOW_LOG}", "transfer_sampling_rate: 1"]
        lines += [f"{k}: {v}" for k, v in settings.items() if k != "kafka"]
        if experiment:
            lines += ["cc_policy:", "  rules:", f"    - name: {EXPERIMENT}",
                      f"      match: {{ lports: [{CHURN_PORT}, {LONG_PORT}] }}",
                      f"      experiment: {{ name: {EXPERIMENT}, arms: {{ bbr: 50, cubic: 50 }} }}"]
        if "kafka" in settings:
            lines += ["export:", "  kafka:", f"    brokers: [\"{settings['kafka']}\"]",
                      f"    topic_flows: {TOPIC_FLOWS}", f"    topic_transfers: {TOPIC_TRANSFERS}", "    format: json"]
        self.c.shell(f"cat > /etc/tcpscope/tcpscope.yaml <<'EOF'\n" + "\n".join(lines) + "\nEOF")

    def pid(self):
        return int(self.c.service("MainPID"))

    def healthy(self):
        return self.c.shell("curl -fsS http://127.0.0.1:9810/healthz", check=False).returncode == 0

    def wait_started(self, not_pid=None, timeout=60):
        deadline = time.monotonic() + timeout
        while not (self.pid() not in (0, not_pid) and self.healthy()):
            assert time.monotonic() < deadline, f"the service did not come back in {timeout} s:\n{self.journal()}"
            time.sleep(0.2)
        return self.pid()

    def restart(self):
        """systemctl restart; the start limit (5 in 300 s) is reset first:
        this test starts the unit more often than a fleet would."""
        pid = self.pid()
        self.c.run("systemctl", "reset-failed", UNIT)
        self.c.run("systemctl", "restart", UNIT)
        return self.wait_started(not_pid=pid)

    def journal(self):
        return self.c.journal()

    def metric(self, name):
        """The sum of the series of `name`."""
        text = self.c.shell("curl -fsS http://127.0.0.1:9810/metrics").stdout
        return sum(float(v) for v in re.findall(rf"(?m)^{name}(?:{{[^}}]*}})? (\S+)$", text))

    def flow_log(self):
        text = self.c.run("cat", FLOW_LOG).stdout
        return [json.loads(l) for l in text.splitlines() if l]

    def held(self):
        """The BPF programs, links and maps the daemon holds: {(kind, id)}."""
        out = self.c.shell(f"cat /proc/{self.pid()}/fdinfo/* 2>/dev/null | grep -E '^(prog|link|map)_id:'",
                           check=False).stdout
        return {(l.split(":")[0].removesuffix("_id"), int(l.split()[1])) for l in out.splitlines()}


def in_kernel(objects):
    """Those of `objects` the kernel still has."""
    now = set()
    for kind in ("prog", "link", "map"):
        now |= {(kind, o["id"]) for o in json.loads(sh("bpftool", "--json", kind, "show").stdout)}
    return objects & now


class Traffic:
    """restart_traffic.py in the container's network namespace."""

    def __init__(self, svc, rate):
        name = f"traffic-{time.monotonic_ns()}"
        self.dir = svc.tmp / name
        self.dir.mkdir()
        self.cgroup = svc.cgroup_root / f"tcpscope-test-{name}"
        self.cgroup.mkdir()
        self.log = open(self.dir / "out.txt", "w")
        run = f"echo $$ > {self.cgroup}/cgroup.procs && exec {sys.executable} {TRAFFIC} {self.dir} --rate {rate}"
        self.proc = subprocess.Popen([*svc.nsenter, "sh", "-c", run], stdout=self.log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 20
        while not (self.dir / "ready").exists():
            assert self.proc.poll() is None and time.monotonic() < deadline, self.output()
            time.sleep(0.05)

    def output(self):
        return (self.dir / "out.txt").read_text()

    def stop(self):
        (self.dir / "stop").touch()
        try:
            self.proc.wait(timeout=30)
        finally:
            if self.proc.poll() is None:
                self.proc.kill()
                self.proc.wait()
            self.log.close()
            for _ in range(50):  # the cgroup is busy until the exited process is gone from it
                try:
                    self.cgroup.rmdir()
                    break
                except OSError:
                    time.sleep(0.1)
        assert self.proc.returncode == 0 and (self.dir / "done").exists(), self.output()

    def connections(self):
        """{client port: the time the client closed it (ns)}"""
        rows = [l.split("\t") for l in (self.dir / "connections.tsv").read_text().splitlines()]
        conns = {int(p): int(t) for p, t in rows}
        assert len(conns) == len(rows), "a client port came back: one record per end cannot be told apart"
        return conns

    def long(self):
        return json.loads((self.dir / "long.json").read_text())


def churn_ends(records, netns, kind="flow"):
    """{client port: [records]} of the churn's connection ends."""
    ends = {}
    for r in records:
        if r.get("kind", "flow") != kind or r.get("netns") != netns:
            continue
        if r["rport"] == CHURN_PORT and r["dir"] == "active":
            ends.setdefault(r["lport"], []).append(r)
        elif r["lport"] == CHURN_PORT and r["dir"] == "passive":
            ends.setdefault(r["rport"], []).append(r)
    return ends


def kafka_records(kafka, topic):
    return [json.loads(line) for m in kafka.consume(topic) for line in m.value.decode().splitlines() if line]


def wait_for_records(svc, want_ports, timeout=30):
    """The flow log once every port in `want_ports` has both ends there, or
    what it holds after `timeout` s."""
    deadline = time.monotonic() + timeout
    while True:
        records = svc.flow_log()
        ends = churn_ends(records, svc.netns_inode)
        if all(len(ends.get(p, ())) >= 2 for p in want_ports) or time.monotonic() > deadline:
            return records
        time.sleep(0.5)


def test_restart_crash_and_upgrades_under_churn_lose_no_record(container, tmp_path):
    svc = container
    with KafkaBroker(launcher=svc.nsenter) as kafka:
        for topic in (TOPIC_FLOWS, TOPIC_TRANSFERS):
            kafka.create_topic(topic)
        svc.install(1)
        svc.configure(experiment=True, kafka=kafka.bootstrap)
        svc.restart()
        lost_before = svc.metric("tcpscope_records_lost_total")
        traffic = Traffic(svc, rate=400)
        events = {}
        try:
            time.sleep(3)
            events["restart"] = time.time_ns()
            pid = svc.restart()
            time.sleep(3)
            flows_before_crash = svc.metric("tcpscope_flows_total")
            events["kill"] = time.time_ns()
            svc.c.run("kill", "-9", str(pid))
            pid = svc.wait_started(not_pid=pid)  # Restart= after RestartSec (5 s)
            events["back"] = time.time_ns()
            time.sleep(3)
            events["upgrade"] = time.time_ns()
            svc.c.run("systemctl", "reset-failed", UNIT)
            svc.install(2)
            pid = svc.wait_started(not_pid=pid)
            time.sleep(3)
        finally:
            traffic.stop()
        conns = traffic.connections()
        long = traffic.long()
        records = wait_for_records(svc, conns)
        journal = svc.journal()
        assert journal.count("restart: took over the previous daemon's maps") == 4, journal  # config, restart, crash, upgrade
        print(f"{len(conns)} connections, {long['bytes']} bytes downloaded across the restarts; "
              f"restart at +{(events['restart'] - long['connect_ns']) / 1e9:.1f} s, "
              f"kill -9 at +{(events['kill'] - long['connect_ns']) / 1e9:.1f} s "
              f"(down {(events['back'] - events['kill']) / 1e9:.1f} s), "
              f"upgrade at +{(events['upgrade'] - long['connect_ns']) / 1e9:.1f} s")

        # Every churn connection: one record per end, in the flow log and in
        # Kafka; missing only what the killed daemon had read and not written.
        sources = {"flow log": records, "kafka": kafka_records(kafka, TOPIC_FLOWS)}
        for source, recs in sources.items():
            ends = churn_ends(recs, svc.netns_inode)
            twice = {p: len(e) for p, e in ends.items() if len(e) > 2}
            assert not twice, f"{source}: connections with more than one record per end: {list(twice.items())[:5]}"
            # The policy's rule names each server end across the restarts,
            # on the arm it drew.
            servers = [r for e in ends.values() for r in e if r["dir"] == "passive"]
            unnamed = [r for r in servers if r.get("cc_rule") != EXPERIMENT or r.get("arm") != r["cc"]]
            assert not unnamed, f"{source}: {len(unnamed)} of {len(servers)} server ends without the rule: {unnamed[:2]}"
            missing = sorted(conns[p] for p in conns if len(ends.get(p, ())) < 2)
            near_kill = [t for t in missing if events["kill"] - 2e9 <= t <= events["kill"]]
            print(f"{source}: {len(conns) - len(missing)} of {len(conns)} connections with both records; "
                  f"missing {len(missing)}, all closed in the "
                  f"{(events['kill'] - min(missing, default=events['kill'])) / 1e6:.0f} ms before the kill"
                  if missing else f"{source}: every connection of {len(conns)} has both records")
            assert missing == near_kill, \
                f"{source}: {len(missing) - len(near_kill)} connections without both records, not near the kill " \
                f"(closed at {[(t - events['kill']) / 1e9 for t in missing if t not in near_kill][:10]} s from it)"
            assert len(missing) < 0.01 * len(conns), f"{source}: {len(missing)} lost at the kill"

            # The download open across everything: both ends whole.
            long_ends = [r for r in recs if r.get("kind", "flow") == "flow" and r.get("netns") == svc.netns_inode
                         and long["client_port"] in (r["lport"], r["rport"])
                         and LONG_PORT in (r["lport"], r["rport"])]
            assert len(long_ends) == 2, f"{source}: the download's records: {long_ends}"
            true_fct_us = (long["last_byte_ns"] - long["connect_ns"]) / 1000
            for r in long_ends:
                assert not r.get("partial"), f"{source}: the download's record is partial: {r}"
                moved = r["bytes_acked"] if r["dir"] == "passive" else r["bytes_received"]
                assert moved == long["bytes"], f"{source}: {moved} bytes recorded of {long['bytes']}: {r}"
                assert abs(r["fct_us"] - true_fct_us) < 0.01 * true_fct_us + 50000, \
                    f"{source}: fct_us {r['fct_us']}, the client measured {true_fct_us:.0f}"
                assert r["start_ns"] < events["restart"]
                if r["dir"] == "passive":
                    assert r.get("cc_rule") == EXPERIMENT and r.get("arm") == r["cc"], r

        # Its transfers: one send, one receive, each with every byte.
        transfers = {"flow log": [r for r in records if r.get("kind") == "transfer"],
                     "kafka": kafka_records(kafka, TOPIC_TRANSFERS)}
        for source, recs in transfers.items():
            mine = [t for t in recs if t.get("netns") == svc.netns_inode
                    and long["client_port"] in (t["lport"], t["rport"]) and LONG_PORT in (t["lport"], t["rport"])]
            by_direction = {t["direction"]: t for t in mine}
            assert sorted(t["direction"] for t in mine) == ["recv", "send"], f"{source}: the download's transfers: {mine}"
            for t in mine:
                assert t["bytes"] == long["bytes"], f"{source}: transfer of {t['bytes']} bytes: {t}"
                assert t["xfer_us"] > 0.9 * (long["last_byte_ns"] - long["connect_ns"]) / 1000, t
            assert by_direction["send"]["start_ns"] < events["restart"]
            keys = [(t["flow_start_ns"], t["lport"], t["rport"], t["dir"], t["seq"]) for t in recs]
            assert len(keys) == len(set(keys)), f"{source}: a transfer recorded twice"

        # What a scrape sees: the daemon's own counters start again at each
        # start (a counter reset); the kernel's go on.
        flows_after = svc.metric("tcpscope_flows_total")
        print(f"tcpscope_flows_total: {flows_before_crash} before the kill, {flows_after} at the end")
        assert svc.metric("tcpscope_records_lost_total") == lost_before == 0

        # An upgrade to another record layout: one line, a fresh start.
        traffic = Traffic(svc, rate=200)
        try:
            time.sleep(2)
            svc.c.run("systemctl", "reset-failed", UNIT)
            events["other_layout"] = time.time_ns()
            svc.install(3)
            svc.wait_started(not_pid=pid)
            events["other_layout_back"] = time.time_ns()
            time.sleep(2)
        finally:
            traffic.stop()
        conns = traffic.connections()
        after = [p for p, t in conns.items() if t > events["other_layout_back"] + 0.5e9]
        records = wait_for_records(svc, after)
        journal = svc.journal()
        line = re.search(r"restart: the previous daemon's maps cannot be taken over \(([^)]*)\)", journal)
        layout = int(re.search(r"^#define TCPSCOPE_LAYOUT_VERSION (\d+)$", (Path(__file__).resolve().parents[2] /
                               "include/tcpscope/flow_event.h").read_text(), re.M).group(1))
        assert line and f"layout version {layout}, this build's is {layout + 1}" in line.group(1), journal[-3000:]
        ends = churn_ends(records, svc.netns_inode)
        assert all(len(ends.get(p, ())) == 2 for p in after), "connections closed after the new layout's start"
        lost = [p for p in conns if len(ends.get(p, ())) < 2]
        print(f"next layout: {len(lost)} of {len(conns)} connections lost around the fresh start "
              f"(down {(events['other_layout_back'] - events['other_layout']) / 1e9:.1f} s)")
        assert not any(len(e) > 2 for e in ends.values())


def test_ring_overflow_is_counted_and_nothing_outlives_the_unit(container):
    svc = container
    svc.install(1)
    # A ring too small for 5 s of churn while no daemon reads it.
    svc.configure(ring_buffer_bytes=262144)
    svc.restart()
    traffic = Traffic(svc, rate=600)
    try:
        time.sleep(1)
        pid = svc.pid()
        lost_before = svc.metric("tcpscope_records_lost_total")
        kill = time.time_ns()
        svc.c.run("kill", "-9", str(pid))
        svc.wait_started(not_pid=pid)
        back = time.time_ns()
    finally:
        traffic.stop()
    conns = traffic.connections()
    # kill(1) runs in the container after `kill` was read: a connection that
    # closed in the next moments may have been read by the dying daemon and
    # lost with it, not in the ring (its in-memory batch: one drain's worth
    # at most). Those of the first 200 ms are not counted either way.
    down = [p for p, t in conns.items() if kill + 200_000_000 < t < back]
    records = wait_for_records(svc, [p for p, t in conns.items() if t > back + 0.5e9], timeout=20)
    ends = churn_ends(records, svc.netns_inode)
    lost_records = sum(2 - len(ends.get(p, ())) for p in down)
    counted = svc.metric("tcpscope_records_lost_total") - lost_before
    print(f"ring of 256 KiB, {(back - kill) / 1e9:.1f} s without a daemon: {len(down)} connections closed, "
          f"{lost_records} of their {2 * len(down)} flow records lost; tcpscope_records_lost_total +{counted:.0f} "
          f"(flow and transfer records)")
    assert lost_records > 0, "the ring held the whole downtime: make it smaller or the churn faster"
    assert counted >= lost_records

    # A daemon that does not come back (its config broken): once the unit
    # stops restarting, what the store held goes. RestartSec=1s here, so the
    # bound (StartLimitBurst x RestartSec) is 5 s.
    svc.c.shell("mkdir -p /etc/systemd/system/tcpscope.service.d && printf '[Service]\\nRestartSec=1s\\n' "
                "> /etc/systemd/system/tcpscope.service.d/restart.conf && systemctl daemon-reload")
    svc.c.run("systemctl", "reset-failed", UNIT)
    svc.restart()
    held = svc.held()
    assert {k for k, _ in held} == {"prog", "link", "map"}, f"the daemon holds {held}"
    svc.c.shell("echo 'listen: [' > /etc/tcpscope/tcpscope.yaml")
    kill = time.monotonic()
    svc.c.run("kill", "-9", str(svc.pid()))
    deadline = kill + 30
    while in_kernel(held):
        assert time.monotonic() < deadline, \
            f"still held 30 s after the crash: {sorted(in_kernel(held))}; " \
            f"store {svc.c.service('NFileDescriptorStore')}:\n{svc.journal()[-2000:]}"
        time.sleep(0.2)
    gone = time.monotonic() - kill
    state = svc.c.service("ActiveState")
    print(f"no daemon took over: released {gone:.1f} s after the crash (unit {state})")
    assert state == "failed" and gone <= 5 * 1 + 5

    # Stop for good: nothing left.
    svc.configure()
    svc.c.run("systemctl", "reset-failed", UNIT)
    svc.restart()
    held = svc.held()
    svc.c.run("systemctl", "stop", UNIT)
    deadline = time.monotonic() + 10
    while in_kernel(held):
        assert time.monotonic() < deadline, f"left after systemctl stop: {in_kernel(held)}"
        time.sleep(0.2)
    assert svc.c.service("NFileDescriptorStore") == "0"
