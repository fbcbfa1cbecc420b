// The measures of flows and transfers (compare --metric): which records count for each (its
// population), its value and unit, in one place so that every reader of
// records picks the same ones: the Prometheus histograms (aggregate/
// aggregator.h), the daemon's sketches (--server mode), the controller's
// evidence (control/arm_evidence.h), and compare's flow-log reader and
// ClickHouse query.
//
// Unit flow (whole connections):
//   fct         fct_us (microseconds) of completed flows (outcome ok, not
//               partial) that moved 0 < bytes < throughput_min_bytes
//               payload bytes (bytes = bytes_acked + bytes_received); compared
//               per size class, because a 10 kB and a 2 MB object finish in
//               different numbers of round trips.
//   throughput  bytes / (fct_us / 1e6), bytes/s, of completed flows with
//               bytes >= throughput_min_bytes: short flows end in slow start
//               and say little about what the path and the CC can carry.
//   rtt         srtt_us (microseconds), the kernel's smoothed RTT at close, of
//               completed flows that moved data and have an RTT sample. Not
//               min_rtt_us: the minimum is the path's propagation delay, which
//               the congestion control cannot change; srtt includes the
//               queueing delay the CC causes, which is what BBR and CUBIC
//               differ in (and what tcpscope_srtt_seconds shows).
//   retrans     retrans_segs / segs_out, per flow, of completed flows that
//               moved data and sent segments. Its median is often 0; the
//               rank test still compares the distributions.
//
// Unit transfer (one run of data in one direction of a connection; the
// default for fct and throughput, see default_unit()): a reused connection
// carries many objects, and its fct_us spans all of them and the idle time
// between, so per-object figures need the transfer.
//
//   fct         xfer_us of send transfers with 0 < bytes <
//               throughput_min_bytes, per size class by the transfer's own
//               bytes: this host's congestion control moved them. Received
//               ones follow the peer's, and a server's requests (a segment
//               each, no time) would pull the quantiles down. The same
//               population as tcpscope_transfer_seconds{direction="send"}.
//   throughput  bytes / (xfer_us / 1e6), bytes/s, of send transfers with
//               bytes >= throughput_min_bytes that the receiver's window did
//               not limit for most of their time (TransferRecord::
//               rwnd_limited): those measure how fast the peer read, and recv
//               transfers end when the last byte arrives, not when the path
//               delivered it to the reader. The same population as
//               tcpscope_transfer_throughput_bytes_per_second.
//   rtt, retrans  not per transfer (unit_unsupported_reason()).
//
// Lower is better for fct, rtt and retrans; higher for throughput.
//
// Values are in one unit per quantity wherever the program holds them (µs,
// bytes/s, ratio: metric_unit()); only text for people (compare's tables,
// its JSON report, its plots) shows throughput in bits/s, the unit network
// rates are quoted in (display_unit(), display_scale(); the text itself is
// compare/metric_text.h's).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace tcpscope {

struct FlowRecord;
struct TransferRecord;

enum class Measure { kFct, kThroughput, kRtt, kRetrans };
constexpr int kMeasureCount = 4;

// What one sample is: a whole connection or one transfer of it.
enum class SampleUnit { kFlow, kTransfer };
constexpr int kSampleUnitCount = 2;

const char* to_string(SampleUnit u);  // "flow", "transfer"
std::optional<SampleUnit> parse_sample_unit(const std::string& name);
// "flows", "transfers": for counts in reports.
const char* unit_plural(SampleUnit u);
// transfer for fct and throughput, flow for rtt and retrans.
SampleUnit default_unit(Measure m);
// Whether `m` is compared per `u`: every metric per flow, fct and
// throughput per transfer.
bool unit_supported(Measure m, SampleUnit u);
// Why not (one line for the CLI and the daemon's 400), or "" when it is.
std::string unit_unsupported_reason(Measure m, SampleUnit u);

const char* to_string(Measure m);
std::optional<Measure> parse_measure(const std::string& name);
// The unit values are held in: "us", "bytes/s", "ratio".
const char* metric_unit(Measure m);
// The unit people read them in: "us", "bit/s", "ratio"; a value in
// metric_unit() times display_scale() (8 for throughput, else 1) is in it.
const char* display_unit(Measure m);
double display_scale(Measure m);
// One line for report headers, e.g. "flow completion time (fct_us) of completed flows below 3000000 bytes".
std::string metric_description(Measure m, SampleUnit u, uint64_t throughput_min_bytes);
bool lower_is_better(Measure m);

// Where size classes and the throughput threshold come from: the config
// (size_classes_bytes, throughput_min_bytes), the same for all modes.
struct MetricOptions {
  std::vector<uint64_t> size_classes_bytes{100000, 1000000, 3000000};
  uint64_t throughput_min_bytes = 3000000;
};

// The fields of a flow or transfer record the metrics read, from a
// FlowRecord or TransferRecord (the daemon) or a flow-log line (compare
// --flows).
struct MetricInputs {
  SampleUnit unit = SampleUnit::kFlow;
  bool ok = false;       // outcome == "ok"; transfers: always (they are records of finished runs)
  bool partial = false;  // opened before the daemon attached
  uint64_t bytes = 0;    // bytes_acked + bytes_received; transfers: bytes
  int64_t fct_us = 0;    // transfers: xfer_us
  uint64_t srtt_us = 0;
  uint64_t retrans_segs = 0;
  uint64_t segs_out = 0;
  // Transfers only.
  bool recv = false;          // direction "recv"
  bool rwnd_limited = false;  // TransferRecord::rwnd_limited()
};

MetricInputs metric_inputs(const FlowRecord& flow);
MetricInputs metric_inputs(const TransferRecord& transfer);

// Which records count for a metric, as data rather than code, so that every
// reader of records (the aggregator, the controller, the daemon's
// distributions, the flow-log reader) evaluates it and the ClickHouse query
// writes it as SQL: one rule, read by all.
//
// A MetricInputs field a population tests or a value reads (kTime: fct_us,
// a transfer's xfer_us).
enum class MetricInput { kOk, kPartial, kRecv, kBytes, kTime, kSrtt, kRetransSegs, kSegsOut, kRwndLimited };
constexpr int kMetricInputCount = 9;
// kTrue / kFalse for the flags, kPositive for the counts; the last two
// compare the input with MetricOptions::throughput_min_bytes.
enum class MetricTest { kTrue, kFalse, kPositive, kBelowThroughputMin, kAtLeastThroughputMin };
constexpr int kMetricTestCount = 5;
static_assert(static_cast<int>(MetricTest::kAtLeastThroughputMin) + 1 == kMetricTestCount);
struct PopulationTerm {
  MetricInput input;
  MetricTest test;
};
// A record is in a population when every term holds.
using Population = std::vector<PopulationTerm>;

// Flows that did their job (outcome ok), with a known start (not partial),
// that moved data: where every metric's population starts, and the
// population of the Prometheus distributions (aggregator.h).
const Population& completed_population();
// The records that count for `m`, per flow and per transfer (the tables
// above; the unit's records fix the inputs they lack, metric_inputs()).
const Population& metric_population(Measure m);
// The input's value as a number (flags 0 or 1).
double input_value(MetricInput i, const MetricInputs& in);
bool term_holds(const PopulationTerm& t, const MetricInputs& in, const MetricOptions& opts);
bool in_population(const Population& p, const MetricInputs& in, const MetricOptions& opts);

// The same rules, evaluated once per record rather than term by term: every
// term that holds for `in` as one bit (term_bit()), so that a population is
// one mask (population_mask()) and a record is in it when it has all of the
// mask's bits. term_holds() stays the definition; the unit test holds the
// two to each other.
using TermBits = uint64_t;
static_assert(kMetricInputCount * kMetricTestCount <= 64, "one bit per (input, test)");
constexpr TermBits term_bit(const PopulationTerm& t) {
  return TermBits{1} << (static_cast<int>(t.input) * kMetricTestCount + static_cast<int>(t.test));
}
TermBits population_mask(const Population& p);
TermBits holding_terms(const MetricInputs& in, const MetricOptions& opts);

// A metric's value: scale * numerator / (denominator / denominator_scale),
// or scale * numerator without a denominator.
struct MetricFormula {
  MetricInput numerator;
  std::optional<MetricInput> denominator;
  double scale = 1;
  double denominator_scale = 1;
};
const MetricFormula& metric_formula(Measure m);

// The record's value for the metric (metric_formula), or nullopt when it
// does not count for it (metric_population, unit_supported).
std::optional<double> metric_value(Measure m, const MetricInputs& in, const MetricOptions& opts);

// A record's metrics, worked out once for all of the daemon's readers of it
// (its Prometheus series and its distributions): whether it is in the
// completed population, the value of each metric that counts it, its bytes
// and its time (kTime), and whether it is a send transfer that only the
// receiver's window keeps out of throughput's population.
struct MetricValues {
  bool completed = false;
  bool throughput_held_by_window = false;
  uint64_t bytes = 0;
  double time = 0;
  std::optional<double> value[kMeasureCount];
};
MetricValues metric_values(const MetricInputs& in, const MetricOptions& opts);

// The realistic range of the metric's values, which the daemon's sketches
// (flow_sketch.h) cover at their stated relative error without collapsing:
// 10 decades each. fct and rtt 1 us to 10^4 s (2.8 h: longer flows are
// counted at 10^4 s), throughput 125 bytes/s to 1.25e12 bytes/s (1 kbit/s
// to 10 Tbit/s), retrans 1e-9 to 10
// (zeros are kept apart, exactly).
// The daemon's Prometheus histogram of a metric and unit
// (docs/metrics.md), the one name the aggregator writes and compare's Prometheus
// source reads: `selector` picks this unit's series of it (transfers: the
// send direction), `metric_per_bucket_unit` converts a bucket bound to the
// metric's unit (seconds to µs: 1e6), and `by_size_class` says whether it
// has a size_class label. nullopt: no histogram (retrans, per flow ratio).
struct MetricHistogram {
  const char* name;
  const char* selector;
  double metric_per_bucket_unit;
  bool by_size_class;
};
std::optional<MetricHistogram> metric_histogram(Measure m, SampleUnit u);
// `v`, in the metric's unit, in its histogram's bucket unit.
double to_bucket_unit(Measure m, double v);

struct MetricSpan {
  double lo, hi;
};
MetricSpan metric_sketch_span(Measure m);

// The version of the daemon's /api/v1/distributions document ("format_version"),
// whose sketches hold values in metric_unit(). 1 (the field absent): throughput
// in bit/s; 2: in bytes/s, with "value_unit".
constexpr int kDistributionsFormatVersion = 2;

// Whether comparisons of this metric are split by size class (only fct).
bool split_by_size_class(Measure m);

}  // namespace tcpscope
