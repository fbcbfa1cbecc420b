// Snapshots of the TCP flows open right now, read through the BPF TCP socket
// iterator (same record layout as the close records). A socket iterator sees
// the network namespace of the task that creates it, so a snapshot visits the
// daemon's own namespace and every other one it can find (/run/netns and the
// namespaces of running processes) by setns() on the calling thread (which
// needs CAP_SYS_ADMIN: without it, the daemon's own namespace only): run it
// on a thread of its own, never on the ring buffer's loop. A namespace whose
// processes have all left it or ended by the time it is visited is gone, not
// an error: processes come and go on a busy host, and an error makes the
// pass incomplete (see namespace_errors).
//
// Each iterator walks the host's whole TCP hash table and keeps its own
// namespace's sockets, so a visit costs the same whether the namespace has
// sockets or not. Any user can make namespaces (`unshare -rn`): a namespace
// whose sockstat counts no TCP socket is not read, and a snapshot stops
// visiting at its time budget, the rest counted as skipped and visited first
// next time.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <string>
#include <unordered_set>
#include <vector>

#include "tcpscope/flow_event.h"

namespace tcpscope {

struct FlowSnapshot {
  std::vector<tcpscope_flow_event> flows;
  int namespaces = 0;          // namespaces read
  int namespaces_empty = 0;    // entered, no TCP socket: not read
  int namespaces_skipped = 0;  // not reached within the budget
  int namespace_errors = 0;    // could not be entered or read
  std::string first_error;     // the first of them, with its errno
  // Inodes of the namespaces whose every socket is in `flows`: read, empty,
  // or gone by the time of their visit.
  std::unordered_set<uint32_t> whole_namespaces;
  // Every namespace found was seen whole, and others were looked for (a
  // thread without CAP_SYS_ADMIN cannot enter them and reads its own only).
  bool every_namespace = false;
  double seconds = 0;
};

// Reads the open flows of the calling thread's namespace; false + error on failure.
bool read_open_flows(int iter_link_fd, std::vector<tcpscope_flow_event>* out, std::string* error);

// The caller's namespace, then the others until `budget` has passed, starting
// at the *rotation-th (the first one the last snapshot skipped); *rotation is
// updated for the next one.
FlowSnapshot snapshot_all_namespaces(int iter_link_fd, std::chrono::steady_clock::duration budget,
                                     size_t* rotation);

}  // namespace tcpscope
