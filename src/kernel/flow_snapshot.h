// Snapshots of the TCP flows open right now, read through the BPF TCP socket
// iterator (same record layout as the close records). A socket iterator sees
// the network namespace of the task that creates it, so a snapshot visits the
// daemon's own namespace and every other one it can find (/run/netns and the
// namespaces of running processes) from a short-lived thread that setns()es.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "tcpscope/flow_event.h"

namespace tcpscope {

class FlowProbe;

struct FlowSnapshot {
  std::vector<tcpscope_flow_event> flows;
  int namespaces = 0;         // namespaces visited
  int namespace_errors = 0;   // namespaces we could not enter (no CAP_SYS_ADMIN, gone)
};

// Reads the open flows of the calling thread's namespace; false + error on failure.
bool read_open_flows(int iter_link_fd, std::vector<tcpscope_flow_event>* out, std::string* error);
// Every namespace (see above). Runs setns() on a thread of its own.
FlowSnapshot snapshot_all_namespaces(int iter_link_fd);

}  // namespace tcpscope
