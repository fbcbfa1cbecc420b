"""Hostile HTTP clients against a daemon under load (issue 15): a thousand
slow clients of five kinds, from many hosts and from the scraper's own,
while connections churn; all the while a scrape every second must be
answered within a second, and no flow record may be lost.

Each test makes its own namespaces and daemon and removes them, whatever
happens."""
import base64
import contextlib
import errno
import gzip
import hashlib
import json
import os
import random
import signal
import select
import socket
import struct
import subprocess
import sys
import threading
import time
import urllib.parse

import pytest

from conftest import TCPSCOPE, Daemon, free_port, loadgen_binary, remove_netns, sh, wait_for
from testlib import proc_mem_kib
from test_dropped_segments import in_netns
from test_reliability import churn_for, config_for, http_get, raw_exchange, wait_flows

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="needs root (BPF, namespaces)")

KINDS = ("half-sent", "byte-a-second", "connect-and-wait", "keep-alive-poller", "slow-reader")
REQUEST = b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n"


class SlowClient:
    def __init__(self, kind, source, server):
        self.kind, self.source, self.server = kind, source, server
        self.sock = None
        self.next_at = 0.0      # the next action
        self.sent = 0           # bytes of REQUEST sent (byte-a-second)
        self.connects = 0
        self.closed_by_server = 0

    def connect(self, now):
        s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        if self.kind == "slow-reader":
            s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 2048)
        s.setblocking(False)
        s.bind((self.source, 0))
        rc = s.connect_ex(self.server)
        if rc not in (0, errno.EINPROGRESS):
            s.close()
            self.next_at = now + 1
            return
        self.sock, self.sent, self.connects = s, 0, self.connects + 1
        self.next_at = now + 0.05

    def drop(self, now):
        self.sock.close()
        self.sock = None
        self.closed_by_server += 1
        self.next_at = now + 1  # reconnect, at most once a second

    def step(self, now):
        if now < self.next_at:
            return
        if self.sock is None:
            return self.connect(now)
        try:
            if self.kind != "slow-reader" or self.sent:
                # Anything the server sends back (a 408, /healthz answers) is
                # read and dropped; an end of stream means it closed us.
                data = self.sock.recv(100 if self.kind == "slow-reader" else 65536)
                if data == b"":
                    return self.drop(now)
        except BlockingIOError:
            pass
        except OSError:
            return self.drop(now)
        try:
            if self.kind == "half-sent" and not self.sent:
                self.sent = self.sock.send(REQUEST[:-2])
            elif self.kind == "byte-a-second" and self.sent < len(REQUEST):
                self.sent += self.sock.send(REQUEST[self.sent:self.sent + 1])
            elif self.kind == "keep-alive-poller":
                self.sock.send(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
            elif self.kind == "slow-reader" and not self.sent:
                self.sent = self.sock.send(REQUEST)
        except BlockingIOError:
            pass
        except OSError:
            return self.drop(now)
        self.next_at = now + (0.5 if self.kind == "keep-alive-poller" else 1.0)


def run_slow_clients(clients, stop, deadline_s, netns=None):
    """Until `stop` or the deadline; in network namespace `netns` if given."""
    with in_netns(netns) if netns else contextlib.nullcontext():
        t_end = time.monotonic() + deadline_s
        while not stop.is_set() and time.monotonic() < t_end:
            now = time.monotonic()
            for c in clients:
                c.step(now)
            time.sleep(0.02)
        for c in clients:
            if c.sock is not None:
                c.sock.close()


@contextlib.contextmanager
def other_host(sources):
    """A namespace of its own (another host, as the daemon sees it) holding
    `sources` addresses, joined to this one by a veth: yields (namespace,
    its addresses, this end's address)."""
    n, tag = random.randrange(1, 250), f"{os.getpid() % 10000}-{random.randrange(1 << 20):05x}"
    ns, here, there = f"tsc-h{tag}", f"tshh{tag[-5:]}", f"tsht{tag[-5:]}"
    addresses = [f"198.19.{n}.{11 + i}" for i in range(sources)]
    try:
        sh("ip", "netns", "add", ns)
        sh("ip", "link", "add", here, "type", "veth", "peer", "name", there, "netns", ns)
        sh("ip", "addr", "add", f"198.19.{n}.1/24", "dev", here)
        sh("ip", "link", "set", here, "up")
        for a in addresses:
            sh("ip", "-n", ns, "addr", "add", f"{a}/24", "dev", there)
        sh("ip", "-n", ns, "link", "set", there, "up")
        sh("ip", "-n", ns, "link", "set", "lo", "up")
        yield ns, addresses, f"198.19.{n}.1"
    finally:
        sh("ip", "link", "del", here, check=False)
        remove_netns(ns)


def scrapes_during(d, seconds):
    """One scrape a second for `seconds`: [(status, seconds taken, complete)]."""
    out = []
    for _ in range(int(seconds)):
        t0 = time.monotonic()
        try:
            status, _, body = http_get(d.url + "/metrics", timeout=5)
            complete = body.endswith("\n") and "tcpscope_build_info" in body
        except OSError as e:
            status, complete = repr(e), False
        took = time.monotonic() - t0
        out.append((status, took, complete))
        time.sleep(max(0.0, 1.0 - took))
    return out


@pytest.mark.parametrize("remote", [True, False], ids=["from-20-addresses", "from-the-scrapers-host"])
def test_a_thousand_slow_clients_do_not_delay_scrapes(net, tmp_path, remote):
    """1,000 slow clients, 200 of each kind, from 20 addresses: another
    host's (50 each, under the per-peer cap: the daemon, listening on every
    address, holds them all), or 127.0.0.1 and 19 more of this host's
    loopback, where the scraper is: one peer, whose cap replaces the oldest
    idle ones. Connections churn through the daemon meanwhile."""
    cfg = config_for(tmp_path, net)
    port = free_port()
    with other_host(20) if remote else contextlib.nullcontext() as host:
        if remote:
            netns, addresses, server = host
            listen = ("--listen", f"0.0.0.0:{port}")  # after the Daemon's own 127.0.0.1: the last one holds
        else:
            netns, addresses, server = None, ["127.0.0.1"] + [f"127.0.0.{11 + i}" for i in range(19)], "127.0.0.1"
            listen = ()
        d = Daemon(tmp_path, port=port, extra_args=("--config", str(cfg), *listen))
        stop = threading.Event()
        try:
            clients = [SlowClient(KINDS[i % len(KINDS)], addresses[i % len(addresses)], (server, port))
                       for i in range(1000)]
            attacker = threading.Thread(target=run_slow_clients, args=(clients, stop, 90, netns), daemon=True)
            connections = [0]

            def load():
                connections[0] = churn_for(net, tmp_path, 60, stop=stop)

            loader = threading.Thread(target=load, daemon=True)
            attacker.start()
            loader.start()
            time.sleep(3)  # every kind connected and settled into its pattern
            held = sum(1 for c in clients if c.sock is not None)
            scrapes = scrapes_during(d, 15)
            stop.set()
            attacker.join(timeout=30)
            loader.join(timeout=120)
            assert not loader.is_alive() and not attacker.is_alive()

            slow = [s for s in scrapes if s[0] != 200 or not s[2] or s[1] >= 1.0]
            worst = max(s[1] for s in scrapes)
            rejected = {r: d.metric_value("tcpscope_http_rejected_total", {"reason": r}) or 0
                        for r in ("head_timeout", "response_timeout", "connection_limit", "malformed", "busy")}
            print(f"\n{'another host' if remote else 'this host'}: {held} of 1000 slow clients connected at the "
                  f"start, {sum(c.connects for c in clients)} connections made, "
                  f"{sum(c.closed_by_server for c in clients)} closed by the daemon; 15 scrapes, slowest "
                  f"{worst * 1000:.0f} ms; rejected {rejected}; {connections[0]} churn connections")
            assert not slow, slow
            if remote:
                assert rejected["connection_limit"] == 0  # 20 peers, each under its cap
                assert rejected["head_timeout"] > 0  # each held until its deadline
            else:
                assert rejected["connection_limit"] > 0  # one peer: the cap replaced the oldest idle ones
            wait_flows(d, 2 * connections[0], 30)
            assert d.metric_value("tcpscope_records_lost_total") == 0
        finally:
            stop.set()
            assert d.stop() == 0, d.stderr_text()


def flows_from_many_asns(net, tmp_path, asns):
    """A config that gives each of `asns` addresses of the client namespace
    an AS of its own, and the addresses themselves: one connection from each
    to the server makes `asns` label sets, each a few hundred series."""
    prefix = net.cli_v6.rsplit("::", 1)[0]  # the pair's /64: the server reaches all of it
    sources = [f"{prefix}::{0x1000 + i:x}" for i in range(asns)]
    pfx = tmp_path / "pfx2as.tsv"
    pfx.write_text("".join(f"{a}\t128\t{64600 + i}\n" for i, a in enumerate(sources)))
    batch = tmp_path / "addresses.ip"
    batch.write_text("".join(f"addr add {a}/128 dev {net.veth_cli} nodad\n" for a in sources))
    net.ns(net.cli, "ip", "-batch", str(batch))
    return sources, config_for(tmp_path, net, extra=f"asn:\n  prefix_file: {pfx}\n  top_n: {asns}\n")


def one_exchange_from_each(net, tmp_path, sources, port=8080):
    """traffic.py's exchange (100 bytes asked, 1,000 answered) from each source."""
    server, _ = net.serve(tmp_path, net.srv_v6, len(sources), port=port)
    with in_netns(net.cli):
        for a in sources:
            with socket.create_connection((net.srv_v6, port), timeout=10, source_address=(a, 0)) as s:
                s.sendall(struct.pack("!II", 100, 1000) + b"c" * 100)
                got = 0
                while got < 1000 and (chunk := s.recv(65536)):
                    got += len(chunk)
                assert got == 1000, (a, got)
    server.wait(timeout=30)


def test_non_reading_clients_of_a_big_page_leave_the_budget_to_the_scrape(net, tmp_path):
    """64 clients of another host ask /metrics at once and never read, while
    the page is bigger than what a socket's send buffer takes (tcp_wmem's
    4 MiB): their answers wait in the daemon. They share one answer (two:
    the first may be answered alone), which the response budget counts once;
    counted per connection, 64 copies would pass the 128 MiB budget and the
    real scrape would get 503. It gets 200, its page whole, in under a
    second, and nothing is refused as busy."""
    asns = 640  # about 8.5 KB of series each
    sources, cfg = flows_from_many_asns(net, tmp_path, asns)
    port = free_port()
    with other_host(2) as (netns, addresses, server):
        d = Daemon(tmp_path, port=port, extra_args=("--config", str(cfg), "--listen", f"0.0.0.0:{port}"))
        attackers = []
        try:
            one_exchange_from_each(net, tmp_path, sources)
            def every_asn_has_series():
                text = d.metrics()
                return all(f'asn="{64600 + i}"' in text for i in range(asns))

            wait_for(every_asn_has_series, 30, interval=0.5, what=f"series of {asns} ASNs")
            page = len(d.metrics())
            with in_netns(netns):
                for i in range(64):
                    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
                    attackers.append(s)
                    s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 2048)
                    s.bind((addresses[i % len(addresses)], 0))
                    s.settimeout(10)
                    s.connect((server, port))
                    s.sendall(REQUEST)
            t_attack = time.monotonic()
            for s in attackers:  # each has begun to take its answer, and takes no more
                assert select.select([s], [], [], 10)[0], "no answer began within 10 s"
                assert s.recv(12) == b"HTTP/1.1 200"
            t0 = time.monotonic()
            status, _, body = http_get(d.url + "/metrics", timeout=10)
            took = time.monotonic() - t0
            busy = d.metric_value("tcpscope_http_rejected_total", {"reason": "busy"})
            print(f"\n64 non-reading clients of a {page / 1048576:.1f} MiB page (64 copies: "
                  f"{64 * page / 1048576:.0f} MiB); the scrape {time.monotonic() - t_attack:.2f} s into the "
                  f"attack took {took * 1000:.0f} ms: {status}; rejected as busy: {busy}")
            assert 64 * page > 128 << 20 and page > 4 << 20, page  # the premise: past the socket buffers and the budget
            assert status == 200 and body.endswith("\n") and "tcpscope_build_info" in body, (status, body[-200:])
            assert took < 1.0, took
            assert busy == 0
        finally:
            for s in attackers:
                s.close()
            assert d.stop() == 0, d.stderr_text()


def test_sixteen_parallel_flow_listings_of_204k_open_flows_keep_memory_flat(net, tmp_path):
    """102,000 connections held open between the test's namespaces: 204,000
    open flows in the daemon's snapshot. 16 clients list them at once, twice:
    each answer is a page of at most 10,000 flows (about 10 MB), so the
    daemon's memory grows by a few pages, not by 16 copies of the whole list
    (about 200 MB each). `tcpscope flows` pages through all of them."""
    # A process may hold no more descriptors than RLIMIT_NOFILE (20,000 here).
    pairs, per = 6, 17_000
    n = pairs * per
    cfg = config_for(tmp_path, net)
    d = Daemon(tmp_path, extra_args=("--config", str(cfg)))
    try:
        lg = loadgen_binary()
        clients = []
        for i in range(pairs):
            port = str(9000 + i)
            sready, cready = tmp_path / f"hold-serve-{i}.ready", tmp_path / f"hold-{i}.ready"
            srv = net.spawn(net.srv, lg, "hold-serve", "--bind", net.srv_v4, "--ports", port, "--ready", str(sready),
                            "--max-fds", str(per + 500))
            wait_for(lambda: sready.exists() or srv.poll() is not None, 10, what="a holding server")
            assert srv.poll() is None, srv.stderr.read()
            clients.append((net.spawn(net.cli, lg, "hold", "--addr", net.srv_v4, "--ports", port, "--count", str(per),
                                      "--ready", str(cready)), cready))
        for cli, cready in clients:
            wait_for(lambda: cready.exists() or cli.poll() is not None, 300, what=f"{per} connections")
            assert cli.poll() is None, cli.stderr.read()
        wait_for(lambda: (d.metric_value("tcpscope_snapshot_flows") or 0) >= 2 * n, 60, interval=0.5,
                 what=f"{2 * n} open flows in the snapshot")

        rss0 = proc_mem_kib(d.proc.pid)[0]
        peak = [rss0]
        stop = threading.Event()

        def sample():
            while not stop.is_set():
                peak[0] = max(peak[0], proc_mem_kib(d.proc.pid)[0])
                time.sleep(0.01)

        sizes, errors = [], []

        def listing():
            for _ in range(2):
                try:
                    status, _, body = http_get(d.url + "/api/v1/flows", timeout=60)
                    sizes.append((status, len(body)))
                except OSError as e:
                    errors.append(repr(e))

        sampler = threading.Thread(target=sample, daemon=True)
        sampler.start()
        clients = [threading.Thread(target=listing) for _ in range(16)]
        t0 = time.monotonic()
        for t in clients:
            t.start()
        for t in clients:
            t.join(timeout=300)
        took = time.monotonic() - t0
        stop.set()
        sampler.join()
        assert not errors, errors[:3]
        assert len(sizes) == 32 and all(s == 200 for s, _ in sizes), sizes[:3]
        page = max(b for _, b in sizes)
        grew_mib = (peak[0] - rss0) / 1024
        print(f"\n{2 * n} open flows: 32 listings (16 at once) in {took:.1f} s, {page / 1e6:.1f} MB a page; "
              f"RSS {rss0 / 1024:.0f} MiB before, peak {peak[0] / 1024:.0f} MiB (+{grew_mib:.0f} MiB); "
              f"the whole list would be {page * 2 * n / 10_000 / 1e6:.0f} MB an answer")
        assert page < 16e6
        assert grew_mib < 250, grew_mib

        # The CLI pages through everything: the server side of port 9000's connections.
        r = subprocess.run([str(TCPSCOPE), "flows", "--json", "--server", d.url, "--filter", "lport=9000"],
                           capture_output=True, text=True, timeout=300)
        assert r.returncode == 0, r.stderr
        assert len(json.loads(r.stdout)) == per, r.stderr
    finally:
        assert d.stop() == 0, d.stderr_text()


def test_thirty_two_maximal_distribution_queries_during_churn_lose_no_record(net, tmp_path):
    """32 clients asking /api/v1/distributions with selections of the most
    terms allowed (32 each) without pause while connections churn: every
    record is drained (the queries match keys outside the lock the drain
    takes, and only two run at once); one term more, or an unknown
    parameter, is a 400."""
    cfg = config_for(tmp_path, net)
    d = Daemon(tmp_path, extra_args=("--config", str(cfg)))
    stop = threading.Event()
    try:
        terms = ",".join(f"asn!={i}" for i in range(1, 33))
        query = "/api/v1/distributions?" + urllib.parse.urlencode({"metric": "fct", "by": "asn", "a": terms,
                                                                   "b": terms})
        answers, failures = [], []

        def asker():
            while not stop.is_set():
                try:
                    status, _, _ = http_get(d.url + query, timeout=30)
                    (answers if status == 200 else failures).append(status)
                except OSError as e:
                    failures.append(repr(e))

        askers = [threading.Thread(target=asker) for _ in range(32)]
        for t in askers:
            t.start()
        connections = churn_for(net, tmp_path, 15)
        stop.set()
        for t in askers:
            t.join(timeout=60)
        print(f"\n{len(answers)} maximal queries answered during {connections} connections; "
              f"{len(failures)} failed")
        assert answers and not failures, failures[:5]
        wait_flows(d, 2 * connections, 30)
        assert d.metric_value("tcpscope_records_lost_total") == 0

        status, _, body = http_get(d.url + "/api/v1/distributions?" + urllib.parse.urlencode(
            {"by": "asn", "a": terms + ",asn!=33", "b": "cc=bbr"}))
        assert status == 400 and "at most 32" in body, (status, body)
        status, _, body = http_get(d.url + "/api/v1/distributions?a=cc%3Dbbr&b=cc%3Dcubic&window=1h")
        assert status == 400 and 'unknown query parameter \\"window\\"' in body, (status, body)
        status, _, _ = http_get(d.url + "/api/v1/distributions?a=as_org%3D%ff&b=cc%3Dcubic")
        assert status == 400  # not UTF-8
    finally:
        stop.set()
        assert d.stop() == 0, d.stderr_text()


def test_smuggling_shapes_and_path_tricks_with_basic_auth(tmp_path):
    """With basic auth on, request shapes that two parsers may read
    differently are refused, and no spelling of a path reaches /metrics or
    the API without credentials: escapes are decoded before the check, and
    only the exact path /healthz is open."""
    digest = hashlib.sha256(b"s3cret").hexdigest()
    cfg = tmp_path / "auth.yaml"
    cfg.write_text(f"http:\n  basic_auth_user: prometheus\n  basic_auth_password_sha256: {digest}\n")
    d = Daemon(tmp_path, extra_args=("--config", str(cfg)))
    good = "Authorization: Basic " + base64.b64encode(b"prometheus:s3cret").decode() + "\r\n"
    try:
        cases = [
            ("GET /metrics HTTP/1.1\r\nHost: x\r\nContent-Length: 99999999999999\r\n\r\n", 413),
            ("GET /metrics HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n", 413),
            ("GET /metrics HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\nContent-Length: 5\r\n\r\n", 400),
            ("GET /metrics HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n", 400),
            ("GET /metrics HTTP/1.1\r\nHost: x\r\nTransfer-Encoding : chunked\r\n\r\n", 400),
            ("GET /metrics HTTP/1.1\r\nHost: x\r\n " + good + "\r\n", 400),  # a folded header
            ("GET http://x/metrics HTTP/1.1\r\nHost: x\r\n\r\n", 400),
            ("GET /%6detrics HTTP/1.1\r\nHost: x\r\n\r\n", 401),
            ("GET /healthz/../metrics HTTP/1.1\r\nHost: x\r\n\r\n", 401),
            ("GET /healthz/%2e%2e/metrics HTTP/1.1\r\nHost: x\r\n\r\n", 401),
            ("GET /%2e%2e/%2e%2e/etc/passwd HTTP/1.1\r\nHost: x\r\n\r\n", 401),
            ("GET /api/v1/flows%00 HTTP/1.1\r\nHost: x\r\n\r\n", 400),
            ("GET /healthz%3f HTTP/1.1\r\nHost: x\r\n\r\n", 401),  # "/healthz?" is not /healthz
            ("GET /%68ealthz HTTP/1.1\r\nHost: x\r\n\r\n", 200),  # it is /healthz
            ("GET /%6detrics HTTP/1.1\r\nHost: x\r\n" + good + "\r\n", 200),
            ("GET /healthz/../metrics HTTP/1.1\r\nHost: x\r\n" + good + "\r\n", 404),
        ]
        for request, want in cases:
            request = request.replace("Host: x\r\n", "Host: x\r\nConnection: close\r\n", 1)
            reply, took = raw_exchange(d.port, request.encode())
            status = int(reply[9:12]) if reply.startswith(b"HTTP/1.1 ") else None
            assert status == want, (request[:70], reply[:120])
            assert took < 3, (request[:70], took)
        status, _, text = http_get(d.url + "/metrics", {"Authorization": good.split(": ", 1)[1].strip()})
        assert status == 200
        assert 'tcpscope_http_rejected_total{reason="malformed"} 8' in text, text[-2000:]
    finally:
        assert d.stop() == 0, d.stderr_text()


def alias_bomb_config(path, good_config):
    """A config whose peer classes list 200,000 aliases of a list that
    expands to 10^8 prefixes (800 KB of YAML): a billion-laughs shape."""
    text = good_config + "peer_classes:\n  - name: a\n    prefixes: &a0 [" + ",".join(['"198.18.0.0/15"'] * 10) + "]\n"
    for i in range(1, 9):
        text += f"  - name: n{i}\n    prefixes: &a{i} [" + ",".join([f"*a{i - 1}"] * 10) + "]\n"
    text += "  - name: big\n    prefixes: [" + ",".join(["*a8"] * 200_000) + "]\n"
    path.write_text(text)


def test_yaml_alias_bomb_and_gzip_bomb_at_start_and_at_sighup(net, tmp_path):
    """The bombs of issue 15. A YAML alias bomb costs what its text costs
    (aliases are shared, never expanded; its 200,000 wrong entries give 50
    error lines and one "and N more"), at check-config and at a SIGHUP to a
    running daemon, which keeps its config. A prefix file of one 256 MiB line,
    250 KiB gzipped, is refused at the 64 KiB line limit, the old ASN data
    kept."""
    bomb = tmp_path / "bomb.yaml"
    alias_bomb_config(bomb, "")
    # The peak memory of check-config alone: a fresh parent's children's.
    measure = ("import resource, subprocess, sys; r = subprocess.run(sys.argv[1:]); "
               "print('maxrss_kib=%d' % resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss, file=sys.stderr); "
               "sys.exit(r.returncode)")
    t0 = time.monotonic()
    r = subprocess.run([sys.executable, "-c", measure, str(TCPSCOPE), "check-config", str(bomb)],
                       capture_output=True, text=True, timeout=60)
    took = time.monotonic() - t0
    lines = [l for l in r.stdout.splitlines() + r.stderr.splitlines() if l.startswith(str(bomb))]
    maxrss = int(r.stderr.rsplit("maxrss_kib=", 1)[1].split()[0])
    print(f"\nalias bomb: check-config {took:.2f} s, {maxrss / 1024:.0f} MiB, {len(lines)} lines")
    assert r.returncode == 2 and len(lines) == 51 and lines[-1].endswith("more errors, not listed"), lines[-3:]
    assert took < 10 and maxrss < 256 * 1024

    gz = tmp_path / "pfx2as.gz"
    with gzip.open(gz, "wb", compresslevel=9) as f:
        chunk = b"a" * (1 << 20)
        for _ in range(256):
            f.write(chunk)
    good = tmp_path / "good.tsv"
    good.write_text(f"{net.cli_v4}\t32\t64999\n")
    cfg = config_for(tmp_path, net, extra=f"asn:\n  prefix_file: {good}\n")
    base = cfg.read_text()
    d = Daemon(tmp_path, extra_args=("--config", str(cfg)))
    try:
        rss0 = proc_mem_kib(d.proc.pid)[0]
        alias_bomb_config(cfg, "")
        d.proc.send_signal(signal.SIGHUP)
        wait_for(lambda: d.metric_value("tcpscope_config_reloads_total", {"result": "failed"}) == 1, 30,
                 what="the alias bomb's reload to fail")
        cfg.write_text(base.replace(str(good), str(gz)))
        d.proc.send_signal(signal.SIGHUP)
        wait_for(lambda: d.metric_value("tcpscope_config_reloads_total", {"result": "failed"}) == 2, 30,
                 what="the gzip bomb's reload to fail")
        log = d.stderr_text()
        assert f"{gz}:1: line longer than 65536 bytes (not a prefix file?)" in log, log[-2000:]
        assert log.count(str(cfg) + ":") <= 52, log.count(str(cfg) + ":")
        rss1 = proc_mem_kib(d.proc.pid)[0]
        print(f"daemon RSS {rss0 / 1024:.0f} MiB before both bombs, {rss1 / 1024:.0f} MiB after")
        assert rss1 - rss0 < 128 * 1024
        # The old config and ASN data are still in force.
        churn_for(net, tmp_path, 0.1)
        wait_for(lambda: d.metric_value("tcpscope_flows_total", {"peer_class": "relclass", "asn": "64999"}), 10,
                 what="flows classified and enriched by the config and data from before the bombs")
    finally:
        assert d.stop() == 0, d.stderr_text()
