// The closed loop in the daemon: the controller (control/cc_controller.h)
// takes records as evidence, re-tests its cohorts every tick, puts their
// weights into the policy the kernel enforces (kernel/installed_policy.h),
// and keeps its state on disk (control/controller_store.h) across restarts.
#pragma once

#include <map>
#include <memory>
#include <string>

#include "control/cc_controller.h"
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

  // The controller rules of the config in force, their saved state, and the
  // policy with their cohorts into the kernel.
  bool start(std::string* error);
  // SIGHUP: the same for `next` (with the ASN data it comes with). A
  // controller rule that changed starts afresh, one removed is gone. On
  // failure the controllers and the policy in force stay.
  bool reload(const Config& next, const AsnDatabase* asn_db, std::string* error);

  void add(const RoutedFlow& flow) override { controller_.observe(flow.record); }
  void add(const RoutedTransfer& transfer) override { controller_.observe(transfer.record); }
  void tick(Clock::time_point now) override;
  // At stop, before the handover is stored: from here on no tick tests,
  // applies weights or reads routes, so the policy's maps and generation
  // stay as stored; close() still saves the state.
  void stop() { stopped_ = true; }
  void close(std::chrono::milliseconds timeout) override;

  CcController& controller() { return controller_; }

 private:
  // The cohorts' weights into the kernel; a new ASN cohort reinstalls the
  // policy, so the trie names it.
  void apply_cohorts();
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
  // Their local tables now, to the controller.
  void read_local_routes();

  struct WatchedNamespace {
    uint32_t inode = 0;
    std::unique_ptr<LocalRoutes> routes;
  };
  std::map<std::string, WatchedNamespace> namespaces_;
  Clock::time_point next_routes_read_{};
  std::string routes_error_;  // the last one logged

  InstalledPolicy& policy_;
  const Enricher& enricher_;
  const Config& config_;
  LogLine log_;
  CcController controller_;
  ControllerStore store_;
  StateWriter writer_{store_};
  bool stopped_ = false;
  bool saving_ = true;  // false once a state that could not be set aside must not be overwritten
};

}  // namespace tcpscope
