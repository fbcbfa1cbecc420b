#include "policy/policy_metrics.h"

#include <prometheus/counter.h>
#include <prometheus/family.h>
#include <prometheus/registry.h>

namespace tcpscope {

PolicyMetrics::PolicyMetrics(std::shared_ptr<prometheus::Registry> registry)
    : registry_(std::move(registry)),
      assignments_(&prometheus::BuildCounter()
                        .Name("tcpscope_cc_assignments_total")
                        .Help("Flows whose congestion control a cc_policy rule set, by rule, experiment and arm.")
                        .Register(*registry_)),
      revoked_(&prometheus::BuildCounter()
                    .Name("tcpscope_cc_assignments_revoked_total")
                    .Help("Of tcpscope_cc_assignments_total, the flows whose application then set its own "
                          "TCP_CONGESTION (app_override: respect): the rule's algorithm did not stay.")
                    .Register(*registry_)),
      app_cc_(&prometheus::BuildCounter()
                   .Name("tcpscope_app_cc_setsockopt_total")
                   .Help("Applications setting TCP_CONGESTION themselves: observed (every call seen), "
                         "overridden (the policy kept its own choice).")
                   .Register(*registry_)),
      sysctl_(&prometheus::BuildCounter()
                   .Name("tcpscope_sysctl_writes_total")
                   .Help("Writes to the congestion-control sysctls, in the host's network namespace or another: observed, or denied by sysctl_guard: deny (the host's only).")
                   .Register(*registry_)) {}

void PolicyMetrics::advance(Tracked* t, uint64_t total) {
  // A total below the last one means the kernel counter was reset.
  uint64_t delta = total >= t->last ? total - t->last : total;
  if (delta) t->counter->Increment(static_cast<double>(delta));
  t->last = total;
}

void PolicyMetrics::set_assignments(const std::string& slot, const std::string& rule,
                                    const std::string& experiment, const std::string& arm,
                                    const std::string& cc, uint64_t total) {
  Tracked& t = tracked_["assign/" + slot];
  if (!t.counter)
    t.counter = &assignments_->Add({{"rule", rule}, {"experiment", experiment}, {"arm", arm}, {"cc", cc}});
  advance(&t, total);
}

void PolicyMetrics::set_revoked(const std::string& slot, const std::string& rule, const std::string& experiment,
                                const std::string& arm, const std::string& cc, uint64_t total) {
  Tracked& t = tracked_["revoke/" + slot];
  if (!t.counter) t.counter = &revoked_->Add({{"rule", rule}, {"experiment", experiment}, {"arm", arm}, {"cc", cc}});
  advance(&t, total);
}

void PolicyMetrics::forget_slots(const std::string& prefix) {
  for (const char* kind : {"assign/", "revoke/"}) {
    const std::string key = kind + prefix;
    for (auto it = tracked_.lower_bound(key); it != tracked_.end() && it->first.compare(0, key.size(), key) == 0;)
      it = tracked_.erase(it);
  }
}

void PolicyMetrics::set_app_cc(const std::string& cc, const std::string& action, uint64_t total) {
  Tracked& t = tracked_["app/" + cc + "/" + action];
  if (!t.counter) t.counter = &app_cc_->Add({{"cc", cc}, {"action", action}});
  advance(&t, total);
}

void PolicyMetrics::set_sysctl_writes(const std::string& name, const std::string& action, const std::string& netns,
                                      uint64_t total) {
  Tracked& t = tracked_["sysctl/" + name + "/" + action + "/" + netns];
  if (!t.counter) t.counter = &sysctl_->Add({{"name", name}, {"action", action}, {"netns", netns}});
  advance(&t, total);
}

}  // namespace tcpscope
