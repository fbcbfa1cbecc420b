#include "record/flow_decoder.h"

#include <arpa/inet.h>
#include <gtest/gtest.h>

#include <cstring>

#include "../record_fixtures.h"

namespace tcpscope {
namespace {

tcpscope_flow_event base_event() {
  tcpscope_flow_event ev{};
  set_ipv4_id(&ev.id, TCPSCOPE_DIR_ACTIVE, "198.18.0.2", 40000, 443, 1'000'000'000);
  ev.outcome = TCPSCOPE_OUTCOME_OK;
  ev.established_ns = 1'000'100'000;
  ev.data_end_ns = 1'250'000'000;
  ev.end_ns = 2'000'000'000;
  std::strcpy(ev.cc, "cubic");
  std::strcpy(ev.comm, "curl");
  return ev;
}

TEST(MonotonicToRealtime, ATimeConvertsTheSameBeforeAndAfterLaterReadings) {
  MonotonicToRealtime clock(1'000'000);
  const uint64_t flow_start = 5'000'000'000;
  const int64_t first = clock.to_realtime(flow_start);
  // A reading's jitter (a few ns) is not kept at all.
  clock.add_reading(10'000'000'000, 1'000'003);
  EXPECT_EQ(clock.readings_kept(), 1u);
  // A slew past the threshold applies from its reading on, not before it.
  clock.add_reading(20'000'000'000, 1'002'000);
  EXPECT_EQ(clock.readings_kept(), 2u);
  EXPECT_EQ(clock.to_realtime(flow_start), first);
  EXPECT_EQ(clock.to_realtime(20'000'000'000), 20'000'000'000 + 1'002'000);
  EXPECT_EQ(clock.to_realtime(19'999'999'999), 19'999'999'999 + 1'000'000);
  // A step back, as NTP may make.
  clock.add_reading(30'000'000'000, -5'000'000);
  EXPECT_EQ(clock.offset_ns(), -5'000'000);
  EXPECT_EQ(clock.to_realtime(25'000'000'000), 25'000'000'000 + 1'002'000);
  EXPECT_EQ(clock.to_realtime(flow_start), first);
}

TEST(MonotonicToRealtime, HistoryIsBoundedAndTheOldestCoversEarlierTimes) {
  MonotonicToRealtime clock(0);
  for (size_t i = 1; i <= MonotonicToRealtime::kMaxReadings + 10; ++i)
    clock.add_reading(i * 1'000'000'000ULL, static_cast<int64_t>(i) * 2 * MonotonicToRealtime::kMinChangeNs);
  EXPECT_LE(clock.readings_kept(), MonotonicToRealtime::kMaxReadings);
  const uint64_t last = (MonotonicToRealtime::kMaxReadings + 10) * 1'000'000'000ULL;
  EXPECT_EQ(clock.to_realtime(last), static_cast<int64_t>(last) + clock.offset_ns());
  // Older than the history: converted with the oldest reading kept, the same every time.
  EXPECT_EQ(clock.to_realtime(5), clock.to_realtime(5));
  EXPECT_GT(clock.to_realtime(5), 5);
}

TEST(FlowDecoder, TimesBecomeRealtimeAndDurations) {
  MonotonicToRealtime clock(5'000'000'000);
  FlowRecord r = decode_flow_event(base_event(), clock);
  EXPECT_EQ(r.start_ns, 6'000'000'000);
  EXPECT_EQ(r.end_ns, 7'000'000'000);
  EXPECT_EQ(r.fct_us, 250'000);
  EXPECT_EQ(r.duration_us, 1'000'000);
}

TEST(FlowDecoder, FctWithoutDataEndsAtHandshakeOrClose) {
  auto ev = base_event();
  ev.data_end_ns = 0;
  EXPECT_EQ(flow_completion_us(ev), 100);  // no data: the handshake
  ev.established_ns = 0;
  EXPECT_EQ(flow_completion_us(ev), 1'000'000);  // never established: until close
  ev.end_ns = ev.id.start_ns - 1;
  ev.data_end_ns = 0;
  EXPECT_EQ(flow_completion_us(ev), 0);  // never negative
}

TEST(FlowDecoder, AddressesPortsAndStrings) {
  auto ev = base_event();
  FlowRecord r = decode_flow_event(ev, MonotonicToRealtime(0));
  EXPECT_EQ(r.laddr.to_string(), "198.18.0.1");
  EXPECT_EQ(r.raddr.to_string(), "198.18.0.2");
  EXPECT_EQ(r.family(), 4);
  EXPECT_EQ(r.lport, 40000);
  EXPECT_EQ(r.rport, 443);
  EXPECT_EQ(r.cc, "cubic");
  EXPECT_EQ(r.comm, "curl");
}

TEST(FlowDecoder, Ipv4MappedPeerIsReportedAsIpv4) {
  auto ev = base_event();
  set_ipv6_addrs(&ev.id, "::ffff:198.18.0.1", "::ffff:203.0.113.9");
  FlowRecord r = decode_flow_event(ev, MonotonicToRealtime(0));
  EXPECT_EQ(r.family(), 4);
  EXPECT_EQ(r.raddr.to_string(), "203.0.113.9");
  EXPECT_EQ(r.laddr.to_string(), "198.18.0.1");

  inet_pton(AF_INET6, "fd00::2", ev.id.daddr);
  r = decode_flow_event(ev, MonotonicToRealtime(0));
  EXPECT_EQ(r.family(), 6);
  EXPECT_EQ(r.raddr.to_string(), "fd00::2");
}

TEST(FlowDecoder, FullLengthKernelStringsAreBounded) {
  auto ev = base_event();
  std::memset(ev.comm, 'x', sizeof(ev.comm));  // no NUL: comm of exactly 16 bytes
  std::memset(ev.cc, 'y', sizeof(ev.cc));
  FlowRecord r = decode_flow_event(ev, MonotonicToRealtime(0));
  EXPECT_EQ(r.comm, std::string(16, 'x'));
  EXPECT_EQ(r.cc, std::string(16, 'y'));
}

TEST(FlowDecoder, OutcomesDirectionsAndFlags) {
  auto ev = base_event();
  const std::pair<uint8_t, Outcome> cases[] = {{TCPSCOPE_OUTCOME_OK, Outcome::kOk},
                                               {TCPSCOPE_OUTCOME_RESET, Outcome::kReset},
                                               {TCPSCOPE_OUTCOME_REFUSED, Outcome::kRefused},
                                               {TCPSCOPE_OUTCOME_TIMEOUT, Outcome::kTimeout},
                                               {TCPSCOPE_OUTCOME_ERROR, Outcome::kError},
                                               {200, Outcome::kError}};
  for (auto [raw, want] : cases) {
    ev.outcome = raw;
    EXPECT_EQ(decode_flow_event(ev, MonotonicToRealtime(0)).outcome, want);
  }
  ev.id.dir = TCPSCOPE_DIR_PASSIVE;
  ev.flags = TCPSCOPE_F_PARTIAL | TCPSCOPE_F_APP_SET_CC;
  FlowRecord r = decode_flow_event(ev, MonotonicToRealtime(0));
  EXPECT_EQ(r.dir, Direction::kPassive);
  EXPECT_TRUE(r.partial);
  EXPECT_TRUE(r.app_set_cc);
}

TEST(FlowDecoder, CountersAndTheKernelPartWhole) {
  auto ev = base_event();
  ev.total_retrans = 7;
  ev.ca_state_ns[3] = 2'500'000;
  ev.kernel.delivery_rate_bps = 9'000'000;
  ev.kernel.max_cwnd = 80;
  ev.kernel.lost_segs = 3;
  ev.kernel.ecn = 1;
  const FlowRecord r = decode_flow_event(ev, MonotonicToRealtime(0));
  EXPECT_EQ(r.retrans_segs, 7u);
  EXPECT_EQ(r.ca_state_us[3], 2500u);
  // What the kernel reports as it is arrives as it was: the BPF code did
  // what it needed (tests/kernel/flow_kernel_part_test.cc holds it to tcp_info).
  EXPECT_EQ(std::memcmp(&r.kernel, &ev.kernel, sizeof(ev.kernel)), 0);
}

TEST(MonotonicToRealtime, OffsetMatchesTheClocks) {
  MonotonicToRealtime c;
  timespec mono{}, real{};
  clock_gettime(CLOCK_MONOTONIC, &mono);
  clock_gettime(CLOCK_REALTIME, &real);
  int64_t m = mono.tv_sec * 1'000'000'000LL + mono.tv_nsec;
  int64_t rt = real.tv_sec * 1'000'000'000LL + real.tv_nsec;
  EXPECT_LT(std::llabs(c.to_realtime(m) - rt), 5'000'000);  // 5 ms
}

}  // namespace
}  // namespace tcpscope
