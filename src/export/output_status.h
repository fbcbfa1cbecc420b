// Whether an output (the flow log; later the Kafka export) is failing, and
// the log lines an operator needs about it: one when it starts failing,
// naming the error; a reminder while it goes on; one when it recovers. An
// output that fails quietly (a full disk, a stalled writer) otherwise shows
// only as a rising drop counter nobody looks at until the records are gone.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

namespace tcpscope {

class OutputStatus {
 public:
  using Clock = std::chrono::steady_clock;

  // `name` is how log lines and /healthz call the output ("flow log").
  OutputStatus(std::string name, Clock::duration reminder_every = std::chrono::minutes(1))
      : name_(std::move(name)), reminder_every_(reminder_every) {}

  // Called once a tick with the output's last error ("" when its last write
  // succeeded) and its cumulative dropped records. Returns the lines to log.
  // Drops without an error mean the output is not keeping up (its queue was
  // full); a tick with neither new drops nor an error is a recovery.
  std::vector<std::string> update(const std::string& error, uint64_t dropped_total, Clock::time_point now);

  bool failing() const { return failing_; }
  // "flow log: No space left on device" while failing, else "".
  std::string health() const;

 private:
  const std::string name_;
  const Clock::duration reminder_every_;
  bool failing_ = false;
  std::string reason_;
  uint64_t last_dropped_ = 0;
  uint64_t dropped_at_failure_ = 0;
  Clock::time_point next_reminder_{};
};

}  // namespace tcpscope
