#include "kernel/policy_controller.h"

#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <nlohmann/json.hpp>

#include "asn_db.h"
#include "kernel/flow_probe.h"

namespace tcpscope {

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
  int gen = maps_.install(*policy, error);
  if (gen < 0) return false;
  metrics_.forget_slots(std::to_string(gen) + "/");
  std::lock_guard<std::mutex> lock(mu_);
  by_gen_[gen] = std::move(policy);
  active_gen_ = gen;
  config_ = config;
  return true;
}

void PolicyController::name_flow(const tcpscope_flow_event& ev, FlowRecord* flow) const {
  if (!ev.cc_rule) return;
  uint32_t gen = (ev.cc_rule >> 16) & 1, idx = (ev.cc_rule & 0xffff) - 1;
  const auto& policy = by_gen_[gen];
  if (!policy || idx >= policy->rules.size()) return;
  const CompiledRule& rule = policy->rules[idx];
  flow->cc_rule = rule.name;
  if (rule.experiment) {
    flow->experiment = rule.experiment;
    if (ev.arm && ev.arm <= rule.arms.size()) flow->arm = rule.arms[ev.arm - 1];
  }
}

void PolicyController::update_metrics() {
  for (uint32_t gen = 0; gen < by_gen_.size(); ++gen) {
    const auto& policy = by_gen_[gen];
    if (!policy) continue;
    for (uint32_t i = 0; i < policy->rules.size(); ++i) {
      const CompiledRule& r = policy->rules[i];
      for (uint32_t a = 0; a < r.arms.size(); ++a) {
        uint64_t n = maps_.assignments(gen, i, a);
        if (!n) continue;
        metrics_.set_assignments(std::to_string(gen) + "/" + std::to_string(i) + "/" + std::to_string(a), r.name,
                                 r.experiment.value_or(""), r.experiment ? r.arms[a] : "", r.arms[a], n);
      }
    }
  }
  for (const auto& c : maps_.app_cc_calls())
    metrics_.set_app_cc(c.cc, c.action == TCPSCOPE_APP_CC_OVERRIDDEN ? "overridden" : "observed", c.calls);
  auto sysctl = maps_.sysctl_writes();
  static const char* kNames[] = {"net.ipv4.tcp_congestion_control", "net.ipv4.tcp_allowed_congestion_control"};
  for (int n = 0; n < 2; ++n)
    for (int denied = 0; denied < 2; ++denied)
      if (sysctl[n * 2 + denied]) metrics_.set_sysctl_writes(kNames[n], denied ? "denied" : "observed", sysctl[n * 2 + denied]);
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
        arms.push_back({{"cc", r.arms[a]}, {"weight", weight}, {"assigned", n}});
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
    app.push_back({{"cc", c.cc}, {"action", c.action == TCPSCOPE_APP_CC_OVERRIDDEN ? "overridden" : "observed"},
                   {"calls", c.calls}});
  j["app_cc_setsockopt"] = app;
  auto sysctl = maps_.sysctl_writes();
  j["sysctl_writes"] = {{"net.ipv4.tcp_congestion_control", {{"observed", sysctl[0]}, {"denied", sysctl[1]}}},
                        {"net.ipv4.tcp_allowed_congestion_control", {{"observed", sysctl[2]}, {"denied", sysctl[3]}}}};
  return j.dump(2) + "\n";
}

}  // namespace tcpscope
