// What the kernel counts for the congestion-control policy, as plain numbers:
// kernel/policy_maps.h reads them out of the maps, the metrics
// (policy_metrics.h) and /api/v1/policy (policy_json.h) show them.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "tcpscope/policy.h"

namespace tcpscope {

// One rule arm's flows in one generation: assigned by the rule, and of those
// revoked, replaced by the application's own TCP_CONGESTION afterwards
// (app_override: respect).
struct ArmCounts {
  uint64_t assigned = 0;
  uint64_t revoked = 0;
};
// A generation's counts, [rule][arm], for the rules it holds.
using RuleCounts = std::vector<std::vector<ArmCounts>>;

// Applications' own TCP_CONGESTION calls, by algorithm and outcome.
struct AppCcCount {
  std::string cc;   // "other" for names the kernel does not offer
  uint32_t action;  // TCPSCOPE_APP_CC_*
  uint64_t calls;
};
// "observed", "overridden", "refused".
const char* app_cc_action_name(uint32_t action);

// Writes to the CC sysctls, index TCPSCOPE_SYSCTL_SLOT(name, other network
// namespace, denied); the last one counts the writes the log lost.
using SysctlWrites = std::array<uint64_t, TCPSCOPE_SYSCTL_LOST + 1>;
// The full name of sysctl `name_idx` (0 or 1): "net.ipv4.tcp_congestion_control".
const char* sysctl_name(uint32_t name_idx);

}  // namespace tcpscope
