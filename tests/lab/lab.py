#!/usr/bin/env python3
"""The tcpscope network lab: emulated paths between network namespaces.

One server namespace, and one client namespace per path. A path is either a
delay line (tcpscope_delayline, a user-space emulator between two TAP devices:
delay, jitter, loss, a rate-limited bottleneck with a bounded queue) or, for
intra-pop traffic, a plain veth pair. Every path has its own /24 and /64, so
one server sees clients of different classes and ASNs side by side:

    server ns  tap/veth ─┬─ delay line ─ tap  client ns "c1"  (client, 50 ms, 50 Mbit/s)
                         ├─ delay line ─ tap  client ns "p1"  (pop-to-pop, 15 ms)
                         └──── veth ───────── client ns "i1"  (intra-pop)

Library:  with Lab([Path.preset("client", name="c1"), ...]) as lab: ...
CLI:      lab.py up --preset client-lossy [--preset pop-to-pop ...]   (stays up)
          lab.py status
          lab.py down [--tag TAG]                                     (removes it all)

Everything the lab makes is named with the prefix "tsl" plus a per-lab tag and
recorded in /run/tcpscope-lab/TAG.json, so `down` (and the atexit hook) can
remove exactly it even after a crash: delay-line processes by pid,
namespaces by name (their veth/TAP devices go with them). The state file also
names the lab's owner (pid, start time, pid namespace): a lab whose owner died
without tearing it down (SIGKILL) is an orphan, and reap_orphans() (run by the
test suite at its start) removes it. `lab.py up` labs have no owner and stay.
Addresses come from 198.19.0.0/16 (inside 198.18.0.0/15) and fd00:1ab::/32,
and exist only inside the lab's namespaces.
"""
import argparse
import atexit
import dataclasses
import ipaddress
import json
import os
import random
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path as FsPath
from typing import Dict, List, Optional

ROOT = FsPath(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests"))
from testlib import remove_netns  # noqa: E402  (shared with bench/ and tests/integration)
BUILD = FsPath(os.environ.get("TCPSCOPE_BUILD", ROOT / "build"))
DELAYLINE = BUILD / "tcpscope_delayline"
STATE_DIR = FsPath(os.environ.get("TCPSCOPE_LAB_STATE", "/run/tcpscope-lab"))
PREFIX = "tsl"
ALLOWED_CC = FsPath("/proc/sys/net/ipv4/tcp_allowed_congestion_control")

# Ethernet header bytes on every frame the delay line paces (no FCS/preamble
# on a TAP). With TCP timestamps a full segment carries 1448 payload bytes in
# a 1514-byte frame, so goodput is rate * 1448 / 1514.
ETH_HEADER = 14


def sh(*cmd, check=True, timeout=30, **kw):
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, **kw)
    if check and r.returncode != 0:
        raise RuntimeError(f"{' '.join(map(str, cmd))} failed ({r.returncode}): {r.stderr.strip()}")
    return r


@dataclasses.dataclass
class Direction:
    """The path model of one direction (see delayline.cc)."""
    delay_ms: float = 0.0     # one-way propagation delay
    jitter_ms: float = 0.0    # uniform +/- spread; frames stay in order
    loss: float = 0.0         # drop probability per frame
    rate_mbit: float = 0.0    # bottleneck rate of Ethernet frame bits; 0 = unlimited
    queue: int = 0            # bottleneck buffer in frames; 0 = unbounded

    def spec(self) -> str:
        return (f"delay={self.delay_ms * 1000:.0f}us,jitter={self.jitter_ms * 1000:.0f}us,"
                f"loss={self.loss:.9f},rate={self.rate_mbit * 1e6:.0f},queue={self.queue}")


@dataclasses.dataclass
class Path:
    """One emulated path from the server to one client namespace.

    `down` is server -> client (the direction of downloads), `up` is client ->
    server. veth=True makes an unshaped veth pair instead of a delay line.
    peer_class/asn are what the lab's tcpscope config and ASN table say about
    the client's addresses (see Lab.tcpscope_config)."""
    name: str
    down: Direction = dataclasses.field(default_factory=Direction)
    up: Direction = dataclasses.field(default_factory=Direction)
    veth: bool = False
    peer_class: str = "client"
    asn: int = 0
    extra_clients: int = 0   # more client addresses in the same namespace

    @property
    def rtt_ms(self) -> float:
        return self.down.delay_ms + self.up.delay_ms

    @staticmethod
    def symmetric(name, delay_ms=0.0, jitter_ms=0.0, loss=0.0, rate_mbit=0.0, queue=0, **kw):
        d = Direction(delay_ms, jitter_ms, loss, rate_mbit, queue)
        return Path(name, down=d, up=dataclasses.replace(d), **kw)

    @staticmethod
    def preset(preset: str, name: Optional[str] = None, **kw) -> "Path":
        if preset not in PRESETS:
            raise ValueError(f"unknown preset {preset!r}; known: {', '.join(PRESETS)}")
        p = PRESETS[preset](name or preset)
        for k, v in kw.items():
            setattr(p, k, v)
        return p


# The testbed of the CDN BBR study. Queues: the client bottleneck buffers one
# bandwidth-delay product (50 Mbit/s * 50 ms = 312 kB = 206 frames of 1514
# bytes, rounded up); the pop-to-pop link two BDPs at its rate.
POP_RATE_MBIT = float(os.environ.get("TCPSCOPE_LAB_POP_RATE_MBIT", "500"))


def _client(loss):
    return lambda name: Path.symmetric(name, delay_ms=25, loss=loss, rate_mbit=50, queue=210,
                                       peer_class="client")


def _pop(loss):
    bdp_frames = int(POP_RATE_MBIT * 1e6 * 0.015 / 8 / 1514) + 1
    return lambda name: Path.symmetric(name, delay_ms=7.5, loss=loss, rate_mbit=POP_RATE_MBIT,
                                       queue=2 * bdp_frames, peer_class="pop-to-pop")


PRESETS = {
    "client": _client(0.001),           # 50 ms RTT, 50 Mbit/s, 0.1% loss
    "client-lossy": _client(0.01),      # ... 1% loss
    "pop-to-pop": _pop(0.0001),         # 15 ms RTT, POP_RATE_MBIT, 0.01% loss
    "pop-to-pop-lossy": _pop(0.001),    # ... 0.1% loss
    "intra-pop": lambda name: Path(name, veth=True, peer_class="intra-pop"),
}


@dataclasses.dataclass
class Endpoint:
    """What the lab built for one path."""
    path: Path
    index: int
    client_ns: str
    server_if: str
    client_if: str
    server_v4: str
    client_v4: List[str]
    server_v6: str
    client_v6: List[str]
    class_v4: str            # prefix that holds the client addresses, not the server's
    class_v6: str
    delayline_pid: int = 0
    control: str = ""
    stats_file: str = ""


class Lab:
    """Builds the namespaces and paths; a context manager that always tears down."""

    def __init__(self, paths: List[Path], tag: Optional[str] = None, ipv6=True, seed=1,
                 subnet_base: Optional[int] = None, workdir: Optional[FsPath] = None,
                 uplink: Optional[Direction] = None):
        """uplink: the server's one link to the world, shared by every path
        (its `down` direction, server -> clients, gets this model; the other
        is unshaped). The paths then start at a router namespace behind it:

            server ns ── uplink delay line ── router ns ─┬─ path delay line ── client ns
                                                         └─ ...
        """
        names = [p.name for p in paths]
        if len(set(names)) != len(names) or not paths:
            raise ValueError(f"paths need distinct names: {names}")
        if len(paths) > 16:
            raise ValueError("at most 16 paths per lab")
        self.paths = paths
        self.tag = tag or f"{random.randrange(1 << 16):04x}"
        if not (self.tag.isascii() and self.tag.isalnum() and 1 <= len(self.tag) <= 5):
            # Interface names are "tsl" + tag + path index + side: at most 15 characters.
            raise ValueError(f"lab tag {self.tag!r}: 1 to 5 letters or digits")
        self.ipv6 = ipv6
        self.seed = seed
        self.server_ns = f"{PREFIX}{self.tag}-srv"
        self.uplink = uplink
        # The namespace the paths start from: the router behind the uplink, or the server.
        self.router_ns = f"{PREFIX}{self.tag}-rtr" if uplink else None
        self.uplink_ep: Optional[Endpoint] = None
        # 198.19.B.0/24 .. 198.19.B+15.0/24: a random block keeps concurrent
        # labs' flows apart in a shared daemon's metrics (namespaces keep the
        # traffic apart anyway).
        self.base = subnet_base if subnet_base is not None else random.randrange(0, 240)
        self.workdir = FsPath(workdir or f"/tmp/{PREFIX}{self.tag}")
        self.endpoints: Dict[str, Endpoint] = {}
        self.netns_ids: Dict[str, int] = {}
        self.created_ns = time.time_ns()
        self._up = False
        self._restore_allowed_cc: Optional[str] = None
        self._state_file = STATE_DIR / f"{self.tag}.json"
        # The process whose exit ends this lab (None: nobody's, `lab.py up`).
        self.owner: Optional[dict] = process_identity(os.getpid())
        self._tracked: List[dict] = []   # other processes to stop at teardown

    # -- building -------------------------------------------------------------

    def __enter__(self):
        self.up()
        return self

    def __exit__(self, *exc):
        self.down()
        return False

    def up(self):
        if not DELAYLINE.exists() and any(not p.veth for p in self.paths):
            raise RuntimeError(f"{DELAYLINE} missing: build the tcpscope_delayline target")
        atexit.register(self.down)
        _register_exit_net()
        self._up = True
        self.workdir.mkdir(parents=True, exist_ok=True)
        try:
            self._make_ns(self.server_ns)
            if self.uplink:
                self._make_uplink()
            for i, p in enumerate(self.paths):
                self._make_path(i, p)
            self._save_state()
        except BaseException:
            self.down()
            raise
        return self

    def _make_ns(self, ns):
        sh("ip", "netns", "add", ns)
        self._save_state(extra_ns=[ns])
        self.ns(ns, "ip", "link", "set", "lo", "up")
        self.netns_ids[ns] = os.stat(f"/run/netns/{ns}").st_ino

    def _make_path(self, i, p: Path):
        net = (self.base + i) % 256
        v4 = f"198.19.{net}"
        v6 = f"fd00:1ab:{net:x}:0"
        n_cli = 1 + p.extra_clients
        ep = Endpoint(
            path=p, index=i, client_ns=f"{PREFIX}{self.tag}-{p.name}",
            server_if=f"{PREFIX}{self.tag}{i:x}s", client_if=f"{PREFIX}{self.tag}{i:x}c",
            server_v4=f"{v4}.1", client_v4=[f"{v4}.{130 + k}" for k in range(n_cli)],
            server_v6=f"{v6}::1", client_v6=[f"{v6}:8000::{130 + k:x}" for k in range(n_cli)],
            class_v4=f"{v4}.128/25", class_v6=f"{v6}:8000::/65")
        self.endpoints[p.name] = ep
        self._make_ns(ep.client_ns)
        start = self.router_ns or self.server_ns
        if p.veth:
            sh("ip", "link", "add", ep.server_if, "netns", start, "type", "veth",
               "peer", "name", ep.client_if, "netns", ep.client_ns)
        else:
            self._start_delayline(ep)
            sh("ip", "link", "set", ep.server_if, "netns", start)
            sh("ip", "link", "set", ep.client_if, "netns", ep.client_ns)
        # Fixed MACs and permanent neighbour entries: no ARP or neighbour
        # discovery crosses the path, so loss can never stall a connection's
        # first packet behind a lost ARP request, and every frame the delay
        # line counts is the test's own.
        mac_s, mac_c = f"02:1a:b0:{net:02x}:{i:02x}:01", f"02:1a:b0:{net:02x}:{i:02x}:02"
        # Behind an uplink the server's address of the path lives on the
        # server's uplink interface, and the router answers for it here.
        server_addrs = ([], []) if self.uplink else ([ep.server_v4], [ep.server_v6])
        for ns, dev, mac, addrs4, addrs6 in (
                (start, ep.server_if, mac_s, *server_addrs),
                (ep.client_ns, ep.client_if, mac_c, ep.client_v4, ep.client_v6)):
            self.ns(ns, "ip", "link", "set", dev, "address", mac)
            if not self.ipv6:
                self.ns(ns, "sysctl", "-qw", f"net.ipv6.conf.{dev}.disable_ipv6=1")
            else:
                self.ns(ns, "ip", "link", "set", dev, "addrgenmode", "none")
            for a in addrs4:
                self.ns(ns, "ip", "addr", "add", f"{a}/24", "dev", dev)
            if self.ipv6:
                for a in addrs6:
                    self.ns(ns, "ip", "-6", "addr", "add", f"{a}/64", "dev", dev, "nodad")
            self.ns(ns, "ip", "link", "set", dev, "up")
        for a in ep.client_v4:
            self.ns(start, "ip", "neigh", "replace", a, "lladdr", mac_c, "dev",
                    ep.server_if, "nud", "permanent")
        self.ns(ep.client_ns, "ip", "neigh", "replace", ep.server_v4, "lladdr", mac_s, "dev",
                ep.client_if, "nud", "permanent")
        if self.ipv6:
            for a in ep.client_v6:
                self.ns(start, "ip", "-6", "neigh", "replace", a, "lladdr", mac_c,
                        "dev", ep.server_if, "nud", "permanent")
            self.ns(ep.client_ns, "ip", "-6", "neigh", "replace", ep.server_v6, "lladdr", mac_s,
                    "dev", ep.client_if, "nud", "permanent")

        if self.uplink:
            self._route_through_uplink(ep)

    def _make_uplink(self):
        """The server's uplink: a delay line from the server namespace to the
        router namespace, fixed MACs and permanent neighbours as on the paths,
        the router forwarding (IPv4 and IPv6, no reverse-path filter: every
        address it forwards for is on a known side)."""
        u = (self.base + 16) % 256
        ep = Endpoint(
            path=Path("uplink", down=self.uplink, up=Direction()), index=16, client_ns=self.router_ns,
            server_if=f"{PREFIX}{self.tag}us", client_if=f"{PREFIX}{self.tag}ur",
            server_v4=f"198.19.{u}.1", client_v4=[f"198.19.{u}.2"],
            server_v6=f"fd00:1ab:{u:x}:0::1", client_v6=[f"fd00:1ab:{u:x}:0::2"], class_v4="", class_v6="")
        self.uplink_ep = ep
        self._make_ns(self.router_ns)
        for key in ("net.ipv4.ip_forward=1", "net.ipv4.conf.all.rp_filter=0", "net.ipv4.conf.default.rp_filter=0"):
            self.ns(self.router_ns, "sysctl", "-qw", key)
        if self.ipv6:
            self.ns(self.router_ns, "sysctl", "-qw", "net.ipv6.conf.all.forwarding=1")
        self._start_delayline(ep)
        sh("ip", "link", "set", ep.server_if, "netns", self.server_ns)
        sh("ip", "link", "set", ep.client_if, "netns", self.router_ns)
        mac_s, mac_r = f"02:1a:b0:{u:02x}:ff:01", f"02:1a:b0:{u:02x}:ff:02"
        for ns, dev, mac, a4, a6, peer4, peer6, peer_mac in (
                (self.server_ns, ep.server_if, mac_s, ep.server_v4, ep.server_v6, ep.client_v4[0],
                 ep.client_v6[0], mac_r),
                (self.router_ns, ep.client_if, mac_r, ep.client_v4[0], ep.client_v6[0], ep.server_v4,
                 ep.server_v6, mac_s)):
            self.ns(ns, "ip", "link", "set", dev, "address", mac)
            self.ns(ns, "ip", "addr", "add", f"{a4}/24", "dev", dev)
            self.ns(ns, "ip", "neigh", "replace", peer4, "lladdr", peer_mac, "dev", dev, "nud", "permanent")
            if self.ipv6:
                self.ns(ns, "ip", "link", "set", dev, "addrgenmode", "none")
                self.ns(ns, "ip", "-6", "addr", "add", f"{a6}/64", "dev", dev, "nodad")
                self.ns(ns, "ip", "-6", "neigh", "replace", peer6, "lladdr", peer_mac, "dev", dev,
                        "nud", "permanent")
            else:
                self.ns(ns, "sysctl", "-qw", f"net.ipv6.conf.{dev}.disable_ipv6=1")
            self.ns(ns, "ip", "link", "set", dev, "up")
        self.ns(self.server_ns, "sysctl", "-qw", "net.ipv4.conf.all.rp_filter=0")

    def _route_through_uplink(self, ep: Endpoint):
        """The server holds the path's server address on its uplink and
        reaches the clients through the router; the router reaches the
        server address back through the uplink and the clients on the path."""
        up = self.uplink_ep
        self.ns(self.server_ns, "ip", "addr", "add", f"{ep.server_v4}/32", "dev", up.server_if)
        self.ns(self.server_ns, "ip", "route", "add", ep.class_v4, "via", up.client_v4[0], "dev", up.server_if)
        self.ns(self.router_ns, "ip", "route", "add", f"{ep.server_v4}/32", "via", up.server_v4, "dev",
                up.client_if)
        self.ns(self.router_ns, "ip", "route", "add", ep.class_v4, "dev", ep.server_if)
        if self.ipv6:
            self.ns(self.server_ns, "ip", "-6", "addr", "add", f"{ep.server_v6}/128", "dev", up.server_if,
                    "nodad")
            self.ns(self.server_ns, "ip", "-6", "route", "add", ep.class_v6, "via", up.client_v6[0], "dev",
                    up.server_if)
            self.ns(self.router_ns, "ip", "-6", "route", "add", f"{ep.server_v6}/128", "via", up.server_v6,
                    "dev", up.client_if)
            self.ns(self.router_ns, "ip", "-6", "route", "add", ep.class_v6, "dev", ep.server_if)

    def _start_delayline(self, ep: Endpoint):
        p = ep.path
        ready = self.workdir / f"{p.name}.ready"
        ep.stats_file = str(self.workdir / f"{p.name}.stats.json")
        ep.control = str(self.workdir / f"{p.name}.ctl")
        ready.unlink(missing_ok=True)
        log = open(self.workdir / f"{p.name}.delayline.log", "w")
        # Its own session: `lab.py up` leaves it running after the CLI exits,
        # and a Ctrl-C meant for a test does not kill the path under it.
        proc = subprocess.Popen(
            [str(DELAYLINE), "--tap-a", ep.server_if, "--tap-b", ep.client_if,
             "--a-to-b", p.down.spec(), "--b-to-a", p.up.spec(),
             "--seed", str(self.seed * 100 + ep.index), "--stats", ep.stats_file,
             "--ready", str(ready), "--control", ep.control],
            stdout=log, stderr=log, start_new_session=True)
        log.close()
        ep.delayline_pid = proc.pid
        self._save_state()
        deadline = time.monotonic() + 10
        while not ready.exists():
            if proc.poll() is not None or time.monotonic() > deadline:
                err = (self.workdir / f"{p.name}.delayline.log").read_text().strip()
                raise RuntimeError(f"delay line for path {p.name} did not start "
                                   f"(exit {proc.poll()}): {err}")
            time.sleep(0.01)

    # -- using ----------------------------------------------------------------

    def ns(self, ns, *cmd, check=True, timeout=60):
        return sh("ip", "netns", "exec", ns, *map(str, cmd), check=check, timeout=timeout)

    def popen(self, ns, *cmd, **kw):
        kw.setdefault("stdout", subprocess.PIPE)
        kw.setdefault("stderr", subprocess.PIPE)
        kw.setdefault("text", True)
        return subprocess.Popen(["ip", "netns", "exec", ns, *map(str, cmd)], **kw)

    def ep(self, name) -> Endpoint:
        return self.endpoints[name]

    def track(self, pid: int):
        """Records a process that belongs to this lab although it runs outside
        its namespaces (e.g. a tcpscope daemon): teardown stops it (SIGTERM,
        SIGKILL after 5 s) if it is still the same process, so an orphaned lab
        takes it along."""
        ident = process_identity(pid)
        if ident:
            self._tracked.append(ident)
            self._save_state()

    def detach(self):
        """Leaves the lab running after this process exits (`lab.py up`)."""
        atexit.unregister(self.down)
        self._up = False
        self.owner = None
        self._save_state()

    def set_cc(self, cc: str, ns: Optional[str] = None):
        """Default congestion control of new sockets in a namespace (the server's by default).

        Outside the initial namespace the kernel lets the default be only an
        algorithm of net.ipv4.tcp_allowed_congestion_control (EPERM otherwise),
        and that list is the host's. So a missing algorithm is added to it for
        the lab's lifetime and the list is restored at teardown. (The list only
        gates choosing an algorithm; sockets keep theirs when it changes.)"""
        allowed = ALLOWED_CC.read_text().split()
        if cc not in allowed:
            if self._restore_allowed_cc is None:
                self._restore_allowed_cc = " ".join(allowed)
                self._save_state()
            ALLOWED_CC.write_text(" ".join(allowed + [cc]))
        self.ns(ns or self.server_ns, "sysctl", "-qw", f"net.ipv4.tcp_congestion_control={cc}")

    def control(self, name: str, command: str) -> str:
        """One command to a path's delay line: 'stats', or 'set a-to-b|b-to-a|both SPEC'."""
        ep = self.uplink_ep if name == "uplink" and self.uplink_ep else self.endpoints[name]
        if not ep.control:
            raise ValueError(f"path {name} is a veth and has no delay line")
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
            s.settimeout(5)
            s.connect(ep.control)
            s.sendall(command.encode() + b"\n")
            chunks = []
            while True:
                b = s.recv(65536)
                if not b:
                    break
                chunks.append(b)
        reply = b"".join(chunks).decode()
        if reply.startswith("error"):
            raise RuntimeError(f"delay line {name}: {command!r}: {reply.strip()}")
        return reply

    def set_path(self, name: str, direction: str, **kw):
        """Change a path's model live, e.g. set_path("c1", "up", loss=0)."""
        which = {"down": "a-to-b", "up": "b-to-a", "both": "both"}[direction]
        keys = {"delay_ms": ("delay", lambda v: f"{v * 1000:.0f}us"),
                "jitter_ms": ("jitter", lambda v: f"{v * 1000:.0f}us"),
                "loss": ("loss", lambda v: f"{v:.9f}"),
                "rate_mbit": ("rate", lambda v: f"{v * 1e6:.0f}"),
                "queue": ("queue", str)}
        spec = ",".join(f"{keys[k][0]}={keys[k][1](v)}" for k, v in kw.items())
        self.control(name, f"set {which} {spec}")

    def stats(self, name: str) -> dict:
        """Per-direction counters of a path's delay line: {"down": {...}, "up": {...}}."""
        s = json.loads(self.control(name, "stats"))
        return {"down": s["a_to_b"], "up": s["b_to_a"], "uptime_ns": s["uptime_ns"]}

    def tcpscope_config(self, path: FsPath, extra: str = "") -> FsPath:
        """A tcpscope config whose peer_classes and ASN table describe this lab's
        clients: each path's client prefix gets the path's peer_class and asn.
        Everything else on the host is labelled `unlabelled`."""
        classes: Dict[str, List[str]] = {}
        lines = []
        for ep in self.endpoints.values():
            pfx = [ep.class_v4] + ([ep.class_v6] if self.ipv6 else [])
            classes.setdefault(ep.path.peer_class, []).extend(pfx)
            if ep.path.asn:
                for q in pfx:
                    net = ipaddress.ip_network(q)
                    lines.append(f"{net.network_address}\t{net.prefixlen}\t{ep.path.asn}\n")
        text = ""
        if lines:
            pfx2as = path.with_name(path.stem + "-pfx2as.tsv")
            pfx2as.write_text("".join(lines))
            text += f"asn:\n  prefix_file: {pfx2as}\n"
        text += "peer_classes:\n"
        for name, prefixes in classes.items():
            text += f"  - name: {name}\n    prefixes: [{', '.join(json.dumps(x) for x in prefixes)}]\n"
        text += "default_peer_class: unlabelled\n" + extra
        path.write_text(text)
        return path

    # -- tearing down ---------------------------------------------------------

    def _save_state(self, extra_ns=()):
        STATE_DIR.mkdir(parents=True, exist_ok=True)
        known = json.loads(self._state_file.read_text()) if self._state_file.exists() else {}
        ns = list(dict.fromkeys(known.get("namespaces", []) + list(extra_ns) +
                                list(self.netns_ids)))
        pids = [e.delayline_pid for e in [*self.endpoints.values(), self.uplink_ep] if e and e.delayline_pid]
        state = {"tag": self.tag, "owner": self.owner, "tracked": self._tracked,
                 "namespaces": ns, "delaylines": pids,
                 "workdir": str(self.workdir), "server_ns": self.server_ns,
                 "restore_allowed_cc": self._restore_allowed_cc,
                 "paths": {n: {"client_ns": e.client_ns, "server_v4": e.server_v4,
                               "client_v4": e.client_v4, "server_v6": e.server_v6,
                               "client_v6": e.client_v6, "rtt_ms": e.path.rtt_ms,
                               "control": e.control, "peer_class": e.path.peer_class,
                               "down": dataclasses.asdict(e.path.down),
                               "up": dataclasses.asdict(e.path.up), "veth": e.path.veth}
                           for n, e in self.endpoints.items()}}
        tmp = self._state_file.with_suffix(".tmp")
        tmp.write_text(json.dumps(state, indent=1))
        tmp.rename(self._state_file)

    def down(self):
        """Stops the delay lines (their stats land in workdir) and deletes the namespaces."""
        if not self._up:
            return
        self._up = False
        atexit.unregister(self.down)
        teardown(self._state_file)


def _is_delayline(pid: int) -> bool:
    try:
        return FsPath(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")[0].endswith(
            b"tcpscope_delayline")
    except OSError:
        return False


def _start_time(pid: int) -> Optional[int]:
    """Start time of a process (clock ticks since boot), None if there is none."""
    try:
        stat = FsPath(f"/proc/{pid}/stat").read_text()
        return int(stat[stat.rindex(")") + 2:].split()[19])
    except (FileNotFoundError, ProcessLookupError, ValueError, IndexError):
        return None


def process_identity(pid: int) -> Optional[dict]:
    """pid, start time and pid namespace of a live process: together they name
    it even after its pid is reused."""
    start = _start_time(pid)
    if start is None:
        return None
    return {"pid": pid, "start": start, "pidns": _our_pidns()}


def _same_process(ident: Optional[dict]) -> bool:
    """Whether the process `ident` names still exists (a zombie counts)."""
    if not ident:
        return False
    try:
        return _start_time(ident["pid"]) == ident["start"]
    except OSError:
        return True   # there, but unreadable: assume it is (never reap a live lab)


def _our_pidns() -> int:
    return os.stat("/proc/self/ns/pid").st_ino


def owner_state(state: dict) -> str:
    """'alive', 'dead', or 'none' (a detached lab, or one whose owner lives in
    another pid namespace or was recorded by an older lab.py: not ours to judge)."""
    owner = state.get("owner")
    if not owner or owner.get("pidns") != _our_pidns():
        return "none"
    return "alive" if _same_process(owner) else "dead"


def lab_states():
    """(state file, its contents) of every lab recorded here; unreadable files
    (half-written, removed meanwhile) are skipped."""
    for f in sorted(STATE_DIR.glob("*.json")) if STATE_DIR.exists() else []:
        try:
            yield f, json.loads(f.read_text())
        except (OSError, ValueError):
            continue


def reap_orphans() -> List[str]:
    """Tears down every lab whose owner process is gone (killed before it could
    tear down: SIGKILL, OOM, a crash in C code). Labs of live owners, and
    detached `lab.py up` labs, are left alone. Returns the tags removed."""
    removed = []
    for f, state in lab_states():
        if owner_state(state) == "dead":
            teardown(f)
            removed.append(f.stem)
    return removed


def teardown_mine() -> List[str]:
    """Tears down every lab this process owns that is still up (the last net,
    at interpreter exit, behind each Lab's own teardown)."""
    me = process_identity(os.getpid())
    removed = []
    for f, state in lab_states():
        if me and state.get("owner") == me:
            teardown(f)
            removed.append(f.stem)
    return removed


_exit_net_registered = False


def _register_exit_net():
    global _exit_net_registered
    if not _exit_net_registered:
        _exit_net_registered = True
        atexit.register(teardown_mine)


def _stop_tracked(idents: List[dict]):
    live = [i for i in idents if _same_process(i)]
    for i in live:
        try:
            os.kill(i["pid"], signal.SIGTERM)
        except ProcessLookupError:
            pass
    deadline = time.monotonic() + 5
    for i in live:
        while time.monotonic() < deadline:
            _reap(i["pid"])
            if not _same_process(i) or _is_zombie(i["pid"]):
                break   # gone, or exited and waiting for its parent
            time.sleep(0.02)
        if _same_process(i) and not _is_zombie(i["pid"]):
            try:
                os.kill(i["pid"], signal.SIGKILL)
            except ProcessLookupError:
                pass
        _reap(i["pid"])


def _is_zombie(pid: int) -> Optional[bool]:
    try:
        stat = FsPath(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return stat[stat.rindex(")") + 2] == "Z"


def teardown(state_file: FsPath):
    """Removes what one lab's state file lists. Safe to call twice."""
    try:
        state = json.loads(state_file.read_text())
    except (OSError, ValueError):
        return
    _stop_tracked(state.get("tracked", []))
    pids = [p for p in state.get("delaylines", []) if _is_delayline(p)]
    for pid in pids:
        try:
            os.kill(pid, signal.SIGTERM)   # writes its stats file, removes its TAPs
        except ProcessLookupError:
            pass
    deadline = time.monotonic() + 5
    for pid in pids:
        while _is_delayline(pid) and time.monotonic() < deadline:
            _reap(pid)
            time.sleep(0.02)
        if _is_delayline(pid):
            os.kill(pid, signal.SIGKILL)
            time.sleep(0.05)
        _reap(pid)   # ours (not `lab.py up`'s): no zombie left behind
    remove_netns(*(ns for ns in state.get("namespaces", []) if ns.startswith(PREFIX)))
    if state.get("restore_allowed_cc"):
        try:
            ALLOWED_CC.write_text(state["restore_allowed_cc"])
        except OSError as e:
            print(f"lab: could not restore {ALLOWED_CC} to {state['restore_allowed_cc']!r}: {e}",
                  file=sys.stderr)
    state_file.unlink(missing_ok=True)


def _reap(pid):
    try:
        os.waitpid(pid, os.WNOHANG)
    except ChildProcessError:
        pass


def down_all(tag: Optional[str] = None) -> List[str]:
    """Removes every lab recorded in STATE_DIR (or just TAG), then any namespace
    left with the lab's prefix whose lab left no state file."""
    removed = []
    files = sorted(STATE_DIR.glob(f"{tag or '*'}.json")) if STATE_DIR.exists() else []
    for f in files:
        removed.append(f.stem)
        teardown(f)
    if tag is None:
        for ns in sh("ip", "netns", "list", check=False).stdout.split("\n"):
            name = ns.split(" ")[0]
            if name.startswith(PREFIX) and name[len(PREFIX):len(PREFIX) + 4].isalnum() \
                    and "-" in name:
                remove_netns(name)
                removed.append(name)
    return removed


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    up = sub.add_parser("up", help="build paths and leave them running")
    up.add_argument("--preset", action="append", default=[],
                    help=f"a path from a preset ({', '.join(PRESETS)}); repeatable; "
                         "NAME=PRESET names the client namespace")
    up.add_argument("--path", action="append", default=[],
                    help="a custom symmetric path: NAME:delay_ms=25,loss=0.01,rate_mbit=50,"
                         "queue=200,jitter_ms=0")
    up.add_argument("--tag", help="1-5 letters or digits naming this lab (default random)")
    up.add_argument("--no-ipv6", action="store_true")
    up.add_argument("--workdir", help="delay-line logs, control sockets and counters "
                                      "(default /tmp/tsl<TAG>)")
    up.add_argument("--config", help="also write a tcpscope config for these paths here")
    sub.add_parser("status", help="list running labs")
    dn = sub.add_parser("down", help="remove labs (all of them, or --tag)")
    dn.add_argument("--tag")
    args = ap.parse_args(argv)

    if os.geteuid() != 0:
        ap.error("run as root: the lab creates network namespaces and TAP devices")
    if args.cmd == "down":
        removed = down_all(args.tag)
        print("removed:", " ".join(removed) if removed else "nothing")
        return 0
    if args.cmd == "status":
        for f in sorted(STATE_DIR.glob("*.json")) if STATE_DIR.exists() else []:
            text = f.read_text()
            try:
                owner = owner_state(json.loads(text))
            except ValueError:
                owner = "unreadable"
            print(f"# {f.stem}: owner {owner}")
            print(text)
        return 0
    paths = []
    for i, spec in enumerate(args.preset):
        name, _, preset = spec.rpartition("=")
        paths.append(Path.preset(preset, name=name or f"{preset.split('-')[0][0]}{i}"))
    for spec in args.path:
        name, _, kv = spec.partition(":")
        kw = {k: float(v) for k, v in (x.split("=") for x in kv.split(",") if x)}
        if "queue" in kw:
            kw["queue"] = int(kw["queue"])
        paths.append(Path.symmetric(name, **kw))
    if not paths:
        ap.error("give at least one --preset or --path")
    lab = Lab(paths, tag=args.tag, ipv6=not args.no_ipv6,
              workdir=FsPath(args.workdir).resolve() if args.workdir else None)
    lab.up()
    lab.detach()   # `up` means: leave it running
    print(f"lab {lab.tag}: server namespace {lab.server_ns}")
    for ep in lab.endpoints.values():
        kind = "veth" if ep.path.veth else (f"delay line pid {ep.delayline_pid}: "
                                            f"down {ep.path.down.spec()} / up {ep.path.up.spec()}")
        print(f"  path {ep.path.name}: client namespace {ep.client_ns}, server {ep.server_v4} "
              f"{ep.server_v6}, client {' '.join(ep.client_v4 + ep.client_v6)}, "
              f"class {ep.path.peer_class}; {kind}")
    if args.config:
        print("tcpscope config:", lab.tcpscope_config(FsPath(args.config).resolve()))
    print(f"run commands with: ip netns exec NAMESPACE ...; remove with: {sys.argv[0]} down "
          f"--tag {lab.tag}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
