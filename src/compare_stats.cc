#include "compare_stats.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>

#include "flow_sketch.h"

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

uint64_t fnv1a(const std::string& s) {
  uint64_t h = 0xcbf29ce484222325ULL;
  for (unsigned char c : s) {
    h ^= c;
    h *= 0x100000001b3ULL;
  }
  return h;
}

namespace {

// The median of one bootstrap resample of `d` (see the header).
double resampled_median(const ArmDistribution& d, BootstrapRng* rng) {
  const uint64_t n = d.count();
  const uint64_t k = (n - 1) / 2;
  const double u = rng->beta(static_cast<double>(k + 1), static_cast<double>(n - k));
  const uint64_t rank = std::min<uint64_t>(n - 1, static_cast<uint64_t>(std::floor(static_cast<double>(n) * u)));
  return d.at_rank(rank);
}

double relative_change(double from, double to) {
  if (from == 0) return to == 0 ? 0.0 : std::numeric_limits<double>::infinity();
  return (to - from) / from;
}

}  // namespace

MedianChange bootstrap_median_change(const ArmDistribution& a, const ArmDistribution& b, uint32_t resamples,
                                     uint64_t seed, double confidence) {
  MedianChange out;
  if (a.count() == 0 || b.count() == 0) return out;
  const double ma = a.quantile(0.5);
  if (ma == 0) return out;
  out.diff = (b.quantile(0.5) - ma) / ma;
  if (resamples == 0) return out;
  BootstrapRng rng(seed);
  std::vector<double> changes(resamples);
  for (auto& c : changes) {
    const double ra = resampled_median(a, &rng);
    const double rb = resampled_median(b, &rng);
    c = relative_change(ra, rb);
  }
  std::sort(changes.begin(), changes.end());
  // Symmetric percentile interval: as many resamples below lo as above hi.
  const size_t tail = static_cast<size_t>(std::floor((1 - confidence) / 2 * resamples));
  out.lo = changes[std::min(tail, changes.size() - 1)];
  out.hi = changes[changes.size() - 1 - std::min(tail, changes.size() - 1)];
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
    q[idx[r]] = running;
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
  if (in.change.diff && in.change.lo && in.change.hi) {
    // The median interval must exclude 0 on the side the rank test points to.
    const bool interval_b_lower = *in.change.hi < 0;
    const bool interval_b_higher = *in.change.lo > 0;
    if (b_lower ? !interval_b_lower : !interval_b_higher) return Verdict::kNoDifference;
  }
  return b_better ? Verdict::kBBetter : Verdict::kABetter;
}

}  // namespace tcpscope
