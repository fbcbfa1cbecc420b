// What a controller knows about one arm in one cohort: the objective and the
// guard metrics of the transfers (and flows) the arm carried, as running
// moments for the sequential tests (control/sequential_test.h) and as
// sketches for the medians its decisions are explained with.
//
// Objective (issue "Closed loop", as the CDN study judged): send transfers
// smaller than throughput_min_bytes by their completion time (xfer_us),
// larger ones by their throughput, the ones the receiver's window limited
// left out (their rate is the reader's). Guards: the retransmit share of the
// arm's flows (retrans_segs / segs_out, exact at close) and the RTT inflation
// of its send transfers (srtt / min_rtt at their end).
#pragma once

#include <cstdint>

#include <nlohmann/json_fwd.hpp>

#include "compare/flow_sketch.h"
#include "control/sequential_test.h"

namespace tcpscope {

struct FlowRecord;
struct TransferRecord;

enum class Objective { kFct, kThroughput };
constexpr int kObjectiveCount = 2;
const char* objective_name(Objective o);
// Lower is better for completion time, higher for throughput.
inline bool lower_is_better(Objective o) { return o == Objective::kFct; }

class ArmEvidence {
 public:
  ArmEvidence();

  // A send transfer of the arm; receive transfers are the peer's sending.
  void add_transfer(const TransferRecord& t, uint64_t throughput_min_bytes);
  void add_flow(const FlowRecord& f);
  void merge(const ArmEvidence& o);

  const LogMoments& objective(Objective o) const { return o == Objective::kFct ? fct_ : throughput_; }
  const FlowSketch& sketch(Objective o) const { return o == Objective::kFct ? fct_sketch_ : throughput_sketch_; }
  const LogMoments& rtt_inflation() const { return inflation_; }
  const Proportion& retrans() const { return retrans_; }
  uint64_t transfers() const { return transfers_; }

  nlohmann::json to_json() const;
  // False (and `out` untouched) on anything malformed.
  static bool from_json(const nlohmann::json& j, ArmEvidence* out);

 private:
  uint64_t transfers_ = 0;  // send transfers, of any size
  LogMoments fct_;          // seconds
  LogMoments throughput_;   // bytes per second
  LogMoments inflation_;    // srtt / min_rtt
  Proportion retrans_;      // retransmitted segments of segments sent
  FlowSketch fct_sketch_, throughput_sketch_;
};

}  // namespace tcpscope
