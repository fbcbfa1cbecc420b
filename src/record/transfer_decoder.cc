#include "record/transfer_decoder.h"

#include <algorithm>

namespace tcpscope {

TransferRecord decode_transfer_event(const tcpscope_transfer_event& ev, const MonotonicToRealtime& clock,
                                     TransferDelimiter sends) {
  TransferRecord r;
  r.flow_start_ns = clock.to_realtime(ev.id.start_ns);
  decode_identity(ev.id, &r);

  r.seq = ev.seq;
  r.sampling_rate = 1u << std::min<uint8_t>(ev.sampling_shift, 16);
  r.direction = ev.direction == TCPSCOPE_XFER_RECV ? TransferDirection::kRecv : TransferDirection::kSend;
  r.delimited_by = r.direction == TransferDirection::kRecv ? TransferDelimiter::kArrival : sends;
  r.start_ns = clock.to_realtime(ev.start_ns);
  r.end_ns = clock.to_realtime(ev.end_ns);
  r.xfer_us = ev.end_ns > ev.start_ns ? static_cast<int64_t>((ev.end_ns - ev.start_ns) / 1000) : 0;
  if (ev.wait_us != TCPSCOPE_NO_WAIT) r.wait_us = ev.wait_us;
  r.bytes = ev.bytes;
  r.retrans_segs = ev.retrans_segs;
  r.srtt_us = ev.srtt_us;
  r.min_rtt_us = ev.min_rtt_us;
  r.rwnd_limited_us = ev.rwnd_limited_us;
  r.cc = event_string(ev.cc, sizeof(ev.cc));
  r.kernel = ev.kernel;
  return r;
}

const char* to_string(TransferDirection d) { return d == TransferDirection::kRecv ? "recv" : "send"; }

const char* to_string(TransferDelimiter d) {
  switch (d) {
    case TransferDelimiter::kWrite: return "write";
    case TransferDelimiter::kDeparture: return "departure";
    case TransferDelimiter::kArrival: return "arrival";
  }
  return "write";
}

}  // namespace tcpscope
