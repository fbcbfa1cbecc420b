#include "record/transfer_decoder.h"

#include <gtest/gtest.h>

#include <cstring>

#include "../record_fixtures.h"

namespace tcpscope {
namespace {

tcpscope_transfer_event base_event() {
  tcpscope_transfer_event ev{};
  set_ipv4_id(&ev.id, TCPSCOPE_DIR_PASSIVE, "198.18.0.2", 443, 50000, 1'000'000'000);
  ev.id.netns = 4026531840u;
  ev.direction = TCPSCOPE_XFER_SEND;
  ev.start_ns = 1'200'000'000;
  ev.end_ns = 1'450'000'000;
  ev.seq = 3;
  ev.wait_us = 1500;
  ev.bytes = 5'000'000'000ULL;  // beyond 32 bits
  ev.retrans_segs = 4;
  ev.srtt_us = 20000;
  ev.min_rtt_us = 10000;
  set_chrono_us(&ev, 250000, 100000, 7);
  std::strcpy(ev.cc, "bbr");
  return ev;
}

TEST(TransferDecoder, TimesBecomeRealtimeAndXferUs) {
  const TransferRecord r = decode_transfer_event(base_event(), MonotonicToRealtime(5'000'000'000), TransferDelimiter::kWrite);
  EXPECT_EQ(r.flow_start_ns, 6'000'000'000);
  EXPECT_EQ(r.start_ns, 6'200'000'000);
  EXPECT_EQ(r.end_ns, 6'450'000'000);
  EXPECT_EQ(r.xfer_us, 250'000);
}

TEST(TransferDecoder, AnEndBeforeTheStartTakesNoTime) {
  auto ev = base_event();
  ev.end_ns = ev.start_ns - 1;
  EXPECT_EQ(decode_transfer_event(ev, MonotonicToRealtime(0), TransferDelimiter::kWrite).xfer_us, 0);
}

TEST(TransferDecoder, NoWaitIsNull) {
  auto ev = base_event();
  EXPECT_EQ(decode_transfer_event(ev, MonotonicToRealtime(0), TransferDelimiter::kWrite).wait_us, 1500);
  ev.wait_us = 0;
  EXPECT_EQ(decode_transfer_event(ev, MonotonicToRealtime(0), TransferDelimiter::kWrite).wait_us, 0);  // 0 is a wait, not none
  ev.wait_us = TCPSCOPE_NO_WAIT;
  EXPECT_FALSE(decode_transfer_event(ev, MonotonicToRealtime(0), TransferDelimiter::kWrite).wait_us);
}

// The socket's owner and its namespace's bound, as the flow's records
// carry them (decode_identity, which the flow decoder shares).
TEST(TransferDecoder, TheSocketsOwnerAndItsNamespacesPortBound) {
  tcpscope_transfer_event ev = base_event();
  ev.id.uid = 65534;
  ev.id.unprivileged_port_start = 9000;
  const TransferRecord r = decode_transfer_event(ev, MonotonicToRealtime(0), TransferDelimiter::kWrite);
  EXPECT_EQ(r.socket.uid, 65534u);
  EXPECT_EQ(r.socket.unprivileged_port_start, 9000u);
}

TEST(TransferDecoder, CountersAndTheirUnits) {
  const TransferRecord r = decode_transfer_event(base_event(), MonotonicToRealtime(0), TransferDelimiter::kWrite);
  EXPECT_EQ(r.seq, 3u);
  EXPECT_EQ(r.bytes, 5'000'000'000ULL);
  EXPECT_EQ(r.retrans_segs, 4u);
  EXPECT_EQ(r.srtt_us, 20000u);
  EXPECT_EQ(r.min_rtt_us, 10000u);
  EXPECT_EQ(r.kernel.busy_us, 250000u);
  EXPECT_EQ(r.rwnd_limited_us, 100000u);
  EXPECT_EQ(r.kernel.sndbuf_limited_us, 7u);
  EXPECT_EQ(r.netns, 4026531840u);
  EXPECT_EQ(r.cc, "bbr");
}

TEST(TransferDecoder, Ipv4AddressesAndPorts) {
  const TransferRecord r = decode_transfer_event(base_event(), MonotonicToRealtime(0), TransferDelimiter::kWrite);
  EXPECT_EQ(r.family(), 4);
  EXPECT_EQ(r.laddr.to_string(), "198.18.0.1");
  EXPECT_EQ(r.raddr.to_string(), "198.18.0.2");
  EXPECT_EQ(r.lport, 443);
  EXPECT_EQ(r.rport, 50000);
}

TEST(TransferDecoder, Ipv6AndIpv4MappedPeers) {
  auto ev = base_event();
  set_ipv6_addrs(&ev.id, "fd00::1", "fd00::2");
  TransferRecord r = decode_transfer_event(ev, MonotonicToRealtime(0), TransferDelimiter::kWrite);
  EXPECT_EQ(r.family(), 6);
  EXPECT_EQ(r.laddr.to_string(), "fd00::1");
  EXPECT_EQ(r.raddr.to_string(), "fd00::2");

  set_ipv6_addrs(&ev.id, "::ffff:198.18.0.1", "::ffff:203.0.113.9");
  r = decode_transfer_event(ev, MonotonicToRealtime(0), TransferDelimiter::kWrite);
  EXPECT_EQ(r.family(), 4);  // as the flow record reports it
  EXPECT_EQ(r.raddr.to_string(), "203.0.113.9");
}

TEST(TransferDecoder, DirectionsOfTheTransferAndItsFlow) {
  auto ev = base_event();
  TransferRecord r = decode_transfer_event(ev, MonotonicToRealtime(0), TransferDelimiter::kWrite);
  EXPECT_EQ(r.direction, TransferDirection::kSend);
  EXPECT_STREQ(to_string(r.direction), "send");
  EXPECT_EQ(r.dir, Direction::kPassive);
  ev.direction = TCPSCOPE_XFER_RECV;
  ev.id.dir = TCPSCOPE_DIR_ACTIVE;
  r = decode_transfer_event(ev, MonotonicToRealtime(0), TransferDelimiter::kWrite);
  EXPECT_EQ(r.direction, TransferDirection::kRecv);
  EXPECT_STREQ(to_string(r.direction), "recv");
  EXPECT_EQ(r.dir, Direction::kActive);
}

TEST(TransferDecoder, DelimitedByTheKernelsHooks) {
  auto ev = base_event();
  EXPECT_EQ(decode_transfer_event(ev, MonotonicToRealtime(0), TransferDelimiter::kWrite).delimited_by,
            TransferDelimiter::kWrite);
  const TransferRecord departure = decode_transfer_event(ev, MonotonicToRealtime(0), TransferDelimiter::kDeparture);
  EXPECT_EQ(departure.delimited_by, TransferDelimiter::kDeparture);
  EXPECT_STREQ(to_string(departure.delimited_by), "departure");
  ev.direction = TCPSCOPE_XFER_RECV;  // a receive transfer begins at an arrival on every kernel
  for (auto sends : {TransferDelimiter::kWrite, TransferDelimiter::kDeparture}) {
    const TransferRecord r = decode_transfer_event(ev, MonotonicToRealtime(0), sends);
    EXPECT_EQ(r.delimited_by, TransferDelimiter::kArrival);
    EXPECT_STREQ(to_string(r.delimited_by), "arrival");
  }
}

TEST(TransferDecoder, FullLengthCcIsBounded) {
  auto ev = base_event();
  std::memset(ev.cc, 'y', sizeof(ev.cc));  // no NUL
  EXPECT_EQ(decode_transfer_event(ev, MonotonicToRealtime(0), TransferDelimiter::kWrite).cc, std::string(16, 'y'));
}

}  // namespace
}  // namespace tcpscope
