// `tcpscope compare --prometheus URL`: the samples from the fleet's
// histograms in a Prometheus-compatible query API (Prometheus, Thanos, Mimir,
// VictoriaMetrics: GET /api/v1/query). Per arm one instant query,
//
//   sum by (le, <by>[, size_class]) (increase(<histogram>_bucket{<matchers>}[<range>]))
//
// evaluated at --time (default: the server's now): the buckets' increase
// over the range, summed across every host. Each group's cumulative `le`
// series become bucket counts, and each arm an ArmDistribution::binned, so
// the statistics know that a value is only known to its bucket (see
// compare_stats.h: no verdict finer than the buckets).
//
// Metric and unit -> histogram (the daemon's, aggregator.cc):
//   fct per transfer        tcpscope_transfer_seconds{direction="send"}
//   fct per flow            tcpscope_flow_completion_seconds
//   throughput per transfer tcpscope_transfer_throughput_bytes_per_second
//   throughput per flow     tcpscope_flow_throughput_bytes_per_second
//   rtt                     tcpscope_srtt_seconds
//   retrans                 none (a ratio per flow has no histogram)
// Seconds become microseconds, compare's unit (metric_unit(); throughput is
// bytes/s in both).
//
// Only the histograms' labels can select and group: peer_class, asn, cc and,
// for fct, size_class. asn holds the daemon's top-N ASNs by number and
// folds the rest into "other".
//
// Credentials: Basic auth from the URL's USER:PASSWORD@ only, never
// TCPSCOPE_BASIC_AUTH (the daemon's password is not the query API's).
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "compare/compare.h"
#include "compare/compare_source.h"

namespace tcpscope {

constexpr const char* kPrometheusQueryPath = "/api/v1/query";

struct PrometheusHistogram {
  std::string name;      // without _bucket
  std::string matchers;  // fixed ones, e.g. direction="send"
  double scale = 1;      // bucket bound -> compare's value unit
  std::vector<std::string> labels;  // those selections and --by may name
};

// The histogram for a metric and unit, or nullopt and *why.
std::optional<PrometheusHistogram> prometheus_histogram(Measure m, SampleUnit u, std::string* why);

// A PromQL string literal: "text" with \, " and control characters escaped.
std::string promql_string(const std::string& text);
// `value` as a regular expression matching exactly that text (RE2 syntax).
std::string regex_escape(const std::string& value);

// One arm's query (see the top of this file). False and *why when the
// selection or --by names a label the histogram lacks.
bool prometheus_arm_query(const PrometheusHistogram& h, const Selection& arm, const std::string& by,
                          bool by_size_class, int64_t range_ms, std::string* query, std::string* why);

// "1500ms", "90s", "5m", "1h", "7d" -> milliseconds; nullopt when malformed
// or not positive. Milliseconds let a range start and end on scrapes, where
// increase() does not extrapolate.
std::optional<int64_t> parse_range_ms(const std::string& text);
// RFC 3339 ("2026-11-25T10:00:00Z", "...+01:00", fractions) or unix seconds
// ("1764064800", "1764064800.5") -> unix seconds; nullopt when malformed.
std::optional<double> parse_query_time(const std::string& text);

// One instant-query answer: per group (by label value, size class) the
// cumulative bucket counts by upper bound. False and *why on a malformed
// answer or an answer with "status": "error".
using PrometheusBuckets = std::map<std::pair<std::string, std::string>, std::map<double, double>>;
bool parse_prometheus_vector(const std::string& body, const std::string& by, bool by_size_class,
                             PrometheusBuckets* out, std::string* why);

// Cumulative counts by upper bound (the last +Inf) -> bucket counts: the
// running maximum (increase() of separately extrapolated series can dip),
// each cumulative value rounded to the nearest integer, then differences.
// False and *why when there is no +Inf bucket.
bool bucket_counts(const std::map<double, double>& cumulative, std::vector<double>* upper_bounds,
                   std::vector<uint64_t>* counts, std::string* why);

struct PrometheusOptions {
  std::string base_url;
  int64_t range_ms = 3600000;
  std::optional<double> time;  // unix seconds; none: the server's now
  int timeout_ms = 10000;
  // For fct: size classes starting at or above throughput_min_bytes are not
  // in compare's fct population (their objects are judged by throughput).
  MetricOptions metric_options;
};

class PrometheusSource : public CompareSource {
 public:
  explicit PrometheusSource(PrometheusOptions options);
  std::string description() const override;
  bool collect(const CompareOptions& options, const Selection& a, const Selection& b, CompareSamples* out,
               std::string* error) override;

 private:
  bool query(const std::string& promql, std::string* body, std::string* error) const;
  PrometheusOptions options_;
};

}  // namespace tcpscope
