// Which capabilities the daemon keeps once it runs, and the drop itself.
//
// Start-up needs root's power: loading and attaching BPF programs (CAP_BPF,
// CAP_PERFMON, CAP_NET_ADMIN for the cgroup programs, CAP_SYS_ADMIN on some
// kernels), sizing maps, binding the listen port, opening the flow log. After
// that the daemon keeps only:
//   CAP_NET_ADMIN   a SIGHUP may name a congestion control whose module is not
//                   loaded yet; setsockopt(TCP_CONGESTION) loads it (and may
//                   set one outside net.ipv4.tcp_allowed_congestion_control)
//                   only for a CAP_NET_ADMIN caller;
//   CAP_BPF         only if bpf() on the loaded maps and links needs it on
//                   this kernel: tested at start in a child process that
//                   reads a map and creates a socket iterator without it
//                   (kernels before 6.5 refuse every bpf() call without
//                   CAP_BPF while kernel.unprivileged_bpf_disabled is set;
//                   later ones check only when maps and programs are created);
//   CAP_SYS_ADMIN,  only with open-flow snapshots on (snapshot_interval_s > 0):
//   CAP_SYS_PTRACE  the socket iterator sees the reader's network namespace,
//                   so the snapshot enters every other one (setns needs
//                   CAP_SYS_ADMIN) found through /proc/<pid>/ns/net (other
//                   users' processes need CAP_SYS_PTRACE, kept only with
//                   CAP_SYS_ADMIN). With snapshot_interval_s: 0 both are
//                   dropped.
// Only capabilities the process holds can be kept: under the systemd unit
// (CAP_BPF CAP_PERFMON CAP_NET_ADMIN) that leaves CAP_NET_ADMIN, and
// snapshots see the daemon's own namespace only.
// Everything else goes, from every thread, from the effective, permitted,
// inheritable, ambient and bounding sets; no_new_privs is set.
#pragma once

#include <cstdint>
#include <string>

namespace tcpscope {

class FlowProbe;

struct RunTimeCapabilities {
  uint64_t keep = 0;
  std::string why;  // one clause per capability kept, for the log
};

// Decides what to keep (runs the bpf() test described above).
RunTimeCapabilities run_time_capabilities(const FlowProbe& probe, bool snapshots);

// The daemon calls it once its programs are attached and its ring reader
// made, before any output connects: decides, drops, and logs one line
// naming what is kept. On failure returns false with *error one line; the
// daemon must not run on.
bool drop_capabilities_after_start(const FlowProbe& probe, bool snapshots, std::string* error);

}  // namespace tcpscope
