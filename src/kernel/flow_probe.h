// Loads and attaches the BPF programs (one libbpf skeleton), following
// open -> size maps / set rodata -> load -> attach, and owns them: destroying
// the FlowProbe detaches everything (links are fd-based, nothing is pinned,
// so a crashed daemon leaves nothing attached either).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "kernel/handover.h"
#include "tcpscope/flow_event.h"
#include "tcpscope/policy.h"

struct tcpscope_bpf;
struct bpf_map;
struct bpf_program;

namespace tcpscope {

// The tracepoints the flow programs hook (kHooks in flow_probe.cc), spelled
// as the kernel and missing_tracepoints() spell them; what the records hold
// without each is record_coverage.h's.
namespace tracepoints {
inline constexpr char kSetState[] = "inet_sock_set_state";
inline constexpr char kDestroySock[] = "tcp_destroy_sock";
inline constexpr char kDataReady[] = "sk_data_ready";
inline constexpr char kSendmsg[] = "tcp_sendmsg_locked";
inline constexpr char kCongState[] = "tcp_cong_state_set";
inline constexpr char kSendReset[] = "tcp_send_reset";
inline constexpr char kReceiveReset[] = "tcp_receive_reset";
inline constexpr char kProbe[] = "tcp_probe";
}  // namespace tracepoints

struct FlowProbeOptions {
  uint64_t ring_buffer_bytes = 16u << 20;
  uint64_t wakeup_bytes = 2u << 20;
  // cgroup v2 directory the policy programs (sockops, setsockopt, sysctl)
  // attach to; "" leaves them loaded but unattached. sockops is attached
  // only by set_cc_policy_attached(): it runs on every connection, and with
  // no rule it has nothing to do.
  std::string cgroup_path;
  uint32_t remote_trie_entries = 1u << 20;  // per generation of the policy trie
  // Cgroups of services that cc_policy rules name (PolicyMaps::set_service_cgroups).
  uint32_t service_cgroup_entries = TCPSCOPE_SERVICE_CGROUPS;
  // The kernel follows the transfers of one flow in this many (a power of
  // two; 0: none), besides those of the flows a rule follows.
  uint32_t transfer_sampling_rate = 16;
  // Whether the per-call hooks (sk_data_ready, tcp_sendmsg_locked, and
  // tcp_probe where it stands in) are attached: only while some flow's
  // transfers are followed (set_per_call_hooks()).
  bool per_call_hooks = true;
  // What the previous daemon handed over across a restart (handover.h), or
  // null. The probe takes its maps if they are of this build's layout, shape
  // and size, runs its own programs in their place, and closes the rest.
  Handover* previous = nullptr;
};

// What the running kernel offers, probed without loading anything.
struct KernelFeatures {
  bool btf = false;                 // /sys/kernel/btf/vmlinux
  bool ringbuf = false;
  bool sk_storage = false;
  std::vector<std::string> tracepoints;          // the ones we use that exist
  std::vector<std::string> missing_tracepoints;  // the ones we would use that do not
  std::string kernel_release;
};
KernelFeatures probe_kernel_features();
std::string libbpf_version_string();

// A program the kernel refused to load or attach, which the daemon runs without.
struct LeftOutProgram {
  std::string program;
  std::string reason;  // "verifier: " its last line, or why attaching failed
  std::string loses;   // what the records or the daemon go without
  std::string log;     // libbpf's and the verifier's whole output of that load
};

class FlowProbe {
 public:
  // Loads and attaches every program this kernel can run. A program the
  // kernel refuses is left out (left_out()) and the load retried without it,
  // unless the flow records need it (the state-change programs): then this
  // returns nullptr and sets `error` to one line naming the program, the
  // errno and the verifier's reason, and `details` to libbpf's and the
  // verifier's whole output. Other failures: nullptr, `error` naming what
  // failed and the errno.
  static std::unique_ptr<FlowProbe> open_and_attach(const FlowProbeOptions& opts, std::string* error,
                                                    std::string* details);
  ~FlowProbe();
  FlowProbe(const FlowProbe&) = delete;
  FlowProbe& operator=(const FlowProbe&) = delete;

  // cgroups_made (include/tcpscope/flow_event.h): cgroups by id, as made.
  int cgroups_made_fd() const;
  int ring_buffer_fd() const;
  // The TCP socket iterator's link (snapshots of open flows); -1 if unavailable.
  int snapshot_link_fd() const;
  uint64_t ring_buffer_bytes() const { return ring_bytes_; }
  // Sum over CPUs of one of the kernel-side counters.
  uint64_t counter(tcpscope_counter which) const;
  // Per tracing program, how often the kernel skipped it because it was
  // already running on that CPU (bpf_prog_info.recursion_misses).
  std::vector<std::pair<std::string, uint64_t>> recursion_misses() const;
  // Attaches or detaches the sock_ops program that applies cc_policy rules
  // (the policy calls it as rules appear and go). Attaching needs only
  // CAP_NET_ADMIN, which the daemon keeps; "on" without a cgroup does nothing,
  // and fails if the kernel refused the program.
  bool set_cc_policy_attached(bool on, std::string* error);
  // The flows whose handshake completes from now on are followed at this
  // rate (a power of two, 0 for none; a reload's). Flows decided before
  // keep theirs. False and *error naming the map and errno.
  bool set_transfer_sampling_rate(uint32_t rate, std::string* error);
  // A rule that follows its flows' transfers is installed: from now on every
  // send call looks the socket up (surely_not_followed() in bpf/transfer.h).
  bool note_rule_follows_transfers(std::string* error);
  // Attaches or detaches the per-call hooks (FlowProbeOptions::
  // per_call_hooks). Detached, arrivals are placed at close, to the kernel's
  // tick. False and *error naming the program and errno.
  bool set_per_call_hooks(bool on, std::string* error);
  // The network namespaces (inode numbers) whose new sockets the programs
  // leave alone, in place of the previous set; at most
  // TCPSCOPE_MAX_IGNORED_NETNS. False and *error naming the map and errno.
  bool set_ignored_netns(const std::vector<uint32_t>& inodes, std::string* error);
  // Detaches every program but keeps the maps, so what the kernel already
  // queued can still be drained before exit.
  void detach();
  // The loaded skeleton, for the policy map writer.
  tcpscope_bpf* skeleton() const { return skel_; }
  const std::string& cgroup_path() const { return cgroup_path_; }
  // Names of the programs attached.
  const std::vector<std::string>& attached() const { return attached_; }
  // Tracepoints this kernel lacks, each with what the records lose for it.
  const std::vector<std::string>& degraded() const { return degraded_; }
  // The tracepoints no program of ours runs on: those the kernel lacks and
  // those whose programs it refused (record_coverage() reads them).
  const std::vector<std::string>& missing_tracepoints() const { return missing_; }
  // Programs the kernel refused, left out.
  const std::vector<LeftOutProgram>& left_out() const { return left_out_; }

  // What this probe hands to the next daemon: its maps and links, by name
  // (its own descriptors, lent), its programs' generation and layout.
  Handover handover() const;
  // Whether it took over the previous daemon's maps, and one line saying
  // what became of what was handed over ("" when nothing was).
  bool took_over() const { return took_over_; }
  const std::string& takeover_note() const { return takeover_note_; }

 private:
  // followed_since's floor lowered to `shift`, its rule flag raised with
  // `rule_followed` (include/tcpscope/flow_event.h).
  bool update_followed_since(uint32_t shift, bool rule_followed, std::string* error);
  FlowProbe() = default;
  // Attaches one loaded program (a cgroup program to cgroup_fd_) and keeps
  // its link with the skeleton's.
  bool attach(bpf_program* prog, std::string* error);
  tcpscope_bpf* skel_ = nullptr;
  int cgroup_fd_ = -1;
  uint64_t ring_bytes_ = 0;
  std::string cgroup_path_;
  int ncpus_ = 1;
  std::vector<std::string> attached_;
  std::vector<std::string> degraded_;
  std::vector<std::string> missing_;
  std::vector<LeftOutProgram> left_out_;
  // The previous daemon's cgroup link of `prog`'s name, if it handed one
  // over, made to run `prog` in place (*adopted says whether there was one).
  bool adopt_link(bpf_program* prog, bool* adopted, std::string* error);
  Handover* previous_ = nullptr;  // while open_and_attach() runs
  uint32_t generation_ = 1;
  bool took_over_ = false;
  bool followed_since_read_ = false;  // update_followed_since() has run once
  std::string takeover_note_;
  // Cgroup links of the previous daemon, now running this probe's programs
  // (a cgroup link can swap its program in place): by program name.
  std::vector<NamedFd> adopted_links_;
};

}  // namespace tcpscope
