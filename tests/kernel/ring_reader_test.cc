// Drives the real BPF programs: loads and attaches them (needs root and a BTF
// kernel; skipped otherwise), makes loopback connections in a network
// namespace of the test's own, and reads the records through RingReader.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "attached_probe.h"
#include "kernel/ring_reader.h"
#include "netns_child.h"

namespace tcpscope {
namespace {

// Makes `n` connections to a listener on 127.0.0.1 and closes both ends of
// each; returns 0 on success (run in the child of run_in_private_netns).
int connect_and_close(int n) {
  sockaddr_in a{};
  int ls = listen_on_loopback(&a);
  if (ls < 0) return 1;
  for (int i = 0; i < n; ++i) {
    int c = socket(AF_INET, SOCK_STREAM, 0);
    if (connect(c, reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0) return 2;
    int s = accept(ls, nullptr, nullptr);
    if (s < 0) return 3;
    if (write(c, "x", 1) != 1) return 4;
    char b;
    if (read(s, &b, 1) != 1) return 5;
    close(c);  // active close: the client ends in TIME_WAIT, its record is emitted then
    close(s);
  }
  close(ls);
  return 0;
}

class RealProbe : public AttachedProbe {
 protected:
  uint32_t make_connections(int n) {
    return run_in_private_netns([n] { return connect_and_close(n); });
  }
};

TEST_F(RealProbe, StateChangeAndDestroyProgramsAreAttachedAndReportRecursionMisses) {
  // sk_data_ready's too, where the kernel has it (6.3 and later).
  const auto& missing = probe_->missing_tracepoints();
  const bool data_ready = std::find(missing.begin(), missing.end(), "sk_data_ready") == missing.end();
  std::vector<std::string> programs = {"on_state_change", "on_destroy"};
  if (data_ready) programs.push_back("on_data_ready");
  const auto& attached = probe_->attached();
  for (const auto& name : programs)
    EXPECT_NE(std::find(attached.begin(), attached.end(), name), attached.end()) << name;
  std::vector<std::string> reported;
  for (const auto& [program, misses] : probe_->recursion_misses()) reported.push_back(program);
  for (const auto& name : programs)
    EXPECT_NE(std::find(reported.begin(), reported.end(), name), reported.end()) << name;
}

TEST_F(RealProbe, DrainStopsAtItsBudgetAndTheNextDrainContinues) {
  constexpr int kConnections = 150;  // 300 records: one per end
  uint32_t netns = 0;
  int ours = 0, others = 0;
  int transfers = 0;
  auto make_reader = [&](std::string* error) {
    RingReader::Handlers handlers;
    handlers.flow = [&](const tcpscope_flow_event& ev) { (ev.id.netns == netns ? ours : others)++; };
    handlers.transfer = [&](const tcpscope_transfer_event&) { ++transfers; };
    handlers.close = [&](const tcpscope_close_event& ev) {
      (ev.flow.id.netns == netns ? ours : others)++;
      transfers += ev.n_transfers;
    };
    return RingReader::create(probe_->ring_buffer_fd(), probe_->ring_buffer_bytes(), std::move(handlers), error);
  };
  std::string error;
  auto reader = make_reader(&error);
  ASSERT_TRUE(reader) << error;
  reader->drain(1 << 30);  // whatever the host queued before the test
  others = 0;
  transfers = 0;

  netns = make_connections(kConnections);
  // The passive ends close on the final ACK, which may trail the child's exit.
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  std::vector<int> drained;
  while (ours < 2 * kConnections && std::chrono::steady_clock::now() < deadline) {
    if (drained.empty()) {
      // First drain with a budget smaller than what is queued.
      std::this_thread::sleep_for(std::chrono::milliseconds(200));
      drained.push_back(reader->drain(100));
      ASSERT_EQ(drained.back(), 100) << "a drain must stop at its budget";
      ASSERT_LE(ours, 100);
      continue;
    }
    drained.push_back(reader->drain(100));
    if (drained.back() == 0) std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  EXPECT_EQ(ours, 2 * kConnections) << "others " << others;
  EXPECT_EQ(probe_->counter(TCPSCOPE_CNT_RECORDS_LOST), 0u);
  EXPECT_EQ(reader->records(), static_cast<uint64_t>(ours + others));
  EXPECT_EQ(reader->transfers(), static_cast<uint64_t>(transfers));
}

// The one rule for telling the ring's records apart; no kernel needed.
TEST(RingSamples, ByTheKindInTheirHeaderAtLeastThatKindsSizeTheRestMalformed) {
  std::vector<unsigned char> sample(sizeof(tcpscope_close_event) + 8);
  auto kind_of = [&sample](unsigned kind, size_t size) {
    sample[0] = static_cast<unsigned char>(kind);
    return sample_kind(sample.data(), size);
  };
  EXPECT_EQ(kind_of(TCPSCOPE_RECORD_TRANSFER, sizeof(tcpscope_transfer_event)), SampleKind::kTransfer);
  EXPECT_EQ(kind_of(TCPSCOPE_RECORD_CLOSE, sizeof(tcpscope_close_event)), SampleKind::kClose);
  EXPECT_EQ(kind_of(TCPSCOPE_RECORD_FLOW, sizeof(tcpscope_flow_event)), SampleKind::kFlow);
  // A newer kernel side's longer records.
  EXPECT_EQ(kind_of(TCPSCOPE_RECORD_FLOW, sizeof(tcpscope_flow_event) + 8), SampleKind::kFlow);
  EXPECT_EQ(kind_of(TCPSCOPE_RECORD_TRANSFER, sizeof(tcpscope_flow_event)), SampleKind::kTransfer);
  // Shorter than its kind's record, or of a kind this daemon does not know.
  for (unsigned kind : {TCPSCOPE_RECORD_FLOW, TCPSCOPE_RECORD_TRANSFER, TCPSCOPE_RECORD_CLOSE})
    for (size_t size : {size_t{0}, size_t{8}, sizeof(tcpscope_transfer_event) - 8})
      EXPECT_EQ(kind_of(kind, size), SampleKind::kMalformed) << kind << " " << size;
  EXPECT_EQ(kind_of(TCPSCOPE_RECORD_CLOSE, sizeof(tcpscope_flow_event)), SampleKind::kMalformed);
  for (unsigned kind : {0u, 4u, 255u})
    EXPECT_EQ(kind_of(kind, sizeof(tcpscope_close_event)), SampleKind::kMalformed) << kind;
}

TEST(RingSamples, AReaderNeedsBothHandlers) {
  std::string error;
  RingReader::Handlers only_flows;
  only_flows.flow = [](const tcpscope_flow_event&) {};
  EXPECT_FALSE(RingReader::create(-1, 0, only_flows, &error));
  EXPECT_NE(error.find("transfer"), std::string::npos) << error;
}

}  // namespace
}  // namespace tcpscope
