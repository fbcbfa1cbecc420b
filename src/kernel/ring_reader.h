// Drains the BPF ring buffer. The kernel side wakes us only when a batch is
// waiting (BPF_RB_NO_WAKEUP otherwise), so the daemon also drains on a timer.
// The ring holds three kinds of record, each starting with a header that
// names its kind (tcpscope/flow_event.h): finished flows, transfers, and a
// flow's close record carrying its last transfers.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <functional>
#include <memory>
#include <string>

#include "tcpscope/flow_event.h"

struct ring_buffer;

namespace tcpscope {

// What a ring sample of `size` bytes at `data` holds: the kind its header
// names, if the sample has at least that kind's size (a newer kernel side may
// append fields; a record is read up to what this daemon knows). An unknown
// kind or a shorter sample is malformed.
enum class SampleKind { kFlow, kTransfer, kClose, kMalformed };
inline SampleKind sample_kind(const void* data, size_t size) {
  tcpscope_record_header header;
  if (size < sizeof(header)) return SampleKind::kMalformed;
  std::memcpy(&header, data, sizeof(header));
  switch (header.kind) {
    case TCPSCOPE_RECORD_FLOW:
      return size >= sizeof(tcpscope_flow_event) ? SampleKind::kFlow : SampleKind::kMalformed;
    case TCPSCOPE_RECORD_TRANSFER:
      return size >= sizeof(tcpscope_transfer_event) ? SampleKind::kTransfer : SampleKind::kMalformed;
    case TCPSCOPE_RECORD_CLOSE:
      return size >= sizeof(tcpscope_close_event) ? SampleKind::kClose : SampleKind::kMalformed;
    default:
      return SampleKind::kMalformed;
  }
}

class RingReader {
 public:
  // All three must be set. `close` gets a flow's record together with the
  // transfers that were still open at its close (at most
  // TCPSCOPE_CLOSE_TRANSFERS, n_transfers clamped to that), which are to be
  // handled before the flow, as if they had come on their own.
  struct Handlers {
    std::function<void(const tcpscope_flow_event&)> flow;
    std::function<void(const tcpscope_transfer_event&)> transfer;
    std::function<void(const tcpscope_close_event&)> close;
  };
  static std::unique_ptr<RingReader> create(int ring_fd, uint64_t ring_bytes, Handlers handlers,
                                            std::string* error);
  ~RingReader();

  // The fd to put in the daemon's epoll set: readable when the kernel woke us.
  int epoll_fd() const;
  // Hands queued records to their handlers, at most `budget` of them (both kinds) (the kernel
  // may keep producing while we read, so an unbounded drain could run for as
  // long as the overload lasts and starve the daemon's timer and signals);
  // returns how many. A return equal to the budget means more may be queued.
  int drain(int budget = kDefaultDrainBudget);
  static constexpr int kDefaultDrainBudget = 16384;
  // How full the ring is right now, 0..1 (producer - consumer over size).
  double fill_ratio() const;
  // Flow records and transfer records read so far.
  uint64_t records() const { return records_; }
  uint64_t transfers() const { return transfers_; }
  uint64_t malformed() const { return malformed_; }

 private:
  RingReader() = default;
  static int on_sample(void* ctx, void* data, size_t size);

  ring_buffer* rb_ = nullptr;
  Handlers handlers_;
  uint64_t ring_bytes_ = 0;
  void* positions_ = nullptr;  // read-only view of consumer + producer pages
  size_t positions_len_ = 0;
  uint64_t records_ = 0;
  uint64_t transfers_ = 0;
  uint64_t malformed_ = 0;
  int budget_ = 0;   // of the drain() in progress
  int drained_ = 0;  // by it so far
};

}  // namespace tcpscope
