// `tcpscope compare --flows FILE`: the exact samples, from a flow log
// (NDJSON as the daemon writes it, plain or gzip-compressed, "-" = stdin).
// The options' unit says which lines count: "kind": "transfer" lines for
// transfers; "kind": "flow" lines, and lines without a kind (logs from
// before transfers), for flows. Selections and --by read the line's own
// fields, so a transfer has cc, peer_class, asn, arm, dir, direction, ...
// but no outcome or bytes_acked.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "compare/compare.h"
#include "compare/compare_source.h"
#include "measure/selection.h"

namespace tcpscope {

class FlatRecord;  // flow_log_source.cc: the allocation-free reader of flat log lines

struct FlowLogScan {
  uint64_t lines = 0;
  uint64_t malformed = 0;    // not a JSON object (e.g. a line cut by a crash)
  uint64_t records = 0;      // records of the compared unit
  uint64_t other_unit = 0;   // records of the other unit (skipped)
  uint64_t unknown_kind = 0; // a "kind" that is neither (skipped)
  uint64_t matched_a = 0;    // records in A with a value for the metric
  uint64_t matched_b = 0;
  uint64_t matched_both = 0; // in both selections: counted in both arms
  bool truncated = false;    // a gzip stream that ends early (still being written?)
  // Transfer lines' sampling_rate, smallest and largest seen (1 when none
  // says). When they differ, only the flows the largest rate keeps count:
  // `thinned` values were left out for that.
  uint32_t min_sampling_rate = 0, max_sampling_rate = 0;
  uint64_t thinned = 0;
  std::vector<GroupSamples> groups;
};

// Groups the records of the options' unit in the log that match A or B and have a value for the
// metric. False and *error ("FILE: reason") when the file cannot be read.
bool scan_flow_log(const std::string& path, const CompareOptions& options, const Selection& a,
                   const Selection& b, FlowLogScan* out, std::string* error);

// The same over lines handed in one by one (tests, other sources).
class FlowLogCollector {
 public:
  FlowLogCollector(const CompareOptions& options, const Selection& a, const Selection& b);
  ~FlowLogCollector();
  FlowLogCollector(const FlowLogCollector&) = delete;
  FlowLogCollector& operator=(const FlowLogCollector&) = delete;
  // One line of the log (without its newline); blank lines are ignored.
  void add_line(std::string_view line);
  FlowLogScan finish();

 private:
  template <class Access>
  void add_record(const Access& record);

  struct Arms {
    std::vector<double> a, b;
    // Transfers: each value's sampling_level, to bring mixed rates to one.
    std::vector<uint8_t> a_level, b_level;
  };
  const CompareOptions& options_;
  const Selection& a_;
  const Selection& b_;
  std::vector<std::string> size_class_names_;
  std::map<std::pair<std::string, uint32_t>, Arms> slots_;  // (group, size class index) -> values
  std::unique_ptr<FlatRecord> flat_;  // reused for every line
  const std::string unknown_ = "?";
  FlowLogScan scan_;
};

// The flow log as a compare source: scan_flow_log with the size classes and
// the throughput threshold given (--config, --size-classes,
// --throughput-min-bytes), its counts and warnings as notes.
// Its description is "flows PATH".
class FlowLogSource : public FunctionSource {
 public:
  FlowLogSource(const std::string& path, const MetricOptions& metric_options);
};

}  // namespace tcpscope
