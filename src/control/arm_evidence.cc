#include "control/arm_evidence.h"

#include <atomic>
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

uint64_t next_id() {
  static std::atomic<uint64_t> ids{0};
  return ++ids;
}

// The cluster `sums` is in this evidence (a new one if they were kept for another).
void claim(ConnectionSums* sums, uint64_t evidence) {
  if (sums->evidence != evidence) *sums = ConnectionSums{evidence, {}, {}};
}

}  // namespace

const char* objective_name(Objective o) { return o == Objective::kFct ? "fct" : "throughput"; }

Measure metric_of(Objective o) { return o == Objective::kFct ? Measure::kFct : Measure::kThroughput; }

ArmEvidence::ArmEvidence()
    : id_(next_id()), sketch_{sketch_for(metric_of(Objective::kFct)), sketch_for(metric_of(Objective::kThroughput))} {}

ArmEvidence::ArmEvidence(const ArmEvidence& o)
    : id_(next_id()),
      transfers_(o.transfers_),
      objective_(o.objective_),
      sketch_(o.sketch_),
      inflation_(o.inflation_),
      retrans_(o.retrans_) {}

ArmEvidence& ArmEvidence::operator=(const ArmEvidence& o) {
  if (this != &o) *this = ArmEvidence(o);  // a copy's new id, moved in
  return *this;
}

void ArmEvidence::add_transfer(const TransferRecord& t, uint64_t throughput_min_bytes, ConnectionSums* sums) {
  if (t.direction != TransferDirection::kSend || t.xfer_us <= 0) return;
  claim(sums, id_);
  ++transfers_;
  const MetricInputs in = metric_inputs(t);
  MetricOptions opts;
  opts.throughput_min_bytes = throughput_min_bytes;
  const MetricValues values = metric_values(in, opts);
  for (Objective o : kObjectives) {
    const auto& v = values.value[static_cast<int>(metric_of(o))];
    if (!v || !(*v > 0) || !std::isfinite(*v)) continue;
    const int i = static_cast<int>(o);
    objective_[i].add(&sums->objective[i], std::log(*v), 1);
    sketch_[i].add(*v);
  }
  if (t.min_rtt_us > 0 && t.srtt_us > 0)
    inflation_.add(&sums->inflation, std::log(static_cast<double>(t.srtt_us) / static_cast<double>(t.min_rtt_us)),
                   1);
}

void ArmEvidence::add_flow(const FlowRecord& f) {
  if (f.segs_out) retrans_.add_cluster(f.retrans_segs, f.segs_out);
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

bool ArmEvidence::from_json(const nlohmann::json& j, ArmEvidence* out) {
  try {
    ArmEvidence e;
    if (!j.is_object() || !j.at("transfers").is_number_unsigned()) return false;
    e.transfers_ = j.at("transfers").get<uint64_t>();
    for (Objective o : kObjectives) {
      const int i = static_cast<int>(o);
      const std::string name = objective_name(o);
      if (!tcpscope::from_json(j.at(name), &e.objective_[i])) return false;
      // The sketch must be one this evidence makes: its metric's accuracy
      // and span (its buckets inside that span: FlowSketch::from_json).
      const FlowSketch saved = FlowSketch::from_json(j.at(name + "_sketch"));
      const FlowSketch& shape = e.sketch_[i];
      if (saved.relative_accuracy() != shape.relative_accuracy() || saved.min_value() != shape.min_value() ||
          saved.max_value() != shape.max_value() || saved.max_buckets() != shape.max_buckets())
        return false;
      e.sketch_[i] = saved;
      if (e.objective_[i].x > static_cast<double>(e.transfers_)) return false;
    }
    if (!tcpscope::from_json(j.at("rtt_inflation"), &e.inflation_) || !tcpscope::from_json(j.at("retrans"), &e.retrans_))
      return false;
    if (e.inflation_.x > static_cast<double>(e.transfers_)) return false;
    *out = std::move(e);
    return true;
  } catch (const std::exception&) {
    return false;
  }
}

}  // namespace tcpscope
