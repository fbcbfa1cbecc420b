// The controller's state machine (cc_controller.h): which rule and cohort
// a record counts for, each interval's test of every cohort and what it
// decides (explore, decide, ramp, revert), and ASN cohorts taking over from
// their pools. What the evidence says is cohort_test.cc's; what is shown,
// controller_status.cc's; what survives a restart, controller_saved_state.cc's.
#include "control/cc_controller.h"

#include <algorithm>
#include <cstdint>

#include "control/cohort_test.h"
#include "control/controller_metrics.h"
#include "control/controller_rules.h"
#include "record/flow_record.h"
#include "record/transfer_record.h"
#include "tcpscope/policy.h"

namespace tcpscope {

using controller::candidate_cap;
using controller::CohortTest;
using controller::equal_shares;
using controller::kNoSendTransfers;

namespace {

// The winner's share of the whole and its part of the control slice; the
// other arms split the rest of the slice (remainders to the first).
std::vector<uint32_t> decided_shares(size_t k, size_t winner, uint32_t winner_percent) {
  std::vector<uint32_t> w(k, 0);
  w[winner] = winner_percent;
  const uint32_t rest = 100 - winner_percent;
  const uint32_t others = static_cast<uint32_t>(k - 1);
  uint32_t extra = rest % others;
  for (size_t j = 0; j < k; ++j) {
    if (j == winner) continue;
    w[j] = rest / others + (extra ? 1 : 0);
    if (extra) --extra;
  }
  return w;
}

uint32_t winner_target(size_t k, uint32_t control_percent) {
  return 100 - control_percent + control_percent / static_cast<uint32_t>(k);
}

}  // namespace

CcController::CcController(std::shared_ptr<prometheus::Registry> registry, LogLine log)
    : metrics_(std::make_unique<ControllerMetrics>(std::move(registry))), log_(std::move(log)) {}

CcController::~CcController() = default;

bool CcController::empty() const {
  std::lock_guard<std::mutex> lock(mu_);
  return rules_.empty();
}

void CcController::configure(const Config& config) {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<std::unique_ptr<Rule>> pool = std::move(rules_);
  adopt(config, &pool);
  replaced_.clear();
  for (auto& r : pool)
    if (r) replaced_.push_back(std::move(r));
}

void CcController::revert(const Config& previous) {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<std::unique_ptr<Rule>> pool = std::move(rules_);
  for (auto& r : replaced_) pool.push_back(std::move(r));
  replaced_.clear();
  adopt(previous, &pool);
}

void CcController::confirm() {
  std::lock_guard<std::mutex> lock(mu_);
  replaced_.clear();
}

void CcController::adopt(const Config& config, std::vector<std::unique_ptr<Rule>>* pool) {
  std::vector<std::unique_ptr<Rule>> next;
  std::vector<std::string> class_names;
  for (const auto& c : config.peer_classes) class_names.push_back(c.name);
  class_names.push_back(config.default_peer_class);
  for (uint32_t i = 0; i < config.cc_policy.rules.size(); ++i) {
    const CcRule& cr = config.cc_policy.rules[i];
    if (!cr.controller) continue;
    std::unique_ptr<Rule> r;
    const nlohmann::json settings =
        controller::settings_of(*cr.controller, cr.match, class_names, config.throughput_min_bytes);
    for (auto& old : *pool)
      if (old && old->name == cr.name && old->spec == *cr.controller &&
          controller::settings_of(old->spec, old->match, old->class_names, old->throughput_min_bytes) == settings)
        r = std::move(old);
    if (!r) {
      r = std::make_unique<Rule>();
      r->name = cr.name;
      r->match = cr.match;
      r->spec = *cr.controller;
      r->arm_names = arm_names(cr.controller->arms);
      for (uint32_t a = 0; a < r->arm_names.size(); ++a) r->arm_index[r->arm_names[a]] = a;
      r->class_names = class_names;
      r->throughput_min_bytes = config.throughput_min_bytes;
    }
    r->index = i;
    r->gate = EvidenceGate{cr.match.lports, cr.match.services, {}, local_addresses_};
    for (const auto& name : cr.controller->evidence_netns) {
      auto ns = netns_by_name_.find(name);
      if (ns != netns_by_name_.end()) r->gate.netns.push_back(ns->second);
    }
    next.push_back(std::move(r));
  }
  rules_ = std::move(next);
  by_name_.clear();
  for (auto& r : rules_) by_name_[r->name] = r.get();
  update_metrics();
}

CcController::Cohort* CcController::cohort_of(Rule& r, uint32_t asn, const std::string& peer_class, bool* pooled) {
  *pooled = true;
  if (r.spec.cohort == CohortKind::kAsn && asn) {
    auto it = r.asns.find(asn);
    if (it != r.asns.end()) {
      *pooled = false;
      return &it->second;
    }
  }
  auto it = r.pools.find(peer_class);
  if (it == r.pools.end()) {
    // Bounded: one per peer class of the config.
    if (std::find(r.class_names.begin(), r.class_names.end(), peer_class) == r.class_names.end()) return nullptr;
    it = r.pools.emplace(peer_class, r.make_cohort(peer_class, false, TCPSCOPE_COHORT_CLASS_KEY(r.class_id(peer_class)),
                                                   0))
             .first;
  }
  return &it->second;
}

// Where a record of a controller rule's socket counts: its rule, arm and
// cohort (the pool when its ASN has none of its own), unless it is no
// controller's or the rule's evidence gate keeps it out (counted). mu_ held.
template <class Record>
std::optional<CcController::Target> CcController::target_of(const Record& record) {
  const Enrichment& rec = record.enrichment;
  if (!rec.experiment || *rec.experiment != kControllerExperiment || !rec.cc_rule || !rec.arm) return std::nullopt;
  auto rit = by_name_.find(*rec.cc_rule);
  if (rit == by_name_.end()) return std::nullopt;
  Rule& r = *rit->second;
  auto ait = r.arm_index.find(*rec.arm);
  if (ait == r.arm_index.end()) return std::nullopt;
  const EvidenceVerdict verdict = r.gate.judge(record, r.spec.evidence_user);
  if (verdict != EvidenceVerdict::kCounts) {
    ++r.refused[static_cast<int>(verdict)];
    return std::nullopt;
  }
  bool pooled = false;
  Cohort* c = cohort_of(r, rec.asn, rec.peer_class, &pooled);
  if (!c) return std::nullopt;
  // While its ASN is pooled, the ASN's own evidence too (followed for promotion).
  std::vector<ArmEvidence>* candidate = nullptr;
  if (pooled && rec.asn && r.spec.cohort == CohortKind::kAsn && r.spec.max_cohorts) {
    auto cit = r.candidates.find(rec.asn);
    if (cit != r.candidates.end()) candidate = &cit->second;
  }
  return Target{&r, ait->second, c, candidate};
}

void CcController::observe(const TransferRecord& t) {
  if (t.direction != TransferDirection::kSend) return;  // the peer's sending
  std::lock_guard<std::mutex> lock(mu_);
  auto target = target_of(t);
  if (!target) return;
  Rule& r = *target->rule;
  const uint32_t arm = target->arm;
  const uint32_t asn = t.enrichment.asn;
  if (!target->candidate && asn && r.spec.cohort == CohortKind::kAsn && r.spec.max_cohorts &&
      r.candidates.size() < candidate_cap(r.spec) && !r.asns.count(asn))
    target->candidate = &r.candidates.emplace(asn, std::vector<ArmEvidence>(r.arm_names.size())).first->second;
  ConnectionTable::Entry* conn =
      r.connections.find_or_add(connection_key(t), t.netns, static_cast<double>(t.end_ns) / 1e9);
  if (!conn) {
    ++r.refused[static_cast<int>(EvidenceVerdict::kConnectionCap)];
    return;
  }
  ArmEvidence& cohort = target->cohort->evidence[arm];
  ArmEvidence* batch = target->cohort->batch.size() > arm ? &target->cohort->batch[arm] : nullptr;
  ArmEvidence* candidate = target->candidate ? &(*target->candidate)[arm] : nullptr;
  const std::initializer_list<uint64_t> in_use = {cohort.id(), batch ? batch->id() : 0,
                                                  candidate ? candidate->id() : 0};
  for (ArmEvidence* e : {&cohort, batch, candidate})
    if (e) e->add_transfer(t, r.throughput_min_bytes, ConnectionTable::sums_in(conn, e->id(), in_use));
}

void CcController::observe(const FlowRecord& f) {
  std::lock_guard<std::mutex> lock(mu_);
  auto target = target_of(f);
  if (!target) return;
  target->cohort->evidence[target->arm].add_flow(f);
  if (target->candidate) (*target->candidate)[target->arm].add_flow(f);
  // Closed: its sums are final in every evidence, and its entry goes.
  target->rule->connections.close(connection_key(f));
}

void CcController::forget_closed(const SocketPass& pass) {
  std::lock_guard<std::mutex> lock(mu_);
  for (auto& r : rules_) r->closed_unseen += r->connections.drop_absent(pass);
}

void CcController::promote_asns(Rule& r, double now_s, bool* changed) {
  if (r.spec.cohort != CohortKind::kAsn) return;
  // Largest first, as long as there is room.
  std::vector<std::pair<uint64_t, uint32_t>> ready;
  for (const auto& [asn, ev] : r.candidates) {
    uint64_t least = UINT64_MAX, total = 0;
    for (const auto& a : ev) least = std::min(least, a.transfers()), total += a.transfers();
    if (least >= r.spec.min_transfers) ready.emplace_back(total, asn);
  }
  std::sort(ready.rbegin(), ready.rend());
  for (const auto& [total, asn] : ready) {
    if (r.asns.size() >= r.spec.max_cohorts) break;
    Cohort c = r.make_cohort(std::to_string(asn), true, asn, now_s);
    // Its pooled evidence is its own: each flow's arm was drawn at random,
    // whatever the pool's weights were.
    c.evidence = std::move(r.candidates[asn]);
    r.candidates.erase(asn);
    r.asns.emplace(asn, std::move(c));
    *changed = true;
    if (log_)
      log_("tcpscope: controller: rule " + r.name + ": ASN " + std::to_string(asn) + " has " +
           std::to_string(total) + " transfers, a cohort of its own from now on (exploring)");
  }
  // Keep the candidates bounded: drop the smaller half when full.
  if (r.candidates.size() >= candidate_cap(r.spec)) {
    std::vector<std::pair<uint64_t, uint32_t>> by_size;
    for (const auto& [asn, ev] : r.candidates) {
      uint64_t total = 0;
      for (const auto& a : ev) total += a.transfers();
      by_size.emplace_back(total, asn);
    }
    std::sort(by_size.begin(), by_size.end());
    for (size_t i = 0; i < by_size.size() / 2; ++i) r.candidates.erase(by_size[i].second);
  }
}

void CcController::ramp(Rule& r, bool* changed) {
  const size_t k = r.arm_names.size();
  auto step_one = [&](Cohort& c) {
    if (c.state != CohortState::kDecided || c.winner < 0) return;
    const uint32_t target = winner_target(k, r.spec.control_percent);
    const uint32_t now = c.weights[c.winner];
    if (now >= target) return;
    const uint32_t next = std::min(target, now + r.spec.ramp_step_percent);
    c.weights = decided_shares(k, static_cast<size_t>(c.winner), next);
    *changed = true;
  };
  for (auto& [_, c] : r.pools) step_one(c);
  for (auto& [_, c] : r.asns) step_one(c);
}

void CcController::test_rule(Rule& r, double now_s, bool* changed) {
  struct Pending {
    Cohort* cohort;
    CohortTest test;
  };
  std::vector<Pending> tests;
  auto consider = [&](Cohort& c) {
    if (c.epoch_start_s == 0) c.epoch_start_s = now_s;
    CohortTest t = c.state == CohortState::kDecided
                       ? controller::test_decided(c.evidence, c.winner, c.objective, r.spec, &c.batch, &c.reversal_e)
                       : controller::test_exploring(c.evidence, r.spec);
    nlohmann::json j;
    if (t.testable) {
      c.max_e = std::max(c.max_e, t.e);
      j = controller::test_json(t, r.arm_names);
      j["p_value"] = always_valid_p(c.max_e);
      if (c.state == CohortState::kDecided) j["reversal_e"] = c.reversal_e;
      tests.push_back({&c, t});
    } else if (t.reversal_alarm) {
      j["objective"] = objective_name(t.objective);
      j["arm"] = r.arm_names[t.winner];
      j["reversal_e"] = c.reversal_e;
      tests.push_back({&c, t});
    } else if (!send_transfers_) {
      j["waiting_for"] = kNoSendTransfers;
    } else {
      j["waiting_for"] = "min_transfers " + std::to_string(r.spec.min_transfers) + " from min_connections " +
                         std::to_string(r.spec.min_connections) + " per arm";
    }
    j["hypothesis"] = c.state == CohortState::kDecided ? "winner worse than the control slice"
                                                        : "one arm better than every other";
    c.last_test = std::move(j);
  };
  for (auto& [_, c] : r.pools) consider(c);
  for (auto& [_, c] : r.asns) consider(c);

  std::vector<double> e;
  for (const auto& p : tests) e.push_back(p.test.e);
  std::vector<size_t> rejected = e_benjamini_hochberg(e, r.spec.fdr);
  std::vector<bool> is_rejected(tests.size(), false);
  for (size_t i : rejected) is_rejected[i] = true;
  const size_t k = r.arm_names.size();
  for (size_t i = 0; i < tests.size(); ++i) {
    Cohort& c = *tests[i].cohort;
    const CohortTest& t = tests[i].test;
    nlohmann::json evidence = {{"arms", nlohmann::json::object()},
                               {"test", c.last_test},
                               {"fdr", r.spec.fdr},
                               {"tested_cohorts", tests.size()},
                               {"epoch_start_s", c.epoch_start_s}};
    for (size_t a = 0; a < k; ++a) evidence["arms"][r.arm_names[a]] = controller::arm_json(c.evidence[a]);
    const std::string what = "rule " + r.name + " cohort " + (c.is_asn ? "asn " : "peer_class ") + c.label;
    const std::string stats = controller::test_summary(t, r.arm_names, c.evidence, tests.size(), r.spec.fdr);
    if (c.state == CohortState::kDecided) {
      const bool objective_worse = (t.testable && is_rejected[i]) || t.reversal_alarm;
      if (!objective_worse && t.guards_ok) continue;
      c.state = CohortState::kReverted;
      c.decision = std::move(evidence);
      c.decision["action"] = "reverted";
      c.decision["at_s"] = now_s;
      if (log_)
        log_("tcpscope: controller: " + what + ": reverted " + r.arm_names[c.winner] + " (" +
             (t.reversal_alarm   ? "its latest batches: " + controller::reversal_note(c.reversal_e) + "; " + stats
              : objective_worse ? stats
                                : "guard: " + t.guard_note) +
             "); weights back to equal shares");
      c.winner = -1;
      c.decided_at_s.reset();
      c.weights = equal_shares(k);
      ++r.reverts;
      metrics_->count_decision(r.name, "reverted");
    } else {
      if (!is_rejected[i]) continue;
      if (!t.guards_ok) {
        c.last_test["blocked_by_guard"] = t.guard_note;
        continue;
      }
      c.state = CohortState::kDecided;
      c.winner = t.winner;
      c.objective = t.objective;
      c.decided_at_s = now_s;
      c.decision = std::move(evidence);
      c.decision["action"] = "decided";
      c.decision["at_s"] = now_s;
      ++r.decisions;
      metrics_->count_decision(r.name, "decided");
      if (log_)
        log_("tcpscope: controller: " + what + ": decided " + r.arm_names[t.winner] + " (" + stats +
             "; guards ok); its share ramps to " + std::to_string(winner_target(k, r.spec.control_percent)) +
             "% by " + std::to_string(r.spec.ramp_step_percent) + "% per " + std::to_string(r.spec.interval_s) +
             " s");
    }
    // A new epoch: the next decision rests on evidence gathered from now on.
    c.evidence.assign(k, ArmEvidence());
    c.batch.clear();
    c.reversal_e = 1;
    c.epoch_start_s = now_s;
    c.max_e = 1;
    *changed = true;
  }
}

CcController::StepResult CcController::step(double now_s) {
  StepResult out;
  std::lock_guard<std::mutex> lock(mu_);
  for (auto& rp : rules_) {
    Rule& r = *rp;
    if (now_s < r.next_test_s) continue;
    r.next_test_s = now_s + r.spec.interval_s;
    out.tested = true;
    ramp(r, &out.changed);
    test_rule(r, now_s, &out.changed);
    promote_asns(r, now_s, &out.changed);
  }
  if (out.tested) update_metrics();
  return out;
}

std::vector<uint32_t> CcController::cohort_asns() const {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<uint32_t> out;
  for (const auto& r : rules_)
    for (const auto& [asn, _] : r->asns) out.push_back(asn);
  std::sort(out.begin(), out.end());
  out.erase(std::unique(out.begin(), out.end()), out.end());
  return out;
}

std::vector<CohortWeights> CcController::cohort_weights() const {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<CohortWeights> out;
  for (const auto& r : rules_) {
    for (const auto& [_, c] : r->pools) out.push_back({r->index, c.kernel_key, c.weights});
    for (const auto& [_, c] : r->asns) out.push_back({r->index, c.kernel_key, c.weights});
  }
  return out;
}

void CcController::set_namespaces(std::map<std::string, uint32_t> netns_by_name,
                                  std::shared_ptr<const LocalAddresses> local) {
  std::lock_guard<std::mutex> lock(mu_);
  netns_by_name_ = std::move(netns_by_name);
  local_addresses_ = std::move(local);
  for (auto& r : rules_) {
    r->gate.local = local_addresses_;
    r->gate.netns.clear();
    for (const auto& name : r->spec.evidence_netns) {
      auto ns = netns_by_name_.find(name);
      if (ns != netns_by_name_.end()) r->gate.netns.push_back(ns->second);
    }
  }
}

void CcController::set_send_transfers(bool available) {
  std::lock_guard<std::mutex> lock(mu_);
  send_transfers_ = available;
}

}  // namespace tcpscope
