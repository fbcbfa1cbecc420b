// Turns the kernel's fixed-layout event into a FlowRecord: monotonic times to
// wall-clock, addresses to IpAddr (IPv4-mapped peers folded to IPv4), and the
// derived quantities of SPEC.md (fct_us, duration_us, rates in bits/s).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "record/flow_record.h"
#include "tcpscope/flow_event.h"

namespace tcpscope {

// CLOCK_REALTIME - CLOCK_MONOTONIC, sampled so that conversions are cheap.
// refresh() picks up NTP steps; call it every few seconds.
class MonotonicToRealtime {
 public:
  MonotonicToRealtime() { refresh(); }
  explicit MonotonicToRealtime(int64_t offset_ns) : offset_ns_(offset_ns) {}
  void refresh();
  int64_t to_realtime(uint64_t mono_ns) const { return static_cast<int64_t>(mono_ns) + offset_ns_; }
  int64_t offset_ns() const { return offset_ns_; }

 private:
  int64_t offset_ns_ = 0;
};

FlowRecord decode_flow_event(const tcpscope_flow_event& ev, const MonotonicToRealtime& clock);
// Fields every kernel record has, decoded as the flow decoder does (the
// transfer decoder uses them too):
// a record's address (IPv4-mapped IPv6 unmapped),
IpAddr event_address(const __u8 bytes[16], uint8_t family);
// a NUL-terminated kernel string that may fill its whole buffer (cc, comm),
std::string event_string(const char* s, size_t capacity);
// the flow's direction (enum tcpscope_dir).
Direction event_direction(uint8_t dir);

// Flow completion time: first SYN to the last data byte acknowledged in
// either direction. A flow that moved no data completes with its handshake;
// one whose handshake never completed, at close.
int64_t flow_completion_us(const tcpscope_flow_event& ev);

}  // namespace tcpscope
