#include "control/cohort_test.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>

namespace tcpscope::controller {

namespace {

// The mixing scale of the sequential tests, in log units: most power for
// changes around 10 %, the size of the effects the CDN study acted on.
constexpr double kMixingScale = 0.1;
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

}  // namespace

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

namespace {

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

}  // namespace

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

nlohmann::json test_json(const CohortTest& t, const std::vector<std::string>& arm_names) {
  nlohmann::json j;
  j["objective"] = objective_name(t.objective);
  j["arm"] = arm_names[t.winner];
  if (t.other >= 0) j["against"] = arm_names[t.other];
  j["change"] = t.pair.diff;
  // An end no difference could reach yet (too few connections) is null.
  j["ci"] = {finite_or_null(t.pair.ci_lo), finite_or_null(t.pair.ci_hi)};
  j["dof"] = t.pair.dof;
  j["e_value"] = t.e;
  j["guards_ok"] = t.guards_ok;
  if (!t.guard_note.empty()) j["guard"] = t.guard_note;
  return j;
}

std::string test_summary(const CohortTest& t, const std::vector<std::string>& arm_names,
                         const std::vector<ArmEvidence>& ev, size_t tested_cohorts, double fdr) {
  return std::string(objective_name(t.objective)) + " " + arm_names[t.winner] + " vs " +
         (t.other >= 0 ? arm_names[t.other] : "-") + " " + percent_text(t.pair.diff) + " [" +
         percent_text(t.pair.ci_lo) + ", " + percent_text(t.pair.ci_hi) + "], " +
         counts_text(ev[t.winner].objective(t.objective)) + " vs " +
         (t.other >= 0 ? counts_text(ev[t.other].objective(t.objective)) : "-") + ", e " + e_value_text(t.e) +
         " (e-BH over " + std::to_string(tested_cohorts) + " cohorts at FDR " + fixed(fdr, 3) + ")";
}

std::string reversal_note(double reversal_e) {
  return "reversal detector e " + fixed(reversal_e, 1) + " >= " + fixed(kReversalAlarm, 0);
}

}  // namespace tcpscope::controller
