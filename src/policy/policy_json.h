// What /api/v1/policy answers (and `tcpscope policy show` renders): the
// policy in force as configured and compiled, with what the kernel counted
// for it.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "config/config.h"
#include "policy/cc_policy.h"
#include "policy/policy_counters.h"

namespace tcpscope {

struct PolicyStatus {
  std::string cgroup;                            // the programs' cgroup
  CcPolicy config;                               // as last loaded
  std::shared_ptr<const CompiledPolicy> active;  // `config` compiled; null before the first install
  int generation = -1;                           // the generation `active` is installed in
  uint16_t install = 0;                          // the install id its sockets are tagged with
  RuleCounts counts;                             // active's, [rule][arm]
  std::vector<AppCcCount> app_cc;                // applications' own TCP_CONGESTION calls
  SysctlWrites sysctl_writes{};
};

// The JSON document, ending in '\n'.
std::string policy_json(const PolicyStatus& status);

}  // namespace tcpscope
