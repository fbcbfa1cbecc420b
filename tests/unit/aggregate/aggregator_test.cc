#include "aggregate/aggregator.h"
#include "pipeline/asn_ranking.h"

#include <gtest/gtest.h>
#include <prometheus/registry.h>
#include <prometheus/text_serializer.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <map>
#include <random>
#include <sstream>
#include <memory>
#include <string>
#include <set>
#include <thread>
#include <vector>

#include "config/config.h"
#include "export/daemon_health.h"

#include "../record_fixtures.h"

namespace tcpscope {
namespace {

using Labels = std::map<std::string, std::string>;

// What Registry::Collect() exposes, looked up by family name and exact label set.
class Scrape {
 public:
  explicit Scrape(const prometheus::Registry& r) : families_(r.Collect()) {}

  const prometheus::MetricFamily* family(const std::string& name) const {
    for (const auto& f : families_)
      if (f.name == name) return &f;
    return nullptr;
  }
  const prometheus::ClientMetric* metric(const std::string& name, const Labels& labels) const {
    const auto* f = family(name);
    if (!f) return nullptr;
    for (const auto& m : f->metric) {
      Labels l;
      for (const auto& p : m.label) l[p.name] = p.value;
      if (l == labels) return &m;
    }
    return nullptr;
  }
  // Label sets present in a family.
  std::vector<Labels> series(const std::string& name) const {
    std::vector<Labels> out;
    if (const auto* f = family(name))
      for (const auto& m : f->metric) {
        Labels l;
        for (const auto& p : m.label) l[p.name] = p.value;
        out.push_back(l);
      }
    return out;
  }
  double counter(const std::string& name, const Labels& labels) const {
    const auto* m = metric(name, labels);
    EXPECT_TRUE(m) << name << " has no series " << to_string(labels);
    return m ? m->counter.value : -1;
  }
  double gauge(const std::string& name, const Labels& labels) const {
    const auto* m = metric(name, labels);
    EXPECT_TRUE(m) << name << " has no series " << to_string(labels);
    return m ? m->gauge.value : -1;
  }
  const prometheus::ClientMetric::Histogram* histogram(const std::string& name, const Labels& labels) const {
    const auto* m = metric(name, labels);
    return m ? &m->histogram : nullptr;
  }
  static std::string to_string(const Labels& l) {
    std::string s = "{";
    for (const auto& [k, v] : l) s += k + "=" + v + ",";
    return s + "}";
  }

 private:
  std::vector<prometheus::MetricFamily> families_;
};

// Cumulative count of the bucket whose upper bound is `le`.
uint64_t bucket(const prometheus::ClientMetric::Histogram& h, double le) {
  for (const auto& b : h.bucket)
    if (b.upper_bound == le) return b.cumulative_count;
  ADD_FAILURE() << "no bucket le=" << le;
  return UINT64_MAX;
}

Labels base(const std::string& asn, const std::string& cls = "client", const std::string& cc = "cubic",
           const std::string& service = "") {
  return {{"peer_class", cls}, {"asn", asn}, {"service", service}, {"cc", cc}};
}

// ASN 0's histogram of a family (nullptr if it has none), which has `count`
// samples summing to `sum`.
const prometheus::ClientMetric::Histogram* asn0_histogram(const Scrape& s, const std::string& name, uint64_t count,
                                                          double sum) {
  const auto* h = s.histogram(name, base("0"));
  EXPECT_TRUE(h) << name;
  if (!h) return nullptr;
  EXPECT_EQ(h->sample_count, count) << name;
  EXPECT_DOUBLE_EQ(h->sample_sum, sum) << name;
  return h;
}

Labels with(Labels l, const std::string& k, const std::string& v) {
  l[k] = v;
  return l;
}

FlowRecord good_flow(uint32_t asn, uint64_t bytes_acked, int64_t fct_us) {
  FlowRecord f = client_flow("cubic", asn, bytes_acked, fct_us);
  f.dir = Direction::kPassive;
  f.outcome = Outcome::kOk;
  f.srtt_us = 25000;
  f.min_rtt_us = 12000;
  f.segs_out = 10;
  return f;
}

TransferRecord transfer(uint32_t asn, TransferDirection direction, uint64_t bytes, int64_t xfer_us) {
  return client_transfer("cubic", asn, direction, bytes, xfer_us);
}

// The daemon's order (pipeline/record_fanout.cc): the ASN and service
// rankings label each flow, then the aggregator counts it under those
// labels; a new ranking retires series. A transfer is labelled by the
// rankings as they stand and adds no bytes to them.
struct TestOptions {
  AggregatorOptions series;
  AsnRankingOptions ranking;
  ByteRankingOptions services = [] {
    ByteRankingOptions o;
    o.top_n = 20;
    o.warmup_recompute_flows = 0;
    return o;
  }();
};

class RankedAggregator {
 public:
  RankedAggregator(std::shared_ptr<prometheus::Registry> registry, const TestOptions& o)
      : ranking(o.ranking), services(o.services), agg(std::move(registry), o.series) {}
  // Whether the flow's ASN has a label of its own after it.
  bool add(const FlowRecord& f) {
    const uint64_t bytes = f.bytes_acked + f.bytes_received;
    const AsnRanking::Counted c = ranking.add(f.enrichment.asn, bytes);
    const ServiceRanking::Counted sc = services.count(f.enrichment, bytes);
    agg.add(f, c.label, sc.service);
    if (c.reranked) agg.retire_series(ranking);
    if (sc.reranked) agg.retire_service_series(services);
    return ranking.label(f.enrichment.asn) == AsnLabel::kOwn;
  }
  void add(const TransferRecord& t) {
    agg.add(t, ranking.label(t.enrichment.asn), services.ranked(t.enrichment));
  }
  void recompute_top_asns() {
    ranking.recompute();
    agg.retire_series(ranking);
  }
  void recompute_top_services() {
    services.recompute();
    agg.retire_service_series(services);
  }
  void update_options(const TestOptions& o) {
    agg.update_options(o.series);
    if (ranking.update_options(o.ranking)) agg.retire_series(ranking);
  }
  std::string asn_label(uint32_t asn) const { return ranking.label_text(asn); }
  std::vector<uint32_t> top_asns() const { return ranking.top(); }
  void begin_batch() { agg.begin_batch(); }
  void end_batch() { agg.end_batch(); }
  void set_active_flows(const Aggregator::ActiveFlows& active) { agg.set_active_flows(active); }
  size_t label_sets() const { return agg.label_sets(); }
  std::string size_class_label(uint64_t bytes) const { return agg.size_class_label(bytes); }

  AsnRanking ranking;
  ServiceRanking services;
  Aggregator agg;
};

class AggregatorTest : public ::testing::Test {
 protected:
  std::shared_ptr<prometheus::Registry> registry_ = std::make_shared<prometheus::Registry>();
  TestOptions no_warmup() {
    TestOptions o;
    o.ranking.warmup_recompute_flows = 0;
    return o;
  }
  // A ranking of one ASN, the series of an ASN that left it kept this long.
  TestOptions top_one_keeping_stale_series_for(int stale_asn_seconds) {
    TestOptions o = no_warmup();
    o.ranking.top_n = 1;
    o.series.stale_asn_seconds = stale_asn_seconds;
    return o;
  }
  // ASN 100 ranks first with 2000 bytes in series of its own, then 200 overtakes it.
  void top_asn_overtaken(RankedAggregator* agg) {
    agg->add(good_flow(100, 1000, 1000));
    agg->recompute_top_asns();
    agg->add(good_flow(100, 1000, 1000));
    EXPECT_TRUE(Scrape(*registry_).metric("tcpscope_bytes_acked_total", base("100")));
    agg->add(good_flow(200, 1000000, 1000));  // 200 overtakes 100
    agg->recompute_top_asns();
    EXPECT_EQ(agg->asn_label(100), "other");
  }
};

TEST_F(AggregatorTest, CountersCountEveryFlow) {
  RankedAggregator agg(registry_, no_warmup());
  FlowRecord ok = good_flow(0, 5000, 40000);
  ok.bytes_received = 700;
  ok.segs_out = 7;
  ok.retrans_segs = 2;
  agg.add(ok);
  agg.add(ok);
  FlowRecord reset = ok;
  reset.outcome = Outcome::kReset;
  reset.dir = Direction::kActive;
  agg.add(reset);
  FlowRecord refused = good_flow(0, 0, 0);
  refused.outcome = Outcome::kRefused;
  refused.dir = Direction::kActive;
  refused.segs_out = 1;
  agg.add(refused);
  FlowRecord partial = ok;
  partial.partial = true;
  agg.add(partial);

  Scrape s(*registry_);
  const Labels b = base("0");
  EXPECT_EQ(s.counter("tcpscope_flows_total", with(with(b, "dir", "passive"), "outcome", "ok")), 3);
  EXPECT_EQ(s.counter("tcpscope_flows_total", with(with(b, "dir", "active"), "outcome", "reset")), 1);
  EXPECT_EQ(s.counter("tcpscope_flows_total", with(with(b, "dir", "active"), "outcome", "refused")), 1);
  EXPECT_FALSE(s.metric("tcpscope_flows_total", with(with(b, "dir", "passive"), "outcome", "reset")));
  EXPECT_EQ(s.counter("tcpscope_bytes_acked_total", b), 4 * 5000);
  EXPECT_EQ(s.counter("tcpscope_bytes_received_total", b), 4 * 700);
  EXPECT_EQ(s.counter("tcpscope_segments_out_total", b), 4 * 7 + 1);
  EXPECT_EQ(s.counter("tcpscope_retransmitted_segments_total", b), 4 * 2);

  // Only the two complete, non-partial ok flows describe completion time.
  const auto* fct = s.histogram("tcpscope_flow_completion_seconds", with(b, "size_class", "lt_100k"));
  ASSERT_TRUE(fct);
  EXPECT_EQ(fct->sample_count, 2u);
  EXPECT_DOUBLE_EQ(fct->sample_sum, 0.08);
  const auto* srtt = s.histogram("tcpscope_srtt_seconds", b);
  ASSERT_TRUE(srtt);
  EXPECT_EQ(srtt->sample_count, 2u);
  const auto* min_rtt = s.histogram("tcpscope_min_rtt_seconds", b);
  ASSERT_TRUE(min_rtt);
  EXPECT_EQ(min_rtt->sample_count, 2u);
}

TEST_F(AggregatorTest, FailedAndEmptyFlowsFeedNoHistogram) {
  RankedAggregator agg(registry_, no_warmup());
  FlowRecord reset = good_flow(0, 4000000, 900000);
  reset.outcome = Outcome::kReset;
  agg.add(reset);
  FlowRecord timeout = reset;
  timeout.outcome = Outcome::kTimeout;
  agg.add(timeout);
  agg.add(good_flow(0, 0, 30000));  // ok, but no data moved
  FlowRecord partial = good_flow(0, 4000000, 900000);
  partial.partial = true;
  agg.add(partial);

  Scrape s(*registry_);
  EXPECT_EQ(s.counter("tcpscope_flows_total", with(with(base("0"), "dir", "passive"), "outcome", "ok")), 2);
  EXPECT_EQ(s.counter("tcpscope_flows_total", with(with(base("0"), "dir", "passive"), "outcome", "reset")), 1);
  EXPECT_EQ(s.counter("tcpscope_flows_total", with(with(base("0"), "dir", "passive"), "outcome", "timeout")), 1);
  for (const char* h : {"tcpscope_flow_completion_seconds", "tcpscope_flow_throughput_bytes_per_second",
                        "tcpscope_srtt_seconds", "tcpscope_min_rtt_seconds"})
    EXPECT_TRUE(s.series(h).empty()) << h;
}

TEST_F(AggregatorTest, FctBucketsAreCumulative) {
  RankedAggregator agg(registry_, no_warmup());
  agg.add(good_flow(0, 1000, 150));      // 150 us
  agg.add(good_flow(0, 1000, 4000));     // 4 ms
  agg.add(good_flow(0, 1000, 5000));     // exactly on the 5 ms bound: le is inclusive
  agg.add(good_flow(0, 1000, 90000000)); // 90 s: beyond the last bound

  Scrape s(*registry_);
  const auto* h = s.histogram("tcpscope_flow_completion_seconds", with(base("0"), "size_class", "lt_100k"));
  ASSERT_TRUE(h);
  ASSERT_EQ(h->bucket.size(), fct_buckets_seconds().size() + 1);  // + the +Inf bucket
  EXPECT_EQ(bucket(*h, 0.0001), 0u);
  EXPECT_EQ(bucket(*h, 0.0002), 1u);
  EXPECT_EQ(bucket(*h, 0.003), 1u);
  EXPECT_EQ(bucket(*h, 0.005), 3u);
  EXPECT_EQ(bucket(*h, 60), 3u);
  EXPECT_EQ(h->bucket.back().cumulative_count, 4u);
  EXPECT_EQ(h->sample_count, 4u);
  EXPECT_DOUBLE_EQ(h->sample_sum, 0.00015 + 0.004 + 0.005 + 90);
}

TEST_F(AggregatorTest, SizeClassFollowsTotalPayloadBytesAtTheBoundaries) {
  RankedAggregator agg(registry_, no_warmup());
  struct Case {
    uint64_t acked, received;
    const char* size_class;
  };
  const Case cases[] = {
      {99999, 0, "lt_100k"},  {99000, 999, "lt_100k"},  {100000, 0, "100k_1m"}, {50000, 50000, "100k_1m"},
      {999999, 0, "100k_1m"}, {1000000, 0, "1m_3m"},    {2999999, 0, "1m_3m"},  {3000000, 0, "ge_3m"},
      {0, 3000000, "ge_3m"},  {9000000000, 0, "ge_3m"},
  };
  std::map<std::string, uint64_t> expected;
  for (const auto& c : cases) {
    FlowRecord f = good_flow(0, c.acked, 100000);
    f.bytes_received = c.received;
    agg.add(f);
    ++expected[c.size_class];
    EXPECT_EQ(agg.size_class_label(c.acked + c.received), c.size_class);
  }
  Scrape s(*registry_);
  EXPECT_EQ(s.series("tcpscope_flow_completion_seconds").size(), 4u);
  for (const auto& [size_class, n] : expected) {
    const auto* h = s.histogram("tcpscope_flow_completion_seconds", with(base("0"), "size_class", size_class));
    ASSERT_TRUE(h) << size_class;
    EXPECT_EQ(h->sample_count, n) << size_class;
  }
}

TEST_F(AggregatorTest, ThroughputOnlyForFlowsOfAtLeastTheThreshold) {
  RankedAggregator agg(registry_, no_warmup());
  agg.add(good_flow(0, 2999999, 1000000));  // one byte short
  Scrape before(*registry_);
  EXPECT_TRUE(before.series("tcpscope_flow_throughput_bytes_per_second").empty());

  agg.add(good_flow(0, 3000000, 1000000));   // 3 MB/s
  FlowRecord split = good_flow(0, 1000000, 200000);
  split.bytes_received = 2000000;            // 3 MB in 200 ms: 15 MB/s
  agg.add(split);
  Scrape s(*registry_);
  const auto* h = asn0_histogram(s, "tcpscope_flow_throughput_bytes_per_second", 2u, 3e6 + 15e6);
  ASSERT_TRUE(h);
  EXPECT_EQ(bucket(*h, 2e6), 0u);
  EXPECT_EQ(bucket(*h, 5e6), 1u);
  EXPECT_EQ(bucket(*h, 1e7), 1u);
  EXPECT_EQ(bucket(*h, 2e7), 2u);
}

TEST_F(AggregatorTest, ThroughputThresholdIsConfigurable) {
  TestOptions o = no_warmup();
  o.series.throughput_min_bytes = 1000;
  RankedAggregator agg(registry_, o);
  agg.add(good_flow(0, 999, 1000));
  agg.add(good_flow(0, 1000, 1000));  // 1000 B in 1 ms: 1 MB/s
  Scrape s(*registry_);
  const auto* h = asn0_histogram(s, "tcpscope_flow_throughput_bytes_per_second", 1u, 1e6);
  ASSERT_TRUE(h);
}

TEST_F(AggregatorTest, RttHistogramsInSeconds) {
  RankedAggregator agg(registry_, no_warmup());
  FlowRecord f = good_flow(0, 1000, 50000);
  f.srtt_us = 25000;
  f.min_rtt_us = 900;
  agg.add(f);
  FlowRecord no_min = f;
  no_min.min_rtt_us = UINT32_MAX;  // the kernel's "no sample yet"
  agg.add(no_min);
  Scrape s(*registry_);
  const auto* srtt = s.histogram("tcpscope_srtt_seconds", base("0"));
  const auto* min_rtt = s.histogram("tcpscope_min_rtt_seconds", base("0"));
  ASSERT_TRUE(srtt && min_rtt);
  EXPECT_EQ(srtt->sample_count, 2u);
  EXPECT_DOUBLE_EQ(srtt->sample_sum, 0.05);
  EXPECT_EQ(bucket(*srtt, 0.02), 0u);
  EXPECT_EQ(bucket(*srtt, 0.03), 2u);
  EXPECT_EQ(min_rtt->sample_count, 1u);
  EXPECT_EQ(bucket(*min_rtt, 0.0005), 0u);
  EXPECT_EQ(bucket(*min_rtt, 0.001), 1u);
}

TEST_F(AggregatorTest, CongestionStateSecondsPerState) {
  RankedAggregator agg(registry_, no_warmup());
  FlowRecord f = good_flow(0, 1000, 50000);
  f.ca_state_us = {1500000, 0, 0, 250000, 0};
  agg.add(f);
  agg.add(f);
  Scrape s(*registry_);
  EXPECT_DOUBLE_EQ(s.counter("tcpscope_congestion_state_seconds_total", with(base("0"), "state", "open")), 3.0);
  EXPECT_DOUBLE_EQ(s.counter("tcpscope_congestion_state_seconds_total", with(base("0"), "state", "recovery")), 0.5);
  EXPECT_FALSE(s.metric("tcpscope_congestion_state_seconds_total", with(base("0"), "state", "loss")));
}

TEST_F(AggregatorTest, LabelsSeparatePeerClassAndCc) {
  RankedAggregator agg(registry_, no_warmup());
  FlowRecord a = good_flow(0, 1000, 1000);
  FlowRecord b = a;
  b.enrichment.peer_class = "origin";
  FlowRecord c = a;
  c.cc = "bbr";
  agg.add(a);
  agg.add(b);
  agg.add(b);
  agg.add(c);
  agg.add(c);
  agg.add(c);
  Scrape s(*registry_);
  EXPECT_EQ(s.counter("tcpscope_bytes_acked_total", base("0", "client", "cubic")), 1000);
  EXPECT_EQ(s.counter("tcpscope_bytes_acked_total", base("0", "origin", "cubic")), 2000);
  EXPECT_EQ(s.counter("tcpscope_bytes_acked_total", base("0", "client", "bbr")), 3000);
  EXPECT_EQ(agg.label_sets(), 3u);
}

TEST_F(AggregatorTest, TopAsnsKeepTheirNumberOthersFoldAndUnknownIsZero) {
  TestOptions o = no_warmup();
  o.ranking.top_n = 2;
  RankedAggregator agg(registry_, o);
  // While the top-N has room an ASN joins it at once; once full, newcomers
  // are "other" until a ranking lets them in.
  agg.add(good_flow(100, 900000, 1000));
  agg.add(good_flow(200, 500000, 1000));
  agg.add(good_flow(300, 100000, 1000));
  agg.add(good_flow(0, 7, 1000));
  EXPECT_EQ(agg.asn_label(100), "100");
  EXPECT_EQ(agg.asn_label(300), "other");
  agg.recompute_top_asns();
  EXPECT_EQ(agg.top_asns(), (std::vector<uint32_t>{100, 200}));
  // 999: never seen.
  for (const auto& [asn, label] : std::map<uint32_t, std::string>{
           {100, "100"}, {200, "200"}, {300, "other"}, {0, "0"}, {999, "other"}})
    EXPECT_EQ(agg.asn_label(asn), label) << asn;

  agg.add(good_flow(100, 10, 1000));
  agg.add(good_flow(300, 20, 1000));
  agg.add(good_flow(999, 40, 1000));
  agg.add(good_flow(0, 80, 1000));

  Scrape s(*registry_);
  // Counters never move between labels.
  EXPECT_EQ(s.counter("tcpscope_bytes_acked_total", base("other")), 100000 + 20 + 40);
  EXPECT_EQ(s.counter("tcpscope_bytes_acked_total", base("100")), 900000 + 10);
  EXPECT_EQ(s.counter("tcpscope_bytes_acked_total", base("200")), 500000);
  EXPECT_EQ(s.counter("tcpscope_bytes_acked_total", base("0")), 7 + 80);
  EXPECT_FALSE(s.metric("tcpscope_bytes_acked_total", base("300")));
  for (const auto& l : s.series("tcpscope_flows_total")) {
    const std::string& asn = l.at("asn");
    EXPECT_TRUE(asn == "other" || asn == "0" || asn == "100" || asn == "200") << asn;
  }
}

TEST_F(AggregatorTest, SeriesOfAsnsThatLeftTheTopAreRemovedAfterTheGracePeriod) {
  RankedAggregator agg(registry_, top_one_keeping_stale_series_for(0));
  top_asn_overtaken(&agg);
  Scrape s(*registry_);
  for (const char* name : {"tcpscope_bytes_acked_total", "tcpscope_srtt_seconds"})
    EXPECT_FALSE(s.metric(name, base("100"))) << name;
  EXPECT_FALSE(s.metric("tcpscope_flows_total", with(with(base("100"), "dir", "passive"), "outcome", "ok")));
  EXPECT_FALSE(s.metric("tcpscope_flow_completion_seconds", with(base("100"), "size_class", "lt_100k")));
  // "other" is never removed.
  EXPECT_TRUE(s.metric("tcpscope_bytes_acked_total", base("other")));
}

TEST_F(AggregatorTest, SeriesSurviveWithinTheGracePeriod) {
  RankedAggregator agg(registry_, top_one_keeping_stale_series_for(3600));
  top_asn_overtaken(&agg);
  EXPECT_EQ(Scrape(*registry_).counter("tcpscope_bytes_acked_total", base("100")), 2000);
}

TEST_F(AggregatorTest, ActiveFlowGaugesFollowTheSnapshot) {
  RankedAggregator agg(registry_, no_warmup());
  agg.set_active_flows({{{"client", "cubic"}, 5}, {{"origin", "bbr"}, 2}});
  Scrape s1(*registry_);
  EXPECT_EQ(s1.gauge("tcpscope_active_flows", {{"peer_class", "client"}, {"cc", "cubic"}}), 5);
  EXPECT_EQ(s1.gauge("tcpscope_active_flows", {{"peer_class", "origin"}, {"cc", "bbr"}}), 2);
  agg.set_active_flows({{{"client", "cubic"}, 7}});
  Scrape s2(*registry_);
  EXPECT_EQ(s2.gauge("tcpscope_active_flows", {{"peer_class", "client"}, {"cc", "cubic"}}), 7);
  EXPECT_EQ(s2.gauge("tcpscope_active_flows", {{"peer_class", "origin"}, {"cc", "bbr"}}), 0);
}

TEST_F(AggregatorTest, ReloadWithNewSizeClassesKeepsOldSeries) {
  RankedAggregator agg(registry_, no_warmup());
  agg.add(good_flow(0, 50000, 1000));
  TestOptions o = no_warmup();
  o.series.size_classes_bytes = {10000};
  agg.update_options(o);
  agg.add(good_flow(0, 50000, 1000));
  agg.add(good_flow(0, 5000, 1000));
  Scrape s(*registry_);
  EXPECT_EQ(s.histogram("tcpscope_flow_completion_seconds", with(base("0"), "size_class", "lt_100k"))->sample_count, 1u);
  EXPECT_EQ(s.histogram("tcpscope_flow_completion_seconds", with(base("0"), "size_class", "ge_10k"))->sample_count, 1u);
  EXPECT_EQ(s.histogram("tcpscope_flow_completion_seconds", with(base("0"), "size_class", "lt_10k"))->sample_count, 1u);
  EXPECT_EQ(s.counter("tcpscope_bytes_acked_total", base("0")), 105000);
}

TEST_F(AggregatorTest, TransfersAreCountedByDirection) {
  RankedAggregator agg(registry_, no_warmup());
  for (int i = 0; i < 3; ++i) agg.add(transfer(0, TransferDirection::kSend, 1000, 2000));
  agg.add(transfer(0, TransferDirection::kRecv, 1000, 2000));
  Scrape s(*registry_);
  EXPECT_EQ(s.counter("tcpscope_transfers_total", with(base("0"), "direction", "send")), 3);
  EXPECT_EQ(s.counter("tcpscope_transfers_total", with(base("0"), "direction", "recv")), 1);
  // Transfers are not flows.
  EXPECT_TRUE(s.series("tcpscope_flows_total").empty());
  EXPECT_EQ(s.counter("tcpscope_bytes_acked_total", base("0")), 0);
  EXPECT_TRUE(s.series("tcpscope_flow_completion_seconds").empty());
}

TEST_F(AggregatorTest, TransferTimeBySizeClassOfTheTransfersBytes) {
  RankedAggregator agg(registry_, no_warmup());
  agg.add(transfer(0, TransferDirection::kSend, 99999, 1500));     // lt_100k
  agg.add(transfer(0, TransferDirection::kRecv, 100000, 2500));    // 100k_1m, recv
  agg.add(transfer(0, TransferDirection::kSend, 2999999, 40000));  // 1m_3m
  agg.add(transfer(0, TransferDirection::kSend, 3000000, 90000000));
  agg.add(transfer(0, TransferDirection::kSend, 3000000, -5));     // clock step: no negative time
  Scrape s(*registry_);
  const auto h = [&](const char* sc, const char* direction = "send") {
    return s.histogram("tcpscope_transfer_seconds", with(with(base("0"), "size_class", sc), "direction", direction));
  };
  ASSERT_TRUE(h("lt_100k") && h("100k_1m", "recv") && h("1m_3m") && h("ge_3m"));
  // Each direction has its own histograms: a server's requests do not mix
  // with its responses.
  EXPECT_FALSE(h("100k_1m", "send"));
  EXPECT_FALSE(h("lt_100k", "recv"));
  EXPECT_EQ(h("lt_100k")->sample_count, 1u);
  EXPECT_DOUBLE_EQ(h("lt_100k")->sample_sum, 0.0015);
  EXPECT_EQ(h("100k_1m", "recv")->sample_count, 1u);
  EXPECT_EQ(h("1m_3m")->sample_count, 1u);
  EXPECT_EQ(h("ge_3m")->sample_count, 2u);
  EXPECT_DOUBLE_EQ(h("ge_3m")->sample_sum, 90);
  EXPECT_EQ(h("ge_3m")->bucket.size(), fct_buckets_seconds().size() + 1);  // the FCT buckets
  EXPECT_EQ(bucket(*h("lt_100k"), 0.002), 1u);
}

TEST_F(AggregatorTest, TransferThroughputOnlyForLargeSendTransfersTheReceiverDidNotLimit) {
  RankedAggregator agg(registry_, no_warmup());
  const uint64_t big = 3000000;  // throughput_min_bytes
  agg.add(transfer(0, TransferDirection::kSend, big, 1000000));       // 3 MB/s: counted
  agg.add(transfer(0, TransferDirection::kRecv, 2 * big, 1000000));   // received: the sender's pace
  agg.add(transfer(0, TransferDirection::kSend, big - 1, 1000000));   // one byte short
  TransferRecord limited = transfer(0, TransferDirection::kSend, big, 1000000);
  limited.rwnd_limited_us = 500001;                                    // most of its time
  agg.add(limited);
  agg.add(limited);
  TransferRecord small_limited = limited;
  small_limited.bytes = big - 1;                                       // too small to be considered at all
  agg.add(small_limited);
  TransferRecord half = transfer(0, TransferDirection::kSend, 2 * big, 1000000);
  half.rwnd_limited_us = 500000;                                       // exactly half: not most
  agg.add(half);

  Scrape s(*registry_);
  const auto* h = asn0_histogram(s, "tcpscope_transfer_throughput_bytes_per_second", 2u, 3e6 + 6e6);
  ASSERT_TRUE(h);
  EXPECT_EQ(h->bucket.size(), throughput_buckets_bytes_per_second().size() + 1);  // the flow throughput's buckets
  EXPECT_EQ(bucket(*h, 5e6), 1u);
  EXPECT_EQ(s.counter("tcpscope_transfer_throughput_excluded_total", with(base("0"), "reason", "rwnd_limited")), 2);
  EXPECT_EQ(s.series("tcpscope_transfer_throughput_excluded_total").size(), 1u);
}

TEST_F(AggregatorTest, TransfersAreLabelledByTheRankingButDoNotRankTheirAsn) {
  TestOptions o = no_warmup();
  o.ranking.top_n = 1;
  RankedAggregator agg(registry_, o);
  agg.add(good_flow(100, 1000, 1000));  // 100 joins the top-N
  for (int i = 0; i < 5; ++i) agg.add(transfer(200, TransferDirection::kSend, 1000000000, 1000000));
  agg.recompute_top_asns();
  EXPECT_EQ(agg.top_asns(), std::vector<uint32_t>{100}) << "a transfer's bytes are its flow's, counted once";
  agg.add(transfer(100, TransferDirection::kSend, 1000, 1000));
  agg.add(transfer(0, TransferDirection::kSend, 1000, 1000));
  Scrape s(*registry_);
  EXPECT_EQ(s.counter("tcpscope_transfers_total", with(base("other"), "direction", "send")), 5);
  EXPECT_EQ(s.counter("tcpscope_transfers_total", with(base("100"), "direction", "send")), 1);
  EXPECT_EQ(s.counter("tcpscope_transfers_total", with(base("0"), "direction", "send")), 1);
}

TEST_F(AggregatorTest, TransferSeriesGoWithTheirAsnWhenItLeavesTheTop) {
  TestOptions o = no_warmup();
  o.ranking.top_n = 1;
  o.series.stale_asn_seconds = 0;
  RankedAggregator agg(registry_, o);
  agg.add(good_flow(100, 1000, 1000));
  TransferRecord limited = transfer(100, TransferDirection::kSend, 5000000, 1000000);
  limited.rwnd_limited_us = 900000;
  for (const auto& t : {transfer(100, TransferDirection::kSend, 5000000, 1000000),
                        transfer(100, TransferDirection::kRecv, 1000, 1000), limited})
    agg.add(t);
  {
    Scrape s(*registry_);
    EXPECT_TRUE(s.metric("tcpscope_transfer_throughput_bytes_per_second", base("100")));
    EXPECT_TRUE(s.metric("tcpscope_transfer_seconds",
                         with(with(base("100"), "size_class", "ge_3m"), "direction", "send")));
  }
  agg.add(good_flow(200, 1000000, 1000));  // 200 overtakes 100
  agg.recompute_top_asns();
  Scrape s(*registry_);
  for (const char* name : {"tcpscope_transfers_total", "tcpscope_transfer_seconds",
                           "tcpscope_transfer_throughput_bytes_per_second",
                           "tcpscope_transfer_throughput_excluded_total"})
    for (const auto& labels : s.series(name)) EXPECT_NE(labels.at("asn"), "100") << name;
}

TEST_F(AggregatorTest, ReplacedSizeClassTransferHistogramsAreRemovedAfterTheGracePeriod) {
  TestOptions o = no_warmup();
  o.series.stale_asn_seconds = 0;
  RankedAggregator agg(registry_, o);
  agg.add(transfer(0, TransferDirection::kSend, 5000000, 1000));  // ge_3m
  o.series.size_classes_bytes = {100000, 1000000};
  agg.update_options(o);
  agg.add(transfer(0, TransferDirection::kSend, 5000000, 1000));  // ge_1m
  const auto sent = [](const char* sc) { return with(with(base("0"), "size_class", sc), "direction", "send"); };
  EXPECT_TRUE(Scrape(*registry_).histogram("tcpscope_transfer_seconds", sent("ge_3m")));
  agg.recompute_top_asns();
  Scrape s(*registry_);
  EXPECT_FALSE(s.histogram("tcpscope_transfer_seconds", sent("ge_3m")));
  ASSERT_TRUE(s.histogram("tcpscope_transfer_seconds", sent("ge_1m")));
  EXPECT_EQ(s.histogram("tcpscope_transfer_seconds", sent("ge_1m"))->sample_count, 1u);
}

TEST_F(AggregatorTest, MetricTypesAreAsSpecified) {
  RankedAggregator agg(registry_, no_warmup());
  FlowRecord f = good_flow(0, 5000000, 1000000);
  f.ca_state_us[0] = 1;
  agg.add(f);
  agg.add(transfer(0, TransferDirection::kSend, 5000000, 1000000));
  TransferRecord limited = transfer(0, TransferDirection::kSend, 5000000, 1000000);
  limited.rwnd_limited_us = 1000000;
  agg.add(limited);
  agg.set_active_flows({{{"client", "cubic"}, 1}});
  Scrape s(*registry_);
  using T = prometheus::MetricType;
  const std::map<std::string, T> expected{
      {"tcpscope_flows_total", T::Counter},
      {"tcpscope_bytes_acked_total", T::Counter},
      {"tcpscope_bytes_received_total", T::Counter},
      {"tcpscope_segments_out_total", T::Counter},
      {"tcpscope_retransmitted_segments_total", T::Counter},
      {"tcpscope_congestion_state_seconds_total", T::Counter},
      {"tcpscope_flow_completion_seconds", T::Histogram},
      {"tcpscope_flow_throughput_bytes_per_second", T::Histogram},
      {"tcpscope_srtt_seconds", T::Histogram},
      {"tcpscope_min_rtt_seconds", T::Histogram},
      {"tcpscope_active_flows", T::Gauge},
      {"tcpscope_transfers_total", T::Counter},
      {"tcpscope_transfer_seconds", T::Histogram},
      {"tcpscope_transfer_throughput_bytes_per_second", T::Histogram},
      {"tcpscope_transfer_throughput_excluded_total", T::Counter},
  };
  for (const auto& [name, type] : expected) {
    const auto* fam = s.family(name);
    ASSERT_TRUE(fam) << name;
    EXPECT_EQ(fam->type, type) << name;
    EXPECT_FALSE(fam->metric.empty()) << name;
  }
}

// The ring reader adds while HTTP threads render; run under TSan/ASan to
// catch races. Totals must come out exact.
TEST_F(AggregatorTest, ScrapesWhileAddingSeeConsistentTotals) {
  TestOptions o;
  o.ranking.top_n = 5;
  o.ranking.warmup_recompute_flows = 500;
  o.series.stale_asn_seconds = 0;  // also exercise series removal under scrapes
  RankedAggregator agg(registry_, o);
  std::atomic<bool> done{false};
  std::vector<std::thread> scrapers;
  for (int t = 0; t < 2; ++t)
    scrapers.emplace_back([&] {
      while (!done) {
        prometheus::TextSerializer().Serialize(registry_->Collect());
        agg.set_active_flows({{{"client", "cubic"}, 1}});
      }
    });
  const int kFlows = 20000;
  for (int i = 0; i < kFlows; ++i) {
    FlowRecord f = good_flow(i % 3 == 0 ? 0 : 64500 + static_cast<uint32_t>(i % 40), 1000, 2000);
    f.cc = i % 2 ? "bbr" : "cubic";
    agg.add(f);
    if (i % 5000 == 0) agg.recompute_top_asns();
  }
  done = true;
  for (auto& t : scrapers) t.join();
  // Every flow is counted exactly once in some label set; removed series only
  // ever belong to ASNs that left the top, so count what is left plus nothing
  // lost for "0" (never removed).
  Scrape s(*registry_);
  double zero = 0;
  for (const char* cc : {"cubic", "bbr"})
    if (s.metric("tcpscope_flows_total", with(with(base("0", "client", cc), "dir", "passive"), "outcome", "ok")))
      zero += s.counter("tcpscope_flows_total", with(with(base("0", "client", cc), "dir", "passive"), "outcome", "ok"));
  EXPECT_EQ(zero, (kFlows + 2) / 3);
}

// Every flow shape that creates a series for (asn, class, cc): each dir x
// outcome, an ok flow in each size class (the largest above the throughput
// threshold), every congestion state, both RTTs.
std::vector<FlowRecord> flows_filling_every_series(uint32_t asn, const std::string& cls, const std::string& cc,
                                                   uint64_t bytes_scale = 1) {
  std::vector<FlowRecord> out;
  for (auto dir : {Direction::kActive, Direction::kPassive})
    for (auto outcome : {Outcome::kOk, Outcome::kReset, Outcome::kRefused, Outcome::kTimeout, Outcome::kError}) {
      FlowRecord f = good_flow(asn, 1000 * bytes_scale, 2000);
      f.enrichment.peer_class = cls;
      f.cc = cc;
      f.dir = dir;
      f.outcome = outcome;
      f.retrans_segs = 1;
      f.bytes_received = 10;
      for (auto& us : f.ca_state_us) us = 100;
      out.push_back(f);
    }
  for (uint64_t bytes : {50000, 500000, 2000000, 5000000}) {
    FlowRecord f = good_flow(asn, bytes, 100000);
    f.enrichment.peer_class = cls;
    f.cc = cc;
    out.push_back(f);
  }
  return out;
}

// Every transfer shape that creates a series for (asn, class, cc): both
// directions, each size class, a large send counted for throughput and one
// left out because the receiver's window limited it.
std::vector<TransferRecord> transfers_filling_every_series(uint32_t asn, const std::string& cls,
                                                           const std::string& cc) {
  std::vector<TransferRecord> out;
  for (auto direction : {TransferDirection::kSend, TransferDirection::kRecv})
    for (uint64_t bytes : {50000, 500000, 2000000, 5000000}) out.push_back(transfer(asn, direction, bytes, 100000));
  TransferRecord limited = transfer(asn, TransferDirection::kSend, 5000000, 100000);
  limited.rwnd_limited_us = 100000;
  out.push_back(limited);
  for (auto& t : out) {
    t.enrichment.peer_class = cls;
    t.cc = cc;
  }
  return out;
}

// Samples as Prometheus counts them: every non-comment line of the exposition.
size_t exposition_samples(const prometheus::Registry& r) {
  const std::string text = prometheus::TextSerializer().Serialize(r.Collect());
  size_t n = 0, start = 0;
  while (start < text.size()) {
    size_t end = text.find('\n', start);
    if (end == std::string::npos) end = text.size();
    if (end > start && text[start] != '#') ++n;
    start = end + 1;
  }
  return n;
}

// The label values of `name` present in the exposition.
std::set<std::string> label_values(const prometheus::Registry& r, const std::string& name) {
  std::set<std::string> out;
  for (const auto& f : r.Collect())
    for (const auto& m : f.metric)
      for (const auto& l : m.label)
        if (l.name == name) out.insert(l.value);
  return out;
}

std::set<std::string> asn_labels(const prometheus::Registry& r) { return label_values(r, "asn"); }

std::shared_ptr<const ServiceIdentity> owner(const std::string& name) {
  return std::make_shared<ServiceIdentity>(name);
}

TEST_F(AggregatorTest, SeriesCountMatchesTheBudget) {
  // The per-label-set count of docs/metrics.md and aggregator.h, by hand: 4
  // counters, 10 flows_total, 5 states, S x 27 FCT, 22 throughput, 2 x 27 RTT,
  // 2 transfers_total, 2 directions x S x 27 transfer time, 22 transfer
  // throughput, 1 transfer throughput excluded.
  const uint64_t S = 4,
                 P = 4 + 10 + 5 + S * (24 + 3) + (19 + 3) + 2 * (24 + 3) + 2 + 2 * S * (24 + 3) + (19 + 3) + 1;
  ASSERT_EQ(P, 444u);
  const std::vector<std::string> classes{"client", "origin"}, ccs{"cubic", "bbr"};
  const uint64_t C = classes.size(), K = ccs.size();

  TestOptions o = no_warmup();
  o.ranking.top_n = 5;
  o.series.max_stale_asns = 5;
  o.series.stale_asn_seconds = 3600;
  o.services.top_n = 1;
  o.services.bytes_half_life_s = 1e-9;  // each ranking goes by the bytes since the last one
  o.series.max_stale_services = 1;
  const uint64_t N = o.ranking.top_n;
  RankedAggregator agg(registry_, o);
  // x and y take turns in the services' top-1, z stays "other", and nullptr
  // is the unknown service "".
  const auto x = owner("x.service"), y = owner("y.service"), z = owner("z.service");
  using Owners = std::vector<std::shared_ptr<const ServiceIdentity>>;
  auto feed = [&](uint32_t asn, uint64_t scale, const Owners& owners) {
    for (const auto& service : owners)
      for (const auto& cls : classes)
        for (const auto& cc : ccs) {
          for (auto f : flows_filling_every_series(asn, cls, cc, scale)) {
            f.enrichment.service = service;
            agg.add(f);
          }
          for (auto t : transfers_filling_every_series(asn, cls, cc)) {
            t.enrichment.service = service;
            agg.add(t);
          }
        }
  };
  // A service's bytes, on ASN 0 (which the ASN ranking does not rank), so
  // that the next ranking puts it first.
  auto outweigh = [&](const std::shared_ptr<const ServiceIdentity>& service) {
    FlowRecord f = good_flow(0, 1000000000000, 1000);
    f.enrichment.service = service;
    agg.add(f);
    agg.recompute_top_services();
  };
  std::map<std::pair<std::string, std::string>, int64_t> active;
  for (const auto& cls : classes)
    for (const auto& cc : ccs) active[{cls, cc}] = 1;
  agg.set_active_flows(active);

  // N + k ASNs and unknown ones: the first N join the top-N at once, the k
  // others fold into "other". A = N + 2 asn values; x joins the services'
  // top at once, z is "other": 3 service values.
  const uint32_t k = 3;
  const Owners first{x, z, nullptr};
  for (uint32_t a = 1; a <= N + k; ++a) feed(1000 + a, 1, first);
  feed(0, 1, first);
  EXPECT_EQ(agg.top_asns().size(), N);
  EXPECT_EQ(asn_labels(*registry_).size(), N + 2);
  EXPECT_EQ(label_values(*registry_, "service"), (std::set<std::string>{"x.service", "other", ""}));
  EXPECT_EQ(exposition_samples(*registry_), C * (N + 2) * 3 * K * P + C * K);

  // y takes x's place; x's series stay, frozen: the old ASNs now have every
  // service value.
  outweigh(y);
  const Owners second{y, z, nullptr};
  for (uint32_t a = 1; a <= N + k; ++a) feed(1000 + a, 1, second);
  feed(0, 1, second);
  EXPECT_EQ(label_values(*registry_, "service"), (std::set<std::string>{"x.service", "y.service", "other", ""}));

  // N new, heavier ASNs take over the top-N; the old ones stay, frozen, for
  // the grace period: A = 2N + 2. Then x takes the services' top back, so
  // the new ASNs see both x and y as well: every (asn, service) pair, the
  // budget.
  for (uint32_t a = 1; a <= N; ++a) feed(2000 + a, 10000, second);
  agg.recompute_top_asns();
  for (uint32_t a = 1; a <= N; ++a) feed(2000 + a, 10000, second);
  outweigh(x);
  for (uint32_t a = 1; a <= N; ++a) feed(2000 + a, 10000, first);
  EXPECT_EQ(asn_labels(*registry_).size(), 2 * N + 2);
  EXPECT_EQ(label_values(*registry_, "service").size(), 4u);
  EXPECT_EQ(exposition_samples(*registry_), C * (2 * N + 2) * 4 * K * P + C * K);
  EXPECT_EQ(exposition_samples(*registry_), series_budget(o.series, o.ranking.top_n, o.services.top_n, C, K));

  // Churn again: 2N stale candidates, only the N that left the top last stay.
  for (uint32_t a = 1; a <= N; ++a) feed(3000 + a, 1000000, first);
  agg.recompute_top_asns();
  for (uint32_t a = 1; a <= N; ++a) feed(3000 + a, 1000000, first);
  const auto labels = asn_labels(*registry_);
  EXPECT_EQ(labels.size(), 2 * N + 2);
  for (uint32_t a = 1; a <= N + k; ++a) EXPECT_FALSE(labels.count(std::to_string(1000 + a))) << a;
  for (uint32_t a = 1; a <= N; ++a) EXPECT_TRUE(labels.count(std::to_string(2000 + a))) << a;
  EXPECT_LE(exposition_samples(*registry_), series_budget(o.series, o.ranking.top_n, o.services.top_n, C, K));

  // A third service out-ranks x: y, out of the top longest, goes over
  // max_stale_services.
  outweigh(z);
  feed(0, 1, {z});
  EXPECT_EQ(label_values(*registry_, "service"), (std::set<std::string>{"x.service", "z.service", "other", ""}));
}

TEST_F(AggregatorTest, TopServicesKeepTheirNameOthersFoldAndUnknownIsEmpty) {
  TestOptions o = no_warmup();
  o.services.top_n = 1;
  RankedAggregator agg(registry_, o);
  FlowRecord nginx = good_flow(0, 900000, 1000), cron = good_flow(0, 1000, 1000), unknown = good_flow(0, 70, 1000);
  nginx.enrichment.service = owner("nginx.service");
  cron.enrichment.service = owner("cron.service");
  agg.add(nginx);
  agg.add(cron);
  agg.add(unknown);
  TransferRecord t = transfer(0, TransferDirection::kSend, 50000, 1000);
  t.enrichment.service = owner("nginx.service");  // another object of the same service
  agg.add(t);
  Scrape s(*registry_);
  EXPECT_EQ(s.counter("tcpscope_bytes_acked_total", base("0", "client", "cubic", "nginx.service")), 900000);
  EXPECT_EQ(s.counter("tcpscope_bytes_acked_total", base("0", "client", "cubic", "other")), 1000);
  EXPECT_EQ(s.counter("tcpscope_bytes_acked_total", base("0", "client", "cubic", "")), 70);
  EXPECT_EQ(s.counter("tcpscope_transfers_total", with(base("0", "client", "cubic", "nginx.service"), "direction",
                                                       "send")),
            1);
  EXPECT_EQ(agg.label_sets(), 3u);
}

TEST_F(AggregatorTest, AServiceWithoutRecordsForTheGracePeriodLosesItsSeries) {
  TestOptions o = no_warmup();
  o.services.forget_after_s = 1e-9;  // gone at the first ranking that saw no record of it
  RankedAggregator agg(registry_, o);
  FlowRecord nginx = good_flow(0, 5000, 1000), unknown = good_flow(0, 70, 1000);
  nginx.enrichment.service = owner("nginx.service");
  agg.add(nginx);
  agg.add(unknown);
  agg.recompute_top_services();  // saw nginx since the last ranking: kept
  EXPECT_TRUE(label_values(*registry_, "service").count("nginx.service"));
  agg.add(unknown);
  agg.recompute_top_services();  // no record of nginx since: forgotten, its series go at once
  EXPECT_EQ(label_values(*registry_, "service"), (std::set<std::string>{""}));
  EXPECT_FALSE(agg.services.tracked(service_key("nginx.service")));
  agg.add(nginx);  // back: a new series from zero
  EXPECT_EQ(Scrape(*registry_).counter("tcpscope_bytes_acked_total", base("0", "client", "cubic", "nginx.service")),
            5000);
}

TEST_F(AggregatorTest, DefaultSeriesBudgetIsTheDocumentedFigure) {
  // docs/metrics.md "Series budget": the shipped default (one peer class, top_n 50,
  // four size classes), for one and for two congestion controls in use.
  Config defaults;
  const AggregatorOptions o = AggregatorOptions::from_config(defaults);
  const uint32_t top_n = AsnRankingOptions::from_config(defaults).top_n;
  const uint32_t service_top_n = ServiceRanking::options_from_config(defaults).top_n;
  EXPECT_EQ(o.max_stale_asns, 50u);
  EXPECT_EQ(service_top_n, 20u);
  EXPECT_EQ(o.max_stale_services, 20u);
  // 102 asn values x 42 service values x 444 series, + 1 active_flows.
  EXPECT_EQ(series_budget(o, top_n, service_top_n, 1, 1), 1902097u);
  EXPECT_EQ(series_budget(o, top_n, service_top_n, 1, 2), 3804194u);
}

TEST_F(AggregatorTest, ReplacedSizeClassHistogramsGoWithAStaleAsn) {
  TestOptions o = no_warmup();
  o.ranking.top_n = 1;
  o.series.stale_asn_seconds = 0;
  RankedAggregator agg(registry_, o);
  agg.add(good_flow(100, 50000, 1000));  // 100 joins the top-N; lt_100k
  o.series.size_classes_bytes = {10000};
  agg.update_options(o);
  agg.add(good_flow(100, 50000, 1000));  // ge_10k
  {
    Scrape s(*registry_);  // the old class is still there until a ranking
    EXPECT_TRUE(s.histogram("tcpscope_flow_completion_seconds", with(base("100"), "size_class", "lt_100k")));
    EXPECT_TRUE(s.histogram("tcpscope_flow_completion_seconds", with(base("100"), "size_class", "ge_10k")));
  }
  agg.add(good_flow(200, 10000000, 1000));  // 200 overtakes 100
  agg.recompute_top_asns();
  EXPECT_EQ(agg.asn_label(100), "other");
  EXPECT_FALSE(asn_labels(*registry_).count("100"));
  for (const auto& f : registry_->Collect())
    for (const auto& m : f.metric)
      for (const auto& l : m.label) EXPECT_FALSE(l.name == "asn" && l.value == "100") << f.name;
}

TEST_F(AggregatorTest, ReplacedSizeClassHistogramsAreRemovedAfterTheGracePeriod) {
  TestOptions o = no_warmup();
  o.series.stale_asn_seconds = 0;
  RankedAggregator agg(registry_, o);
  agg.add(good_flow(0, 50000, 1000));       // lt_100k
  agg.add(good_flow(0, 5000000, 1000));     // ge_3m
  o.series.size_classes_bytes = {100000, 1000000};  // lt_100k and 100k_1m stay, ge_1m is new
  agg.update_options(o);
  agg.add(good_flow(0, 50000, 1000));
  agg.add(good_flow(0, 5000000, 1000));
  agg.recompute_top_asns();
  Scrape s(*registry_);
  const auto fct = [&](const char* sc) {
    return s.histogram("tcpscope_flow_completion_seconds", with(base("0"), "size_class", sc));
  };
  ASSERT_TRUE(fct("lt_100k"));
  EXPECT_EQ(fct("lt_100k")->sample_count, 2u);  // kept across the reload
  ASSERT_TRUE(fct("ge_1m"));
  EXPECT_EQ(fct("ge_1m")->sample_count, 1u);
  EXPECT_FALSE(fct("ge_3m"));                    // replaced, grace period over
  EXPECT_EQ(s.series("tcpscope_flow_completion_seconds").size(), 2u);
}

TEST_F(AggregatorTest, SizeClassesRestoredWithinTheGracePeriodGetTheirHistogramBack) {
  TestOptions o = no_warmup();
  o.series.stale_asn_seconds = 3600;
  RankedAggregator agg(registry_, o);
  const TestOptions original = o;
  agg.add(good_flow(0, 5000000, 1000));  // ge_3m
  o.series.size_classes_bytes = {10000};
  agg.update_options(o);
  agg.update_options(original);          // back before the grace period ends
  agg.add(good_flow(0, 5000000, 1000));
  agg.recompute_top_asns();
  TestOptions expire = original;
  expire.series.stale_asn_seconds = 0;
  agg.update_options(expire);
  agg.recompute_top_asns();              // nothing retired may take the live histogram with it
  agg.add(good_flow(0, 5000000, 1000));
  Scrape s(*registry_);
  const auto* h = s.histogram("tcpscope_flow_completion_seconds", with(base("0"), "size_class", "ge_3m"));
  ASSERT_TRUE(h);
  EXPECT_EQ(h->sample_count, 3u);
}

// The exposition as name{labels} -> value, for comparing two registries.
std::map<std::string, double> exposition_values(const prometheus::Registry& r) {
  std::map<std::string, double> out;
  std::istringstream in(prometheus::TextSerializer().Serialize(r.Collect()));
  std::string line;
  while (std::getline(in, line)) {
    if (line.empty() || line[0] == '#') continue;
    const size_t sp = line.rfind(' ');
    out[line.substr(0, sp)] = std::stod(line.substr(sp + 1));
  }
  return out;
}

// Flows of several label sets with values on and between bucket bounds.
std::vector<FlowRecord> mixed_flows(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  const int64_t fcts[] = {100, 1000, 1001, 2999, 50000, 60000000, 90000000};
  const uint32_t rtts[] = {50, 51, 1000, 75000, 10000000, 20000000};
  std::vector<FlowRecord> out;
  for (size_t i = 0; i < n; ++i) {
    FlowRecord f = good_flow(rng() % 4 ? 64500 + rng() % 12 : 0, rng() % 2 ? 1000 : 4000000, fcts[rng() % 7]);
    f.enrichment.peer_class = rng() % 3 ? "client" : "origin";
    f.cc = rng() % 2 ? "bbr" : "cubic";
    f.dir = rng() % 2 ? Direction::kActive : Direction::kPassive;
    f.outcome = rng() % 5 ? Outcome::kOk : Outcome::kReset;
    f.bytes_received = rng() % 3000;
    f.srtt_us = rtts[rng() % 6];
    f.min_rtt_us = rng() % 6 ? rtts[rng() % 6] : UINT32_MAX;
    f.retrans_segs = rng() % 3;
    f.ca_state_us[rng() % f.ca_state_us.size()] = rng() % 100000;
    out.push_back(f);
  }
  return out;
}

// A transfer for each flow of mixed_flows: both directions, every size
// class, some left out of the throughput histogram by the receiver's window.
std::vector<TransferRecord> mixed_transfers(const std::vector<FlowRecord>& flows, uint32_t seed) {
  std::mt19937 rng(seed);
  const uint64_t sizes[] = {1000, 200000, 2000000, 4000000};
  std::vector<TransferRecord> out;
  for (const auto& f : flows) {
    TransferRecord t = transfer(f.enrichment.asn, rng() % 3 ? TransferDirection::kSend : TransferDirection::kRecv,
                                sizes[rng() % 4], static_cast<int64_t>(rng() % 2000000));
    t.enrichment.peer_class = f.enrichment.peer_class;
    t.cc = f.cc;
    t.rwnd_limited_us = rng() % 4 ? 0 : static_cast<uint32_t>(t.xfer_us);
    out.push_back(t);
  }
  return out;
}

// The daemon adds a drain's records in a batch and publishes once; the
// metrics must come out as if each flow had been added on its own, across a
// ranking that removes series and a reload that replaces size classes.
// A batch publishes a histogram's few observations one by one and many as
// bucket counts: batches of 5 and 1,000 flows take both ways.
void expect_batched_equals_single(size_t batch) {
  TestOptions o;
  o.ranking.top_n = 4;
  o.ranking.warmup_recompute_flows = 300;
  o.series.stale_asn_seconds = 0;
  TestOptions reloaded = o;
  reloaded.series.size_classes_bytes = {10000, 3000000};
  auto single_registry = std::make_shared<prometheus::Registry>();
  auto batched_registry = std::make_shared<prometheus::Registry>();
  RankedAggregator single(single_registry, o), batched(batched_registry, o);
  const auto flows = mixed_flows(5000, 7);
  const auto transfers = mixed_transfers(flows, 8);
  for (size_t i = 0; i < flows.size(); i += batch) {
    batched.begin_batch();
    for (size_t j = i; j < std::min(flows.size(), i + batch); ++j) {
      EXPECT_EQ(single.add(flows[j]), batched.add(flows[j])) << "flow " << j;
      single.add(transfers[j]);
      batched.add(transfers[j]);
      if (j == 1200 || j == 3300) {
        single.recompute_top_asns();
        batched.recompute_top_asns();
      }
      if (j == 2500) {
        single.update_options(reloaded);
        batched.update_options(reloaded);
      }
    }
    batched.end_batch();
  }
  const auto want = exposition_values(*single_registry);
  const auto got = exposition_values(*batched_registry);
  ASSERT_EQ(want.size(), got.size());
  size_t nonzero = 0;
  for (const auto& [series, value] : want) {
    auto it = got.find(series);
    ASSERT_NE(it, got.end()) << series;
    // Sums of seconds add in another order: equal to rounding.
    EXPECT_NEAR(it->second, value, 1e-9 * std::max(1.0, std::fabs(value))) << series;
    nonzero += value != 0;
  }
  EXPECT_GT(nonzero, 500u);
}

// The daemon adds a drain's records in a batch and publishes once; the
// metrics must come out as if each flow had been added on its own, across a
// ranking that removes series and a reload that replaces size classes.
TEST_F(AggregatorTest, BatchedFlowsPublishWhatSingleFlowsWould) {
  expect_batched_equals_single(5);
  expect_batched_equals_single(1000);
}

TEST_F(AggregatorTest, ABatchPublishesWhenItEnds) {
  RankedAggregator agg(registry_, no_warmup());
  agg.begin_batch();
  for (int i = 0; i < 10; ++i) agg.add(good_flow(0, 1000, 2000));
  const auto flows = with(with(base("0"), "dir", "passive"), "outcome", "ok");
  EXPECT_EQ(Scrape(*registry_).counter("tcpscope_flows_total", flows), 0);
  agg.end_batch();
  Scrape s(*registry_);
  EXPECT_EQ(s.counter("tcpscope_flows_total", flows), 10);
  EXPECT_EQ(s.counter("tcpscope_bytes_acked_total", base("0")), 10000);
  EXPECT_EQ(s.histogram("tcpscope_flow_completion_seconds", with(base("0"), "size_class", "lt_100k"))->sample_count,
            10u);
  // Outside a batch a flow counts at once.
  agg.add(good_flow(0, 1000, 2000));
  EXPECT_EQ(Scrape(*registry_).counter("tcpscope_flows_total", flows), 11);
}

TEST(SelfMetricsTest, TotalsAdvanceCountersByTheDelta) {
  auto registry = std::make_shared<prometheus::Registry>();
  DaemonHealth m(registry, "1.2.3", "1.1.0", "6.18.0");
  m.set_records_lost(0);
  m.set_records_lost(5);
  m.set_records_lost(5);
  m.set_records_lost(12);
  m.set_records(1000);
  m.set_records(1500);
  m.set_transfer_records_lost(2);
  m.set_transfer_records_lost(3);
  m.set_transfer_records(40);
  m.set_transfer_records(90);
  m.set_enrichment_lookups(40);
  m.set_flow_log_dropped(3);
  m.set_flow_log_dropped(1);  // source restarted: 1 new drop
  m.set_ring_buffer_fill(0.25);
  m.set_snapshot({321, 3, 500, 2, 1, 0.25});
  m.count_reload(true);
  m.count_reload(false);
  m.count_reload(false);

  Scrape s(*registry);
  EXPECT_EQ(s.counter("tcpscope_records_lost_total", {}), 12);
  EXPECT_EQ(s.counter("tcpscope_records_total", {}), 1500);
  EXPECT_EQ(s.counter("tcpscope_transfer_records_lost_total", {}), 3);
  EXPECT_EQ(s.counter("tcpscope_transfer_records_total", {}), 90);
  EXPECT_EQ(s.counter("tcpscope_enrichment_lookups_total", {}), 40);
  EXPECT_EQ(s.counter("tcpscope_flow_log_dropped_total", {}), 4);
  EXPECT_EQ(s.gauge("tcpscope_ring_buffer_fill_ratio", {}), 0.25);
  EXPECT_EQ(s.gauge("tcpscope_snapshot_flows", {}), 321);
  EXPECT_EQ(s.gauge("tcpscope_snapshot_namespaces", {{"result", "read"}}), 3);
  EXPECT_EQ(s.gauge("tcpscope_snapshot_namespaces", {{"result", "empty"}}), 500);
  EXPECT_EQ(s.gauge("tcpscope_snapshot_namespaces", {{"result", "skipped"}}), 2);
  EXPECT_EQ(s.gauge("tcpscope_snapshot_namespaces", {{"result", "failed"}}), 1);
  EXPECT_EQ(s.gauge("tcpscope_snapshot_seconds", {}), 0.25);
  EXPECT_EQ(s.counter("tcpscope_config_reloads_total", {{"result", "ok"}}), 1);
  EXPECT_EQ(s.counter("tcpscope_config_reloads_total", {{"result", "failed"}}), 2);
  EXPECT_EQ(s.gauge("tcpscope_build_info", {{"version", "1.2.3"}, {"libbpf", "1.1.0"}, {"kernel", "6.18.0"}}), 1);

  m.set_ring_buffer_fill(3.0);
  EXPECT_EQ(Scrape(*registry).gauge("tcpscope_ring_buffer_fill_ratio", {}), 1.0);
}

}  // namespace
}  // namespace tcpscope
