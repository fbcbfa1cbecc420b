#include "kernel/ring_reader.h"

#include <bpf/libbpf.h>
#include <errno.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstring>

namespace tcpscope {

std::unique_ptr<RingReader> RingReader::create(int ring_fd, uint64_t ring_bytes, Handlers handlers,
                                               std::string* error) {
  if (!handlers.flow || !handlers.transfer) {
    *error = "ring buffer reader: a handler for flow and for transfer records is required";
    return nullptr;
  }
  std::unique_ptr<RingReader> r(new RingReader());
  r->handlers_ = std::move(handlers);
  r->ring_bytes_ = ring_bytes;
  r->rb_ = ring_buffer__new(ring_fd, &RingReader::on_sample, r.get(), nullptr);
  if (!r->rb_) {
    *error = std::string("ring buffer reader: ") + strerror(errno);
    return nullptr;
  }
  // The first page holds the consumer position, the second the producer's;
  // mapping them read-only lets us report fill without libbpf >= 1.3.
  long page = sysconf(_SC_PAGESIZE);
  r->positions_len_ = 2 * page;
  void* p = mmap(nullptr, r->positions_len_, PROT_READ, MAP_SHARED, ring_fd, 0);
  r->positions_ = p == MAP_FAILED ? nullptr : p;
  return r;
}

RingReader::~RingReader() {
  ring_buffer__free(rb_);
  if (positions_) munmap(positions_, positions_len_);
}

int RingReader::epoll_fd() const { return ring_buffer__epoll_fd(rb_); }

namespace {
// Returned by on_sample to make libbpf stop; the sample it was returned for
// has been handled and libbpf has already moved the consumer past it.
constexpr int kBudgetSpent = -EAGAIN;

// The sample's first sizeof(Event) bytes as an Event of its own, copied out
// of the ring rather than read through a cast of the ring's memory.
template <class Event>
Event sample_as(const void* data) {
  Event ev;
  std::memcpy(&ev, data, sizeof(ev));
  return ev;
}
}  // namespace

int RingReader::drain(int budget) {
  if (budget <= 0) return 0;
  budget_ = budget;
  drained_ = 0;
  // Negative only when on_sample stopped it (kBudgetSpent); drained_ counts what was read.
  ring_buffer__consume(rb_);
  return drained_;
}

int RingReader::on_sample(void* ctx, void* data, size_t size) {
  auto* self = static_cast<RingReader*>(ctx);
  switch (sample_kind(data, size)) {
    case SampleKind::kFlow:
      ++self->records_;
      self->handlers_.flow(sample_as<tcpscope_flow_event>(data));
      break;
    case SampleKind::kTransfer:
      ++self->transfers_;
      self->handlers_.transfer(sample_as<tcpscope_transfer_event>(data));
      break;
    case SampleKind::kClose: {
      auto ev = sample_as<tcpscope_close_event>(data);
      ev.n_transfers = std::min<uint32_t>(ev.n_transfers, TCPSCOPE_CLOSE_TRANSFERS);
      self->transfers_ += ev.n_transfers;
      ++self->records_;
      self->handlers_.close(ev);
      break;
    }
    case SampleKind::kMalformed:
      ++self->malformed_;
      return 0;
  }
  return ++self->drained_ < self->budget_ ? 0 : kBudgetSpent;
}

double RingReader::fill_ratio() const {
  if (!positions_ || ring_bytes_ == 0) return 0;
  long page = sysconf(_SC_PAGESIZE);
  auto* cons = reinterpret_cast<const std::atomic<uint64_t>*>(positions_);
  auto* prod = reinterpret_cast<const std::atomic<uint64_t>*>(static_cast<const char*>(positions_) + page);
  uint64_t c = cons->load(std::memory_order_acquire);
  uint64_t p = prod->load(std::memory_order_acquire);
  return p > c ? static_cast<double>(p - c) / static_cast<double>(ring_bytes_) : 0.0;
}

}  // namespace tcpscope
