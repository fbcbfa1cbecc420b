// What the records can hold on a kernel, from the optional tracepoints it
// lacks (flow_probe.h's `tracepoints`, which kHooks in flow_probe.cc hooks):
// one line per part of the record, "name: value", printed at start-up and by
// `tcpscope version`.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "record/transfer_record.h"

namespace tcpscope {

// `missing`: the tracepoints the kernel lacks (or the loader was told to
// hide). Lines, in this order:
//   transfers: full | degraded (how) | absent (why)
//   receive-side end: at the last arrival (which hook) | absent (why)
//   congestion-state times: yes | no (why)
std::vector<std::string> record_coverage(const std::vector<std::string>& missing);

// How send transfers begin on that kernel: at the write (tcp_sendmsg_locked)
// or at the first segment's departure (tcp_probe); none without either.
std::optional<TransferDelimiter> send_transfer_delimiter(const std::vector<std::string>& missing);

}  // namespace tcpscope
