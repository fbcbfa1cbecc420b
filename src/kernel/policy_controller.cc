#include "kernel/policy_controller.h"

#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>

#include <nlohmann/json.hpp>

#include "enrich/asn_db.h"
#include "kernel/flow_probe.h"
#include "text/utf8_text.h"
#include "os/congestion_controls.h"

namespace tcpscope {

namespace {
const char* app_cc_action_name(uint32_t action) {
  switch (action) {
    case TCPSCOPE_APP_CC_OVERRIDDEN: return "overridden";
    case TCPSCOPE_APP_CC_REFUSED: return "refused";
    default: return "observed";
  }
}

const char* const kSysctlNames[TCPSCOPE_SYSCTL_NAMES] = {"net.ipv4." TCPSCOPE_SYSCTL_CC, "net.ipv4." TCPSCOPE_SYSCTL_ALLOWED_CC};
}  // namespace

bool ensure_congestion_controls(const std::vector<std::string>& names, std::string* error) {
  for (const auto& name : names) {
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) {
      *error = std::string("socket: ") + strerror(errno);
      return false;
    }
    int rc = setsockopt(fd, IPPROTO_TCP, TCP_CONGESTION, name.c_str(), static_cast<socklen_t>(name.size()));
    int err = errno;
    close(fd);
    if (rc != 0) {
      *error = "congestion control '" + name + "' is not available in this kernel: " + strerror(err);
      return false;
    }
  }
  return true;
}

PolicyController::PolicyController(FlowProbe& probe, std::shared_ptr<prometheus::Registry> registry)
    : probe_(probe), maps_(probe), metrics_(std::move(registry)) {}

bool PolicyController::load(const Config& config, const AsnDatabase* asn_db, std::string* error) {
  auto compiled = compile_policy(config, asn_db, error);
  if (!compiled) return false;
  if (!compiled->rules.empty() && probe_.cgroup_path().empty()) {
    *error = "cc_policy has rules but its programs are not attached to any cgroup";
    return false;
  }
  if (!ensure_congestion_controls(compiled->congestion_controls(), error)) return false;
  auto policy = std::make_shared<const CompiledPolicy>(std::move(*compiled));
  const uint16_t install = names_.next_install();
  int gen = maps_.install(*policy, install, error);
  if (gen < 0) return false;
  names_.add(*policy);
  maps_.sync_cc_names(loaded_congestion_controls(), allowed_congestion_controls());
  metrics_.forget_slots(std::to_string(gen) + "/");

  std::lock_guard<std::mutex> lock(mu_);
  by_gen_[gen] = std::move(policy);
  active_gen_ = gen;
  active_install_ = install;
  config_ = config;
  return true;
}

void PolicyController::update_metrics() {
  for (uint32_t gen = 0; gen < by_gen_.size(); ++gen) {
    const auto& policy = by_gen_[gen];
    if (!policy) continue;
    for (uint32_t i = 0; i < policy->rules.size(); ++i) {
      const CompiledRule& r = policy->rules[i];
      for (uint32_t a = 0; a < r.arms.size(); ++a) {
        const std::string slot = std::to_string(gen) + "/" + std::to_string(i) + "/" + std::to_string(a);
        const std::string experiment = r.experiment.value_or(""), arm = r.experiment ? r.arms[a] : "";
        if (uint64_t n = maps_.assignments(gen, i, a))
          metrics_.set_assignments(slot, r.name, experiment, arm, r.arms[a], n);
        if (uint64_t n = maps_.revoked(gen, i, a)) metrics_.set_revoked(slot, r.name, experiment, arm, r.arms[a], n);
      }
    }
  }
  // A module an application loaded since (setsockopt autoloads for
  // CAP_NET_ADMIN callers) is counted under its name from now on.
  maps_.sync_cc_names(loaded_congestion_controls(), allowed_congestion_controls());
  for (const auto& c : maps_.app_cc_calls())
    metrics_.set_app_cc(c.cc, app_cc_action_name(c.action), c.calls);
  auto sysctl = maps_.sysctl_writes();
  for (int n = 0; n < TCPSCOPE_SYSCTL_NAMES; ++n)
    for (int other = 0; other < 2; ++other)
      for (int denied = 0; denied < 2; ++denied)
        if (uint64_t total = sysctl[TCPSCOPE_SYSCTL_SLOT(n, other, denied)])
          metrics_.set_sysctl_writes(kSysctlNames[n], denied ? "denied" : "observed", other ? "other" : "host", total);

  auto now = std::chrono::steady_clock::now();
  log_tokens_ = std::min(kLogBurst, log_tokens_ + std::chrono::duration<double>(now - log_refill_).count() /
                                                      std::chrono::duration<double>(kLogEvery).count());
  log_refill_ = now;
  maps_.drain_sysctl_log([this](const tcpscope_sysctl_event& ev) { log_sysctl_write(ev); });
  const uint64_t lost = sysctl[TCPSCOPE_SYSCTL_LOST];
  if (lost > log_lost_reported_) {
    log_suppressed_ += lost - log_lost_reported_;
    log_lost_reported_ = lost;
  }
  if (log_suppressed_ && log_tokens_ >= 1) {
    log_tokens_ -= 1;
    std::fprintf(stderr, "tcpscope: sysctl: %llu more writes to the congestion-control sysctls not logged "
                         "(rate limit; all are counted in tcpscope_sysctl_writes_total)\n",
                 static_cast<unsigned long long>(log_suppressed_));
    log_suppressed_ = 0;
  }
}

void PolicyController::log_sysctl_write(const tcpscope_sysctl_event& ev) {
  if (log_tokens_ < 1) {
    ++log_suppressed_;
    return;
  }
  log_tokens_ -= 1;
  // What a process wrote goes to the log: control bytes become '?'.
  std::string value(ev.value);
  while (!value.empty() && (value.back() == '\n' || value.back() == ' ' || value.back() == '\t')) value.pop_back();
  value = printable_text(value);
  const std::string comm = printable_text(ev.comm);
  const std::string where =
      ev.other_netns ? "network namespace " + std::to_string(ev.netns) + " (not the host's)" : "the host's network namespace";
  std::fprintf(stderr, "tcpscope: sysctl: write net.ipv4.%s=\"%s\"%s by pid %u (%s) in %s: %s\n",
               ev.name_idx ? TCPSCOPE_SYSCTL_ALLOWED_CC : TCPSCOPE_SYSCTL_CC, value.c_str(),
               ev.truncated ? "..." : "", ev.pid, comm.c_str(), where.c_str(),
               ev.denied ? "denied (sysctl_guard: deny)" : "observed");
}

std::string PolicyController::to_json() const {
  std::lock_guard<std::mutex> lock(mu_);
  nlohmann::json j;
  j["cgroup"] = probe_.cgroup_path();
  j["app_override"] = config_.cc_policy.app_override == AppOverride::kEnforce ? "enforce" : "respect";
  j["sysctl_guard"] = config_.cc_policy.sysctl_guard == SysctlGuard::kDeny ? "deny" : "observe";
  j["generation"] = active_gen_;
  j["rules"] = nlohmann::json::array();
  if (active_gen_ >= 0 && by_gen_[active_gen_]) {
    const CompiledPolicy& p = *by_gen_[active_gen_];
    j["remote_prefixes"] = p.remote.size();
    for (uint32_t i = 0; i < p.rules.size(); ++i) {
      const CompiledRule& r = p.rules[i];
      const CcRule& src = config_.cc_policy.rules[i];
      nlohmann::json rule;
      rule["name"] = r.name;
      nlohmann::json match = nlohmann::json::object();
      if (src.match.peer_class) match["peer_class"] = *src.match.peer_class;
      if (!src.match.asns.empty()) match["asns"] = src.match.asns;
      if (!src.match.lports.empty()) match["lports"] = src.match.lports;
      if (!src.match.prefixes.empty()) {
        match["prefixes"] = nlohmann::json::array();
        for (const auto& pf : src.match.prefixes) match["prefixes"].push_back(pf.to_string());
      }
      rule["match"] = match;
      uint64_t total = 0;
      nlohmann::json arms = nlohmann::json::array();
      for (uint32_t a = 0; a < r.arms.size(); ++a) {
        uint64_t n = maps_.assignments(static_cast<uint32_t>(active_gen_), i, a);
        total += n;
        uint32_t weight = r.bpf.cum_weight[a] - (a ? r.bpf.cum_weight[a - 1] : 0);
        arms.push_back({{"cc", r.arms[a]}, {"weight", weight}, {"assigned", n},
                        {"revoked", maps_.revoked(static_cast<uint32_t>(active_gen_), i, a)}});
      }
      if (r.experiment)
        rule["experiment"] = {{"name", *r.experiment}, {"arms", arms}};
      else
        rule["cc"] = r.arms[0];
      rule["assigned"] = total;
      j["rules"].push_back(rule);
    }
  }
  nlohmann::json app = nlohmann::json::array();
  for (const auto& c : maps_.app_cc_calls())
    app.push_back({{"cc", c.cc}, {"action", app_cc_action_name(c.action)},
                   {"calls", c.calls}});
  j["app_cc_setsockopt"] = app;
  j["install"] = active_install_;
  auto sysctl = maps_.sysctl_writes();
  // observed/denied: the host's; other namespaces' writes are never denied.
  for (int n = 0; n < TCPSCOPE_SYSCTL_NAMES; ++n)
    j["sysctl_writes"][kSysctlNames[n]] = {
        {"observed", sysctl[TCPSCOPE_SYSCTL_SLOT(n, 0, 0)]},
        {"denied", sysctl[TCPSCOPE_SYSCTL_SLOT(n, 0, 1)]},
        {"observed_other_netns", sysctl[TCPSCOPE_SYSCTL_SLOT(n, 1, 0)] + sysctl[TCPSCOPE_SYSCTL_SLOT(n, 1, 1)]}};
  return j.dump(2) + "\n";
}

}  // namespace tcpscope
