#include "pipeline/service_ranking.h"

#include <gtest/gtest.h>

#include <memory>
#include <string>

#include "config/config.h"

namespace tcpscope {
namespace {

ByteRankingOptions no_warmup(uint32_t top_n) {
  ByteRankingOptions o;
  o.top_n = top_n;
  o.warmup_recompute_flows = 0;
  return o;
}

Enrichment owned_by(const std::string& name) {
  Enrichment e;
  e.service = std::make_shared<ServiceIdentity>(name);
  return e;
}

TEST(ServiceRankingTest, TopServicesKeepTheirNameOthersFoldAndUnknownIsEmpty) {
  ServiceRanking r(no_warmup(2));
  EXPECT_EQ(r.count(owned_by("nginx.service"), 900000).service.label, RankedLabel::kOwn);
  EXPECT_EQ(r.count(owned_by("haproxy.service"), 500000).service.label, RankedLabel::kOwn);
  EXPECT_EQ(r.count(owned_by("cron.service"), 100).service.label, RankedLabel::kOther);
  const ServiceRanking::Counted unknown = r.count(Enrichment{}, 7);
  EXPECT_EQ(unknown.service.key, 0u);
  EXPECT_EQ(unknown.service.label, RankedLabel::kOwn);
  EXPECT_EQ(r.count(owned_by(""), 7).service.key, 0u);  // an identity with no name is unknown too
  r.count(owned_by("cron.service"), 10000000);  // now the most bytes, still "other" until ranked
  EXPECT_EQ(r.label_text("cron.service"), "other");
  r.recompute();
  EXPECT_EQ(r.label_text("cron.service"), "cron.service");
  EXPECT_EQ(r.label_text("nginx.service"), "nginx.service");
  EXPECT_EQ(r.label_text("haproxy.service"), "other");
  EXPECT_EQ(r.label_text(""), "");
  EXPECT_EQ(r.label_text("never.seen"), "other");
  EXPECT_EQ(r.top().size(), 2u);
}

TEST(ServiceRankingTest, ANameHasOneKeyWhateverObjectCarriesIt) {
  ServiceRanking r(no_warmup(1));
  const Enrichment a = owned_by("ns/web-1"), b = owned_by("ns/web-1"), c = owned_by("ns/web-2");
  const uint64_t key = r.count(a, 10).service.key;
  EXPECT_EQ(key, service_key("ns/web-1"));
  EXPECT_NE(key, 0u);
  EXPECT_EQ(r.count(b, 10).service.key, key);
  EXPECT_EQ(r.count(c, 10).service.key, service_key("ns/web-2"));
  EXPECT_NE(service_key("ns/web-2"), key);
  EXPECT_EQ(r.ranked(a).key, key);  // back to an earlier object after another
  EXPECT_EQ(r.ranked(a).label, RankedLabel::kOwn);
  EXPECT_EQ(r.ranked(c).label, RankedLabel::kOther);
}

TEST(ServiceRankingTest, TransfersAreLabelledWithoutBeingCounted) {
  ServiceRanking r(no_warmup(1));
  r.count(owned_by("nginx.service"), 1000);
  for (int i = 0; i < 10; ++i) EXPECT_EQ(r.ranked(owned_by("big.service")).label, RankedLabel::kOther);
  r.recompute();
  EXPECT_EQ(r.label_text("nginx.service"), "nginx.service");
  EXPECT_FALSE(r.tracked(service_key("big.service")));
}

TEST(ServiceRankingTest, AServiceWithoutRecordsForTheGraceTimeIsForgotten) {
  ByteRankingOptions o = no_warmup(2);
  o.forget_after_s = 1e-9;  // any time between two rankings
  ServiceRanking r(o);
  r.count(owned_by("old.service"), 1000000);
  r.count(owned_by("live.service"), 10);
  r.recompute();  // both seen since the last ranking
  EXPECT_TRUE(r.tracked(service_key("old.service")));
  EXPECT_EQ(r.label_text("old.service"), "old.service");
  r.count(owned_by("live.service"), 10);
  r.recompute();  // old.service had no record since
  EXPECT_FALSE(r.tracked(service_key("old.service")));
  EXPECT_EQ(r.label_text("old.service"), "other");
  EXPECT_EQ(r.top(), (std::vector<uint64_t>{service_key("live.service")}));
  // Without forget_after_s (the ASNs' ranking) a quiet key stays.
  ServiceRanking keeps(no_warmup(2));
  keeps.count(owned_by("old.service"), 1000000);
  keeps.recompute();
  keeps.recompute();
  EXPECT_TRUE(keeps.tracked(service_key("old.service")));
}

TEST(ServiceRankingTest, FromConfigTakesTopNAndGrace) {
  Config c;
  EXPECT_EQ(ServiceRanking::options_from_config(c).top_n, 20u);
  EXPECT_EQ(ServiceRanking::options_from_config(c).forget_after_s, 600);
  c.services.top_n = 3;
  c.services.grace_seconds = 30;
  EXPECT_EQ(ServiceRanking::options_from_config(c).top_n, 3u);
  EXPECT_EQ(ServiceRanking::options_from_config(c).forget_after_s, 30);
  c.services.grace_seconds = 0;  // forgotten at the first ranking without a record, not never
  EXPECT_GT(ServiceRanking::options_from_config(c).forget_after_s, 0);
  EXPECT_LT(ServiceRanking::options_from_config(c).forget_after_s, 1e-6);
}

}  // namespace
}  // namespace tcpscope
