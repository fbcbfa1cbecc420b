#include "control/arm_evidence.h"

#include <cmath>
#include <exception>
#include <string>

#include <nlohmann/json.hpp>

#include "measure/measure.h"
#include "record/flow_record.h"
#include "record/transfer_record.h"

namespace tcpscope {

namespace {

constexpr Objective kObjectives[] = {Objective::kFct, Objective::kThroughput};

FlowSketch sketch_for(Measure m) {
  const MetricSpan span = metric_sketch_span(m);
  return FlowSketch(FlowSketch::kDefaultRelativeAccuracy, 0, span.lo, span.hi);
}

// What a value of an older saved state is multiplied by to be in the
// metric's unit: version 1 kept fct in seconds, version 2 throughput in bit/s.
double saved_state_scale(Objective o, int state_version) {
  if (state_version == 1 && o == Objective::kFct) return 1e6;          // s -> µs
  if (state_version == 2 && o == Objective::kThroughput) return 1.0 / 8;  // bit/s -> bytes/s
  return 1;
}

// Whether the saved state's sketch of `o` is in the metric's unit (see from_json).
bool sketch_kept(Objective o, int state_version) {
  return state_version >= 3 || (state_version == 2 && o == Objective::kFct);
}

}  // namespace

const char* objective_name(Objective o) { return o == Objective::kFct ? "fct" : "throughput"; }

Measure metric_of(Objective o) { return o == Objective::kFct ? Measure::kFct : Measure::kThroughput; }

ArmEvidence::ArmEvidence()
    : sketch_{sketch_for(metric_of(Objective::kFct)), sketch_for(metric_of(Objective::kThroughput))} {}

void ArmEvidence::add_transfer(const TransferRecord& t, uint64_t throughput_min_bytes) {
  if (t.direction != TransferDirection::kSend || t.xfer_us <= 0) return;
  ++transfers_;
  const MetricInputs in = metric_inputs(t);
  MetricOptions opts;
  opts.throughput_min_bytes = throughput_min_bytes;
  for (Objective o : kObjectives) {
    if (const auto v = metric_value(metric_of(o), in, opts)) {
      objective_[static_cast<int>(o)].add(*v);
      sketch_[static_cast<int>(o)].add(*v);
    }
  }
  if (t.min_rtt_us > 0 && t.srtt_us > 0)
    inflation_.add(static_cast<double>(t.srtt_us) / static_cast<double>(t.min_rtt_us));
}

void ArmEvidence::add_flow(const FlowRecord& f) {
  if (f.segs_out) retrans_.add(f.retrans_segs, f.segs_out);
}

void ArmEvidence::merge(const ArmEvidence& o) {
  transfers_ += o.transfers_;
  for (int i = 0; i < kObjectiveCount; ++i) {
    objective_[i].merge(o.objective_[i]);
    sketch_[i].merge(o.sketch_[i]);
  }
  inflation_.merge(o.inflation_);
  retrans_.add(o.retrans_.events, o.retrans_.trials);
}

nlohmann::json ArmEvidence::to_json() const {
  return {{"transfers", transfers_},
          {"fct", tcpscope::to_json(objective(Objective::kFct))},
          {"throughput", tcpscope::to_json(objective(Objective::kThroughput))},
          {"rtt_inflation", tcpscope::to_json(inflation_)},
          {"retrans", tcpscope::to_json(retrans_)},
          {"fct_sketch", sketch(Objective::kFct).to_json()},
          {"throughput_sketch", sketch(Objective::kThroughput).to_json()}};
}

bool ArmEvidence::from_json(const nlohmann::json& j, int state_version, ArmEvidence* out,
                            uint64_t* dropped_values) {
  try {
    ArmEvidence e;
    if (!j.is_object() || !j.at("transfers").is_number_unsigned()) return false;
    e.transfers_ = j.at("transfers").get<uint64_t>();
    for (Objective o : kObjectives) {
      const std::string name = objective_name(o);
      LogMoments& m = e.objective_[static_cast<int>(o)];
      if (!tcpscope::from_json(j.at(name), &m)) return false;
      // The moments are of log values: a change of unit shifts the mean only.
      if (m.n) m.mean += std::log(saved_state_scale(o, state_version));
      if (state_version == 1) continue;  // no sketches yet worth keeping
      const FlowSketch saved = FlowSketch::from_json(j.at(name + "_sketch"));
      if (sketch_kept(o, state_version))
        e.sketch_[static_cast<int>(o)] = saved;
      else if (dropped_values)
        *dropped_values += saved.count();
    }
    if (!tcpscope::from_json(j.at("rtt_inflation"), &e.inflation_) || !tcpscope::from_json(j.at("retrans"), &e.retrans_))
      return false;
    *out = std::move(e);
    return true;
  } catch (const std::exception&) {
    return false;
  }
}

}  // namespace tcpscope
