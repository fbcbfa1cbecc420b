// The daemon's own health in the same registry as the flow metrics: flow and
// transfer records lost by the kernel, ring buffer fill, records and
// enrichment lookups processed, config reloads, flow-log drops, build
// information.
//
// The daemon samples monotonically growing totals (the kernel's drop counter,
// the ring reader's record count, ...) on its tick; the set_* setters for
// those take the total and advance the Prometheus counter by the difference,
// so a counter never goes backwards even if a source restarts from 0.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>

#include "prometheus_helpers/prometheus_fwd.h"
#include "prometheus_helpers/total_counter.h"

namespace tcpscope {

class DaemonHealth {
 public:
  // tcpscope_build_info{version, libbpf, kernel} is set to 1 here.
  DaemonHealth(std::shared_ptr<prometheus::Registry> registry, const std::string& version,
              const std::string& libbpf_version, const std::string& kernel_release);
  DaemonHealth(const DaemonHealth&) = delete;
  DaemonHealth& operator=(const DaemonHealth&) = delete;

  // tcpscope_records_lost_total from the kernel's cumulative drop count.
  void set_records_lost(uint64_t kernel_total);
  // tcpscope_transfer_records_lost_total, the same for transfer records.
  void set_transfer_records_lost(uint64_t kernel_total);
  // tcpscope_bpf_recursion_misses_total{program}: how often the kernel skipped
  // a program because it was already running on that CPU (cumulative).
  void set_recursion_misses(const std::string& program, uint64_t total);
  // tcpscope_state_changes_missed_total: TCP state changes the state-change program skipped.
  void set_state_changes_missed(uint64_t total);
  // tcpscope_records_total from the ring reader's cumulative (flow) record count.
  void set_records(uint64_t total);
  // tcpscope_transfer_records_total from its cumulative transfer record count.
  void set_transfer_records(uint64_t total);
  // tcpscope_enrichment_lookups_total from the enricher's cumulative lookups.
  void set_enrichment_lookups(uint64_t total);
  // tcpscope_flow_log_dropped_total from the flow log's cumulative drops.
  void set_flow_log_dropped(uint64_t total);
  // tcpscope_ring_buffer_fill_ratio, clamped to 0..1.
  void set_ring_buffer_fill(double ratio);
  // tcpscope_loop_longest_pass_seconds: the longest the daemon's loop took
  // over one wake-up since it started (what it was woken for, then a drain
  // of the ring): records waited in the ring at most that long.
  void set_loop_longest_pass(double seconds);
  // tcpscope_snapshot_flows: open flows in the last snapshot;
  // tcpscope_snapshot_namespaces{result}: network namespaces it read, found
  // without a TCP socket, did not reach within its time budget, or could not
  // enter; tcpscope_snapshot_seconds: how long the kernel reads took.
  struct SnapshotCounts {
    int64_t flows = 0;
    int read = 0, empty = 0, skipped = 0, failed = 0;
    double seconds = 0;
  };
  void set_snapshot(const SnapshotCounts& counts);
  // tcpscope_config_reloads_total{result="ok"|"failed"}.
  void count_reload(bool ok);
  // tcpscope_service_cgroups{state="live"|"removed"}: the cgroups the
  // service names know (removed: within the grace); and
  // tcpscope_service_unresolved_total: records whose socket's cgroup was
  // unknown (gone past the grace, or never seen), named "".
  void set_service_cgroups(uint64_t live, uint64_t removed, uint64_t unresolved_total);

 private:
  // Advances `counter` to `total` under mu_.
  void set_total(TotalCounter* counter, uint64_t total);

  std::shared_ptr<prometheus::Registry> registry_;
  std::mutex mu_;  // the setters may be called from different threads
  TotalCounter records_lost_, transfer_records_lost_, state_changes_missed_, records_, transfer_records_, lookups_,
      flow_log_dropped_, service_unresolved_;
  prometheus::Gauge* service_cgroups_live_;
  prometheus::Gauge* service_cgroups_removed_;
  prometheus::Family<prometheus::Counter>* recursion_misses_family_;
  std::map<std::string, TotalCounter> recursion_misses_;
  prometheus::Gauge* ring_fill_;
  prometheus::Gauge* loop_longest_pass_;
  prometheus::Gauge* snapshot_flows_;
  prometheus::Gauge* snapshot_seconds_;
  prometheus::Gauge *ns_read_, *ns_empty_, *ns_skipped_, *ns_failed_;
  prometheus::Counter* reloads_ok_;
  prometheus::Counter* reloads_failed_;
};

}  // namespace tcpscope
