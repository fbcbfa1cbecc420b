#include "export/output_status.h"

namespace tcpscope {

std::vector<std::string> OutputStatus::update(const std::string& error, uint64_t dropped_total,
                                              Clock::time_point now) {
  std::vector<std::string> lines;
  const bool new_drops = dropped_total > last_dropped_;
  const std::string reason = !error.empty() ? error : new_drops ? "not keeping up (its queue is full)" : "";
  if (!reason.empty()) {
    if (!failing_) {
      failing_ = true;
      dropped_at_failure_ = last_dropped_;
      lines.push_back(name_ + " failing: " + reason + "; records are dropped and counted");
      next_reminder_ = now + reminder_every_;
    } else if (reason != reason_ || now >= next_reminder_) {
      lines.push_back(name_ + " still failing: " + reason + "; " +
                      std::to_string(dropped_total - dropped_at_failure_) + " records dropped since it began");
      next_reminder_ = now + reminder_every_;
    }
    reason_ = reason;
  } else if (failing_) {
    failing_ = false;
    reason_.clear();
    lines.push_back(name_ + " recovered: " + std::to_string(dropped_total - dropped_at_failure_) +
                    " records dropped while it failed");
  }
  last_dropped_ = dropped_total;
  return lines;
}

std::string OutputStatus::health() const { return failing_ ? name_ + ": " + reason_ : ""; }

}  // namespace tcpscope
