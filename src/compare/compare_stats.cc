#include "compare/compare_stats.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <stdexcept>

#include "measure/flow_sketch.h"

namespace tcpscope {

// ---------------------------------------------------------------------------
// ArmDistribution

ArmDistribution ArmDistribution::exact(std::vector<double> values) {
  ArmDistribution d;
  std::sort(values.begin(), values.end());
  double sum = 0;
  for (size_t i = 0; i < values.size();) {
    size_t j = i;
    while (j < values.size() && values[j] == values[i]) ++j;
    d.values_.push_back(values[i]);
    d.cum_.push_back(j);
    sum += values[i] * static_cast<double>(j - i);
    i = j;
  }
  d.n_ = values.size();
  if (d.n_) {
    d.min_ = values.front();
    d.max_ = values.back();
    d.mean_ = sum / static_cast<double>(d.n_);
  }
  return d;
}

ArmDistribution ArmDistribution::from_sketch(const FlowSketch& sketch) {
  ArmDistribution d;
  d.relative_accuracy_ = sketch.relative_accuracy();
  d.collapsed_ = sketch.collapsed();
  d.clamped_ = sketch.clamped();
  uint64_t cum = 0;
  double sum = 0;
  for (const auto& [value, count] : sketch.bins()) {
    cum += count;
    // bins() clamps to [min, max], so two adjacent buckets can map to the
    // same value at the ends; keep the values distinct.
    if (!d.values_.empty() && d.values_.back() == value) {
      d.cum_.back() = cum;
    } else {
      d.values_.push_back(value);
      d.cum_.push_back(cum);
    }
    sum += value * static_cast<double>(count);
  }
  d.n_ = cum;
  if (d.n_) {
    d.min_ = sketch.min();
    d.max_ = sketch.max();
    d.mean_ = sum / static_cast<double>(d.n_);
  }
  return d;
}

ArmDistribution ArmDistribution::scaled(double factor) const {
  ArmDistribution d = *this;
  for (double& v : d.values_) v *= factor;
  for (BucketBounds& b : d.buckets_) b = {b.lo * factor, b.hi * factor};
  d.mean_ *= factor;
  d.min_ *= factor;
  d.max_ *= factor;
  return d;
}

ArmDistribution ArmDistribution::binned(const std::vector<double>& upper_bounds, const std::vector<uint64_t>& counts) {
  if (upper_bounds.size() != counts.size())
    throw std::invalid_argument("binned: " + std::to_string(upper_bounds.size()) + " bounds for " +
                                std::to_string(counts.size()) + " counts");
  ArmDistribution d;
  uint64_t cum = 0;
  double sum = 0, lo = 0;
  for (size_t i = 0; i < counts.size(); ++i) {
    const double hi = upper_bounds[i];
    if (!(hi > lo) && !(i == 0 && hi == 0))
      throw std::invalid_argument("binned: bucket bounds do not increase at " + std::to_string(hi));
    if (counts[i]) {
      // Geometric midpoint: the buckets are log-spaced, so it is as far (as a
      // ratio) from both bounds. The first bucket has no lower bound to take
      // a ratio with, the +Inf bucket no upper one.
      const double rep = std::isinf(hi) ? lo : lo > 0 ? std::sqrt(lo * hi) : hi / 2;
      cum += counts[i];
      sum += rep * static_cast<double>(counts[i]);
      d.values_.push_back(rep);
      d.cum_.push_back(cum);
      d.buckets_.push_back({lo, hi});
    }
    lo = hi;
  }
  d.n_ = cum;
  if (d.n_) {
    d.min_ = d.values_.front();
    d.max_ = d.values_.back();
    d.mean_ = sum / static_cast<double>(d.n_);
  }
  return d;
}

BucketBounds ArmDistribution::bucket_at_rank(uint64_t rank) const {
  if (buckets_.empty()) return {};
  const auto it = std::upper_bound(cum_.begin(), cum_.end(), std::min(rank, n_ - 1));
  return buckets_[static_cast<size_t>(it - cum_.begin())];
}

BucketBounds ArmDistribution::quantile_bucket(double q) const {
  if (n_ == 0) return {};
  q = std::clamp(q, 0.0, 1.0);
  return bucket_at_rank(static_cast<uint64_t>(std::floor(q * static_cast<double>(n_ - 1))));
}

double ArmDistribution::at_rank(uint64_t rank) const {
  if (n_ == 0) return 0;
  // Like FlowSketch::value_at_rank: the extremes are exact in both modes.
  if (rank == 0) return min_;
  if (rank >= n_ - 1) return max_;
  const auto it = std::upper_bound(cum_.begin(), cum_.end(), rank);
  return values_[static_cast<size_t>(it - cum_.begin())];
}

double ArmDistribution::quantile(double q) const {
  if (n_ == 0) return 0;
  q = std::clamp(q, 0.0, 1.0);
  return at_rank(static_cast<uint64_t>(std::floor(q * static_cast<double>(n_ - 1))));
}

// ---------------------------------------------------------------------------
// Mann-Whitney U

RankSumResult rank_sum_test(const ArmDistribution& a, const ArmDistribution& b) {
  RankSumResult r;
  const double na = static_cast<double>(a.count());
  const double nb = static_cast<double>(b.count());
  if (na == 0 || nb == 0) return r;
  const auto& av = a.values();
  const auto& bv = b.values();
  const auto& ac = a.cumulative();
  const auto& bc = b.cumulative();
  // Walk the distinct values of both arms in order. For a value v with
  // ca copies in A and cb in B: every b at v is below the A values above v,
  // and ties with the ca values at v count one half.
  double u = 0, ties = 0;
  uint64_t a_through = 0;  // A values <= the current one
  size_t i = 0, j = 0;
  while (i < av.size() || j < bv.size()) {
    const double v = j >= bv.size() || (i < av.size() && av[i] < bv[j]) ? av[i] : bv[j];
    uint64_t ca = 0, cb = 0;
    if (i < av.size() && av[i] == v) {
      ca = ac[i] - (i ? ac[i - 1] : 0);
      ++i;
    }
    if (j < bv.size() && bv[j] == v) {
      cb = bc[j] - (j ? bc[j - 1] : 0);
      ++j;
    }
    a_through += ca;
    const double dca = static_cast<double>(ca), dcb = static_cast<double>(cb);
    u += dcb * (na - static_cast<double>(a_through)) + 0.5 * dca * dcb;
    const double t = dca + dcb;
    ties += t * t * t - t;
  }
  r.u_b_lower = u;
  r.prob_b_lower = u / (na * nb);
  const double n = na + nb;
  const double mean = na * nb / 2;
  const double var = na * nb / 12.0 * ((n + 1) - ties / (n * (n - 1)));
  if (!(var > 0)) return r;  // every value tied: no evidence either way
  const double dev = std::abs(u - mean);
  r.z = std::max(0.0, dev - 0.5) / std::sqrt(var) * (u >= mean ? 1 : -1);
  r.p_value = std::min(1.0, std::erfc(std::abs(r.z) / std::sqrt(2.0)));
  return r;
}

// ---------------------------------------------------------------------------
// Bootstrap

BootstrapRng::BootstrapRng(uint64_t seed) : engine_(seed) {}

double BootstrapRng::uniform() {
  // 53 random bits, centred in their interval: never exactly 0 or 1.
  return (static_cast<double>(engine_() >> 11) + 0.5) * 0x1.0p-53;
}

double BootstrapRng::normal() {
  if (have_spare_) {
    have_spare_ = false;
    return spare_;
  }
  double x, y, s;
  do {
    x = 2 * uniform() - 1;
    y = 2 * uniform() - 1;
    s = x * x + y * y;
  } while (s >= 1 || s == 0);
  const double f = std::sqrt(-2 * std::log(s) / s);
  spare_ = y * f;
  have_spare_ = true;
  return x * f;
}

double BootstrapRng::gamma(double shape) {
  // Marsaglia & Tsang (2000), valid for shape >= 1.
  const double d = shape - 1.0 / 3.0;
  const double c = 1.0 / std::sqrt(9 * d);
  while (true) {
    double x, v;
    do {
      x = normal();
      v = 1 + c * x;
    } while (v <= 0);
    v = v * v * v;
    const double u = uniform();
    if (u < 1 - 0.0331 * x * x * x * x) return d * v;
    if (std::log(u) < 0.5 * x * x + d * (1 - v + std::log(v))) return d * v;
  }
}

double BootstrapRng::beta(double a, double b) {
  const double x = gamma(a);
  const double y = gamma(b);
  return x / (x + y);
}

uint64_t BootstrapRng::binomial(uint64_t n, double p) {
  if (!(p > 0)) return 0;
  if (p >= 1) return n;
  // The k-th smallest of n uniforms is Beta(k, n + 1 - k); the k - 1 below
  // it are uniform on (0, u), the n - k above on (u, 1). Whichever side p
  // falls on keeps about half the draws.
  uint64_t x = 0;
  while (n > 32) {
    const uint64_t k = n / 2 + 1;
    const double u = beta(static_cast<double>(k), static_cast<double>(n + 1 - k));
    if (p < u) {
      n = k - 1;
      p /= u;
    } else {
      x += k;
      n -= k;
      p = (p - u) / (1 - u);
    }
  }
  for (uint64_t i = 0; i < n; ++i) x += uniform() < p;
  return x;
}

uint64_t fnv1a(const std::string& s) {
  uint64_t h = 0xcbf29ce484222325ULL;
  for (unsigned char c : s) {
    h ^= c;
    h *= 0x100000001b3ULL;
  }
  return h;
}

namespace {

// The rank of the median of one bootstrap resample of `d` (see the header).
uint64_t resampled_median_rank(const ArmDistribution& d, BootstrapRng* rng) {
  const uint64_t n = d.count();
  const uint64_t k = (n - 1) / 2;
  const double u = rng->beta(static_cast<double>(k + 1), static_cast<double>(n - k));
  return std::min<uint64_t>(n - 1, static_cast<uint64_t>(std::floor(static_cast<double>(n) * u)));
}

// Where the change from a median in bucket a to one in bucket b can lie.
// Infinite when a reaches 0 or b reaches +Inf.
BucketBounds change_bounds(const BucketBounds& a, const BucketBounds& b) {
  const double inf = std::numeric_limits<double>::infinity();
  return {b.lo / a.hi - 1, a.lo > 0 ? b.hi / a.lo - 1 : inf};
}

double relative_change(double from, double to) {
  if (from == 0) return to == 0 ? 0.0 : std::numeric_limits<double>::infinity();
  return (to - from) / from;
}

}  // namespace

const char* to_string(ChangeStatistic s) {
  return s == ChangeStatistic::kShareNonzero ? "share_nonzero" : "median";
}

MedianChange bootstrap_median_change(const ArmDistribution& a, const ArmDistribution& b, uint32_t resamples,
                                     uint64_t seed, double confidence) {
  MedianChange out;
  if (a.count() == 0 || b.count() == 0) {
    out.ci_reason = "an arm has no flows";
    return out;
  }
  const double ma = a.quantile(0.5);
  const bool share = ma == 0;
  const double na = static_cast<double>(a.count()), nb = static_cast<double>(b.count());
  const double sa = 1 - static_cast<double>(a.zero_count()) / na;
  const double sb = 1 - static_cast<double>(b.zero_count()) / nb;
  const char* what = share ? "share of flows with a nonzero value" : "median";
  if (share) {
    out.statistic = ChangeStatistic::kShareNonzero;
    if (sa == 0) {
      out.ci_reason = "every flow in A has the value 0: the relative change of the share of nonzero flows "
                      "is undefined";
      return out;
    }
    out.diff = (sb - sa) / sa;
  } else {
    out.diff = (b.quantile(0.5) - ma) / ma;
  }
  // Median changes of binned samples are widened to their buckets (header).
  const bool binned = !share && a.binned() && b.binned();
  BucketBounds observed;
  if (binned) {
    out.binned = true;
    out.a_bucket = a.quantile_bucket(0.5);
    out.b_bucket = b.quantile_bucket(0.5);
    observed = change_bounds(out.a_bucket, out.b_bucket);
    out.binned_lo = observed.lo;
    out.binned_hi = observed.hi;
  }
  if (resamples == 0) {
    out.ci_reason = "no interval without enough flows in both arms";
    return out;
  }
  BootstrapRng rng(seed);
  std::vector<double> changes(resamples);
  std::vector<double> lowers, uppers;  // binned: each resample's change bounds
  if (binned) {
    lowers.resize(resamples);
    uppers.resize(resamples);
  }
  uint64_t unbounded = 0;
  for (size_t i = 0; i < changes.size(); ++i) {
    double ra, rb;
    if (share) {
      ra = static_cast<double>(rng.binomial(a.count(), sa)) / na;
      rb = static_cast<double>(rng.binomial(b.count(), sb)) / nb;
    } else {
      const uint64_t rank_a = resampled_median_rank(a, &rng);
      const uint64_t rank_b = resampled_median_rank(b, &rng);
      ra = a.at_rank(rank_a);
      rb = b.at_rank(rank_b);
      if (binned) {
        const BucketBounds c = change_bounds(a.bucket_at_rank(rank_a), b.bucket_at_rank(rank_b));
        lowers[i] = c.lo;
        uppers[i] = c.hi;
      }
    }
    changes[i] = relative_change(ra, rb);
    unbounded += !std::isfinite(changes[i]);
  }
  std::sort(changes.begin(), changes.end());
  // Symmetric percentile interval: as many resamples below lo as above hi.
  const size_t tail = std::min(static_cast<size_t>(std::floor((1 - confidence) / 2 * resamples)), changes.size() - 1);
  double lo = changes[tail];
  double hi = changes[changes.size() - 1 - tail];
  if (binned) {
    std::sort(lowers.begin(), lowers.end());
    std::sort(uppers.begin(), uppers.end());
    out.binned_lo = std::min(lowers[tail], observed.lo);
    out.binned_hi = std::max(uppers[uppers.size() - 1 - tail], observed.hi);
    lo = out.binned_lo;
    hi = out.binned_hi;
    if (!std::isfinite(hi)) {
      out.ci_reason = "a median bucket of A starts at 0 or one of B ends at +Inf: at bucket resolution the change "
                      "has no finite upper bound";
      return out;
    }
  }
  if (std::isfinite(lo) && std::isfinite(hi)) {
    out.lo = lo;
    out.hi = hi;
  } else {
    out.ci_reason = "A's " + std::string(what) + " was 0 in " + std::to_string(unbounded) + " of " +
                    std::to_string(resamples) + " resamples: the relative change has no finite 95% bound";
  }
  return out;
}

std::vector<std::optional<double>> benjamini_hochberg(const std::vector<std::optional<double>>& p) {
  std::vector<size_t> idx;
  for (size_t i = 0; i < p.size(); ++i)
    if (p[i]) idx.push_back(i);
  std::vector<std::optional<double>> q(p.size());
  const double m = static_cast<double>(idx.size());
  std::sort(idx.begin(), idx.end(), [&](size_t x, size_t y) { return *p[x] < *p[y]; });
  // q_(i) = min over j >= i of m p_(j) / j, walking from the largest p down.
  double running = 1.0;
  for (size_t r = idx.size(); r-- > 0;) {
    running = std::min(running, *p[idx[r]] * m / static_cast<double>(r + 1));
    // q >= p exactly (p * m / m can round one ulp below p).
    q[idx[r]] = std::max(running, *p[idx[r]]);
  }
  return q;
}

const char* to_string(Verdict v) {
  switch (v) {
    case Verdict::kBBetter: return "b better";
    case Verdict::kABetter: return "a better";
    case Verdict::kNoDifference: return "no significant difference";
    case Verdict::kInsufficientData: return "insufficient data";
  }
  return "?";
}

Verdict decide_verdict(const VerdictInputs& in) {
  if (in.n_a < in.min_sample || in.n_b < in.min_sample) return Verdict::kInsufficientData;
  if (!in.q_value || !(*in.q_value < in.alpha)) return Verdict::kNoDifference;
  // Direction of the rank test: B tends lower when P(B < A) > 1/2.
  const bool b_lower = in.prob_b_lower > 0.5;
  const bool b_better = b_lower == in.lower_is_better;
  if (in.change.binned) {
    // The bucket-widened interval decides, even when half-infinite.
    if (b_lower ? !(in.change.binned_hi < 0) : !(in.change.binned_lo > 0)) return Verdict::kNoDifference;
    return b_better ? Verdict::kBBetter : Verdict::kABetter;
  }
  if (in.change.diff && in.change.lo && in.change.hi) {
    // The interval of diff must exclude 0 on the side the rank test points to.
    const bool interval_b_lower = *in.change.hi < 0;
    const bool interval_b_higher = *in.change.lo > 0;
    if (b_lower ? !interval_b_lower : !interval_b_higher) return Verdict::kNoDifference;
  }
  return b_better ? Verdict::kBBetter : Verdict::kABetter;
}

}  // namespace tcpscope
