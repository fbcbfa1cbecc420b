"""docs/operations.md, the operator's guide, run as written: its marked
command blocks (`<!-- guide: NAME -->` before a ```sh block) in a container
booted with systemd (test_systemd_boot.Container), in the order an operator
follows them, and the output it shows (`<!-- guide: NAME output -->`) held
to what they print: each shown line, in order, matches a printed line, where
runs of digits may differ and `…` stands for any text.

What the guide leaves to the operator is done here with the same effect:
the downloaded ASN file is a small one written in its place.
"""
import base64
import gzip
import json
import os
import re
import shutil
import socket
import subprocess
from pathlib import Path

import pytest

from test_deb import BUILD, deb, free_port, project_version  # noqa: F401 (deb: fixture)
from test_systemd_boot import container  # noqa: F401 (fixture)

ROOT = Path(__file__).resolve().parents[2]
GUIDE = ROOT / "docs/operations.md"
CONFIG = "/etc/tcpscope/tcpscope.yaml"
# What the guide's ASN step installs: an address the test then talks to.
ASN_FILE = "routeviews-rv2-20261101-1200.pfx2as.gz"
PEER, PEER_ASN = "198.18.0.1", 64512


def guide_blocks(text):
    """{name: body} of every marked fenced block."""
    blocks = {}
    for m in re.finditer(r"<!-- guide: ([\w.\- ]+) -->\n```[a-z]*\n(.*?)```", text, re.S):
        name = m.group(1).strip()
        assert name not in blocks, f"docs/operations.md marks two blocks '{name}'"
        blocks[name] = m.group(2)
    return blocks


def shown_line_pattern(line):
    parts = re.split(r"(…|\d+)", line.strip())
    return re.compile("".join(".*" if p == "…" else r"\d+" if p.isdigit() else re.escape(p) for p in parts))


def assert_shows(shown, printed, what):
    """Each shown line matches a printed line, in order."""
    lines = [l.strip() for l in printed.splitlines()]
    at = 0
    for want in (l for l in shown.splitlines() if l.strip()):
        pattern = shown_line_pattern(want)
        while at < len(lines) and not pattern.fullmatch(lines[at]):
            at += 1
        assert at < len(lines), f"the guide's '{what}' shows\n  {want.strip()}\nbut it printed:\n{printed}"
        at += 1


def test_guide_blocks_are_found():
    """The parser finds what the test below runs (a renamed or unmarked block
    would otherwise be skipped without a word)."""
    blocks = guide_blocks(GUIDE.read_text())
    for name in ("install", "reload", "asn", "before", "experiment", "rollback",
                 "troubleshoot", "uninstall"):
        assert name in blocks, f"docs/operations.md has no block marked '{name}'"
    assert f"./tcpscope_{project_version()}_amd64.deb" in blocks["install"], \
        "the install block names a package of another version"


def test_the_operators_guide_as_written(container):
    c = container
    blocks = guide_blocks(GUIDE.read_text())

    def reloads_ok():
        m = re.search(r'^tcpscope_config_reloads_total\{result="ok"\} (\d+)', c.shell(
            "curl -fsS http://127.0.0.1:9810/metrics").stdout, re.M)
        return int(m.group(1)) if m else 0

    def step(name, cwd="/root"):
        reloads = reloads_ok() if "systemctl reload" in blocks[name] else None
        r = c.shell(f"cd {cwd} && set -e\n{blocks[name]}", check=False)
        assert r.returncode == 0, f"the guide's '{name}' failed ({r.returncode}):\n{r.stdout}\n{r.stderr}\n{c.journal()}"
        if f"{name} output" in blocks:
            assert_shows(blocks[f"{name} output"], r.stdout, name)
        # The guide waits 2 s for a reload; it must have been done and good
        # by then, or what the step showed was the reload before.
        if reloads is not None:
            assert reloads_ok() == reloads + 1, f"the guide's '{name}' reload did not succeed in time:\n{c.journal()}"
        return r.stdout

    c.run("dpkg", "-P", "tcpscope")  # in case the machine has it installed
    c.run("cp", "/debs/tcpscope_1.deb", f"/root/tcpscope_{project_version()}_amd64.deb")
    step("install")
    step("reload")

    # ASN data, in place of the download: the guide's commands install it,
    # a reload loads it, and a flow to PEER is counted under its ASN (the
    # daemon, as the user tcpscope, read the file).
    pfx = gzip.compress(f"198.18.0.0\t15\t{PEER_ASN}\n203.0.113.0\t24\t64513\n".encode())
    c.shell(f"echo {base64.b64encode(pfx).decode()} | base64 -d > /root/{ASN_FILE}")
    step("asn")
    assert c.shell(f"stat -c %U:%G:%a /etc/tcpscope/pfx2as.tsv").stdout.strip() == "root:tcpscope:640"
    step("reload")
    c.shell(f"ip link set lo up && ip addr add {PEER}/32 dev lo")
    c.shell(f"(python3 -m http.server --bind {PEER} 8080 >/dev/null 2>&1 &) ; "
            f"curl -fsS --retry 10 --retry-delay 1 --retry-connrefused -o /dev/null http://{PEER}:8080/")
    metrics = c.shell("for i in $(seq 1 40); do m=$(curl -fsS http://127.0.0.1:9810/metrics); "
                      f"echo \"$m\" | grep -q 'tcpscope_flows_total{{asn=\"{PEER_ASN}\"' && break; sleep 0.5; done; "
                      "echo \"$m\"").stdout
    assert f'tcpscope_flows_total{{asn="{PEER_ASN}"' in metrics, \
        f"no flow counted under AS{PEER_ASN} after the guide's ASN step:\n{c.journal()}"

    # The experiment: a copy to roll back to, the rule where the guide says.
    step("before")
    step("experiment")
    assert "name: canary-bbr" in c.shell(f"cat {CONFIG}").stdout
    step("rollback")
    step("troubleshoot")
    step("uninstall")
    assert c.run("dpkg-query", "-W", "-f=${Status}", "tcpscope", check=False).stdout.startswith("deinstall"), \
        "the package is still installed after the guide's uninstall"


def troubleshooting_lines(text):
    """The log lines of the guide's troubleshooting table (its second column)."""
    table = text[text.index("The daemon logs one line per problem"):]
    spans = []
    for row in table.splitlines():
        cells = row.split(" | ")
        if row.startswith("|") and len(cells) >= 4:
            spans += re.findall(r"`([^`]+)`", cells[1])
    return spans


def shown(spans, phrase, path=None, real_path=None):
    [line] = [s for s in spans if phrase in s]
    return line.replace(path, real_path) if path else line


def test_the_troubleshooting_tables_log_lines_are_the_daemons(tmp_path):
    """Each failure the guide's table names, made for real with the built
    daemon: the line the table shows is the line it prints."""
    if os.geteuid() != 0:
        pytest.skip("loads BPF programs: needs root")
    binary = BUILD / "tcpscope"
    spans = troubleshooting_lines(GUIDE.read_text())

    def printed(*args, config=None, user=None):
        cmd = [str(binary), *args]
        if user:
            cmd = ["setpriv", "--reuid", "nobody", "--regid", "nogroup", "--clear-groups",
                   "--inh-caps", "+bpf,+perfmon", "--ambient-caps", "+bpf,+perfmon", *cmd]
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL, cwd="/")
        assert r.returncode != 0, f"{' '.join(args)} did not fail:\n{r.stderr}"
        return r.stderr

    def config(name, text):
        path = tmp_path / name
        path.write_text(text)
        path.chmod(0o644)
        return str(path)

    quiet = config("quiet.yaml", "snapshot_interval_s: 0\n")
    # Without CAP_NET_ADMIN (on the embedded config: nobody cannot read tmp_path).
    assert_shows(shown(spans, "Operation not permitted"),
                 printed("run", "--listen", f"127.0.0.1:{free_port()}", user="nobody"),
                 "troubleshooting: no CAP_NET_ADMIN")
    # The port taken.
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        port = s.getsockname()[1]
        assert_shows(shown(spans, "Address already in use").replace("9810", str(port)),
                     printed("run", "--config", quiet, "--listen", f"127.0.0.1:{port}"),
                     "troubleshooting: the port taken")
    # The ASN file missing.
    missing = str(tmp_path / "pfx2as.tsv")
    assert_shows(shown(spans, "cannot open", "/etc/tcpscope/pfx2as.tsv", missing),
                 printed("run", "--config", config("asn.yaml", f"asn:\n  prefix_file: {missing}\n"),
                         "--listen", f"127.0.0.1:{free_port()}"),
                 "troubleshooting: no ASN file")
    # A congestion control the kernel lacks: check-config, line 7.
    bad_cc = config("cc.yaml", "listen: 127.0.0.1:9810\n\ncc_policy:\n  rules:\n    - name: x\n"
                               "      match: { peer_class: client }\n      cc: nosuchcc\n")
    assert_shows(shown(spans, "nosuchcc", "/etc/tcpscope/tcpscope.yaml", bad_cc), printed("check-config", bad_cc),
                 "troubleshooting: an unknown congestion control")
    # A rule on ASNs without ASN data: check-config, then the daemon.
    asn_rule = config("rule.yaml", "cc_policy:\n  rules:\n    - name: x\n      match: { asns: [64512] }\n"
                                   "      cc: bbr\n")
    line = shown(spans, "no ASN data is configured")
    assert_shows(line.replace("tcpscope: ", asn_rule + ": ", 1), printed("check-config", asn_rule),
                 "troubleshooting: a rule on ASNs, check-config")
    assert_shows(line, printed("run", "--config", asn_rule, "--listen", f"127.0.0.1:{free_port()}"),
                 "troubleshooting: a rule on ASNs, the daemon")


def test_the_guides_promql_is_valid(tmp_path):
    """The guide's PromQL (the second column of its table of questions) parses:
    promtool checks it as recording rules. (That the metrics it names exist is
    tests/integration/test_manual.py's.)"""
    if not shutil.which("promtool"):
        pytest.skip("promtool missing (package prometheus; scripts/dev.sh test installs it)")
    text = GUIDE.read_text()
    table = text[text.index("| question | PromQL |"):text.index("The package ships recording rules")]
    exprs = [e for row in table.splitlines()[2:] if row.startswith("|")
             for e in re.findall(r"`([^`]+)`", row.split(" | ", 1)[1])]
    assert len(exprs) >= 5, f"the guide's PromQL table: {exprs}"
    rules = "groups:\n  - name: guide\n    rules:\n" + "".join(
        f"      - record: guide:expr{i}\n        expr: {json.dumps(e)}\n" for i, e in enumerate(exprs))
    (tmp_path / "guide.yml").write_text(rules)
    r = subprocess.run(["promtool", "check", "rules", str(tmp_path / "guide.yml")], capture_output=True, text=True)
    assert r.returncode == 0, f"promtool refuses the guide's PromQL:\n{r.stdout}{r.stderr}"


def test_the_guides_alert_table_is_the_shipped_alerts():
    """Every alert the package ships is in the guide's table, with its wait
    (`for:`) and window, and the table names no other."""
    # The file's own layout (no YAML library on a fresh machine): each rule
    # opens with "- alert: NAME", then its expr: and for: lines.
    rules = []
    for line in (ROOT / "packaging/prometheus/tcpscope-alerts.yml").read_text().splitlines():
        if m := re.match(r"\s+- alert: (\w+)$", line):
            rules.append({"alert": m.group(1), "expr": ""})
        elif rules and (m := re.match(r"\s+(expr|for): (.*)$", line)):
            rules[-1][m.group(1)] = m.group(2)
    assert len(rules) >= 7, rules
    text = GUIDE.read_text()
    table = text[text.index("| alert | fires when | what to do |"):]
    table = table[:table.index("\n\n")]
    rows = {m.group(1): row for row in table.splitlines() for m in [re.match(r"\| `(\w+)` \|", row)] if m}
    assert set(rows) == {r["alert"] for r in rules}, "the guide's alerts differ from the shipped ones"
    for r in rules:
        for minutes in re.findall(r"(\d+)m\b", (r.get("for", "") + " " + r["expr"])):
            assert f"{minutes} min" in rows[r["alert"]], f"{r['alert']}: the guide does not say {minutes} min"
