"""The manual against the code: README.md, CONTRIBUTING.md, docs/*.md, the
man page (packaging/man/tcpscope.8), the shipped config
(src/config/default_config.yaml) and the unit
(packaging/systemd/tcpscope.service) may only name links, files, config keys
and metrics that exist. Needs no root and no network, only the build dir
(its install rules and its unit-test binary); a second or so.

What counts as each, and what it is checked against:

* Links: every Markdown link or image `[text](target)` outside code whose
  target has no scheme (http:, mailto:, ...) must be a file or directory
  relative to the page, and its `#anchor`, if any, a heading of the target
  page (or of the page itself for `(#anchor)`) by GitHub's slug rules
  (lower case; everything but letters, digits, `_`, `-` and spaces dropped;
  spaces to `-`; a repeated slug gets `-1`, `-2`, ...).
* Headings: a link, a repository path or a package path followed by a quoted
  text (`docs/packaging.md "Restarts"`, `[records](records.md) "Which ..."`,
  also across a line break) names a place in that page: the text must be one
  of its headings, or the bold title that opens one of its paragraphs
  ("**Which flows' transfers are followed.** ..."), exactly (spacing aside).
* Repository paths: any word, in code or prose, that starts with one of the
  repository's top-level directories and a slash (`src/`, `tests/`,
  `bench/`, `docs/`, `packaging/`, ...; not inside a URL or an absolute path)
  is a path from the repository's root and must exist. A trailing `/` asks
  for a directory; trailing punctuation, `::test_name` and `:LINE` are not
  part of it. Placeholders match anything: a component in capitals
  (`tests/unit/STAGE/`, `FILE`, `PID`, `NAME`) or in `<...>`; `*` and `?` are
  globs and `{a,b}` alternatives (each must exist; a glob must match
  something).
* Package paths: an absolute path under /usr or /lib with a component that
  starts with "tcpscope" (/usr/bin/tcpscope, /usr/share/tcpscope/...,
  /usr/share/doc/tcpscope/..., /lib/systemd/system/tcpscope.service), and an
  /etc path named tcpscope* in /etc or in a directory the package installs
  into (/etc/tcpscope, /etc/tcpscope/tcpscope.yaml, /etc/logrotate.d/tcpscope),
  must be installed by the package: the list is what `cmake --install BUILD`
  puts into a scratch DESTDIR, i.e. the CMake install rules the .deb is made
  from. Other files in /etc/tcpscope/ are the administrator's (ASN tables,
  Kafka keys: `/etc/tcpscope/pfx2as.tsv`), as are other directories of /etc
  (`/etc/modules-load.d/tcpscope.conf`). /var/lib/tcpscope and
  /var/log/tcpscope are the unit's StateDirectory= and LogsDirectory=: the
  directory must be one the unit declares, what is inside it is made at run
  time.
* Config keys, checked against the parser's tables (config_reference(), as
  docs/configuration.md's generated reference prints them; the unit test
  ConfigReference.DocHasTheTables, run here first, proves that block is the
  tables):
  - a code span (Markdown backticks; the man page's .B/.I/.BR/... words)
    that is a dotted name (`asn.top_n`, `cc_policy.rules[0].cc`, optionally
    with `: value` after it) whose first part is a top-level key must be a
    key; one whose first part names a section deeper down (`match.lports`,
    `sasl.password_file`) must be the end of a key; not a file name
    (`controller.json`: the last part a file extension);
  - a code span `name: value` whose value is one of the values a key
    enumerates ("one of respect, enforce") must name a key that offers it;
  - YAML config examples (a code block, or a paragraph of one, that starts
    with a top-level key; the commented-out examples of the shipped config)
    may only use the tables' keys, at their places.
  docs/configuration.md's generated reference is that table: its keys are
  not checked against themselves (its paths and metrics are).
  Single words in prose or in backticks (`top_n`, record fields), alone or
  as `name:`, are not checked: nothing tells a key from a record field, a
  PromQL label or a log line's prefix (`kernel:`).
* Metrics: every word `tcpscope_...` (not after a `:`, which makes it part of
  a recording rule's name; in the shipped alerts, rules and dashboards as
  well) must be a family the daemon registers, or one of a histogram's
  `_bucket`, `_sum`, `_count` series; a word ending in `_` or followed by `*`
  is a prefix and must start some family's name. The families are read from
  the calls that register them in src/ (counter_family, gauge_family,
  histogram_family, plain_counter, plain_gauge, prometheus::Build*().Name,
  a MetricFamily's .name, measure/'s MetricHistogram the aggregator builds).
  Not metrics: C types and CMake functions and targets the code defines
  (`struct tcpscope_flow_event`, `tcpscope_stage()`, `tcpscope_unit_tests`),
  and the .deb's file name (tcpscope_VERSION_ARCH.deb).
"""
import glob
import itertools
import os
import re
import shlex
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
BUILD = Path(os.environ.get("TCPSCOPE_BUILD", ROOT / "build"))
MARKDOWN = [ROOT / "README.md", ROOT / "CONTRIBUTING.md", *sorted((ROOT / "docs").glob("*.md"))]
MAN_PAGE = ROOT / "packaging" / "man" / "tcpscope.8"
SHIPPED_CONFIG = ROOT / "src" / "config" / "default_config.yaml"
UNIT = ROOT / "packaging" / "systemd" / "tcpscope.service"
MONITORING = [*sorted((ROOT / "packaging" / "prometheus").glob("tcpscope-*.yml")),
              *sorted((ROOT / "packaging" / "grafana").glob("*.json"))]
MONITORING = [p for p in MONITORING if not p.name.endswith(".test.yml")]  # what the package ships
CONFIG_DOC = ROOT / "docs" / "configuration.md"
REFERENCE_BEGIN = "<!-- config-reference: generated from src/config/*_config.cc, do not edit -->"
REFERENCE_END = "<!-- config-reference end -->"


def rel(path):
    return str(Path(path).relative_to(ROOT))


# ---------------------------------------------------------------- the texts

class Doc:
    """One file of the manual: its text for free scanning (comment markers
    and troff escapes removed), its code spans and its code blocks, each with
    a line number."""

    def __init__(self, path):
        self.path = path
        self.name = rel(path)
        raw = path.read_text()
        self.spans, self.blocks, self.links = [], [], []
        if path.suffix == ".md":
            self.text = raw
            self._markdown(raw)
        elif path == MAN_PAGE:
            self.text = self._troff(raw)
        else:  # YAML, unit: comments read as prose, comment markers dropped
            self.text = "\n".join(re.sub(r"^\s*#+ ?", "", line) for line in raw.split("\n"))

    def _markdown(self, raw):
        lines = raw.split("\n")
        fenced, block, in_reference = False, None, False
        prose = []
        for n, line in enumerate(lines, 1):
            if REFERENCE_BEGIN in line:
                in_reference = True
            if REFERENCE_END in line:
                in_reference = False
            if line.startswith("```"):
                if fenced:
                    self.blocks.append(block)
                    fenced, block = False, None
                else:
                    fenced, block = True, (n + 1, [])
                prose.append("")
                continue
            if fenced:
                block[1].append(line)
                prose.append("")
                continue
            if line.startswith("    ") and (not prose or prose[-1].strip() == "" or block is not None):
                if block is None:
                    block = (n, [])
                block[1].append(line[4:])
                prose.append("")
                continue
            if block is not None and line.strip() == "":
                block[1].append("")
                prose.append("")
                continue
            if block is not None:
                self.blocks.append(block)
                block = None
            prose.append("" if in_reference else line)
        if block is not None:
            self.blocks.append(block)
        for n, line in enumerate(prose, 1):
            for m in re.finditer(r"(`+)(.+?)\1", line):
                self.spans.append((n, m.group(2)))
        # Prose without code spans: where links are.
        self.prose_text = re.sub(r"(`+)(.+?)\1", lambda m: " " * len(m.group(0)), "\n".join(prose))
        for m in re.finditer(r"!?\[[^\]]*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)", self.prose_text):
            self.links.append((self.prose_text.count("\n", 0, m.start()) + 1, m.group(1), m.end()))

    def _troff(self, raw):
        out = []
        for n, line in enumerate(raw.split("\n"), 1):
            if line.startswith(".\\\""):
                out.append("")
                continue
            text = (line.replace("\\-", "-").replace("\\(dq", '"').replace("\\&", "").replace("\\e", "\\")
                    .replace("\\ ", " "))
            text = re.sub(r"\\f[BIRP]", "", text)
            m = re.match(r"\.(B|I|BR|RB|IR|RI|BI|IB)\s+(.*)", text)
            if m:
                try:
                    words = shlex.split(m.group(2))
                except ValueError:
                    words = [m.group(2)]
                if m.group(1) in ("B", "I"):
                    words = [" ".join(words)]
                self.spans.extend((n, w) for w in words if w.strip())
                text = " ".join(words)
            elif text.startswith("."):
                text = re.sub(r"^\.\S+\s*", "", text)
            out.append(text)
        return "\n".join(out)

    def line_of(self, offset):
        return self.text.count("\n", 0, offset) + 1


def manual():
    return [Doc(p) for p in [*MARKDOWN, MAN_PAGE, SHIPPED_CONFIG, UNIT]]


# ---------------------------------------------------------------- headings

def headings(path, bold_leads=False):
    """The ATX headings of a Markdown file, outside fenced code; with
    bold_leads, also the bold titles that open a paragraph ("**Title.** Text")."""
    out, fenced = [], False
    for line in Path(path).read_text().split("\n"):
        if line.startswith("```"):
            fenced = not fenced
        m = None if fenced else re.match(r"#{1,6}\s+(.*?)\s*#*\s*$", line)
        if m:
            out.append(m.group(1))
        m = None if fenced or not bold_leads else re.match(r"\*\*([^*]+?)[.:]?\*\*", line)
        if m:
            out.append(m.group(1))
    return out


def slugs(path):
    """GitHub's anchors of a Markdown file's headings."""
    seen, out = {}, set()
    for h in headings(path):
        text = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", h)  # a link in a heading: its text
        s = re.sub(r"[^\w\- ]", "", text.strip().lower()).replace(" ", "-")
        n = seen.get(s, 0)
        seen[s] = n + 1
        out.add(s if n == 0 else f"{s}-{n}")
    return out


QUOTED_AFTER = r"[,]?\s+[\"“]([^\"”]+)[\"”]"


# ---------------------------------------------------------------- the package

@pytest.fixture(scope="module")
def package(tmp_path_factory):
    """The files and directories the .deb holds, as absolute paths, from the
    build dir's install rules (cmake --install into a scratch DESTDIR)."""
    if not (BUILD / "cmake_install.cmake").exists():
        pytest.fail(f"{BUILD} is not a configured build dir (scripts/dev.sh build)")
    dest = tmp_path_factory.mktemp("package")
    r = subprocess.run(["cmake", "--install", str(BUILD), "--prefix", "/usr"], env={**os.environ, "DESTDIR": str(dest)},
                       capture_output=True, text=True)
    assert r.returncode == 0, f"cmake --install {BUILD} failed (build it first):\n{r.stderr}"
    files, dirs = set(), set()
    for dirpath, dirnames, filenames in os.walk(dest):
        base = "/" + os.path.relpath(dirpath, dest).lstrip(".")
        dirs.add(base.rstrip("/") or "/")
        files.update(os.path.join(base, f) for f in filenames)
    return {"root": dest, "files": files, "dirs": dirs}


def unit_directories():
    """/var/lib/X and /var/log/X the unit has systemd make."""
    text = UNIT.read_text()
    out = set()
    for key, base in (("StateDirectory", "/var/lib"), ("LogsDirectory", "/var/log"), ("CacheDirectory", "/var/cache")):
        for m in re.finditer(rf"^{key}=(.*)$", text, re.M):
            out.update(f"{base}/{d}" for d in m.group(1).split())
    return out


# ---------------------------------------------------------------- paths

TOP_DIRS = sorted(p.name for p in ROOT.iterdir()
                  if p.is_dir() and not p.name.startswith((".", "build")) and p.name != "__pycache__")
PATH_CHARS = r"[A-Za-z0-9_.{},*?<>/+@=-]"
REPO_PATH = re.compile(rf"(?<![\w./~:$-])((?:{'|'.join(map(re.escape, TOP_DIRS))})/{PATH_CHARS}*)")
ABS_PATH = re.compile(rf"(?<![\w./~:$-])(/(?:usr|etc|lib|var)/{PATH_CHARS}*)")


def clean_path(p):
    p = re.sub(r"::.*$", "", p)
    p = re.sub(r":\d+$", "", p)
    return p.rstrip(".,:;")


def brace_expand(p):
    m = re.search(r"\{([^{}]*)\}", p)
    if not m:
        return [p]
    return list(itertools.chain.from_iterable(
        brace_expand(p[:m.start()] + alt + p[m.end():]) for alt in m.group(1).split(",")))


def as_glob(p):
    """Placeholders become wildcards: <...>, and words in capitals (STAGE,
    NAME_command.h, FILE.svg; README.md too, but only when the literal name
    was not found)."""
    p = re.sub(r"<[^<>/]*>", "*", p)
    return re.sub(r"(?<![A-Za-z0-9])[A-Z][A-Z0-9]*(?![a-z0-9])", "*", p)


def resolve_in(exists, p):
    """Problems with path p given exists(glob_pattern, want_dir) -> bool."""
    problems = []
    want_dir = p.endswith("/")
    for alt in brace_expand(p.rstrip("/")):
        literal = glob.escape(alt) if not re.search(r"[*?]", alt) else alt
        if not exists(literal, want_dir) and not exists(as_glob(alt), want_dir):
            problems.append(alt + ("/" if want_dir else ""))
    return problems


def repo_exists(pattern, want_dir):
    matches = glob.glob(str(ROOT / pattern))
    return any(os.path.isdir(m) if want_dir else os.path.exists(m) for m in matches)


def test_links_resolve():
    problems = []
    for doc in manual():
        for n, target, _ in doc.links:
            if re.match(r"[a-zA-Z][a-zA-Z+.-]*:", target):
                continue  # http:, https:, mailto:, man:
            path, _, anchor = target.partition("#")
            dest = (doc.path.parent / path).resolve() if path else doc.path
            if not dest.exists():
                problems.append(f"{doc.name}:{n}: link to {target}: no {os.path.relpath(dest, ROOT)}")
                continue
            if anchor and dest.suffix == ".md" and anchor not in slugs(dest):
                problems.append(f"{doc.name}:{n}: link to {target}: {rel(dest)} has no heading #{anchor}")
    assert not problems, "\n".join(problems)


def test_quoted_headings_exist(package):
    """`path "Heading"` and `[text](page.md) "Heading"`: the page has that heading."""
    problems = []
    for doc in manual():
        named = []  # (line, file, heading)
        for m in re.finditer(rf"({REPO_PATH.pattern}|{ABS_PATH.pattern}){QUOTED_AFTER}", doc.text):
            p = clean_path(m.group(2) or m.group(3))
            if p.startswith("/"):
                f = package["root"] / p.lstrip("/")
                if p not in package["files"]:
                    continue  # test_package_paths_are_installed says so
            else:
                f = ROOT / p
            named.append((doc.line_of(m.start()), f, m.group(4)))
        if doc.path.suffix == ".md":
            for n, target, end in doc.links:
                m = re.match(QUOTED_AFTER, doc.prose_text[end:])
                path = target.partition("#")[0]
                if m and path and not re.match(r"[a-zA-Z][a-zA-Z+.-]*:", target):
                    named.append((n, (doc.path.parent / path).resolve(), m.group(1)))
        for n, f, heading in named:
            heading = " ".join(heading.split())
            if f.suffix == ".md" and f.is_file() and heading not in headings(f, bold_leads=True):
                problems.append(f'{doc.name}:{n}: {os.path.relpath(f, ROOT) if ROOT in f.parents else f} '
                                f'has no heading "{heading}" (it has: {"; ".join(headings(f))})')
    assert not problems, "\n".join(problems)


def test_repository_paths_exist():
    problems = []
    for doc in manual():
        for m in REPO_PATH.finditer(doc.text):
            p = clean_path(m.group(1))
            for missing in resolve_in(repo_exists, p):
                problems.append(f"{doc.name}:{doc.line_of(m.start())}: no {missing} in the repository")
    assert not problems, "\n".join(problems)


def test_package_paths_are_installed(package):
    installed = package["files"] | package["dirs"]
    etc_dirs = {d for d in package["dirs"] if d.startswith("/etc/")}
    runtime = unit_directories()

    def exists(pattern, want_dir):
        pool = package["dirs"] if want_dir else installed
        rx = re.compile("^" + re.escape(pattern).replace(r"\*", "[^/]*").replace(r"\?", "[^/]") + "$")
        return any(rx.match(p) for p in pool)

    problems = []
    for doc in manual():
        for m in ABS_PATH.finditer(doc.text):
            p = clean_path(m.group(1))
            where = f"{doc.name}:{doc.line_of(m.start())}"
            parts = p.strip("/").split("/")
            if parts[0] == "var":
                base = "/" + "/".join(parts[:3])
                if "tcpscope" in base and base not in runtime:
                    problems.append(f"{where}: {p}: {base} is none of the unit's directories ({sorted(runtime)})")
                continue
            if parts[0] == "etc":
                if not parts[-1].startswith("tcpscope") or os.path.dirname(p.rstrip("/")) not in etc_dirs | {"/etc"}:
                    continue  # the administrator's (/etc/tcpscope/pfx2as.tsv, /etc/modules-load.d/...)
            elif not any(part.startswith("tcpscope") for part in parts):
                continue  # the system's (/usr/bin, /lib/modules)
            for missing in resolve_in(exists, p):
                problems.append(f"{where}: {missing} is not in the package")
    assert not problems, "\n".join(problems) + f"\n(the package's files, from {BUILD}'s install rules: " \
        f"{sorted(package['files'])})"


# ---------------------------------------------------------------- config keys

@pytest.fixture(scope="module")
def config_keys():
    """The config reference's rows {key: type}: the parser's tables, as
    config_reference_markdown() prints them into docs/configuration.md."""
    unit_tests = BUILD / "tcpscope_unit_tests"
    if not unit_tests.exists():
        pytest.fail(f"no {unit_tests}: build with -DTCPSCOPE_TESTS=ON (scripts/dev.sh build)")
    r = subprocess.run([str(unit_tests), "--gtest_filter=ConfigReference.DocHasTheTables"],
                       capture_output=True, text=True, env={k: v for k, v in os.environ.items()
                                                             if k != "TCPSCOPE_UPDATE_CONFIG_REFERENCE"})
    assert r.returncode == 0, f"docs/configuration.md's config reference is not the parser's tables:\n{r.stdout}"
    text = CONFIG_DOC.read_text()
    block = text[text.index(REFERENCE_BEGIN):text.index(REFERENCE_END)]
    rows = {}
    for m in re.finditer(r"^\| `([^`]+)` \| (.*?) \|", block, re.M):
        rows[m.group(1)] = m.group(2)
    assert len(rows) > 20, "the config reference has no rows"
    return rows


class Keys:
    def __init__(self, rows):
        self.rows = rows
        self.keys = set(rows)
        self.top = {k for k in rows if "." not in k and "[" not in k}
        self.sections = {re.sub(r"\[\]$", "", part) for k in rows
                         for part in re.split(r"\.", k)[:-1]}  # names with keys inside
        self.leaves = {re.split(r"[.\]]", k)[-1] for k in rows}
        self.enums = {}  # value -> leaf names that offer it
        for k, t in rows.items():
            m = re.match(r"one of (.*)", t)
            if m:
                for v in m.group(1).split(", "):
                    self.enums.setdefault(v, set()).add(re.split(r"[.\]]", k)[-1])

    def known(self, dotted):
        """None when `dotted` is not checked, else whether it is a key."""
        d = re.sub(r"\[\d*\]", "[]", dotted)
        first = re.split(r"[.\[]", d)[0]
        if first in self.top:
            return d in self.keys
        if first in self.sections:
            return any(k.endswith("." + d) for k in self.keys)
        return None

    def has_children(self, path):
        return any(k.startswith(path + ".") or k.startswith(path + "[].") for k in self.keys)


FILE_EXTENSIONS = {"c", "cc", "conf", "deb", "gz", "h", "json", "md", "mmdb", "ndjson", "pem", "proto", "py", "scope",
                   "service", "sh", "slice", "sql", "svg", "tsv", "txt", "yaml", "yml"}
DOTTED = r"[a-z_][a-z0-9_]*(?:\[\d*\])?(?:\.[a-z_][a-z0-9_]*(?:\[\d*\])?)*"


def span_problems(keys, span):
    m = re.fullmatch(rf"({DOTTED})(:)?(?:\s+(.+))?", span)
    if not m:
        return None
    name, colon, value = m.groups()
    if value and not colon:
        return None
    if "." in name or "[" in name:
        if name.rsplit(".", 1)[-1] in FILE_EXTENSIONS:
            return None  # controller.json, flows.sql
        ok = keys.known(name)
        return None if ok is None or ok else f"`{span}`: no key {name}"
    if colon and value and value in keys.enums and name not in keys.enums[value]:
        return f"`{span}`: {value} is a value of {', '.join(sorted(keys.enums[value]))}, not of a key {name}"
    return None


# A tiny YAML reader for the examples: block mappings and lists, flow
# mappings and lists on one line; enough to name every key with its place.

def flow_paths(text, prefix):
    """Key paths inside a flow collection, e.g. "{ a: 1, b: { c: 2 } }"."""
    out, i = [], 0

    def value(i, path):
        while i < len(text) and text[i] == " ":
            i += 1
        if i < len(text) and text[i] == "{":
            return mapping(i + 1, path)
        if i < len(text) and text[i] == "[":
            return sequence(i + 1, path)
        if i < len(text) and text[i] in "\"'":
            return text.index(text[i], i + 1) + 1
        while i < len(text) and text[i] not in ",}]":
            i += 1
        return i

    def mapping(i, path):
        while i < len(text):
            while i < len(text) and text[i] in " ,":
                i += 1
            if text[i] == "}":
                return i + 1
            m = re.compile(r"([\"']?)([^\"':,{}\[\]]+)\1\s*:").match(text, i)
            key = m.group(2).strip()
            out.append(f"{path}.{key}" if path else key)
            i = value(m.end(), f"{path}.{key}" if path else key)
        return i

    def sequence(i, path):
        while i < len(text):
            while i < len(text) and text[i] in " ,":
                i += 1
            if text[i] == "]":
                return i + 1
            i = value(i, path + "[]")
        return i

    value(i, prefix)
    return out


def yaml_paths(lines):
    """(line index, key path) of every key in a YAML text, lists as `[]`."""
    out, stack = [], []  # stack: (indent, path)
    for idx, line in enumerate(lines):
        body = re.sub(r"\s+#.*$", "", line) if not line.lstrip().startswith("#") else ""
        if not body.strip():
            continue
        indent = len(body) - len(body.lstrip())
        content = body.strip()
        while content.startswith("- "):
            while stack and stack[-1][0] >= indent:
                stack.pop()
            parent = stack[-1][1] if stack else ""
            stack.append((indent + 1, parent + "[]"))
            indent += 2
            content = content[2:].lstrip()
        m = re.match(r"([\"']?)([A-Za-z0-9_.-]+)\1:(?:\s+(.*))?$", content)
        if not m:
            continue
        while stack and stack[-1][0] >= indent:
            stack.pop()
        parent = stack[-1][1] if stack else ""
        path = f"{parent}.{m.group(2)}" if parent else m.group(2)
        path = path.replace(".[]", "[]")
        out.append((idx, path))
        stack.append((indent, path))
        if m.group(3) and m.group(3)[0] in "{[":
            out.extend((idx, p.replace(".[]", "[]")) for p in flow_paths(m.group(3), path))
    return out


def example_problems(keys, lines, first_line, where):
    problems = []
    for idx, path in yaml_paths(lines):
        parent = re.sub(r"(\[\])?\.?[^.\[\]]+$", "", path)
        parent = re.sub(r"\[\]$", "", parent)
        if parent and parent in keys.keys and not keys.has_children(parent):
            continue  # the key's value is a mapping of its own (experiment arms)
        if path not in keys.keys:
            problems.append(f"{where}:{first_line + idx}: example uses {path}, which is no config key")
    return problems


def config_examples(doc, keys):
    """(first line, lines) of YAML config examples in a document."""
    if doc.path == SHIPPED_CONFIG:
        # Its commented-out examples, uncommented where they stand: a comment
        # line that is a YAML key line (a value with no spaces, quoted, or a
        # flow collection; not prose that happens to start `word: `).
        out = []
        for line in SHIPPED_CONFIG.read_text().split("\n"):
            m = re.match(r"(\s*)# ?((\s*)(- )?[a-z_]+:(.*))$", line)
            value = re.sub(r"\s+#.*$", "", m.group(5)).strip() if m else ""
            if m and (" " not in value or value[0] in "{[\"'"):
                out.append(m.group(1) + m.group(2))
            else:
                out.append(line)
        return [(1, out)]
    out = []
    for first, lines in doc.blocks:
        start = 0
        for i, line in enumerate(lines + [""]):
            if line.strip() == "":
                para = lines[start:i]
                m = re.match(r"([a-z_]+):", para[0]) if para else None
                if m and m.group(1) in keys.top:
                    out.append((first + start, para))
                start = i + 1
    return out


def test_config_keys_exist(config_keys):
    keys = Keys(config_keys)
    problems = []
    for doc in manual():
        for n, span in doc.spans:
            p = span_problems(keys, span)
            if p:
                problems.append(f"{doc.name}:{n}: {p}")
        for first, lines in config_examples(doc, keys):
            problems += example_problems(keys, lines, first, doc.name)
    assert not problems, "\n".join(problems)


# ---------------------------------------------------------------- metrics

def exported_families():
    """{family name: is a histogram}, from the calls in src/ that register them."""
    families = {}
    for src in (ROOT / "src").rglob("*.cc"):
        text = src.read_text()
        for m in re.finditer(r'\b(counter_family|gauge_family|histogram_family|plain_counter|plain_gauge)\(\s*'
                             r'[^,()"]+,\s*"(tcpscope_\w+)"', text):
            families[m.group(2)] = m.group(1) == "histogram_family"
        for m in re.finditer(r'Build(Counter|Gauge|Histogram|Summary)\(\)\s*\.Name\(\s*"(tcpscope_\w+)"', text):
            families[m.group(2)] = m.group(1) in ("Histogram", "Summary")
        for m in re.finditer(r'\.name\s*=\s*"(tcpscope_\w+)"', text):
            families[m.group(1)] = False
        for m in re.finditer(r'MetricHistogram\{\s*"(tcpscope_\w+)"', text):
            families[m.group(1)] = True  # built by the aggregator through metric_histogram()
    return families


def code_identifiers():
    """tcpscope_* names the code defines that are not metrics."""
    names = set()
    for d in ("include", "bpf", "src", "tests"):
        for f in (ROOT / d).rglob("*"):
            if f.suffix in (".h", ".c", ".cc"):
                names.update(re.findall(r"\b(?:struct|enum|union)\s+(tcpscope_\w+)", f.read_text(errors="replace")))
    for f in [ROOT / "CMakeLists.txt", *ROOT.glob("cmake/*.cmake"), *ROOT.glob("packaging/cpack/*.cmake"),
              *ROOT.glob("*/**/CMakeLists.txt")]:
        names.update(re.findall(r"\b(?:function|macro|add_executable|add_library|add_custom_target)\(\s*(tcpscope_\w+)",
                                f.read_text()))
    return names


def test_metrics_are_exported():
    families = exported_families()
    assert {"tcpscope_flows_total", "tcpscope_flow_completion_seconds", "tcpscope_records_lost_total",
            "tcpscope_http_rejected_total", "tcpscope_kafka_records_total"} <= set(families), \
        f"the registrations were not found in src/: {sorted(families)}"
    series = set(families)
    for name, histogram in families.items():
        if histogram:
            series |= {name + "_bucket", name + "_sum", name + "_count"}
    identifiers = code_identifiers()
    problems = []
    docs = manual() + [Doc(p) for p in MONITORING]
    for doc in docs:
        text = doc.text if doc.path not in MONITORING else doc.path.read_text()
        for m in re.finditer(r"(?<![\w:])tcpscope_(\w*)(\*?)", text):
            name = "tcpscope_" + m.group(1)
            where = f"{doc.name}:{text.count(chr(10), 0, m.start()) + 1}"
            if re.match(r"\d", m.group(1)) or name in identifiers:
                continue  # tcpscope_0.1.0_amd64.deb; struct tcpscope_flow_event, tcpscope_stage()
            if name.endswith("_") or m.group(2):
                if not any(s.startswith(name) for s in series):
                    problems.append(f"{where}: no metric starts with {name}")
            elif name not in series:
                problems.append(f"{where}: {name} is no metric the daemon exports")
    assert not problems, "\n".join(problems)
