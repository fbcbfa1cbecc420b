"""The maintainer scripts' systemd path, which the package test cannot reach
where systemd is not PID 1 (the development and CI machines).

The postinst, prerm and postrm are taken from the built .deb and run in a
private mount and PID namespace (unshare) where
  * /etc, /usr and /var are overlays with a throwaway tmpfs upper layer, so
    that adduser, dpkg and deb-systemd-helper work for real and nothing they
    change reaches the machine;
  * /run/systemd is a fresh tmpfs, holding /run/systemd/system (what the
    scripts test for "systemd runs") or not;
  * `deb-systemd-invoke` and `systemctl` on PATH are stubs that log their
    arguments (`systemctl --root=...`, the offline form deb-systemd-helper uses
    to apply presets, is passed on to the real one); `deb-systemd-helper` logs
    its arguments and runs the real one, so that enable/mask/purge state is
    kept in the overlay as on a real machine.
Each test runs the scripts with the arguments dpkg passes (Debian Policy
6.5-6.6), then once more with dpkg itself driving an install, an upgrade,
a removal and a purge of the real package.
"""
import os
import shlex
import shutil
import subprocess
from pathlib import Path

import pytest

from test_deb import _repacked_with_version, deb, project_version, sh  # noqa: F401 (deb: fixture)

UNIT = "tcpscope.service"
WANTS_LINK = "/etc/systemd/system/multi-user.target.wants/tcpscope.service"

STUB_LOGGING = """#!/bin/sh
printf '%s' "$(basename "$0")" >> "$STUB_LOG"
for a in "$@"; do printf ' %s' "$a" >> "$STUB_LOG"; done
echo >> "$STUB_LOG"
"""
STUBS = {
    "deb-systemd-invoke": STUB_LOGGING + "exit 0\n",
    "systemctl": STUB_LOGGING + """case "$*" in
  *--root=*) exec "$REAL_SYSTEMCTL" "$@";;
esac
exit 0
""",
    "deb-systemd-helper": STUB_LOGGING + 'exec "$REAL_DEB_SYSTEMD_HELPER" "$@"\n',
}

# After every step the namespace reports what the scripts left behind.
PROBE = f"""probe() {{
  getent passwd tcpscope >/dev/null && echo "@@ user" >> "$STUB_LOG"
  getent group tcpscope >/dev/null && echo "@@ group" >> "$STUB_LOG"
  for p in /var/lib/tcpscope /var/log/tcpscope /etc/tcpscope {WANTS_LINK}; do
    if [ -e "$p" ] || [ -L "$p" ]; then echo "@@ exists $p" >> "$STUB_LOG"; fi
  done
  if [ -L /etc/systemd/system/{UNIT} ] && [ "$(readlink /etc/systemd/system/{UNIT})" = /dev/null ]; then
    echo "@@ masked" >> "$STUB_LOG"
  fi
  if pgrep -x tcpscope >/dev/null; then echo "@@ daemon running" >> "$STUB_LOG"; fi
  return 0
}}
"""


def which_real(name):
    for d in ("/usr/bin", "/bin", "/usr/sbin", "/sbin"):
        if os.access(f"{d}/{name}", os.X_OK):
            return f"{d}/{name}"
    raise AssertionError(f"{name} missing")


@pytest.fixture(scope="module")
def control(deb, tmp_path_factory):
    for tool in ("unshare", "setpriv", "pgrep", "adduser", "dpkg", "start-stop-daemon"):
        assert shutil.which(tool), f"{tool} missing"
    d = tmp_path_factory.mktemp("control")
    sh("dpkg-deb", "-e", str(deb), str(d / "DEBIAN"))
    sh("dpkg-deb", "-x", str(deb), str(d / "root"))
    for s in ("postinst", "prerm", "postrm"):
        assert (d / "DEBIAN" / s).exists(), f"the package has no {s}"
    return d


class Namespace:
    """One throwaway system (see the module docstring) running a list of
    shell steps; records, per step, the stub calls and the state after it."""

    def __init__(self, tmp_path, control, systemd):
        self.tmp = tmp_path
        self.control = control
        self.systemd = systemd
        self.steps = []
        stubs = tmp_path / "stubs"
        stubs.mkdir()
        for name, text in STUBS.items():
            (stubs / name).write_text(text)
            (stubs / name).chmod(0o755)
        # A stand-in daemon: a process called tcpscope (what the prerm looks for without systemd).
        shutil.copy(which_real("sleep"), stubs / "tcpscope")
        self.stubs = stubs

    def step(self, name, command):
        self.steps.append((name, command))
        return self

    def script(self, name, *args, label=None):
        """A step running one maintainer script of the package with dpkg's
        arguments; named "SCRIPT ARGS" unless `label` says otherwise."""
        path = self.control / "DEBIAN" / name
        # The environment dpkg gives maintainer scripts (deb-systemd-helper
        # refuses to act without it).
        env = f"DPKG_MAINTSCRIPT_PACKAGE=tcpscope DPKG_MAINTSCRIPT_NAME={name} DPKG_MAINTSCRIPT_ARCH=$(dpkg --print-architecture)"
        return self.step(label or f"{name} {' '.join(args)}".strip(),
                         f"env {env} " + " ".join(shlex.quote(a) for a in [str(path), *args]))

    def unpack(self):
        """What dpkg's unpack leaves for the postinst: the unit and the conffile."""
        root = self.control / "root"
        return self.step("unpack", f"install -D -m 0644 {root}/lib/systemd/system/{UNIT} /lib/systemd/system/{UNIT}"
                                   f" && install -D -m 0644 {root}/etc/tcpscope/tcpscope.yaml /etc/tcpscope/tcpscope.yaml")

    def run(self):
        log = self.tmp / "stub.log"
        log.write_text("")
        upper = self.tmp / "layers"
        upper.mkdir()
        lines = ["set -e", "mount --make-rprivate /",
                 f"mount -t tmpfs -o mode=0700 layers {upper}"]
        for d in ("/etc", "/usr", "/var"):
            lines += [f"mkdir -p {upper}/upper{d} {upper}/work{d}",
                      f"mount -t overlay overlay -o lowerdir={d},upperdir={upper}/upper{d},workdir={upper}/work{d} {d}"]
        lines += ["if [ -d /run/systemd ]; then mount -t tmpfs -o mode=0755 systemd /run/systemd; "
                  "else mount -t tmpfs -o mode=0755 run /run && mkdir /run/systemd; fi"]
        if self.systemd:
            lines.append("mkdir /run/systemd/system")
        lines += ["rm -f /usr/sbin/policy-rc.d",  # an image's "no starts" policy would hide what the scripts do
                  PROBE, "set +e"]
        for name, command in self.steps:
            lines += [f"echo {shlex.quote('@@ step ' + name)} >> \"$STUB_LOG\"",
                      f"( {command} ) >> \"$STUB_LOG.out\" 2>&1",
                      "echo \"@@ rc $?\" >> \"$STUB_LOG\"", "probe"]
        env = {"PATH": f"{self.stubs}:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
               "STUB_LOG": str(log), "REAL_SYSTEMCTL": which_real("systemctl"),
               "REAL_DEB_SYSTEMD_HELPER": which_real("deb-systemd-helper"),
               "DEBIAN_FRONTEND": "noninteractive", "LANG": "C.UTF-8"}
        r = subprocess.run(["unshare", "--mount", "--propagation", "private", "--pid", "--fork",
                            "--mount-proc", "--", "sh", "-c", "\n".join(lines)],
                           env=env, capture_output=True, text=True, timeout=300)
        out = Path(f"{log}.out").read_text() if Path(f"{log}.out").exists() else ""
        assert r.returncode == 0, f"namespace set-up failed ({r.returncode}): {r.stderr}\n{out}"
        return Steps(log.read_text(), out)


class Steps:
    def __init__(self, text, output):
        self.output = output
        self.by_name = {}
        current = None
        for line in text.splitlines():
            if line.startswith("@@ step "):
                current = {"calls": [], "state": set(), "rc": None}
                self.by_name[line[len("@@ step "):]] = current
            elif line.startswith("@@ rc "):
                current["rc"] = int(line[len("@@ rc "):])
            elif line.startswith("@@ "):
                current["state"].add(line[3:])
            elif line:
                current["calls"].append(line)

    def __getitem__(self, name):
        s = self.by_name[name]
        assert s["rc"] == 0, f"{name} exited {s['rc']}:\n{self.output}"
        return s

    def calls(self, name, prefix=("deb-systemd-invoke", "systemctl", "deb-systemd-helper")):
        return [c for c in self[name]["calls"] if c.startswith(prefix)]


def invoked(steps, name):
    """The deb-systemd-invoke calls of one step."""
    return steps.calls(name, ("deb-systemd-invoke",))


def own_calls(steps, name):
    """The step's calls but those deb-systemd-helper makes itself."""
    return [c for c in steps.calls(name) if c != "systemctl daemon-reload"]


def test_first_install_enables_and_starts(tmp_path, control):
    steps = Namespace(tmp_path, control, systemd=True).unpack().script("postinst", "configure").run()
    assert invoked(steps, "postinst configure") == [f"deb-systemd-invoke start {UNIT}"]
    calls = steps.calls("postinst configure")
    assert "systemctl --system daemon-reload" in calls
    assert f"deb-systemd-helper enable {UNIT}" in calls
    # daemon-reload comes before the start, so that systemd sees the new unit.
    assert calls.index("systemctl --system daemon-reload") < calls.index(f"deb-systemd-invoke start {UNIT}")
    state = steps["postinst configure"]["state"]
    assert {"user", "group", "exists /var/lib/tcpscope", "exists /var/log/tcpscope",
            f"exists {WANTS_LINK}"} <= state, state


def test_upgrade_restarts_and_keeps_the_administrators_choice(tmp_path, control):
    ns = Namespace(tmp_path, control, systemd=True).unpack().script("postinst", "configure")
    # An upgrade: dpkg runs the old prerm with "upgrade NEW", then the new postinst with "configure OLD".
    ns.script("prerm", "upgrade", project_version() + "+1").script("postinst", "configure", project_version())
    # The administrator disables the service; the next upgrade leaves it disabled.
    ns.step("systemctl disable", f"systemctl --root=/ disable {UNIT} >/dev/null 2>&1 && "
                                 f"DPKG_MAINTSCRIPT_PACKAGE=tcpscope deb-systemd-helper update-state {UNIT}")
    ns.script("prerm", "upgrade", project_version() + "+2").script("postinst", "configure", project_version() + "+1")
    steps = ns.run()
    assert invoked(steps, f"prerm upgrade {project_version()}+1") == [], "prerm stopped the daemon on upgrade"
    assert invoked(steps, f"postinst configure {project_version()}") == [f"deb-systemd-invoke restart {UNIT}"]
    assert f"exists {WANTS_LINK}" in steps[f"postinst configure {project_version()}"]["state"]
    again = f"postinst configure {project_version()}+1"
    assert f"deb-systemd-helper enable {UNIT}" not in steps.calls(again), "upgrade re-enabled a disabled unit"
    assert f"exists {WANTS_LINK}" not in steps[again]["state"]
    # The restart is still asked for; deb-systemd-invoke (the real one) does
    # not start a disabled unit that is not running.
    assert invoked(steps, again) == [f"deb-systemd-invoke restart {UNIT}"]


def test_remove_stops_and_purge_cleans_up_but_keeps_the_user(tmp_path, control):
    ns = Namespace(tmp_path, control, systemd=True).unpack().script("postinst", "configure")
    ns.step("daemon writes", "echo '{}' > /var/log/tcpscope/flows.ndjson && touch /var/lib/tcpscope/x")
    ns.script("prerm", "remove").script("postrm", "remove").script("postrm", "purge")
    steps = ns.run()
    assert invoked(steps, "prerm remove") == [f"deb-systemd-invoke stop {UNIT}"]
    # (deb-systemd-helper's own calls of systemctl, a plain daemon-reload, left aside.)
    assert own_calls(steps, "postrm remove") == ["systemctl --system daemon-reload", f"deb-systemd-helper mask {UNIT}"]
    assert "masked" in steps["postrm remove"]["state"]
    assert own_calls(steps, "postrm purge") == ["systemctl --system daemon-reload", f"deb-systemd-helper purge {UNIT}",
                                                f"deb-systemd-helper unmask {UNIT}"]
    state = steps["postrm purge"]["state"]
    # The conffile is dpkg's to delete on purge; what the postrm owns goes.
    assert not {"exists /var/lib/tcpscope", "exists /var/log/tcpscope", f"exists {WANTS_LINK}", "masked"} & state, state
    # Debian keeps system users: a freed uid would pass files to the next one.
    assert {"user", "group"} <= state, "purge deleted the system user or group"


def test_purge_removes_etc_tcpscope_unless_the_administrator_added_files(tmp_path, control):
    ns = Namespace(tmp_path, control, systemd=False).unpack().script("postinst", "configure")
    # dpkg deletes the conffile itself on purge, before the postrm runs.
    ns.step("dpkg purges the conffile", "rm /etc/tcpscope/tcpscope.yaml && touch /etc/tcpscope/tcpscope.yaml.dpkg-old")
    ns.script("postrm", "purge", label="first purge")
    ns.unpack().step("the administrator adds a file", "touch /etc/tcpscope/pfx2as.tsv && rm /etc/tcpscope/tcpscope.yaml")
    ns.script("postrm", "purge", label="second purge")
    steps = ns.run()
    assert "exists /etc/tcpscope" in steps["dpkg purges the conffile"]["state"]
    assert "exists /etc/tcpscope" not in steps["first purge"]["state"], "purge left /etc/tcpscope"
    assert "exists /etc/tcpscope" in steps["second purge"]["state"], "purge deleted the administrator's pfx2as.tsv"


def test_without_systemd_nothing_is_invoked_and_remove_stops_the_daemon(tmp_path, control):
    ns = Namespace(tmp_path, control, systemd=False).unpack().script("postinst", "configure")
    # A daemon running as the service user, started by hand or another init.
    # (The subshell reaps it once stopped: a zombie would still look like a running daemon.)
    ns.step("start daemon", f"install -D -m 0755 {ns.stubs}/tcpscope /usr/local/lib/standin/tcpscope && "
                            "( setpriv --reuid=tcpscope --regid=tcpscope --clear-groups "
                            "/usr/local/lib/standin/tcpscope 600; true ) & sleep 0.5")
    ns.script("prerm", "upgrade", project_version() + "+1").script("postinst", "configure", project_version())
    ns.script("prerm", "remove")
    steps = ns.run()
    for name in ("postinst configure", f"prerm upgrade {project_version()}+1",
                 f"postinst configure {project_version()}", "prerm remove"):
        assert invoked(steps, name) == [], f"{name} invoked systemd without systemd"
        assert "systemctl --system daemon-reload" not in steps.calls(name)
    # Enabled all the same (deb-systemd-helper), for when systemd boots.
    assert f"exists {WANTS_LINK}" in steps["postinst configure"]["state"]
    assert "daemon running" in steps["start daemon"]["state"], steps.output
    assert "daemon running" in steps[f"postinst configure {project_version()}"]["state"], "upgrade stopped the daemon"
    assert "daemon running" not in steps["prerm remove"]["state"], "prerm remove left the daemon running"


def test_dpkg_drives_install_upgrade_remove_purge(tmp_path, control, deb):
    """The same with dpkg choosing the scripts and their arguments."""
    (tmp_path / "newer").mkdir()
    newer = _repacked_with_version(deb, project_version() + "+test1", tmp_path / "newer")
    dpkg = "dpkg --force-confdef --force-confold"
    ns = Namespace(tmp_path, control, systemd=True)
    ns.step("install", f"{dpkg} -i {deb}").step("upgrade", f"{dpkg} -i {newer}")
    ns.step("remove", f"{dpkg} -r tcpscope").step("purge", f"{dpkg} -P tcpscope")
    steps = ns.run()
    assert invoked(steps, "install") == [f"deb-systemd-invoke start {UNIT}"], steps.output
    assert f"exists {WANTS_LINK}" in steps["install"]["state"]
    assert invoked(steps, "upgrade") == [f"deb-systemd-invoke restart {UNIT}"], steps.output
    assert invoked(steps, "remove") == [f"deb-systemd-invoke stop {UNIT}"], steps.output
    assert invoked(steps, "purge") == []
    state = steps["purge"]["state"]
    assert not {"exists /var/lib/tcpscope", "exists /var/log/tcpscope", "exists /etc/tcpscope",
                f"exists {WANTS_LINK}", "masked"} & state, state
    assert {"user", "group"} <= state
