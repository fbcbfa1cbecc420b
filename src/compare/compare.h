// `tcpscope compare`: per group, the two arms' quantiles, the relative change
// of the median with its 95 % interval, a rank test, FDR-adjusted q-values
// and a verdict (statistics in compare_stats.h); rendered as a terminal
// table or as the JSON document SPEC.md fixes.
//
// The samples come from a source (compare_source.h): a flow log (exact
// values), a daemon's sketches (values within the sketch's relative
// accuracy) or Prometheus histograms (values known to their bucket only);
// everything from here on is the same for every source.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "compare/compare_quantiles.h"
#include "compare/compare_stats.h"
#include "measure/measure.h"

namespace tcpscope {

struct CompareOptions {
  Measure metric = Measure::kFct;
  // What a sample is. The CLI's default is default_unit(metric); here it is
  // flow so that a caller naming only the metric gets what it always got.
  SampleUnit unit = SampleUnit::kFlow;
  std::string by = "peer_class";  // a record field, "size_class" or "all"
  std::string a, b;               // selection texts (measure/selection.h)
  double alpha = 0.05;            // false discovery rate for verdicts
  uint64_t min_sample = 20;       // samples (flows or transfers) per arm below which: insufficient data
  uint32_t resamples = 10000;     // bootstrap resamples per group
  uint64_t seed = 1;              // mixed with each group's name
  size_t top = 0;                 // report only the first N groups (by flows); 0 = all
  std::vector<ReportedQuantile> quantiles = default_quantiles();  // per arm, ascending
  MetricOptions metric_options;
};

// One group's two samples, before statistics.
struct GroupSamples {
  std::string group;
  std::optional<std::string> size_class;  // only when the metric is split by size class
  uint32_t size_class_order = 0;          // for sorting rows
  ArmDistribution a, b;
};

// A source's answer (CompareSource::collect): the samples and what the
// report says about them.
struct CompareSamples {
  std::vector<GroupSamples> groups;
  // The size classes and the throughput threshold the samples were taken
  // with (the flow log: the config given; a daemon: its own).
  MetricOptions metric_options;
  std::vector<std::string> size_classes;  // their names, in order
  std::vector<std::string> notes;         // about the data (counts read, coverage, warnings)
};

// One of CompareOptions::quantiles in one arm.
struct ArmQuantile {
  // None when the arm holds fewer than the quantile's min_count values.
  std::optional<double> value;
  // Binned samples (histograms): the bucket the quantile lies in; value is
  // that bucket's representative point.
  std::optional<BucketBounds> bucket;
};

struct ArmSummary {
  uint64_t n = 0;
  double mean = 0;
  std::vector<ArmQuantile> quantiles;  // one per CompareOptions::quantiles, in its order
};

struct GroupResult {
  std::string group;
  std::optional<std::string> size_class;
  ArmSummary a, b;
  MedianChange change;
  std::optional<double> p_value, q_value;
  double prob_b_better = 0.5;  // P(a random B flow beats a random A flow), ties 1/2
  Verdict verdict = Verdict::kInsufficientData;
  // Sketched samples (--server) whose stated accuracy does not hold for
  // every rank: buckets folded, or values outside the metric's span.
  bool sketch_collapsed = false;
  uint64_t sketch_clamped = 0;
  // Binned samples: why the verdict is no finer than the buckets (the
  // medians lie in the same or adjacent buckets and the bucket-widened
  // interval contains 0), or "" when the buckets did not decide it.
  std::string resolution_note;
};

struct CompareResult {
  CompareOptions options;
  std::string source;               // CompareSource::description(): "flows FILE", "server URL"
  double relative_accuracy = 0;     // 0 for exact data, the sketch's otherwise
  std::vector<std::string> size_classes;  // names in config order (fct)
  uint64_t groups_tested = 0;       // groups with enough data in both arms (BH's m)
  uint64_t groups_total = 0;        // before --top
  std::vector<GroupResult> groups;  // most flows first, size classes in order
  std::vector<std::string> notes;   // printed under the table, "notes" in JSON
};

// Runs the statistics over every group. Groups are ordered by their total
// flow count (all size classes together), then name, then size class.
CompareResult compare_groups(std::vector<GroupSamples> groups, const CompareOptions& options);

// compare_groups over a source's samples, with options.metric_options the
// source's: the result names the source (its description) and its size
// classes, and its notes are the source's followed by compare_groups' own.
CompareResult compare_samples(CompareSamples samples, CompareOptions options, const std::string& source);

// The SPEC.md document: {"metric", "a", "b", "groups": [...]} plus extra
// fields (by, unit: "flow" or "transfer", value_unit: "us", "bit/s" or
// "ratio", size_class, method, fdr_note, min_sample, ...). Values are in
// display_unit(): throughput, held in bytes/s, is reported in bit/s.
nlohmann::ordered_json compare_result_json(const CompareResult& r);
// An aligned table with the method, the FDR control and the minimum sample
// in footnotes.
std::string format_compare_table(const CompareResult& r);

// The footnotes (shared by the table and the JSON's "method" fields).
std::string ci_method_note(const CompareOptions& o);
std::string test_method_note(const CompareOptions& o);
std::string fdr_note(const CompareResult& r);
std::string min_sample_note(const CompareOptions& o);
std::string share_statistic_note();
std::string bucket_resolution_note();
std::string quantile_note(const CompareOptions& o);

}  // namespace tcpscope
