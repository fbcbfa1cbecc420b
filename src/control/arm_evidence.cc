#include "control/arm_evidence.h"

#include <cmath>
#include <exception>

#include <nlohmann/json.hpp>

#include "compare/compare_metric.h"
#include "record/flow_record.h"
#include "record/transfer_record.h"

namespace tcpscope {

namespace {

FlowSketch sketch_for(CompareMetric m) {
  const MetricSpan span = metric_sketch_span(m);
  return FlowSketch(FlowSketch::kDefaultRelativeAccuracy, 0, span.lo, span.hi);
}

}  // namespace

const char* objective_name(Objective o) { return o == Objective::kFct ? "fct" : "throughput"; }

ArmEvidence::ArmEvidence()
    : fct_sketch_(sketch_for(CompareMetric::kFct)), throughput_sketch_(sketch_for(CompareMetric::kThroughput)) {}

void ArmEvidence::add_transfer(const TransferRecord& t, uint64_t throughput_min_bytes) {
  if (t.direction != TransferDirection::kSend || t.xfer_us <= 0) return;
  ++transfers_;
  if (t.bytes < throughput_min_bytes) {
    const double seconds = static_cast<double>(t.xfer_us) * 1e-6;
    fct_.add(seconds);
    fct_sketch_.add(seconds);
  } else if (!t.rwnd_limited()) {
    const double rate = t.throughput_bytes_per_second();
    throughput_.add(rate);
    throughput_sketch_.add(rate);
  }
  if (t.min_rtt_us > 0 && t.srtt_us > 0)
    inflation_.add(static_cast<double>(t.srtt_us) / static_cast<double>(t.min_rtt_us));
}

void ArmEvidence::add_flow(const FlowRecord& f) {
  if (f.segs_out) retrans_.add(f.retrans_segs, f.segs_out);
}

void ArmEvidence::merge(const ArmEvidence& o) {
  transfers_ += o.transfers_;
  fct_.merge(o.fct_);
  throughput_.merge(o.throughput_);
  inflation_.merge(o.inflation_);
  retrans_.add(o.retrans_.events, o.retrans_.trials);
  fct_sketch_.merge(o.fct_sketch_);
  throughput_sketch_.merge(o.throughput_sketch_);
}

nlohmann::json ArmEvidence::to_json() const {
  return {{"transfers", transfers_},
          {"fct", tcpscope::to_json(fct_)},
          {"throughput", tcpscope::to_json(throughput_)},
          {"rtt_inflation", tcpscope::to_json(inflation_)},
          {"retrans", tcpscope::to_json(retrans_)},
          {"fct_sketch", fct_sketch_.to_json()},
          {"throughput_sketch", throughput_sketch_.to_json()}};
}

bool ArmEvidence::from_json(const nlohmann::json& j, ArmEvidence* out) {
  try {
    ArmEvidence e;
    if (!j.is_object() || !j.at("transfers").is_number_unsigned()) return false;
    e.transfers_ = j.at("transfers").get<uint64_t>();
    if (!tcpscope::from_json(j.at("fct"), &e.fct_) || !tcpscope::from_json(j.at("throughput"), &e.throughput_) ||
        !tcpscope::from_json(j.at("rtt_inflation"), &e.inflation_) ||
        !tcpscope::from_json(j.at("retrans"), &e.retrans_))
      return false;
    e.fct_sketch_ = FlowSketch::from_json(j.at("fct_sketch"));
    e.throughput_sketch_ = FlowSketch::from_json(j.at("throughput_sketch"));
    *out = std::move(e);
    return true;
  } catch (const std::exception&) {
    return false;
  }
}

}  // namespace tcpscope
