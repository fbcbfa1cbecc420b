// Turns the kernel's fixed-layout event into a FlowRecord: monotonic times to
// wall-clock, addresses to IpAddr (IPv4-mapped peers folded to IPv4), and the
// derived quantities of SPEC.md (fct_us, duration_us). The event's kernel
// part, which the BPF code fills in the record's units, is copied whole.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>
#include <string>

#include "record/flow_record.h"
#include "tcpscope/flow_event.h"

namespace tcpscope {

// CLOCK_REALTIME - CLOCK_MONOTONIC, sampled so that conversions are cheap.
// refresh() picks up NTP steps and slews; call it every few seconds.
//
// A monotonic time always converts to the same wall-clock time, however
// often it is converted and whenever: a flow's start appears in each of its
// transfer records (flow_start_ns) and in its own record, converted at
// different moments, and they must be equal to join them. So a reading is
// kept only when it moved by more than kMinChangeNs (a reading's own jitter
// is a few ns), and each kept offset applies from the monotonic time it was
// read; times before the oldest kept reading take the oldest.
class MonotonicToRealtime {
 public:
  MonotonicToRealtime() { refresh(); }
  explicit MonotonicToRealtime(int64_t offset_ns) : offsets_{{0, offset_ns}} {}
  void refresh();
  // As refresh(), with the reading given (tests).
  void add_reading(uint64_t mono_ns, int64_t offset_ns);
  int64_t to_realtime(uint64_t mono_ns) const;
  int64_t offset_ns() const { return offsets_.back().offset_ns; }
  size_t readings_kept() const { return offsets_.size(); }

  static constexpr int64_t kMinChangeNs = 1000;
  // At one kept reading per refresh (a clock slewed at >= 100 ppm) that is
  // 45 hours of history; NTP's usual few ppm make it weeks.
  static constexpr size_t kMaxReadings = 16384;

 private:
  struct Reading {
    uint64_t mono_ns;  // the offset applies from here on
    int64_t offset_ns;
  };
  std::vector<Reading> offsets_;  // ascending mono_ns, never empty
};

FlowRecord decode_flow_event(const tcpscope_flow_event& ev, const MonotonicToRealtime& clock);
// Fields every kernel record has, decoded as the flow decoder does (the
// transfer decoder uses them too):
// a record's address (IPv4-mapped IPv6 unmapped),
IpAddr event_address(const __u8 bytes[16], uint8_t family);
// a NUL-terminated kernel string that may fill its whole buffer (cc, comm),
std::string event_string(const char* s, size_t capacity);
// the flow's direction (enum tcpscope_dir),
Direction event_direction(uint8_t dir);
// and the flow's identity (but its start, which each record names its own
// way): endpoints, direction, network namespace and the socket's owner.
template <class Record>
void decode_identity(const tcpscope_flow_identity& id, Record* r) {
  r->laddr = event_address(id.saddr, id.family);
  r->raddr = event_address(id.daddr, id.family);
  r->lport = id.sport;
  r->rport = id.dport;
  r->dir = event_direction(id.dir);
  r->netns = id.netns;
  r->socket = SocketOwner{id.uid, id.unprivileged_port_start, id.sock_cgroup_id, id.task_cgroup_id};
}

// Flow completion time: first SYN to the last data byte acknowledged in
// either direction. A flow that moved no data completes with its handshake;
// one whose handshake never completed, at close.
int64_t flow_completion_us(const tcpscope_flow_event& ev);

}  // namespace tcpscope
