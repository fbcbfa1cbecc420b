#include "control/sequential_test.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <random>
#include <vector>

#include <nlohmann/json.hpp>

namespace tcpscope {
namespace {

constexpr double kTau = 0.1;
constexpr double kAlpha = 0.05;

// Adds `values` as one cluster of log values (a connection's transfers).
void add_connection(ClusteredRatio* r, const std::vector<double>& values) {
  ClusterSums c;
  for (double v : values) r->add(&c, std::log(v), 1);
}

// Each value its own connection: the per-transfer view.
void add_singletons(ClusteredRatio* r, const std::vector<double>& values) {
  for (double v : values) add_connection(r, {v});
}

TEST(ClusteredRatio, MeanAndDeltaMethodVarianceEqualATwoPassComputation) {
  std::mt19937_64 rng(1);
  std::lognormal_distribution<double> d(std::log(0.1), 1.0);
  std::uniform_int_distribution<int> size(1, 40);
  std::vector<std::vector<double>> clusters(30);
  for (auto& c : clusters)
    for (int i = size(rng); i > 0; --i) c.push_back(d(rng));
  ClusteredRatio r;
  // Interleaved, as transfers of open connections arrive.
  std::vector<ClusterSums> sums(clusters.size());
  for (size_t i = 0; i < 40; ++i)
    for (size_t c = 0; c < clusters.size(); ++c)
      if (i < clusters[c].size()) r.add(&sums[c], std::log(clusters[c][i]), 1);
  double y = 0, x = 0;
  for (const auto& c : clusters)
    for (double v : c) y += std::log(v), x += 1;
  const double mean = y / x;
  double residual = 0;
  for (const auto& c : clusters) {
    double yc = 0;
    for (double v : c) yc += std::log(v);
    residual += (yc - mean * c.size()) * (yc - mean * c.size());
  }
  const double k = clusters.size();
  EXPECT_EQ(r.clusters, clusters.size());
  EXPECT_NEAR(r.ratio(), mean, 1e-12);
  EXPECT_NEAR(r.variance(), k / (k - 1) * residual / (x * x), 1e-12);

  // One value per cluster: the sample variance over n.
  ClusteredRatio singles;
  add_singletons(&singles, {1, 2, 4, 8});
  const double m = (0 + 1 + 2 + 3) * std::log(2.0) / 4;
  double ss = 0;
  for (int i = 0; i < 4; ++i) ss += (i * std::log(2.0) - m) * (i * std::log(2.0) - m);
  EXPECT_NEAR(singles.variance(), ss / 3 / 4, 1e-12);
  EXPECT_EQ(ClusteredRatio{}.variance(), 0.0);
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
    ClusteredRatio a, b;
    bool seq_crossed = false, naive_crossed = false;
    for (int look = 0; look < 40; ++look) {
      for (int i = 0; i < 50; ++i) add_singletons(&a, {d(rng)}), add_singletons(&b, {d(rng)});
      SequentialResult r = mixture_sprt(a, b, kTau, kAlpha);
      seq_crossed = seq_crossed || r.e_value >= 1 / kAlpha;
      naive_crossed = naive_crossed || std::abs(r.diff) / std::sqrt(a.variance() + b.variance()) > 1.959964;
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

// Connections of one client share its path: each connection's transfers
// scatter around the connection's own level (sigma 0.5 between connections,
// 0.3 within). An A/A run of 20 connections per arm, each carrying up to
// 2000 transfers, looked at 40 times: counting transfers as independent
// units crosses in most runs; counting connections, as the clusters do,
// stays under alpha.
TEST(MixtureSprt, AnAaRunOfKeptAliveConnectionsCrossesOnlyWhenTransfersCountAsUnits) {
  std::mt19937_64 rng(7);
  std::normal_distribution<double> between(0, 0.5), within(0, 0.3);
  const int runs = 200, connections = 20;
  int clustered = 0, per_transfer = 0;
  for (int run = 0; run < runs; ++run) {
    std::vector<double> level_a(connections), level_b(connections);
    for (int c = 0; c < connections; ++c) level_a[c] = between(rng), level_b[c] = between(rng);
    std::vector<ClusterSums> sa(connections), sb(connections);
    ClusteredRatio a, b, ua, ub;  // u: every transfer its own unit
    bool crossed = false, crossed_units = false;
    for (int look = 0; look < 40; ++look) {
      for (int c = 0; c < connections; ++c)
        for (int i = 0; i < 50; ++i) {
          const double xa = level_a[c] + within(rng), xb = level_b[c] + within(rng);
          a.add(&sa[c], xa, 1), b.add(&sb[c], xb, 1);
          ClusterSums one_a, one_b;
          ua.add(&one_a, xa, 1), ub.add(&one_b, xb, 1);
        }
      crossed = crossed || mixture_sprt(a, b, kTau, kAlpha).e_value >= 1 / kAlpha;
      crossed_units = crossed_units || mixture_sprt(ua, ub, kTau, kAlpha).e_value >= 1 / kAlpha;
    }
    clustered += crossed;
    per_transfer += crossed_units;
  }
  std::printf("A/A runs of %d kept-alive connections per arm crossing: by connection %d of %d, by transfer %d of %d\n",
              connections, clustered, runs, per_transfer, runs);
  EXPECT_LE(clustered, runs * 6 / 100);
  EXPECT_GE(per_transfer, runs / 2) << "counting transfers should cross often: this test could not tell";
}

// A handful of connections cannot outvote their own spread: with 3
// connections per arm whose levels differ by chance, however many transfers
// they carry, the t likelihood keeps e below (1 + tau^2 / V)^(nu / 2).
TEST(MixtureSprt, FewConnectionsCannotDecideOnTheirTransferCount) {
  std::mt19937_64 rng(8);
  std::normal_distribution<double> between(0, 0.2), within(0, 0.1);
  int crossed = 0;
  const int runs = 200;
  for (int run = 0; run < runs; ++run) {
    ClusteredRatio a, b;
    for (int c = 0; c < 3; ++c) {
      ClusterSums sa, sb;
      const double la = between(rng), lb = between(rng);
      for (int i = 0; i < 10000; ++i) a.add(&sa, la + within(rng), 1), b.add(&sb, lb + within(rng), 1);
    }
    const SequentialResult r = mixture_sprt(a, b, kTau, kAlpha);
    ASSERT_TRUE(r.testable);
    EXPECT_LT(r.dof, 5);
    crossed += r.e_value >= 1 / kAlpha;
  }
  std::printf("A/A, 3 connections per arm of 10,000 transfers each: e >= 1/alpha in %d of %d runs\n", crossed, runs);
  EXPECT_LE(crossed, runs * 5 / 100);
}

// The e-value as mixture_sprt took it before the effective number of
// connections: K - 1 degrees of freedom per arm, however unequal the
// connections' sizes.
double k_minus_one_e(const ClusteredRatio& a, const ClusteredRatio& b) {
  const double va = a.variance(), vb = b.variance(), v = va + vb;
  const double ka = static_cast<double>(a.clusters) - 1, kb = static_cast<double>(b.clusters) - 1;
  const double nu = v * v / (va * va / ka + vb * vb / kb), rho = kTau * kTau / v;
  const double t2 = (b.ratio() - a.ratio()) * (b.ratio() - a.ratio()) / v;
  return std::exp(-0.5 * std::log1p(rho) + (nu + 1) / 2 * (std::log1p(t2 / nu) - std::log1p(t2 / (nu * (1 + rho)))));
}

struct AaCrossings {
  int ever = 0, last = 0, k_minus_one_last = 0;
};

// A/A runs with connections of the given sizes per arm (sizes(rng) draws
// one arm's), each connection at its own level N(0, 0.5), each transfer
// +- N(0, 0.3), looked at `looks` times as the transfers arrive (each
// connection's spread evenly over the looks): how many runs reach 1/alpha
// at some look, at the last, and at the last with K - 1 degrees of freedom.
template <typename Sizes>
AaCrossings aa_crossings(uint64_t seed, int runs, int looks, Sizes sizes) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<double> between(0, 0.5), within(0, 0.3);
  AaCrossings out;
  for (int run = 0; run < runs; ++run) {
    struct Arm {
      std::vector<int> size;
      std::vector<double> level;
      std::vector<ClusterSums> sums;
      ClusteredRatio evidence;
    };
    Arm arms[2];
    for (Arm& arm : arms) {
      arm.size = sizes(rng);
      for (size_t c = 0; c < arm.size.size(); ++c) arm.level.push_back(between(rng));
      arm.sums.resize(arm.size.size());
    }
    bool crossed = false;
    SequentialResult r;
    for (int look = 1; look <= looks; ++look) {
      for (Arm& arm : arms)
        for (size_t c = 0; c < arm.size.size(); ++c) {
          const int due = static_cast<int>(static_cast<int64_t>(arm.size[c]) * look / looks);
          for (int i = static_cast<int>(arm.sums[c].x); i < due; ++i)
            arm.evidence.add(&arm.sums[c], arm.level[c] + within(rng), 1);
        }
      r = mixture_sprt(arms[0].evidence, arms[1].evidence, kTau, kAlpha);
      crossed = crossed || r.e_value >= 1 / kAlpha;
    }
    out.ever += crossed;
    out.last += r.e_value >= 1 / kAlpha;
    out.k_minus_one_last += k_minus_one_e(arms[0].evidence, arms[1].evidence) >= 1 / kAlpha;
  }
  return out;
}

std::vector<int> heavy_and_light(int heavy, int light_count, int light) {
  std::vector<int> sizes(static_cast<size_t>(light_count) + 1, light);
  sizes[0] = heavy;
  return sizes;
}

// Pop-to-pop and origin traffic: a few persistent connections and a trickle
// of short ones. A heavy connection's own draw of its path is invisible in
// the delta method's variance (its residual is what it pulls the ratio to);
// the effective number of connections, not their count, is what the
// variance rests on: A/A runs cross the bound in at most alpha of 1,000, at
// the last of 10 looks and at any of them, where K - 1 degrees of freedom
// crossed in most.
TEST(MixtureSprt, OneHeavyConnectionPerArmCannotDecideAnAaTest) {
  const int runs = 1000, looks = 10;
  struct Shape {
    const char* name;
    std::vector<int> sizes;
    bool k_minus_one_fooled;
  };
  const Shape shapes[] = {
      {"5,000 + 3 x 1", heavy_and_light(5000, 3, 1), true},
      {"10,000 + 3 x 100", heavy_and_light(10000, 3, 100), true},
      {"5,000 + 60 x 1", heavy_and_light(5000, 60, 1), true},
      {"2 x 5,000 + 10 x 1", {5000, 5000, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1}, false},
      {"3 x 2,000 + 30 x 5", [] {
         std::vector<int> v(33, 5);
         v[0] = v[1] = v[2] = 2000;
         return v;
       }(), false},
      {"21 x 20", std::vector<int>(21, 20), false},
  };
  uint64_t seed = 11;
  for (const Shape& shape : shapes) {
    const AaCrossings n = aa_crossings(seed++, runs, looks, [&](std::mt19937_64&) { return shape.sizes; });
    std::printf("A/A, %s per arm: crossed in %d of %d runs at some look, %d at the last; K - 1 degrees of freedom %d\n",
                shape.name, n.ever, runs, n.last, n.k_minus_one_last);
    EXPECT_LE(n.ever, runs * 5 / 100) << shape.name;
    if (shape.k_minus_one_fooled)
      EXPECT_GE(n.k_minus_one_last, runs / 2) << shape.name << ": the shape no longer fools K - 1 degrees of freedom";
  }
}

// Connection sizes from a heavy-tailed distribution (Pareto, shape 1.1,
// from 1 transfer, capped at 100,000), 4 to 64 connections per arm.
TEST(MixtureSprt, HeavyTailedConnectionSizesCannotDecideAnAaTest) {
  const int runs = 1000;
  const AaCrossings n = aa_crossings(21, runs, 10, [](std::mt19937_64& rng) {
    std::uniform_int_distribution<int> count(4, 64);
    std::uniform_real_distribution<double> u(0, 1);
    std::vector<int> sizes(static_cast<size_t>(count(rng)));
    for (int& s : sizes) s = static_cast<int>(std::min(1e5, std::floor(std::pow(1 - u(rng), -1 / 1.1))));
    return sizes;
  });
  std::printf("A/A, Pareto(1.1) sizes, 4 to 64 connections per arm: crossed in %d of %d runs at some look, %d at the "
              "last; K - 1 degrees of freedom %d\n",
              n.ever, runs, n.last, n.k_minus_one_last);
  EXPECT_LE(n.ever, runs * 5 / 100);
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
    ClusteredRatio a, b;
    for (int i = 0; i < 6000; ++i) add_singletons(&a, {d(rng)}), add_singletons(&b, {1.1 * d(rng)});
    SequentialResult r = as_relative_change(mixture_sprt(a, b, kTau, kAlpha));
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
    ClusteredRatio a, b;
    bool miss = false;
    for (int look = 0; look < 40; ++look) {
      for (int i = 0; i < 50; ++i) add_singletons(&a, {d(rng)}), add_singletons(&b, {1.05 * d(rng)});
      SequentialResult r = as_relative_change(mixture_sprt(a, b, kTau, kAlpha));
      miss = miss || r.ci_lo > 0.05 || r.ci_hi < 0.05;
    }
    missed += miss;
  }
  std::printf("confidence sequence missed the true +5%% at some look in %d of %d\n", missed, reps);
  EXPECT_LE(missed, reps * 7 / 100);
}

TEST(MixtureSprt, TheConfidenceSequenceIsUnboundedUntilSomeDifferenceCouldReachTheBound) {
  ClusteredRatio a, b;
  add_connection(&a, {1, 1.2, 1.1});
  add_connection(&a, {3, 2.5});
  add_connection(&b, {1.5, 1.4});
  add_connection(&b, {2, 2.2});
  const SequentialResult r = mixture_sprt(a, b, kTau, kAlpha);
  ASSERT_TRUE(r.testable);
  EXPECT_LT(r.dof, 3);
  EXPECT_TRUE(std::isinf(r.ci_lo) && std::isinf(r.ci_hi)) << r.ci_lo << " " << r.ci_hi;
  EXPECT_LT(r.e_value, 1 / kAlpha);
}

TEST(MixtureSprt, UntestableWithoutTwoConnectionsOrSpread) {
  ClusteredRatio a, b;
  add_connection(&a, {1, 2, 3});  // one connection, however many values
  add_singletons(&b, {1, 2});
  EXPECT_FALSE(mixture_sprt(a, b, kTau, kAlpha).testable);
  add_connection(&a, {1, 2});
  ClusteredRatio c;
  add_singletons(&c, {1, 1});
  ClusteredRatio same;
  add_connection(&same, {2});
  add_connection(&same, {2});
  EXPECT_FALSE(mixture_sprt(same, c, kTau, kAlpha).testable) << "no spread in either arm";
  EXPECT_TRUE(mixture_sprt(a, b, kTau, kAlpha).testable);
}

TEST(MixtureSprt, ProportionsOverFlows) {
  std::mt19937_64 rng(5);
  std::binomial_distribution<int> one(1000, 0.01), two(1000, 0.02);
  ClusteredRatio a, b, c;  // retransmitted of sent segments, one flow a cluster
  for (int f = 0; f < 100; ++f) {
    a.add_cluster(one(rng), 1000);
    b.add_cluster(one(rng), 1000);
    c.add_cluster(two(rng), 1000);
  }
  EXPECT_LT(mixture_sprt(a, b, kTau, kAlpha).e_value, 1 / kAlpha);
  SequentialResult r = mixture_sprt(a, c, kTau, kAlpha);
  EXPECT_GT(r.e_value, 1e6);
  EXPECT_LT(r.ci_lo, 0.01);
  EXPECT_GT(r.ci_hi, 0.01);
  EXPECT_NEAR(r.diff, 0.01, 0.002);
  EXPECT_FALSE(mixture_sprt(ClusteredRatio{}, c, kTau, kAlpha).testable);
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
      ClusteredRatio a, b;
      for (int i = 0; i < 500; ++i) add_singletons(&a, {d(rng)}), add_singletons(&b, {d(rng)});
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

TEST(SequentialJson, RoundTripsAndRefusesMalformedOrInconsistentSums) {
  ClusteredRatio m;
  add_connection(&m, {1.0, 2.5, 7.0});
  add_connection(&m, {3.0});
  ClusteredRatio back;
  ASSERT_TRUE(from_json(nlohmann::json::parse(to_json(m).dump()), &back));
  EXPECT_EQ(back.clusters, m.clusters);
  EXPECT_EQ(back.y, m.y);
  EXPECT_EQ(back.yy, m.yy);
  EXPECT_EQ(back.variance(), m.variance());
  ASSERT_TRUE(from_json(to_json(ClusteredRatio{}), &back));
  for (const char* bad : {
           R"({"clusters": -1, "y": 0, "x": 0, "yy": 0, "xy": 0, "xx": 0})",
           R"({"clusters": 1, "y": "x", "x": 1, "yy": 0, "xy": 0, "xx": 1})",
           R"({"clusters": 1, "y": 0, "x": 1, "yy": -2, "xy": 0, "xx": 1})",
           R"({"clusters": 3, "y": 0, "x": 2, "yy": 0, "xy": 0, "xx": 4})",  // more clusters than values
           R"({"clusters": 2, "y": 10, "x": 2, "yy": 1, "xy": 1, "xx": 2})",  // yy below y^2 / K
           R"({"clusters": 1, "y": 1, "x": 1, "yy": 1, "xy": 5, "xx": 1})",   // xy^2 above xx * yy
           R"({"clusters": 0, "y": 1, "x": 0, "yy": 0, "xy": 0, "xx": 0})",   // sums without clusters
           R"({"clusters": 1, "y": 0, "x": 1})", "[]", "7"})
    EXPECT_FALSE(from_json(nlohmann::json::parse(bad), &back)) << bad;
  EXPECT_EQ(back.clusters, 0u) << "untouched on failure";
}

}  // namespace
}  // namespace tcpscope
