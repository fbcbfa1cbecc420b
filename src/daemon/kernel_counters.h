// The kernel side's counters into the daemon's own metrics, every tick:
// records the kernel lost, recursion misses, the ring buffer's fill, the
// records read and the enrichment lookups made.
#pragma once

#include "export/daemon_health.h"
#include "kernel/flow_probe.h"
#include "kernel/ring_reader.h"
#include "pipeline/flow_pipeline.h"

namespace tcpscope {

void sample_kernel_counters(const FlowProbe& probe, const RingReader& ring, const FlowPipeline& pipeline,
                            DaemonHealth& self);

}  // namespace tcpscope
