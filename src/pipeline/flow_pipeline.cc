#include "pipeline/flow_pipeline.h"

#include "enrich/service_names.h"
#include "record/transfer_decoder.h"

namespace tcpscope {

template <class Record>
void FlowPipeline::enrich_and_name(Record* record, uint32_t rule_tag, uint8_t arm_tag) {
  lookups_ += static_cast<uint64_t>(enricher_.enrich(record->raddr, &record->enrichment));
  rule_names_.name(rule_tag, arm_tag, &record->enrichment);
  if (services_)
    record->enrichment.service = services_->owner_of(record->socket.sock_cgroup_id, record->socket.task_cgroup_id);
}

FlowRecord FlowPipeline::record_of(const tcpscope_flow_event& ev) {
  FlowRecord flow = decode_flow_event(ev, clock_);
  enrich_and_name(&flow, ev.cc_rule, ev.arm);
  return flow;
}

TransferRecord FlowPipeline::record_of(const tcpscope_transfer_event& ev) {
  TransferRecord transfer = decode_transfer_event(ev, clock_, sends_);
  enrich_and_name(&transfer, ev.cc_rule, ev.arm);
  return transfer;
}

TransferRecord FlowPipeline::record_of(const tcpscope_transfer_event& ev, const FlowRecord& flow) const {
  TransferRecord transfer = decode_transfer_event(ev, clock_, sends_);
  transfer.enrichment = flow.enrichment;
  return transfer;
}

}  // namespace tcpscope
