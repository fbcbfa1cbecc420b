// The statistics the closed loop decides with (control/cc_controller.h).
//
// Why sequential. The controller re-tests every cohort every interval. A
// fixed-horizon p-value checked again and again is bound to cross 0.05 on
// two identical arms sooner or later (the unit test's simulation: in 33.8 %
// of A/A cohorts within 40 looks; this test: 1.3 %). The mixture sequential probability ratio
// test (Robbins 1970; Johari, Pekelis, Walsh, "Always valid inference")
// avoids that: under "no difference" its likelihood ratio, mixed over a
// N(0, tau^2) prior on the difference theta, is a nonnegative martingale, so
// by Ville's inequality the chance that it EVER reaches 1/alpha is at most
// alpha, however often it is looked at. Its value at any look is an
// e-value, 1 / its running maximum an always-valid p-value, and the set of
// theta it would not reject is a confidence sequence: an interval that holds
// the true difference at every look at once.
//
// What is tested: theta = mean(log b) - mean(log a), the log of the ratio of
// the arms' geometric means (completion times and throughputs are
// log-normal-ish and their effects multiplicative), with the plug-in
// variance V = s_a^2/n_a + s_b^2/n_b. The Gaussian likelihood holds by the
// central limit theorem, which is why the controller waits for a minimum
// sample per arm before any test counts:
//   e  = sqrt(V / (V + tau^2)) * exp(tau^2 theta^2 / (2 V (V + tau^2)))
//   CS = theta +- sqrt(2 V (V + tau^2) / tau^2 * (log(1/alpha) + log((V + tau^2) / V) / 2))
// Proportions (retransmitted of sent segments) are tested the same way on
// the difference of shares with V = p(1-p)/n per arm.
//
// Across cohorts: e-BH (Wang and Ramdas, "False discovery rate control with
// e-values"): with K e-values, reject the k* largest, k* = max{k : e_(k) >=
// K / (alpha k)}. It holds the false discovery rate at alpha under any
// dependence between the cohorts and at data-dependent stopping times.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include <nlohmann/json_fwd.hpp>

namespace tcpscope {

// Running moments of log(value) of one arm (Welford), mergeable.
struct LogMoments {
  uint64_t n = 0;
  double mean = 0;  // of log(value)
  double m2 = 0;    // sum of squared deviations from the mean
  void add(double value);  // ignores values <= 0 and non-finite ones
  void add_log(double log_value);
  void merge(const LogMoments& o);  // Chan et al.'s parallel combination
  // The moments of the values added since `earlier` was a copy of this
  // (merge() undone).
  LogMoments since(const LogMoments& earlier) const;
  double variance() const;          // sample variance, 0 below 2 values
};

// Events out of trials (retransmitted segments of segments sent).
struct Proportion {
  double events = 0, trials = 0;
  void add(double e, double t);
  double share() const;
};

struct SequentialResult {
  bool testable = false;  // both arms have 2 values (trials) and V > 0
  double diff = 0;        // log moments: exp(theta) - 1, the relative change from a to b; proportions: b - a
  double ci_lo = 0, ci_hi = 0;  // the 1 - alpha confidence sequence of diff, valid at every look
  double e_value = 1;     // the mixture likelihood ratio at this look (capped at e^690)
};

SequentialResult mixture_sprt(const LogMoments& a, const LogMoments& b, double tau, double alpha);
SequentialResult mixture_sprt(const Proportion& a, const Proportion& b, double tau, double alpha);
// The indexes e-BH rejects at `alpha`, in no particular order.
std::vector<size_t> e_benjamini_hochberg(const std::vector<double>& e_values, double alpha);
// 1 / the running maximum of an e-process, at most 1.
double always_valid_p(double max_e_so_far);

// For the saved state: false (and `out` untouched) on a malformed, negative
// or non-finite value; never throws.
nlohmann::json to_json(const LogMoments& m);
bool from_json(const nlohmann::json& j, LogMoments* out);
nlohmann::json to_json(const Proportion& p);
bool from_json(const nlohmann::json& j, Proportion* out);

}  // namespace tcpscope
