#include "policy/policy_metrics.h"

#include <prometheus/counter.h>
#include <prometheus/family.h>
#include <prometheus/registry.h>

#include "prometheus_helpers/metric_family.h"

namespace tcpscope {

PolicyMetrics::PolicyMetrics(std::shared_ptr<prometheus::Registry> registry)
    : registry_(std::move(registry)),
      assignments_(counter_family(*registry_, "tcpscope_cc_assignments_total",
                                  "Flows whose congestion control a cc_policy rule set, by rule, experiment and arm.")),
      revoked_(counter_family(*registry_, "tcpscope_cc_assignments_revoked_total",
                              "Of tcpscope_cc_assignments_total, the flows whose application then set its own "
                              "TCP_CONGESTION (app_override: respect): the rule's algorithm did not stay.")),
      app_cc_(counter_family(*registry_, "tcpscope_app_cc_setsockopt_total",
                             "Applications setting TCP_CONGESTION themselves: observed (every call seen), "
                             "overridden (the policy kept its own choice).")),
      sysctl_(counter_family(*registry_, "tcpscope_sysctl_writes_total",
                             "Writes to the congestion-control sysctls, in the host's network namespace or another: "
                             "observed, or denied by sysctl_guard: deny (the host's only).")) {}

void PolicyMetrics::track(prometheus::Family<prometheus::Counter>* family, const std::string& key,
                          const std::map<std::string, std::string>& labels, uint64_t total) {
  auto it = tracked_.find(key);
  if (it == tracked_.end()) it = tracked_.emplace(key, TotalCounter(&family->Add(labels))).first;
  it->second.set(total);
}

void PolicyMetrics::set_rule_counts(uint32_t gen, const CompiledPolicy& policy, const RuleCounts& counts) {
  for (uint32_t i = 0; i < policy.rules.size() && i < counts.size(); ++i) {
    const CompiledRule& r = policy.rules[i];
    for (uint32_t a = 0; a < r.arms.size() && a < counts[i].size(); ++a) {
      const ArmCounts& n = counts[i][a];
      if (!n.assigned && !n.revoked) continue;  // no series until there is something to count
      // The kernel counter the totals come from: forget_generation() drops it.
      const std::string slot = std::to_string(gen) + "/" + std::to_string(i) + "/" + std::to_string(a);
      const std::map<std::string, std::string> labels = {
          {"rule", r.name}, {"experiment", r.experiment.value_or("")},
          {"arm", r.experiment ? r.arm_names[a] : ""}, {"cc", r.arms[a]}};
      if (n.assigned) track(assignments_, "assign/" + slot, labels, n.assigned);
      if (n.revoked) track(revoked_, "revoke/" + slot, labels, n.revoked);
    }
  }
}

void PolicyMetrics::forget_generation(uint32_t gen) {
  for (const char* kind : {"assign/", "revoke/"}) {
    const std::string key = kind + std::to_string(gen) + "/";
    for (auto it = tracked_.lower_bound(key); it != tracked_.end() && it->first.compare(0, key.size(), key) == 0;)
      it = tracked_.erase(it);
  }
}

void PolicyMetrics::set_app_cc_calls(const std::vector<AppCcCount>& calls) {
  for (const auto& c : calls) {
    const std::string action = app_cc_action_name(c.action);
    track(app_cc_, "app/" + c.cc + "/" + action, {{"cc", c.cc}, {"action", action}}, c.calls);
  }
}

void PolicyMetrics::set_sysctl_writes(const SysctlWrites& writes) {
  for (uint32_t n = 0; n < TCPSCOPE_SYSCTL_NAMES; ++n)
    for (uint32_t other = 0; other < 2; ++other)
      for (uint32_t denied = 0; denied < 2; ++denied)
        if (uint64_t total = writes[TCPSCOPE_SYSCTL_SLOT(n, other, denied)]) {
          const std::string name = sysctl_name(n), action = denied ? "denied" : "observed",
                            netns = other ? "other" : "host";
          track(sysctl_, "sysctl/" + name + "/" + action + "/" + netns,
                {{"name", name}, {"action", action}, {"netns", netns}}, total);
        }
}

}  // namespace tcpscope
