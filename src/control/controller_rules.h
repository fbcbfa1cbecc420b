// What the files implementing CcController share and its callers never see:
// a rule's cohorts and their state (what the state machine, cc_controller.cc,
// changes; controller_status.cc shows; controller_saved_state.cc saves), and
// the few settings more than one of them reads.
#pragma once

#include <algorithm>
#include <array>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "control/arm_evidence.h"
#include "control/cc_controller.h"
#include "control/connection_table.h"
#include "control/evidence_gate.h"

namespace tcpscope {

namespace controller {

// ASNs followed while pooled, per allowed ASN cohort (their evidence decides
// which are promoted); the smallest are dropped beyond that.
inline constexpr size_t kCandidatesPerCohort = 4;
inline constexpr size_t kMinCandidates = 64;
// A cohort's evidence is send transfers; on a kernel without them it waits
// for nothing that will come.
inline constexpr const char* kNoSendTransfers =
    "no send transfers on this kernel (they need tcp_sendmsg_locked, Linux 6.16, or tcp_probe)";
inline size_t candidate_cap(const ControllerSpec& s) {
  return std::max(kMinCandidates, kCandidatesPerCohort * s.max_cohorts);
}

inline std::vector<uint32_t> equal_shares(size_t k) {
  std::vector<uint32_t> w(k, static_cast<uint32_t>(100 / k));
  for (size_t j = 0; j < 100 % k; ++j) ++w[j];
  return w;
}

// What a saved state must have been made under to apply: every setting
// of the rule that changes what its evidence means or how it is judged
// (controller_saved_state.cc). A rule whose settings are unchanged keeps
// its cohorts across configure() too.
nlohmann::json settings_of(const ControllerSpec& s, const CcMatch& m, const std::vector<std::string>& class_names,
                           uint64_t throughput_min_bytes);

}  // namespace controller

struct CcController::Cohort {
  std::string label;       // "64501", or the peer class
  bool is_asn = false;
  uint32_t kernel_key = 0;  // the ASN, or TCPSCOPE_COHORT_CLASS_KEY(class id)
  CohortState state = CohortState::kExploring;
  int winner = -1;
  Objective objective = Objective::kFct;  // what the winner won
  std::vector<uint32_t> weights;
  std::vector<ArmEvidence> evidence;  // this epoch's, per arm
  // Decided: each arm's evidence of the current batch, and the reversal
  // detector's statistic (neither saved: a restart starts a batch and the
  // detector afresh).
  std::vector<ArmEvidence> batch;
  double reversal_e = 1;
  double epoch_start_s = 0;
  std::optional<double> decided_at_s;
  double max_e = 1;          // this epoch's largest e-value so far: its always-valid p
  nlohmann::json last_test;  // the latest test of this epoch, as shown
  nlohmann::json decision;   // the evidence of the last decision or revert
};

struct CcController::Rule {
  std::string name;
  uint32_t index = 0;  // in cc_policy.rules
  CcMatch match;
  ControllerSpec spec;
  std::vector<std::string> arm_names;
  std::map<std::string, uint32_t> arm_index;
  std::vector<std::string> class_names;  // as compile_policy numbers them
  uint64_t throughput_min_bytes = 0;
  EvidenceGate gate;
  // Records of the rule's sockets that the gate kept out, by verdict.
  std::array<uint64_t, kEvidenceVerdicts> refused{};
  std::map<std::string, Cohort> pools;    // by peer class
  std::map<uint32_t, Cohort> asns;        // ASN cohorts
  std::map<uint32_t, std::vector<ArmEvidence>> candidates;  // pooled ASNs followed for promotion
  ConnectionTable connections;  // the open ones with send transfers counted, each one's sums
  uint64_t closed_unseen = 0;   // entries dropped because the socket iterator no longer found them
  double next_test_s = 0;
  uint64_t decisions = 0, reverts = 0;

  uint32_t class_id(const std::string& peer_class) const {
    for (size_t i = 0; i < class_names.size(); ++i)
      if (class_names[i] == peer_class) return static_cast<uint32_t>(i);
    return static_cast<uint32_t>(class_names.size() - 1);
  }
  Cohort make_cohort(std::string label, bool is_asn, uint32_t key, double now_s) const {
    Cohort c;
    c.label = std::move(label);
    c.is_asn = is_asn;
    c.kernel_key = key;
    c.weights = controller::equal_shares(arm_names.size());
    c.evidence.assign(arm_names.size(), ArmEvidence());
    c.epoch_start_s = now_s;
    return c;
  }
};

}  // namespace tcpscope
