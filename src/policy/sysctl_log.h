// The daemon's log of writes to the congestion-control sysctls (the cgroup
// sysctl program hands each one over): one line per write, rate-limited so
// that a process writing in a loop cannot flood the log. Every write is
// counted in tcpscope_sysctl_writes_total all the same.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>

#include "tcpscope/policy.h"

namespace tcpscope {

// A token bucket over log lines. The caller passes the time, so a test
// drives it with a clock of its own.
class LogRateLimiter {
 public:
  using Clock = std::chrono::steady_clock;

  // A burst of `burst` lines, then one per `every`; full at `now`.
  LogRateLimiter(double burst, Clock::duration every, Clock::time_point now);

  // The tokens earned since the last refill, up to the burst.
  void refill(Clock::time_point now);
  // Whether a line may go out (it takes a token); one that may not is
  // counted as suppressed.
  bool allow();
  // `total`: lines lost before they reached the log (the kernel's ring was
  // full), a running total; what it grew by is counted as suppressed.
  void add_lost(uint64_t total);
  // The lines suppressed since the last summary, when there are some and a
  // token is left for the summary line (which takes it); else 0.
  uint64_t take_suppressed();

 private:
  const double burst_;
  const std::chrono::duration<double> every_;
  double tokens_;
  Clock::time_point refilled_;
  uint64_t suppressed_ = 0;
  uint64_t lost_seen_ = 0;
};

// The sysctl log's budget: a burst of 10 lines, then one per 6 s.
constexpr double kSysctlLogBurst = 10;
constexpr std::chrono::seconds kSysctlLogEvery{6};

// The log line of one write (ending in '\n'); what the process wrote and its
// name with control bytes as '?'.
std::string sysctl_write_line(const tcpscope_sysctl_event& ev);
// The line that says `n` writes went unlogged.
std::string sysctl_suppressed_line(uint64_t n);

}  // namespace tcpscope
