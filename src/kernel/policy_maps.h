// Writes a CompiledPolicy into the sockops program's maps (double-buffered:
// the inactive generation is filled, then made active in one step) and reads
// the policy's kernel-side counters back.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "cc_policy.h"

namespace tcpscope {

class FlowProbe;

class PolicyMaps {
 public:
  explicit PolicyMaps(FlowProbe& probe) : probe_(probe) {}

  // Installs `policy` and makes it active; returns the generation it went
  // into (0 or 1), or -1 with `error` set (the previous policy stays active).
  int install(const CompiledPolicy& policy, std::string* error);
  // While unset (daemon stopping) sysctl_guard: deny refuses nothing.
  void set_loaded(bool loaded);

  // Assignments counted for (generation, rule, arm).
  uint64_t assignments(uint32_t gen, uint32_t rule, uint32_t arm) const;
  struct AppCcCount {
    std::string cc;
    uint32_t action;  // TCPSCOPE_APP_CC_*
    uint64_t calls;
  };
  std::vector<AppCcCount> app_cc_calls() const;
  // Index: name (0 tcp_congestion_control, 1 tcp_allowed_congestion_control) * 2 + denied.
  std::array<uint64_t, TCPSCOPE_SYSCTL_SLOTS> sysctl_writes() const;

 private:
  uint64_t percpu_sum(int map_fd, uint32_t key) const;
  bool clear_trie(int fd, std::string* error);

  FlowProbe& probe_;
  bool installed_once_ = false;
};

}  // namespace tcpscope
