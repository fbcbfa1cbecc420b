#include "control/sequential_test.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <random>

#include <nlohmann/json.hpp>

namespace tcpscope {
namespace {

constexpr double kTau = 0.1;
constexpr double kAlpha = 0.05;

TEST(LogMoments, AddAndMergeEqualATwoPassComputation) {
  std::mt19937_64 rng(1);
  std::lognormal_distribution<double> d(1.0, 0.7);
  std::vector<double> logs;
  LogMoments all, a, b;
  for (int i = 0; i < 1000; ++i) {
    const double v = d(rng);
    logs.push_back(std::log(v));
    all.add(v);
    (i < 300 ? a : b).add(v);
  }
  double mean = 0, ss = 0;
  for (double x : logs) mean += x;
  mean /= logs.size();
  for (double x : logs) ss += (x - mean) * (x - mean);
  EXPECT_NEAR(all.mean, mean, 1e-12 * std::abs(mean));
  EXPECT_NEAR(all.variance(), ss / (logs.size() - 1), 1e-10 * ss / logs.size());
  LogMoments merged = a;
  merged.merge(b);
  EXPECT_EQ(merged.n, 1000u);
  EXPECT_NEAR(merged.mean, mean, 1e-12 * std::abs(mean));
  EXPECT_NEAR(merged.variance(), all.variance(), 1e-10 * all.variance());
  LogMoments empty;
  merged.merge(empty);
  empty.merge(a);
  EXPECT_EQ(merged.n, 1000u);
  EXPECT_EQ(empty.n, a.n);
  // since() undoes a merge: all since a's copy is b.
  const LogMoments later = all.since(a);
  EXPECT_EQ(later.n, b.n);
  EXPECT_NEAR(later.mean, b.mean, 1e-12 * std::abs(b.mean));
  EXPECT_NEAR(later.variance(), b.variance(), 1e-9 * b.variance());
  EXPECT_EQ(all.since(all).n, 0u);
  EXPECT_EQ(all.since(LogMoments{}).n, all.n);
  LogMoments ignored;
  for (double v : {0.0, -1.0, std::nan(""), HUGE_VAL}) ignored.add(v);
  EXPECT_EQ(ignored.n, 0u);
  EXPECT_EQ(ignored.variance(), 0.0);
}

// Two arms of one log-normal distribution, looked at every 50 values per arm
// up to 2000 (40 looks): the share of cohorts whose test EVER says
// "different" is what a controller re-testing every interval would decide
// wrongly. The mixture SPRT keeps it under alpha; a fixed-horizon z-test
// repeated at each look does not.
TEST(MixtureSprt, AnAaRunLookedAtEveryIntervalRarelyCrosses) {
  std::mt19937_64 rng(2);
  std::lognormal_distribution<double> d(std::log(0.1), 1.0);
  const int cohorts = 400;
  int sequential = 0, naive = 0;
  for (int c = 0; c < cohorts; ++c) {
    LogMoments a, b;
    bool seq_crossed = false, naive_crossed = false;
    for (int look = 0; look < 40; ++look) {
      for (int i = 0; i < 50; ++i) a.add(d(rng)), b.add(d(rng));
      SequentialResult r = mixture_sprt(a, b, kTau, kAlpha);
      seq_crossed = seq_crossed || r.e_value >= 1 / kAlpha;
      const double z = (b.mean - a.mean) / std::sqrt(a.variance() / a.n + b.variance() / b.n);
      naive_crossed = naive_crossed || std::abs(z) > 1.959964;
    }
    sequential += seq_crossed;
    naive += naive_crossed;
  }
  const double seq_rate = static_cast<double>(sequential) / cohorts, naive_rate = static_cast<double>(naive) / cohorts;
  std::printf("A/A cohorts ever crossing within 40 looks: sequential %.3f, fixed-horizon z-test %.3f\n", seq_rate,
              naive_rate);
  EXPECT_LE(seq_rate, 0.06);
  EXPECT_GE(naive_rate, 0.15) << "the repeated fixed test should cross often: this test could not tell";
}

// The price of looking at every interval: a 10 % change of a log-normal
// with sigma 1 is found at 3000 per arm in 74 % of runs, at 6000 in more
// than 90 % (a fixed-horizon test at 0.05 needs about 1700).

TEST(MixtureSprt, FindsATenPercentChange) {
  std::mt19937_64 rng(3);
  std::lognormal_distribution<double> d(std::log(0.1), 1.0);
  int found = 0;
  double diff_sum = 0;
  const int reps = 200;
  for (int rep = 0; rep < reps; ++rep) {
    LogMoments a, b;
    for (int i = 0; i < 6000; ++i) a.add(d(rng)), b.add(1.1 * d(rng));
    SequentialResult r = mixture_sprt(a, b, kTau, kAlpha);
    found += r.e_value >= 20;
    diff_sum += r.diff;
  }
  std::printf("10%% change, n 6000 per arm: e >= 20 in %d of %d, mean diff %.4f\n", found, reps, diff_sum / reps);
  EXPECT_GE(found, reps * 9 / 10);
  EXPECT_NEAR(diff_sum / reps, 0.10, 0.03);
}

TEST(MixtureSprt, TheConfidenceSequenceHoldsAtEveryLook) {
  std::mt19937_64 rng(4);
  std::lognormal_distribution<double> d(std::log(0.1), 1.0);
  const int reps = 300;
  int missed = 0;
  for (int rep = 0; rep < reps; ++rep) {
    LogMoments a, b;
    bool miss = false;
    for (int look = 0; look < 40; ++look) {
      for (int i = 0; i < 50; ++i) a.add(d(rng)), b.add(1.05 * d(rng));
      SequentialResult r = mixture_sprt(a, b, kTau, kAlpha);
      miss = miss || r.ci_lo > 0.05 || r.ci_hi < 0.05;
    }
    missed += miss;
  }
  std::printf("confidence sequence missed the true +5%% at some look in %d of %d\n", missed, reps);
  EXPECT_LE(missed, reps * 7 / 100);
}

TEST(MixtureSprt, UntestableWithoutTwoValuesOrSpread) {
  LogMoments a, b;
  a.add(1);
  b.add(1), b.add(2);
  EXPECT_FALSE(mixture_sprt(a, b, kTau, kAlpha).testable);
  a.add(1);
  LogMoments c;
  c.add(1), c.add(1);
  EXPECT_FALSE(mixture_sprt(a, c, kTau, kAlpha).testable) << "no spread in either arm";
  EXPECT_TRUE(mixture_sprt(a, b, kTau, kAlpha).testable);
}

TEST(MixtureSprt, Proportions) {
  std::mt19937_64 rng(5);
  std::binomial_distribution<int> one(100000, 0.01), two(100000, 0.02);
  Proportion a, b, c;
  a.add(one(rng), 100000);
  b.add(one(rng), 100000);
  c.add(two(rng), 100000);
  EXPECT_LT(mixture_sprt(a, b, kTau, kAlpha).e_value, 1 / kAlpha);
  SequentialResult r = mixture_sprt(a, c, kTau, kAlpha);
  EXPECT_GT(r.e_value, 1e6);
  EXPECT_LT(r.ci_lo, 0.01);
  EXPECT_GT(r.ci_hi, 0.01);
  EXPECT_NEAR(r.diff, 0.01, 0.002);
  EXPECT_FALSE(mixture_sprt(Proportion{}, c, kTau, kAlpha).testable);
}

TEST(EBenjaminiHochberg, HandComputedCases) {
  // K = 4: k = 2 needs e >= 4 / (0.05 * 2) = 40, k = 1 needs 80.
  EXPECT_EQ(e_benjamini_hochberg({100, 30, 1, 0.5}, 0.05), (std::vector<size_t>{0}));
  auto two = e_benjamini_hochberg({1, 45, 100, 0.5}, 0.05);
  std::sort(two.begin(), two.end());
  EXPECT_EQ(two, (std::vector<size_t>{1, 2}));
  EXPECT_TRUE(e_benjamini_hochberg({}, 0.05).empty());
  EXPECT_EQ(e_benjamini_hochberg({1e9, 1e9, 1e9}, 0.05).size(), 3u);
  EXPECT_TRUE(e_benjamini_hochberg({19}, 0.05).empty());
  EXPECT_EQ(e_benjamini_hochberg({20}, 0.05).size(), 1u);
}

TEST(EBenjaminiHochberg, AllNullCohortsAtOneLook) {
  std::mt19937_64 rng(6);
  std::lognormal_distribution<double> d(0, 1);
  int rejected = 0;
  const int rounds = 20, cohorts = 200;
  for (int round = 0; round < rounds; ++round) {
    std::vector<double> e;
    for (int c = 0; c < cohorts; ++c) {
      LogMoments a, b;
      for (int i = 0; i < 500; ++i) a.add(d(rng)), b.add(d(rng));
      e.push_back(mixture_sprt(a, b, kTau, kAlpha).e_value);
    }
    rejected += static_cast<int>(e_benjamini_hochberg(e, kAlpha).size());
  }
  EXPECT_LE(rejected, rounds * cohorts * 5 / 100);
}

TEST(AlwaysValidP, IsTheInverseOfTheLargestEValue) {
  EXPECT_EQ(always_valid_p(0.3), 1.0);
  EXPECT_EQ(always_valid_p(1), 1.0);
  EXPECT_DOUBLE_EQ(always_valid_p(40), 0.025);
}

TEST(SequentialJson, RoundTripsAndRefusesMalformedValues) {
  LogMoments m;
  for (double v : {1.0, 2.5, 7.0}) m.add(v);
  LogMoments back;
  ASSERT_TRUE(from_json(nlohmann::json::parse(to_json(m).dump()), &back));
  EXPECT_EQ(back.n, m.n);
  EXPECT_EQ(back.mean, m.mean);
  EXPECT_EQ(back.m2, m.m2);
  for (const char* bad : {R"({"n": -1, "mean": 0, "m2": 0})", R"({"n": 1, "mean": "x", "m2": 0})",
                          R"({"n": 1, "mean": 0, "m2": -2})", R"({"n": 1, "mean": 0})", "[]", "7"})
    EXPECT_FALSE(from_json(nlohmann::json::parse(bad), &back)) << bad;
  EXPECT_EQ(back.n, m.n) << "untouched on failure";
  Proportion p{3, 100}, q;
  ASSERT_TRUE(from_json(to_json(p), &q));
  EXPECT_EQ(q.events, 3);
  EXPECT_EQ(q.trials, 100);
  EXPECT_FALSE(from_json(nlohmann::json::parse(R"({"events": -1, "trials": 5})"), &q));
  EXPECT_FALSE(from_json(nlohmann::json::parse(R"({"events": 1})"), &q));
}

}  // namespace
}  // namespace tcpscope
