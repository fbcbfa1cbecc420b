// Drains the BPF ring buffer. The kernel side wakes us only when a batch is
// waiting (BPF_RB_NO_WAKEUP otherwise), so the daemon also drains on a timer.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "tcpscope/flow_event.h"

struct ring_buffer;

namespace tcpscope {

class RingReader {
 public:
  using Handler = std::function<void(const tcpscope_flow_event&)>;
  static std::unique_ptr<RingReader> create(int ring_fd, uint64_t ring_bytes, Handler handler,
                                            std::string* error);
  ~RingReader();

  // The fd to put in the daemon's epoll set: readable when the kernel woke us.
  int epoll_fd() const;
  // Hands queued records to the handler, at most `budget` of them (the kernel
  // may keep producing while we read, so an unbounded drain could run for as
  // long as the overload lasts and starve the daemon's timer and signals);
  // returns how many. A return equal to the budget means more may be queued.
  int drain(int budget = kDefaultDrainBudget);
  static constexpr int kDefaultDrainBudget = 16384;
  // How full the ring is right now, 0..1 (producer - consumer over size).
  double fill_ratio() const;
  uint64_t records() const { return records_; }
  uint64_t malformed() const { return malformed_; }

 private:
  RingReader() = default;
  static int on_sample(void* ctx, void* data, size_t size);

  ring_buffer* rb_ = nullptr;
  Handler handler_;
  uint64_t ring_bytes_ = 0;
  void* positions_ = nullptr;  // read-only view of consumer + producer pages
  size_t positions_len_ = 0;
  uint64_t records_ = 0;
  uint64_t malformed_ = 0;
  int budget_ = 0;   // of the drain() in progress
  int drained_ = 0;  // by it so far
};

}  // namespace tcpscope
