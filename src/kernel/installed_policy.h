// The congestion-control policy in force: compiles the config and installs
// it into the kernel's maps (PolicyMaps) on start and SIGHUP, and wires the
// pieces that are not the kernel's: the names of each record's rule
// (policy/rule_names.h), the counters in Prometheus (policy/policy_metrics.h),
// the rate-limited sysctl write log (policy/sysctl_log.h) and what
// /api/v1/policy shows (policy/policy_json.h). Only the config file
// (root-owned) and SIGHUP change it: no network endpoint does.
#pragma once

#include <array>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "config/config.h"
#include "kernel/policy_maps.h"
#include "policy/cc_policy.h"
#include "policy/policy_metrics.h"
#include "policy/rule_names.h"
#include "policy/sysctl_log.h"

namespace tcpscope {

class AsnDatabase;
class FlowProbe;

class InstalledPolicy {
 public:
  InstalledPolicy(FlowProbe& probe, std::shared_ptr<prometheus::Registry> registry);

  // Compiles and installs, with the controllers' cohorts as last set; on
  // failure the previous policy stays in force and *error, naming
  // cc_policy, says why.
  bool load(const Config& config, const AsnDatabase* asn_db, std::string* error);
  // The controllers' cohorts (control/cc_controller.h): the ASNs they keep
  // weights for, and every cohort's weights. Weights go to the active
  // generation at once; a changed ASN set needs the trie to name those ASNs,
  // so the caller reinstalls with load().
  enum class CohortUpdate { kApplied, kNeedsInstall, kFailed };
  CohortUpdate set_cohorts(const std::vector<uint32_t>& asns, const std::vector<CohortWeights>& weights,
                           std::string* error);
  // The names of every kept install's rules, which the record pipeline
  // gives each flow (load() adds to them, on the daemon's thread).
  const RuleNames& rule_names() const { return names_; }
  // Counters to Prometheus; the sysctl writes seen since the last call to
  // the log (rate-limited).
  void update_metrics();
  // The service that owns each cgroup, for the rules that name services
  // (kernel/policy_maps.h has what each does): every cgroup at start, then
  // each as it is named or forgotten. On the daemon's thread.
  bool set_service_cgroups(const std::vector<ServiceCgroup>& cgroups, std::string* error) {
    return maps_.set_service_cgroups(cgroups, error);
  }
  bool add_service_cgroup(const ServiceCgroup& cgroup, std::string* error) {
    return maps_.add_service_cgroup(cgroup, error);
  }
  bool remove_service_cgroup(uint64_t cgroup_id, std::string* error) {
    return maps_.remove_service_cgroup(cgroup_id, error);
  }
  // Stop refusing sysctl writes (the daemon is going away).
  void unload() { maps_.set_loaded(false); }

  // Across a restart whose maps were taken over (kernel/handover.h): the
  // names of the installs whose tags open flows carry, and the maps' own
  // user-space state. take_over() before the first load(); false and
  // *error when the state is malformed (nothing is taken then).
  nlohmann::json handover_state() const;
  bool take_over(const nlohmann::json& state, std::string* error);
  std::string to_json() const;

 private:
  // The kernel's CC lists into the policy maps (under mu_).
  void sync_cc_names();
  FlowProbe& probe_;
  PolicyMaps maps_;
  PolicyMetrics metrics_;
  RuleNames names_;  // load() and RuleNames::name(): the daemon's thread
  LogRateLimiter sysctl_log_{kSysctlLogBurst, kSysctlLogEvery, LogRateLimiter::Clock::now()};
  // Written by load() on the daemon's thread, read there by update_metrics()
  // and by to_json() on HTTP threads: mu_ orders the writes against to_json().
  mutable std::mutex mu_;
  std::array<std::shared_ptr<const CompiledPolicy>, TCPSCOPE_POLICY_GENERATIONS> by_gen_;
  int active_gen_ = -1;
  uint16_t active_install_ = 0;
  CcPolicy config_;  // as last loaded, for policy show
  std::vector<uint32_t> cohort_asns_;         // set_cohorts(): the daemon's thread
  std::vector<CohortWeights> cohort_weights_;
};

}  // namespace tcpscope
