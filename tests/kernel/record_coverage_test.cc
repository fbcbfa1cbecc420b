#include "kernel/record_coverage.h"

#include <gtest/gtest.h>

namespace tcpscope {
namespace {

using Lines = std::vector<std::string>;

const char* const kDeparture =
    "a send transfer starts when its first segment leaves, seen at the next ACK (tcp_probe), not when the "
    "application writes (no tcp_sendmsg_locked, Linux 6.16): delimited_by \"departure\"";
const char* const kProbeArrivals =
    "arrivals are taken from tcp_probe (no sk_data_ready, Linux 6.3): data that arrives after this side's FIN is "
    "not seen";

TEST(RecordCoverage, EveryHook) {
  EXPECT_EQ(record_coverage({}), (Lines{"transfers: full", "receive-side end: at the last arrival (sk_data_ready)",
                                            "congestion-state times: yes"}));
  EXPECT_EQ(send_transfer_delimiter({}), TransferDelimiter::kWrite);
}

// Debian 12's 6.1 (tests/kernel_profiles/debian12-6.1.profile): tcp_probe
// stands in for both per-call hooks.
TEST(RecordCoverage, Linux61) {
  const std::vector<std::string> missing = {"sk_data_ready", "tcp_sendmsg_locked", "sock_send_length",
                                            "sock_recv_length"};
  EXPECT_EQ(record_coverage(missing),
            (Lines{std::string("transfers: degraded (") + kDeparture + "; " + kProbeArrivals + ")",
                   "receive-side end: at the last arrival (tcp_probe), but for data after this side's FIN",
                   "congestion-state times: yes"}));
  EXPECT_EQ(send_transfer_delimiter(missing), TransferDelimiter::kDeparture);
}

// 6.12 (tests/kernel_profiles/linux-6.12.profile): data arrivals, sends from the ACKs.
TEST(RecordCoverage, Linux612) {
  EXPECT_EQ(record_coverage({"tcp_sendmsg_locked"}),
            (Lines{std::string("transfers: degraded (") + kDeparture + ")",
                   "receive-side end: at the last arrival (sk_data_ready)", "congestion-state times: yes"}));
  EXPECT_EQ(send_transfer_delimiter({"tcp_sendmsg_locked"}), TransferDelimiter::kDeparture);
}

TEST(RecordCoverage, WritesWithArrivalsFromSegments) {
  const Lines got = record_coverage({"sk_data_ready", "tcp_cong_state_set"});
  EXPECT_EQ(got[0], std::string("transfers: degraded (") + kProbeArrivals + ")");
  EXPECT_EQ(got[2], "congestion-state times: no (no tcp_cong_state_set, Linux 5.19)");
}

// Neither send hook: no send transfers, so the received data is one transfer.
TEST(RecordCoverage, NoSendHook) {
  EXPECT_EQ(record_coverage({"tcp_sendmsg_locked", "tcp_probe"})[0],
            "transfers: degraded (no send transfers: they need tcp_sendmsg_locked (Linux 6.16) or tcp_probe, and "
            "without them a flow's received data is one receive transfer)");
}

TEST(RecordCoverage, NoHookAtAll) {
  const Lines got = record_coverage({"sk_data_ready", "tcp_sendmsg_locked", "tcp_probe"});
  EXPECT_EQ(got[0], "transfers: absent (no send transfers: they need tcp_sendmsg_locked (Linux 6.16) or tcp_probe; "
                    "no receive transfers: they need sk_data_ready (Linux 6.3) or tcp_probe)");
  EXPECT_EQ(got[1], "receive-side end: absent (neither sk_data_ready nor tcp_probe)");
  EXPECT_EQ(send_transfer_delimiter({"sk_data_ready", "tcp_sendmsg_locked", "tcp_probe"}), std::nullopt);
}

}  // namespace
}  // namespace tcpscope
