// The kernel side's counters into the daemon's own metrics: records the
// kernel lost and recursion misses; the ring buffer's fill, the records
// read and the enrichment lookups made.
#pragma once

#include "export/daemon_health.h"
#include "kernel/flow_probe.h"
#include "kernel/ring_reader.h"
#include "pipeline/flow_pipeline.h"

namespace tcpscope {

// What the daemon counts itself (no system call): every tick.
void sample_ring_counters(const RingReader& ring, const FlowPipeline& pipeline, DaemonHealth& self);
// What the kernel counts (a system call per program or map): less often.
void sample_kernel_counters(const FlowProbe& probe, DaemonHealth& self);

}  // namespace tcpscope
