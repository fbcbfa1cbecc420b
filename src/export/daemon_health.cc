#include "export/daemon_health.h"

#include <prometheus/counter.h>
#include <prometheus/family.h>
#include <prometheus/gauge.h>
#include <prometheus/registry.h>

#include <algorithm>
#include <cmath>

#include "prometheus_helpers/metric_family.h"

namespace tcpscope {

namespace {

prometheus::Counter* plain_counter(prometheus::Registry& r, const char* name, const char* help) {
  return &counter_family(r, name, help)->Add({});
}

prometheus::Gauge* plain_gauge(prometheus::Registry& r, const char* name, const char* help) {
  return &gauge_family(r, name, help)->Add({});
}

}  // namespace

DaemonHealth::DaemonHealth(std::shared_ptr<prometheus::Registry> registry, const std::string& version,
                         const std::string& libbpf_version, const std::string& kernel_release)
    : registry_(std::move(registry)) {
  auto& r = *registry_;
  records_lost_ = TotalCounter(plain_counter(
      r, "tcpscope_records_lost_total",
      "Flow records the kernel could not hand over (ring buffer full, or no socket storage to "
      "track the flow); must stay 0."));
  transfer_records_lost_ = TotalCounter(plain_counter(
      r, "tcpscope_transfer_records_lost_total",
      "Transfer records the kernel could not hand over (ring buffer full); must stay 0."));
  state_changes_missed_ = TotalCounter(plain_counter(
      r, "tcpscope_state_changes_missed_total",
      "TCP state changes the kernel skipped the state-change program for (recursion on a CPU); "
      "a skipped handshake or close is recorded at the socket's next event, less exactly."));
  recursion_misses_family_ = counter_family(r, "tcpscope_bpf_recursion_misses_total",
                                            "Runs of a tcpscope BPF program the kernel skipped because the program "
                                            "was already running on that CPU.");
  records_ = TotalCounter(plain_counter(r, "tcpscope_records_total", "Flow records read from the ring buffer."));
  transfer_records_ = TotalCounter(
      plain_counter(r, "tcpscope_transfer_records_total", "Transfer records read from the ring buffer."));
  lookups_ = TotalCounter(plain_counter(r, "tcpscope_enrichment_lookups_total",
                                   "Peer class and ASN lookups done to enrich flow records."));
  flow_log_dropped_ = TotalCounter(plain_counter(r, "tcpscope_flow_log_dropped_total",
                                            "Flow-log lines (flow and transfer records) not written to the flow log: its "
                                            "queue was full or a write failed."));
  ring_fill_ = plain_gauge(r, "tcpscope_ring_buffer_fill_ratio",
                           "Fill of the kernel ring buffer (0..1) at the last drain.");
  loop_longest_pass_ = plain_gauge(r, "tcpscope_loop_longest_pass_seconds",
                                   "The longest the daemon's loop took over one wake-up (what woke it, then a drain "
                                   "of the ring buffer) since it started.");
  snapshot_flows_ = plain_gauge(r, "tcpscope_snapshot_flows", "Open TCP flows in the last snapshot.");
  snapshot_seconds_ = plain_gauge(r, "tcpscope_snapshot_seconds",
                                  "Time the last open-flow snapshot spent reading the kernel, all namespaces.");
  auto& ns = *gauge_family(r, "tcpscope_snapshot_namespaces",
                           "Network namespaces in the last open-flow snapshot: read, empty (no TCP socket), "
                           "skipped (past its time budget), failed (could not be entered or read).");
  ns_read_ = &ns.Add({{"result", "read"}});
  ns_empty_ = &ns.Add({{"result", "empty"}});
  ns_skipped_ = &ns.Add({{"result", "skipped"}});
  ns_failed_ = &ns.Add({{"result", "failed"}});
  auto& cgroups = *gauge_family(r, "tcpscope_service_cgroups",
                                "Cgroups whose service name the daemon knows: live, and removed but kept for "
                                "services.grace_seconds.");
  service_cgroups_live_ = &cgroups.Add({{"state", "live"}});
  service_cgroups_removed_ = &cgroups.Add({{"state", "removed"}});
  service_unresolved_ = TotalCounter(plain_counter(
      r, "tcpscope_service_unresolved_total",
      "Records whose socket's cgroup had no name (removed longer ago than services.grace_seconds, or never "
      "seen): their service is empty."));
  auto& reloads = *counter_family(r, "tcpscope_config_reloads_total", "Config reloads (SIGHUP) by result.");
  reloads_ok_ = &reloads.Add({{"result", "ok"}});
  reloads_failed_ = &reloads.Add({{"result", "failed"}});
  gauge_family(r, "tcpscope_build_info", "Always 1; the labels describe the build and the kernel it runs on.")
      ->Add({{"version", version}, {"libbpf", libbpf_version}, {"kernel", kernel_release}})
      .Set(1);
}

void DaemonHealth::set_total(TotalCounter* counter, uint64_t total) {
  std::lock_guard<std::mutex> lock(mu_);
  counter->set(total);
}

void DaemonHealth::set_records_lost(uint64_t kernel_total) { set_total(&records_lost_, kernel_total); }
void DaemonHealth::set_transfer_records_lost(uint64_t kernel_total) {
  set_total(&transfer_records_lost_, kernel_total);
}

void DaemonHealth::set_recursion_misses(const std::string& program, uint64_t total) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = recursion_misses_.find(program);
  if (it == recursion_misses_.end()) {
    it = recursion_misses_.emplace(program, TotalCounter(&recursion_misses_family_->Add({{"program", program}}))).first;
  }
  it->second.set(total);
}

void DaemonHealth::set_state_changes_missed(uint64_t total) { set_total(&state_changes_missed_, total); }
void DaemonHealth::set_records(uint64_t total) { set_total(&records_, total); }
void DaemonHealth::set_transfer_records(uint64_t total) { set_total(&transfer_records_, total); }
void DaemonHealth::set_enrichment_lookups(uint64_t total) { set_total(&lookups_, total); }
void DaemonHealth::set_flow_log_dropped(uint64_t total) { set_total(&flow_log_dropped_, total); }

void DaemonHealth::set_loop_longest_pass(double seconds) { loop_longest_pass_->Set(seconds); }

void DaemonHealth::set_service_cgroups(uint64_t live, uint64_t removed, uint64_t unresolved_total) {
  service_cgroups_live_->Set(static_cast<double>(live));
  service_cgroups_removed_->Set(static_cast<double>(removed));
  set_total(&service_unresolved_, unresolved_total);
}

void DaemonHealth::set_ring_buffer_fill(double ratio) {
  if (std::isnan(ratio)) ratio = 0;
  ring_fill_->Set(std::clamp(ratio, 0.0, 1.0));
}

void DaemonHealth::set_snapshot(const SnapshotCounts& c) {
  snapshot_flows_->Set(static_cast<double>(c.flows));
  snapshot_seconds_->Set(c.seconds);
  ns_read_->Set(c.read);
  ns_empty_->Set(c.empty);
  ns_skipped_->Set(c.skipped);
  ns_failed_->Set(c.failed);
}

void DaemonHealth::count_reload(bool ok) { (ok ? reloads_ok_ : reloads_failed_)->Increment(); }

}  // namespace tcpscope
