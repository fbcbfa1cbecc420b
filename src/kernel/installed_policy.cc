#include "kernel/installed_policy.h"

#include <cstdio>

#include "kernel/flow_probe.h"
#include "os/congestion_controls.h"
#include "policy/policy_json.h"

namespace tcpscope {

InstalledPolicy::InstalledPolicy(FlowProbe& probe, std::shared_ptr<prometheus::Registry> registry)
    : probe_(probe), maps_(probe), metrics_(std::move(registry)) {}

bool InstalledPolicy::load(const Config& config, const AsnDatabase* asn_db, std::string* error) {
  auto compiled = compile_policy(config, asn_db, error, cohort_asns_);
  if (!compiled) return false;
  if (!compiled->rules.empty() && probe_.cgroup_path().empty()) {
    *error = "cc_policy has rules but its programs are not attached to any cgroup";
    return false;
  }
  // The compiler's messages name cc_policy already; the kernel's do not.
  auto failed = [error] {
    *error = "cc_policy: " + *error;
    return false;
  };
  if (!ensure_congestion_controls(compiled->congestion_controls(), error)) return failed();
  // sock_ops runs on every new connection: attached while some rule needs
  // it, before the rules it applies are installed, detached after the last
  // is gone (until then it finds none and returns).
  const bool needs_sockops = !compiled->rules.empty();
  if (needs_sockops && !probe_.set_cc_policy_attached(true, error)) return failed();
  auto policy = std::make_shared<const CompiledPolicy>(std::move(*compiled));
  const uint16_t install = names_.next_install();
  int gen = maps_.install(*policy, install, cohort_weights_, error);
  if (gen < 0) return failed();
  if (!needs_sockops) probe_.set_cc_policy_attached(false, error);
  names_.add(*policy);
  sync_cc_names();
  metrics_.forget_generation(static_cast<uint32_t>(gen));

  std::lock_guard<std::mutex> lock(mu_);
  by_gen_[gen] = std::move(policy);
  active_gen_ = gen;
  active_install_ = install;
  config_ = config.cc_policy;
  return true;
}

nlohmann::json InstalledPolicy::handover_state() const {
  return {{"maps", maps_.handover_state()}, {"rule_names", names_.to_json()}};
}

bool InstalledPolicy::take_over(const nlohmann::json& state, std::string* error) {
  auto names = state.is_object() && state.contains("rule_names") ? RuleNames::from_json(state["rule_names"])
                                                                 : std::nullopt;
  if (!names || !state.contains("maps") || !state["maps"].is_object()) {
    *error = "the previous daemon's policy state is malformed";
    return false;
  }
  names_ = std::move(*names);
  maps_.take_over(state["maps"]);
  return true;
}

InstalledPolicy::CohortUpdate InstalledPolicy::set_cohorts(const std::vector<uint32_t>& asns,
                                                             const std::vector<CohortWeights>& weights,
                                                             std::string* error) {
  cohort_weights_ = weights;
  if (asns != cohort_asns_) {
    cohort_asns_ = asns;
    return CohortUpdate::kNeedsInstall;
  }
  if (active_gen_ < 0) return CohortUpdate::kApplied;  // the first install writes them
  return maps_.write_cohort_weights(static_cast<uint32_t>(active_gen_), weights, error) ? CohortUpdate::kApplied
                                                                                        : CohortUpdate::kFailed;
}

void InstalledPolicy::sync_cc_names() {
  auto loaded = loaded_congestion_controls();
  auto allowed = allowed_congestion_controls();
  // to_json() on an HTTP thread names the kernel's CC ids with these lists.
  std::lock_guard<std::mutex> lock(mu_);
  maps_.sync_cc_names(loaded, allowed);
}

void InstalledPolicy::update_metrics() {
  for (uint32_t gen = 0; gen < by_gen_.size(); ++gen)
    if (const auto& policy = by_gen_[gen]) metrics_.set_rule_counts(gen, *policy, maps_.rule_counts(gen, *policy));
  // A module an application loaded since (setsockopt autoloads for
  // CAP_NET_ADMIN callers) is counted under its name from now on.
  sync_cc_names();
  metrics_.set_app_cc_calls(maps_.app_cc_calls());
  const SysctlWrites sysctl = maps_.sysctl_writes();
  metrics_.set_sysctl_writes(sysctl);

  sysctl_log_.refill(LogRateLimiter::Clock::now());
  maps_.drain_sysctl_log([this](const tcpscope_sysctl_event& ev) {
    if (sysctl_log_.allow()) std::fputs(sysctl_write_line(ev).c_str(), stderr);
  });
  sysctl_log_.add_lost(sysctl[TCPSCOPE_SYSCTL_LOST]);
  if (uint64_t n = sysctl_log_.take_suppressed()) std::fputs(sysctl_suppressed_line(n).c_str(), stderr);
}

std::string InstalledPolicy::to_json() const {
  PolicyStatus status;
  status.cgroup = probe_.cgroup_path();
  {
    std::lock_guard<std::mutex> lock(mu_);
    status.config = config_;
    status.generation = active_gen_;
    status.install = active_install_;
    if (active_gen_ >= 0 && by_gen_[active_gen_]) {
      status.active = by_gen_[active_gen_];
      status.counts = maps_.rule_counts(static_cast<uint32_t>(active_gen_), *status.active);
    }
    status.app_cc = maps_.app_cc_calls();
    status.sysctl_writes = maps_.sysctl_writes();
  }
  return policy_json(status);
}

}  // namespace tcpscope
