// Linux capabilities of the whole process: reading them, naming them, and
// dropping all but a few from every thread.
//
// Capabilities belong to threads, not processes: capset() and
// PR_CAPBSET_DROP change only the calling thread, and threads made earlier
// (civetweb's workers, the flow-log writer) would keep everything. So the drop
// runs in each thread: the caller signals every other thread (a real-time
// signal, kDropSignalOffset above SIGRTMIN) and each applies the same plan to
// itself in the handler with raw system calls, the way glibc broadcasts
// setuid(). Afterwards /proc/self/task/*/status is read back: the drop counts
// only if every thread shows exactly the expected sets.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace tcpscope {

// Bit numbers from linux/capability.h, for the ones tcpscope talks about.
enum Capability : int {
  kCapDacOverride = 1,
  kCapSetpcap = 8,
  kCapNetBindService = 10,
  kCapNetAdmin = 12,
  kCapSysModule = 16,
  kCapSysPtrace = 19,
  kCapSysAdmin = 21,
  kCapPerfmon = 38,
  kCapBpf = 39,
};

constexpr uint64_t cap_bit(int cap) { return uint64_t(1) << cap; }

// "cap_net_admin,cap_bpf" (lower case, comma-separated, in bit order);
// "none" for 0. Bits without a known name print as "cap_<n>".
std::string capability_names(uint64_t mask);

struct CapabilitySets {
  uint64_t effective = 0, permitted = 0, inheritable = 0, bounding = 0, ambient = 0;
  bool no_new_privs = false;
};
// Parses the Cap* and NoNewPrivs lines of a /proc/<pid>[/task/<tid>]/status
// text; nullopt when CapEff, CapPrm, CapInh or CapBnd is missing.
std::optional<CapabilitySets> parse_proc_status_capabilities(const std::string& status_text);
// The sets of one thread of this process (tid 0 = the calling thread).
std::optional<CapabilitySets> thread_capabilities(int tid = 0);
// Thread ids of this process, from /proc/self/task.
std::vector<int> process_threads();

// Every thread ends with effective = permitted = keep & (what it had),
// inheritable = ambient = 0, the bounding set cut down to `keep` (when the
// process may change it: CAP_SETPCAP), no_new_privs set, and, with
// CAP_SETPCAP, SECBIT_NOROOT locked (an exec would not make root all-powerful
// again). On failure *error names the thread and the reason, and some threads
// may already have dropped: the caller should give up.
bool drop_capabilities_in_every_thread(uint64_t keep, std::string* error);

}  // namespace tcpscope
