#include "pipeline/asn_ranking.h"

#include <gtest/gtest.h>

#include "config/config.h"

namespace tcpscope {
namespace {

AsnRankingOptions no_warmup(uint32_t top_n) {
  AsnRankingOptions o;
  o.top_n = top_n;
  o.warmup_recompute_flows = 0;
  return o;
}

TEST(AsnRankingTest, TopAsnsKeepTheirNumberOthersFoldAndUnknownIsZero) {
  AsnRanking r(no_warmup(2));
  // While the top-N has room an ASN joins it at once; once full, newcomers
  // are "other" until a ranking lets them in.
  EXPECT_EQ(r.add(100, 900000).label, AsnLabel::kOwn);
  EXPECT_EQ(r.add(200, 500000).label, AsnLabel::kOwn);
  EXPECT_EQ(r.add(300, 100000).label, AsnLabel::kOther);
  EXPECT_EQ(r.add(0, 7).label, AsnLabel::kOwn);
  r.add(300, 10000000);  // now the most bytes, still "other" until ranked
  EXPECT_EQ(r.label_text(300), "other");
  r.recompute();
  EXPECT_EQ(r.top(), (std::vector<uint32_t>{300, 100}));
  EXPECT_EQ(r.label_text(300), "300");
  EXPECT_EQ(r.label_text(100), "100");
  EXPECT_EQ(r.label_text(200), "other");
  EXPECT_EQ(r.label_text(0), "0");
  EXPECT_EQ(r.label_text(999), "other");  // never seen
}

TEST(AsnRankingTest, RankingIsByBytesNotFlows) {
  AsnRanking r(no_warmup(1));
  for (int i = 0; i < 100; ++i) r.add(100, 1000);  // many small flows
  r.add(200, 200000);                               // one large one
  r.recompute();
  EXPECT_EQ(r.top(), (std::vector<uint32_t>{200}));
}

TEST(AsnRankingTest, TiesGoToTheLowerAsn) {
  AsnRanking r(no_warmup(2));
  for (uint32_t asn : {30u, 10u, 20u}) r.add(asn, 5000);
  r.recompute();
  EXPECT_EQ(r.top(), (std::vector<uint32_t>{10, 20}));
}

TEST(AsnRankingTest, OldBytesDecayWithTheHalfLife) {
  AsnRankingOptions o = no_warmup(1);
  o.bytes_half_life_s = 1e-9;  // everything counted before a ranking is forgotten by the next
  AsnRanking r(o);
  r.add(100, 1000000);
  r.recompute();
  EXPECT_EQ(r.top(), (std::vector<uint32_t>{100}));
  r.add(200, 10);
  r.recompute();
  EXPECT_EQ(r.top(), (std::vector<uint32_t>{200}));
}

TEST(AsnRankingTest, WarmupRanksWithoutWaitingForTheDaemon) {
  AsnRankingOptions o;
  o.top_n = 1;
  o.warmup_recompute_flows = 10;
  AsnRanking r(o);
  EXPECT_FALSE(r.add(1111, 10).reranked);  // takes the only place while there is room
  for (int i = 0; i < 8; ++i) EXPECT_FALSE(r.add(4242, 1000).reranked);
  EXPECT_EQ(r.top(), (std::vector<uint32_t>{1111}));
  const AsnRanking::Counted tenth = r.add(4242, 1000);
  EXPECT_TRUE(tenth.reranked);
  EXPECT_EQ(tenth.label, AsnLabel::kOther);  // labelled by the ranking in force before it
  EXPECT_EQ(r.top(), (std::vector<uint32_t>{4242}));

  AsnRankingOptions late = o;
  late.warmup_seconds = 0;  // warm-up already over: only the daemon's calls rank
  AsnRanking r2(late);
  r2.add(1111, 10);
  for (int i = 0; i < 30; ++i) EXPECT_FALSE(r2.add(4242, 1000).reranked);
  EXPECT_EQ(r2.top(), (std::vector<uint32_t>{1111}));
}

TEST(AsnRankingTest, TableIsBounded) {
  AsnRankingOptions o = no_warmup(3);
  o.max_tracked = 10;
  AsnRanking r(o);
  for (uint32_t a = 1; a <= 25; ++a) r.add(a, 1000 * a);
  EXPECT_EQ(r.untracked_flows(), 15u);
  r.recompute();  // ranks the 10 tracked, then prunes to the best 5
  EXPECT_EQ(r.top(), (std::vector<uint32_t>{10, 9, 8}));
  // Room again: a new heavy ASN is tracked and can reach the top.
  r.add(77, 100000000);
  EXPECT_EQ(r.untracked_flows(), 15u);
  r.recompute();
  EXPECT_EQ(r.top().front(), 77u);
}

TEST(AsnRankingTest, ANewTopNRanksAtOnce) {
  AsnRanking r(no_warmup(2));
  r.add(1, 100);
  r.add(2, 200);
  EXPECT_FALSE(r.update_options(no_warmup(2)));
  EXPECT_TRUE(r.update_options(no_warmup(1)));
  EXPECT_EQ(r.top(), (std::vector<uint32_t>{2}));
}

TEST(AsnRankingTest, FromConfigTakesTopN) {
  Config c;
  c.asn.top_n = 7;
  EXPECT_EQ(AsnRankingOptions::from_config(c).top_n, 7u);
}

}  // namespace
}  // namespace tcpscope
