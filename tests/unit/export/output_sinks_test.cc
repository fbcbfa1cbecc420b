// The flow log as a record sink: every flow, the sampled flows' transfers
// when flow_log_transfers is on, a drain's lines handed on together.
#include "export/output_sinks.h"

#include "../temp_dir.h"

#include <gtest/gtest.h>

#include <fstream>
#include <sstream>

#include <prometheus/registry.h>

namespace tcpscope {
namespace {

std::string slurp(const std::string& p) {
  std::ifstream f(p);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

struct FlowLogFixture {
  explicit FlowLogFixture(bool transfers) {
    config.flow_log = dir.file("flows.ndjson");
    config.flow_log_transfers = transfers;
    sink = FlowLogSink::open(config, self, [this](const std::string& l) { logged.push_back(l); }, &error);
    EXPECT_TRUE(sink) << error;
  }
  // One drain: a flow, a transfer the outputs carry and one they do not.
  std::string drain() {
    FlowRecord flow;
    flow.fct_us = 1234;
    TransferRecord carried, not_carried;
    carried.seq = 7;
    not_carried.seq = 8;
    sink->begin_drain(RecordSink::Clock::now());
    sink->add(RoutedTransfer(carried, AsnLabel::kOwn, true, &json));
    sink->add(RoutedTransfer(not_carried, AsnLabel::kOwn, false, &json));
    sink->add(RoutedFlow(flow, AsnLabel::kOwn, true, &json));
    sink->end_drain();
    sink->close(std::chrono::seconds(5));
    return slurp(config.flow_log);
  }
  TempDir dir;
  Config config;
  SelfMetrics self{std::make_shared<prometheus::Registry>(), "test", "1.0", "6.18"};
  std::unique_ptr<FlowLogSink> sink;
  std::vector<std::string> logged;
  std::string error, json;
};

TEST(FlowLogSink, WritesFlowsAndTheTransfersTheOutputsCarry) {
  FlowLogFixture fx(true);
  const std::string data = fx.drain();
  EXPECT_EQ(std::count(data.begin(), data.end(), '\n'), 2) << data;
  EXPECT_NE(data.find("\"seq\":7"), std::string::npos) << data;
  EXPECT_EQ(data.find("\"seq\":8"), std::string::npos) << data;
  EXPECT_NE(data.find("\"fct_us\":1234"), std::string::npos) << data;
  EXPECT_EQ(fx.sink->failure(), "");
}

TEST(FlowLogSink, WritesNoTransfersWhenTheConfigSaysSoAndFollowsAReload) {
  FlowLogFixture fx(false);
  Config next = fx.config;
  next.flow_log_transfers = true;
  FlowRecord flow;
  TransferRecord t;
  fx.sink->add(RoutedTransfer(t, AsnLabel::kOwn, true, &fx.json));
  fx.sink->add(RoutedFlow(flow, AsnLabel::kOwn, true, &fx.json));
  fx.sink->apply_config(next);
  fx.sink->add(RoutedTransfer(t, AsnLabel::kOwn, true, &fx.json));
  fx.sink->end_drain();
  fx.sink->close(std::chrono::seconds(5));
  const std::string data = slurp(fx.config.flow_log);
  EXPECT_EQ(std::count(data.begin(), data.end(), '\n'), 2) << data;
  EXPECT_EQ(data.find("\"seq\""), data.rfind("\"seq\"")) << "one transfer line: " << data;
}

TEST(FlowLogSink, RefusesAPathItCannotOpen) {
  Config config;
  config.flow_log = "/proc/tcpscope-no-such-dir/flows.ndjson";
  SelfMetrics self{std::make_shared<prometheus::Registry>(), "test", "1.0", "6.18"};
  std::string error;
  EXPECT_FALSE(FlowLogSink::open(config, self, [](const std::string&) {}, &error));
  EXPECT_NE(error.find("/proc/tcpscope-no-such-dir"), std::string::npos) << error;
}

}  // namespace
}  // namespace tcpscope
