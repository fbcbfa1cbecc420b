#include "pipeline/flow_pipeline.h"

namespace tcpscope {

FlowRecord FlowPipeline::record_of(const tcpscope_flow_event& ev) {
  FlowRecord flow = decode_flow_event(ev, clock_);
  lookups_ += static_cast<uint64_t>(enricher_.enrich(&flow));
  rule_names_.name_flow(ev.cc_rule, ev.arm, &flow);
  return flow;
}

}  // namespace tcpscope
