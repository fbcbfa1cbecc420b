// The congestion-control policy's counters in Prometheus. The kernel keeps
// running totals (policy_counters.h); these setters turn each total into
// counter increments.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "policy/cc_policy.h"
#include "policy/policy_counters.h"
#include "prometheus_helpers/prometheus_fwd.h"
#include "prometheus_helpers/total_counter.h"

namespace tcpscope {

class PolicyMetrics {
 public:
  explicit PolicyMetrics(std::shared_ptr<prometheus::Registry> registry);

  // tcpscope_cc_assignments_total{rule, experiment, arm, cc}, and of those
  // tcpscope_cc_assignments_revoked_total: the ones an application replaced
  // afterwards (app_override: respect). `counts` is what generation `gen`,
  // which holds `policy`, counted.
  void set_rule_counts(uint32_t gen, const CompiledPolicy& policy, const RuleCounts& counts);
  // Generation `gen` was reinstalled: its kernel counters start from 0.
  void forget_generation(uint32_t gen);
  // tcpscope_app_cc_setsockopt_total{cc, action}
  void set_app_cc_calls(const std::vector<AppCcCount>& calls);
  // tcpscope_sysctl_writes_total{name, action, netns}
  // netns: "host" (the initial network namespace) or "other".
  void set_sysctl_writes(const SysctlWrites& writes);

 private:
  // Counter `key` of `family` (made with `labels` the first time) to `total`.
  void track(prometheus::Family<prometheus::Counter>* family, const std::string& key,
             const std::map<std::string, std::string>& labels, uint64_t total);

  std::shared_ptr<prometheus::Registry> registry_;
  prometheus::Family<prometheus::Counter>* assignments_;
  prometheus::Family<prometheus::Counter>* revoked_;
  prometheus::Family<prometheus::Counter>* app_cc_;
  prometheus::Family<prometheus::Counter>* sysctl_;
  std::map<std::string, TotalCounter> tracked_;
};

}  // namespace tcpscope
