#include "record/kernel_capabilities.h"

#include <gtest/gtest.h>

namespace tcpscope {
namespace {

using Lines = std::vector<std::string>;

TEST(RecordCapabilities, EveryHook) {
  EXPECT_EQ(record_capabilities({}), (Lines{"transfers: full", "receive-side end: at the last arrival (sk_data_ready)",
                                            "congestion-state times: yes"}));
}

// Debian 12's 6.1 (tests/kernel_profiles/debian12-6.1.profile).
TEST(RecordCapabilities, Linux61) {
  const Lines got =
      record_capabilities({"sk_data_ready", "tcp_sendmsg_locked", "sock_send_length", "sock_recv_length"});
  EXPECT_EQ(got, (Lines{"transfers: degraded (a send transfer starts when its first segment leaves, seen at the next "
                        "ACK (tcp_probe), not when the application writes (no tcp_sendmsg_locked, Linux 6.16); "
                        "a receive transfer ends at the application's last read of it, not its last arrival "
                        "(no sk_data_ready, Linux 6.3))",
                        "receive-side end: at the application's last read (tcp_rcv_space_adjust)",
                        "congestion-state times: yes"}));
}

// 6.12 (tests/kernel_profiles/linux-6.12.profile): data arrivals, sends from the ACKs.
TEST(RecordCapabilities, Linux612) {
  const Lines got = record_capabilities({"tcp_sendmsg_locked"});
  EXPECT_EQ(got, (Lines{"transfers: degraded (a send transfer starts when its first segment leaves, seen at the next "
                        "ACK (tcp_probe), not when the application writes (no tcp_sendmsg_locked, Linux 6.16))",
                        "receive-side end: at the last arrival (sk_data_ready)", "congestion-state times: yes"}));
}

TEST(RecordCapabilities, SendsWithoutArrivals) {
  const Lines got = record_capabilities({"sk_data_ready", "tcp_cong_state_set"});
  EXPECT_EQ(got[0],
            "transfers: degraded (a receive transfer ends at the application's last read of it, not its last arrival "
            "(no sk_data_ready, Linux 6.3))");
  EXPECT_EQ(got[2], "congestion-state times: no (no tcp_cong_state_set, Linux 5.19)");
}

// Neither send hook: no send transfers, so the received data is one transfer.
TEST(RecordCapabilities, NoSendHook) {
  EXPECT_EQ(record_capabilities({"tcp_sendmsg_locked", "tcp_probe"})[0],
            "transfers: degraded (send transfers absent: they start in tcp_sendmsg_locked, Linux 6.16, or tcp_probe; "
            "the received data is one receive transfer per flow)");
}

TEST(RecordCapabilities, NoReceiveHookAndNoSends) {
  const Lines got =
      record_capabilities({"sk_data_ready", "tcp_rcv_space_adjust", "tcp_sendmsg_locked", "tcp_probe"});
  EXPECT_EQ(got[0], "transfers: absent (send transfers start in tcp_sendmsg_locked, Linux 6.16, or tcp_probe; "
                    "receive transfers absent: they need sk_data_ready or tcp_rcv_space_adjust)");
  EXPECT_EQ(got[1], "receive-side end: absent (neither sk_data_ready nor tcp_rcv_space_adjust)");
}

TEST(RecordCapabilities, NoReceiveHookWithSends) {
  EXPECT_EQ(record_capabilities({"sk_data_ready", "tcp_rcv_space_adjust"})[0],
            "transfers: degraded (receive transfers absent: they need sk_data_ready or tcp_rcv_space_adjust)");
}

}  // namespace
}  // namespace tcpscope
