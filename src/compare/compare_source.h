// Where `tcpscope compare` takes its samples from. A source answers one
// comparison's question (metric, grouping, the A and B selections) with the
// two arms' samples of every group, and says what the report should tell
// about them; everything after that (statistics, table, JSON, plot) is the
// same for every source.
//
// Sources: the flow log (flow_log_source.h: exact values, any record field),
// a running daemon's sketches (daemon_source.h: log-bucketed, within the
// sketch's relative accuracy, the fields the daemon keeps), the fleet's
// records in ClickHouse (clickhouse_source.h: the sketches' buckets, any
// record field) and the fleet's Prometheus histograms (prometheus_source.h:
// bucket counts only, the histograms' labels). Another source is one more
// implementation of CompareSource; `tcpscope compare` only chooses which one
// its options name.
#pragma once

#include <functional>
#include <string>
#include <utility>

#include "compare/compare.h"
#include "measure/selection.h"

namespace tcpscope {

// What the daemon's and Prometheus's transfer distributions hold (the
// records' own sources say their sampling_rate instead).
inline constexpr char kFollowedTransfersNote[] =
    "transfers: those of the flows the kernel follows (one in transfer_sampling_rate, and every flow an "
    "experiment or controller assigns), each counted once: the quantiles stand for every transfer, the counts "
    "are the sample's.";

class CompareSource {
 public:
  virtual ~CompareSource() = default;

  // The report's "source": "flows FILE", "server URL" (no credentials).
  virtual std::string description() const = 0;

  // Fills *out with the samples for `options` (metric, by, a, b; a and b
  // are its selections, parsed) and the source's notes. False and *error
  // ("FILE: reason", "GET URL: reason") when the data cannot be read.
  virtual bool collect(const CompareOptions& options, const Selection& a, const Selection& b, CompareSamples* out,
                       std::string* error) = 0;
};

// A source that is its description and one function answering collect():
// the sources whose only state is what they were made with (a file and the
// size classes, a URL and a timeout).
class FunctionSource : public CompareSource {
 public:
  using Collect = std::function<bool(const CompareOptions& options, const Selection& a, const Selection& b,
                                     CompareSamples* out, std::string* error)>;
  FunctionSource(std::string description, Collect collect)
      : description_(std::move(description)), collect_(std::move(collect)) {}
  std::string description() const override { return description_; }
  bool collect(const CompareOptions& options, const Selection& a, const Selection& b, CompareSamples* out,
               std::string* error) override {
    return collect_(options, a, b, out, error);
  }

 private:
  std::string description_;
  Collect collect_;
};

}  // namespace tcpscope
