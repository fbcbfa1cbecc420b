// The statistics behind `tcpscope compare`, the same code for exact samples
// (a flow log) and for sketches (a running daemon).
//
// Quantiles. The q-quantile is the order statistic of 0-based rank
// floor(q * (n - 1)) (no interpolation): the definition the sketch
// approximates within its relative accuracy, so both modes report the same
// quantity.
//
// Significance: two-sided Mann-Whitney U (Wilcoxon rank-sum) test, normal
// approximation with tie correction and continuity correction. It assumes
// nothing about the shape of the distributions (FCT and throughput are
// skewed and multi-modal) and is exact enough for n >= 20 per arm, the
// minimum sample (below). On a sketch every bucket is a tie group: values
// within 1 % of each other count as equal, which costs a little power and
// nothing in validity (the tie correction is exact for the binned data).
//
// Interval: percentile bootstrap of the relative change of the median,
// (median_B - median_A) / median_A, 10000 resamples, seed fixed per group.
// Each resample's median is drawn directly as an order statistic: the median
// of n values drawn with replacement from the sorted sample x_0..x_(n-1) is
// x_floor(n U), U ~ Beta(k + 1, n - k), k = floor((n - 1) / 2) (the (k+1)-th
// smallest of n uniforms), which is the same bootstrap distribution in O(1)
// per resample instead of O(n), so it also runs on sketches of millions of
// flows. Chosen over Hodges-Lehmann: HL estimates the median of pairwise
// differences (a shift), not the change of the median that `diff` reports,
// and its exact rank interval assumes the two distributions differ only by
// that shift, which CC changes do not obey (they change the tail more than
// the body).
//
// Minimum sample: 20 flows per arm. Below that the normal approximation of U
// drifts from the exact null distribution, and the bootstrap distribution of
// a median has too few distinct support points for a 95 % interval to keep
// its coverage; such groups are reported as "insufficient data".
//
// Multiple comparisons: Benjamini-Hochberg q-values over every group that
// was tested; a group is a discovery when q < alpha, which keeps the
// expected share of false discoveries among them below alpha.
//
// When A's median is 0 (retrans: most flows retransmit nothing) the relative
// change of the median does not exist, so the effect size is the relative
// change of the share of flows with a nonzero value (for retrans: of flows
// that retransmitted at all), (share_B - share_A) / share_A, with a 95 %
// percentile-bootstrap interval whose resampled shares are drawn exactly as
// Binomial(n, share) counts. Chosen over the mean ratio: the share is exact
// in both modes (sketches count zeros apart, exactly), it is not dominated
// by a few short flows with huge ratios, and "30 % of flows retransmitted
// instead of 10 %" is what an operator can act on. Every result says which
// statistic its diff is (ChangeStatistic).
//
// The interval is two finite numbers or none: when A's statistic is 0 in
// the resamples that bound it (a median or share of A near 0), the relative
// change has no finite bound and the interval is dropped with its reason
// (MedianChange::ci_reason); never a half-infinite pair.
//
// Verdict: "b better" / "a better" when q < alpha, the rank test's direction
// and the interval agree (the interval excludes 0 on the same side); when
// no interval exists (and its reason is given), the rank test alone decides.
//
// Binned samples (Prometheus histograms: only each bucket's count is known,
// every value sits at its bucket's representative point) get no verdict
// finer than their buckets. A median is only known to lie in its bucket
// [lo, hi], so the change from A to B only in [lo_B / hi_A - 1, hi_B / lo_A -
// 1]. The interval is the percentile bootstrap of those two bounds (each
// resample's lower bound for the lower end, its upper bound for the upper
// end), joined with the observed medians' own bound interval; a verdict
// needs that widened interval to exclude 0, which medians in the same or in
// adjacent buckets never do. When A's median bucket starts at 0 or B's ends
// at +Inf the widened interval is half-infinite: no CI is printed, but its
// finite side still decides.
#pragma once

#include <cstdint>
#include <optional>
#include <random>
#include <string>
#include <utility>
#include <vector>

namespace tcpscope {

class FlowSketch;

// One histogram bucket (lo, hi] of a binned sample; hi may be +infinity.
struct BucketBounds {
  double lo = 0, hi = 0;
};

// One arm's sample as sorted distinct values with counts. Exact samples
// keep every value; sketched ones the sketch's buckets.
class ArmDistribution {
 public:
  ArmDistribution() = default;
  static ArmDistribution exact(std::vector<double> values);
  static ArmDistribution from_sketch(const FlowSketch& sketch);
  // Histogram buckets: upper_bounds ascending (the last may be +infinity),
  // counts[i] values in (upper_bounds[i-1], upper_bounds[i]] (the first
  // bucket from 0). Each bucket's values sit at its representative point:
  // the geometric midpoint sqrt(lo * hi), hi / 2 for the first bucket, lo
  // for the +Inf bucket. Throws std::invalid_argument on sizes that differ
  // or bounds that do not increase.
  static ArmDistribution binned(const std::vector<double>& upper_bounds, const std::vector<uint64_t>& counts);
  // Every value times `factor` > 0 (a change of unit). Ranks, ties and the
  // relative accuracy stay as they are: a sketch's representative value
  // scales with the values it stands for.
  ArmDistribution scaled(double factor) const;

  uint64_t count() const { return n_; }
  // 0-based order statistic (clamped to count()-1); 0 when empty.
  double at_rank(uint64_t rank) const;
  double quantile(double q) const;
  double mean() const { return mean_; }
  double min() const { return min_; }
  double max() const { return max_; }
  // 0 for exact samples, the sketch's relative accuracy otherwise.
  double relative_accuracy() const { return relative_accuracy_; }
  const std::vector<double>& values() const { return values_; }        // ascending, distinct
  const std::vector<uint64_t>& cumulative() const { return cum_; }      // count through values()[i]
  // Values exactly 0 (sketches keep them apart, exactly).
  uint64_t zero_count() const { return !values_.empty() && values_[0] == 0 ? cum_[0] : 0; }
  // Sketched samples: buckets were folded (flow_sketch.h collapsed()) or
  // values lay outside the sketch's span (clamped()).
  bool collapsed() const { return collapsed_; }
  uint64_t clamped() const { return clamped_; }
  // Binned samples: the bucket the value of a rank lies in.
  bool binned() const { return !buckets_.empty(); }
  BucketBounds bucket_at_rank(uint64_t rank) const;
  BucketBounds quantile_bucket(double q) const;

 private:
  void finish();
  std::vector<double> values_;
  std::vector<uint64_t> cum_;
  uint64_t n_ = 0;
  double mean_ = 0, min_ = 0, max_ = 0;
  double relative_accuracy_ = 0;
  bool collapsed_ = false;
  uint64_t clamped_ = 0;
  std::vector<BucketBounds> buckets_;  // binned samples: one per values()[i]
};

struct RankSumResult {
  double u_b_lower = 0;     // pairs (a, b) with b < a, ties count 1/2
  double prob_b_lower = 0.5;  // u_b_lower / (n_a n_b)
  double z = 0;
  double p_value = 1;       // two-sided
};
RankSumResult rank_sum_test(const ArmDistribution& a, const ArmDistribution& b);

// What diff and its interval are the relative change of.
enum class ChangeStatistic { kMedian, kShareNonzero };
const char* to_string(ChangeStatistic s);  // "median", "share_nonzero"

struct MedianChange {
  ChangeStatistic statistic = ChangeStatistic::kMedian;
  // (stat_b - stat_a) / stat_a; none when stat_a == 0 (then ci_reason says why).
  std::optional<double> diff;
  // 95 % percentile-bootstrap bounds: both set and finite, or neither (and
  // ci_reason non-empty).
  std::optional<double> lo, hi;
  std::string ci_reason;
  // Binned samples (both arms): the interval widened to the buckets' bounds
  // (see the header comment), possibly half-infinite; lo and hi above are
  // set only when both ends are finite. decide_verdict uses this instead.
  bool binned = false;
  double binned_lo = 0, binned_hi = 0;
  // The observed medians' buckets.
  BucketBounds a_bucket, b_bucket;
};
MedianChange bootstrap_median_change(const ArmDistribution& a, const ArmDistribution& b, uint32_t resamples,
                                     uint64_t seed, double confidence = 0.95);

// Benjamini-Hochberg adjusted p-values (q-values); entries without a p-value
// stay empty and do not count towards the number of tests.
std::vector<std::optional<double>> benjamini_hochberg(const std::vector<std::optional<double>>& p);

enum class Verdict { kBBetter, kABetter, kNoDifference, kInsufficientData };
const char* to_string(Verdict v);

struct VerdictInputs {
  uint64_t n_a = 0, n_b = 0;
  uint64_t min_sample = 20;
  std::optional<double> q_value;
  double alpha = 0.05;
  double prob_b_lower = 0.5;
  MedianChange change;
  bool lower_is_better = true;
};
Verdict decide_verdict(const VerdictInputs& in);

// The generator behind the bootstrap: mt19937_64 with hand-written normal,
// gamma (Marsaglia-Tsang) and beta draws, so that a seed gives the same
// interval with any standard library (std::*_distribution are
// implementation-defined). Exposed for tests.
class BootstrapRng {
 public:
  explicit BootstrapRng(uint64_t seed);
  double uniform();  // (0, 1)
  double normal();
  double gamma(double shape);  // shape >= 1
  double beta(double a, double b);
  // Binomial(n, p) in O(log n) beta draws (Devroye's order-statistic split).
  uint64_t binomial(uint64_t n, double p);

 private:
  std::mt19937_64 engine_;  // its output sequence is fixed by the standard
  bool have_spare_ = false;
  double spare_ = 0;
};

// FNV-1a of a string: the per-group seed, so a group gets the same resamples
// whichever order groups are processed in and whichever mode produced them.
uint64_t fnv1a(const std::string& s);

}  // namespace tcpscope
