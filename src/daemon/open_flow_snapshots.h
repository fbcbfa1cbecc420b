// Long-lived flows must not be invisible until they close: every
// snapshot_interval_s the open flows are read through the socket iterator,
// off the loop (a pass enters every network namespace), then decoded and
// enriched like finished ones on the loop, counted into
// tcpscope_active_flows, and served at /api/v1/flows.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "aggregate/aggregator.h"
#include "aggregate/open_flows_view.h"
#include "control/connection_table.h"
#include "export/daemon_health.h"
#include "kernel/flow_snapshot.h"
#include "os/background_job.h"
#include "pipeline/flow_pipeline.h"
#include "pipeline/record_sink.h"

namespace tcpscope {

class OpenFlowSnapshots {
 public:
  using Clock = std::chrono::steady_clock;

  // `iter_link_fd` < 0: this kernel has no socket iterator, no snapshots.
  // The references must outlive this.
  OpenFlowSnapshots(int iter_link_fd, const MonotonicToRealtime& clock, FlowPipeline& pipeline,
                    Aggregator& aggregator, DaemonHealth& self, LogLine log)
      : link_fd_(iter_link_fd), clock_(clock), pipeline_(pipeline), aggregator_(aggregator), self_(self),
        log_(std::move(log)) {}

  // Told after each pass what it saw: the closed loop drops the connections
  // whose close record was lost.
  using PassSeen = std::function<void(SocketPass)>;
  void on_pass(PassSeen f) { on_pass_ = std::move(f); }

  // A pass starts once `interval` has passed since the last (0: never).
  void tick(Clock::time_point now, std::chrono::seconds interval);
  // A pass now (at start), unless one is running.
  void start(Clock::time_point now);
  // After fd() woke the loop: the finished pass's flows in.
  void finish();
  int fd() const { return job_.fd(); }
  int setup_errno() const { return job_.setup_errno(); }
  // Before the iterator's link goes away.
  void wait() { job_.wait(); }

  // GET /api/v1/flows; any thread.
  std::string json(const std::string& query) const;

 private:
  const int link_fd_;
  const MonotonicToRealtime& clock_;
  FlowPipeline& pipeline_;
  Aggregator& aggregator_;
  DaemonHealth& self_;
  LogLine log_;
  BackgroundJob<FlowSnapshot> job_;
  // Where the pass a time budget cut short goes on (touched only by the job).
  size_t rotation_ = 0;
  Clock::time_point last_start_{};
  double pass_start_s_ = 0;  // the running pass's, unix seconds
  PassSeen on_pass_;
  Clock::time_point next_skip_log_{};
  Clock::time_point next_error_log_{};
  // The latest pass's flows, read by HTTP threads.
  std::shared_ptr<const OpenFlowsView> flows_ = std::make_shared<OpenFlowsView>();
};

}  // namespace tcpscope
