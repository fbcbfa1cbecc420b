// What a controller knows about one arm in one cohort: the objective and the
// guard metrics of the transfers (and flows) the arm carried, as ratios of
// sums over the connections that carried them (control/sequential_test.h:
// a connection is the unit of evidence, since the kernel draws its arm per
// connection), and as sketches for the medians its decisions are explained
// with.
//
// Objective (issue "Closed loop", as the CDN study judged): send transfers
// smaller than throughput_min_bytes by their completion time, larger ones by
// their throughput, the ones the receiver's window limited left out (their
// rate is the reader's). Which transfers count and in what unit is the
// transfer unit of the fct and throughput metrics (metric_of() below,
// measure/measure.h): the evidence takes both from there, so its geometric
// means and sketches hold the same values as `compare --server` and the
// distributions. Guards: the retransmit share of the arm's flows
// (retrans_segs / segs_out, exact at close) and the RTT inflation of its send
// transfers (srtt / min_rtt at their end).
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

// A connection's sums in one ArmEvidence, the cluster it is there. `evidence`
// is that ArmEvidence's id(): sums kept for another one are of another
// cluster, and start again.
struct ConnectionSums {
  uint64_t evidence = 0;
  std::array<ClusterSums, kObjectiveCount> objective;
  ClusterSums inflation;
};

class ArmEvidence {
 public:
  ArmEvidence();  // empty, with an id of its own
  // A copy is evidence of its own, with its own id: the connections' sums
  // kept for the original are not its. A move is the same evidence.
  ArmEvidence(const ArmEvidence& o);
  ArmEvidence& operator=(const ArmEvidence& o);
  ArmEvidence(ArmEvidence&&) = default;
  ArmEvidence& operator=(ArmEvidence&&) = default;

  // A send transfer of the arm, of the connection whose sums these are;
  // receive transfers are the peer's sending.
  void add_transfer(const TransferRecord& t, uint64_t throughput_min_bytes, ConnectionSums* sums);
  // A closed flow: its segments are one cluster of the retransmit share.
  void add_flow(const FlowRecord& f);

  // Of log values in metric_unit(metric_of(o)): ratio() is the mean log
  // value, x the number of transfers, clusters the connections.
  const ClusteredRatio& objective(Objective o) const { return objective_[static_cast<int>(o)]; }
  const FlowSketch& sketch(Objective o) const { return sketch_[static_cast<int>(o)]; }
  const ClusteredRatio& rtt_inflation() const { return inflation_; }  // of log(srtt / min_rtt)
  const ClusteredRatio& retrans() const { return retrans_; }  // retransmitted of sent segments
  uint64_t transfers() const { return transfers_; }
  uint64_t id() const { return id_; }

  nlohmann::json to_json() const;
  // False (and `out` untouched) on anything malformed or out of range. The
  // result has an id of its own.
  static bool from_json(const nlohmann::json& j, ArmEvidence* out);

 private:
  uint64_t id_;
  uint64_t transfers_ = 0;                               // send transfers, of any size
  std::array<ClusteredRatio, kObjectiveCount> objective_;  // per Objective
  std::array<FlowSketch, kObjectiveCount> sketch_;         // the same values, for medians
  ClusteredRatio inflation_;
  ClusteredRatio retrans_;
};

}  // namespace tcpscope
