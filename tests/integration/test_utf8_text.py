"""Text the daemon hands out is UTF-8 (RFC 8259): a process or AS name that is
UTF-8 reads back as itself from every JSON output, each byte of an invalid
sequence as U+FFFD (a comm is 15 raw bytes from the kernel and can end
mid-character), control characters escaped. Real processes name themselves
with prctl(PR_SET_NAME) and connect over real namespaces; the AS names come
from a MaxMind DB; the text is read back with Python's json, with jq, from
/api/v1/flows, from `tcpscope flows` and through Kafka from ClickHouse; rule
names from /api/v1/policy and `tcpscope policy show`."""
import json
import subprocess
import sys
import unicodedata
import urllib.request
from pathlib import Path

import pytest

from conftest import ROOT, TCPSCOPE, Daemon, echo_server, wait_for
from test_fleet_export import clickhouse, fresh_pipeline, kafka, kafka_config  # noqa: F401  (fixtures)

MAKE_MMDB = ROOT / "tests" / "data" / "asn" / "make_test_mmdb.pl"
PORTS = {4: 7000, 6: 7001}  # an echo server per family

# A client that names itself (the kernel keeps 15 bytes of the name), connects,
# has 100 bytes echoed and closes; with a hold file it first says it is open
# and keeps the connection until the file is gone.
NAMED_CLIENT = ("import ctypes,os,socket,sys,time\n"
                "name=bytes.fromhex(sys.argv[1])\n"
                "libc=ctypes.CDLL(None,use_errno=True)\n"
                "assert libc.prctl(15,ctypes.c_char_p(name),0,0,0)==0, ctypes.get_errno()\n"
                "s=socket.create_connection((sys.argv[2],int(sys.argv[3])))\n"
                "s.sendall(b'x'*100); got=b''\n"
                "while len(got)<100: got+=s.recv(100)\n"
                "if len(sys.argv)>4:\n"
                "  open(sys.argv[4]+'.open','w').close()\n"
                "  while os.path.exists(sys.argv[4]): time.sleep(0.05)\n"
                "s.close()\n")

# Each name a client gives itself -> the comm every JSON output must show.
COMMS = {
    "clïent-ütf8".encode(): "clïent-ütf8",
    # 14 bytes and a 2-byte character: the kernel keeps its first byte.
    b"cut-name-abcde" + "é".encode(): "cut-name-abcde\ufffd",
    # 13 bytes and a 3-byte character: two of its bytes, each a U+FFFD.
    b"cut-name-abcd" + "中".encode(): "cut-name-abcd\ufffd\ufffd",
    # Controls are escaped, the text around them kept.
    b"ctl\x1b[2J\x7f-\xc3\xa9": "ctl\x1b[2J\x7f-é",
}
SERVER_ORGS = {4: (3352, "Telefónica de España"), 6: (4134, "中国电信")}
CLIENT_ORG = (9121, "Türk Telekom")
# jq: the flow lines of the named clients (the client namespace's, to the echo ports).
JQ_NAMED_FLOWS = f'select(.kind == "flow" and .netns == $ns and (.rport == {PORTS[4]} or .rport == {PORTS[6]}))'


def utf8_daemon(net, tmp, extra_config=""):
    networks = tmp / "networks.tsv"
    networks.write_text(f"{net.srv_v4}/32\t{SERVER_ORGS[4][0]}\t{SERVER_ORGS[4][1]}\n"
                        f"{net.srv_v6}/128\t{SERVER_ORGS[6][0]}\t{SERVER_ORGS[6][1]}\n"
                        f"{net.cli_v4}/32\t{CLIENT_ORG[0]}\t{CLIENT_ORG[1]}\n"
                        f"{net.cli_v6}/128\t{CLIENT_ORG[0]}\t{CLIENT_ORG[1]}\n", encoding="utf-8")
    mmdb = tmp / "asn.mmdb"
    r = subprocess.run(["perl", str(MAKE_MMDB), "--input", str(networks), "--output", str(mmdb)],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    config = tmp / "tcpscope.yaml"
    config.write_text(f"asn:\n  mmdb: {mmdb}\nsnapshot_interval_s: 1\n" + extra_config)
    home = tmp / "daemon"
    home.mkdir()
    return Daemon(home, extra_args=("--config", str(config)))


def addr(net, family):
    return net.srv_v4 if family == 4 else net.srv_v6


def start_echo_servers(net, tmp):
    for family, port in PORTS.items():
        echo_server(net, tmp, addr(net, family), port)


def run_named_clients(net, tmp):
    """Every name over IPv4 and IPv6, one connection each, run to their end."""
    start_echo_servers(net, tmp)
    for name in COMMS:
        for family in PORTS:
            r = net.ns(net.cli, sys.executable, "-c", NAMED_CLIENT, name.hex(), addr(net, family), str(PORTS[family]),
                       check=False)
            assert r.returncode == 0, r.stderr


def expected_rows():
    """(comm, as_org) of every active record the named clients make."""
    return sorted((comm, SERVER_ORGS[family][1]) for comm in COMMS.values() for family in PORTS)


def active_records(daemon, net):
    return [r for r in daemon.records(net, "cli") if r["rport"] in PORTS.values()]


@pytest.fixture
def daemon_of_names(net, tmp_path):
    d = utf8_daemon(net, tmp_path)
    try:
        yield d
    finally:
        assert d.stop() == 0, d.stderr_text()


def test_names_read_back_exactly_from_the_flow_log(daemon_of_names, net, tmp_path):
    daemon = daemon_of_names
    run_named_clients(net, tmp_path)
    want = expected_rows()
    wait_for(lambda: len(active_records(daemon, net)) >= len(want), 20, what="the named clients' records")
    # Python's json (conftest reads the log with json.loads).
    active = active_records(daemon, net)
    assert sorted((r["comm"], r["as_org"]) for r in active) == want
    passive = [r for r in daemon.wait_records(net, 2 * len(want)) if r["dir"] == "passive"]
    assert {r["as_org"] for r in passive} == {CLIENT_ORG[1]}
    assert {r["asn"] for r in passive} == {CLIENT_ORG[0]}

    # The lines carry the UTF-8 itself, the controls escaped; no byte escaped alone.
    ns = str(net.netns_ids["cli"]).encode()
    lines = [l for l in daemon.flow_log.read_bytes().splitlines() if b'"netns":' + ns + b"," in l]
    assert lines
    text = b"\n".join(lines)
    for comm in COMMS.values():
        assert comm.encode().replace(b"\x1b", b"\\u001b").replace(b"\x7f", b"\\u007f") in text
    assert "Telefónica de España".encode() in text and "中国电信".encode() in text
    assert b"\\u00c3" not in text and b"\\u00e4" not in text

    # jq: the same lines, comm and as_org as JSON of their own and as raw text.
    def jq(program):
        r = subprocess.run(["jq", "-r", "--argjson", "ns", ns.decode(), JQ_NAMED_FLOWS + " | " + program,
                            str(daemon.flow_log)], capture_output=True)
        assert r.returncode == 0, r.stderr
        return r.stdout.decode("utf-8").splitlines()

    assert sorted(tuple(json.loads(l)) for l in jq("[.comm, .as_org] | @json")) == want
    assert sorted(jq(".comm")) == sorted(c for c in COMMS.values() for _ in PORTS)


def display_width(s):
    return sum(2 if unicodedata.east_asian_width(c) in "WF" else 1 for c in s)


def test_names_from_the_api_and_in_the_flows_table(daemon_of_names, net, tmp_path):
    daemon = daemon_of_names
    start_echo_servers(net, tmp_path)
    holds, clients = [], {}
    try:
        for i, name in enumerate(COMMS):
            for family in PORTS:
                hold = tmp_path / f"hold-{i}-{family}"
                hold.touch()
                holds.append(hold)
                p = net.spawn(net.cli, sys.executable, "-c", NAMED_CLIENT, name.hex(), addr(net, family),
                              str(PORTS[family]), str(hold))
                clients[p.pid] = (COMMS[name], SERVER_ORGS[family][1])
        wait_for(lambda: all(Path(str(h) + ".open").exists() for h in holds), 20, what="the named clients open")
        ns = net.netns_ids["cli"]

        def listed():
            with urllib.request.urlopen(daemon.url + "/api/v1/flows", timeout=10) as resp:
                body = resp.read()
            flows = [f for f in json.loads(body) if f["netns"] == ns and f["pid"] in clients]
            return (body, flows) if len(flows) == len(clients) else None

        body, flows = wait_for(listed, 20, what="the named clients' open flows in /api/v1/flows")
        assert {f["pid"]: (f["comm"], f["as_org"]) for f in flows} == clients
        assert b"\\u00" not in body.replace(b"\\u001b", b"").replace(b"\\u007f", b"")

        r = subprocess.run([str(TCPSCOPE), "flows", "--server", daemon.url, "--filter", f"netns={ns}", "--json"],
                           capture_output=True, timeout=60)
        assert r.returncode == 0, r.stderr
        assert {f["pid"]: (f["comm"], f["as_org"]) for f in json.loads(r.stdout)} == clients

        r = subprocess.run([str(TCPSCOPE), "flows", "--server", daemon.url, "--filter", f"netns={ns}"],
                           capture_output=True, timeout=60)
        assert r.returncode == 0, r.stderr
        table = r.stdout.decode("utf-8")
        lines = table.splitlines()
        header, rows = lines[0], lines[1:1 + len(clients)]
        # Names as they are, controls shown as '?', long names cut by characters.
        for pid, (comm, org) in clients.items():
            shown = comm.replace("\x1b", "?").replace("\x7f", "?") + f"/{pid}"
            assert any(row.endswith(shown) for row in rows), (shown, table)
        assert "\x1b" not in table and "\x7f" not in table
        assert "Telefónica de Esp~" in table and "中国电信" in table, table
        # Columns line up on a terminal: PROCESS starts in the same column in every row.
        column = header.index("PROCESS")
        for row in rows:
            process = row.rsplit("  ", 1)[1]
            assert display_width(row) - display_width(process) == column, (row, table)
    finally:
        for h in holds:
            h.unlink(missing_ok=True)


def test_names_through_kafka_into_clickhouse(net, tmp_path, kafka, clickhouse):
    topics = fresh_pipeline(kafka, clickhouse, partitions=1)
    daemon = utf8_daemon(net, tmp_path, kafka_config(kafka, topics))
    try:
        run_named_clients(net, tmp_path)
        want = expected_rows()
        wait_for(lambda: len(active_records(daemon, net)) >= len(want), 20, what="the named clients' records")
        ns = net.netns_ids["cli"]
        where = f"FROM tcpscope.flows WHERE netns = {ns} AND rport IN {tuple(PORTS.values())}"

        def stored():
            return int(clickhouse.query(f"SELECT count() {where}").strip()) >= len(want)

        wait_for(stored, 120, what="the named clients' records in ClickHouse")
        got = sorted(tuple(json.loads(l).values()) for l in clickhouse.query(
            f"SELECT comm, as_org {where} FORMAT JSONEachRow").splitlines() if l)
        assert got == want
        # The bytes ClickHouse holds are the UTF-8 of the text.
        hex_rows = clickhouse.query(f"SELECT hex(comm) {where} FORMAT TSV").split()
        assert sorted(bytes.fromhex(h).decode("utf-8") for h in hex_rows) == sorted(c for c, _ in want)
        got = clickhouse.query(f"SELECT DISTINCT as_org FROM tcpscope.flows WHERE netns = {net.netns_ids['srv']} "
                               "FORMAT TSV").split("\n")
        assert [g for g in got if g] == [CLIENT_ORG[1]]
    finally:
        assert daemon.stop() == 0, daemon.stderr_text()


# Rule names are the operator's text, UTF-8 as any; the config refuses control
# characters in them but takes a byte that is not UTF-8.
RULE_NAMES = ["règle-中", "Telefónica-cubic", "bad\ufffdname"]
POLICY_CONFIG = """
cc_policy:
  rules:
    - name: "règle-中"
      match: { peer_class: client }
      cc: cubic
    - name: "Telefónica-cubic"
      match: { lports: [9] }
      cc: cubic
    - name: "bad\xffname"
      match: { lports: [10] }
      cc: cubic
""".encode("utf-8").replace("\xff".encode("utf-8"), b"\xff")  # a lone 0xff byte, not U+00FF


def test_rule_names_from_the_api_and_in_policy_show(tmp_path, test_cgroup):
    home = tmp_path / "daemon"
    home.mkdir()
    config = home / "tcpscope.yaml"
    config.write_bytes(POLICY_CONFIG)
    d = Daemon(home, extra_args=("--config", str(config), "--cgroup", str(test_cgroup)))
    try:
        with urllib.request.urlopen(d.url + "/api/v1/policy", timeout=10) as resp:
            body = resp.read()
        assert [r["name"] for r in json.loads(body)["rules"]] == RULE_NAMES
        assert all(name.encode() in body for name in RULE_NAMES), body

        r = subprocess.run([str(TCPSCOPE), "policy", "show", "--server", d.url, "--json"], capture_output=True,
                           timeout=60)
        assert r.returncode == 0, r.stderr
        assert [rule["name"] for rule in json.loads(r.stdout)["rules"]] == RULE_NAMES

        r = subprocess.run([str(TCPSCOPE), "policy", "show", "--server", d.url], capture_output=True, timeout=60)
        assert r.returncode == 0, r.stderr
        table = r.stdout.decode("utf-8")
        lines = table.splitlines()
        header = next(l for l in lines if "MATCH" in l)
        matches = ["peer_class=client", "lports=9 ", "lports=10"]
        rows = [l for l in lines if any(m in l for m in matches)]
        assert [name in row for name, row in zip(RULE_NAMES, rows)] == [True] * 3, table
        # MATCH starts in the same terminal column on the header and every rule's line.
        for row, match in zip(rows, matches):
            assert display_width(row[:row.index(match)]) == header.index("MATCH"), table
    finally:
        assert d.stop() == 0, d.stderr_text()
