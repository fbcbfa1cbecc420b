// The one step from the kernel's record to the record every output sees:
// decode it (units, the realtime clock), enrich it (peer class, ASN, the
// service that owns the socket), and name the rule that chose its
// congestion control. Finished flows (from the
// ring buffer) and open flows (from a snapshot) both go through it, so the
// flow log, the metrics and /api/v1/flows describe a flow the same way; the
// transfers of a flow (from the ring buffer) are enriched and named by the
// same code, so a transfer carries its flow's peer class, ASN and rule.
//
// The daemon's loop thread is its only caller.
#pragma once

#include <cstdint>

#include "enrich/enricher.h"
#include "policy/rule_names.h"
#include "record/flow_decoder.h"
#include "record/flow_record.h"
#include "record/transfer_record.h"
#include "tcpscope/flow_event.h"

namespace tcpscope {

class ServiceNames;

class FlowPipeline {
 public:
  // All must outlive the pipeline; `clock` is refreshed by its owner.
  // `sends`: how the kernel delimits send transfers (kernel/record_coverage.h).
  // `services`: null where no cgroup v2 is mounted (every owner unknown).
  FlowPipeline(const MonotonicToRealtime& clock, const Enricher& enricher, const RuleNames& rule_names,
               TransferDelimiter sends, ServiceNames* services = nullptr)
      : clock_(clock), enricher_(enricher), rule_names_(rule_names), sends_(sends), services_(services) {}

  FlowRecord record_of(const tcpscope_flow_event& ev);
  TransferRecord record_of(const tcpscope_transfer_event& ev);
  // A transfer handed over with its flow's record (at close): same socket,
  // same peer, same rule, so it takes the flow's enrichment instead of
  // looking it up again.
  TransferRecord record_of(const tcpscope_transfer_event& ev, const FlowRecord& flow) const;

  // Peer class and ASN lookups made so far (tcpscope_enrichment_lookups_total).
  uint64_t lookups() const { return lookups_; }

 private:
  // Enriches a decoded record and names its rule from the kernel's tags.
  template <class Record>
  void enrich_and_name(Record* record, uint32_t rule_tag, uint8_t arm_tag);

  const MonotonicToRealtime& clock_;
  const Enricher& enricher_;
  const RuleNames& rule_names_;
  const TransferDelimiter sends_;
  ServiceNames* const services_;
  uint64_t lookups_ = 0;
};

}  // namespace tcpscope
