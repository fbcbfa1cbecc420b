#include "flow_sketch.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <stdexcept>
#include <vector>

#include <nlohmann/json.hpp>

namespace tcpscope {
namespace {

// The exact order statistic the sketch approximates (see quantile()).
double exact_quantile(std::vector<double> v, double q) {
  std::sort(v.begin(), v.end());
  return v[static_cast<size_t>(std::floor(q * static_cast<double>(v.size() - 1)))];
}

std::vector<double> lognormal(size_t n, double mu, double sigma, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::lognormal_distribution<double> d(mu, sigma);
  std::vector<double> v(n);
  for (auto& x : v) x = d(rng);
  return v;
}

TEST(FlowSketch, QuantilesWithinStatedRelativeError) {
  // FCT-like values in microseconds over ~4 decades.
  const auto values = lognormal(100000, 10, 1.2, 7);
  FlowSketch s;
  for (double v : values) s.add(v);
  ASSERT_EQ(s.count(), values.size());
  EXPECT_FALSE(s.collapsed());
  std::vector<double> sorted = values;
  std::sort(sorted.begin(), sorted.end());
  for (double q : {0.0, 0.001, 0.01, 0.1, 0.25, 0.5, 0.75, 0.9, 0.99, 0.999, 1.0}) {
    const double exact = sorted[static_cast<size_t>(std::floor(q * (sorted.size() - 1)))];
    const double est = s.quantile(q);
    EXPECT_LE(std::abs(est - exact) / exact, s.relative_accuracy() + 1e-12) << "q=" << q;
  }
  EXPECT_EQ(s.min(), sorted.front());
  EXPECT_EQ(s.max(), sorted.back());
  EXPECT_EQ(s.quantile(0), sorted.front());
  EXPECT_EQ(s.quantile(1), sorted.back());
}

TEST(FlowSketch, EveryRankWithinRelativeErrorForOtherAccuracies) {
  for (double alpha : {0.005, 0.02, 0.05}) {
    const auto values = lognormal(5000, 3, 2, 11);
    FlowSketch s(alpha, 4096);
    for (double v : values) s.add(v);
    std::vector<double> sorted = values;
    std::sort(sorted.begin(), sorted.end());
    for (uint64_t r = 0; r < sorted.size(); r += 7)
      ASSERT_LE(std::abs(s.value_at_rank(r) - sorted[r]) / sorted[r], alpha + 1e-12) << "alpha=" << alpha << " r=" << r;
  }
}

TEST(FlowSketch, MergeEqualsAddingEverythingToOne) {
  const auto x = lognormal(20000, 8, 1, 1);
  const auto y = lognormal(30000, 12, 0.5, 2);
  FlowSketch a, b, all;
  for (double v : x) a.add(v), all.add(v);
  for (double v : y) b.add(v), all.add(v);
  a.merge(b);
  EXPECT_EQ(a.count(), all.count());
  EXPECT_EQ(a.bins(), all.bins());
  EXPECT_EQ(a.min(), all.min());
  EXPECT_EQ(a.max(), all.max());
  for (double q : {0.01, 0.5, 0.99}) EXPECT_EQ(a.quantile(q), all.quantile(q));
}

TEST(FlowSketch, MergeRejectsDifferentAccuracy) {
  FlowSketch a(0.01), b(0.02);
  b.add(1);
  EXPECT_THROW(a.merge(b), std::invalid_argument);
}

TEST(FlowSketch, ZerosAreExact) {
  // Retransmit ratios: most flows retransmit nothing.
  std::mt19937_64 rng(3);
  std::vector<double> v;
  for (int i = 0; i < 10000; ++i) v.push_back(i % 10 < 7 ? 0.0 : std::uniform_real_distribution<double>(0.001, 0.2)(rng));
  FlowSketch s;
  for (double x : v) s.add(x);
  EXPECT_EQ(s.zero_count(), 7000u);
  EXPECT_EQ(s.quantile(0.5), 0.0);
  EXPECT_EQ(s.quantile(0.69), 0.0);
  const double exact = exact_quantile(v, 0.9);
  EXPECT_LE(std::abs(s.quantile(0.9) - exact) / exact, 0.01 + 1e-12);
  EXPECT_EQ(s.bins().front(), (std::pair<double, uint64_t>{0.0, 7000}));
}

TEST(FlowSketch, NegativeAndNanAreRejected) {
  FlowSketch s;
  s.add(-1);
  s.add(std::nan(""));
  s.add(5);
  EXPECT_EQ(s.count(), 1u);
  EXPECT_EQ(s.rejected(), 2u);
  EXPECT_EQ(s.quantile(0.5), 5.0);
}

TEST(FlowSketch, MemoryIsBoundedAndUpperQuantilesKeepTheirGuarantee) {
  // 15 decades of values cannot fit in 128 buckets of 2 %: the low end collapses.
  FlowSketch s(0.01, 128);
  std::vector<double> v;
  std::mt19937_64 rng(5);
  std::uniform_real_distribution<double> exp10(-3, 12);
  for (int i = 0; i < 50000; ++i) v.push_back(std::pow(10.0, exp10(rng)));
  // Plus a dense cluster at the top so that the upper quantiles sit in kept buckets.
  for (int i = 0; i < 50000; ++i) v.push_back(1e12 * (1 + 0.001 * (i % 500)));
  for (double x : v) s.add(x);
  EXPECT_TRUE(s.collapsed());
  EXPECT_LE(s.memory_bytes(), 128 * sizeof(uint32_t));
  EXPECT_LE(s.to_json()["counts"].size(), 128u);
  EXPECT_EQ(s.count(), v.size());
  for (double q : {0.75, 0.9, 0.99}) {
    const double exact = exact_quantile(v, q);
    EXPECT_LE(std::abs(s.quantile(q) - exact) / exact, 0.01 + 1e-12) << q;
  }
}

TEST(FlowSketch, JsonRoundTripIsExact) {
  const auto values = lognormal(10000, 15, 1, 9);  // throughput-like, bits/s
  FlowSketch s;
  for (double v : values) s.add(v);
  s.add(0);
  const FlowSketch back = FlowSketch::from_json(nlohmann::json::parse(s.to_json().dump()));
  EXPECT_EQ(back.count(), s.count());
  EXPECT_EQ(back.zero_count(), 1u);
  EXPECT_EQ(back.bins(), s.bins());
  EXPECT_EQ(back.min(), s.min());
  EXPECT_EQ(back.max(), s.max());
  EXPECT_EQ(back.relative_accuracy(), s.relative_accuracy());
  for (double q : {0.1, 0.5, 0.9, 0.99}) EXPECT_EQ(back.quantile(q), s.quantile(q));
}

TEST(FlowSketch, FromJsonRejectsInconsistentCounts) {
  FlowSketch s;
  s.add(10);
  s.add(20);
  auto j = s.to_json();
  j["count"] = 5;
  EXPECT_THROW(FlowSketch::from_json(j), std::invalid_argument);
  auto k = s.to_json();
  k.erase("offset");
  EXPECT_THROW(FlowSketch::from_json(k), std::invalid_argument);
  auto big = s.to_json();
  big["counts"] = nlohmann::json::array();
  for (int i = 0; i < 600; ++i) big["counts"].push_back(0);
  EXPECT_THROW(FlowSketch::from_json(big), std::invalid_argument);
}

TEST(FlowSketch, EmptySketch) {
  FlowSketch s;
  EXPECT_TRUE(s.empty());
  EXPECT_EQ(s.quantile(0.5), 0.0);
  EXPECT_TRUE(s.bins().empty());
  const FlowSketch back = FlowSketch::from_json(s.to_json());
  EXPECT_TRUE(back.empty());
}

}  // namespace
}  // namespace tcpscope
