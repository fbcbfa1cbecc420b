#include "measure/flow_sketch.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <random>
#include <stdexcept>
#include <tuple>
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
  const auto values = lognormal(10000, 15, 1, 9);  // throughput-like, bytes/s
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
  for (uint32_t i = 0; i <= s.max_buckets(); ++i) big["counts"].push_back(0);
  EXPECT_THROW(FlowSketch::from_json(big), std::invalid_argument);
  auto huge = s.to_json();
  huge["max_buckets"] = 1u << 30;  // a document must not make us allocate at will
  EXPECT_THROW(FlowSketch::from_json(huge), std::invalid_argument);
}

// The auditor's case: 10,000 FCTs of ~30 ms plus one long keep-alive flow.
// With the old 512-bucket array a 2-hour outlier folded every bucket below
// ~200 ms into one and the median read 260 ms.
TEST(FlowSketch, OneOutlierInsideTheSpanCollapsesNothing) {
  const auto body = lognormal(10000, std::log(30000), 0.8, 1);
  for (double outlier : {7.2e9 /* 2 h */, 3.6e8 /* 6 min */, 6e7 /* 1 min */, 9.9e9 /* 2.75 h */}) {
    FlowSketch s(0.01, 0, 1, 1e10);  // fct's span: 1 us to 10^4 s
    for (double x : body) s.add(x);
    s.add(outlier);
    std::vector<double> all = body;
    all.push_back(outlier);
    EXPECT_FALSE(s.collapsed()) << outlier;
    EXPECT_EQ(s.clamped(), 0u);
    for (double q : {0.01, 0.1, 0.5, 0.9, 0.99, 0.999, 1.0}) {
      const double exact = exact_quantile(all, q);
      EXPECT_LE(std::abs(s.quantile(q) - exact) / exact, 0.01 + 1e-12) << "outlier " << outlier << " q " << q;
    }
  }
  // Merged at query time, the outlier's key first: the same.
  FlowSketch body_key(0.01, 0, 1, 1e10), outlier_key(0.01, 0, 1, 1e10), merged(0.01, 0, 1, 1e10);
  for (double x : body) body_key.add(x);
  outlier_key.add(7.2e9);
  merged.merge(outlier_key);
  merged.merge(body_key);
  std::vector<double> all = body;
  all.push_back(7.2e9);
  EXPECT_FALSE(merged.collapsed());
  for (double q : {0.01, 0.5, 0.9, 0.99})
    EXPECT_LE(std::abs(merged.quantile(q) - exact_quantile(all, q)) / exact_quantile(all, q), 0.01 + 1e-12) << q;
}

TEST(FlowSketch, EveryValueAcrossTheWholeSpanKeepsTheError) {
  // Values spread evenly over all 10 decades of the span: still no collapse.
  FlowSketch s(0.01, 0, 1, 1e10);
  std::vector<double> v;
  std::mt19937_64 rng(12);
  std::uniform_real_distribution<double> exp10(0, 10);
  for (int i = 0; i < 20000; ++i) v.push_back(std::pow(10.0, exp10(rng)));
  v.push_back(1);
  v.push_back(1e10);
  for (double x : v) s.add(x);
  EXPECT_FALSE(s.collapsed());
  EXPECT_LE(s.memory_bytes(), s.max_buckets() * sizeof(uint32_t));
  EXPECT_LE(s.max_buckets(), 1160u);  // 10 decades at 1 %: 4.6 KB of counters at most
  std::vector<double> sorted = v;
  std::sort(sorted.begin(), sorted.end());
  for (uint64_t r = 0; r < sorted.size(); r += 13)
    ASSERT_LE(std::abs(s.value_at_rank(r) - sorted[r]) / sorted[r], 0.01 + 1e-12) << r;
}

TEST(FlowSketch, ValuesOutsideTheSpanAreClampedNotCollapsed) {
  const auto body = lognormal(5000, std::log(30000), 0.8, 4);
  FlowSketch s(0.01, 0, 1, 1e10);
  for (double x : body) s.add(x);
  s.add(5e11);  // a 6-day websocket
  s.add(0.2);   // below 1 us
  EXPECT_EQ(s.clamped(), 2u);
  EXPECT_FALSE(s.collapsed());
  EXPECT_EQ(s.max(), 5e11);  // extremes stay exact
  EXPECT_EQ(s.min(), 0.2);
  std::vector<double> all = body;
  all.push_back(5e11);
  all.push_back(0.2);
  for (double q : {0.01, 0.5, 0.99}) {
    const double exact = exact_quantile(all, q);
    EXPECT_LE(std::abs(s.quantile(q) - exact) / exact, 0.01 + 1e-12) << q;
  }
  // The span and the clamped count survive the JSON, and merging.
  const FlowSketch back = FlowSketch::from_json(nlohmann::json::parse(s.to_json().dump()));
  EXPECT_EQ(back.clamped(), 2u);
  EXPECT_EQ(back.min_value(), 1);
  EXPECT_EQ(back.max_value(), 1e10);
  FlowSketch m(0.01, 0, 1, 1e10);
  m.merge(back);
  EXPECT_EQ(m.clamped(), 2u);
}

TEST(FlowSketch, DocumentsOfOlderDaemonsStillParse) {
  // No span and no clamped fields: an unbounded span, nothing clamped.
  const auto j = nlohmann::json::parse(
      R"({"relative_accuracy":0.01,"max_buckets":512,"count":2,"zero_count":0,"min":10,"max":20,)"
      R"("collapsed":false,"offset":116,"counts":[1,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,1]})");
  const FlowSketch s = FlowSketch::from_json(j);
  EXPECT_EQ(s.count(), 2u);
  EXPECT_EQ(s.clamped(), 0u);
  EXPECT_EQ(s.max_buckets(), 512u);
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

namespace tcpscope {
namespace {

// Bucket counts from elsewhere (ClickHouse's GROUP BY) read back exactly as
// the same values added one by one.
TEST(FlowSketch, AddBucketEqualsAddingTheValues) {
  FlowSketch by_value(0.01, 0, 1, 1e10), by_bucket(0.01, 0, 1, 1e10);
  std::map<int32_t, std::tuple<uint64_t, double, double>> buckets;
  uint64_t zeros = 0;
  for (int i = 0; i < 5000; ++i) {
    const double v = i % 50 == 0 ? 0.0 : std::exp(0.37 * (i % 97)) * (1 + (i % 13) * 0.001);
    by_value.add(v);
    if (v < FlowSketch::kMinPositive) {
      ++zeros;
      continue;
    }
    auto [it, fresh] = buckets.try_emplace(by_bucket.bucket_index(v), 0, v, v);
    auto& [n, lo, hi] = it->second;
    ++n;
    lo = std::min(lo, v);
    hi = std::max(hi, v);
  }
  by_bucket.add_bucket(FlowSketch::kZeroBucket, zeros, 0, 0);
  for (const auto& [index, b] : buckets) by_bucket.add_bucket(index, std::get<0>(b), std::get<1>(b), std::get<2>(b));
  EXPECT_EQ(by_bucket.count(), by_value.count());
  EXPECT_EQ(by_bucket.zero_count(), by_value.zero_count());
  EXPECT_EQ(by_bucket.min(), by_value.min());
  EXPECT_EQ(by_bucket.max(), by_value.max());
  EXPECT_EQ(by_bucket.bins(), by_value.bins());
  EXPECT_EQ(by_bucket.clamped(), by_value.clamped());  // 1e16 values lie beyond the span in both
  for (double q : {0.0, 0.1, 0.5, 0.9, 0.99, 1.0}) EXPECT_EQ(by_bucket.quantile(q), by_value.quantile(q));
}

}  // namespace
}  // namespace tcpscope
