#include "policy/sysctl_log.h"

#include <algorithm>

#include "policy/policy_counters.h"
#include "text/utf8_text.h"

namespace tcpscope {

LogRateLimiter::LogRateLimiter(double burst, Clock::duration every, Clock::time_point now)
    : burst_(burst), every_(every), tokens_(burst), refilled_(now) {}

void LogRateLimiter::refill(Clock::time_point now) {
  tokens_ = std::min(burst_, tokens_ + std::chrono::duration<double>(now - refilled_).count() / every_.count());
  refilled_ = now;
}

bool LogRateLimiter::allow() {
  if (tokens_ < 1) {
    ++suppressed_;
    return false;
  }
  tokens_ -= 1;
  return true;
}

void LogRateLimiter::add_lost(uint64_t total) {
  if (total > lost_seen_) {
    suppressed_ += total - lost_seen_;
    lost_seen_ = total;
  }
}

uint64_t LogRateLimiter::take_suppressed() {
  if (!suppressed_ || tokens_ < 1) return 0;
  tokens_ -= 1;
  const uint64_t n = suppressed_;
  suppressed_ = 0;
  return n;
}

std::string sysctl_write_line(const tcpscope_sysctl_event& ev) {
  std::string value(ev.value);
  while (!value.empty() && (value.back() == '\n' || value.back() == ' ' || value.back() == '\t')) value.pop_back();
  const std::string where = ev.other_netns ? "network namespace " + std::to_string(ev.netns) + " (not the host's)"
                                           : "the host's network namespace";
  return std::string("tcpscope: sysctl: write ") + sysctl_name(ev.name_idx ? 1 : 0) + "=\"" + printable_text(value) +
         "\"" + (ev.truncated ? "..." : "") + " by pid " + std::to_string(ev.pid) + " (" + printable_text(ev.comm) +
         ") in " + where + ": " + (ev.denied ? "denied (sysctl_guard: deny)" : "observed") + "\n";
}

std::string sysctl_suppressed_line(uint64_t n) {
  return "tcpscope: sysctl: " + std::to_string(n) +
         " more writes to the congestion-control sysctls not logged "
         "(rate limit; all are counted in tcpscope_sysctl_writes_total)\n";
}

}  // namespace tcpscope
