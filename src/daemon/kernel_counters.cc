#include "daemon/kernel_counters.h"

namespace tcpscope {

namespace {

// Every program's recursion misses, and the state changes neither
// state-change program saw: skips of the first copy the nested one did not
// pick up (an interrupt in the kernel's bookkeeping just before the first
// copy marks its CPU busy or just after it clears the mark). Most are
// intermediate states that cost nothing; a missed first or last transition
// costs the record, so they are exported on their own rather than guessed
// into the records lost. Skips of the nested copy itself cost nothing: it is
// only skipped while it checks an event the first copy has handled.
void sample_recursion(const FlowProbe& probe, DaemonHealth& self) {
  uint64_t first_copy_misses = 0;
  for (const auto& [program, misses] : probe.recursion_misses()) {
    self.set_recursion_misses(program, misses);
    if (program == "on_state_change") first_copy_misses = misses;
  }
  // Read after the misses: a skip counted there is already caught here.
  const uint64_t caught = probe.counter(TCPSCOPE_CNT_NESTED_TRANSITIONS);
  self.set_state_changes_missed(first_copy_misses > caught ? first_copy_misses - caught : 0);
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
