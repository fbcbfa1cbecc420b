#include "policy/sysctl_log.h"

#include <gtest/gtest.h>

#include <cstring>

namespace tcpscope {
namespace {

using Clock = LogRateLimiter::Clock;
using std::chrono::milliseconds;
using std::chrono::seconds;

const Clock::time_point t0{seconds(1000)};

// Lines allowed out of `n` tries.
int allowed(LogRateLimiter& l, int n) {
  int ok = 0;
  for (int i = 0; i < n; ++i) ok += l.allow();
  return ok;
}

TEST(LogRateLimiter, ABurstThenNothingUntilRefilled) {
  LogRateLimiter l(10, seconds(6), t0);
  EXPECT_EQ(allowed(l, 25), 10);
  l.refill(t0);
  EXPECT_FALSE(l.allow());
}

TEST(LogRateLimiter, RefillsOneLinePerIntervalUpToTheBurst) {
  LogRateLimiter l(10, seconds(6), t0);
  EXPECT_EQ(allowed(l, 10), 10);
  l.refill(t0 + seconds(3));  // half a token
  EXPECT_FALSE(l.allow());
  l.refill(t0 + seconds(6));  // the other half: fractions carry over
  EXPECT_TRUE(l.allow());
  EXPECT_FALSE(l.allow());
  l.refill(t0 + seconds(6 + 3 * 6) + milliseconds(1));
  EXPECT_EQ(allowed(l, 5), 3);
  // An hour idle buys the burst, not more.
  l.refill(t0 + seconds(3600));
  EXPECT_EQ(allowed(l, 100), 10);
}

TEST(LogRateLimiter, CountsSuppressedLinesAndTheLostOnesOnce) {
  LogRateLimiter l(2, seconds(6), t0);
  EXPECT_EQ(l.take_suppressed(), 0u);  // nothing suppressed: no summary
  EXPECT_EQ(allowed(l, 5), 2);        // 3 suppressed
  l.add_lost(4);                      // the ring lost 4
  l.add_lost(4);                      // the same running total: nothing new
  // No token left for the summary: it waits, the count stays.
  EXPECT_EQ(l.take_suppressed(), 0u);
  l.refill(t0 + seconds(6));
  EXPECT_EQ(l.take_suppressed(), 7u);
  EXPECT_FALSE(l.allow());  // the summary took the token
  EXPECT_EQ(l.take_suppressed(), 0u);
  l.add_lost(6);  // 2 more lost since
  l.refill(t0 + seconds(12));
  EXPECT_EQ(l.take_suppressed(), 3u);  // and the allow() refused above
}

tcpscope_sysctl_event event(const char* value, const char* comm) {
  tcpscope_sysctl_event ev{};
  ev.pid = 4242;
  std::strncpy(ev.value, value, sizeof(ev.value) - 1);
  std::strncpy(ev.comm, comm, sizeof(ev.comm) - 1);
  return ev;
}

TEST(SysctlLog, OneLinePerWrite) {
  tcpscope_sysctl_event ev = event("bbr\n", "sysctl");
  EXPECT_EQ(sysctl_write_line(ev),
            "tcpscope: sysctl: write net.ipv4.tcp_congestion_control=\"bbr\" by pid 4242 (sysctl) in the host's "
            "network namespace: observed\n");

  ev = event("reno cubic \t", "bad\x1b[2Jname");
  ev.name_idx = 1;
  ev.denied = 1;
  ev.truncated = 1;
  EXPECT_EQ(sysctl_write_line(ev),
            "tcpscope: sysctl: write net.ipv4.tcp_allowed_congestion_control=\"reno cubic\"... by pid 4242 "
            "(bad?[2Jname) in the host's network namespace: denied (sysctl_guard: deny)\n");

  ev = event("cu\x07" "bic", "sh");
  ev.other_netns = 1;
  ev.netns = 4026532000u;
  EXPECT_EQ(sysctl_write_line(ev),
            "tcpscope: sysctl: write net.ipv4.tcp_congestion_control=\"cu?bic\" by pid 4242 (sh) in network "
            "namespace 4026532000 (not the host's): observed\n");
}

TEST(SysctlLog, SummaryLine) {
  EXPECT_EQ(sysctl_suppressed_line(7),
            "tcpscope: sysctl: 7 more writes to the congestion-control sysctls not logged (rate limit; all are "
            "counted in tcpscope_sysctl_writes_total)\n");
}

}  // namespace
}  // namespace tcpscope
