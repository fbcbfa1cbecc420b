"""The package under a booted systemd: install, start, upgrade, remove and
purge with systemd as PID 1 and the unit applied by systemd itself
(SystemCallFilter=, RestrictAddressFamilies=, ProtectSystem=, ... for real).

systemd is not PID 1 on the development and CI machines, so this boots one
in a container: systemd-nspawn -b (package systemd-container) on the
machine's own root file system, seen through an overlay whose upper layer is
a tmpfs, so that nothing is downloaded (no debootstrap) and nothing the
container does reaches the machine. The container has its own network
namespace (--private-network: the daemon's port 9810 is its own), keeps
CAP_BPF, CAP_PERFMON and CAP_NET_ADMIN in its bounding set, and has bpf(2)
added to nspawn's own seccomp allow-list (--system-call-filter=bpf; without
it every bpf() of the container fails with EPERM). Commands run inside with
nsenter, which does not take on that filter: what the test checks about the
daemon is what systemd started.
"""
import json
import os
import re
import shutil
import signal
import subprocess
import time
from pathlib import Path

import pytest

from test_deb import _repacked_with_version, deb, project_version, sh  # noqa: F401 (deb: fixture)
from unit_sandbox import Unit

ROOT = Path(__file__).resolve().parents[2]
UNIT = "tcpscope.service"


def _comm(pid):
    """A process's name, or None once it has gone (the setup's short-lived
    children come and go while we look: CI caught one between pgrep and here)."""
    try:
        return Path(f"/proc/{pid}/comm").read_text().strip()
    except (FileNotFoundError, ProcessLookupError):
        return None


class Container:
    def __init__(self, tmp_path, debs):
        self.tmp = tmp_path
        layers = tmp_path / "layers"
        layers.mkdir()
        self.console = tmp_path / "console.txt"
        setup = f"""set -e
mount --make-rprivate /
mount -t tmpfs -o mode=0700 layers {layers}
mkdir {layers}/upper {layers}/work {layers}/root
mount -t overlay overlay -o lowerdir=/,upperdir={layers}/upper,workdir={layers}/work {layers}/root
R={layers}/root
systemd-id128 new > $R/etc/machine-id
rm -f $R/usr/sbin/policy-rc.d
# nspawn masks files with the nodes systemd (as PID 1) keeps here; make them
# when no systemd made them.
if [ ! -e /run/systemd/inaccessible/reg ]; then
  if [ -d /run/systemd ]; then mount -t tmpfs -o mode=0755 nspawn-run /run/systemd
  else mount -t tmpfs -o mode=0755 nspawn-run /run && mkdir /run/systemd; fi
  mkdir -m 000 -p /run/systemd/inaccessible/dir && touch /run/systemd/inaccessible/reg
  chmod 000 /run/systemd/inaccessible/dir /run/systemd/inaccessible/reg
  mknod -m 000 /run/systemd/inaccessible/chr c 0 0 && mknod -m 000 /run/systemd/inaccessible/blk b 0 0
  mkfifo -m 000 /run/systemd/inaccessible/fifo
fi
exec systemd-nspawn -q -D $R --register=no --keep-unit --private-network \\
  --capability=CAP_BPF,CAP_PERFMON,CAP_NET_ADMIN,CAP_SYS_ADMIN --system-call-filter=bpf --bind-ro={debs}:/debs \\
  --console=read-only -b systemd.unit=multi-user.target
"""
        self.log = open(self.console, "w")
        self.proc = subprocess.Popen(["unshare", "--mount", "--propagation", "private", "--", "sh", "-c", setup],
                                     stdout=self.log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        self.leader = None
        try:
            self._wait_for_boot()
        except BaseException:
            # The fixture never gets the container to stop: do it here, or a
            # failed boot leaves the container running (CI left one).
            self.stop()
            raise

    def _wait_for_boot(self):
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            assert self.proc.poll() is None, f"systemd-nspawn exited {self.proc.returncode}: {self.console_text()}"
            kids = sh("pgrep", "-P", str(self.proc.pid), check=False).stdout.split()
            if kids and _comm(kids[0]) == "systemd":
                self.leader = int(kids[0])
                state = self.run("systemctl", "is-system-running", check=False).stdout.strip()
                if state in ("running", "degraded"):
                    return
            time.sleep(0.5)
        raise AssertionError(f"the container did not boot in 120 s: {self.console_text()}")

    def console_text(self):
        return self.console.read_text()[-3000:]

    def run(self, *cmd, check=True):
        r = subprocess.run(["nsenter", "-t", str(self.leader), "-a", "--", *cmd],
                           capture_output=True, text=True, timeout=180, stdin=subprocess.DEVNULL,
                           env={"PATH": "/usr/sbin:/usr/bin:/sbin:/bin", "LANG": "C.UTF-8",
                                "DEBIAN_FRONTEND": "noninteractive"})
        if check and r.returncode != 0:
            raise AssertionError(f"in the container, {' '.join(cmd)} exited {r.returncode}:\n{r.stdout}\n{r.stderr}")
        return r

    def shell(self, script, check=True):
        return self.run("sh", "-c", script, check=check)

    def service(self, prop):
        return self.run("systemctl", "show", "-P", prop, UNIT).stdout.strip()

    def journal(self):
        return self.run("journalctl", "-u", UNIT, "--no-pager", "-o", "cat", check=False).stdout

    def clean_stops(self):
        """How many times the daemon said it flushed, detached and exited."""
        return self.journal().splitlines().count("tcpscope: stopped")

    def stop(self):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)  # nspawn halts the container
            try:
                self.proc.wait(60)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.log.close()


def container_debs(deb, tmp_path):
    """The packages a container installs: the build's .deb, then the same
    one as a newer version (an upgrade). Skips where no container can boot."""
    if os.geteuid() != 0:
        pytest.skip("boots a container: needs root")
    if not shutil.which("systemd-nspawn"):
        pytest.skip("systemd-nspawn missing (package systemd-container; .ci/run installs it)")
    debs = tmp_path / "debs"
    debs.mkdir()
    shutil.copy(deb, debs / "tcpscope_1.deb")
    shutil.copy(_repacked_with_version(deb, project_version() + "+test1", tmp_path), debs / "tcpscope_2.deb")
    return debs


@pytest.fixture
def container(deb, tmp_path):
    debs = container_debs(deb, tmp_path)
    for tool in ("nsenter", "unshare", "systemd-id128", "bpftool"):
        assert shutil.which(tool), f"{tool} missing"
    c = Container(tmp_path, debs)
    try:
        yield c
    finally:
        c.stop()


def held_bpf_ids(c, pid):
    out = c.shell(f"cat /proc/{pid}/fdinfo/* 2>/dev/null | grep -E '^(prog|link)_id:'", check=False).stdout
    return {tuple(l.split()) for l in out.splitlines()}


def test_install_start_upgrade_remove_purge_under_systemd(container):
    c = container
    c.run("dpkg", "-P", "tcpscope")  # in case the machine has it installed
    r = c.run("dpkg", "-i", "/debs/tcpscope_1.deb")
    # Installed: enabled and started by the postinst, healthy under the real unit.
    assert c.run("systemctl", "is-enabled", UNIT, check=False).stdout.strip() == "enabled"

    def active():
        return c.run("systemctl", "is-active", UNIT, check=False).stdout.strip() == "active" and \
            c.shell("curl -fsS http://127.0.0.1:9810/healthz", check=False).returncode == 0
    deadline = time.monotonic() + 60
    while not active():
        assert time.monotonic() < deadline, f"not active and healthy after install:\n{r.stdout}\n{c.journal()}"
        time.sleep(0.5)
    pid = int(c.service("MainPID"))
    metrics = c.shell("curl -fsS http://127.0.0.1:9810/metrics").stdout
    assert f'version="{project_version()}"' in metrics

    # systemd applied the unit: user, capabilities, seccomp (filter mode),
    # no new privileges.
    unit = Unit(ROOT / "packaging/systemd/tcpscope.service")
    status = dict(l.split(":", 1) for l in c.shell(f"cat /proc/{pid}/status").stdout.splitlines() if ":" in l)
    uid = c.run("id", "-u", "tcpscope").stdout.strip()
    assert status["Uid"].split() == [uid] * 4
    assert int(status["CapEff"], 16) & ~unit.cap_mask("AmbientCapabilities") == 0
    assert int(status["CapBnd"], 16) & ~unit.cap_mask("CapabilityBoundingSet") == 0
    assert status["NoNewPrivs"].strip() == "1" and status["Seccomp"].strip() == "2"
    assert c.shell(f"grep -q ' / / ro,' /proc/{pid}/mountinfo", check=False).returncode == 0, \
        "ProtectSystem=strict: / is not read-only for the daemon"
    held = held_bpf_ids(c, pid)
    assert held, "the service holds no BPF programs"
    # Its memory limit is in force (the BPF socket storage is charged to it).
    assert c.service("MemoryMax") == str(2 << 30)

    # Upgrade: the postinst restarts the service (a new process), still healthy.
    r = c.run("dpkg", "-i", "/debs/tcpscope_2.deb")
    deadline = time.monotonic() + 60
    while not (active() and int(c.service("MainPID")) not in (0, pid)):
        assert time.monotonic() < deadline, f"upgrade did not restart the service:\n{r.stdout}\n{c.journal()}"
        time.sleep(0.5)
    new_pid = int(c.service("MainPID"))
    assert c.run("dpkg-query", "-W", "-f=${Version}", "tcpscope").stdout == project_version() + "+test1"
    assert c.clean_stops() == 1, f"the old daemon did not stop cleanly on restart:\n{c.journal()}"
    # The old daemon's programs are gone from the kernel. Its cgroup links
    # run on, the new daemon's programs in them (docs/packaging.md "Restarts"): the
    # new daemon holds them.
    kernel = {("prog_id:", str(p["id"])) for p in json.loads(sh("bpftool", "--json", "prog", "show").stdout)} | \
             {("link_id:", str(l["id"])) for l in json.loads(sh("bpftool", "--json", "link", "show").stdout)}
    new_held = held_bpf_ids(c, new_pid)
    left = held & kernel
    assert left and left <= new_held and {kind for kind, _ in left} == {"link_id:"}, \
        f"objects of the daemon before the upgrade still loaded, not the new one's: {left - new_held}"
    held = new_held

    # Remove: stopped (exit 0, the unit not failed), every program detached.
    c.run("dpkg", "-r", "tcpscope")
    assert c.run("systemctl", "is-active", UNIT, check=False).stdout.strip() in ("inactive", "unknown")
    assert c.clean_stops() == 2, f"the daemon did not stop cleanly on remove:\n{c.journal()}"
    kernel = {("prog_id:", str(p["id"])) for p in json.loads(sh("bpftool", "--json", "prog", "show").stdout)} | \
             {("link_id:", str(l["id"])) for l in json.loads(sh("bpftool", "--json", "link", "show").stdout)}
    assert not held & kernel, f"programs left loaded after remove: {held & kernel}"

    # Purge: config, logs, state, the enablement go; the system user stays.
    c.run("dpkg", "-P", "tcpscope")
    left = c.shell("ls -d /etc/tcpscope /var/log/tcpscope /var/lib/tcpscope "
                   "/etc/systemd/system/multi-user.target.wants/tcpscope.service "
                   "/etc/systemd/system/tcpscope.service 2>/dev/null", check=False).stdout.split()
    assert not left, f"left after purge: {left}"
    assert c.run("id", "-u", "tcpscope").stdout.strip() == uid


def test_records_name_the_systemd_units_that_own_the_sockets(container):
    """Two real services under the container's systemd, each a unit of its
    own (systemd-run: transient .service units, in system.slice): the
    packaged daemon, confined by its unit, names each accepted connection's
    service by its unit, in the flow log and in the metrics' service label."""
    c = container
    c.run("dpkg", "-P", "tcpscope")
    c.run("dpkg", "-i", "/debs/tcpscope_1.deb")
    c.shell("cat > /etc/tcpscope/tcpscope.yaml <<'EOF'\nlisten: 127.0.0.1:9810\n"
            "flow_log: /var/log/tcpscope/flows.ndjson\nEOF\nsystemctl restart tcpscope.service")
    deadline = time.monotonic() + 60
    while c.shell("curl -fsS http://127.0.0.1:9810/healthz", check=False).returncode != 0:
        assert time.monotonic() < deadline, f"not healthy after restart:\n{c.journal()}"
        time.sleep(0.5)
    ports = {"web-a": 18080, "web-b": 18081}
    for unit, port in ports.items():
        c.run("systemd-run", f"--unit={unit}", "--property=Type=exec", "python3", "-m", "http.server",
              str(port), "--bind", "127.0.0.1")
    try:
        for unit, port in ports.items():
            deadline = time.monotonic() + 30
            while c.shell(f"curl -fsS -o /dev/null http://127.0.0.1:{port}/", check=False).returncode != 0:
                assert time.monotonic() < deadline, c.run("systemctl", "status", f"{unit}.service", check=False).stdout
                time.sleep(0.3)
            for _ in range(3):
                c.shell(f"curl -fsS -o /dev/null http://127.0.0.1:{port}/")

        def served(port):
            lines = c.shell("cat /var/log/tcpscope/flows.ndjson", check=False).stdout.splitlines()
            return [r for r in map(json.loads, lines)
                    if r.get("kind") == "flow" and r["dir"] == "passive" and r["lport"] == port]
        for unit, port in ports.items():
            deadline = time.monotonic() + 30
            while len(served(port)) < 4:
                assert time.monotonic() < deadline, f"{unit}: {served(port)}\n{c.journal()}"
                time.sleep(0.5)
            cgroup = c.run("systemctl", "show", "-P", "ControlGroup", f"{unit}.service").stdout.strip()
            for r in served(port):
                assert (r["service"], r["unit"], r["container_id"], r["pod_uid"]) == \
                    (f"{unit}.service", f"{unit}.service", "", ""), (cgroup, r)
        metrics = c.shell("curl -fsS http://127.0.0.1:9810/metrics").stdout
        for unit in ports:
            assert re.search(r'^tcpscope_flows_total\{[^}]*service="' + unit + r'\.service"', metrics, re.M), \
                f"no flows_total series of {unit}.service"
    finally:
        for unit in ports:
            c.run("systemctl", "stop", f"{unit}.service", check=False)
        c.run("dpkg", "-P", "tcpscope", check=False)
