// The statistics of `tcpscope compare` on synthetic flow sets whose truth is
// known: a real 10 % change is found and bracketed, identical distributions
// are called different at the stated rate, small samples are refused.
#include "compare/compare_stats.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <random>
#include <vector>

#include <nlohmann/json.hpp>

#include "compare/compare.h"
#include "measure/flow_sketch.h"

namespace tcpscope {
namespace {

std::vector<double> lognormal(size_t n, double mu, double sigma, std::mt19937_64* rng, double scale = 1.0) {
  std::lognormal_distribution<double> d(mu, sigma);
  std::vector<double> v(n);
  for (auto& x : v) x = scale * d(*rng);
  return v;
}

// The textbook definition, O(n_a n_b): for tests only.
struct NaiveU {
  double u_b_lower = 0;
  double p = 1;
};
NaiveU naive_mann_whitney(const std::vector<double>& a, const std::vector<double>& b) {
  NaiveU r;
  for (double x : a)
    for (double y : b) r.u_b_lower += y < x ? 1.0 : y == x ? 0.5 : 0.0;
  // Tie correction from the pooled sample's tie groups.
  std::vector<double> all = a;
  all.insert(all.end(), b.begin(), b.end());
  std::sort(all.begin(), all.end());
  double ties = 0;
  for (size_t i = 0; i < all.size();) {
    size_t j = i;
    while (j < all.size() && all[j] == all[i]) ++j;
    const double t = static_cast<double>(j - i);
    ties += t * t * t - t;
    i = j;
  }
  const double na = static_cast<double>(a.size()), nb = static_cast<double>(b.size()), n = na + nb;
  const double mean = na * nb / 2;
  const double sd = std::sqrt(na * nb / 12 * ((n + 1) - ties / (n * (n - 1))));
  const double z = std::max(0.0, std::abs(r.u_b_lower - mean) - 0.5) / sd;
  r.p = std::erfc(z / std::sqrt(2.0));
  return r;
}

CompareOptions fct_options() {
  CompareOptions o;
  o.metric = Measure::kFct;
  o.by = "asn";
  o.a = "cc=cubic";
  o.b = "cc=bbr";
  return o;
}

GroupSamples exact_group(const std::string& name, std::vector<double> a, std::vector<double> b) {
  GroupSamples g;
  g.group = name;
  g.a = ArmDistribution::exact(std::move(a));
  g.b = ArmDistribution::exact(std::move(b));
  return g;
}

// One group whose arms draw n samples each from the same lognormal (median,
// sigma), B's scaled by b_scale.
std::vector<GroupSamples> one_lognormal_group(const std::string& name, size_t n, double median, double sigma,
                                              std::mt19937_64* rng, double b_scale = 1.0) {
  auto a = lognormal(n, std::log(median), sigma, rng);
  auto b = lognormal(n, std::log(median), sigma, rng, b_scale);
  std::vector<GroupSamples> groups;
  groups.push_back(exact_group(name, std::move(a), std::move(b)));
  return groups;
}

TEST(RankSumTest, HandComputedCase) {
  // A entirely above B: U = 0; mean 4.5, var 9/12 * 7 = 5.25,
  // z = (4.5 - 0.5) / sqrt(5.25) = 1.7457, p = erfc(z / sqrt 2) = 0.0809.
  const auto r = rank_sum_test(ArmDistribution::exact({4, 5, 6}), ArmDistribution::exact({1, 2, 3}));
  EXPECT_DOUBLE_EQ(r.u_b_lower, 9);  // every B below every A
  EXPECT_DOUBLE_EQ(r.prob_b_lower, 1.0);
  EXPECT_NEAR(r.p_value, 0.0809, 0.0001);
  EXPECT_GT(r.z, 0);
}

TEST(RankSumTest, MatchesTheTextbookDefinitionWithTies) {
  std::mt19937_64 rng(42);
  for (int rep = 0; rep < 20; ++rep) {
    // Rounded values: plenty of ties within and across the arms.
    std::vector<double> a, b;
    std::poisson_distribution<int> pa(20), pb(21);
    for (int i = 0; i < 40 + rep; ++i) a.push_back(pa(rng));
    for (int i = 0; i < 55 - rep; ++i) b.push_back(pb(rng));
    const auto fast = rank_sum_test(ArmDistribution::exact(a), ArmDistribution::exact(b));
    const auto slow = naive_mann_whitney(a, b);
    EXPECT_DOUBLE_EQ(fast.u_b_lower, slow.u_b_lower) << rep;
    EXPECT_NEAR(fast.p_value, slow.p, 1e-12) << rep;
  }
}

TEST(RankSumTest, AllTiedIsNoEvidence) {
  const auto r = rank_sum_test(ArmDistribution::exact(std::vector<double>(30, 0.0)),
                               ArmDistribution::exact(std::vector<double>(40, 0.0)));
  EXPECT_EQ(r.p_value, 1.0);
  EXPECT_DOUBLE_EQ(r.prob_b_lower, 0.5);
}

TEST(BenjaminiHochberg, KnownValues) {
  const auto q = benjamini_hochberg({0.01, 0.04, std::nullopt, 0.03, 0.005});
  ASSERT_EQ(q.size(), 5u);
  EXPECT_NEAR(*q[0], 0.02, 1e-12);
  EXPECT_NEAR(*q[1], 0.04, 1e-12);
  EXPECT_FALSE(q[2]);
  EXPECT_NEAR(*q[3], 0.04, 1e-12);
  EXPECT_NEAR(*q[4], 0.02, 1e-12);
  // Never above 1.
  const auto big = benjamini_hochberg({0.9, 0.95});
  EXPECT_LE(*big[0], 1.0);
  EXPECT_LE(*big[1], 1.0);
}

TEST(BootstrapRng, BetaHasTheRightMeanAndIsReproducible) {
  BootstrapRng rng(123), again(123);
  double sum = 0;
  const int n = 20000;
  for (int i = 0; i < n; ++i) {
    const double x = rng.beta(51, 50);
    ASSERT_EQ(x, again.beta(51, 50));
    sum += x;
  }
  EXPECT_NEAR(sum / n, 51.0 / 101.0, 0.002);
}

TEST(BootstrapMedianChange, MatchesResamplingTheDataItself) {
  // The order-statistic shortcut must give the same bootstrap distribution
  // as drawing n values with replacement: compare the two intervals.
  std::mt19937_64 rng(8);
  const auto a = lognormal(301, 10, 0.8, &rng);
  const auto b = lognormal(257, 10, 0.8, &rng, 0.9);
  const auto fast = bootstrap_median_change(ArmDistribution::exact(a), ArmDistribution::exact(b), 20000, 99);
  std::vector<double> changes;
  std::vector<double> ra(a.size()), rb(b.size());
  std::uniform_int_distribution<size_t> ia(0, a.size() - 1), ib(0, b.size() - 1);
  for (int r = 0; r < 20000; ++r) {
    for (auto& x : ra) x = a[ia(rng)];
    for (auto& x : rb) x = b[ib(rng)];
    const double ma = ArmDistribution::exact(ra).quantile(0.5);
    const double mb = ArmDistribution::exact(rb).quantile(0.5);
    changes.push_back((mb - ma) / ma);
  }
  std::sort(changes.begin(), changes.end());
  const double lo = changes[500], hi = changes[changes.size() - 1 - 500];
  ASSERT_TRUE(fast.lo && fast.hi);
  EXPECT_NEAR(*fast.lo, lo, 0.015);
  EXPECT_NEAR(*fast.hi, hi, 0.015);
}

TEST(Compare, TenPercentFasterWithThousandsOfFlowsIsBBetterAndBracketed) {
  std::mt19937_64 rng(2024);
  // FCT in microseconds; B's whole distribution is 10 % faster.
  const CompareResult r = compare_groups(one_lognormal_group("64501", 4000, 20000, 0.7, &rng, 0.9), fct_options());
  ASSERT_EQ(r.groups.size(), 1u);
  const GroupResult& g = r.groups[0];
  EXPECT_EQ(g.verdict, Verdict::kBBetter);
  ASSERT_TRUE(g.change.diff && g.change.lo && g.change.hi);
  EXPECT_LT(*g.change.lo, -0.10);
  EXPECT_GT(*g.change.hi, -0.10);
  EXPECT_LT(*g.change.hi, 0);
  EXPECT_NEAR(*g.change.diff, -0.10, 0.04);
  EXPECT_LT(*g.p_value, 1e-6);
  EXPECT_GT(g.prob_b_better, 0.5);
}

TEST(Compare, HigherThroughputIsBetter) {
  std::mt19937_64 rng(77);
  CompareOptions o = fct_options();
  o.metric = Measure::kThroughput;
  const CompareResult r = compare_groups(one_lognormal_group("client", 3000, 5e7, 0.5, &rng, 1.1), o);
  EXPECT_EQ(r.groups[0].verdict, Verdict::kBBetter);
  EXPECT_GT(*r.groups[0].change.diff, 0);
  // 10 % more throughput: the interval brackets +10 %.
  EXPECT_LT(*r.groups[0].change.lo, 0.10);
  EXPECT_GT(*r.groups[0].change.hi, 0.10);
  EXPECT_GT(*r.groups[0].change.lo, 0);
  // The same data with A and B swapped: A better.
  std::mt19937_64 rng2(77);
  auto a2 = lognormal(3000, std::log(5e7), 0.5, &rng2);
  auto b2 = lognormal(3000, std::log(5e7), 0.5, &rng2, 1.1);
  std::vector<GroupSamples> swapped;
  swapped.push_back(exact_group("client", std::move(b2), std::move(a2)));
  EXPECT_EQ(compare_groups(std::move(swapped), o).groups[0].verdict, Verdict::kABetter);
}

TEST(Compare, IdenticalDistributionsAreNoSignificantDifferenceAboutNinetyFivePercentOfTheTime) {
  // One group per repetition (no FDR help): the verdict must be "no
  // significant difference" at about the 95 % the test is built for.
  const int reps = 400;
  int no_difference = 0, covered = 0;
  for (int rep = 0; rep < reps; ++rep) {
    std::mt19937_64 rng(1000 + rep);
    const CompareResult r = compare_groups(one_lognormal_group("g", 150, 30000, 0.9, &rng), fct_options());
    const GroupResult& g = r.groups[0];
    ASSERT_NE(g.verdict, Verdict::kInsufficientData);
    no_difference += g.verdict == Verdict::kNoDifference;
    covered += *g.change.lo <= 0 && 0 <= *g.change.hi;
  }
  const double rate = static_cast<double>(no_difference) / reps;
  std::printf("identical distributions: %d of %d no significant difference, interval covers 0 in %d\n",
              no_difference, reps, covered);
  // 95 % expected; the binomial sd over 400 runs is 1.1 %. The verdict
  // also needs the interval to agree, so it can only be more conservative.
  EXPECT_GE(rate, 0.92) << no_difference << " of " << reps;
  EXPECT_LE(rate, 0.995) << no_difference << " of " << reps;
  // The interval itself covers the true change (0) about 95 % of the time.
  const double coverage = static_cast<double>(covered) / reps;
  EXPECT_GE(coverage, 0.92);
  EXPECT_LE(coverage, 0.985);
}

TEST(Compare, AHandfulOfFlowsIsInsufficientData) {
  std::mt19937_64 rng(5);
  std::vector<GroupSamples> groups;
  // Even a huge difference does not count with 5 flows a side.
  groups.push_back(exact_group("tiny", lognormal(5, 10, 0.1, &rng), lognormal(5, 10, 0.1, &rng, 0.2)));
  groups.push_back(exact_group("one-sided", lognormal(500, 10, 0.5, &rng), {}));
  groups.push_back(exact_group("edge", lognormal(19, 10, 0.5, &rng), lognormal(300, 10, 0.5, &rng)));
  const CompareResult r = compare_groups(std::move(groups), fct_options());
  for (const auto& g : r.groups) {
    EXPECT_EQ(g.verdict, Verdict::kInsufficientData) << g.group;
    EXPECT_FALSE(g.p_value) << g.group;
    EXPECT_FALSE(g.q_value) << g.group;
    EXPECT_FALSE(g.change.lo) << g.group;
  }
  EXPECT_EQ(r.groups_tested, 0u);
  // The point estimate is still shown when both arms have flows.
  for (const auto& g : r.groups) {
    if (g.group == "tiny") {
      EXPECT_TRUE(g.change.diff);
    }
  }
}

TEST(Compare, FalseDiscoveriesAmongManyNullGroupsAreControlled) {
  // 40 ASNs where nothing differs and 5 where B is 15 % faster: with BH the
  // null groups almost never come out significant, the real ones do.
  std::mt19937_64 rng(31337);
  std::vector<GroupSamples> groups;
  for (int i = 0; i < 40; ++i)
    groups.push_back(exact_group("null" + std::to_string(i), lognormal(300, 10, 0.8, &rng), lognormal(300, 10, 0.8, &rng)));
  for (int i = 0; i < 5; ++i)
    groups.push_back(
        exact_group("real" + std::to_string(i), lognormal(2000, 10, 0.8, &rng), lognormal(2000, 10, 0.8, &rng, 0.85)));
  const CompareResult r = compare_groups(std::move(groups), fct_options());
  EXPECT_EQ(r.groups_tested, 45u);
  int false_disc = 0, true_disc = 0;
  for (const auto& g : r.groups) {
    const bool disc = g.verdict == Verdict::kBBetter || g.verdict == Verdict::kABetter;
    if (g.group.rfind("null", 0) == 0)
      false_disc += disc;
    else
      true_disc += g.verdict == Verdict::kBBetter;
    EXPECT_GE(*g.q_value, *g.p_value);
  }
  EXPECT_EQ(true_disc, 5);
  EXPECT_LE(false_disc, 1);
}

TEST(Compare, ZeroMediansGetTheShareOfNonzeroFlowsAsTheirEffectSize) {
  // Retransmit ratios: mostly 0 in both arms; 10 % of A's flows and 30 % of
  // B's retransmit, so the share of retransmitting flows changes by +200 %.
  const double true_change = 0.30 / 0.10 - 1;
  std::mt19937_64 rng(4);
  std::vector<double> a, b;
  std::uniform_real_distribution<double> u(0, 1);
  for (int i = 0; i < 4000; ++i) a.push_back(u(rng) < 0.1 ? 0.01 + 0.05 * u(rng) : 0.0);
  for (int i = 0; i < 4000; ++i) b.push_back(u(rng) < 0.3 ? 0.01 + 0.05 * u(rng) : 0.0);
  CompareOptions o = fct_options();
  o.metric = Measure::kRetrans;
  std::vector<GroupSamples> groups;
  groups.push_back(exact_group("all", a, b));
  const CompareResult r = compare_groups(std::move(groups), o);
  const GroupResult& g = r.groups[0];
  EXPECT_EQ(g.a.quantiles[0].value, 0.0);  // p50
  EXPECT_EQ(g.change.statistic, ChangeStatistic::kShareNonzero);
  ASSERT_TRUE(g.change.diff && g.change.lo && g.change.hi) << g.change.ci_reason;
  const double share_a = 1 - static_cast<double>(std::count(a.begin(), a.end(), 0.0)) / a.size();
  const double share_b = 1 - static_cast<double>(std::count(b.begin(), b.end(), 0.0)) / b.size();
  EXPECT_DOUBLE_EQ(*g.change.diff, (share_b - share_a) / share_a);
  EXPECT_LT(*g.change.lo, true_change);
  EXPECT_GT(*g.change.hi, true_change);
  EXPECT_GT(*g.change.lo, 1.0);  // clearly more retransmitting flows in B
  EXPECT_LT(*g.change.hi, 3.0);
  EXPECT_EQ(g.verdict, Verdict::kABetter);  // lower is better for retrans
  std::printf("retrans share 10%% vs 30%%: diff %+.3f, 95%% CI [%+.3f, %+.3f] (true %+.3f)\n", *g.change.diff,
              *g.change.lo, *g.change.hi, true_change);

  // Labelled as such in the JSON and the table.
  const auto j = compare_result_json(r);
  EXPECT_EQ(j["groups"][0]["diff_statistic"], "share_nonzero");
  EXPECT_TRUE(j["groups"][0]["ci_reason"].is_null());
  const std::string table = format_compare_table(r);
  EXPECT_NE(table.find("diff of"), std::string::npos) << table;
  EXPECT_NE(table.find("share>0"), std::string::npos) << table;

  // Sketched (--server): zeros are exact, so the share and its diff are too.
  FlowSketch sa, sb;
  for (double x : a) sa.add(x);
  for (double x : b) sb.add(x);
  GroupSamples sg;
  sg.group = "all";
  sg.a = ArmDistribution::from_sketch(sa);
  sg.b = ArmDistribution::from_sketch(sb);
  std::vector<GroupSamples> sketched;
  sketched.push_back(std::move(sg));
  const CompareResult rs = compare_groups(std::move(sketched), o);
  ASSERT_TRUE(rs.groups[0].change.diff && rs.groups[0].change.lo);
  EXPECT_DOUBLE_EQ(*rs.groups[0].change.diff, *g.change.diff);
  EXPECT_DOUBLE_EQ(*rs.groups[0].change.lo, *g.change.lo);  // same counts, same seed: same binomial draws
  EXPECT_EQ(rs.groups[0].verdict, g.verdict);

  // Coverage of the share interval over seeded repetitions (10 % vs 30 %,
  // 500 flows a side): about 95 %.
  int covered = 0;
  const int reps = 200;
  for (int rep = 0; rep < reps; ++rep) {
    std::mt19937_64 r2(500 + rep);
    std::vector<double> x, y;
    for (int i = 0; i < 500; ++i) x.push_back(u(r2) < 0.1 ? 0.02 : 0.0);
    for (int i = 0; i < 500; ++i) y.push_back(u(r2) < 0.3 ? 0.02 : 0.0);
    const MedianChange c =
        bootstrap_median_change(ArmDistribution::exact(x), ArmDistribution::exact(y), 2000, 77 + rep);
    ASSERT_TRUE(c.lo && c.hi) << c.ci_reason;
    covered += *c.lo <= true_change && true_change <= *c.hi;
  }
  std::printf("share interval covers the true +200%% in %d of %d repetitions\n", covered, reps);
  EXPECT_GE(covered, 0.90 * reps);
  EXPECT_LE(covered, 0.99 * reps);
}

TEST(Compare, NoFlowOfANonzeroIsNoDiffWithAReason) {
  std::vector<double> a(100, 0.0), b(100, 0.0);
  for (int i = 0; i < 30; ++i) b[i] = 0.05;
  const MedianChange c = bootstrap_median_change(ArmDistribution::exact(a), ArmDistribution::exact(b), 1000, 1);
  EXPECT_FALSE(c.diff);
  EXPECT_FALSE(c.lo);
  EXPECT_FALSE(c.hi);
  EXPECT_FALSE(c.ci_reason.empty());
}

TEST(Compare, IntervalIsTwoFiniteNumbersOrNullWithAReason) {
  // A's median sits just above 0 (52 % of its flows retransmit): many
  // resamples put A's median at 0, where the relative change is infinite.
  // The interval must not come out as [x, inf] (JSON [x, null]).
  std::vector<double> a(48, 0.0), b(45, 0.0);
  for (int i = 0; i < 52; ++i) a.push_back(0.1);
  for (int i = 0; i < 55; ++i) b.push_back(0.05);
  const MedianChange c = bootstrap_median_change(ArmDistribution::exact(a), ArmDistribution::exact(b), 2000, 3);
  EXPECT_EQ(c.statistic, ChangeStatistic::kMedian);
  ASSERT_TRUE(c.diff);
  EXPECT_FALSE(c.lo);
  EXPECT_FALSE(c.hi);
  EXPECT_NE(c.ci_reason.find("no finite"), std::string::npos) << c.ci_reason;

  // Over many seeded shapes near the edge: every interval in the JSON is
  // null (with a reason) or two finite numbers.
  CompareOptions o = fct_options();
  o.metric = Measure::kRetrans;
  std::vector<GroupSamples> groups;
  std::mt19937_64 rng(9);
  std::uniform_real_distribution<double> u(0, 1);
  for (int g = 0; g < 60; ++g) {
    const double pa = 0.35 + 0.01 * g / 2, pb = 0.3 + 0.01 * (g % 20);
    std::vector<double> x, y;
    for (int i = 0; i < 40 + g; ++i) x.push_back(u(rng) < pa ? 0.01 + 0.1 * u(rng) : 0.0);
    for (int i = 0; i < 40 + g; ++i) y.push_back(u(rng) < pb ? 0.01 + 0.1 * u(rng) : 0.0);
    groups.push_back(exact_group("g" + std::to_string(g), x, y));
  }
  const auto j = compare_result_json(compare_groups(std::move(groups), o));
  int nulls = 0, pairs = 0;
  for (const auto& g : j["groups"]) {
    if (g["ci"].is_null()) {
      ++nulls;
      ASSERT_TRUE(g["ci_reason"].is_string()) << g.dump();
      EXPECT_FALSE(g["ci_reason"].get<std::string>().empty());
    } else {
      ++pairs;
      ASSERT_TRUE(g["ci"].is_array() && g["ci"].size() == 2) << g.dump();
      ASSERT_TRUE(g["ci"][0].is_number() && g["ci"][1].is_number()) << g.dump();
      EXPECT_TRUE(std::isfinite(g["ci"][0].get<double>()) && std::isfinite(g["ci"][1].get<double>()));
      EXPECT_LE(g["ci"][0].get<double>(), g["ci"][1].get<double>());
      EXPECT_TRUE(g["ci_reason"].is_null());
    }
  }
  std::printf("edge shapes: %d intervals, %d null with a reason\n", pairs, nulls);
  EXPECT_GT(nulls, 0);  // the case the guarantee is about did occur
  EXPECT_GT(pairs, 0);
}

TEST(BootstrapRng, BinomialHasTheRightMeanAndVariance) {
  BootstrapRng rng(42);
  for (auto [n, p] : std::vector<std::pair<uint64_t, double>>{{10, 0.3}, {1000, 0.1}, {1000000, 0.02}}) {
    const int draws = 4000;
    double sum = 0, sq = 0;
    for (int i = 0; i < draws; ++i) {
      const double x = static_cast<double>(rng.binomial(n, p));
      ASSERT_LE(x, static_cast<double>(n));
      sum += x;
      sq += x * x;
    }
    const double mean = sum / draws, var = sq / draws - mean * mean;
    const double true_mean = n * p, true_var = n * p * (1 - p);
    // Mean within 5 standard errors; variance within 15 %.
    EXPECT_NEAR(mean, true_mean, 5 * std::sqrt(true_var / draws)) << n << " " << p;
    EXPECT_NEAR(var, true_var, 0.15 * true_var) << n << " " << p;
  }
  EXPECT_EQ(rng.binomial(100, 0), 0u);
  EXPECT_EQ(rng.binomial(100, 1), 100u);
}

TEST(Verdict, NeedsTheIntervalToAgreeWithTheRankTest) {
  VerdictInputs in;
  in.n_a = in.n_b = 1000;
  in.q_value = 0.001;
  in.prob_b_lower = 0.6;  // B tends lower = better for fct
  in.change.diff = -0.05;
  in.change.lo = -0.08;
  in.change.hi = -0.02;
  EXPECT_EQ(decide_verdict(in), Verdict::kBBetter);
  in.change.hi = 0.01;  // median interval includes 0
  EXPECT_EQ(decide_verdict(in), Verdict::kNoDifference);
  in.change.lo = 0.01;  // interval says B higher, rank test B lower
  in.change.hi = 0.05;
  EXPECT_EQ(decide_verdict(in), Verdict::kNoDifference);
  in.change = {};
  EXPECT_EQ(decide_verdict(in), Verdict::kBBetter);
  in.q_value = 0.2;
  EXPECT_EQ(decide_verdict(in), Verdict::kNoDifference);
  in.n_b = 19;
  EXPECT_EQ(decide_verdict(in), Verdict::kInsufficientData);
}

TEST(ArmDistribution, SketchedQuantilesTrackExactOnes) {
  std::mt19937_64 rng(6);
  const auto v = lognormal(5000, 10, 1, &rng);
  FlowSketch s;
  for (double x : v) s.add(x);
  const auto exact = ArmDistribution::exact(v);
  const auto sketched = ArmDistribution::from_sketch(s);
  EXPECT_EQ(sketched.count(), exact.count());
  EXPECT_DOUBLE_EQ(sketched.relative_accuracy(), 0.01);
  for (double q : {0.01, 0.5, 0.9, 0.99}) {
    EXPECT_LE(std::abs(sketched.quantile(q) - exact.quantile(q)) / exact.quantile(q), 0.01 + 1e-12);
    EXPECT_EQ(sketched.quantile(q), s.quantile(q));
  }
}

}  // namespace
}  // namespace tcpscope
