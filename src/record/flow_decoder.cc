#include "record/flow_decoder.h"

#include <time.h>

#include <algorithm>
#include <cstring>

namespace tcpscope {

namespace {

int64_t clock_ns(clockid_t id) {
  timespec ts{};
  clock_gettime(id, &ts);
  return static_cast<int64_t>(ts.tv_sec) * 1000000000 + ts.tv_nsec;
}

}  // namespace

void MonotonicToRealtime::refresh() {
  // Bracket the realtime read with two monotonic reads and take the midpoint,
  // so the offset error is at most half the (tiny) bracket.
  int64_t m1 = clock_ns(CLOCK_MONOTONIC);
  int64_t r = clock_ns(CLOCK_REALTIME);
  int64_t m2 = clock_ns(CLOCK_MONOTONIC);
  const int64_t mid = m1 + (m2 - m1) / 2;
  add_reading(static_cast<uint64_t>(mid), r - mid);
}

void MonotonicToRealtime::add_reading(uint64_t mono_ns, int64_t offset_ns) {
  if (offsets_.empty()) {
    offsets_.push_back({0, offset_ns});
    return;
  }
  const int64_t moved = offset_ns - offsets_.back().offset_ns;
  if (moved <= kMinChangeNs && moved >= -kMinChangeNs) return;
  if (mono_ns <= offsets_.back().mono_ns) return;
  if (offsets_.size() == kMaxReadings) {
    // Drop the older half; the oldest kept then covers all earlier times.
    offsets_.erase(offsets_.begin(), offsets_.begin() + kMaxReadings / 2);
    offsets_.front().mono_ns = 0;
  }
  offsets_.push_back({mono_ns, offset_ns});
}

int64_t MonotonicToRealtime::to_realtime(uint64_t mono_ns) const {
  // Almost every time converted is after the latest reading.
  auto it = offsets_.end() - 1;
  if (mono_ns < it->mono_ns) {
    it = std::upper_bound(offsets_.begin(), offsets_.end(), mono_ns,
                          [](uint64_t t, const Reading& r) { return t < r.mono_ns; });
    if (it != offsets_.begin()) --it;
  }
  return static_cast<int64_t>(mono_ns) + it->offset_ns;
}

int64_t flow_completion_us(const tcpscope_flow_event& ev) {
  uint64_t end = ev.data_end_ns;
  if (end == 0) end = ev.established_ns ? ev.established_ns : ev.end_ns;
  if (end < ev.id.start_ns) return 0;
  return static_cast<int64_t>((end - ev.id.start_ns) / 1000);
}

IpAddr event_address(const __u8 bytes[16], uint8_t family) {
  return family == 4 ? IpAddr::v4(bytes) : IpAddr::v6(bytes).unmapped();
}

std::string event_string(const char* s, size_t capacity) { return std::string(s, strnlen(s, capacity)); }

Direction event_direction(uint8_t dir) { return dir == TCPSCOPE_DIR_PASSIVE ? Direction::kPassive : Direction::kActive; }

FlowRecord decode_flow_event(const tcpscope_flow_event& ev, const MonotonicToRealtime& clock) {
  FlowRecord r;
  const uint64_t start_ns = ev.id.start_ns;
  r.start_ns = clock.to_realtime(start_ns);
  r.end_ns = clock.to_realtime(ev.end_ns);
  r.duration_us = ev.end_ns > start_ns ? static_cast<int64_t>((ev.end_ns - start_ns) / 1000) : 0;
  r.fct_us = flow_completion_us(ev);

  decode_identity(ev.id, &r);
  switch (ev.outcome) {
    case TCPSCOPE_OUTCOME_OK: r.outcome = Outcome::kOk; break;
    case TCPSCOPE_OUTCOME_RESET: r.outcome = Outcome::kReset; break;
    case TCPSCOPE_OUTCOME_REFUSED: r.outcome = Outcome::kRefused; break;
    case TCPSCOPE_OUTCOME_TIMEOUT: r.outcome = Outcome::kTimeout; break;
    default: r.outcome = Outcome::kError; break;
  }
  r.partial = ev.flags & TCPSCOPE_F_PARTIAL;
  r.app_set_cc = ev.flags & TCPSCOPE_F_APP_SET_CC;

  r.cc = event_string(ev.cc, sizeof(ev.cc));
  r.srtt_us = ev.srtt_us;
  r.min_rtt_us = ev.min_rtt_us;
  r.bytes_acked = ev.bytes_acked;
  r.bytes_received = ev.bytes_received;
  r.segs_out = ev.segs_out;
  r.retrans_segs = ev.total_retrans;
  for (size_t i = 0; i < r.ca_state_us.size(); ++i) r.ca_state_us[i] = ev.ca_state_ns[i] / 1000;
  r.kernel = ev.kernel;

  r.pid = ev.pid;
  r.comm = event_string(ev.comm, sizeof(ev.comm));
  return r;
}

const char* to_string(Direction d) { return d == Direction::kPassive ? "passive" : "active"; }

const char* to_string(Outcome o) {
  switch (o) {
    case Outcome::kOk: return "ok";
    case Outcome::kReset: return "reset";
    case Outcome::kRefused: return "refused";
    case Outcome::kTimeout: return "timeout";
    case Outcome::kError: return "error";
  }
  return "error";
}

}  // namespace tcpscope
