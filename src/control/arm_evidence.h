// What a controller knows about one arm in one cohort: the objective and the
// guard metrics of the transfers (and flows) the arm carried, as running
// moments for the sequential tests (control/sequential_test.h) and as
// sketches for the medians its decisions are explained with.
//
// Objective (issue "Closed loop", as the CDN study judged): send transfers
// smaller than throughput_min_bytes by their completion time, larger ones by
// their throughput, the ones the receiver's window limited left out (their
// rate is the reader's). Which transfers count and in what unit is the
// transfer unit of the fct and throughput metrics (metric_of() below,
// measure/measure.h): the evidence takes both from there, so its moments and
// sketches hold the same values as `compare --server` and the distributions.
// Guards: the retransmit share of the arm's flows (retrans_segs / segs_out,
// exact at close) and the RTT inflation of its send transfers (srtt /
// min_rtt at their end).
#pragma once

#include <array>
#include <cstdint>

#include <nlohmann/json_fwd.hpp>

#include "control/sequential_test.h"
#include "measure/flow_sketch.h"
#include "measure/measure.h"

namespace tcpscope {

struct FlowRecord;
struct TransferRecord;

enum class Objective { kFct, kThroughput };
constexpr int kObjectiveCount = 2;
const char* objective_name(Objective o);
// Lower is better for completion time, higher for throughput.
inline bool lower_is_better(Objective o) { return o == Objective::kFct; }
// The metric an objective is judged by, per transfer: its population, its
// value and its unit (fct in µs, throughput in bytes/s).
Measure metric_of(Objective o);

class ArmEvidence {
 public:
  ArmEvidence();

  // A send transfer of the arm; receive transfers are the peer's sending.
  void add_transfer(const TransferRecord& t, uint64_t throughput_min_bytes);
  void add_flow(const FlowRecord& f);
  void merge(const ArmEvidence& o);

  // In metric_unit(metric_of(o)).
  const LogMoments& objective(Objective o) const { return objective_[static_cast<int>(o)]; }
  const FlowSketch& sketch(Objective o) const { return sketch_[static_cast<int>(o)]; }
  const LogMoments& rtt_inflation() const { return inflation_; }
  const Proportion& retrans() const { return retrans_; }
  uint64_t transfers() const { return transfers_; }

  nlohmann::json to_json() const;
  // False (and `out` untouched) on anything malformed. `state_version` is
  // the saved state's, whose older units are moved to the metrics' ones:
  //   1: fct in seconds, throughput in bytes/s. The moments are converted;
  //      the sketches, whose fct values were clamped at the span's low end,
  //      are dropped.
  //   2: throughput in bit/s. The moments are converted exactly (a shift of
  //      the log mean); the throughput sketch is dropped, because its
  //      buckets cannot be: 8 is not a whole number of buckets (gamma^k), so
  //      each bit/s bucket straddles two bytes/s ones and moving its count
  //      to either would break the sketch's stated accuracy. The fct sketch
  //      is kept. *dropped_values (when given) counts the values of dropped
  //      sketches, for the caller's log line.
  static bool from_json(const nlohmann::json& j, int state_version, ArmEvidence* out,
                        uint64_t* dropped_values = nullptr);

 private:
  uint64_t transfers_ = 0;                          // send transfers, of any size
  std::array<LogMoments, kObjectiveCount> objective_;  // per Objective, in its metric's unit
  std::array<FlowSketch, kObjectiveCount> sketch_;     // the same values, for medians
  LogMoments inflation_;                             // srtt / min_rtt
  Proportion retrans_;                               // retransmitted segments of segments sent
};

}  // namespace tcpscope
