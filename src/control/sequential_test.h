// The statistics the closed loop decides with (control/cc_controller.h).
//
// The unit of evidence. The kernel draws an arm per connection (sock_ops,
// at the handshake), so a connection's transfers share its arm, its client
// and its path: they are a cluster, not independent units. One kept-alive
// connection can carry thousands of transfers; counted as independent, two
// connections of two clients look like thousands of units and an A/A run
// decides for the arm that happened to get the nearer client. So an arm's
// evidence is a ratio of sums over its connections, R = sum(y) / sum(x) (a
// transfer's log value with x = 1: R is the mean log value, the log of the
// geometric mean; a flow's retransmitted segments of x segments sent: R is
// the retransmit share), and the variance of R counts each connection once:
// the delta method for a ratio of cluster sums (the cluster-robust
// variance; Deng, Knoblich, Lu, "Applying the Delta Method in Metric
// Analytics", KDD 2018, as experimentation platforms analyse when the unit
// of randomization is coarser than the unit of analysis):
//   Var(R) = K / (K - 1) * sum_c (y_c - R x_c)^2 / (sum x)^2,  K connections.
// With one value per connection it is the usual s^2 / n.
//
// Why sequential. The controller re-tests every cohort every interval. A
// fixed-horizon p-value checked again and again is bound to cross 0.05 on
// two identical arms sooner or later (the unit test's simulation: in 33.8 %
// of A/A cohorts within 40 looks; this test: 1.3 %). The mixture sequential
// probability ratio test (Robbins 1970; Johari, Pekelis, Walsh, "Always
// valid inference") avoids that: under "no difference" its likelihood ratio,
// mixed over a N(0, tau^2) prior on the difference theta, is a nonnegative
// martingale, so by Ville's inequality the chance that it EVER reaches
// 1/alpha is at most alpha, however often it is looked at. Its value at any
// look is an e-value, 1 / its running maximum an always-valid p-value, and
// the set of theta it would not reject is a confidence sequence.
//
// Few connections, or few that weigh. The variance is estimated from the
// connections, and with few of them the estimate is itself noisy: the
// statistic t = theta / sqrt(V) has Student's t tails, not a normal's. And
// connections of unequal size weigh unequally: with one connection of 5,000
// transfers and three of one per arm, the ratio is the heavy one's, its
// residual is what it pulls the ratio to, and V is the light ones' spread
// around it; the heavy connection's own draw of its path is never seen, and
// with K - 1 = 3 degrees of freedom an A/A test crossed the bound in 994 of
// 1,000 runs (sequential_test_test.cc). What the variance rests on is the
// effective number of connections, Kish's K_eff = (sum x_c)^2 / sum x_c^2
// (Kish, "Survey Sampling", 1965; the cluster-robust t test's behaviour is
// governed by such an effective number, not by K: Carter, Schnepel and
// Steigerwald, "Asymptotic Behavior of a t-Test Robust to Cluster
// Heterogeneity", Review of Economics and Statistics 2017): K with equal
// sizes, 1.0006 in that example. So each arm has K_eff - 1 degrees of
// freedom, and the mixture is taken under the t likelihood, with
// Welch-Satterthwaite's degrees of freedom nu over both (Rouder et
// al.'s Bayes factor with a normal prior on the effect, as the "safe t-test"
// of Grunwald et al. uses; rho = tau^2 / V):
//   e = (1 + rho)^(-1/2) * ((1 + t^2/nu) / (1 + t^2/(nu (1 + rho))))^((nu+1)/2)
// which is the Gaussian mixture's e-value as nu grows, and with nu
// connections' worth of freedom never exceeds (1 + rho)^(nu/2): eight
// connections cannot outvote their own spread however many transfers they
// carry, and one that carries nearly all of them leaves nu near 0. Weighing
// connections alike instead (a t test on their means) is as safe but slower
// where short connections of a few transfers each are the traffic: it
// decided a 10 % effect in the loop simulation at p90 480 s against 330 s. The confidence sequence is the set of theta whose e stays below
// 1/alpha (unbounded while no theta could reach it).
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

// One cluster's sums so far: a connection's, in the evidence it adds to.
struct ClusterSums {
  double y = 0, x = 0;
};

// sum(y) / sum(x) over clusters, with the sums the delta method needs.
struct ClusteredRatio {
  uint64_t clusters = 0;
  double y = 0, x = 0;             // sum over clusters of y_c and x_c
  double yy = 0, xy = 0, xx = 0;   // sum of y_c^2, x_c y_c, x_c^2

  // Adds (dy, dx) to the cluster whose sums so far are *c (x == 0: a
  // cluster not seen before), and updates *c. dx > 0.
  void add(ClusterSums* c, double dy, double dx);
  // A whole cluster at once (a flow's segments, at its close).
  void add_cluster(double cy, double cx) {
    ClusterSums c;
    add(&c, cy, cx);
  }
  double ratio() const { return x > 0 ? y / x : 0; }
  // Var(ratio()) by the delta method over clusters; 0 below 2 clusters.
  double variance() const;
  // Kish's effective number of clusters, (sum x_c)^2 / sum x_c^2: the
  // clusters' count when they are of one size, near 1 when one outweighs the rest.
  double effective_clusters() const { return xx > 0 ? x * x / xx : 0; }
};

struct SequentialResult {
  bool testable = false;  // both arms have 2 clusters and V > 0
  double diff = 0;        // ratio(b) - ratio(a) (as_relative_change(): exp(diff) - 1)
  double ci_lo = 0, ci_hi = 0;  // the 1 - alpha confidence sequence of diff (may be +-infinity)
  double e_value = 1;     // the mixture likelihood ratio at this look (capped at e^690)
  double dof = 0;         // Welch-Satterthwaite's, over each arm's effective_clusters() - 1
};

SequentialResult mixture_sprt(const ClusteredRatio& a, const ClusteredRatio& b, double tau, double alpha);
// A result on mean log values as the relative change of the geometric
// means: exp(diff) - 1, and so for its confidence sequence.
SequentialResult as_relative_change(SequentialResult r);
// The indexes e-BH rejects at `alpha`, in no particular order.
std::vector<size_t> e_benjamini_hochberg(const std::vector<double>& e_values, double alpha);
// 1 / the running maximum of an e-process, at most 1.
double always_valid_p(double max_e_so_far);

// For the saved state: false (and `out` untouched) on a malformed, negative,
// non-finite or inconsistent value (more clusters than x, sums of squares
// below what the sums imply); never throws.
nlohmann::json to_json(const ClusteredRatio& r);
bool from_json(const nlohmann::json& j, ClusteredRatio* out);

}  // namespace tcpscope
