// Writes a CompiledPolicy into the sockops program's maps (double-buffered:
// the inactive generation is filled, then made active in one step), keeps
// the cgroups of the services its rules name in step with it, and reads the
// policy's kernel-side counters (policy/policy_counters.h) and sysctl write
// log back.
#pragma once

#include <array>
#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "policy/cc_policy.h"
#include "policy/policy_counters.h"

struct ring_buffer;

namespace tcpscope {

class FlowProbe;

// A cgroup and the service that owns it, as the service resolver
// (enrich/service_names.h) names it.
struct ServiceCgroup {
  // The cgroup's id: its kernfs id, which is the inode number of its
  // directory in the cgroup2 mount (stat()'s st_ino) and a record's cgroup_id.
  uint64_t cgroup_id = 0;
  std::string service;  // e.g. "nginx.service", a container's name, "namespace/pod"
};

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
  // The cgroups of services, for rules with `match: { services: [...] }`.
  // A socket belongs to the service of its cgroup or of one of its nearest
  // ancestors (TCPSCOPE_SERVICE_CGROUP_LEVELS levels, the cgroup's own
  // included), so a service's top cgroup (its unit's, its container's scope,
  // its pod's slice) covers the cgroups under it; passing those as well
  // costs only entries. Only the cgroups of services some installed rule
  // names take an entry in the kernel (the map's size: FlowProbeOptions::
  // service_cgroup_entries); the others are kept here, for a reload whose
  // rules name them. Each cgroup is written under every generation this
  // side installed, the active one included, so a new cgroup (a new
  // container) counts for the next socket, with no reinstall; install()
  // rewrites the new generation's part of every cgroup before it flips.
  // Call on the thread that calls install(). False and `error` naming the
  // map and errno when the kernel refuses an entry (a full map: E2BIG); the
  // cgroups written until then stay.
  //
  // Every cgroup known, in place of those known before (a full scan: at
  // start, after a restart's takeover, whose map may hold the previous
  // daemon's cgroups); a cgroup listed twice takes its last service.
  bool set_service_cgroups(const std::vector<ServiceCgroup>& cgroups, std::string* error);
  // A cgroup that appeared, or whose service is now another.
  bool add_service_cgroup(const ServiceCgroup& cgroup, std::string* error);
  // A cgroup that is gone.
  bool remove_service_cgroup(uint64_t cgroup_id, std::string* error);

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
  // service_cgroups' entry of `cgroup_id` under every generation installed
  // here, from `service` (null: no service); the other generation's part,
  // a previous daemon's, is kept. Deleted when no rule names the service.
  bool write_service_cgroup(uint64_t cgroup_id, const std::string* service, std::string* error);
  // write_service_cgroup() for every cgroup known and every one in the map.
  bool write_service_cgroups(std::string* error);
  bool open_sysctl_log();
  static int on_sysctl_event(void* ctx, void* data, size_t size);

  FlowProbe& probe_;
  bool installed_once_ = false;
  std::unordered_map<uint64_t, std::string> service_of_cgroup_;
  // Per generation installed here: service -> the rules naming it.
  std::array<std::map<std::string, uint64_t>, TCPSCOPE_POLICY_GENERATIONS> rules_naming_;
  std::array<bool, TCPSCOPE_POLICY_GENERATIONS> installed_gen_{};
  std::vector<std::string> cc_names_;  // index + 1 in the kernel's cc_names
  std::vector<std::string> synced_names_, synced_allowed_;  // the last lists written
  ring_buffer* sysctl_ring_ = nullptr;
  std::function<void(const tcpscope_sysctl_event&)> sysctl_sink_;
};

}  // namespace tcpscope
