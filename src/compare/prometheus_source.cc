#include "compare/prometheus_source.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <limits>
#include <set>
#include <stdexcept>
#include <string_view>

#include <nlohmann/json.hpp>

#include "compare/char_escapes.h"
#include "measure/size_class.h"
#include "net/http_client.h"
#include "text/url_query.h"

namespace tcpscope {

namespace {

// A fleet's answer is a few hundred series per arm; far more is not a query API.
constexpr size_t kMaxAnswerBytes = 64u << 20;

const std::vector<std::string> kSizedLabels = {"peer_class", "asn", "service", "cc", "size_class"};
const std::vector<std::string> kLabels = {"peer_class", "asn", "service", "cc"};

std::string join(const std::vector<std::string>& v, const char* sep) {
  std::string s;
  for (size_t i = 0; i < v.size(); ++i) s += (i ? sep : "") + v[i];
  return s;
}

std::string label_error(const std::string& field, const PrometheusHistogram& h) {
  return "field \"" + field + "\" is not a label of " + h.name + ": with --prometheus, selections and --by use " +
         join(h.labels, ", ") + " only";
}

// PromQL's spelling of a duration, in the largest unit that divides it.
std::string duration_text(int64_t ms) {
  for (const auto& [unit, n] : std::vector<std::pair<const char*, int64_t>>{
           {"d", 86400000}, {"h", 3600000}, {"m", 60000}, {"s", 1000}})
    if (ms % n == 0) return std::to_string(ms / n) + unit;
  return std::to_string(ms) + "ms";
}

std::string rfc3339(double unix_s) {
  const time_t t = static_cast<time_t>(std::floor(unix_s));
  struct tm tm {};
  gmtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof(buf), "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

// Whether fct's population takes records of `bytes` payload bytes, as far
// as a size class can tell: its terms that weigh bytes against
// throughput_min_bytes (measure/measure.h).
bool fct_takes_bytes(uint64_t bytes, const MetricOptions& mo) {
  MetricInputs in;
  in.bytes = bytes;
  const Population& p = metric_population(Measure::kFct);
  return std::all_of(p.begin(), p.end(), [&](const PopulationTerm& t) {
    const bool by_threshold = t.test == MetricTest::kBelowThroughputMin || t.test == MetricTest::kAtLeastThroughputMin;
    return !by_threshold || term_holds(t, in, mo);
  });
}

}  // namespace

std::optional<PrometheusHistogram> prometheus_histogram(Measure m, SampleUnit u, std::string* why) {
  const auto h = metric_histogram(m, u);
  if (!h) {
    *why = "--metric " + std::string(to_string(m)) +
           " is not available from Prometheus: the daemon keeps no histogram of it (only fleet totals); use --flows "
           "or --server";
    return std::nullopt;
  }
  return PrometheusHistogram{h->name, h->selector, h->metric_per_bucket_unit, h->by_size_class ? kSizedLabels : kLabels};
}

std::string promql_string(const std::string& text) {
  static const CharEscapes kPromqlString{
      {{'\\', "\\\\"}, {'"', "\\\""}, {'\n', "\\n"}, {'\r', "\\r"}, {'\t', "\\t"}}, "\\x%02x", true};
  return "\"" + escape_chars(text, kPromqlString) + "\"";
}

std::string regex_escape(const std::string& value) {
  std::string out;
  for (const char c : value) {
    if (std::string_view("\\.+*?()|[]{}^$").find(c) != std::string_view::npos) out += '\\';
    out += c;
  }
  return out;
}

bool prometheus_arm_query(const PrometheusHistogram& h, const Selection& arm, const std::string& by,
                          bool by_size_class, int64_t range_ms, std::string* query, std::string* why) {
  auto known = [&h](const std::string& f) { return std::find(h.labels.begin(), h.labels.end(), f) != h.labels.end(); };
  std::vector<std::string> matchers;
  if (!h.matchers.empty()) matchers.push_back(h.matchers);
  for (const auto& t : arm.terms()) {
    if (!known(t.field)) {
      *why = label_error(t.field, h);
      return false;
    }
    if (t.values.size() == 1) {
      matchers.push_back(t.field + (t.negate ? "!=" : "=") + promql_string(t.values[0]));
    } else {
      std::vector<std::string> res;
      for (const auto& v : t.values) res.push_back(regex_escape(v));
      matchers.push_back(t.field + (t.negate ? "!~" : "=~") + promql_string(join(res, "|")));
    }
  }
  std::vector<std::string> group_by = {"le"};
  if (by != "all") {
    if (!known(by)) {
      *why = label_error(by, h);
      return false;
    }
    group_by.push_back(by);
  }
  if (by_size_class && by != "size_class") group_by.push_back("size_class");
  const std::string selector = h.name + "_bucket" + (matchers.empty() ? "" : "{" + join(matchers, ", ") + "}");
  *query = "sum by (" + join(group_by, ", ") + ") (increase(" + selector + "[" + duration_text(range_ms) + "]))";
  return true;
}

std::optional<int64_t> parse_range_ms(const std::string& text) {
  const size_t digits = text.find_first_not_of("0123456789");
  if (digits == 0 || digits == std::string::npos || digits > 12) return std::nullopt;
  const std::string suffix = text.substr(digits);
  int64_t unit = 0;
  if (suffix == "ms")
    unit = 1;
  else if (suffix == "s")
    unit = 1000;
  else if (suffix == "m")
    unit = 60000;
  else if (suffix == "h")
    unit = 3600000;
  else if (suffix == "d")
    unit = 86400000;
  else
    return std::nullopt;
  const int64_t n = std::stoll(text.substr(0, digits));
  if (n <= 0 || n > int64_t{3650} * 86400000 / unit) return std::nullopt;
  return n * unit;
}

std::optional<double> parse_query_time(const std::string& text) {
  if (text.empty()) return std::nullopt;
  if (text.find_first_not_of("0123456789.") == std::string::npos) {
    char* end = nullptr;
    const double v = std::strtod(text.c_str(), &end);
    if (*end || !std::isfinite(v)) return std::nullopt;
    return v;
  }
  // YYYY-MM-DDTHH:MM:SS[.frac](Z|+HH:MM|-HH:MM)
  int y, mo, d, h, mi, s, consumed = 0;
  if (std::sscanf(text.c_str(), "%4d-%2d-%2d%*1[Tt ]%2d:%2d:%2d%n", &y, &mo, &d, &h, &mi, &s, &consumed) != 6 ||
      consumed != 19)
    return std::nullopt;
  if (mo < 1 || mo > 12 || d < 1 || d > 31 || h > 23 || mi > 59 || s > 60) return std::nullopt;
  size_t i = 19;
  double frac = 0;
  if (i < text.size() && text[i] == '.') {
    size_t j = i + 1;
    while (j < text.size() && std::isdigit(static_cast<unsigned char>(text[j]))) ++j;
    if (j == i + 1) return std::nullopt;
    frac = std::strtod(text.substr(i, j - i).c_str(), nullptr);
    i = j;
  }
  int64_t offset = 0;
  const std::string zone = text.substr(i);
  if (zone == "Z" || zone == "z") {
    offset = 0;
  } else if (zone.size() == 6 && (zone[0] == '+' || zone[0] == '-') && zone[3] == ':' &&
             std::isdigit(static_cast<unsigned char>(zone[1])) && std::isdigit(static_cast<unsigned char>(zone[2])) &&
             std::isdigit(static_cast<unsigned char>(zone[4])) && std::isdigit(static_cast<unsigned char>(zone[5]))) {
    offset = (std::stoi(zone.substr(1, 2)) * 3600 + std::stoi(zone.substr(4, 2)) * 60) * (zone[0] == '-' ? -1 : 1);
  } else {
    return std::nullopt;
  }
  struct tm tm {};
  tm.tm_year = y - 1900;
  tm.tm_mon = mo - 1;
  tm.tm_mday = d;
  tm.tm_hour = h;
  tm.tm_min = mi;
  tm.tm_sec = s;
  return static_cast<double>(timegm(&tm) - offset) + frac;
}

bool parse_prometheus_vector(const std::string& body, const std::string& by, bool by_size_class,
                             PrometheusBuckets* out, std::string* why) {
  const nlohmann::json j = nlohmann::json::parse(body, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) {
    *why = "answer is not JSON (not a Prometheus query API?)";
    return false;
  }
  if (!j.is_object() || !j.contains("status") || !j["status"].is_string()) {
    *why = "malformed answer: not a Prometheus API response (no \"status\")";
    return false;
  }
  if (j["status"] != "success") {
    const std::string type = j.value("errorType", std::string());
    const std::string error = j.contains("error") && j["error"].is_string() ? j["error"].get<std::string>()
                                                                            : std::string("no reason given");
    *why = "query failed: " + (type.empty() ? "" : type + ": ") + error;
    return false;
  }
  try {
    const auto& data = j.at("data");
    const std::string type = data.at("resultType").get<std::string>();
    if (type != "vector") {
      *why = "malformed answer: resultType \"" + type + "\", not \"vector\"";
      return false;
    }
    const auto& result = data.at("result");
    if (!result.is_array()) {
      *why = "malformed answer: \"result\" is not an array";
      return false;
    }
    PrometheusBuckets buckets;
    for (const auto& series : result) {
      const auto& labels = series.at("metric");
      auto label = [&labels](const std::string& name) {
        return labels.contains(name) ? labels.at(name).get<std::string>() : std::string();
      };
      const std::string le_text = label("le");
      const std::string value_text = series.at("value").at(1).get<std::string>();
      char* end = nullptr;
      const double le = le_text == "+Inf" ? std::numeric_limits<double>::infinity() : std::strtod(le_text.c_str(), &end);
      if (le_text.empty() || (end && *end) || std::isnan(le)) {
        *why = "malformed answer: bucket bound le=\"" + le_text + "\"";
        return false;
      }
      end = nullptr;
      const double value = std::strtod(value_text.c_str(), &end);
      if (value_text.empty() || *end || !std::isfinite(value)) {
        *why = "malformed answer: bucket count \"" + value_text + "\"";
        return false;
      }
      const std::string group = by == "all" ? "all" : label(by);
      const std::string size_class = by_size_class ? label("size_class") : "";
      buckets[{group, size_class}][le] += value;
    }
    *out = std::move(buckets);
    return true;
  } catch (const nlohmann::json::exception& e) {
    *why = std::string("malformed answer: ") + e.what();
  }
  return false;
}

bool bucket_counts(const std::map<double, double>& cumulative, std::vector<double>* upper_bounds,
                   std::vector<uint64_t>* counts, std::string* why) {
  if (cumulative.empty() || !std::isinf(cumulative.rbegin()->first)) {
    *why = "no le=\"+Inf\" bucket";
    return false;
  }
  upper_bounds->clear();
  counts->clear();
  double running = 0;
  uint64_t previous = 0;
  for (const auto& [le, value] : cumulative) {
    running = std::max(running, value);
    const auto rounded = static_cast<uint64_t>(std::llround(running));
    upper_bounds->push_back(le);
    counts->push_back(rounded - previous);
    previous = rounded;
  }
  return true;
}

PrometheusSource::PrometheusSource(PrometheusOptions options) : options_(std::move(options)) {}

std::string PrometheusSource::description() const { return "prometheus " + redact_url(options_.base_url); }

bool PrometheusSource::query(const std::string& promql, std::string* body, std::string* error) const {
  const std::string endpoint = join_url(options_.base_url, kPrometheusQueryPath);
  std::string url = endpoint + "?query=" + url_encode(promql);
  if (options_.time) {
    char t[32];
    std::snprintf(t, sizeof(t), "%.3f", *options_.time);
    url += "&time=" + std::string(t);
  }
  // Messages name the endpoint, not the long encoded query.
  const std::string shown = "GET " + redact_url(endpoint) + ": ";
  HttpResponse resp;
  std::string why;
  if (!http_get(url, options_.timeout_ms, &resp, &why, kMaxAnswerBytes, EnvCredentials::kIgnore)) {
    const std::string full = "GET " + redact_url(url) + ": ";
    *error = shown + (why.rfind(full, 0) == 0 ? why.substr(full.size()) : why);
    return false;
  }
  if (resp.status != 200) {
    // The API's errors are JSON ({"status": "error", "error": ...}); proxies' are not.
    std::string reason;
    const nlohmann::json j = nlohmann::json::parse(resp.body, nullptr, false);
    if (j.is_object() && j.contains("error") && j["error"].is_string()) reason = j["error"].get<std::string>();
    if (resp.status == 401 && reason.empty())
      reason = "the server wants credentials: give --prometheus http://USER:PASSWORD@HOST:PORT";
    if (resp.status == 404 && reason.empty())
      reason = "no " + std::string(kPrometheusQueryPath) + " here: give the URL the query API is under";
    if (reason.empty()) reason = resp.body.substr(0, 200);
    for (char& c : reason)
      if (c == '\n' || c == '\r') c = ' ';
    *error = shown + "HTTP " + std::to_string(resp.status) + (reason.empty() ? "" : ": " + reason);
    return false;
  }
  *body = std::move(resp.body);
  return true;
}

bool PrometheusSource::collect(const CompareOptions& options, const Selection& a, const Selection& b,
                               CompareSamples* out, std::string* error) {
  const auto h = prometheus_histogram(options.metric, options.unit, error);
  if (!h) return false;
  const bool sized = split_by_size_class(options.metric);
  std::string query_a, query_b, why;
  if (!prometheus_arm_query(*h, a, options.by, sized, options_.range_ms, &query_a, &why)) {
    *error = "--a " + a.text() + ": " + why;
    return false;
  }
  if (!prometheus_arm_query(*h, b, options.by, sized, options_.range_ms, &query_b, &why)) {
    *error = "--b " + b.text() + ": " + why;
    return false;
  }
  const std::string shown = "GET " + redact_url(join_url(options_.base_url, kPrometheusQueryPath)) + ": ";
  PrometheusBuckets arms[2];
  for (int i = 0; i < 2; ++i) {
    std::string body;
    if (!query(i ? query_b : query_a, &body, error)) return false;
    if (!parse_prometheus_vector(body, options.by, sized, &arms[i], &why)) {
      *error = shown + why;
      return false;
    }
  }

  CompareSamples s;
  s.metric_options = options_.metric_options;
  const uint64_t tmin = options_.metric_options.throughput_min_bytes;
  std::set<std::pair<std::string, std::string>> keys;
  for (const auto& arm : arms)
    for (const auto& [key, cumulative] : arm) keys.insert(key);
  // Size classes by their lower byte bound; those whose bytes fct's
  // population does not take are left out.
  std::map<std::string, uint64_t> class_lo;
  std::set<std::string> excluded, straddling;
  std::set<uint64_t> bounds;
  for (const auto& [group, size_class] : keys) {
    if (!sized || class_lo.count(size_class)) continue;
    const auto range = size_class_range(size_class);
    class_lo[size_class] = range ? range->first : 0;
    if (!range) continue;
    if (range->first) bounds.insert(range->first);
    if (range->second != UINT64_MAX) bounds.insert(range->second);
    if (!fct_takes_bytes(range->first, options_.metric_options))
      excluded.insert(size_class);
    else if (!fct_takes_bytes(range->second - 1, options_.metric_options))
      straddling.insert(size_class);
  }
  std::vector<std::string> classes;
  for (const auto& [name, lo] : class_lo)
    if (!excluded.count(name)) classes.push_back(name);
  std::stable_sort(classes.begin(), classes.end(),
                   [&](const std::string& x, const std::string& y) { return class_lo[x] < class_lo[y]; });
  for (const auto& [group, size_class] : keys) {
    if (excluded.count(size_class)) continue;
    GroupSamples g;
    g.group = group;
    if (sized) {
      g.size_class = size_class;
      g.size_class_order =
          static_cast<uint32_t>(std::find(classes.begin(), classes.end(), size_class) - classes.begin());
    }
    ArmDistribution* dist[2] = {&g.a, &g.b};
    for (int i = 0; i < 2; ++i) {
      const auto it = arms[i].find({group, size_class});
      if (it == arms[i].end()) continue;
      std::vector<double> upper;
      std::vector<uint64_t> counts;
      const std::string where = std::string(i ? "B" : "A") + " " + (options.by == "all" ? "" : options.by + "=") +
                                group + (sized ? " size_class=" + size_class : "");
      if (!bucket_counts(it->second, &upper, &counts, &why)) {
        *error = shown + "malformed answer: " + where + ": " + why;
        return false;
      }
      for (double& u : upper) u *= h->scale;
      try {
        *dist[i] = ArmDistribution::binned(upper, counts);
      } catch (const std::invalid_argument& e) {
        *error = shown + "malformed answer: " + where + ": " + e.what();
        return false;
      }
    }
    // A group whose buckets did not grow over the range had no samples in it.
    if (!g.a.count() && !g.b.count()) continue;
    s.groups.push_back(std::move(g));
  }
  s.size_classes = classes;
  s.metric_options.size_classes_bytes.assign(bounds.begin(), bounds.end());

  const std::string units = unit_plural(options.unit);
  s.notes.push_back("prometheus: " + h->name + " over the " + duration_text(options_.range_ms) + " ending " +
                    (options_.time ? "at " + rfc3339(*options_.time) : std::string("now")) +
                    ": per arm, sum by le of increase() across every series (every host); counts are the "
                    "increase of each cumulative bucket (made monotone in le) rounded to the nearest integer, "
                    "since increase() extrapolates to the range's ends.");
  if (options.unit == SampleUnit::kTransfer) s.notes.push_back(kFollowedTransfersNote);
  if (!excluded.empty())
    s.notes.push_back("size classes at or above throughput_min_bytes (" + std::to_string(tmin) + " bytes) left out: " +
                      join(std::vector<std::string>(excluded.begin(), excluded.end()), ", ") +
                      " (their " + units + " are compared by throughput).");
  if (!straddling.empty())
    s.notes.push_back("warning: size classes " +
                      join(std::vector<std::string>(straddling.begin(), straddling.end()), ", ") +
                      " reach past throughput_min_bytes (" + std::to_string(tmin) +
                      " bytes): the histogram cannot split them, so they hold " + units +
                      " the flow log's fct would leave out.");
  // The daemons fold values outside each ranking's top-N (pipeline/byte_ranking.h).
  for (const auto& [field, values] : {std::pair{"asn", "ASNs by number"}, std::pair{"service", "services by name"}})
    if (options.by == field || a.uses(field) || b.uses(field))
      s.notes.push_back(std::string(field) + ": the daemons label only their top-N " + values +
                        " and count the rest under " + field + " \"other\", so groups and selections by " + field +
                        " hold fewer " + units + " than the flow log's.");
  *out = std::move(s);
  return true;
}

}  // namespace tcpscope
