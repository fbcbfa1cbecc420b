"""The Grafana dashboard and the Prometheus rules in packaging/: valid for
promtool, their recording rules and alerts compute what they claim
(packaging/prometheus/tcpscope-rules.test.yml), and every PromQL expression
in the dashboard parses and only names metrics tcpscope exports (or the
recording rules define). Needs no root and no network."""
import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
GRAFANA = ROOT / "packaging" / "grafana"
PROMETHEUS = ROOT / "packaging" / "prometheus"
RULES = PROMETHEUS / "tcpscope-rules.yml"
ALERTS = PROMETHEUS / "tcpscope-alerts.yml"
RULE_TESTS = PROMETHEUS / "tcpscope-rules.test.yml"

# PromQL words that are not metric names.
PROMQL_FUNCTIONS = {
    "abs", "absent", "absent_over_time", "avg_over_time", "ceil", "changes", "clamp", "clamp_max", "clamp_min",
    "count_over_time", "day_of_month", "day_of_week", "days_in_month", "delta", "deriv", "exp", "floor",
    "histogram_quantile", "holt_winters", "hour", "idelta", "increase", "irate", "label_join", "label_replace",
    "last_over_time", "ln", "log10", "log2", "max_over_time", "min_over_time", "minute", "month",
    "predict_linear", "present_over_time", "quantile_over_time", "rate", "resets", "round", "scalar", "sgn",
    "sort", "sort_desc", "sqrt", "stddev_over_time", "stdvar_over_time", "sum_over_time", "time", "timestamp",
    "vector", "year",
    # aggregation operators
    "sum", "min", "max", "avg", "group", "stddev", "stdvar", "count", "count_values", "bottomk", "topk", "quantile",
}
PROMQL_KEYWORDS = {"by", "without", "on", "ignoring", "group_left", "group_right", "and", "or", "unless", "bool",
                   "offset", "inf", "nan"}
# Series Prometheus itself provides.
BUILTIN_METRICS = {"up"}


def promtool():
    path = shutil.which("promtool")
    if not path:
        pytest.skip("promtool not installed (Debian package prometheus)")
    return path


def exported_metrics():
    """Metric names the daemon registers, read from the sources: every
    "tcpscope_..." string literal, plus _bucket/_sum/_count for the ones
    built as histograms (by name, through histogram_family(), or named by
    measure/'s metric_histogram(), which the aggregator builds)."""
    names, histograms = set(), set()
    for src in (ROOT / "src").rglob("*.cc"):
        text = src.read_text()
        names.update(re.findall(r'"(tcpscope_[a-z0-9_]+)"', text))
        histograms.update(re.findall(r'BuildHistogram\(\)\s*\.Name\(\s*"(tcpscope_[a-z0-9_]+)"', text))
        histograms.update(re.findall(r'histogram_family\(\s*\w+,\s*"(tcpscope_[a-z0-9_]+)"', text))
        histograms.update(re.findall(r'MetricHistogram\{\s*"(tcpscope_[a-z0-9_]+)"', text))
    for h in histograms:
        names.update({h + "_bucket", h + "_sum", h + "_count"})
    names -= histograms  # a histogram family is only queried through its series
    assert histograms, "no histogram found in src/: the scan is broken"
    return names


def recorded_metrics():
    return set(re.findall(r"^\s*- record:\s*(\S+)\s*$", RULES.read_text(), re.M))


def dashboards():
    files = sorted(GRAFANA.glob("*.json"))
    assert files, "no dashboard in packaging/grafana"
    return [(f, json.loads(f.read_text())) for f in files]


def all_panels(panels):
    for p in panels:
        yield p
        yield from all_panels(p.get("panels", []))


def substitute_grafana_variables(expr):
    """A Grafana query -> plain PromQL: interval macros become durations, other
    variables a value (they only appear inside label matchers)."""
    expr = re.sub(r"\$__(rate_interval|interval|range)\b", "5m", expr)
    expr = re.sub(r"\$\{[a-zA-Z0-9_]+(:[a-z]+)?\}", "x", expr)
    return re.sub(r"\$[a-zA-Z_][a-zA-Z0-9_]*", "x", expr)


def metric_names_in(expr):
    """Identifiers of `expr` that stand for series: strings, label matchers,
    ranges and grouping clauses are removed, functions and keywords skipped."""
    e = re.sub(r'"(?:[^"\\]|\\.)*"', '""', expr)
    e = re.sub(r"\{[^{}]*\}", " ", e)
    e = re.sub(r"\[[^\[\]]*\]", " ", e)
    e = re.sub(r"\b(by|without|on|ignoring|group_left|group_right)\s*\([^()]*\)", " ", e)
    names = set()
    for m in re.finditer(r"(?<![0-9A-Za-z_:.])([A-Za-z_:][A-Za-z0-9_:]*)", e):
        word = m.group(1)
        rest = e[m.end():].lstrip()
        if word in PROMQL_KEYWORDS:
            continue
        if rest.startswith("("):
            assert word in PROMQL_FUNCTIONS, f"unknown PromQL function {word!r} in {expr!r}"
            continue
        names.add(word)
    return names


def dashboard_queries():
    """(where, expr) for every target and every query variable."""
    out = []
    for path, d in dashboards():
        for p in all_panels(d["panels"]):
            for t in p.get("targets", []):
                out.append((f"{path.name}: panel {p.get('title')!r} {t.get('refId')}", t["expr"]))
        for v in d["templating"]["list"]:
            if v["type"] == "query":
                q = v["query"]["query"] if isinstance(v["query"], dict) else v["query"]
                m = re.fullmatch(r"label_values\((.*),\s*([a-z_]+)\)", q)
                assert m, f"{path.name}: variable {v['name']}: unexpected query {q!r}"
                out.append((f"{path.name}: variable {v['name']}", m.group(1)))
    return out


def test_rules_and_alerts_pass_promtool_check():
    r = subprocess.run([promtool(), "check", "rules", str(RULES), str(ALERTS)], capture_output=True, text=True)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "SUCCESS" in r.stdout


def test_recording_rules_and_alerts_compute_what_they_claim():
    r = subprocess.run([promtool(), "test", "rules", RULE_TESTS.name], capture_output=True, text=True,
                       cwd=PROMETHEUS)
    assert r.returncode == 0, r.stdout + r.stderr


def test_rules_use_only_exported_metrics():
    known = exported_metrics() | recorded_metrics() | BUILTIN_METRICS
    for path in (RULES, ALERTS):
        exprs = re.findall(r"^ *expr: *(\|\n(?: {10,}.*\n)+|.*$)", path.read_text(), re.M)
        assert len(exprs) == path.read_text().count("expr:"), path
        for e in exprs:
            assert e.strip() != "|", f"{path.name}: a block expression was not read"
            unknown = metric_names_in(e.lstrip("|")) - known
            assert not unknown, f"{path.name}: {e.strip()!r} uses {sorted(unknown)}"


def test_dashboard_queries_parse_and_name_only_exported_metrics(tmp_path):
    known = exported_metrics() | recorded_metrics() | BUILTIN_METRICS
    queries = dashboard_queries()
    assert len(queries) > 10
    # Syntax: promtool parses each query as the expression of a recording rule.
    lines = ["groups:", "  - name: dashboard-queries", "    rules:"]
    for i, (where, expr) in enumerate(queries):
        plain = substitute_grafana_variables(expr)
        unknown = metric_names_in(plain) - known
        assert not unknown, f"{where}: {expr!r} uses metrics tcpscope does not export: {sorted(unknown)}"
        lines += [f"      - record: dashboard_query_{i}", f"        expr: {json.dumps(plain)}"]
    rules = tmp_path / "dashboard-queries.yml"
    rules.write_text("\n".join(lines) + "\n")
    r = subprocess.run([promtool(), "check", "rules", str(rules)], capture_output=True, text=True)
    assert r.returncode == 0, r.stdout + r.stderr


def test_the_name_check_catches_a_misspelt_metric():
    known = exported_metrics()
    bad = 'histogram_quantile(0.5, sum by (cc, le) (rate(tcpscope_flow_completion_second_bucket{cc="bbr"}[5m])))'
    assert metric_names_in(bad) - known == {"tcpscope_flow_completion_second_bucket"}
    good = bad.replace("second_bucket", "seconds_bucket")
    assert metric_names_in(good) - known == set()


def test_dashboard_is_importable_and_covers_the_ab_panels():
    for path, d in dashboards():
        for key in ("title", "uid", "panels", "templating", "schemaVersion", "time"):
            assert key in d, f"{path.name}: missing {key}"
        assert d["schemaVersion"] >= 36
        assert d.get("id") is None, "an exported id would clash on import"
        panels = list(all_panels(d["panels"]))
        ids = [p["id"] for p in panels]
        assert len(ids) == len(set(ids)), f"{path.name}: duplicate panel ids"
        variables = {v["name"] for v in d["templating"]["list"]}
        for p in panels:
            g = p["gridPos"]
            assert 0 <= g["x"] and g["x"] + g["w"] <= 24, f"{p['title']}: outside the 24-column grid"
            if p["type"] == "row":
                continue
            assert p["datasource"] == {"type": "prometheus", "uid": "${datasource}"}, p["title"]
            for t in p["targets"]:
                for var in re.findall(r"\$(?:\{)?([a-zA-Z_][a-zA-Z0-9_]*)", t["expr"]):
                    assert var.startswith("__") or var in variables, f"{p['title']}: ${var} is not a variable"
        # CUBIC vs BBR per peer class (a repeated row) and per ASN.
        assert any(p["type"] == "row" and p.get("repeat") == "peer_class" for p in panels)
        exprs = " ".join(t["expr"] for p in panels for t in p.get("targets", []))
        # Completion time and throughput per transfer first; whole flows stay.
        for needed in ("tcpscope_transfer_seconds_bucket", "tcpscope_transfer_throughput_bytes_per_second_bucket",
                       "tcpscope_transfers_total", "tcpscope_transfer_throughput_excluded_total",
                       "tcpscope_flow_completion_seconds_bucket", "tcpscope_flow_throughput_bytes_per_second_bucket",
                       "tcpscope_retransmitted_segments_total", "tcpscope_srtt_seconds_bucket",
                       "tcpscope_records_lost_total"):
            assert needed in exprs, f"{path.name}: no panel uses {needed}"
        assert re.search(r"sum by \(cc, size_class, le\) \(rate\(tcpscope_transfer_seconds_bucket", exprs), \
            "transfer time quantiles by size class"
        assert re.search(r"sum by \(cc, size_class, le\)", exprs), "FCT quantiles by size class"
        assert re.search(r"sum by \(asn, cc, le\)", exprs), "quantiles per ASN and CC"
        assert {"cc_a", "cc_b", "peer_class", "asn", "service", "instance"} <= variables
        assert re.search(r"sum by \(service\)", exprs), "traffic by service"
        assert all('service=~"$service"' in t["expr"] for p in panels for t in p.get("targets", [])
                   if 'asn=~"$asn"' in t["expr"]), "every panel filtered by ASN is filtered by service too"
