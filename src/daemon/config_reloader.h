// The daemon's config and enrichment tables, read at start and on SIGHUP.
//
// Reading the config and building the ASN tables can take a second (a
// 1M-line prefix file, a full MaxMind DB); on the loop's thread that would
// stop the ring buffer's drain for that long, and a busy host fills the ring
// and loses records. So a worker thread builds everything immutable (config,
// AsnDatabase, PeerClassifier) and wakes the loop, which swaps it in where
// everything else (aggregator, policy maps, flow log) is touched. A SIGHUP
// while a reload is being prepared runs one more after it, so the last
// signal always sees the files as they are after it was sent.
#pragma once

#include <functional>
#include <memory>
#include <string>

#include "config/config.h"
#include "daemon/daemon.h"
#include "enrich/enricher.h"
#include "os/background_job.h"

namespace tcpscope {

// The config (file or embedded) with the command-line overrides. On
// failure *error is one line: the first problem, and where to see the others.
bool load_config(const RunOptions& options, Config* out, std::string* error);
// The peer classifier and ASN data a config names.
bool build_tables(const Config& config, EnrichmentTables* out, std::string* error);

struct PreparedReload {
  bool ok = false;
  Config config;
  EnrichmentTables tables;
  std::string error;
  std::string flow_log_error;  // the reopen failed (the reload itself may not have)
  double seconds = 0;
};

class ConfigReloader {
 public:
  // `reopen_flow_log` runs on the worker: whatever the config says, a SIGHUP
  // is logrotate's too. False and *error when the reopen failed.
  using ReopenFlowLog = std::function<bool(std::string* error)>;
  ConfigReloader(RunOptions options, ReopenFlowLog reopen_flow_log)
      : options_(std::move(options)), reopen_flow_log_(std::move(reopen_flow_log)) {}

  // SIGHUP.
  void request();
  // After fd() woke the loop: `apply` takes the prepared reload, then the
  // next one starts if a SIGHUP came meanwhile.
  void finish(const std::function<void(PreparedReload&)>& apply);

  int fd() const { return job_.fd(); }
  int setup_errno() const { return job_.setup_errno(); }
  void wait() { job_.wait(); }

 private:
  std::unique_ptr<PreparedReload> prepare() const;

  const RunOptions options_;
  const ReopenFlowLog reopen_flow_log_;
  BackgroundJob<std::unique_ptr<PreparedReload>> job_;
  bool again_ = false;
};

}  // namespace tcpscope
