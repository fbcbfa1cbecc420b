// One transfer (a run of data in one direction of a flow), decoded from the
// kernel event and ready for the enricher, the aggregator and the flow log.
// Field names follow SPEC.md's transfer record.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "net/ip_addr.h"
#include "record/enrichment.h"
#include "record/flow_record.h"

namespace tcpscope {

enum class TransferDirection : uint8_t { kSend, kRecv };
const char* to_string(TransferDirection d);

// What bounds a transfer where it begins (the record's "delimited_by"). A
// receive transfer begins at its first byte's arrival. A send transfer
// begins at the application's write where the kernel reports writes
// (tcp_sendmsg_locked, Linux 6.16), and otherwise when its first segment
// leaves, seen at the next ACK: later than the write by the time the data
// waited in the socket (none for a response written whole with nothing in
// flight). Both end at the same events: the last byte's ACK, the last arrival.
enum class TransferDelimiter : uint8_t { kWrite, kDeparture, kArrival };
const char* to_string(TransferDelimiter d);

struct TransferRecord {
  // The flow it belongs to, as in that flow's record.
  int64_t flow_start_ns = 0;
  IpAddr laddr, raddr;
  uint16_t lport = 0, rport = 0;
  Direction dir = Direction::kActive;
  uint32_t netns = 0;
  SocketOwner socket;

  uint32_t seq = 0;
  TransferDirection direction = TransferDirection::kSend;
  TransferDelimiter delimited_by = TransferDelimiter::kWrite;
  // The kernel followed the transfers of one flow in sampling_rate (config
  // transfer_sampling_rate, a power of two; 1 for a flow a rule follows),
  // chosen by the hash of the two ports (record/transfer_sampling.h), so a
  // followed flow has all its transfers. A reader that meets several rates
  // keeps only the flows the largest would have followed.
  uint32_t sampling_rate = 1;
  // CLOCK_REALTIME nanoseconds.
  int64_t start_ns = 0;
  int64_t end_ns = 0;
  int64_t xfer_us = 0;
  std::optional<int64_t> wait_us;  // none when no data went the other way first
  uint64_t bytes = 0;
  uint32_t retrans_segs = 0;
  uint32_t srtt_us = 0, min_rtt_us = 0;
  uint32_t rwnd_limited_us = 0;
  std::string cc;
  // What the kernel reports as it is, as for flows (FlowRecord::kernel).
  tcpscope_transfer_kernel kernel{};

  // Filled in by the pipeline, as for flows.
  Enrichment enrichment;

  int family() const { return raddr.family; }
  // The receiver's window limited it for most of its time: its throughput
  // says how fast the receiver read, not how fast the path carried it.
  bool rwnd_limited() const { return xfer_us > 0 && 2 * static_cast<int64_t>(rwnd_limited_us) > xfer_us; }
  // Bytes per second over xfer_us; 0 when it took no measurable time.
  double throughput_bytes_per_second() const {
    return xfer_us > 0 ? static_cast<double>(bytes) * 1e6 / static_cast<double>(xfer_us) : 0.0;
  }
};

}  // namespace tcpscope
