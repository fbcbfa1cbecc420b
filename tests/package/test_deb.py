"""The Debian package, end to end: build it from the build tree, lint it,
install it with apt-get, run the installed daemon the way its unit does,
scrape it, upgrade over an edited conffile, remove, purge, and check that
nothing is left.

Every test that installs the package purges it again, even when it fails.
Where systemd is PID 1 the daemon runs as the service; elsewhere (containers,
CI sandboxes) unit_sandbox.py runs the unit's ExecStart with the unit's user,
capabilities and file-system confinement. The maintainer scripts' systemd
path is tested in test_maintainer_scripts.py, the package under a booted
systemd in test_systemd_boot.py; the other modules import the `deb` fixture from here.
"""
import gzip
import json
import os
import re
import shutil
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from unit_sandbox import Unit, proc_status, sandbox_command

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests"))
from testlib import wait_for  # noqa: E402  (shared with bench/ and the other tests)
BUILD = Path(os.environ.get("TCPSCOPE_BUILD", ROOT / "build"))
UNIT_FILE = ROOT / "packaging/systemd/tcpscope.service"
CONFFILE = Path("/etc/tcpscope/tcpscope.yaml")
SYSTEMD = Path("/run/systemd/system").is_dir()  # what the maintainer scripts look at
APT_ENV = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
# Paths the package owns, may create at run time, or must remove on purge.
LEFTOVER_ROOTS = ("/etc", "/lib/systemd", "/usr/bin", "/usr/share", "/usr/lib", "/var/lib",
                  "/var/log", "/run")
LEFTOVER_IGNORE = ("/var/lib/apt/", "/var/cache/", "/var/log/apt/", "/run/netns/")


def sh(*cmd, check=True, **kw):
    r = subprocess.run(cmd, capture_output=True, text=True, **kw)
    if check and r.returncode != 0:
        raise AssertionError(f"{' '.join(map(str, cmd))} exited {r.returncode}:\n{r.stdout}\n{r.stderr}")
    return r


def apt_get(*args):
    # stdin closed: a conffile prompt would fail the command instead of hanging.
    return sh("apt-get", "-y", "-q", *args, env=APT_ENV, stdin=subprocess.DEVNULL)


def apt_get_reaping(daemon, *args):
    """apt-get while reaping `daemon` if it is our child: the prerm waits for
    the stopped daemon to disappear, and an unreaped child never does."""
    p = subprocess.Popen(["apt-get", "-y", "-q", *args], env=APT_ENV, stdin=subprocess.DEVNULL,
                         stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    deadline = time.monotonic() + 120
    while p.poll() is None and time.monotonic() < deadline:
        if daemon.proc:
            daemon.proc.poll()
        time.sleep(0.05)
    if p.poll() is None:
        p.kill()
    out = p.communicate()[0]
    assert p.returncode == 0, f"apt-get {' '.join(args)} exited {p.returncode}:\n{out}"
    return out


def project_version():
    m = re.search(r"project\(tcpscope VERSION ([0-9.]+)", (ROOT / "CMakeLists.txt").read_text())
    assert m, "no project(tcpscope VERSION ...) in CMakeLists.txt"
    return m.group(1)


def package_status():
    r = sh("dpkg-query", "-W", "-f=${Status}", "tcpscope", check=False)
    return r.stdout.strip() if r.returncode == 0 else "not-installed"


def purge_package():
    if package_status() not in ("not-installed", "unknown ok not-installed"):
        apt_get("purge", "tcpscope")


def leftovers():
    """Every path under LEFTOVER_ROOTS whose name mentions tcpscope."""
    found = set()
    for root in LEFTOVER_ROOTS:
        for dirpath, dirnames, filenames in os.walk(root):
            if dirpath.startswith(("/proc", "/sys")):
                dirnames[:] = []
                continue
            for name in dirnames + filenames:
                p = os.path.join(dirpath, name)
                if "tcpscope" in name and not p.startswith(LEFTOVER_IGNORE):
                    found.add(p)
    return found


DOC_DIR = Path("/usr/share/doc/tcpscope")
# The shipped config and unit, as paths in the package (and, installed, under /).
POINTING_FILES = ("etc/tcpscope/tcpscope.yaml", "lib/systemd/system/tcpscope.service")


def doc_pointers(text):
    """The (path, heading or None) pairs a shipped text points at under
    /usr/share/doc/tcpscope/: the path, and the quoted heading right after
    it (`.../fleet.md "Fleet: Kafka, ClickHouse, Prometheus"`), read across a
    comment's line breaks."""
    flat = re.sub(r"\n\s*#\s*", " ", text)  # one comment paragraph, one line
    pointers = []
    for m in re.finditer(r"(%s/[^\s\"'),;]+)(?:,?\s*\"([^\"]+)\")?" % re.escape(str(DOC_DIR)), flat):
        pointers.append((m.group(1).rstrip("."), m.group(2)))
    return pointers


def markdown_headings(text):
    return {m.group(1).strip() for m in re.finditer(r"^#{1,6}\s+(.+?)\s*#*$", text, re.M)}


def check_doc_pointers(pointing_texts, root):
    """Every /usr/share/doc/tcpscope/ path the texts name is a file under
    root (the extracted package, or / once installed), and every heading
    quoted with it is one of that page's headings. Returns the pointers
    checked."""
    checked = []
    for name, text in pointing_texts.items():
        # A pointer into the source tree's docs/ or bench/ is one the
        # package's reader cannot open: it must name the installed path.
        relative = [m.group(0) for m in re.finditer(r"(?<![\w/.])(?:docs|bench)/[\w.-]+\.md", text)]
        assert not relative, f"{name} points into the source tree, not {DOC_DIR}: {relative}"
        for path, heading in doc_pointers(text):
            target = root / path.lstrip("/")
            assert target.is_file(), f"{name} points at {path}, which the package does not hold"
            if heading is not None and target.suffix == ".md":
                headings = markdown_headings(target.read_text())
                assert heading in headings, \
                    f"{name} points at {path} \"{heading}\", not a heading there; its headings: {sorted(headings)}"
            checked.append((name, path, heading))
    return checked


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def http_get(url, timeout=5):
    with urllib.request.urlopen(url, timeout=timeout) as r:
        return r.status, r.read().decode()


def bpf_ids_held_by(pid):
    """BPF program and link ids behind the process's file descriptors."""
    progs, links = set(), set()
    for fdinfo in Path(f"/proc/{pid}/fdinfo").iterdir():
        try:
            text = fdinfo.read_text()
        except OSError:
            continue
        for key, bucket in (("prog_id", progs), ("link_id", links)):
            m = re.search(rf"^{key}:\s*(\d+)", text, re.M)
            if m:
                bucket.add(int(m.group(1)))
    return progs, links


def bpf_ids_in_kernel():
    progs = json.loads(sh("bpftool", "--json", "prog", "show").stdout or "[]")
    links = json.loads(sh("bpftool", "--json", "link", "show").stdout or "[]")
    return {p["id"] for p in progs}, {l["id"] for l in links}


def edit_conffile(port, flow_log="/var/log/tcpscope/flows.ndjson"):
    """What an operator does: another listen port, the flow log switched on."""
    text = CONFFILE.read_text()
    edited, n1 = re.subn(r"(?m)^listen: .*$", f"listen: 127.0.0.1:{port}", text)
    edited, n2 = re.subn(r"(?m)^# flow_log: .*$", f"flow_log: {flow_log}", edited)
    assert n1 == 1 and n2 == 1, "shipped config lost its 'listen:' or '# flow_log:' line"
    CONFFILE.write_text(edited)
    return edited


class InstalledDaemon:
    """The installed daemon, started as the service (systemd) or as the
    unit's ExecStart in unit_sandbox (no systemd)."""

    def __init__(self, port):
        self.port = port
        self.url = f"http://127.0.0.1:{port}"
        self.proc = None
        self.stderr = None
        if SYSTEMD:
            sh("systemctl", "restart", "tcpscope.service")
            self.pid = int(sh("systemctl", "show", "-P", "MainPID", "tcpscope.service").stdout)
        else:
            self.stderr = tempfile.NamedTemporaryFile("w+", prefix="daemon-stderr-", suffix=".txt")
            self.proc = subprocess.Popen(sandbox_command(Unit("/lib/systemd/system/tcpscope.service")),
                                         stdout=subprocess.DEVNULL, stderr=self.stderr)
            self.pid = self.proc.pid
        wait_for(self.healthy, 30, lambda: f"{self.url}/healthz to answer 200 ({self.log()})")

    def healthy(self):
        if self.proc and self.proc.poll() is not None:
            raise AssertionError(f"daemon exited {self.proc.returncode}: {self.log()}")
        try:
            return http_get(self.url + "/healthz")[0] == 200
        except (urllib.error.URLError, ConnectionError):
            return False

    def log(self):
        if self.stderr:
            self.stderr.seek(0)
            return self.stderr.read().strip()
        return sh("journalctl", "-u", "tcpscope.service", "-n", "20", "--no-pager", check=False).stdout

    def running(self):
        return Path(f"/proc/{self.pid}").exists() and (not self.proc or self.proc.poll() is None)

    def kill(self):
        if self.proc and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        if self.stderr:
            self.stderr.close()
            self.stderr = None


def embedded_bpf_objects(binary):
    """The BPF ELF objects (64-bit, little-endian, e_machine EM_BPF) that
    `binary` carries in its data, each cut at the end of its section
    header table (where clang puts it, after every section)."""
    objects = []
    start = binary.find(b"\x7fELF", 1)
    while start != -1:
        hdr = binary[start:start + 64]
        if len(hdr) == 64 and hdr[4:6] == b"\x02\x01":  # ELFCLASS64, ELFDATA2LSB
            (e_type, e_machine, _, _, _, e_shoff, _, _, _, _, e_shentsize, e_shnum, _) = \
                struct.unpack_from("<HHIQQQIHHHHHH", hdr, 16)
            if e_machine == 247 and e_type == 1:  # EM_BPF, ET_REL
                objects.append(binary[start:start + e_shoff + e_shnum * e_shentsize])
        start = binary.find(b"\x7fELF", start + 1)
    return objects


def bpf_programs_in_sources():
    """{program name: section} of every program in bpf/*.bpf.c."""
    programs = {}
    for src in (ROOT / "bpf").glob("*.bpf.c"):
        for m in re.finditer(r'^SEC\("([^".][^"]*)"\)\s*\n\s*int\s+(?:BPF_PROG\(\s*)?(\w+)',
                             src.read_text(), re.M):
            programs[m.group(2)] = m.group(1)
    assert programs, "no SEC(\"...\") programs found in bpf/*.bpf.c"
    return programs


_BUILT_DEB = []


@pytest.fixture(scope="session")
def deb():
    """The package, built from BUILD once per session. (Imported by the other
    test modules here: not in a conftest.py, whose module name would clash
    with tests/integration's when both directories are collected together.)"""
    if _BUILT_DEB:
        return _BUILT_DEB[0]
    if os.geteuid() != 0:
        pytest.skip("installs a package: needs root")
    for tool in ("apt-get", "dpkg-deb", "lintian", "cmake", "bpftool", "setpriv", "unshare", "strace",
                 "logrotate", "systemd-analyze", "promtool"):
        assert shutil.which(tool), f"{tool} missing (scripts/dev.sh installs it)"
    assert (BUILD / "CMakeCache.txt").exists(), f"configure {BUILD} first"
    sh("cmake", "--build", str(BUILD), "--target", "deb")
    arch = sh("dpkg", "--print-architecture").stdout.strip()
    path = BUILD / f"tcpscope_{project_version()}_{arch}.deb"
    assert path.exists(), f"the deb target did not write {path}"
    _BUILT_DEB.append(path)
    return path


def system_user_exists():
    return sh("getent", "passwd", "tcpscope", check=False).returncode == 0


def delete_system_user():
    """What the package leaves on purge (Debian keeps system users), undone
    by the tests so that the machine ends as it was."""
    if system_user_exists():
        sh("deluser", "--system", "--quiet", "tcpscope")
    if sh("getent", "group", "tcpscope", check=False).returncode == 0:
        sh("delgroup", "--system", "--quiet", "tcpscope")


@pytest.fixture
def installed(deb):
    """The package freshly installed with apt-get; purged afterwards, whatever
    happens, and the system user (which purge keeps) deleted if the test made it."""
    purge_package()
    user_before = system_user_exists()
    before = leftovers()
    daemons = []
    try:
        apt_get("install", str(deb))
        assert package_status() == "install ok installed"
        yield {"before": before, "daemons": daemons}
    finally:
        for d in daemons:
            d.kill()
        purge_package()
        if not user_before:
            delete_system_user()


def test_lintian_has_no_errors_or_warnings(deb):
    r = sh("lintian", "--display-info", "--pedantic", str(deb), check=False)
    tags = [l for l in r.stdout.splitlines() if re.match(r"^[EWIPX]: ", l)]
    print("\n".join(tags) or "lintian: no tags")
    bad = [t for t in tags if t.startswith(("E:", "W:"))]
    assert not bad, "lintian errors/warnings (fix them, or override with a reason in " \
                    "packaging/cpack/lintian-overrides):\n" + "\n".join(bad)
    assert r.returncode == 0, f"lintian exited {r.returncode}: {r.stderr}"


def test_dependencies_come_from_dpkg_shlibdeps(deb, tmp_path):
    """Depends is adduser (the postinst's) plus exactly what dpkg-shlibdeps
    computes for the shipped binary."""
    sh("dpkg-deb", "-x", str(deb), str(tmp_path / "root"))
    (tmp_path / "debian").mkdir()
    (tmp_path / "debian/control").write_text("Source: tcpscope\n\nPackage: tcpscope\nArchitecture: any\n")
    out = sh("dpkg-shlibdeps", "-O", "root/usr/bin/tcpscope", cwd=tmp_path).stdout
    m = re.search(r"^shlibs:Depends=(.*)$", out, re.M)
    assert m, f"dpkg-shlibdeps printed no shlibs:Depends: {out}"
    expected = {d.strip() for d in m.group(1).split(",")} | {"adduser"}
    depends = sh("dpkg-deb", "-f", str(deb), "Depends").stdout.strip()
    assert {d.strip() for d in depends.split(",")} == expected
    assert any(d.startswith("libbpf1") for d in expected)


def test_package_contents(deb, tmp_path):
    sh("dpkg-deb", "-x", str(deb), str(tmp_path / "root"))
    sh("dpkg-deb", "-e", str(deb), str(tmp_path / "DEBIAN"))
    root = tmp_path / "root"
    assert (tmp_path / "DEBIAN/conffiles").read_text().split() == [str(CONFFILE), "/etc/logrotate.d/tcpscope"]
    # The shipped config is the embedded default, byte for byte.
    assert (root / "etc/tcpscope/tcpscope.yaml").read_bytes() == (ROOT / "src/config/default_config.yaml").read_bytes()
    assert (root / "lib/systemd/system/tcpscope.service").read_bytes() == UNIT_FILE.read_bytes()
    # The BPF objects are inside the binary (skeleton), not beside it: BPF
    # ELF objects embedded in usr/bin/tcpscope that hold, between them, every
    # program of bpf/*.bpf.c under its name and in its section.
    assert not list(root.rglob("*.bpf.o")) and not list(root.rglob("*.o"))
    embedded = embedded_bpf_objects((root / "usr/bin/tcpscope").read_bytes())
    assert embedded, "no embedded BPF ELF object (e_machine EM_BPF) in usr/bin/tcpscope"
    programs = bpf_programs_in_sources()
    assert {"on_state_change", "cc_policy", "watch_setsockopt", "guard_sysctl"} <= programs.keys()
    for name, section in sorted(programs.items()):
        assert any(name.encode() + b"\0" in obj and section.encode() + b"\0" in obj for obj in embedded), \
            f"BPF program {name} (SEC(\"{section}\")) is not in the objects embedded in usr/bin/tcpscope"
    # Dashboards, rules, the ClickHouse tables and Protobuf schema: whatever
    # the repository has, all of it; the
    # promtool tests of the rules (*.test.yml) stay out, since a Prometheus
    # loading /usr/share/tcpscope/prometheus/*.yml as rule files would reject them.
    for pattern, dest in (("grafana/*.json", "grafana"), ("prometheus/*.yml", "prometheus"),
                          ("clickhouse/*", "clickhouse")):
        for src in (ROOT / "packaging").glob(pattern):
            shipped = root / "usr/share/tcpscope" / dest / src.name
            if src.name.endswith(".test.yml"):
                assert not shipped.exists(), f"{src.name} (a promtool test file) is shipped with the rules"
            else:
                assert shipped.exists() and shipped.read_bytes() == src.read_bytes(), f"{src} not shipped"
    assert (root / "usr/share/tcpscope/clickhouse/tcpscope.proto").exists()
    rules = sorted((root / "usr/share/tcpscope/prometheus").glob("*.yml"))
    assert rules, "no Prometheus rules shipped"
    for f in rules:
        r = sh("promtool", "check", "rules", str(f), check=False)
        assert r.returncode == 0, f"promtool check rules {f.name}:\n{r.stdout}{r.stderr}"
    # The man page covers every command of SPEC.md, and man has nothing to say about it.
    man = gzip.decompress((root / "usr/share/man/man8/tcpscope.8.gz").read_bytes()).decode()
    for cmd in ("run", r"check\-config", "flows", "compare", "policy show", "version"):
        assert re.search(rf"^\.SS \"?{re.escape(cmd)}\b", man, re.M), f"tcpscope.8 has no section for {cmd}"
    for flag in ("config", "listen", r"flow\-log", "cgroup", "json", "server", "flows", "by", "metric", "quantiles",
                 r"transfer\-sampling\-rate"):
        assert f"\\-\\-{flag}" in man, f"tcpscope.8 does not mention --{flag}"
    warn = sh("man", "--warnings", "-l", str(root / "usr/share/man/man8/tcpscope.8.gz"),
              check=False, env={**os.environ, "MANWIDTH": "80", "MAN_KEEP_FORMATTING": "0"})
    assert not warn.stderr.strip(), f"man warnings: {warn.stderr}"
    changelog = gzip.decompress((root / "usr/share/doc/tcpscope/changelog.gz").read_bytes()).decode()
    assert changelog.startswith(f"tcpscope ({project_version()})")
    assert (root / "usr/share/doc/tcpscope/copyright").exists()


def test_the_package_explains_itself(deb, tmp_path):
    """The manual, the LICENSE and whatever the shipped config and unit point
    to are in the package, under /usr/share/doc/tcpscope/, with the headings
    they name; the manual's relative links open in the installed tree."""
    sh("dpkg-deb", "-x", str(deb), str(tmp_path / "root"))
    root = tmp_path / "root"
    doc = root / str(DOC_DIR).lstrip("/")
    # The manual as in the source tree: README.md beside docs/, byte for byte.
    pages = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md")), *sorted((ROOT / "docs/img").glob("*"))]
    for src in pages:
        shipped = doc / src.relative_to(ROOT)
        assert shipped.is_file() and shipped.read_bytes() == src.read_bytes(), f"{src.relative_to(ROOT)} not shipped"
    assert (doc / "LICENSE").read_bytes() == (ROOT / "LICENSE").read_bytes()
    # What the shipped config and unit point to, found by reading them.
    texts = {name: (root / name).read_text() for name in POINTING_FILES}
    for name, text in texts.items():
        assert doc_pointers(text), f"{name} points at nothing under {DOC_DIR} (was the scan broken?)"
    # The rest of what the package ships for an operator to read points the same way.
    for f in sorted(root.rglob("*")):
        rel = str(f.relative_to(root))
        if f.is_file() and not rel.startswith(("usr/bin/", "usr/share/doc/", "usr/share/man/")):
            texts.setdefault(rel, f.read_text())
    checked = check_doc_pointers(texts, root)
    print("\n".join(f"{n}: {p} {h or ''}" for n, p, h in checked))
    # Every relative link of the shipped manual opens inside the package.
    broken = []
    for page in sorted(doc.rglob("*.md")):
        for m in re.finditer(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", page.read_text()):
            link = m.group(1)
            if re.match(r"^[a-z]+:", link) or link.startswith("/"):
                continue
            if not (page.parent / link).resolve().is_relative_to(doc.resolve()) or not (page.parent / link).exists():
                broken.append(f"{page.relative_to(doc)} -> {link}")
    assert not broken, "links of the shipped manual that do not open in " + str(DOC_DIR) + ":\n" + "\n".join(broken)


def test_license_is_the_one_the_copyright_file_and_the_bpf_programs_declare():
    """LICENSE holds the full text of each license packaging/cpack/copyright
    names (LGPL-2.1 as Debian ships it, BSD-2-Clause as the copyright file
    has it), and names the string the BPF programs declare to the kernel."""
    license_text = (ROOT / "LICENSE").read_text()
    flat = lambda t: " ".join(t.split())
    copyright_text = (ROOT / "packaging/cpack/copyright").read_text()
    assert re.search(r"^License: LGPL-2\.1 or BSD-2-Clause$", copyright_text, re.M)
    assert "SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)" in license_text
    lgpl = Path("/usr/share/common-licenses/LGPL-2.1")
    if lgpl.exists():
        assert lgpl.read_text() in license_text, "LICENSE lacks the LGPL-2.1's full text"
    bsd = re.search(r"^License: BSD-2-Clause\n((?: .*\n?)+)", copyright_text, re.M).group(1)
    bsd = "\n".join("" if l.strip() == "." else l[1:] for l in bsd.splitlines())
    assert flat(bsd) in flat(license_text), "LICENSE lacks the BSD-2-Clause text of the copyright file"
    declared = set(re.findall(r'SEC\("license"\)\s*=\s*"([^"]+)"', "".join(
        p.read_text() for p in (ROOT / "bpf").glob("*.bpf.c"))))
    assert declared == {"Dual BSD/GPL"}, declared
    assert all(f'"{d}"' in license_text and f'"{d}"' in copyright_text for d in declared)


def test_install_creates_user_dirs_and_enables_service(installed):
    pw = sh("getent", "passwd", "tcpscope").stdout.strip().split(":")
    assert int(pw[2]) < 1000 and pw[5] == "/nonexistent" and pw[6].endswith("nologin"), pw
    for d in ("/var/lib/tcpscope", "/var/log/tcpscope"):
        st = os.stat(d)
        assert (st.st_uid, st.st_mode & 0o7777) == (int(pw[2]), 0o750), d
    # Enabled on install, as docs/packaging.md says (deb-systemd-helper does this with or without systemd).
    wants = Path("/etc/systemd/system/multi-user.target.wants/tcpscope.service")
    assert wants.is_symlink() and os.readlink(wants) == "/lib/systemd/system/tcpscope.service"
    if SYSTEMD:
        assert sh("systemctl", "is-active", "tcpscope.service", check=False).stdout.strip() == "active"
    # systemd accepts the installed unit (ExecStart, man page, every setting) ...
    sh("systemd-analyze", "verify", "/lib/systemd/system/tcpscope.service")
    # ... and rates its exposure 1.8 ("OK"; 9.6 without the hardening): keep it so.
    r = sh("systemd-analyze", "security", "--offline=true", "--threshold=18",
           "/lib/systemd/system/tcpscope.service", check=False)
    assert r.returncode == 0, "the unit's exposure rose above 1.8:\n" + r.stdout[-2000:]
    # The CLI from the installed path.
    v = sh("/usr/bin/tcpscope", "version").stdout
    assert v.startswith(f"tcpscope {project_version()}\n") and "libbpf" in v
    r = sh("/usr/bin/tcpscope", "check-config", str(CONFFILE), check=False)
    assert r.returncode == 0, f"shipped config rejected: {r.stdout}{r.stderr}"
    # Installed: the LICENSE, the manual and what the config and unit point to.
    assert (DOC_DIR / "LICENSE").is_file() and (DOC_DIR / "docs").is_dir()
    assert {p.name for p in (DOC_DIR / "docs").glob("*.md")} == {p.name for p in (ROOT / "docs").glob("*.md")}
    installed_texts = {n: (Path("/") / n).read_text() for n in POINTING_FILES}
    assert check_doc_pointers(installed_texts, Path("/"))


def test_lifecycle_confined_daemon_scrape_remove_purge(installed, tmp_path):
    unit = Unit(UNIT_FILE)
    port = free_port()
    edit_conffile(port)
    assert sh("/usr/bin/tcpscope", "check-config", str(CONFFILE), check=False).returncode == 0
    d = InstalledDaemon(port)
    installed["daemons"].append(d)

    # It runs as the unit says: its own user, no capability beyond the unit's
    # (it started with them all, or it could not have loaded its programs;
    # once attached, the daemon drops what it no longer needs).
    st = proc_status(d.pid)
    uid = int(sh("id", "-u", "tcpscope").stdout)
    assert [int(x) for x in st["Uid"].split()] == [uid] * 4, st["Uid"]
    caps = unit.cap_mask("AmbientCapabilities")
    bounding = unit.cap_mask("CapabilityBoundingSet")
    for key, limit in (("CapEff", caps), ("CapPrm", caps), ("CapAmb", caps), ("CapInh", caps),
                       ("CapBnd", bounding)):
        assert int(st[key], 16) & ~limit == 0, f"{key} {st[key]} exceeds the unit's {limit:016x}"
    assert st["NoNewPrivs"] == "1"
    # MemoryDenyWriteExecute=yes would kill a daemon that maps memory W+X.
    maps = Path(f"/proc/{d.pid}/maps").read_text().splitlines()
    wx = [m for m in maps if "w" in m.split()[1] and "x" in m.split()[1]]
    assert not wx, f"writable and executable mappings: {wx}"

    # Scrape; the scrapes are TCP flows themselves, so records must follow.
    status, text = http_get(d.url + "/metrics")
    assert status == 200 and 'tcpscope_build_info{' in text and f'version="{project_version()}"' in text
    flow_log = Path("/var/log/tcpscope/flows.ndjson")

    def logged_flow():
        http_get(d.url + "/healthz")
        return flow_log.exists() and any(
            json.loads(l).get("lport") == port or json.loads(l).get("rport") == port
            for l in flow_log.read_text().splitlines() if l)
    wait_for(logged_flow, 20, lambda: f"a record of a scrape in {flow_log} ({d.log()})")
    st = flow_log.stat()
    assert (st.st_uid, st.st_mode & 0o777) == (uid, 0o640), "flow log not written as the unit's user/UMask"
    _, text = http_get(d.url + "/metrics")
    assert re.search(r"^tcpscope_flows_total\{.*\} [1-9]", text, re.M), "no flow counted"

    # The package's logrotate rule: rotate, then SIGHUP (its postrotate sends
    # it through systemd; without systemd the test sends it), and the daemon
    # goes on in a fresh file.
    sh("logrotate", "-f", "-s", str(tmp_path / "logrotate.state"), "/etc/logrotate.d/tcpscope")
    assert Path(f"{flow_log}.1").exists() and flow_log.stat().st_size == 0
    if not SYSTEMD:
        os.kill(d.pid, signal.SIGHUP)
    wait_for(logged_flow, 20, lambda: f"records in the reopened {flow_log} ({d.log()})")

    progs, links = bpf_ids_held_by(d.pid)
    assert progs and links, "the daemon holds no BPF programs or links"

    # Remove: the prerm stops the daemon, which detaches everything.
    t0 = time.monotonic()
    apt_get_reaping(d, "remove", "tcpscope")
    assert not d.running(), "the daemon survived package removal"
    assert time.monotonic() - t0 < 25, "stopping the daemon took the prerm's TERM timeout: was it killed?"
    if d.proc:
        assert d.proc.returncode == 0, f"daemon exited {d.proc.returncode}: {d.log()}"
        assert "stopped" in d.log()
    kernel_progs, kernel_links = bpf_ids_in_kernel()
    assert not progs & kernel_progs, f"BPF programs left loaded: {progs & kernel_progs}"
    assert not links & kernel_links, f"BPF links left attached: {links & kernel_links}"
    assert not Path("/usr/bin/tcpscope").exists()
    assert CONFFILE.exists(), "remove (not purge) must keep the configuration"

    # Purge: configuration, logs and state go; nothing is left but the
    # system user and group, which Debian keeps (their uid must not pass to
    # another system user while files may still carry it).
    apt_get("purge", "tcpscope")
    assert package_status() in ("not-installed", "unknown ok not-installed")
    for p in ("/etc/tcpscope", "/var/log/tcpscope", "/var/lib/tcpscope"):
        assert not Path(p).exists(), f"{p} survived purge"
    assert sh("id", "-u", "tcpscope", check=False).stdout.strip() == str(uid), "purge deleted the system user"
    assert sh("getent", "group", "tcpscope", check=False).returncode == 0, "purge deleted the system group"
    left = leftovers() - installed["before"]
    assert not left, f"left behind after purge: {sorted(left)}"


# What the daemon says, in its one line, when the unit lacks a capability.
MISSING_CAPABILITY_MESSAGE = {
    # Checked before loading: the tracing programs need both.
    "CAP_BPF": r"not permitted: loading BPF programs needs root \(or CAP_BPF and CAP_PERFMON\)",
    "CAP_PERFMON": r"not permitted: loading BPF programs needs root \(or CAP_BPF and CAP_PERFMON\)",
    # The kernel refuses the first cgroup program of the policy (EPERM); the
    # daemon may say where it saved libbpf's full log.
    "CAP_NET_ADMIN": r"the kernel refused BPF program '(cc_policy|watch_setsockopt|guard_sysctl)': "
                     r"Operation not permitted \(errno 1\)(; .*)?",
}
# bpftool's program types: the policy's cgroup programs and the tracing ones,
# all loaded at start; sock_ops is attached only while a rule exists, and the
# shipped config has none.
EXPECTED_PROGRAM_TYPES = {"sock_ops", "cgroup_sockopt", "cgroup_sysctl", "tracing"}
EXPECTED_ATTACHED_TYPES = EXPECTED_PROGRAM_TYPES - {"sock_ops"}


def test_each_capability_is_needed(installed):
    """The unit's capabilities are the least the daemon starts with: without
    any one of them the confined daemon exits non-zero with one line saying
    what was refused; with all of them it loads and attaches the policy's
    cgroup programs (sock_ops, setsockopt, sysctl) as well as the tracing ones,
    and attaches all but sock_ops, which the shipped config (no rules) leaves
    detached."""
    unit = Unit(UNIT_FILE)
    caps = unit.capabilities("AmbientCapabilities")
    assert caps == unit.capabilities("CapabilityBoundingSet")
    assert set(caps) == MISSING_CAPABILITY_MESSAGE.keys(), \
        f"the unit grants {caps}: say here what the daemon prints without each"
    port = free_port()
    edit_conffile(port, flow_log="/var/log/tcpscope/flows.ndjson")
    for cap in caps:
        try:
            # (On a timeout, run() kills the daemon: every step of sandbox_command execs.)
            r = subprocess.run(sandbox_command(unit.with_capabilities(set(caps) - {cap})),
                               capture_output=True, text=True, timeout=60)
        except subprocess.TimeoutExpired as e:
            raise AssertionError(f"without {cap} the daemon was still running after 60 s: "
                                 f"{cap} is not needed to start ({e.stderr})") from None
        # libbpf adds its own "libbpf: ..." diagnostics; the daemon's is one line.
        ours = [l for l in r.stderr.splitlines() if l.startswith("tcpscope:")]
        other = [l for l in r.stderr.splitlines() if l.strip() and not l.startswith(("tcpscope:", "libbpf:"))]
        assert r.returncode != 0, f"the daemon started without {cap}: {r.stderr}"
        assert len(ours) == 1 and not other, f"without {cap}, not one line: {r.stderr}"
        assert re.fullmatch(r"tcpscope: " + MISSING_CAPABILITY_MESSAGE[cap], ours[0]), \
            f"without {cap}: {ours[0]!r}"

    d = InstalledDaemon(port)
    installed["daemons"].append(d)
    progs, links = bpf_ids_held_by(d.pid)
    kernel_progs = {p["id"]: p for p in json.loads(sh("bpftool", "--json", "prog", "show").stdout)}
    kernel_links = {l["id"]: l for l in json.loads(sh("bpftool", "--json", "link", "show").stdout)}
    held = {kernel_progs[i]["type"] for i in progs if i in kernel_progs}
    assert EXPECTED_PROGRAM_TYPES <= held, f"the daemon holds programs of types {held} only"
    attached = {kernel_progs[kernel_links[i]["prog_id"]]["type"] for i in links
                if i in kernel_links and kernel_links[i]["prog_id"] in kernel_progs}
    assert attached == EXPECTED_ATTACHED_TYPES, f"the daemon's links attach programs of types {attached}"
    cgroup_links = [kernel_links[i] for i in links if kernel_links.get(i, {}).get("type") == "cgroup"]
    assert len(cgroup_links) == 2, f"setsockopt and sysctl are not attached to a cgroup: {cgroup_links}"


def _repacked_with_version(deb, version, workdir):
    """The same package under a later version: an upgrade whose conffile
    is unchanged, as most upgrades are."""
    tree = workdir / "tree"
    sh("dpkg-deb", "-R", str(deb), str(tree))
    control = tree / "DEBIAN/control"
    control.write_text(re.sub(r"(?m)^Version: .*$", f"Version: {version}", control.read_text()))
    out = workdir / f"tcpscope_{version}.deb"
    sh("dpkg-deb", "--root-owner-group", "-b", str(tree), str(out))
    return out


def test_reinstall_and_upgrade_keep_the_edited_conffile(installed, deb, tmp_path):
    edited = edit_conffile(free_port())
    apt_get("install", "--reinstall", str(deb))
    assert CONFFILE.read_text() == edited, "reinstall overwrote the edited conffile"

    port = int(re.search(r"(?m)^listen: 127\.0\.0\.1:(\d+)$", edited).group(1))
    d = InstalledDaemon(port)
    installed["daemons"].append(d)
    newer = _repacked_with_version(deb, project_version() + "+test1", tmp_path)
    apt_get("install", str(newer))
    assert CONFFILE.read_text() == edited, "upgrade overwrote the edited conffile"
    assert sh("dpkg-query", "-W", "-f=${Version}", "tcpscope").stdout == project_version() + "+test1"
    if SYSTEMD:
        # The postinst restarts the service on upgrade.
        new_pid = int(sh("systemctl", "show", "-P", "MainPID", "tcpscope.service").stdout)
        assert new_pid and new_pid != d.pid, "upgrade did not restart the service"
    else:
        # Nothing supervises the daemon here, so nothing restarts it; it keeps serving.
        assert d.healthy()
    assert sh("/usr/bin/tcpscope", "check-config", str(CONFFILE), check=False).returncode == 0


def test_system_call_filter_allows_what_the_daemon_calls(installed, tmp_path):
    """SystemCallFilter= cannot be emulated without systemd, so check it the
    other way round: every system call the installed daemon makes while it
    starts, serves, snapshots, reloads and stops is one the unit allows."""
    unit = Unit(UNIT_FILE)
    allowed = unit.syscall_filter()
    assert "bpf" in allowed and "chown" not in allowed and "setuid" not in allowed
    port = free_port()
    edit_conffile(port)
    trace = tmp_path / "strace.txt"
    stderr = open(tmp_path / "stderr", "w+")
    proc = subprocess.Popen(["strace", "-f", "-qq", "-o", str(trace), *sandbox_command(unit)],
                            stdout=subprocess.DEVNULL, stderr=stderr)
    try:
        url = f"http://127.0.0.1:{port}"

        def up():
            assert proc.poll() is None, f"strace/daemon exited: {Path(stderr.name).read_text()}"
            try:
                return http_get(url + "/healthz")[0] == 200
            except (urllib.error.URLError, ConnectionError):
                return False
        wait_for(up, 60, "the daemon under strace")
        for path in ("/metrics", "/healthz", "/api/v1/flows", "/nonexistent"):
            try:
                http_get(url + path)
            except urllib.error.HTTPError:
                pass
        daemon_pid = int(sh("pgrep", "-u", "tcpscope", "-P", str(proc.pid), "-x", "tcpscope").stdout.split()[0])
        os.kill(daemon_pid, signal.SIGHUP)
        wait_for(lambda: "reloaded" in Path(stderr.name).read_text(), 10, "the reload")
        wait_for(lambda: Path("/var/log/tcpscope/flows.ndjson").exists(), 10, "the flow log")
        os.kill(daemon_pid, signal.SIGTERM)
        assert proc.wait(30) == 0, Path(stderr.name).read_text()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        stderr.close()
    used = set()
    families = {}  # address family -> one socket() call that asked for it
    exec_seen = False
    for line in trace.read_text().splitlines():
        if 'execve("/usr/bin/tcpscope"' in line:
            exec_seen = True
            continue
        m = re.match(r"^\d+\s+(?:<\.\.\. )?([a-z_0-9]+)[( ]", line)
        if exec_seen and m and m.group(1) not in ("exited", "killed"):
            used.add(m.group(1))
        # RestrictAddressFamilies= filters socket(2) (not socketpair(2), nor
        # sockets received), on its first argument.
        m = re.match(r"^\d+\s+socket\(([A-Z0-9_]+|\d+),", line)
        if exec_seen and m:
            families.setdefault(m.group(1), line)
    assert exec_seen and len(used) > 10, "strace saw no daemon"
    print(f"system calls used: {sorted(used)}")
    assert used <= allowed, f"the unit's SystemCallFilter= would deny: {sorted(used - allowed)}"
    print(f"address families of socket(): {sorted(families)}")
    restricted = unit.address_families()
    # AF_UNIX (systemd's notification socket) and AF_NETLINK (local routing
    # tables) are in the list for what a restart and a controller rule use.
    assert restricted == {"AF_INET", "AF_INET6", "AF_UNIX", "AF_NETLINK"}, restricted
    # The daemon serves TCP, so socket(AF_INET...) must have been seen, or
    # the parsing above missed the calls.
    assert "AF_INET" in families, "strace saw no socket(AF_INET, ...): the trace parsing is broken"
    denied = {f: line for f, line in families.items() if f not in restricted}
    assert not denied, f"the unit's RestrictAddressFamilies= would refuse: {denied}"


def test_the_manual_points_at_nothing_outside_this_repository():
    """README.md, docs/ and the man page define what they rely on: a user of
    the package has no steering repository to follow a link into."""
    pages = [ROOT / "README.md", ROOT / "packaging/man/tcpscope.8", *sorted((ROOT / "docs").glob("*.md"))]
    outside = [f"{p.relative_to(ROOT)}:{n}: {line.strip()}" for p in pages
               for n, line in enumerate(p.read_text().splitlines(), 1)
               if "SPEC.md" in line or "../shared" in line or "../../shared" in line]
    assert not outside, "\n".join(outside)
