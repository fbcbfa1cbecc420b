#include "compare/daemon_source.h"

#include <stdexcept>

#include <nlohmann/json.hpp>

#include "measure/flow_sketch.h"
#include "measure/size_class.h"
#include "net/http_client.h"
#include "text/unit_text.h"
#include "text/url_query.h"

namespace tcpscope {

namespace {

std::string seconds_text(double s) {
  return unit_text(s, {{120, 1, 0, " s"}, {7200, 60, 0, " min"}, {kRestOfValues, 3600, 1, " h"}});
}

}  // namespace

std::string distributions_target(const CompareOptions& o) {
  std::string target = std::string(kDistributionsPath) + "?metric=" + url_encode(to_string(o.metric));
  if (o.unit != SampleUnit::kFlow) target += "&unit=" + url_encode(to_string(o.unit));
  return target + "&by=" + url_encode(o.by) + "&a=" + url_encode(o.a) + "&b=" + url_encode(o.b);
}

bool parse_distributions_response(const std::string& body, ServerScan* out, std::string* error) {
  const nlohmann::json j = nlohmann::json::parse(body, nullptr, /*allow_exceptions=*/false);
  if (!j.is_object()) {
    *error = "answer is not a JSON object";
    return false;
  }
  try {
    ServerScan s;
    // A daemon from before format versions names none: format 1.
    s.format_version = j.value("format_version", 1);
    if (s.format_version < 1 || s.format_version > kDistributionsFormatVersion) {
      *error = "the daemon answered in distributions format " + std::to_string(s.format_version) +
               "; this tcpscope compare reads formats 1 to " + std::to_string(kDistributionsFormatVersion) +
               " (use the tcpscope compare of the daemon's version)";
      return false;
    }
    const std::string metric_name = j.at("metric").get<std::string>();
    const auto metric = parse_measure(metric_name);
    if (!metric) {
      *error = "malformed answer: unknown metric \"" + metric_name + "\"";
      return false;
    }
    // Format 1 sketched throughput in bit/s.
    const double to_metric_unit = s.format_version == 1 && *metric == Measure::kThroughput ? 1.0 / 8 : 1.0;
    // A daemon from before transfers names no unit: its sketches are of flows.
    const std::string unit_name = j.value("unit", std::string("flow"));
    const auto unit = parse_sample_unit(unit_name);
    if (!unit) {
      *error = "malformed answer: unknown unit \"" + unit_name + "\"";
      return false;
    }
    s.unit = *unit;
    const std::string units = unit_plural(s.unit);
    s.relative_accuracy = j.at("relative_accuracy").get<double>();
    s.window_s = j.at("window_s").get<double>();
    s.covers_s = j.at("covers_s").get<double>();
    s.size_classes = j.at("size_classes").get<std::vector<std::string>>();
    s.size_classes_bytes = j.at("size_classes_bytes").get<std::vector<uint64_t>>();
    s.throughput_min_bytes = j.at("throughput_min_bytes").get<uint64_t>();
    s.dropped = j.value("dropped_" + units, uint64_t{0});
    s.folded = j.value("folded_" + units, uint64_t{0});
    for (const auto& g : j.at("groups")) {
      GroupSamples gs;
      gs.group = g.at("group").get<std::string>();
      if (!g.at("size_class").is_null()) gs.size_class = g.at("size_class").get<std::string>();
      gs.size_class_order = g.value("size_class_order", 0u);
      gs.a = ArmDistribution::from_sketch(FlowSketch::from_json(g.at("a"))).scaled(to_metric_unit);
      gs.b = ArmDistribution::from_sketch(FlowSketch::from_json(g.at("b"))).scaled(to_metric_unit);
      s.groups.push_back(std::move(gs));
    }
    *out = std::move(s);
    return true;
  } catch (const nlohmann::json::exception& e) {
    *error = std::string("malformed answer: ") + e.what();
  } catch (const std::invalid_argument& e) {
    *error = std::string("malformed answer: ") + e.what();
  }
  return false;
}

bool query_server(const std::string& base_url, const CompareOptions& options, int timeout_ms, ServerScan* out,
                  std::string* error) {
  const std::string url = join_url(base_url, distributions_target(options));
  const std::string shown = redact_url(url);
  HttpResponse resp;
  if (!http_get(url, timeout_ms, &resp, error)) return false;
  if (resp.status == 404) {
    *error = "GET " + shown + ": 404: the daemon at " + redact_url(base_url) + " does not serve " +
             kDistributionsPath + " (a tcpscope without --server support?)";
    return false;
  }
  if (resp.status == 401) {
    *error = "GET " + shown + ": 401: the daemon wants credentials: give --server http://USER:PASSWORD@HOST:PORT "
             "or set TCPSCOPE_BASIC_AUTH=USER:PASSWORD";
    return false;
  }
  if (resp.status != 200) {
    std::string reason = resp.body;
    const nlohmann::json j = nlohmann::json::parse(resp.body, nullptr, false);
    if (j.is_object() && j.contains("error") && j["error"].is_string()) reason = j["error"].get<std::string>();
    while (!reason.empty() && (reason.back() == '\n' || reason.back() == '\r')) reason.pop_back();
    if (options.unit != SampleUnit::kFlow && reason.find("unknown query parameter \"unit\"") != std::string::npos)
      reason += ": a daemon from before transfers (--unit flow compares its flows)";
    *error = "GET " + shown + ": " + std::to_string(resp.status) + ": " + reason;
    return false;
  }
  std::string why;
  if (!parse_distributions_response(resp.body, out, &why)) {
    *error = "GET " + shown + ": " + why;
    return false;
  }
  if (out->unit != options.unit) {
    *error = "GET " + shown + ": the daemon answered with " + unit_plural(out->unit) + ", not " +
             unit_plural(options.unit);
    return false;
  }
  return true;
}

namespace {

// The daemon applies the selections itself, from their text in options.
bool collect_from_daemon(const std::string& base_url, int timeout_ms, const CompareOptions& options,
                         const Selection& a, const Selection& b, CompareSamples* out, std::string* error) {
  ServerScan scan;
  if (!query_server(base_url, options, timeout_ms, &scan, error)) return false;
  CompareSamples s;
  s.groups = std::move(scan.groups);
  s.metric_options.size_classes_bytes = scan.size_classes_bytes;
  s.metric_options.throughput_min_bytes = scan.throughput_min_bytes;
  s.size_classes = size_class_names(scan.size_classes_bytes);
  const std::string acc = percent_text(scan.relative_accuracy, kShortestDecimals);
  const std::string units = unit_plural(scan.unit);
  s.notes.push_back("server: sketches of the " + units + " of the last " + seconds_text(scan.covers_s) + " (window " +
                    seconds_text(scan.window_s) + "); quantiles are within " + acc +
                    " of the exact order statistics, and the rank test treats values in the same " + acc +
                    " bucket as ties.");
  if (scan.unit == SampleUnit::kTransfer) s.notes.push_back(kFollowedTransfersNote);
  if (scan.format_version < kDistributionsFormatVersion)
    s.notes.push_back("note: the daemon at " + redact_url(base_url) + " is an older tcpscope (distributions format " +
                      std::to_string(scan.format_version) + ", this compare's is " +
                      std::to_string(kDistributionsFormatVersion) +
                      (options.metric == Measure::kThroughput
                           ? "): its throughput sketches hold bit/s and were converted to bytes/s; the quantiles keep "
                             "their stated accuracy."
                           : ")."));
  if (scan.dropped)
    s.notes.push_back("warning: the daemon dropped " + std::to_string(scan.dropped) + " " + units +
                      " from its distributions (key table full).");
  if (scan.folded)
    s.notes.push_back("warning: the daemon's key table was full, so " + std::to_string(scan.folded) + " " + units +
                      " of ASNs first seen after that are counted under asn \"other\" instead of their own "
                      "ASN: groups and selections by asn hold fewer " + units + " than the flow log's (other "
                      "fields are unaffected).");
  // The sketches label services as the metrics do (aggregate/flow_distributions.h).
  if (options.by == "service" || a.uses("service") || b.uses("service"))
    s.notes.push_back("service: the daemon labels only its top-N services by name and counts the rest under "
                      "service \"other\", so groups and selections by service hold fewer " + units +
                      " than the flow log's.");
  *out = std::move(s);
  return true;
}

}  // namespace

DaemonSource::DaemonSource(const std::string& base_url, int timeout_ms)
    : FunctionSource("server " + redact_url(base_url),
                     [base_url, timeout_ms](const CompareOptions& options, const Selection& a, const Selection& b,
                                            CompareSamples* out, std::string* error) {
                       return collect_from_daemon(base_url, timeout_ms, options, a, b, out, error);
                     }) {}

}  // namespace tcpscope
