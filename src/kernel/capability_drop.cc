#include "kernel/capability_drop.h"

#include <bpf/bpf.h>
#include <bpf/libbpf.h>
#include <linux/capability.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>

#include "kernel/flow_probe.h"
#include "os/linux_capabilities.h"
#include "tcpscope.skel.h"

namespace tcpscope {

namespace {

// Exit codes of the bpf() test child.
enum ChildExit : int { kChildOk = 0, kChildMapRefused = 10, kChildIterRefused = 11, kChildOtherError = 12 };

// Whether the bpf() calls the running daemon makes (map reads and writes by
// fd, socket iterators from the snapshot link) work without CAP_BPF,
// CAP_PERFMON and CAP_SYS_ADMIN. Tested for real in a child process, which
// drops them from its effective set and tries: the daemon itself cannot get a
// capability back once it is gone. Reads stand for writes: the kernel checks
// both the same way (the fd's mode, plus the global unprivileged_bpf_disabled
// gate on kernels before 6.5).
bool bpf_needs_capability(const FlowProbe& probe, std::string* why) {
  const int map_fd = bpf_map__fd(probe.skeleton()->maps.counters);
  const int link_fd = probe.snapshot_link_fd();
  const pid_t pid = fork();
  if (pid < 0) {
    *why = std::string("fork for the bpf() test failed: ") + std::strerror(errno) + "; keeping CAP_BPF";
    return true;
  }
  if (pid == 0) {
    // The child has only this thread: raw system calls, then _exit.
    __user_cap_header_struct header{_LINUX_CAPABILITY_VERSION_3, 0};
    __user_cap_data_struct data[2] = {};
    if (syscall(SYS_capget, &header, data) != 0) _exit(kChildOtherError);
    for (int cap : {kCapBpf, kCapPerfmon, kCapSysAdmin}) data[cap / 32].effective &= ~(1u << (cap % 32));
    if (syscall(SYS_capset, &header, data) != 0) _exit(kChildOtherError);
    uint64_t key[8];  // the counters map's key is 4 bytes
    if (bpf_map_get_next_key(map_fd, nullptr, key) != 0) _exit(errno == EPERM ? kChildMapRefused : kChildOtherError);
    if (link_fd >= 0) {
      const int iter = bpf_iter_create(link_fd);
      if (iter < 0) _exit(errno == EPERM ? kChildIterRefused : kChildOtherError);
      close(iter);
    }
    _exit(kChildOk);
  }
  int status = 0;
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  const int code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  if (code == kChildOk) {
    *why = "bpf() on the loaded maps and links works without CAP_BPF on this kernel";
    return false;
  }
  *why = code == kChildMapRefused    ? "reading a BPF map without CAP_BPF was refused (EPERM)"
         : code == kChildIterRefused ? "creating a socket iterator without CAP_BPF was refused (EPERM)"
                                     : "the bpf() test without CAP_BPF failed (exit " + std::to_string(code) + ")";
  return true;
}

}  // namespace

RunTimeCapabilities run_time_capabilities(const FlowProbe& probe, bool snapshots) {
  // What this process holds now: under the systemd unit that is only what
  // start-up needs (a capability not held cannot be kept).
  const auto now = thread_capabilities();
  const uint64_t held = now ? now->permitted : 0;
  RunTimeCapabilities r;
  // `needed_for` says what the capabilities do, `without` what happens if not held.
  auto want = [&](uint64_t caps, const std::string& needed_for, const std::string& without) {
    const uint64_t have = caps & held;
    r.keep |= have;
    if (!r.why.empty()) r.why += "; ";
    if (have)
      r.why += capability_names(have) + ": " + needed_for;
    if (have != caps)
      r.why += std::string(have ? ", but " : "") + capability_names(caps & ~held) + " not held: " + without;
  };
  want(cap_bit(kCapNetAdmin), "a reload may load a congestion control module",
       "a reload cannot load a congestion control module that is not loaded yet");
  std::string bpf_why;
  if (bpf_needs_capability(probe, &bpf_why))
    want(cap_bit(kCapBpf), bpf_why, "bpf() after start-up will fail");
  else
    r.why += "; " + bpf_why;
  if (snapshots) {
    // CAP_SYS_PTRACE only finds the namespaces that CAP_SYS_ADMIN enters.
    const bool enters = held & cap_bit(kCapSysAdmin);
    want(cap_bit(kCapSysAdmin) | (enters ? cap_bit(kCapSysPtrace) : 0),
         "open-flow snapshots enter other network namespaces (snapshot_interval_s: 0 drops them)",
         "open-flow snapshots cover this network namespace only");
  }
  return r;
}

bool drop_capabilities_after_start(const FlowProbe& probe, bool snapshots, std::string* error) {
  const RunTimeCapabilities plan = run_time_capabilities(probe, snapshots);
  if (!drop_capabilities_in_every_thread(plan.keep, error)) return false;
  const auto now = thread_capabilities();
  std::fprintf(stderr, "tcpscope: capabilities: kept %s (%s); every other one dropped from all threads\n",
               capability_names(now ? now->effective : plan.keep).c_str(), plan.why.c_str());
  return true;
}

}  // namespace tcpscope
