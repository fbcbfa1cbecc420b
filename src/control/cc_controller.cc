#include "control/cc_controller.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <numeric>
#include <sstream>
#include <stdexcept>

#include "control/connection_table.h"
#include "control/controller_metrics.h"
#include "control/evidence_gate.h"
#include "record/flow_record.h"
#include "record/transfer_record.h"
#include "tcpscope/policy.h"
#include "text/json_text.h"

namespace tcpscope {

namespace {

// The mixing scale of the sequential tests, in log units: most power for
// changes around 10 %, the size of the effects the CDN study acted on.
constexpr double kMixingScale = 0.1;
// Version 4: the evidence as ratios over connections (sequential_test.h),
// with each open connection's sums. Versions 1 to 3 counted transfers as
// independent units, which cannot be turned into connections: their
// cohorts' states and weights are kept, their evidence starts afresh.
constexpr int kStateVersion = 4;
// ASNs followed while pooled, per allowed ASN cohort (their evidence decides
// which are promoted); the smallest are dropped beyond that.
constexpr size_t kCandidatesPerCohort = 4;
constexpr size_t kMinCandidates = 64;
// A decided cohort is also watched batch by batch (the evidence since the
// last batch, clustered by connection like the rest): each batch's e-value
// that the winner is worse, multiplied up
// in an e-detector (CUSUM: R = max(R, 1) * e, Shin, Ramdas and Rinaldo,
// "E-detectors"), reverts it once R reaches kReversalAlarm. The cumulative
// test alone needs as long to overturn a winner as it was good before; the
// detector sees a turn within batches of it. With no change it alarms less
// than once in kReversalAlarm batches on average (at least three days of
// 30 s intervals); a batch waits for kMinBatch values per arm (and
// min_connections connections), so that its variance is not a handful of values.
constexpr double kReversalAlarm = 1e4;
constexpr uint64_t kMinBatch = 30;
// The detector's mixing scale: most power for changes around 50 %, a
// winner turning clearly worse; small drifts are the cumulative test's.
constexpr double kReversalMixingScale = 0.5;
// A cohort's evidence is send transfers; on a kernel without them it waits
// for nothing that will come.
constexpr const char* kNoSendTransfers =
    "no send transfers on this kernel (they need tcp_sendmsg_locked, Linux 6.16, or tcp_probe)";
size_t candidate_cap(const ControllerSpec& s) { return std::max(kMinCandidates, kCandidatesPerCohort * s.max_cohorts); }

std::string fixed(double v, int digits) {
  char buf[64];
  std::snprintf(buf, sizeof(buf), "%.*f", digits, v);
  return buf;
}

// An e-value: plain below 10^4, else in scientific notation (a decisive
// e-value can have 60 digits).
std::string e_value_text(double e) {
  if (e < 1e4) return fixed(e, 1);
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.1e", e);
  return buf;
}

std::string percent_text(double change) {
  if (std::isinf(change)) return change > 0 ? "+inf" : "-inf";
  return (change >= 0 ? "+" : "") + fixed(change * 100, 1) + "%";
}

nlohmann::json finite_or_null(double v) { return std::isfinite(v) ? nlohmann::json(v) : nlohmann::json(nullptr); }

// "1200 transfers of 40 connections"
std::string counts_text(const ClusteredRatio& r) {
  return std::to_string(static_cast<uint64_t>(r.x)) + " transfers of " + std::to_string(r.clusters) + " connections";
}

std::vector<uint32_t> equal_shares(size_t k) {
  std::vector<uint32_t> w(k, static_cast<uint32_t>(100 / k));
  for (size_t j = 0; j < 100 % k; ++j) ++w[j];
  return w;
}

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

const char* cohort_state_name(CohortState s) {
  switch (s) {
    case CohortState::kExploring: return "exploring";
    case CohortState::kDecided: return "decided";
    case CohortState::kReverted: return "reverted";
  }
  return "exploring";
}

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
    c.weights = equal_shares(arm_names.size());
    c.evidence.assign(arm_names.size(), ArmEvidence());
    c.epoch_start_s = now_s;
    return c;
  }
};

CcController::CcController(std::shared_ptr<prometheus::Registry> registry, LogSink log)
    : metrics_(std::make_unique<ControllerMetrics>(std::move(registry))), log_(std::move(log)) {}

CcController::~CcController() = default;

bool CcController::empty() const {
  std::lock_guard<std::mutex> lock(mu_);
  return rules_.empty();
}

namespace {

// What a saved state must have been made under to apply: every setting
// of the rule that changes what its evidence means or how it is judged.
nlohmann::json settings_of(const ControllerSpec& s, const CcMatch& m, const std::vector<std::string>& class_names,
                           uint64_t throughput_min_bytes) {
  nlohmann::json prefixes = nlohmann::json::array();
  for (const auto& p : m.prefixes) prefixes.push_back(p.to_string());
  return {{"arms", s.arms},
          {"cohort", s.cohort == CohortKind::kAsn ? "asn" : "peer_class"},
          {"control_percent", s.control_percent},
          {"min_transfers", s.min_transfers},
          {"min_connections", s.min_connections},
          {"fdr", s.fdr},
          {"max_cohorts", s.max_cohorts},
          {"guards", {s.retrans_share_increase, s.rtt_inflation_increase}},
          {"match", {{"peer_class", m.peer_class.value_or("")}, {"asns", m.asns}, {"prefixes", prefixes},
                     {"lports", m.lports}}},
          {"peer_classes", class_names},
          {"throughput_min_bytes", throughput_min_bytes}};
}

}  // namespace

void CcController::configure(const Config& config) {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<std::unique_ptr<Rule>> next;
  std::vector<std::string> class_names;
  for (const auto& c : config.peer_classes) class_names.push_back(c.name);
  class_names.push_back(config.default_peer_class);
  const uint16_t port_start = unprivileged_port_start();
  for (uint32_t i = 0; i < config.cc_policy.rules.size(); ++i) {
    const CcRule& cr = config.cc_policy.rules[i];
    if (!cr.controller) continue;
    std::unique_ptr<Rule> r;
    const nlohmann::json settings = settings_of(*cr.controller, cr.match, class_names, config.throughput_min_bytes);
    for (auto& old : rules_)
      if (old && old->name == cr.name && old->spec == *cr.controller &&
          settings_of(old->spec, old->match, old->class_names, old->throughput_min_bytes) == settings)
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
    r->gate = EvidenceGate{cr.match.lports, port_start, {}, local_addresses_};
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
  const EvidenceVerdict verdict = r.gate.judge(record.dir, record.netns, record.laddr, record.lport, record.raddr);
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
  ConnectionTable::Entry* conn = r.connections.find_or_add(connection_key(t), static_cast<double>(t.end_ns) / 1e9);
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

namespace {

// One test of a cohort: its hypothesis' e-value and what a decision on it
// would rest on.
struct CohortTest {
  bool testable = false;
  double e = 1;
  int winner = -1;
  int other = -1;  // the arm the weakest pair was against
  Objective objective = Objective::kFct;
  SequentialResult pair;  // winner vs other, diff from other to winner
  bool guards_ok = true;
  std::string guard_note;  // the guard that failed, for the log
  bool reversal_alarm = false;  // decided: the batch detector saw the winner turn worse
};

std::string retrans_note(const ArmEvidence& w, const ArmEvidence& x) {
  return "retransmit share " + fixed(w.retrans().ratio() * 100, 2) + "% vs " + fixed(x.retrans().ratio() * 100, 2) +
         "%";
}

std::string inflation_note(const ArmEvidence& w, const ArmEvidence& x) {
  return "RTT inflation x" + fixed(std::exp(w.rtt_inflation().ratio()), 2) + " vs x" +
         fixed(std::exp(x.rtt_inflation().ratio()), 2);
}

// The arm has min_transfers transfers from min_connections connections on `o`.
bool enough(const ArmEvidence& a, Objective o, const ControllerSpec& spec) {
  return a.objective(o).x >= static_cast<double>(spec.min_transfers) &&
         a.objective(o).clusters >= spec.min_connections;
}
bool enough(const std::vector<ArmEvidence>& ev, Objective o, const ControllerSpec& spec) {
  return !ev.empty() && std::all_of(ev.begin(), ev.end(), [&](const ArmEvidence& a) { return enough(a, o, spec); });
}

// The relative change of `to`'s geometric mean from `from`'s on `o`.
SequentialResult compare_arms(const ArmEvidence& from, const ArmEvidence& to, Objective o, double tau, double alpha) {
  return as_relative_change(mixture_sprt(from.objective(o), to.objective(o), tau, alpha));
}

// diff of `to` relative to `from`, signed so that > 0 is better for `to`.
double better_by(Objective o, double diff) { return lower_is_better(o) ? -diff : diff; }

nlohmann::json arm_json(const ArmEvidence& a) {
  nlohmann::json j;
  j["transfers"] = a.transfers();
  j["n_fct"] = static_cast<uint64_t>(a.objective(Objective::kFct).x);
  j["n_throughput"] = static_cast<uint64_t>(a.objective(Objective::kThroughput).x);
  j["connections_fct"] = a.objective(Objective::kFct).clusters;
  j["connections_throughput"] = a.objective(Objective::kThroughput).clusters;
  // The sketches hold the metrics' units: fct µs (shown in ms), throughput
  // bytes/s (shown in bit/s, as network rates are quoted).
  if (!a.sketch(Objective::kFct).empty()) j["fct_p50_ms"] = a.sketch(Objective::kFct).quantile(0.5) / 1e3;
  if (!a.sketch(Objective::kThroughput).empty())
    j["throughput_p50_bps"] = a.sketch(Objective::kThroughput).quantile(0.5) * display_scale(Measure::kThroughput);
  if (a.retrans().x > 0) j["retrans_share"] = a.retrans().ratio();
  if (a.rtt_inflation().x > 0) j["rtt_inflation"] = std::exp(a.rtt_inflation().ratio());
  return j;
}

// Exploring: is one arm better than every other on an objective?
CohortTest test_exploring(const std::vector<ArmEvidence>& ev, const ControllerSpec& spec) {
  CohortTest best;
  int testable_objectives = 0;
  std::vector<CohortTest> per_objective;
  for (Objective o : {Objective::kFct, Objective::kThroughput}) {
    if (!enough(ev, o, spec)) continue;
    ++testable_objectives;
    CohortTest t;
    t.objective = o;
    t.winner = 0;
    for (int a = 1; a < static_cast<int>(ev.size()); ++a) {
      const double m = ev[a].objective(o).ratio(), w = ev[t.winner].objective(o).ratio();
      if (lower_is_better(o) ? m < w : m > w) t.winner = a;
    }
    t.e = HUGE_VAL;
    for (int a = 0; a < static_cast<int>(ev.size()); ++a) {
      if (a == t.winner) continue;
      SequentialResult r = compare_arms(ev[a], ev[t.winner], o, kMixingScale, spec.fdr);
      const double e = r.testable ? r.e_value : 1;
      if (e < t.e) t.e = e, t.other = a, t.pair = r;
    }
    t.testable = true;
    per_objective.push_back(t);
  }
  for (auto& t : per_objective) {
    t.e /= testable_objectives;  // the larger of m e-values over m is an e-value
    if (!best.testable || t.e > best.e) best = t;
  }
  if (!best.testable) return best;
  // Guards, and the other objective: the winner must not be worse there.
  const ArmEvidence& w = ev[best.winner];
  for (int a = 0; a < static_cast<int>(ev.size()); ++a) {
    if (a == best.winner) continue;
    const ArmEvidence& x = ev[a];
    if (w.retrans().x > 0 && x.retrans().x > 0 &&
        w.retrans().ratio() - x.retrans().ratio() > spec.retrans_share_increase) {
      best.guards_ok = false;
      best.guard_note = retrans_note(w, x);
    }
    if (w.rtt_inflation().clusters >= 2 && x.rtt_inflation().clusters >= 2 &&
        std::exp(w.rtt_inflation().ratio() - x.rtt_inflation().ratio()) - 1 > spec.rtt_inflation_increase) {
      best.guards_ok = false;
      best.guard_note = inflation_note(w, x);
    }
    for (Objective o : {Objective::kFct, Objective::kThroughput}) {
      if (o == best.objective || !enough(ev, o, spec)) continue;
      SequentialResult r = compare_arms(x, w, o, kMixingScale, spec.fdr);
      const bool worse = lower_is_better(o) ? r.ci_lo > 0 : r.ci_hi < 0;
      if (r.testable && worse) {
        best.guards_ok = false;
        best.guard_note = std::string(objective_name(o)) + " " + percent_text(r.diff) + " [" +
                          percent_text(r.ci_lo) + ", " + percent_text(r.ci_hi) + "]";
      }
    }
  }
  return best;
}

// Decided: is the winner now worse than an arm of the control slice on the
// objective it won, or beyond a guard's bound?
// The current batch (`batch`, each arm's evidence since the last batch): its
// e-value that the winner is worse than the worst other arm (1 until every
// arm has kMinBatch values from min_connections connections, the batch then
// going on), multiplied into the detector `reversal_e`; then a new batch.
bool reversal_seen(int winner, Objective o, const ControllerSpec& spec, std::vector<ArmEvidence>* batch,
                   double* reversal_e) {
  const size_t k = batch->size();
  for (const auto& a : *batch)
    if (a.objective(o).x < kMinBatch || a.objective(o).clusters < spec.min_connections) return false;
  double e = 0;
  for (size_t a = 0; a < k; ++a) {
    if (static_cast<int>(a) == winner) continue;
    const SequentialResult r = compare_arms((*batch)[a], (*batch)[winner], o, kReversalMixingScale, 0.05);
    e = std::max(e, r.testable && better_by(o, r.diff) < 0 ? r.e_value / static_cast<double>(k - 1) : 0.0);
  }
  batch->assign(k, ArmEvidence());
  *reversal_e = std::max(*reversal_e, 1.0) * e;
  return *reversal_e >= kReversalAlarm;
}

CohortTest test_decided(const std::vector<ArmEvidence>& ev, int winner, Objective o, const ControllerSpec& spec,
                        std::vector<ArmEvidence>* batch, double* reversal_e) {
  CohortTest t;
  t.winner = winner;
  t.objective = o;
  const int others = static_cast<int>(ev.size()) - 1;
  const ArmEvidence& w = ev[winner];
  if (batch->size() != ev.size())
    batch->assign(ev.size(), ArmEvidence());  // restored, or decided just now: the first batch starts
  else
    t.reversal_alarm = reversal_seen(winner, o, spec, batch, reversal_e);
  for (int a = 0; a < static_cast<int>(ev.size()); ++a) {
    if (a == winner) continue;
    const ArmEvidence& x = ev[a];
    if (!enough(w, o, spec) || !enough(x, o, spec)) continue;
    t.testable = true;
    SequentialResult r = compare_arms(x, w, o, kMixingScale, spec.fdr);
    // Evidence counts only in the worse direction (e * 1{worse} is still an
    // e-value); the largest of `others` over `others` stays one.
    const double e = r.testable && better_by(o, r.diff) < 0 ? r.e_value / others : 1;
    if (t.other < 0 || e > t.e) t.e = e, t.other = a, t.pair = r;
    SequentialResult g = mixture_sprt(x.retrans(), w.retrans(), kMixingScale, spec.fdr);
    if (g.testable && g.ci_lo > spec.retrans_share_increase) {
      t.guards_ok = false;
      t.guard_note = retrans_note(w, x);
    }
    SequentialResult gi = as_relative_change(mixture_sprt(x.rtt_inflation(), w.rtt_inflation(), kMixingScale, spec.fdr));
    if (gi.testable && gi.ci_lo > spec.rtt_inflation_increase) {
      t.guards_ok = false;
      t.guard_note = inflation_note(w, x);
    }
  }
  return t;
}

}  // namespace

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
                       ? test_decided(c.evidence, c.winner, c.objective, r.spec, &c.batch, &c.reversal_e)
                       : test_exploring(c.evidence, r.spec);
    nlohmann::json j;
    j["hypothesis"] = c.state == CohortState::kDecided ? "winner worse than the control slice"
                                                        : "one arm better than every other";
    if (t.testable) {
      c.max_e = std::max(c.max_e, t.e);
      j["objective"] = objective_name(t.objective);
      j["arm"] = r.arm_names[t.winner];
      if (t.other >= 0) j["against"] = r.arm_names[t.other];
      j["change"] = t.pair.diff;
      // An end no difference could reach yet (too few connections) is null.
      j["ci"] = {finite_or_null(t.pair.ci_lo), finite_or_null(t.pair.ci_hi)};
      j["dof"] = t.pair.dof;
      j["e_value"] = t.e;
      j["p_value"] = always_valid_p(c.max_e);
      j["guards_ok"] = t.guards_ok;
      if (!t.guard_note.empty()) j["guard"] = t.guard_note;
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
    for (size_t a = 0; a < k; ++a) evidence["arms"][r.arm_names[a]] = arm_json(c.evidence[a]);
    const std::string what = "rule " + r.name + " cohort " + (c.is_asn ? "asn " : "peer_class ") + c.label;
    const std::string stats = std::string(objective_name(t.objective)) + " " + r.arm_names[t.winner] + " vs " +
                              (t.other >= 0 ? r.arm_names[t.other] : "-") + " " + percent_text(t.pair.diff) + " [" +
                              percent_text(t.pair.ci_lo) + ", " + percent_text(t.pair.ci_hi) + "], " +
                              counts_text(c.evidence[t.winner].objective(t.objective)) + " vs " +
                              (t.other >= 0 ? counts_text(c.evidence[t.other].objective(t.objective)) : "-") +
                              ", e " + e_value_text(t.e) + " (e-BH over " + std::to_string(tests.size()) +
                              " cohorts at FDR " + fixed(r.spec.fdr, 3) + ")";
    if (c.state == CohortState::kDecided) {
      const bool objective_worse = (t.testable && is_rejected[i]) || t.reversal_alarm;
      if (!objective_worse && t.guards_ok) continue;
      c.state = CohortState::kReverted;
      c.decision = std::move(evidence);
      c.decision["action"] = "reverted";
      c.decision["at_s"] = now_s;
      if (log_)
        log_("tcpscope: controller: " + what + ": reverted " + r.arm_names[c.winner] + " (" +
             (t.reversal_alarm ? "its latest batches: reversal detector e " + fixed(c.reversal_e, 1) + " >= " +
                                     fixed(kReversalAlarm, 0) + "; " + stats
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

namespace {

template <class Cohort>
nlohmann::json cohort_status(const std::vector<std::string>& arm_names, const Cohort& c) {
  nlohmann::json j;
  j["cohort"] = c.label;
  j["kind"] = c.is_asn ? "asn" : "peer_class";
  j["state"] = cohort_state_name(c.state);
  j["winner"] = c.winner >= 0 ? nlohmann::json(arm_names[c.winner]) : nlohmann::json(nullptr);
  j["weights"] = nlohmann::json::object();
  for (size_t a = 0; a < arm_names.size(); ++a) j["weights"][arm_names[a]] = c.weights[a];
  j["decided_at_s"] = c.decided_at_s ? nlohmann::json(*c.decided_at_s) : nlohmann::json(nullptr);
  nlohmann::json ev;
  ev["since_s"] = c.epoch_start_s;
  ev["arms"] = nlohmann::json::object();
  for (size_t a = 0; a < arm_names.size(); ++a) ev["arms"][arm_names[a]] = arm_json(c.evidence[a]);
  ev["test"] = c.last_test;
  if (!c.decision.is_null()) ev["last_decision"] = c.decision;
  j["evidence"] = std::move(ev);
  return j;
}

}  // namespace

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

std::string CcController::status_json() const {
  std::lock_guard<std::mutex> lock(mu_);
  nlohmann::json doc;
  if (!send_transfers_) doc["note"] = kNoSendTransfers;
  doc["rules"] = nlohmann::json::array();
  for (const auto& r : rules_) {
    nlohmann::json rj;
    rj["rule"] = r->name;
    rj["arms"] = r->arm_names;
    rj["cohort"] = r->spec.cohort == CohortKind::kAsn ? "asn" : "peer_class";
    rj["control_percent"] = r->spec.control_percent;
    rj["min_transfers"] = r->spec.min_transfers;
    rj["min_connections"] = r->spec.min_connections;
    rj["interval_s"] = r->spec.interval_s;
    rj["fdr"] = r->spec.fdr;
    rj["decisions"] = r->decisions;
    rj["reverts"] = r->reverts;
    rj["pooled_asns"] = r->candidates.size();
    rj["records_refused"] = nlohmann::json::object();
    for (int v = 1; v < kEvidenceVerdicts; ++v)
      rj["records_refused"][to_string(static_cast<EvidenceVerdict>(v))] = r->refused[v];
    rj["cohorts"] = nlohmann::json::array();
    for (const auto& [_, c] : r->pools) rj["cohorts"].push_back(cohort_status(r->arm_names, c));
    for (const auto& [_, c] : r->asns) rj["cohorts"].push_back(cohort_status(r->arm_names, c));
    doc["rules"].push_back(std::move(rj));
  }
  return json_text(doc, 2) + "\n";
}

// ---------------------------------------------------------------------------
// Persistence

namespace {

// The open connections' sums of each evidence (by its id), as saved: one
// array per connection, [key, fct y, fct x, throughput y, throughput x,
// inflation y, inflation x, last seen s].
using OpenSums = std::map<uint64_t, nlohmann::json>;

OpenSums open_sums(const ConnectionTable& table) {
  OpenSums out;
  table.for_each_slot([&](uint64_t key, const ConnectionSums& s, double last_seen_s) {
    auto& list = out[s.evidence];
    if (list.is_null()) list = nlohmann::json::array();
    list.push_back({key, s.objective[0].y, s.objective[0].x, s.objective[1].y, s.objective[1].x, s.inflation.y,
                    s.inflation.x, last_seen_s});
  });
  return out;
}

nlohmann::json evidence_json(const std::vector<ArmEvidence>& ev, const OpenSums& open) {
  nlohmann::json j = nlohmann::json::array();
  for (const auto& a : ev) {
    nlohmann::json aj = a.to_json();
    auto it = open.find(a.id());
    aj["open"] = it == open.end() ? nlohmann::json::array() : it->second;
    j.push_back(std::move(aj));
  }
  return j;
}

template <class Cohort>
nlohmann::json cohort_state(const Cohort& c, const OpenSums& open) {
  nlohmann::json j = {{"label", c.label},
                      {"is_asn", c.is_asn},
                      {"kernel_key", c.kernel_key},
                      {"state", cohort_state_name(c.state)},
                      {"winner", c.winner},
                      {"objective", objective_name(c.objective)},
                      {"weights", c.weights},
                      {"epoch_start_s", c.epoch_start_s},
                      {"max_e", c.max_e},
                      {"decision", c.decision},
                      {"last_test", c.last_test}};
  if (c.decided_at_s) j["decided_at_s"] = *c.decided_at_s;
  j["evidence"] = evidence_json(c.evidence, open);
  return j;
}

// Checked reads of a saved state: a value of the wrong type or out of
// range is an error, never a silent conversion.
bool non_negative_integer(const nlohmann::json& v) {
  return v.is_number_unsigned() || (v.is_number_integer() && v.get<int64_t>() >= 0);
}
uint64_t u64_at(const nlohmann::json& j, const char* key) {
  const auto& v = j.at(key);
  if (!non_negative_integer(v)) throw std::invalid_argument(std::string(key) + " is not an unsigned integer");
  return v.get<uint64_t>();
}
uint32_t u32_at(const nlohmann::json& j, const char* key) {
  const uint64_t v = u64_at(j, key);
  if (v > UINT32_MAX) throw std::invalid_argument(std::string(key) + " " + std::to_string(v) + " is out of range");
  return static_cast<uint32_t>(v);
}
double finite_at(const nlohmann::json& j, const char* key) {
  const auto& v = j.at(key);
  if (!v.is_number() || !std::isfinite(v.get<double>())) throw std::invalid_argument(std::string(key) + " is not a number");
  return v.get<double>();
}
// An ASN written as decimal text: 1 to 2^32 - 1.
uint32_t asn_of(const std::string& text) {
  if (text.empty() || text.size() > 10 || text.find_first_not_of("0123456789") != std::string::npos)
    throw std::invalid_argument("ASN \"" + text + "\" is not a decimal number");
  const uint64_t v = std::stoull(text);
  if (v == 0 || v > UINT32_MAX) throw std::invalid_argument("ASN " + text + " is out of range");
  return static_cast<uint32_t>(v);
}

// One connection's saved sums, checked: x values are counts of transfers.
struct SavedSums {
  uint64_t key;
  ConnectionSums sums;
  double last_seen_s;
};
SavedSums saved_sums(const nlohmann::json& j) {
  if (!j.is_array() || j.size() != 8 || !non_negative_integer(j[0]))
    throw std::invalid_argument("an open connection's sums are malformed");
  double v[7];
  for (int i = 0; i < 7; ++i) {
    if (!j[i + 1].is_number() || !std::isfinite(j[i + 1].get<double>()))
      throw std::invalid_argument("an open connection's sums are not numbers");
    v[i] = j[i + 1].get<double>();
  }
  for (int i : {1, 3, 5})
    if (v[i] < 0 || v[i] > 1e15) throw std::invalid_argument("an open connection's count is out of range");
  SavedSums s{j[0].get<uint64_t>(), {}, v[6]};
  s.sums.objective[0] = {v[0], v[1]};
  s.sums.objective[1] = {v[2], v[3]};
  s.sums.inflation = {v[4], v[5]};
  return s;
}

// The evidence of k arms with their open connections' sums (each given its
// new evidence id). Throws on anything malformed.
std::vector<ArmEvidence> evidence_from(const nlohmann::json& j, size_t k, std::vector<SavedSums>* open) {
  if (!j.is_array() || j.size() != k) throw std::invalid_argument("evidence is not one per arm");
  std::vector<ArmEvidence> ev(k);
  for (size_t a = 0; a < k; ++a) {
    if (!ArmEvidence::from_json(j[a], &ev[a])) throw std::invalid_argument("malformed evidence");
    const auto& list = j[a].at("open");
    if (!list.is_array() || list.size() > ConnectionTable::kMaxConnections)
      throw std::invalid_argument("open connections malformed");
    for (const auto& oj : list) {
      SavedSums s = saved_sums(oj);
      s.sums.evidence = ev[a].id();
      open->push_back(s);
    }
  }
  return ev;
}

}  // namespace

nlohmann::json CcController::save() const {
  std::lock_guard<std::mutex> lock(mu_);
  nlohmann::json doc = {{"version", kStateVersion}, {"rules", nlohmann::json::object()}};
  for (const auto& r : rules_) {
    const OpenSums open = open_sums(r->connections);
    nlohmann::json rj;
    rj["settings"] = settings_of(r->spec, r->match, r->class_names, r->throughput_min_bytes);
    rj["decisions"] = r->decisions;
    rj["reverts"] = r->reverts;
    rj["cohorts"] = nlohmann::json::array();
    for (const auto& [_, c] : r->pools) rj["cohorts"].push_back(cohort_state(c, open));
    for (const auto& [_, c] : r->asns) rj["cohorts"].push_back(cohort_state(c, open));
    rj["candidates"] = nlohmann::json::object();
    for (const auto& [asn, ev] : r->candidates) rj["candidates"][std::to_string(asn)] = evidence_json(ev, open);
    doc["rules"][r->name] = std::move(rj);
  }
  return doc;
}

bool CcController::restore(const nlohmann::json& doc, std::string* error) {
  std::lock_guard<std::mutex> lock(mu_);
  // Everything is parsed and checked before anything is applied.
  struct Parsed {
    Rule* rule;
    std::map<std::string, Cohort> pools;
    std::map<uint32_t, Cohort> asns;
    std::map<uint32_t, std::vector<ArmEvidence>> candidates;
    std::vector<SavedSums> open;
    uint64_t decisions, reverts;
  };
  std::vector<Parsed> parsed;
  int version = 0;
  try {
    if (!doc.is_object() || !doc.at("version").is_number_integer() || doc.at("version") < 1 ||
        doc.at("version") > kStateVersion) {
      *error = "not a version 1 to " + std::to_string(kStateVersion) + " controller state";
      return false;
    }
    version = doc.at("version").get<int>();
    // Before version 4 the evidence counted transfers as independent units:
    // the cohorts' states and weights are kept, their evidence is not.
    const bool with_evidence = version >= 4;
    if (!doc.at("rules").is_object()) throw std::invalid_argument("rules is not an object");
    for (const auto& [name, rj] : doc.at("rules").items()) {
      auto it = by_name_.find(name);
      if (it == by_name_.end()) continue;  // no longer a controller rule
      Rule& r = *it->second;
      const size_t k = r.arm_names.size();
      if (rj.at("settings") != settings_of(r.spec, r.match, r.class_names, r.throughput_min_bytes))
        continue;  // the rule changed: it starts afresh
      Parsed p{&r, {}, {}, {}, {}, u64_at(rj, "decisions"), u64_at(rj, "reverts")};
      if (!rj.at("cohorts").is_array() || rj.at("cohorts").size() > r.class_names.size() + r.spec.max_cohorts)
        throw std::invalid_argument("more cohorts than the rule can have");
      for (const auto& cj : rj.at("cohorts")) {
        Cohort c;
        c.label = cj.at("label").get<std::string>();
        c.is_asn = cj.at("is_asn").get<bool>();
        c.kernel_key = u32_at(cj, "kernel_key");
        const std::string state = cj.at("state").get<std::string>();
        if (state == "decided") {
          c.state = CohortState::kDecided;
        } else if (state == "reverted") {
          c.state = CohortState::kReverted;
        } else if (state != "exploring") {
          *error = "cohort " + c.label + ": unknown state \"" + state + "\"";
          return false;
        }
        if (!cj.at("winner").is_number_integer() || cj.at("winner") < -1 || cj.at("winner") >= static_cast<int>(k))
          throw std::invalid_argument("cohort " + c.label + ": winner out of range");
        c.winner = cj.at("winner").get<int>();
        const std::string objective = cj.at("objective").get<std::string>();
        if (objective != "fct" && objective != "throughput")
          throw std::invalid_argument("cohort " + c.label + ": unknown objective \"" + objective + "\"");
        c.objective = objective == "throughput" ? Objective::kThroughput : Objective::kFct;
        if (!cj.at("weights").is_array() || cj.at("weights").size() != k)
          throw std::invalid_argument("cohort " + c.label + ": weights do not fit the rule's arms");
        uint64_t sum = 0;  // in 64 bits: no wrap-around passes for 100
        for (const auto& w : cj.at("weights")) {
          if (!non_negative_integer(w) || w.get<uint64_t>() > 100)
            throw std::invalid_argument("cohort " + c.label + ": a weight is not a percentage");
          sum += w.get<uint64_t>();
          c.weights.push_back(w.get<uint32_t>());
        }
        const bool winner_ok = c.state == CohortState::kDecided ? c.winner >= 0 : c.winner == -1;
        if (!winner_ok || sum != 100) {
          *error = "cohort " + c.label + ": winner or weights do not fit the rule's " + std::to_string(k) + " arms";
          return false;
        }
        c.epoch_start_s = finite_at(cj, "epoch_start_s");
        c.max_e = finite_at(cj, "max_e");
        if (c.max_e < 1) throw std::invalid_argument("cohort " + c.label + ": max_e below 1");
        c.decision = cj.at("decision");
        c.last_test = cj.value("last_test", nlohmann::json());
        if (cj.contains("decided_at_s")) c.decided_at_s = finite_at(cj, "decided_at_s");
        if (with_evidence) {
          c.evidence = evidence_from(cj.at("evidence"), k, &p.open);
        } else {
          c.evidence.assign(k, ArmEvidence());
          c.epoch_start_s = 0;  // the next test starts the epoch
          c.max_e = 1;
        }
        if (c.is_asn) {
          if (r.spec.cohort != CohortKind::kAsn || c.kernel_key != asn_of(c.label)) {
            *error = "cohort " + c.label + ": not an ASN cohort of this rule";
            return false;
          }
          p.asns.emplace(c.kernel_key, std::move(c));
        } else {
          if (c.kernel_key != TCPSCOPE_COHORT_CLASS_KEY(r.class_id(c.label)) ||
              std::find(r.class_names.begin(), r.class_names.end(), c.label) == r.class_names.end())
            continue;  // the peer classes changed: that pool starts afresh
          p.pools.emplace(c.label, std::move(c));
        }
      }
      if (p.asns.size() > r.spec.max_cohorts) throw std::invalid_argument("more ASN cohorts than max_cohorts");
      if (with_evidence) {
        if (!rj.at("candidates").is_object() || rj.at("candidates").size() > candidate_cap(r.spec))
          throw std::invalid_argument("more candidate ASNs than the rule follows");
        for (const auto& [asn, ej] : rj.at("candidates").items())
          p.candidates.emplace(asn_of(asn), evidence_from(ej, k, &p.open));
      }
      if (p.open.size() > ConnectionTable::kMaxConnections * ConnectionTable::kSlots)
        throw std::invalid_argument("more open connections than the rule keeps");
      parsed.push_back(std::move(p));
    }
  } catch (const std::exception& e) {
    *error = e.what();
    return false;
  }
  if (version < 4 && log_ && !parsed.empty())
    log_("tcpscope: controller: saved state version " + std::to_string(version) + " counted transfers as "
         "independent units, not connections: the cohorts' states and weights are kept, their evidence starts "
         "afresh");
  for (auto& p : parsed) {
    Rule& r = *p.rule;
    r.pools = std::move(p.pools);
    r.asns = std::move(p.asns);
    r.candidates = std::move(p.candidates);
    r.decisions = p.decisions;
    r.reverts = p.reverts;
    r.connections.clear();
    for (const auto& s : p.open) r.connections.restore(s.key, s.sums, s.last_seen_s);
  }
  update_metrics();
  return true;
}

void CcController::update_metrics() {
  std::vector<ControllerMetrics::CohortWeightsSample> weights;
  std::map<std::pair<std::string, std::string>, uint64_t> states;
  for (const auto& r : rules_) {
    for (CohortState s : {CohortState::kExploring, CohortState::kDecided, CohortState::kReverted})
      states[{r->name, cohort_state_name(s)}] = 0;
    auto add = [&](const Cohort& c) {
      ++states[{r->name, cohort_state_name(c.state)}];
      for (size_t a = 0; a < r->arm_names.size(); ++a)
        weights.push_back({r->name, c.label, r->arm_names[a], c.weights[a]});
    };
    for (const auto& [_, c] : r->pools) add(c);
    for (const auto& [_, c] : r->asns) add(c);
    for (int v = 1; v < kEvidenceVerdicts; ++v)
      metrics_->set_refused(r->name, to_string(static_cast<EvidenceVerdict>(v)), r->refused[v]);
  }
  metrics_->set(weights, states);
}

}  // namespace tcpscope
