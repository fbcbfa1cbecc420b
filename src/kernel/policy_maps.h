// Writes a CompiledPolicy into the sockops program's maps (double-buffered:
// the inactive generation is filled, then made active in one step) and reads
// the policy's kernel-side counters (policy/policy_counters.h) and sysctl
// write log back.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "policy/cc_policy.h"
#include "policy/policy_counters.h"

struct ring_buffer;

namespace tcpscope {

class FlowProbe;

class PolicyMaps {
 public:
  explicit PolicyMaps(FlowProbe& probe) : probe_(probe) {}
  ~PolicyMaps();
  PolicyMaps(const PolicyMaps&) = delete;
  PolicyMaps& operator=(const PolicyMaps&) = delete;

  // Installs `policy` and makes it active, its sockets tagged with
  // `install_id` (16 bits); returns the generation it went into (0 or 1), or
  // -1 with `error` set (the previous policy stays active).
  // `weights`: the controllers' cohort weights, in place before the flip.
  int install(const CompiledPolicy& policy, uint16_t install_id, const std::vector<CohortWeights>& weights,
              std::string* error);
  // Makes `weights` the cohort weights of generation `gen`, and only them:
  // each entry is replaced in one step, so a new socket sees a cohort's old
  // or new weights, never a mix.
  bool write_cohort_weights(uint32_t gen, const std::vector<CohortWeights>& weights, std::string* error);
  // While unset (daemon stopping) sysctl_guard: deny refuses nothing.
  void set_loaded(bool loaded);

  // Across a restart whose maps were taken over (kernel/handover.h): what
  // this side keeps of them, so that the next daemon installs into the
  // other generation and counts each CC under the index the maps use.
  nlohmann::json handover_state() const;
  void take_over(const nlohmann::json& state);

  // What generation `gen`, which holds `policy`, counted for its rules' arms.
  RuleCounts rule_counts(uint32_t gen, const CompiledPolicy& policy) const;

  // The CCs an application's TCP_CONGESTION is counted under: the kernel's
  // available ones, and which of them any caller may choose (allowed).
  // Indexes are never reused, so a name keeps its counter; a name past
  // TCPSCOPE_MAX_CC_NAMES is counted as "other".
  void sync_cc_names(const std::vector<std::string>& available, const std::vector<std::string>& allowed);
  std::vector<AppCcCount> app_cc_calls() const;

  // The last slot counts the writes the log (below) lost.
  SysctlWrites sysctl_writes() const;
  // Hands every sysctl write logged since the last call to `f`.
  void drain_sysctl_log(const std::function<void(const tcpscope_sysctl_event&)>& f);

 private:
  uint64_t percpu_sum(int map_fd, uint32_t key) const;
  bool clear_trie(int fd, std::string* error);
  bool open_sysctl_log();
  static int on_sysctl_event(void* ctx, void* data, size_t size);

  FlowProbe& probe_;
  bool installed_once_ = false;
  std::vector<std::string> cc_names_;  // index + 1 in the kernel's cc_names
  std::vector<std::string> synced_names_, synced_allowed_;  // the last lists written
  ring_buffer* sysctl_ring_ = nullptr;
  std::function<void(const tcpscope_sysctl_event&)> sysctl_sink_;
};

}  // namespace tcpscope
