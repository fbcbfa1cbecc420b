// The closed loop in the daemon: the controller (control/cc_controller.h)
// takes records as evidence, re-tests its cohorts every second, puts their
// weights into the policy the kernel enforces (kernel/installed_policy.h),
// and keeps its state on disk (control/controller_store.h) across restarts.
//
// The controller works on a thread of its own, so that the ring buffer's
// loop never waits on it: a state of many rules takes long to snapshot for
// the disk, and /api/v1/controller builds its answer under the controller's
// lock. The loop hands each drain's controller records over at once (one
// short lock); the thread takes them in order, re-tests, saves, and leaves
// the cohorts' new weights for the loop, which alone touches the policy.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <variant>
#include <vector>

#include "control/cc_controller.h"
#include "control/connection_table.h"
#include "control/controller_store.h"
#include "control/state_writer.h"
#include "enrich/enricher.h"
#include "kernel/installed_policy.h"
#include "net/local_routes.h"
#include "pipeline/record_sink.h"

namespace tcpscope {

class ClosedLoop final : public RecordSink {
 public:
  // `config_in_force` is the daemon's config, replaced only after a reload
  // that succeeded; all four must outlive the loop.
  ClosedLoop(InstalledPolicy& policy, const Enricher& enricher, const Config& config_in_force,
             std::shared_ptr<prometheus::Registry> registry, LogLine log);

  ~ClosedLoop() override;

  // The controller rules of the config in force, their saved state, and the
  // policy with their cohorts into the kernel; then the controller's thread.
  bool start(std::string* error);
  // SIGHUP: the same for `next` (with the ASN data it comes with). A
  // controller rule that changed starts afresh, one removed is gone. On
  // failure the controllers and the policy in force stay.
  bool reload(const Config& next, const AsnDatabase* asn_db, std::string* error);

  void add(const RoutedFlow& flow) override;
  void add(const RoutedTransfer& transfer) override;
  void end_drain() override;
  // The cohorts' weights the controller's thread changed, into the kernel;
  // what the state writer had to say, to the log.
  void tick(Clock::time_point now) override;
  // A pass of the socket iterator (CcController::forget_closed()), taken in
  // order with the records.
  void forget_closed(SocketPass pass);
  // At stop, before the handover is stored: from here on nothing tests,
  // applies weights or reads routes, so the policy's maps and generation
  // stay as stored; close() still saves the state.
  void stop() { stopped_ = true; }
  // The thread takes what is still handed over, and ends; the state is saved.
  void close(std::chrono::milliseconds timeout) override;

  CcController& controller() { return controller_; }

 private:
  struct Cohorts {
    std::vector<uint32_t> asns;
    std::vector<CohortWeights> weights;
  };
  using Item = std::variant<FlowRecord, TransferRecord, SocketPass>;
  // What the loop hands over at most, waiting: a thread this far behind is
  // stuck, and the loop must not grow without bound for it.
  static constexpr size_t kMaxBacklog = size_t{1} << 20;

  void hand_over(std::vector<Item>* items);
  // The controller's thread: the records in order, a test every second.
  void run();
  void step();
  // The cohorts' weights into the kernel; a new ASN cohort reinstalls the
  // policy, so the trie names it. The loop's.
  void apply_cohorts(const Cohorts& cohorts);
  void save();
  // A saved state that cannot be used, out of the next save's way.
  void set_aside(const std::string& why);
  void log_writer_messages();
  // The namespaces the controller rules' evidence_netns name, and the
  // daemon's own (its addresses are local to all of them): each one's
  // inode and a reader of its local routing table, opened for names not
  // seen before (another namespace than the daemon's own can be entered
  // only at start: after that it lacks CAP_SYS_ADMIN, and says so).
  void watch_namespaces(const Config& config);
  // Their local tables now, to the controller (namespaces_mu_ held).
  void read_local_routes();

  struct WatchedNamespace {
    uint32_t inode = 0;
    std::unique_ptr<LocalRoutes> routes;
  };
  std::mutex namespaces_mu_;  // the loop's reload and the controller's thread
  std::map<std::string, WatchedNamespace> namespaces_;
  Clock::time_point next_routes_read_{};  // the thread's
  std::string routes_error_;              // the last one logged

  InstalledPolicy& policy_;
  const Enricher& enricher_;
  const Config& config_;
  LogLine log_;
  CcController controller_;
  ControllerStore store_;
  StateWriter writer_{store_};
  // False once a state that could not be set aside must not be overwritten.
  std::atomic<bool> saving_{true};

  std::vector<Item> drain_;  // the loop's, until end_drain()
  std::mutex inbox_mu_;
  std::condition_variable inbox_cv_;
  std::vector<Item> inbox_;
  bool closing_ = false;     // under inbox_mu_: the thread takes the inbox and ends
  uint64_t not_taken_ = 0;   // under inbox_mu_: records dropped over kMaxBacklog, not yet logged
  std::atomic<bool> stopped_{false};
  std::mutex changed_mu_;  // the weights the thread changed, for the loop to apply
  std::optional<Cohorts> changed_;
  std::thread thread_;
};

}  // namespace tcpscope
