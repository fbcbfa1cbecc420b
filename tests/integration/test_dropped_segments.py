"""Segments TCP drops, on the kernels where tcpscope reads segments before
TCP has checked them: without tcp_sendmsg_locked (before 6.16) send
transfers come from the ACKs, and without sk_data_ready (before 6.3) payload
arrivals from the segments, both at tcp_probe, which tcp_rcv_established()
runs before PAWS (RFC 7323's check of TCP timestamps) and the receive
window are checked. A segment TCP drops must change neither a transfer nor
the flow record.

The segments are crafted and written into a real connection from its
client's end of the veth (an AF_PACKET socket, which no route sees), with
the sequence numbers and timestamps a capture on that link saw last; the
server's kernel counters and tcp_info show that each was dropped, and why."""
import collections
import contextlib
import ctypes
import os
import socket
import struct
import sys
import time

import pytest

from conftest import ROOT, Daemon, wait_for

from traffic import tcp_info

sys.path.insert(0, str(ROOT / "tests" / "kernel_profiles"))
import derive  # noqa: E402

PROFILES = sorted(derive.PROFILES)
CLONE_NEWNET = 0x40000000
ETH_P_ALL, ETH_P_IP = 0x0003, 0x0800
TCP_FIN, TCP_SYN, TCP_RST, TCP_PSH, TCP_ACK = 0x01, 0x02, 0x04, 0x08, 0x10
REQUEST, RESPONSE = 100, 1000
# Kept between an instant the test takes and the event it bounds: room for
# the daemon's conversion of the kernel's clock to the records' (CLOCK_REALTIME).
MARGIN = 0.01
_libc = ctypes.CDLL(None, use_errno=True)

Segment = collections.namedtuple("Segment", "from_client seq ack flags length window tsval")


def _setns(fd, what):
    if _libc.setns(fd, CLONE_NEWNET) != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"setns into {what}: {os.strerror(err)}")


@contextlib.contextmanager
def in_netns(name):
    """This thread in network namespace `name`: sockets made meanwhile stay in it."""
    home = os.open("/proc/thread-self/ns/net", os.O_RDONLY)
    target = os.open(f"/run/netns/{name}", os.O_RDONLY)
    try:
        _setns(target, name)
        try:
            yield
        finally:
            _setns(home, "the test's own namespace")
    finally:
        os.close(target)
        os.close(home)


def netstat(net, ns):
    """The namespace's TcpExt counters (/proc/net/netstat), by name."""
    lines = net.ns(ns, "cat", "/proc/net/netstat").stdout.splitlines()
    out = {}
    for names, values in zip(lines[::2], lines[1::2]):
        if names.startswith("TcpExt:"):
            out.update(zip(names.split()[1:], map(int, values.split()[1:])))
    return out


def mac(net, ns, dev):
    return bytes.fromhex(net.ns(ns, "cat", f"/sys/class/net/{dev}/address").stdout.strip().replace(":", ""))


def checksum(data):
    if len(data) % 2:
        data += b"\0"
    s = sum(struct.unpack(f"!{len(data) // 2}H", data))
    while s >> 16:
        s = (s & 0xffff) + (s >> 16)
    return ~s & 0xffff


def tsval_of(options):
    """The TSval of a TCP header's options, or None."""
    i = 0
    while i < len(options) and options[i] != 0:
        if options[i] == 1:
            i += 1
            continue
        if i + 1 >= len(options) or options[i + 1] < 2:
            break
        if options[i] == 8 and options[i + 1] == 10:
            return struct.unpack_from("!I", options, i + 2)[0]
        i += options[i + 1]
    return None


class Link:
    """One IPv4 connection as its client's end of the veth carries it: the
    segments each way (captured), and segments written in as if from the
    client, past the client's own stack."""

    def __init__(self, net, client, server):
        (self.caddr, self.cport), (self.saddr, self.sport) = client, server
        self.cmac, self.smac = mac(net, net.cli, net.veth_cli), mac(net, net.srv, net.veth_srv)
        with in_netns(net.cli):
            self.sock = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(ETH_P_ALL))
        self.sock.bind((net.veth_cli, 0))
        self.sock.setblocking(False)
        self.segments = []

    def close(self):
        self.sock.close()

    def read(self):
        """Takes in what the capture holds; returns every Segment so far, in order."""
        while True:
            try:
                frame = self.sock.recv(65536)
            except BlockingIOError:
                return self.segments
            if len(frame) < 34 or struct.unpack_from("!H", frame, 12)[0] != ETH_P_IP or frame[23] != 6:
                continue
            ihl, total = (frame[14] & 0x0f) * 4, struct.unpack_from("!H", frame, 16)[0]
            ends = (socket.inet_ntoa(frame[26:30]), socket.inet_ntoa(frame[30:34]))
            tcp = frame[14 + ihl:14 + total]
            sport, dport, seq, ack = struct.unpack_from("!HHII", tcp)
            doff, window = (tcp[12] >> 4) * 4, struct.unpack_from("!H", tcp, 14)[0]
            if ((ends[0], sport), (ends[1], dport)) in (((self.caddr, self.cport), (self.saddr, self.sport)),
                                                        ((self.saddr, self.sport), (self.caddr, self.cport))):
                self.segments.append(Segment(ends[0] == self.caddr, seq, ack, tcp[13], len(tcp) - doff, window,
                                             tsval_of(tcp[20:doff])))

    def next_seq(self, from_client):
        """One past the last sequence number (SYN and FIN count) that side sent."""
        ends = [s.seq + s.length + bool(s.flags & TCP_SYN) + bool(s.flags & TCP_FIN)
                for s in self.read() if s.from_client == from_client]
        return max(ends, key=lambda e: (e - ends[0]) & 0xffffffff)

    def last_tsval(self, from_client):
        return [s.tsval for s in self.read() if s.from_client == from_client][-1]

    def send(self, flags, seq, ack, tsval, tsecr, payload):
        """A segment from the client: `flags`, the timestamp option, `payload`."""
        options = struct.pack("!BBBBII", 1, 1, 8, 10, tsval & 0xffffffff, tsecr)
        tcp = struct.pack("!HHIIBBHHH", self.cport, self.sport, seq & 0xffffffff, ack & 0xffffffff,
                          (20 + len(options)) // 4 << 4, flags, 502, 0, 0) + options + payload
        pseudo = socket.inet_aton(self.caddr) + socket.inet_aton(self.saddr) + struct.pack("!BBH", 0, 6, len(tcp))
        tcp = tcp[:16] + struct.pack("!H", checksum(pseudo + tcp)) + tcp[18:]
        ip = struct.pack("!BBHHHBBH4s4s", 0x45, 0, 20 + len(tcp), 0x7c5, 0x4000, 64, 6, 0,
                         socket.inet_aton(self.caddr), socket.inet_aton(self.saddr))
        ip = ip[:10] + struct.pack("!H", checksum(ip)) + ip[12:]
        self.sock.send(self.smac + self.cmac + struct.pack("!H", ETH_P_IP) + ip + tcp)


# What each kind of dropped segment is: its flags, its sequence number and
# TSval from the server's next expected ones (rcv_nxt, and ts_recent or
# later), and how the counters of the reason move ("A+B": their sum;
# BeyondWindow exists from 6.17 on). The other COUNTERS stay.
KINDS = {
    # A TSval older than the last one the server took: RFC 7323's PAWS.
    "paws": (TCP_ACK | TCP_PSH, 0, -100_000, {"PAWSEstab": 1}),
    # 2^30 beyond the receive window (where accepted, it would be queued out
    # of order: TCPOFOQueue).
    "window": (TCP_ACK | TCP_PSH, 1 << 30, 0, {"BeyondWindow": 1}),
    # A SYN on an established connection, answered by a challenge ACK
    # (rate-limited to one per 0.5 s and socket: then skipped).
    "syn": (TCP_SYN | TCP_ACK | TCP_PSH, 0, 0, {"TCPSYNChallenge": 1, "TCPChallengeACK+TCPACKSkippedChallenge": 1}),
    # A RST inside the window but not at its start: a challenge ACK too.
    "rst": (TCP_RST | TCP_ACK, 1, 0, {"TCPChallengeACK+TCPACKSkippedChallenge": 1}),
    # The expected payload while the server's window is closed: 6.1 and
    # 6.12 drop it in tcp_data_queue() (TCPZeroWindowDrop), 6.17 and later
    # already in tcp_sequence() (BeyondWindow).
    "closed window": (TCP_ACK | TCP_PSH, 0, 0, {"TCPZeroWindowDrop+BeyondWindow": 1}),
}
COUNTERS = ("PAWSEstab", "BeyondWindow", "TCPOFOQueue", "TCPZeroWindowDrop", "TCPSYNChallenge", "TCPChallengeACK",
            "TCPACKSkippedChallenge")


def counted_as(kind, grew):
    """Whether the counters' growth `grew` is the reason of `kind` (KINDS),
    and whether this kernel has a counter of that reason."""
    named, counted = set(), False
    for key, n in KINDS[kind][3].items():
        names = key.split("+")
        named.update(names)
        if any(k in grew for k in names):
            counted = True
            if sum(grew.get(k, 0) for k in names) != n:
                return False, counted
    return all(n == 0 for k, n in grew.items() if k not in named), counted


def inject_dropped(net, link, srv, kind):
    """Writes one segment of `kind` (KINDS) with 100 bytes of payload and the
    ACK of everything the server sent, and returns the counters that moved,
    once they say why the server dropped it; where this kernel has no such
    counter (the window before 6.17), once the server answered with a
    duplicate ACK, as TCP answers a segment it drops, and no counter of
    another reason moved. Neither its ACK nor its payload may be taken."""
    flags, offset, ts_back, _ = KINDS[kind]
    before, info = netstat(net, net.srv), tcp_info(srv)
    rcv_nxt = link.next_seq(True)
    seen = len(link.read())
    link.send(flags, rcv_nxt + offset, link.next_seq(False), link.last_tsval(True) + ts_back,
              link.last_tsval(False), b"x" * REQUEST)

    def grew():
        after = netstat(net, net.srv)
        return {k: after[k] - before[k] for k in COUNTERS if k in after}

    def answered():
        ok, counted = counted_as(kind, grew())
        return ok and (counted or any(not s.from_client and s.ack == rcv_nxt and not s.length
                                      for s in link.read()[seen:]))
    wait_for(answered, 10, what=lambda: f"the counters of {kind} or the server's duplicate ACK: {grew()}")
    now = tcp_info(srv)
    assert (now["bytes_acked"], now["bytes_received"]) == (info["bytes_acked"], info["bytes_received"]), (info, now)
    return {k: n for k, n in grew().items() if n}


def recv_exact(sock, n):
    data = b""
    while len(data) < n:
        chunk = sock.recv(n - len(data))
        assert chunk, f"peer closed after {len(data)} of {n} bytes"
        data += chunk
    return data


@contextlib.contextmanager
def observed_connection(net, tmp_path, name, port, server_rcvbuf=0):
    """The daemon as on kernel profile `name` (None: this kernel), and one
    connection from `net`'s client to its server, whose link is captured:
    (daemon, client socket, server socket, Link)."""
    d = Daemon(tmp_path, env=derive.daemon_env(name))
    socks, link = [], None
    try:
        with in_netns(net.srv):
            listener = socket.create_server((net.srv_v4, port))
        socks.append(listener)
        if server_rcvbuf:
            listener.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, server_rcvbuf)  # accepted sockets inherit it
        with in_netns(net.cli):
            client = socket.socket()
        socks.append(client)
        client.connect((net.srv_v4, port))
        srv, _ = listener.accept()
        socks.append(srv)
        for s in (client, srv):
            s.settimeout(20)
        link = Link(net, client.getsockname(), srv.getsockname())
        yield d, client, srv, link
        assert "refused" not in d.stderr_text(), d.stderr_text()
    finally:
        if link:
            link.close()
        for s in socks:
            s.close()
        d.stop()


def server_transfers(d, net):
    """The server's flow record and its transfers, in order, once all are in."""
    rec = next(r for r in d.wait_records(net, 2) if r["dir"] == "passive")

    def transfers():
        return sorted((t for t in d.all_transfers() if t["netns"] == rec["netns"] and t["lport"] == rec["lport"]
                       and t["flow_start_ns"] == rec["start_ns"]), key=lambda t: t["seq"])
    wait_for(lambda: sum(t["bytes"] for t in transfers()) == rec["bytes_acked"] + rec["bytes_received"], 10,
             what=lambda: f"transfers of the flow's bytes: {transfers()}")
    time.sleep(0.3)  # one more would show up now
    return rec, transfers()


@pytest.mark.parametrize("kind", ["paws", "window", "syn", "rst"])
@pytest.mark.parametrize("name", [pytest.param(None, marks=pytest.mark.real_kernel), *PROFILES])
def test_a_dropped_segment_ends_no_transfer_and_is_no_arrival(name, kind, net, tmp_path):
    """A request, a response, a request, a response on one connection, with
    two dropped segments (inject_dropped()) written in: one while the first
    response waits for its ACK (the client's ACKs go nowhere for 0.1 s),
    which acknowledges all of it and carries payload, so it would end that
    send transfer where it came (the rule from the ACKs) or mark an arrival
    (the rule from the segments: a request, starting a receive transfer);
    and one after the second response, which would mark an arrival after
    the flow's last. The server's transfers and its flow record must be
    what the real segments make them: the first response ends after the
    client's ACKs came back, the second request starts when it was sent,
    the flow's data ends before the last injection, four transfers, exact
    bytes. On the profile's kernel (the rules from the ACKs, and on
    debian12-6.1 from the segments) as on this one (None: every hook)."""
    with observed_connection(net, tmp_path, name, 8096) as (d, client, srv, link):
        client.sendall(b"q" * REQUEST)
        recv_exact(srv, REQUEST)
        net.ns(net.cli, "ip", "route", "add", "blackhole", f"{net.srv_v4}/32")
        try:
            srv.sendall(b"r" * RESPONSE)
            wait_for(lambda: any(not s.from_client and s.length for s in link.read()), 10, what="the response")
            print(f"\n{name or 'every hook'} {kind}: dropped {inject_dropped(net, link, srv, kind)}", end="")
            time.sleep(0.1)
            released_ns = time.time_ns()
        finally:
            net.ns(net.cli, "ip", "route", "del", "blackhole", f"{net.srv_v4}/32")
        recv_exact(client, RESPONSE)
        wait_for(lambda: tcp_info(srv)["bytes_acked"] >= RESPONSE, 10, what="the response's ACK")

        second_request_ns = time.time_ns()
        time.sleep(MARGIN)
        client.sendall(b"q" * REQUEST)
        assert recv_exact(srv, REQUEST) == b"q" * REQUEST  # none of the injected bytes
        srv.sendall(b"r" * RESPONSE)
        recv_exact(client, RESPONSE)
        wait_for(lambda: tcp_info(srv)["bytes_acked"] >= 2 * RESPONSE, 10, what="the second response's ACK")
        time.sleep(MARGIN)
        last_data_ns = time.time_ns()
        inject_dropped(net, link, srv, kind)
        client.close()
        assert srv.recv(1) == b""
        srv.close()

        rec, ts = server_transfers(d, net)
        assert (rec["bytes_received"], rec["bytes_acked"]) == (2 * REQUEST, 2 * RESPONSE), rec
        assert [(t["direction"], t["bytes"]) for t in ts] == [("recv", REQUEST), ("send", RESPONSE)] * 2, ts
        # In ms, below 0 where wrong.
        margins = {"first response ends after the release": (ts[1]["end_ns"] - released_ns) / 1e6,
                   "second request starts after its send": (ts[2]["start_ns"] - second_request_ns) / 1e6,
                   "flow's data ends before the last injection":
                       (last_data_ns - rec["start_ns"] - rec["fct_us"] * 1000) / 1e6}
        print(f"; ms {({k: round(v, 3) for k, v in margins.items()})}", end="")
        assert all(v >= 0 for v in margins.values()), margins


@pytest.mark.parametrize("name", [pytest.param(None, marks=pytest.mark.real_kernel), *PROFILES])
def test_payload_at_a_closed_window_is_no_arrival(name, net, tmp_path):
    """A request, a response, then an upload that the server does not read
    until its window has closed, and a response written meanwhile. A
    segment with the upload's next payload written in while the window is
    closed is dropped ("closed window" in KINDS): the only segment outside
    the window that the rule from the segments would take for an arrival,
    here one starting a receive transfer (a response went out since the
    last arrival). That transfer must start when the window opened again,
    0.1 s later."""
    upload = 128 * 1024
    with observed_connection(net, tmp_path, name, 8097, server_rcvbuf=4096) as (d, client, srv, link):
        client.sendall(b"q" * REQUEST)
        recv_exact(srv, REQUEST)
        srv.sendall(b"r" * RESPONSE)
        recv_exact(client, RESPONSE)
        client.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 2 * upload)
        client.sendall(b"u" * upload)  # into the client's buffer: the server's window closes first
        wait_for(lambda: any(not s.from_client and s.window == 0 for s in link.read()), 10,
                 what="the server's window to close")
        srv.sendall(b"r" * RESPONSE)
        recv_exact(client, RESPONSE)
        wait_for(lambda: tcp_info(srv)["bytes_acked"] >= 2 * RESPONSE, 10, what="the response's ACK")
        print(f"\n{name or 'every hook'}: dropped {inject_dropped(net, link, srv, 'closed window')}", end="")
        time.sleep(0.1)
        opened_ns = time.time_ns()
        time.sleep(MARGIN)
        assert recv_exact(srv, upload) == b"u" * upload  # none of the injected bytes
        client.close()
        assert srv.recv(1) == b""
        srv.close()

        rec, ts = server_transfers(d, net)
        assert rec["bytes_received"] == REQUEST + upload, rec
        assert [t["direction"] for t in ts] == ["recv", "send", "recv", "send", "recv"], ts
        assert [ts[0]["bytes"], ts[1]["bytes"], ts[2]["bytes"] + ts[4]["bytes"], ts[3]["bytes"]] == \
            [REQUEST, RESPONSE, upload, RESPONSE], ts
        print(f"; the upload's rest starts {(ts[4]['start_ns'] - opened_ns) / 1e6:.3f} ms after the window opened",
              end="")
        assert ts[4]["start_ns"] >= opened_ns, (ts[4], opened_ns)
