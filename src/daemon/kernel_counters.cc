#include "daemon/kernel_counters.h"

namespace tcpscope {

namespace {

// Every program's recursion misses, and the state changes the state-change
// program skipped among them. Each of those is made up later (bpf/flow.bpf.c,
// on_state_change: a close at the socket's destruction, a handshake at the
// next state change), so they cost no record; they are exported on their
// own because what is made up later is less exact (docs/records.md).
void sample_recursion(const FlowProbe& probe, DaemonHealth& self) {
  for (const auto& [program, misses] : probe.recursion_misses()) {
    self.set_recursion_misses(program, misses);
    if (program == "on_state_change") self.set_state_changes_missed(misses);
  }
}

}  // namespace

void sample_kernel_counters(const FlowProbe& probe, const RingReader& ring, const FlowPipeline& pipeline,
                            DaemonHealth& self) {
  // A socket whose storage could not be created is never tracked: its record is lost too.
  self.set_records_lost(probe.counter(TCPSCOPE_CNT_RECORDS_LOST) + probe.counter(TCPSCOPE_CNT_STORAGE_FAILED));
  self.set_transfer_records_lost(probe.counter(TCPSCOPE_CNT_TRANSFERS_LOST));
  sample_recursion(probe, self);
  self.set_ring_buffer_fill(ring.fill_ratio());
  self.set_records(ring.records());
  self.set_transfer_records(ring.transfers());
  self.set_enrichment_lookups(pipeline.lookups());
}

}  // namespace tcpscope
