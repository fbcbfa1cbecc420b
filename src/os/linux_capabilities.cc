#include "os/linux_capabilities.h"

#include <dirent.h>
#include <linux/capability.h>
#include <linux/securebits.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <mutex>
#include <set>
#include <sstream>

// A sanitizer's runtime (ThreadSanitizer's) keeps a thread of its own with
// every signal blocked, which could not drop its capabilities; this hook,
// the runtime's notice that the process is entering a sandbox, stops that
// thread. Null (weak) when no sanitizer is linked.
extern "C" __attribute__((weak)) void __sanitizer_sandbox_on_notify(void* args);

namespace tcpscope {

namespace {

constexpr const char* kNames[] = {
    "cap_chown",          "cap_dac_override",    "cap_dac_read_search", "cap_fowner",
    "cap_fsetid",         "cap_kill",            "cap_setgid",          "cap_setuid",
    "cap_setpcap",        "cap_linux_immutable", "cap_net_bind_service", "cap_net_broadcast",
    "cap_net_admin",      "cap_net_raw",         "cap_ipc_lock",        "cap_ipc_owner",
    "cap_sys_module",     "cap_sys_rawio",       "cap_sys_chroot",      "cap_sys_ptrace",
    "cap_sys_pacct",      "cap_sys_admin",       "cap_sys_boot",        "cap_sys_nice",
    "cap_sys_resource",   "cap_sys_time",        "cap_sys_tty_config",  "cap_mknod",
    "cap_lease",          "cap_audit_write",     "cap_audit_control",   "cap_setfcap",
    "cap_mac_override",   "cap_mac_admin",       "cap_syslog",          "cap_wake_alarm",
    "cap_block_suspend",  "cap_audit_read",      "cap_perfmon",         "cap_bpf",
    "cap_checkpoint_restore"};
constexpr int kKnownNames = sizeof(kNames) / sizeof(kNames[0]);

// The signal other threads get to drop their own capabilities.
constexpr int kDropSignalOffset = 5;
constexpr int kAckTimeoutMs = 2000;
constexpr int kMaxPasses = 8;  // rounds of listing threads until no new one shows up

// Securebits: no capabilities from being root at exec, no raising ambient ones; locked.
constexpr int kSecurebits = SECBIT_NOROOT | SECBIT_NOROOT_LOCKED | SECBIT_NO_CAP_AMBIENT_RAISE |
                            SECBIT_NO_CAP_AMBIENT_RAISE_LOCKED;

// What every thread applies to itself. Written before the first signal is
// sent, only read afterwards (also from signal handlers).
struct DropPlan {
  uint64_t keep = 0;
  int last_cap = 40;
  bool cut_bounding = false;
  bool set_securebits = false;
};
DropPlan g_plan;
std::atomic<int> g_ack_tid{0};
std::atomic<int> g_ack_errno{0};
static_assert(std::atomic<int>::is_always_lock_free, "signal handlers need lock-free atomics");

int current_tid() { return static_cast<int>(syscall(SYS_gettid)); }

// Only raw system calls: this runs in signal handlers. Returns 0 or an errno.
int apply_plan_to_this_thread() {
  const DropPlan& plan = g_plan;
  if (plan.cut_bounding) {
    for (int cap = 0; cap <= plan.last_cap; ++cap) {
      if (plan.keep & cap_bit(cap)) continue;
      if (prctl(PR_CAPBSET_READ, cap, 0, 0, 0) == 1 && prctl(PR_CAPBSET_DROP, cap, 0, 0, 0) != 0) return errno;
    }
  }
  if (plan.set_securebits) {
    const int now = prctl(PR_GET_SECUREBITS, 0, 0, 0, 0);
    if (now < 0) return errno;
    if ((now & kSecurebits) != kSecurebits && prctl(PR_SET_SECUREBITS, now | kSecurebits, 0, 0, 0) != 0)
      return errno;
  }
  if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0) return errno;
  // EINVAL: a kernel without ambient capabilities (before 4.3) has none to clear.
  if (prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0) != 0 && errno != EINVAL) return errno;

  __user_cap_header_struct header{_LINUX_CAPABILITY_VERSION_3, 0};
  __user_cap_data_struct data[2] = {};
  if (syscall(SYS_capget, &header, data) != 0) return errno;
  for (int i = 0; i < 2; ++i) {
    const uint32_t keep = static_cast<uint32_t>(plan.keep >> (32 * i));
    data[i].permitted &= keep;
    data[i].effective = data[i].permitted;
    data[i].inheritable = 0;
  }
  if (syscall(SYS_capset, &header, data) != 0) return errno;
  return 0;
}

void on_drop_signal(int) {
  const int saved = errno;
  g_ack_errno.store(apply_plan_to_this_thread());
  g_ack_tid.store(current_tid());
  errno = saved;
}

bool thread_exists(int tid) { return access(("/proc/self/task/" + std::to_string(tid)).c_str(), F_OK) == 0; }

std::string thread_label(int tid) {
  std::ifstream in("/proc/self/task/" + std::to_string(tid) + "/comm");
  std::string comm;
  std::getline(in, comm);
  return "thread " + std::to_string(tid) + (comm.empty() ? "" : " (" + comm + ")");
}

// Signals one thread and waits for it to report.
bool drop_in_thread(int tid, int signo, std::string* error) {
  g_ack_tid.store(0);
  if (syscall(SYS_tgkill, getpid(), tid, signo) != 0) {
    if (errno == ESRCH) return true;  // it ended meanwhile: nothing left to drop
    *error = thread_label(tid) + ": tgkill: " + std::strerror(errno);
    return false;
  }
  for (int waited = 0; g_ack_tid.load() != tid; ++waited) {
    if (waited >= kAckTimeoutMs) {
      if (!thread_exists(tid)) return true;
      *error = thread_label(tid) + " did not drop its capabilities within " + std::to_string(kAckTimeoutMs) +
               " ms (is signal SIGRTMIN+" + std::to_string(kDropSignalOffset) + " blocked in it?)";
      return false;
    }
    timespec ms{0, 1000000};
    nanosleep(&ms, nullptr);
  }
  if (int e = g_ack_errno.load()) {
    *error = thread_label(tid) + ": dropping capabilities: " + std::strerror(e);
    return false;
  }
  return true;
}

int read_last_cap() {
  std::ifstream in("/proc/sys/kernel/cap_last_cap");
  int last = 0;
  if (in >> last && last > 0 && last < 64) return last;
  return kKnownNames - 1;
}

}  // namespace

std::string capability_names(uint64_t mask) {
  if (mask == 0) return "none";
  std::string out;
  for (int cap = 0; cap < 64; ++cap) {
    if (!(mask & cap_bit(cap))) continue;
    if (!out.empty()) out += ',';
    out += cap < kKnownNames ? kNames[cap] : "cap_" + std::to_string(cap);
  }
  return out;
}

std::optional<CapabilitySets> parse_proc_status_capabilities(const std::string& status_text) {
  CapabilitySets sets;
  int found = 0;
  std::istringstream in(status_text);
  std::string line;
  while (std::getline(in, line)) {
    const size_t colon = line.find(':');
    if (colon == std::string::npos) continue;
    const std::string key = line.substr(0, colon);
    uint64_t* target = key == "CapEff"   ? &sets.effective
                       : key == "CapPrm" ? &sets.permitted
                       : key == "CapInh" ? &sets.inheritable
                       : key == "CapBnd" ? &sets.bounding
                       : key == "CapAmb" ? &sets.ambient
                                         : nullptr;
    const std::string value = line.substr(colon + 1);
    if (key == "NoNewPrivs") {
      sets.no_new_privs = value.find('1') != std::string::npos;
      continue;
    }
    if (!target) continue;
    char* end = nullptr;
    errno = 0;
    const unsigned long long v = std::strtoull(value.c_str(), &end, 16);
    if (errno != 0 || end == value.c_str()) return std::nullopt;
    *target = v;
    if (key != "CapAmb") ++found;
  }
  if (found != 4) return std::nullopt;
  return sets;
}

std::optional<CapabilitySets> thread_capabilities(int tid) {
  const std::string path =
      tid == 0 ? std::string("/proc/thread-self/status") : "/proc/self/task/" + std::to_string(tid) + "/status";
  std::ifstream in(path);
  if (!in) return std::nullopt;
  std::stringstream text;
  text << in.rdbuf();
  return parse_proc_status_capabilities(text.str());
}

std::vector<int> process_threads() {
  std::vector<int> tids;
  if (DIR* d = opendir("/proc/self/task")) {
    while (dirent* e = readdir(d)) {
      if (e->d_name[0] >= '0' && e->d_name[0] <= '9') tids.push_back(std::atoi(e->d_name));
    }
    closedir(d);
  }
  return tids;
}

bool drop_capabilities_in_every_thread(uint64_t keep, std::string* error) {
  // One drop at a time: the plan and the acknowledgement are process-wide.
  static std::mutex mu;
  std::lock_guard<std::mutex> lock(mu);

  const std::optional<CapabilitySets> before = thread_capabilities();
  if (!before) {
    *error = "capabilities: cannot read /proc/thread-self/status";
    return false;
  }
  g_plan.keep = keep;
  g_plan.last_cap = read_last_cap();
  g_plan.cut_bounding = before->effective & cap_bit(kCapSetpcap);
  g_plan.set_securebits = g_plan.cut_bounding;

  const int signo = SIGRTMIN + kDropSignalOffset;
  struct sigaction sa {};
  sa.sa_handler = &on_drop_signal;
  sa.sa_flags = SA_RESTART;
  sigemptyset(&sa.sa_mask);
  // The handler stays installed: a signal still pending in a thread that
  // timed out must not take the default action (terminate) later.
  if (sigaction(signo, &sa, nullptr) != 0) {
    *error = std::string("capabilities: sigaction: ") + std::strerror(errno);
    return false;
  }

  if (__sanitizer_sandbox_on_notify) __sanitizer_sandbox_on_notify(nullptr);
  // Threads may start while others are being handled; list again until a
  // round finds no new one. A thread started by one that already dropped
  // inherits the reduced sets anyway.
  const int self = current_tid();
  std::set<int> done{self};
  for (int pass = 0;; ++pass) {
    bool found_new = false;
    for (int tid : process_threads()) {
      if (!done.insert(tid).second) continue;
      found_new = true;
      if (!drop_in_thread(tid, signo, error)) return false;
    }
    if (!found_new) break;
    if (pass == kMaxPasses) {
      *error = "capabilities: threads kept appearing while dropping capabilities";
      return false;
    }
  }
  if (int e = apply_plan_to_this_thread()) {
    *error = thread_label(self) + ": dropping capabilities: " + std::strerror(e);
    return false;
  }

  // Trust, but verify: every thread as the kernel reports it.
  const uint64_t want_prm = keep & before->permitted;
  const uint64_t want_bnd = g_plan.cut_bounding ? before->bounding & keep : before->bounding;
  for (int tid : process_threads()) {
    const std::optional<CapabilitySets> now = thread_capabilities(tid);
    if (!now) {
      if (!thread_exists(tid)) continue;
      *error = thread_label(tid) + ": cannot read its capabilities";
      return false;
    }
    if (now->effective != want_prm || now->permitted != want_prm || now->inheritable != 0 || now->ambient != 0 ||
        now->bounding != want_bnd || !now->no_new_privs) {
      *error = thread_label(tid) + " still holds " +
               capability_names((now->effective | now->permitted | now->inheritable | now->ambient) & ~want_prm) +
               " after the drop";
      return false;
    }
  }
  return true;
}

}  // namespace tcpscope
