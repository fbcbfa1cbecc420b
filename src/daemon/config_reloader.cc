#include "daemon/config_reloader.h"

#include <errno.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>

#include "enrich/asn_db.h"
#include "enrich/peer_classifier.h"
#include "os/congestion_controls.h"

namespace tcpscope {

namespace {
constexpr int kReloadNiceIncrement = 10;  // the worker vs the draining loop
}  // namespace

bool load_config(const RunOptions& options, Config* out, std::string* error) {
  ConfigOverrides o;
  o.listen = options.listen;
  o.flow_log = options.flow_log;
  o.cgroup = options.cgroup;
  o.transfer_sampling_rate = options.transfer_sampling_rate;
  std::vector<ConfigError> errors;
  Config cfg = load_effective_config(options.config_path, o, kernel_congestion_controls(), &errors);
  if (!errors.empty()) {
    std::string line = errors.front().to_string();
    if (errors.size() > 1)
      line += " (and " + std::to_string(errors.size() - 1) + " more: tcpscope check-config " +
              options.config_path + ")";
    *error = line;
    return false;
  }
  *out = std::move(cfg);
  return true;
}

bool build_tables(const Config& config, EnrichmentTables* out, std::string* error) {
  EnrichmentTables t;
  if (!config.asn.mmdb.empty() || !config.asn.prefix_file.empty()) {
    t.asn_db = AsnDatabase::load(config.asn, error);
    if (!t.asn_db) return false;
  }
  t.classifier = std::make_shared<const PeerClassifier>(config.peer_classes, config.default_peer_class);
  *out = std::move(t);
  return true;
}

void ConfigReloader::request() {
  if (!job_.start([this] { return prepare(); })) again_ = true;
}

void ConfigReloader::finish(const std::function<void(PreparedReload&)>& apply) {
  auto r = job_.take();
  if (!r) return;
  if (*r) apply(**r);
  if (again_) {
    again_ = false;
    request();
  }
}

std::unique_ptr<PreparedReload> ConfigReloader::prepare() const {
  // Below the loop's priority: on a busy host the drain must win the CPU
  // over a reload that can wait (Linux: the nice value is per thread).
  const id_t tid = static_cast<id_t>(syscall(SYS_gettid));
  errno = 0;
  const int nice_now = getpriority(PRIO_PROCESS, tid);
  if (errno == 0 && setpriority(PRIO_PROCESS, tid, std::min(nice_now + kReloadNiceIncrement, 19)) != 0) {
  }  // a reload at the loop's priority still works
  auto r = std::make_unique<PreparedReload>();
  const auto t0 = std::chrono::steady_clock::now();
  std::string err;
  // The open checks the path (owned_file.h) and never blocks.
  if (reopen_flow_log_ && !reopen_flow_log_(&err))
    r->flow_log_error = err + "; the flow log stays on the file it had";
  if (!load_config(options_, &r->config, &err))
    r->error = err;
  else if (!build_tables(r->config, &r->tables, &err))
    r->error = "ASN data: " + err;
  else
    r->ok = true;
  r->seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return r;
}

}  // namespace tcpscope
