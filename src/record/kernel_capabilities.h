// What the records can hold on a kernel, from the optional tracepoints it
// lacks (the names of kHooks in src/kernel/flow_probe.cc): one line per
// capability, "name: value", printed at start-up and by `tcpscope version`.
#pragma once

#include <string>
#include <vector>

namespace tcpscope {

// `missing`: the tracepoints the kernel lacks (or the loader was told to
// hide). Lines, in this order:
//   transfers: full | degraded (how) | absent (why)
//   receive-side end: at the last arrival (sk_data_ready)
//                   | at the application's last read (tcp_rcv_space_adjust) | absent (why)
//   congestion-state times: yes | no (why)
std::vector<std::string> record_capabilities(const std::vector<std::string>& missing);

}  // namespace tcpscope
