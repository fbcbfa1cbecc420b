#include "cli/compare_command.h"

#include <fcntl.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <functional>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <tuple>
#include <vector>

#include "cli/command_line.h"
#include "compare/clickhouse_source.h"
#include "compare/compare.h"
#include "compare/compare_source.h"
#include "compare/daemon_source.h"
#include "compare/flow_log_source.h"
#include "compare/metric_text.h"
#include "compare/prometheus_source.h"
#include "compare/svg_plot.h"
#include "config/config.h"
#include "measure/selection.h"
#include "os/congestion_controls.h"
#include "os/owned_file.h"
#include "text/json_text.h"
#include "text/unit_text.h"

namespace tcpscope {

const char* const kCompareUsage =
    "usage: tcpscope compare (--flows FILE | --server URL | --clickhouse URL | --prometheus URL)\n"
    "                        --a SEL --b SEL\n"
    "                        [--by FIELD] [--metric fct|throughput|rtt|retrans] [--unit transfer|flow]\n"
    "                        [--quantiles 50,90,99] [--json] [--plot FILE.svg]\n"
    "                        [--config FILE] [--size-classes B1,B2,..] [--throughput-min-bytes N]\n"
    "                        [--alpha 0.05] [--min-sample 20] [--resamples 10000] [--seed 1] [--top N]\n"
    "                        [--timeout-ms 10000] [--range 1h] [--time RFC3339|UNIX]\n"
    "  SEL: FIELD=VALUE[|VALUE..][,FIELD=VALUE..] (or FIELD!=VALUE), e.g. cc=cubic, cc=bbr,peer_class=client\n"
    "  --flows FILE   NDJSON flow log, plain or gzip, - for stdin: exact values, any record field\n"
    "  --server URL   a running daemon (e.g. http://127.0.0.1:9810): its sketches of the last 1-2 h,\n"
    "                 quantiles within 1 %; fields peer_class, asn, cc, arm, service, size_class only.\n"
    "                 Basic auth: http://USER:PASSWORD@HOST:PORT or TCPSCOPE_BASIC_AUTH=USER:PASSWORD\n"
    "  --clickhouse URL  the fleet's records in ClickHouse (export.kafka, /usr/share/tcpscope/clickhouse),\n"
    "                 e.g. http://USER:PASSWORD@clickhouse:8123: ClickHouse groups them into 1 % buckets;\n"
    "                 any record field. [--database tcpscope] [--table flows|transfers]\n"
    "                 [--where SEL: must hold in both arms] [--since T] [--until T]: T is a duration back\n"
    "                 from now (30m, 24h, 7d), unix seconds or 2026-11-25T10:00:00Z, on the record's end_ns\n"
    "  --prometheus URL  a Prometheus-compatible query API (Prometheus, Thanos, Mimir, VictoriaMetrics):\n"
    "                 the fleet's histograms, their increase over --range (ms, s, m, h, d; default 1h) ending\n"
    "                 at --time (default now); values known to their bucket only, no verdict finer than\n"
    "                 the buckets; fields peer_class, asn, cc, service (and size_class for fct) only; no retrans\n"
    "                 Basic auth: http://USER:PASSWORD@HOST:PORT (not TCPSCOPE_BASIC_AUTH, the daemon's)\n"
    "  --unit U       transfer: each run of data in one direction of a connection (the default for fct\n"
    "                 and throughput; throughput counts send transfers the receiver's window did not limit);\n"
    "                 flow: whole connections (the default, and the only unit, for rtt and retrans)\n"
    "  --by FIELD     group by a record field (asn, peer_class, service, cc, arm, ...), size_class, or all\n"
    "                 (default peer_class); fct is always split by size class as well\n"
    "  --config FILE  size classes and throughput_min_bytes for --flows and --clickhouse (default: the\n"
    "                 built-in config); --prometheus: throughput_min_bytes, the size classes fct leaves out\n"
    "  --quantiles P,..  percentages in (0, 100) to report per arm (default 50,90,99), e.g.\n"
    "                 50,90,99,99.9,99.99: exact order statistics from --flows, within 1 % from --server and\n"
    "                 --clickhouse, the bucket they lie in from --prometheus; an arm of fewer than\n"
    "                 1/(1 - q) samples has none (p99.9 needs 1000, p99.99 10000): n/a, null in JSON\n"
    "  --plot FILE    CDFs of A and B per group, the quantiles marked: FILE.svg, or FILE.png through\n"
    "                 rsvg-convert (librsvg2-bin)\n";

namespace {

constexpr size_t kMaxPlotPanels = 36;

struct Args {
  std::string flows, server, clickhouse, prometheus, plot, config;
  std::string database = "tcpscope", table, where, since, until;  // --clickhouse
  std::string range, time;                                         // --prometheus
  std::string metric = "fct";
  std::string unit;  // "": the metric's default_unit()
  std::string size_classes;
  std::optional<uint64_t> throughput_min_bytes;
  bool json = false;
  int timeout_ms = 10000;
  // What the statistics take from the command line (--a, --b, --by, --alpha,
  // ...), parsed into them directly; metric and unit once they are valid.
  CompareOptions compare;
};

// Returns an error message, or "" when the arguments are fine.
std::string parse_args(const std::vector<std::string>& args, Args* a) {
  CommandLine cl;
  cl.flag("--json", &a->json)
      .option("--flows", &a->flows)
      .option("--server", &a->server)
      .option("--clickhouse", &a->clickhouse)
      .option("--database", &a->database)
      .option("--table", &a->table)
      .option("--where", &a->where)
      .option("--since", &a->since)
      .option("--until", &a->until)
      .option("--prometheus", &a->prometheus)
      .option("--range", &a->range)
      .option("--time", &a->time)
      .option("--a", &a->compare.a)
      .option("--b", &a->compare.b)
      .option("--by", &a->compare.by)
      .option("--metric", &a->metric)
      .option("--unit", &a->unit)
      .option("--plot", &a->plot)
      .option("--config", &a->config)
      .option("--size-classes", &a->size_classes)
      .option("--alpha", [a](const std::string& v) -> std::string {
        char* end = nullptr;
        a->compare.alpha = std::strtod(v.c_str(), &end);
        if (end == v.c_str() || *end || !(a->compare.alpha > 0 && a->compare.alpha < 1))
          return "--alpha wants a number in (0, 1), got \"" + v + "\"";
        return "";
      })
      .option("--quantiles", [a](const std::string& v) -> std::string {
        std::string why;
        auto q = parse_quantiles(v, &why);
        if (!q) return why;
        a->compare.quantiles = std::move(*q);
        return "";
      });
  auto integer = [&cl](const std::string& spelling, uint64_t lo, uint64_t hi, std::function<void(uint64_t)> set) {
    const std::string wants = "an integer in [" + std::to_string(lo) + ", " + std::to_string(hi) + "]";
    cl.count_option(spelling, 19, lo, hi, wants, std::move(set));
  };
  integer("--throughput-min-bytes", 1, 1000000000000ULL, [a](uint64_t n) { a->throughput_min_bytes = n; });
  integer("--min-sample", 2, 1000000000, [a](uint64_t n) { a->compare.min_sample = n; });
  integer("--resamples", 100, 1000000, [a](uint64_t n) { a->compare.resamples = static_cast<uint32_t>(n); });
  integer("--seed", 0, UINT64_MAX / 2, [a](uint64_t n) { a->compare.seed = n; });
  integer("--top", 1, 1000000, [a](uint64_t n) { a->compare.top = n; });
  integer("--timeout-ms", 1, 3600000, [a](uint64_t n) { a->timeout_ms = static_cast<int>(n); });
  if (const auto error = cl.parse(args)) return error->message;
  const int sources = !a->flows.empty() + !a->server.empty() + !a->clickhouse.empty() + !a->prometheus.empty();
  if (sources != 1) return "give exactly one of --flows FILE, --server URL, --clickhouse URL and --prometheus URL";
  if (a->clickhouse.empty() && (!a->table.empty() || !a->where.empty() || !a->since.empty() || !a->until.empty() ||
                                a->database != "tcpscope"))
    return "--database, --table, --where, --since and --until apply to --clickhouse";
  if (!a->clickhouse.empty()) {
    for (const std::string* name : {&a->database, &a->table})
      if (name->find_first_of("`\\") != std::string::npos || (name == &a->database && name->empty()))
        return "--database and --table want a plain name, not \"" + *name + "\"";
  }
  if (a->prometheus.empty() && (!a->range.empty() || !a->time.empty()))
    return "--range and --time apply to --prometheus";
  if (!a->range.empty() && !parse_range_ms(a->range))
    return "--range wants a positive duration with a unit ms, s, m, h or d (e.g. 90s, 5m, 1h, 7d), not \"" + a->range +
           "\"";
  if (!a->time.empty() && !parse_query_time(a->time))
    return "--time wants RFC 3339 (2026-11-25T10:00:00Z) or unix seconds, not \"" + a->time + "\"";
  if (a->compare.a.empty() || a->compare.b.empty()) return "--a SEL and --b SEL are both required (e.g. --a cc=cubic --b cc=bbr)";
  if (a->compare.by != "all" && !valid_field_name(a->compare.by)) return "--by \"" + a->compare.by + "\" is not a field name";
  const auto metric = parse_measure(a->metric);
  if (!metric) return "--metric must be fct, throughput, rtt or retrans, not \"" + a->metric + "\"";
  a->compare.metric = *metric;
  a->compare.unit = default_unit(*metric);
  if (!a->unit.empty()) {
    const auto unit = parse_sample_unit(a->unit);
    if (!unit) return "--unit must be transfer or flow, not \"" + a->unit + "\"";
    if (const std::string why = unit_unsupported_reason(*metric, *unit); !why.empty())
      return "--unit " + a->unit + ": " + why;
    a->compare.unit = *unit;
  }
  if (!a->plot.empty()) {
    const size_t dot = a->plot.rfind('.');
    const std::string ext = dot == std::string::npos ? "" : a->plot.substr(dot);
    if (ext != ".svg" && ext != ".png") return "--plot wants FILE.svg or FILE.png, not \"" + a->plot + "\"";
  }
  return "";
}

// --since/--until: a duration back from now (90s, 30m, 24h, 7d), unix
// seconds, or an RFC 3339 time (2026-11-25T10:00:00Z).
bool parse_time_ns(const std::string& text, int64_t now_ns, int64_t* out, std::string* why) {
  if (const auto ms = parse_range_ms(text)) {
    *out = now_ns - *ms * 1000000;
    return true;
  }
  if (const auto s = parse_query_time(text)) {
    *out = static_cast<int64_t>(*s * 1e9);
    return true;
  }
  *why = "\"" + text + "\" is not a duration (30m, 24h, 7d), unix seconds or a time like 2026-11-25T10:00:00Z";
  return false;
}

bool parse_size_classes(const std::string& text, std::vector<uint64_t>* out, std::string* why) {
  out->clear();
  size_t start = 0;
  while (start <= text.size()) {
    size_t comma = text.find(',', start);
    const std::string part = text.substr(start, comma == std::string::npos ? std::string::npos : comma - start);
    uint64_t v = 0;
    if (!parse_decimal(part, 19, &v) || v == 0 || (!out->empty() && v <= out->back())) {
      *why = "--size-classes wants increasing positive byte counts, e.g. 100000,1000000,3000000";
      return false;
    }
    out->push_back(v);
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  return true;
}

// Puts the finished `tmp` in the place of `path` in one step, so a reader
// never sees a half-written file; on failure `tmp` is removed.
bool replace_with(const std::string& tmp, const std::string& path, std::string* error) {
  if (std::rename(tmp.c_str(), path.c_str()) == 0) return true;
  *error = path + ": " + strerror(errno);
  std::remove(tmp.c_str());
  return false;
}

bool write_file_atomically(const std::string& path, const std::string& data, std::string* error) {
  const std::string tmp = path + ".tmp";
  const int fd = open_owned_file(tmp, OwnedFileMode::kTruncate, error);
  if (fd < 0) return false;
  FILE* f = fdopen(fd, "w");
  if (!f) {
    *error = tmp + ": " + strerror(errno);
    ::close(fd);
    return false;
  }
  const bool ok = std::fwrite(data.data(), 1, data.size(), f) == data.size();
  const int werr = errno;
  if (std::fclose(f) != 0 || !ok) {
    *error = tmp + ": " + strerror(ok ? errno : werr);
    std::remove(tmp.c_str());
    return false;
  }
  return replace_with(tmp, path, error);
}

// Runs `rsvg-convert -f png SVG` into PNG (through a file opened as
// write_file_atomically's, so rsvg-convert never opens the path itself); its
// stderr goes to ours.
bool svg_to_png(const std::string& svg, const std::string& png, std::string* error) {
  const std::string tmp = png + ".tmp";
  const int fd = open_owned_file(tmp, OwnedFileMode::kTruncate, error);
  if (fd < 0) return false;
  std::vector<std::string> argv_s = {"rsvg-convert", "-f", "png", svg};
  std::vector<char*> argv;
  for (auto& a : argv_s) argv.push_back(a.data());
  argv.push_back(nullptr);
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_adddup2(&actions, fd, STDOUT_FILENO);
  pid_t pid = 0;
  const int rc = posix_spawnp(&pid, "rsvg-convert", &actions, nullptr, argv.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  ::close(fd);
  if (rc != 0) {
    *error = rc == ENOENT ? "PNG output needs rsvg-convert (apt-get install librsvg2-bin); or write FILE.svg"
                          : std::string("cannot run rsvg-convert: ") + strerror(rc);
    std::remove(tmp.c_str());
    return false;
  }
  int status = 0;
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    *error = "rsvg-convert failed to write " + tmp;
    std::remove(tmp.c_str());
    return false;
  }
  return replace_with(tmp, png, error);
}

using PanelKey = std::pair<std::string, std::string>;  // group, size class

// The plot's x axis is in display_unit(m), so that its decade ticks are
// round figures in the unit people read (100Mbit/s, not 800Mbit/s).
CdfCurve display_curve(const ArmDistribution& d, Measure m) {
  CdfCurve c;
  c.points = cdf_points(d.values(), d.cumulative());
  for (auto& point : c.points) point.first *= display_scale(m);
  c.n = d.count();
  return c;
}

std::map<PanelKey, std::pair<CdfCurve, CdfCurve>> curves_of(const std::vector<GroupSamples>& groups, Measure m) {
  std::map<PanelKey, std::pair<CdfCurve, CdfCurve>> out;
  for (const auto& g : groups) out[{g.group, g.size_class.value_or("")}] = {display_curve(g.a, m), display_curve(g.b, m)};
  return out;
}

bool write_plot(const std::string& path, const CompareResult& r,
                std::map<PanelKey, std::pair<CdfCurve, CdfCurve>> curves, std::string* error) {
  const CompareOptions& o = r.options;
  std::vector<CdfPanel> panels;
  for (const auto& g : r.groups) {
    if (panels.size() >= kMaxPlotPanels) break;
    if (!g.a.n && !g.b.n) continue;
    CdfPanel p;
    p.title = (o.by == "all" ? std::string() : o.by + " ") + g.group + (g.size_class ? " " + *g.size_class : "");
    p.subtitle = std::string(g.change.statistic == ChangeStatistic::kShareNonzero ? "diff of share>0 " : "diff ") +
                 (g.change.diff ? percent_change_text(*g.change.diff) : std::string("-"));
    if (g.change.lo && g.change.hi)
      p.subtitle += " [" + percent_change_text(*g.change.lo) + ", " + percent_change_text(*g.change.hi) + "]";
    p.subtitle += "   " + std::string(to_string(g.verdict));
    auto& c = curves[{g.group, g.size_class.value_or("")}];
    p.a = std::move(c.first);
    p.b = std::move(c.second);
    p.a.label = "A: " + o.a;
    p.b.label = "B: " + o.b;
    for (const auto& [curve, arm, name] : {std::tuple{&p.a, &g.a, "A "}, std::tuple{&p.b, &g.b, "B "}}) {
      for (size_t i = 0; i < o.quantiles.size(); ++i) {
        const ReportedQuantile& q = o.quantiles[i];
        if (const auto& v = arm->quantiles[i].value)
          curve->marks.push_back({q.key, q.q, *v * display_scale(o.metric),
                                  name + q.key + " = " + format_metric_value(o.metric, *v)});
      }
    }
    panels.push_back(std::move(p));
  }
  CdfPlotOptions po;
  po.title = std::string(to_string(o.metric)) + " per " + to_string(o.unit) + ": A " + o.a + " vs B " + o.b +
             " by " + o.by + " (" + r.source + ")";
  po.x_label = metric_axis_label(o.metric, o.unit);
  std::string keys;
  for (const ReportedQuantile& q : o.quantiles) keys += (keys.empty() ? "" : ", ") + q.key;
  po.note = "dots: " + keys + " (where an arm holds them)";
  const Measure m = o.metric;
  po.format_x = [m](double x) { return format_metric_tick(m, x / display_scale(m)); };
  const std::string svg = render_cdf_svg(panels, po);
  const bool png = path.size() > 4 && path.compare(path.size() - 4, 4, ".png") == 0;
  if (!png) return write_file_atomically(path, svg, error);
  // PNG: rasterized by rsvg-convert (Debian librsvg2-bin) when it is
  // installed; tcpscope itself only draws SVG.
  const std::string svg_tmp = path + ".svg.tmp";
  if (!write_file_atomically(svg_tmp, svg, error)) return false;
  const bool ok = svg_to_png(svg_tmp, path, error);
  std::remove(svg_tmp.c_str());
  return ok;
}

}  // namespace

int compare_command(const std::vector<std::string>& argv, std::ostream& out, std::ostream& err) {
  if (argv.size() == 1 && (argv[0] == "--help" || argv[0] == "-h")) {
    out << kCompareUsage;
    return 0;
  }
  Args args;
  if (const std::string why = parse_args(argv, &args); !why.empty()) {
    err << "tcpscope compare: " << why << "\n" << kCompareUsage;
    return 2;
  }
  std::string why;
  const CompareOptions& o = args.compare;
  const auto sel_a = Selection::parse(o.a, &why);
  if (!sel_a) {
    err << "tcpscope compare: --a: " << why << "\n";
    return 2;
  }
  const auto sel_b = Selection::parse(o.b, &why);
  if (!sel_b) {
    err << "tcpscope compare: --b: " << why << "\n";
    return 2;
  }

  // The source the options name; everything after collect() is the same for every source.
  std::unique_ptr<CompareSource> source;
  // Records carry no config: --flows and --clickhouse take the size classes
  // and throughput_min_bytes from it, --prometheus the threshold (which size
  // classes are fct's).
  MetricOptions metric_options;
  if (!args.flows.empty() || !args.clickhouse.empty() || !args.prometheus.empty()) {
    if (!args.config.empty()) {
      std::vector<ConfigError> errors;
      Config cfg = load_config_file(args.config, kernel_congestion_controls(), &errors);
      for (const auto& e : errors) err << e.to_string() << "\n";
      if (!errors.empty()) return 2;
      metric_options.size_classes_bytes = cfg.size_classes_bytes;
      metric_options.throughput_min_bytes = cfg.throughput_min_bytes;
    }
    if (args.throughput_min_bytes) metric_options.throughput_min_bytes = *args.throughput_min_bytes;
  }
  if ((!args.flows.empty() || !args.clickhouse.empty()) && !args.size_classes.empty() &&
      !parse_size_classes(args.size_classes, &metric_options.size_classes_bytes, &why)) {
    err << "tcpscope compare: " << why << "\n";
    return 2;
  }
  if (!args.flows.empty()) {
    source = std::make_unique<FlowLogSource>(args.flows, metric_options);
  } else if (!args.clickhouse.empty()) {
    ClickHouseQuery q;
    q.url = args.clickhouse;
    q.database = args.database;
    q.table = args.table;
    q.timeout_ms = args.timeout_ms;
    if (!args.where.empty()) {
      q.where = Selection::parse(args.where, &why);
      if (!q.where) {
        err << "tcpscope compare: --where: " << why << "\n";
        return 2;
      }
    }
    const int64_t now_ns = static_cast<int64_t>(std::time(nullptr)) * 1000000000;
    if ((!args.since.empty() && !parse_time_ns(args.since, now_ns, &q.since_ns, &why)) ||
        (!args.until.empty() && !parse_time_ns(args.until, now_ns, &q.until_ns, &why))) {
      err << "tcpscope compare: --since/--until: " << why << "\n";
      return 2;
    }
    source = std::make_unique<ClickHouseSource>(std::move(q), metric_options);
  } else if (!args.prometheus.empty()) {
    if (!args.size_classes.empty()) {
      err << "tcpscope compare: --size-classes applies to --flows and --clickhouse; with --prometheus the "
             "histograms' size_class labels decide\n";
      return 2;
    }
    PrometheusOptions p;
    p.base_url = args.prometheus;
    if (!args.range.empty()) p.range_ms = *parse_range_ms(args.range);
    if (!args.time.empty()) p.time = parse_query_time(args.time);
    p.timeout_ms = args.timeout_ms;
    p.metric_options = metric_options;
    source = std::make_unique<PrometheusSource>(std::move(p));
  } else {
    if (!args.config.empty() || !args.size_classes.empty() || args.throughput_min_bytes) {
      err << "tcpscope compare: --config, --size-classes and --throughput-min-bytes apply to --flows, --clickhouse "
             "and --prometheus; with --server the daemon's config decides\n";
      return 2;
    }
    source = std::make_unique<DaemonSource>(args.server, args.timeout_ms);
  }

  CompareSamples samples;
  if (!source->collect(o, *sel_a, *sel_b, &samples, &why)) {
    err << "tcpscope compare: " << why << "\n";
    return 1;
  }
  std::map<PanelKey, std::pair<CdfCurve, CdfCurve>> curves;
  if (!args.plot.empty()) curves = curves_of(samples.groups, o.metric);
  CompareResult result = compare_samples(std::move(samples), o, source->description());

  if (!args.plot.empty()) {
    if (!write_plot(args.plot, result, std::move(curves), &why)) {
      err << "tcpscope compare: --plot: " << why << "\n";
      return 1;
    }
    if (result.groups.size() > kMaxPlotPanels)
      result.notes.push_back("plot: the first " + std::to_string(kMaxPlotPanels) + " groups are drawn.");
  }
  if (args.json)
    out << json_text(compare_result_json(result), 2) << "\n";
  else
    out << format_compare_table(result);
  return 0;
}

}  // namespace tcpscope
