// The fanout hands every sink the same records, in the kernel's order, with
// the label, the sampling and the JSON line worked out once.
#include "pipeline/record_fanout.h"

#include <arpa/inet.h>
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "config/config.h"
#include "enrich/peer_classifier.h"

namespace tcpscope {
namespace {

// Writes down what it was given, and asks for the JSON line of every other
// record it sees.
class RecordingSink final : public RecordSink {
 public:
  explicit RecordingSink(bool wants_json) : wants_json_(wants_json) {}
  void begin_drain(Clock::time_point) override { seen.push_back("begin"); }
  void add(const RoutedFlow& flow) override {
    seen.push_back("flow");
    if (wants_json_) json.emplace_back(flow.json());
  }
  void add(const RoutedTransfer& t) override {
    seen.push_back("transfer " + std::to_string(t.record.seq));
    rates.push_back(t.record.sampling_rate);
    if (wants_json_) json.emplace_back(t.json());
  }
  void end_drain() override { seen.push_back("end"); }
  void asn_ranking_changed(const AsnRanking&) override { seen.push_back("ranking"); }
  void service_ranking_changed(const ServiceRanking&) override { seen.push_back("service ranking"); }
  void apply_config(const Config& c) override { seen.push_back("config " + std::to_string(c.transfer_sampling_rate)); }
  std::string failure() const override { return failing; }

  std::vector<std::string> seen, json;
  std::vector<uint32_t> rates;
  std::string failing;

 private:
  const bool wants_json_;
};

tcpscope_flow_identity identity(uint64_t start_ns) {
  tcpscope_flow_identity id{};
  id.family = 4;
  id.dir = TCPSCOPE_DIR_PASSIVE;
  inet_pton(AF_INET, "198.18.0.1", id.saddr);
  inet_pton(AF_INET, "198.18.0.2", id.daddr);
  id.sport = 443;
  id.dport = 50000;
  id.start_ns = start_ns;
  return id;
}

constexpr uint64_t kStart = 1'000'000'000;

struct Fanout {
  Fanout() : first(false), second(true) {
    tables.classifier = std::make_shared<const PeerClassifier>(std::vector<PeerClassSpec>{}, "client");
    enricher = std::make_unique<Enricher>(tables);
    pipeline = std::make_unique<FlowPipeline>(clock, *enricher, names, TransferDelimiter::kWrite);
    fanout = std::make_unique<RecordFanout>(*pipeline, config);
    fanout->add_sink(&first);
    fanout->add_sink(&second);
  }
  Config config;
  EnrichmentTables tables;
  RuleNames names;
  MonotonicToRealtime clock{0};
  std::unique_ptr<Enricher> enricher;
  std::unique_ptr<FlowPipeline> pipeline;
  std::unique_ptr<RecordFanout> fanout;
  RecordingSink first, second;
};

tcpscope_close_event close_with_transfers(uint64_t start_ns, uint32_t n, uint8_t sampling_shift = 0) {
  tcpscope_close_event ev{};
  ev.flow.id = identity(start_ns);
  ev.flow.end_ns = start_ns + 1'000'000;
  ev.flow.outcome = TCPSCOPE_OUTCOME_OK;
  ev.n_transfers = n;
  for (uint32_t i = 0; i < n; ++i) {
    ev.transfers[i].id = ev.flow.id;
    ev.transfers[i].seq = i;
    ev.transfers[i].bytes = 1000;
    ev.transfers[i].sampling_shift = sampling_shift;
  }
  return ev;
}

TEST(RecordFanout, EverySinkSeesTheTransfersBeforeTheirFlowInOneDrain) {
  Fanout f;
  f.fanout->begin_drain(RecordSink::Clock::now());
  f.fanout->on_close(close_with_transfers(kStart, 2));
  f.fanout->end_drain();
  const std::vector<std::string> expected = {"begin", "transfer 0", "transfer 1", "flow", "end"};
  EXPECT_EQ(f.first.seen, expected);
  EXPECT_EQ(f.second.seen, expected);
}

// The kernel says at which rate it followed the flow (2^sampling_shift; 0:
// a rule follows it): every sink gets every transfer record with its rate.
TEST(RecordFanout, EveryTransferRecordReachesEverySinkWithItsFlowsRate) {
  Fanout f;
  f.fanout->on_close(close_with_transfers(kStart, 1, 4));
  f.fanout->on_close(close_with_transfers(kStart + 1000, 1, 0));
  EXPECT_EQ(f.first.seen, (std::vector<std::string>{"transfer 0", "flow", "transfer 0", "flow"}));
  EXPECT_EQ(f.first.rates, (std::vector<uint32_t>{16, 1}));
  EXPECT_EQ(f.second.rates, f.first.rates);
}

TEST(RecordFanout, TheJsonLineIsTheRecordsAndServesEverySink) {
  Fanout f;
  f.fanout->on_close(close_with_transfers(kStart, 1, 4));
  ASSERT_EQ(f.second.json.size(), 2u);
  EXPECT_NE(f.second.json[0].find("\"seq\":0"), std::string::npos) << f.second.json[0];
  EXPECT_NE(f.second.json[1].find("\"outcome\""), std::string::npos) << f.second.json[1];
  EXPECT_EQ(f.second.json[0].back(), '\n');
}

TEST(RecordFanout, AReloadReachesEverySink) {
  Fanout f;
  Config next = f.config;
  next.transfer_sampling_rate = 16;
  f.fanout->apply_config(next);
  EXPECT_EQ(f.first.seen, (std::vector<std::string>{"config 16"}));
  EXPECT_EQ(f.second.seen, (std::vector<std::string>{"config 16"}));
}

TEST(RecordFanout, ANewRankingReachesEverySinkOnceAMinute) {
  Fanout f;
  const auto t0 = RecordSink::Clock::now();
  f.fanout->tick(t0);
  EXPECT_TRUE(f.first.seen.empty());
  f.fanout->tick(t0 + std::chrono::seconds(61));
  EXPECT_EQ(f.first.seen, (std::vector<std::string>{"ranking", "service ranking"}));
  EXPECT_EQ(f.second.seen, (std::vector<std::string>{"ranking", "service ranking"}));
}

TEST(RecordFanout, ANewServicesTopNRanksAtOnce) {
  Fanout f;
  Config next = f.config;
  next.services.top_n = f.config.services.top_n + 1;
  f.fanout->apply_config(next);
  EXPECT_EQ(f.first.seen, (std::vector<std::string>{"config 16", "service ranking"}));
  f.fanout->apply_config(next);  // nothing new to rank
  EXPECT_EQ(f.first.seen, (std::vector<std::string>{"config 16", "service ranking", "config 16"}));
}

TEST(RecordFanout, FailuresNameEveryFailingSink) {
  Fanout f;
  EXPECT_EQ(f.fanout->failures(), "");
  f.first.failing = "flow log: No space left on device";
  f.second.failing = "kafka export: Broker transport failure";
  EXPECT_EQ(f.fanout->failures(), "flow log: No space left on device; kafka export: Broker transport failure");
}

}  // namespace
}  // namespace tcpscope
