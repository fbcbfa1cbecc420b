"""Runs a systemd service's ExecStart the way its unit would, where systemd is
not PID 1 (containers, CI sandboxes).

What is reproduced, from the unit's own [Service] settings:
  User=, Group= (with supplementary groups), AmbientCapabilities=,
  CapabilityBoundingSet=, NoNewPrivileges=, UMask=, a clean environment,
  StateDirectory=/LogsDirectory= (created, owned by User=, with their modes),
  ProtectSystem=strict (every mount read-only but /dev, /proc, /sys and the
  state and logs directories), ProtectHome=yes, PrivateTmp=yes,
  PrivateDevices=yes, ProtectKernelTunables=/ProtectControlGroups= (/sys
  read-only), in a private mount namespace (PrivateMounts=).
What is not: the seccomp-based settings (SystemCallFilter=,
RestrictAddressFamilies=, RestrictNamespaces=, MemoryDenyWriteExecute=, ...)
and ProtectProc= (it would change the host's /proc). The package test checks
SystemCallFilter= and MemoryDenyWriteExecute= against the running daemon
instead (strace, /proc/PID/maps).
"""
import configparser
import copy
import shlex
import subprocess
from pathlib import Path

# Linux capability numbers (linux/capability.h) of the names units use.
CAP_NUMBERS = {
    "CAP_CHOWN": 0, "CAP_DAC_OVERRIDE": 1, "CAP_DAC_READ_SEARCH": 2, "CAP_FOWNER": 3,
    "CAP_FSETID": 4, "CAP_KILL": 5, "CAP_SETGID": 6, "CAP_SETUID": 7, "CAP_SETPCAP": 8,
    "CAP_LINUX_IMMUTABLE": 9, "CAP_NET_BIND_SERVICE": 10, "CAP_NET_BROADCAST": 11,
    "CAP_NET_ADMIN": 12, "CAP_NET_RAW": 13, "CAP_IPC_LOCK": 14, "CAP_IPC_OWNER": 15,
    "CAP_SYS_MODULE": 16, "CAP_SYS_RAWIO": 17, "CAP_SYS_CHROOT": 18, "CAP_SYS_PTRACE": 19,
    "CAP_SYS_PACCT": 20, "CAP_SYS_ADMIN": 21, "CAP_SYS_BOOT": 22, "CAP_SYS_NICE": 23,
    "CAP_SYS_RESOURCE": 24, "CAP_SYS_TIME": 25, "CAP_SYS_TTY_CONFIG": 26, "CAP_MKNOD": 27,
    "CAP_LEASE": 28, "CAP_AUDIT_WRITE": 29, "CAP_AUDIT_CONTROL": 30, "CAP_SETFCAP": 31,
    "CAP_MAC_OVERRIDE": 32, "CAP_MAC_ADMIN": 33, "CAP_SYSLOG": 34, "CAP_WAKE_ALARM": 35,
    "CAP_BLOCK_SUSPEND": 36, "CAP_AUDIT_READ": 37, "CAP_PERFMON": 38, "CAP_BPF": 39,
    "CAP_CHECKPOINT_RESTORE": 40,
}


class Unit:
    """The [Service] section of a unit file; repeated keys keep every value."""

    def __init__(self, path):
        self.path = Path(path)
        parser = configparser.RawConfigParser(strict=False, interpolation=None,
                                              dict_type=_MultiDict, empty_lines_in_values=False)
        parser.optionxform = str
        parser.read(self.path)
        self.service = {k: v.split("\n") for k, v in parser["Service"].items()}

    def values(self, key):
        return self.service.get(key, [])

    def value(self, key, default=None):
        v = self.values(key)
        return v[-1] if v else default

    def flag(self, key):
        return (self.value(key) or "no").lower() in ("yes", "true", "1", "on", "strict")

    def capabilities(self, key):
        caps = set()
        for line in self.values(key):
            caps |= set(line.split())
        unknown = caps - CAP_NUMBERS.keys()
        assert not unknown, f"{self.path}: {key} names unknown capabilities {unknown}"
        return sorted(caps)

    def cap_mask(self, key):
        mask = 0
        for c in self.capabilities(key):
            mask |= 1 << CAP_NUMBERS[c]
        return mask

    def exec_start(self):
        line = self.value("ExecStart")
        assert line, f"{self.path}: no ExecStart"
        return shlex.split(line.lstrip("-@:+!"))

    def address_families(self):
        """RestrictAddressFamilies= as the set of families allowed (an
        allow-list; a ~ deny-list or "none" is not what the tests expect)."""
        families = set()
        for line in self.values("RestrictAddressFamilies"):
            assert not line.startswith("~") and line.strip() != "none", \
                f"{self.path}: RestrictAddressFamilies={line} is not an allow-list"
            families |= set(line.split())
        return families

    def with_capabilities(self, caps):
        """A copy of this unit whose AmbientCapabilities= and
        CapabilityBoundingSet= both name exactly `caps`."""
        other = copy.copy(self)
        other.service = dict(self.service)
        other.service["AmbientCapabilities"] = [" ".join(sorted(caps))]
        other.service["CapabilityBoundingSet"] = [" ".join(sorted(caps))]
        return other

    def directories(self, key, base):
        return [Path(base) / d for line in self.values(key) for d in line.split()]

    def syscall_filter(self):
        """The allowed system calls, applying SystemCallFilter= lines in order
        as systemd does: the first line sets allow-list mode, later plain
        entries add, entries after ~ remove."""
        allowed = set()
        for i, line in enumerate(self.values("SystemCallFilter")):
            invert = line.startswith("~")
            names = line.lstrip("~").split()
            assert i > 0 or not invert, "a deny-list filter is not what this test expects"
            calls = set()
            for n in names:
                calls |= expand_syscall_group(n) if n.startswith("@") else {n.split(":")[0]}
            allowed = allowed - calls if invert else allowed | calls
        return allowed


class _MultiDict(dict):
    """Lets configparser keep repeated keys (systemd accumulates many of them)."""

    def __setitem__(self, key, value):
        if key in self and isinstance(value, list) and isinstance(self[key], list):
            self[key].extend(value)
        else:
            super().__setitem__(key, value)


def expand_syscall_group(group, _cache={}):
    """System calls of a systemd group (@system-service, ...), from systemd itself."""
    if group not in _cache:
        out = subprocess.run(["systemd-analyze", "syscall-filter", group],
                             capture_output=True, text=True, check=True).stdout
        names = set()
        for line in out.splitlines()[1:]:
            line = line.strip()
            if not line or line.startswith("#"):
                continue
            names |= expand_syscall_group(line) if line.startswith("@") else {line}
        _cache[group] = names
    return _cache[group]


def sandbox_command(unit):
    """argv that runs the unit's ExecStart confined as described above.
    The process that ends up running ExecStart keeps the pid of the command
    (every step execs), so Popen(...).pid is the daemon's pid."""
    user = unit.value("User")
    group = unit.value("Group", user)
    assert user, f"{unit.path}: no User="
    state = unit.directories("StateDirectory", "/var/lib")
    logs = unit.directories("LogsDirectory", "/var/log")
    writable = state + logs
    setup = ["set -e"]
    for dirs, mode_key in ((state, "StateDirectoryMode"), (logs, "LogsDirectoryMode")):
        for d in dirs:
            q = shlex.quote(str(d))
            setup.append(f"install -d -o {shlex.quote(user)} -g {shlex.quote(group)} "
                         f"-m {unit.value(mode_key, '0755')} {q}")
    setup.append("mount --make-rprivate /")
    if unit.flag("PrivateDevices"):
        # A fresh /dev with the pseudo devices only (before / turns read-only).
        setup.append("hostdev=$(mktemp -d /run/unit-sandbox.XXXXXX) && mount --rbind /dev \"$hostdev\"")
        setup.append("mount -t tmpfs -o mode=755,nosuid tmpfs /dev")
        for dev in ("null", "zero", "full", "random", "urandom", "tty"):
            setup.append(f"touch /dev/{dev} && mount --bind \"$hostdev/{dev}\" /dev/{dev}")
        setup.append("mkdir /dev/shm /dev/pts && ln -s /proc/self/fd /dev/fd")
        setup.append("umount -l \"$hostdev\" && rmdir \"$hostdev\"")
    if unit.value("ProtectSystem") == "strict":
        for d in writable:
            q = shlex.quote(str(d))
            setup.append(f"mount --bind {q} {q}")
        keep = [str(d) for d in writable]
        # Every other mount read-only, API file systems excepted (systemd's
        # strict mode leaves /dev, /proc and /sys to the Protect* options).
        setup.append(
            "awk '{print $5}' /proc/self/mountinfo | sed 's/\\\\040/ /g' | sort -u | "
            "while read -r mp; do case \"$mp\" in /dev|/dev/*|/proc|/proc/*|/sys|/sys/*) continue;; "
            + "".join(f"{shlex.quote(k)}) continue;; " for k in keep)
            + "esac; mount -o remount,bind,ro \"$mp\" 2>/dev/null || true; done")
    if unit.flag("ProtectKernelTunables") or unit.flag("ProtectControlGroups"):
        setup.append(
            "awk '{print $5}' /proc/self/mountinfo | grep -E '^/sys(/|$)' | sort -u | "
            "while read -r mp; do mount -o remount,bind,ro \"$mp\" 2>/dev/null || true; done")
        setup.append("mount --bind /proc/sys /proc/sys && mount -o remount,bind,ro /proc/sys")
    if unit.flag("ProtectHome"):
        for d in ("/home", "/root", "/run/user"):
            setup.append(f"[ ! -d {d} ] || mount -t tmpfs -o mode=000 tmpfs {d}")
    if unit.flag("PrivateTmp"):
        for d in ("/tmp", "/var/tmp"):
            setup.append(f"mount -t tmpfs -o mode=1777 tmpfs {d}")

    caps = unit.capabilities("AmbientCapabilities")
    bounding = unit.capabilities("CapabilityBoundingSet")
    assert set(caps) <= set(bounding), "ambient capabilities outside the bounding set"

    def cap_list(names):
        return ",".join(["-all"] + ["+" + c[4:].lower() for c in names])

    priv = ["setpriv", f"--reuid={user}", f"--regid={group}", "--init-groups",
            f"--inh-caps={cap_list(caps)}", f"--ambient-caps={cap_list(caps)}",
            f"--bounding-set={cap_list(bounding)}"]
    if unit.flag("NoNewPrivileges"):
        priv.append("--no-new-privs")
    env = ["env", "-i", "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
           "LANG=C.UTF-8"]
    umask = unit.value("UMask", "0022")
    script = "\n".join(setup + [f"umask {umask}",
                                "exec " + " ".join(shlex.quote(a) for a in env + priv + ["--"]
                                                   + unit.exec_start())])
    return ["unshare", "--mount", "--propagation", "private", "--", "sh", "-c", script]


def proc_status(pid):
    fields = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        k, _, v = line.partition(":")
        fields[k] = v.strip()
    return fields
