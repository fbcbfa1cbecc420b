#include "export/flow_log.h"
#include "export/output_sinks.h"

#include "../temp_dir.h"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <chrono>

#include <fstream>
#include <sstream>

#include <prometheus/registry.h>

namespace tcpscope {
namespace {

// What these outputs never read: a record's metrics.
const MetricValues kNoMetrics;

std::string slurp(const std::string& p) {
  std::ifstream f(p);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

TEST(FlowLog, WritesEverythingAndCreates0640) {
  TempDir dir;
  std::string path = dir.file("flows.ndjson"), err;
  auto log = FlowLog::open(path, 1 << 20, &err);
  ASSERT_TRUE(log) << err;
  for (int i = 0; i < 100; ++i) log->submit("{\"i\":" + std::to_string(i) + "}\n", 1);
  log->close(5000);
  EXPECT_EQ(log->written_records(), 100u);
  EXPECT_EQ(log->dropped_records(), 0u);
  std::string data = slurp(path);
  EXPECT_EQ(std::count(data.begin(), data.end(), '\n'), 100);
  EXPECT_EQ(data.substr(0, 8), "{\"i\":0}\n");
  struct stat st{};
  ASSERT_EQ(stat(path.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0640u);
}

TEST(FlowLog, MissingDirectoryIsAClearError) {
  std::string err;
  EXPECT_FALSE(FlowLog::open("/nonexistent-dir-tcpscope/flows.ndjson", 1 << 20, &err));
  EXPECT_NE(err.find("/nonexistent-dir-tcpscope/flows.ndjson"), std::string::npos) << err;
  EXPECT_NE(err.find("No such file or directory"), std::string::npos) << err;
}

TEST(FlowLog, FullQueueDropsAndCounts) {
  // A FIFO nobody reads stands in for a stalled disk: the writer blocks in
  // write(), the queue fills, and submit() must still return at once. The
  // log refuses a FIFO as its path, so it reaches it as standard output.
  signal(SIGPIPE, SIG_IGN);  // the daemon ignores it too; the FIFO closes under the writer
  TempDir dir;
  std::string fifo = dir.file("stalled");
  ASSERT_EQ(mkfifo(fifo.c_str(), 0600), 0);
  int keep_open = open(fifo.c_str(), O_RDONLY | O_NONBLOCK);  // lets the writer open it
  ASSERT_GE(keep_open, 0);
  const int fifo_w = open(fifo.c_str(), O_WRONLY), saved_stdout = dup(STDOUT_FILENO);
  ASSERT_GE(fifo_w, 0);
  ASSERT_EQ(dup2(fifo_w, STDOUT_FILENO), STDOUT_FILENO);
  std::string err;
  auto log = FlowLog::open("-", 4096, &err);
  ASSERT_EQ(dup2(saved_stdout, STDOUT_FILENO), STDOUT_FILENO);
  close(saved_stdout);
  close(fifo_w);
  ASSERT_TRUE(log) << err;
  std::string line(1000, 'x');
  line.back() = '\n';
  auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < 1000; ++i) log->submit(std::string(line), 1);
  auto took = std::chrono::steady_clock::now() - t0;
  EXPECT_LT(took, std::chrono::seconds(1));
  EXPECT_GT(log->dropped_records(), 900u);
  log->close(100);  // must not hang on the stalled writer
  close(keep_open);
}

TEST(FlowLog, ReopenFollowsRotation) {
  TempDir dir;
  std::string path = dir.file("flows.ndjson"), err;
  auto log = FlowLog::open(path, 1 << 20, &err);
  ASSERT_TRUE(log) << err;
  log->submit("{\"a\":1}\n", 1);
  log->close(5000);
  ASSERT_EQ(rename(path.c_str(), (path + ".1").c_str()), 0);
  auto log2 = FlowLog::open(path, 1 << 20, &err);
  log2->submit("{\"b\":1}\n", 1);
  ASSERT_EQ(rename(path.c_str(), (path + ".2").c_str()), 0);
  ASSERT_TRUE(log2->reopen(&err)) << err;
  log2->submit("{\"c\":1}\n", 1);
  log2->close(5000);
  EXPECT_EQ(slurp(path + ".1"), "{\"a\":1}\n");
  // "b" lands in the rotated file or the new one (whichever fd was current
  // when the writer got to it), never lost; "c" is in the new file.
  std::string both = slurp(path + ".2") + slurp(path);
  EXPECT_NE(both.find("{\"b\":1}\n"), std::string::npos);
  EXPECT_EQ(slurp(path).substr(slurp(path).size() - 8), "{\"c\":1}\n");
  EXPECT_EQ(std::count(both.begin(), both.end(), '\n'), 2);
}

// The flow log as a record sink: every flow, the sampled flows' transfers
// when flow_log_transfers is on, a drain's lines handed on together.
struct FlowLogFixture {
  explicit FlowLogFixture(bool transfers) {
    config.flow_log = dir.file("flows.ndjson");
    config.flow_log_transfers = transfers;
    sink = FlowLogSink::open(config, self, [this](const std::string& l) { logged.push_back(l); }, &error);
    EXPECT_TRUE(sink) << error;
  }
  // One drain: two transfers and their flow.
  std::string drain() {
    FlowRecord flow;
    flow.fct_us = 1234;
    TransferRecord first, second;
    first.seq = 7;
    second.seq = 8;
    sink->begin_drain(RecordSink::Clock::now());
    sink->add(RoutedTransfer(first, kNoMetrics, AsnLabel::kOwn, &json));
    sink->add(RoutedTransfer(second, kNoMetrics, AsnLabel::kOwn, &json));
    sink->add(RoutedFlow(flow, kNoMetrics, AsnLabel::kOwn, &json));
    sink->end_drain();
    sink->close(std::chrono::seconds(5));
    return slurp(config.flow_log);
  }
  TempDir dir;
  Config config;
  DaemonHealth self{std::make_shared<prometheus::Registry>(), "test", "1.0", "6.18"};
  std::unique_ptr<FlowLogSink> sink;
  std::vector<std::string> logged;
  std::string error, json;
};

TEST(FlowLogSink, WritesFlowsAndTheirTransfers) {
  FlowLogFixture fx(true);
  const std::string data = fx.drain();
  EXPECT_EQ(std::count(data.begin(), data.end(), '\n'), 3) << data;
  EXPECT_NE(data.find("\"seq\":7"), std::string::npos) << data;
  EXPECT_NE(data.find("\"seq\":8"), std::string::npos) << data;
  EXPECT_NE(data.find("\"fct_us\":1234"), std::string::npos) << data;
  EXPECT_EQ(fx.sink->failure(), "");
}

TEST(FlowLogSink, WritesNoTransfersWhenTheConfigSaysSoAndFollowsAReload) {
  FlowLogFixture fx(false);
  Config next = fx.config;
  next.flow_log_transfers = true;
  FlowRecord flow;
  TransferRecord t;
  fx.sink->add(RoutedTransfer(t, kNoMetrics, AsnLabel::kOwn, &fx.json));
  fx.sink->add(RoutedFlow(flow, kNoMetrics, AsnLabel::kOwn, &fx.json));
  fx.sink->apply_config(next);
  fx.sink->add(RoutedTransfer(t, kNoMetrics, AsnLabel::kOwn, &fx.json));
  fx.sink->end_drain();
  fx.sink->close(std::chrono::seconds(5));
  const std::string data = slurp(fx.config.flow_log);
  EXPECT_EQ(std::count(data.begin(), data.end(), '\n'), 2) << data;
  EXPECT_EQ(data.find("\"seq\""), data.rfind("\"seq\"")) << "one transfer line: " << data;
}

TEST(FlowLogSink, RefusesAPathItCannotOpen) {
  Config config;
  config.flow_log = "/proc/tcpscope-no-such-dir/flows.ndjson";
  DaemonHealth self{std::make_shared<prometheus::Registry>(), "test", "1.0", "6.18"};
  std::string error;
  EXPECT_FALSE(FlowLogSink::open(config, self, [](const std::string&) {}, &error));
  EXPECT_NE(error.find("/proc/tcpscope-no-such-dir"), std::string::npos) << error;
}

}  // namespace
}  // namespace tcpscope
