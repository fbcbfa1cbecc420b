#include "kernel/flow_probe.h"

#include <bpf/bpf.h>
#include <bpf/btf.h>
#include <bpf/libbpf.h>
#include <errno.h>
#include <fcntl.h>
#include <linux/capability.h>
#include <string.h>
#include <sys/syscall.h>
#include <sys/utsname.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <iterator>

#include "kernel/kernel_tick.h"
#include "kernel/load_log.h"
#include "tcpscope.skel.h"

namespace tcpscope {

namespace {

// Tracepoints each program needs; inet_sock_set_state is the one we cannot do
// without. Programs by their skeleton field: a rename is a compile error.
using Programs = decltype(tcpscope_bpf::progs);
struct ProgramHook {
  bpf_program* Programs::*program;
  const char* tracepoint;
  bool required;
  const char* loses;  // what the records lose on a kernel without it
};
constexpr ProgramHook kHooks[] = {
    {&Programs::on_state_change, tracepoints::kSetState, true, ""},
    {&Programs::on_destroy, tracepoints::kDestroySock, false,
     "the record of a flow whose close the kernel skipped (the state-change program was running on that CPU)"},
    {&Programs::on_data_ready, tracepoints::kDataReady, false, "payload arrivals, taken from tcp_probe instead"},
    {&Programs::on_sendmsg, tracepoints::kSendmsg, false,
     "send transfers and cwnd samples, taken from tcp_probe instead; owner of accepted sockets that write first"},
    {&Programs::on_cong_state, tracepoints::kCongState, false, "time per congestion state; cwnd before reductions"},
    {&Programs::on_send_reset, tracepoints::kSendReset, false, "resets sent by the kernel after close"},
    {&Programs::on_receive_reset, tracepoints::kReceiveReset, false, "resets received before the handshake"},
    {&Programs::on_segment, tracepoints::kProbe, false,
     "send transfers and arrivals where the two hooks above are missing"},
    {&Programs::on_segment_twin, tracepoints::kProbe, false,
     "send transfers and arrivals where the two hooks above are missing"},
};

// The programs that are no tracepoint's, and what goes if the kernel refuses one.
struct OtherProgram {
  bpf_program* Programs::*program;
  const char* loses;
};
constexpr OtherProgram kOtherPrograms[] = {
    {&Programs::cc_policy, "cc_policy rules cannot be applied: a config with rules is refused"},
    {&Programs::watch_setsockopt,
     "applications' own congestion-control choices are not seen (app_cc: respect and enforce cannot hold)"},
    {&Programs::guard_sysctl, "the sysctl guard (cc_policy.sysctl_guard) does not run"},
    {&Programs::on_cgroup_mkdir,
     "a cgroup made and removed before the daemon reads its directory names no service (its records' is empty)"},
    {&Programs::snapshot_open_flows,
     "no open-flow snapshots: /api/v1/flows, `tcpscope flows` and the open-flow gauges stay empty, and a "
     "kept-alive connection's finished transfers wait for the next one or its close"},
};

// What the loader decided before a load: the tracepoints it does without
// (missing, or their program refused) and the other programs refused.
struct LoadPlan {
  std::vector<std::string> unused_tracepoints;
  std::vector<std::string> refused_programs;
  bool uses(const char* tracepoint) const {
    return std::find(unused_tracepoints.begin(), unused_tracepoints.end(), tracepoint) == unused_tracepoints.end();
  }
};

std::string errno_text(int err) {
  err = err < 0 ? -err : err;
  return std::string(strerror(err)) + " (errno " + std::to_string(err) + ")";
}

bool has_capability(int cap) {
  __user_cap_header_struct hdr{_LINUX_CAPABILITY_VERSION_3, 0};
  __user_cap_data_struct data[2]{};
  if (syscall(SYS_capget, &hdr, data) != 0) return false;
  return data[cap / 32].effective & (1u << (cap % 32));
}

// Test-only overrides, read only while loading (tests/integration/
// test_flow_records.py uses them to reach start-up failures that a test
// machine cannot otherwise produce; nothing else should set them):
//   TCPSCOPE_TEST_BTF_PATH=FILE         check FILE instead of /sys/kernel/btf/vmlinux
//   TCPSCOPE_TEST_REFUSE_PROGRAM=NAME   load tracepoint program NAME for sys_enter,
//                                       whose argument is no socket: every
//                                       kernel's verifier refuses it
const char* kernel_btf_path() {
  const char* p = getenv("TCPSCOPE_TEST_BTF_PATH");
  return p && *p ? p : "/sys/kernel/btf/vmlinux";
}

//   TCPSCOPE_TEST_MISSING_TRACEPOINTS=a,b  behave as on a kernel without
//                                       tracepoints a and b (an older kernel's
//                                       fallbacks, exercised on a new one)
bool tracepoint_hidden_for_test(const char* tracepoint) {
  const char* list = getenv("TCPSCOPE_TEST_MISSING_TRACEPOINTS");
  if (!list) return false;
  std::string padded = std::string(",") + list + ",";
  return padded.find(std::string(",") + tracepoint + ",") != std::string::npos;
}

bool tracepoint_exists(const btf* vmlinux, const char* tracepoint) {
  if (tracepoint_hidden_for_test(tracepoint)) return false;
  std::string type = std::string("btf_trace_") + tracepoint;
  return vmlinux && btf__find_by_name_kind(vmlinux, type.c_str(), BTF_KIND_TYPEDEF) > 0;
}

}  // namespace

std::string libbpf_version_string() {
  return std::to_string(libbpf_major_version()) + "." + std::to_string(libbpf_minor_version());
}

KernelFeatures probe_kernel_features() {
  KernelFeatures f;
  utsname u{};
  if (uname(&u) == 0) f.kernel_release = u.release;
  f.btf = access("/sys/kernel/btf/vmlinux", R_OK) == 0;
  f.ringbuf = libbpf_probe_bpf_map_type(BPF_MAP_TYPE_RINGBUF, nullptr) == 1;
  f.sk_storage = libbpf_probe_bpf_map_type(BPF_MAP_TYPE_SK_STORAGE, nullptr) == 1;
  btf* vmlinux = f.btf ? btf__load_vmlinux_btf() : nullptr;
  for (const auto& hook : kHooks) {
    auto& list = tracepoint_exists(vmlinux, hook.tracepoint) ? f.tracepoints : f.missing_tracepoints;
    if (std::find(list.begin(), list.end(), hook.tracepoint) == list.end()) list.push_back(hook.tracepoint);  // two programs may share one
  }
  btf__free(vmlinux);
  return f;
}

namespace {

// Makes `generation`'s programs the ones that run (bpf/common.h, running()).
bool set_active_generation(tcpscope_bpf* skel, uint32_t generation, std::string* error) {
  uint32_t zero = 0;
  if (bpf_map__update_elem(skel->maps.active_generation, &zero, sizeof(zero), &generation, sizeof(generation),
                           BPF_ANY) == 0)
    return true;
  *error = "activating the programs of generation " + std::to_string(generation) + ": " + errno_text(errno);
  return false;
}

// Why the maps `h` hands over cannot serve `skel`'s programs (another
// layout version, a map missing, or one of another type, size or flags: a
// ring or trie sized differently by the config), "" when they can.
std::string incompatibility(const Handover& h, tcpscope_bpf* skel) {
  if (h.layout_version != TCPSCOPE_LAYOUT_VERSION)
    return "layout version " + std::to_string(h.layout_version) + ", this build's is " +
           std::to_string(TCPSCOPE_LAYOUT_VERSION);
  bpf_map* map;
  bpf_object__for_each_map(map, skel->obj) {
    if (bpf_map__is_internal(map)) continue;
    const std::string name = bpf_map__name(map);
    auto it = std::find_if(h.maps.begin(), h.maps.end(), [&](const NamedFd& m) { return m.name == name; });
    if (it == h.maps.end()) return "no map '" + name + "'";
    bpf_map_info info{};
    uint32_t len = sizeof(info);
    if (bpf_obj_get_info_by_fd(it->fd, &info, &len) != 0) return "map '" + name + "': " + errno_text(errno);
    if (info.type != bpf_map__type(map) || info.key_size != bpf_map__key_size(map) ||
        info.value_size != bpf_map__value_size(map) || info.max_entries != bpf_map__max_entries(map) ||
        info.map_flags != bpf_map__map_flags(map))
      return "map '" + name + "' is of another shape or size (" + std::to_string(info.max_entries) + " entries, " +
             std::to_string(info.value_size) + "-byte values; this build's: " +
             std::to_string(bpf_map__max_entries(map)) + ", " + std::to_string(bpf_map__value_size(map)) + ")";
  }
  return "";
}

uint32_t transfer_sampling_shift(uint32_t rate) {
  return rate ? static_cast<uint32_t>(__builtin_ctz(rate)) : TCPSCOPE_SAMPLING_OFF;
}

// The programs that run on every send call, data arrival or received
// segment: attached only while some flow's transfers are followed.
constexpr bpf_program* Programs::*kPerCallPrograms[] = {&Programs::on_sendmsg, &Programs::on_data_ready,
                                                         &Programs::on_segment, &Programs::on_segment_twin};

bool per_call_program(const tcpscope_bpf* skel, const bpf_program* prog) {
  return std::any_of(std::begin(kPerCallPrograms), std::end(kPerCallPrograms),
                     [&](auto member) { return skel->progs.*member == prog; });
}

// Opens the object and fixes what must be fixed before load: the maps'
// sizes, the constants (CONFIG_HZ: `tick`'s), and which programs load under
// `plan`; with `previous`, its maps in place of new ones if they fit (else
// *why_not says why, and none is taken). nullptr, with *error naming what failed, on failure.
tcpscope_bpf* open_for(const FlowProbeOptions& opts, const LoadPlan& plan, uint32_t generation,
                       const KernelTick& tick, const Handover* previous, std::string* why_not,
                       std::string* error) {
  // The kconfig externs resolved here: libbpf reads no config of the kernel's.
  const std::string kconfig = libbpf_kconfig(tick);
  LIBBPF_OPTS(bpf_object_open_opts, open_opts, .kconfig = kconfig.c_str());
  tcpscope_bpf* skel = tcpscope_bpf__open_opts(&open_opts);
  if (!skel) {
    *error = "opening the BPF object failed: " + errno_text(errno);
    return nullptr;
  }
  auto fail = [&](std::string why) -> tcpscope_bpf* {
    *error = std::move(why);
    tcpscope_bpf__destroy(skel);
    return nullptr;
  };
  if (int err = bpf_map__set_max_entries(skel->maps.events, static_cast<uint32_t>(opts.ring_buffer_bytes)))
    return fail("sizing ring buffer 'events' to " + std::to_string(opts.ring_buffer_bytes) +
                " bytes failed: " + errno_text(err));
  // A wakeup threshold at or above the ring's size never fires (the ring
  // fills first) and leaves only the periodic drain: wake the reader by a
  // quarter of the ring at the latest.
  skel->rodata->wakeup_bytes_per_cpu =
      std::min<uint64_t>(opts.wakeup_bytes, opts.ring_buffer_bytes / 4) / std::max(1, libbpf_num_possible_cpus());
  for (bpf_map* trie : {skel->maps.remote_gen0, skel->maps.remote_gen1})
    if (int err = bpf_map__set_max_entries(trie, opts.remote_trie_entries))
      return fail(std::string("sizing map '") + bpf_map__name(trie) + "' failed: " + errno_text(err));
  if (int err = bpf_map__set_max_entries(skel->maps.service_cgroups, opts.service_cgroup_entries))
    return fail("sizing map 'service_cgroups' to " + std::to_string(opts.service_cgroup_entries) +
                " entries failed: " + errno_text(err));
  skel->rodata->generation = generation;
  skel->data->transfer_sampling_shift = transfer_sampling_shift(opts.transfer_sampling_rate);
  skel->data->per_call_hooks_attached = opts.per_call_hooks;
  if (previous && (*why_not = incompatibility(*previous, skel)).empty()) {
    bpf_map* map;
    bpf_object__for_each_map(map, skel->obj) {
      if (bpf_map__is_internal(map)) continue;
      for (const auto& m : previous->maps)
        if (m.name == bpf_map__name(map))
          if (int err = bpf_map__reuse_fd(map, m.fd))
            return fail("taking over map '" + m.name + "' failed: " + errno_text(err));
    }
  }

  for (const auto& hook : kHooks)
    if (!plan.uses(hook.tracepoint)) bpf_program__set_autoload(skel->progs.*hook.program, false);
  for (const auto& name : plan.refused_programs)
    bpf_program__set_autoload(bpf_object__find_program_by_name(skel->obj, name.c_str()), false);
  // tcp_probe runs for every segment an established socket receives: it is
  // loaded only to stand in for the per-call hooks a kernel lacks, taking
  // send transfers from the ACKs (before 6.16) and arrivals from the
  // segments (before 6.3).
  skel->rodata->sends_from_acks = !plan.uses(tracepoints::kSendmsg);
  skel->rodata->arrivals_from_segments = !plan.uses(tracepoints::kDataReady);
  if (!skel->rodata->sends_from_acks && !skel->rodata->arrivals_from_segments) {
    bpf_program__set_autoload(skel->progs.on_segment, false);
    bpf_program__set_autoload(skel->progs.on_segment_twin, false);
  }

  if (const char* name = getenv("TCPSCOPE_TEST_REFUSE_PROGRAM"); name && *name) {
    bpf_program* victim = bpf_object__find_program_by_name(skel->obj, name);
    if (!victim || bpf_program__type(victim) != BPF_PROG_TYPE_TRACING)
      return fail(std::string("TCPSCOPE_TEST_REFUSE_PROGRAM: no tracepoint program '") + name + "'");
    if (bpf_program__autoload(victim)) bpf_program__set_attach_target(victim, 0, "sys_enter");
  }
  return skel;
}

}  // namespace

std::unique_ptr<FlowProbe> FlowProbe::open_and_attach(const FlowProbeOptions& opts, std::string* error,
                                                      std::string* details) {
  constexpr int kCapPerfmon = 38, kCapBpf = 39;
  if (!has_capability(CAP_SYS_ADMIN) && !(has_capability(kCapBpf) && has_capability(kCapPerfmon))) {
    *error = "not permitted: loading BPF programs needs root (or CAP_BPF and CAP_PERFMON)";
    return nullptr;
  }
  const char* btf_path = kernel_btf_path();
  if (access(btf_path, R_OK) != 0) {
    *error = std::string("no kernel BTF: ") + btf_path + ": " + errno_text(errno) +
             " (a kernel built with CONFIG_DEBUG_INFO_BTF=y is required)";
    return nullptr;
  }

  LibbpfLogCapture log;
  std::unique_ptr<FlowProbe> probe(new FlowProbe());
  probe->ring_bytes_ = opts.ring_buffer_bytes;
  const KernelTick tick = read_kernel_tick();

  // Older kernels lack some tracepoints: those programs stay unloaded and the
  // records lose only what they fed (stated by `tcpscope version`).
  LoadPlan plan;
  btf* vmlinux = btf__load_vmlinux_btf();
  for (const auto& hook : kHooks) {
    if (tracepoint_exists(vmlinux, hook.tracepoint) || !plan.uses(hook.tracepoint)) continue;  // two programs may share one
    if (hook.required) {
      btf__free(vmlinux);
      *error = std::string("kernel has no tracepoint ") + hook.tracepoint + " (the flow records are made on it)";
      return nullptr;
    }
    plan.unused_tracepoints.push_back(hook.tracepoint);
    probe->degraded_.push_back(std::string(hook.tracepoint) + " (" + hook.loses + ")");
  }
  btf__free(vmlinux);

  // Tracing programs attach on their own; the policy programs attach to a
  // cgroup (all through fd-based links: nothing outlives the process). The
  // cgroup stays open: sock_ops is attached only while rules exist.
  if (!opts.cgroup_path.empty()) {
    probe->cgroup_fd_ = open(opts.cgroup_path.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (probe->cgroup_fd_ < 0) {
      *error = "opening cgroup " + opts.cgroup_path + ": " + errno_text(errno);
      return nullptr;
    }
    probe->cgroup_path_ = opts.cgroup_path;
  }

  // A program the records can do without that the kernel refuses to load or
  // attach (an older verifier, a helper or attach point it lacks) is left
  // out, its tracepoint's fallback takes over as on a kernel without that
  // tracepoint, and the load starts again: once per program at most.
  constexpr size_t kPrograms = std::size(kHooks) + std::size(kOtherPrograms);
  Handover* previous = opts.previous;
  probe->previous_ = previous;
  if (previous) probe->generation_ = previous->generation + 1 ? previous->generation + 1 : 1;
  std::string why_not;
  for (size_t attempt = 0;; ++attempt) {
    probe->skel_ = open_for(opts, plan, probe->generation_, tick, opts.previous, &why_not, error);
    if (!probe->skel_) {
      *details = log.take();
      return nullptr;
    }
    auto* skel = probe->skel_;
    std::string refused, reason;
    // EPERM is this process's missing privilege (a capability the unit or
    // the caller did not grant), not the kernel's inability: no program is
    // left out for it, the start fails and says so.
    int failed_errno = 0;
    probe->took_over_ = previous && why_not.empty();
    if (const int err = tcpscope_bpf__load(skel)) {
      failed_errno = -err;
      refused = refused_program(log.text());
      const std::string why = refused.empty() ? "" : verifier_reason(log.text(), refused);
      if (refused.empty()) {
        // Nothing reached the verifier: a step of libbpf's own failed
        // (kernel BTF, CO-RE relocations, maps, kconfig), which it named.
        const std::string step = libbpf_failure(log.text());
        *error = "loading the BPF object failed before the kernel verified any program: " +
                 (step.empty() ? std::string("libbpf said nothing") : "libbpf: " + step) + ": " + errno_text(err);
      } else {
        *error = "the kernel refused BPF program '" + refused + "': " + errno_text(err) +
                 (why.empty() ? "" : " (verifier: " + why + ")");
      }
      reason = why.empty() ? errno_text(err) : "verifier: " + why;
    } else if (!probe->took_over_ && !set_active_generation(skel, probe->generation_, error)) {
      *details = log.take();
      return nullptr;
    } else {
      // Taking over, a cgroup link of the previous daemon swaps its program
      // for ours in place; sock_ops too, so that its rules steer on.
      bool adopted = false;
      if (probe->took_over_ && !probe->adopt_link(skel->progs.cc_policy, &adopted, error)) {
        *details = log.take();
        return nullptr;
      }
      // Before a send call can be told apart by it (surely_not_followed()).
      if (!probe->update_followed_since(transfer_sampling_shift(opts.transfer_sampling_rate), false, error)) {
        *details = log.take();
        return nullptr;
      }
      bpf_program* prog;
      bpf_object__for_each_program(prog, skel->obj) {
        if (!bpf_program__autoload(prog) || prog == skel->progs.cc_policy) continue;
        if (!opts.per_call_hooks && per_call_program(skel, prog)) continue;
        if (!probe->attach(prog, error)) {
          failed_errno = errno;
          refused = bpf_program__name(prog);
          reason = *error;
          break;
        }
      }
      if (refused.empty()) break;
    }
    const ProgramHook* hook = nullptr;
    const char* loses = nullptr;
    for (const auto& h : kHooks)
      if (!h.required && refused == bpf_program__name(skel->progs.*h.program)) hook = &h, loses = h.loses;
    for (const auto& o : kOtherPrograms)
      if (refused == bpf_program__name(skel->progs.*o.program)) loses = o.loses;
    if (!loses || failed_errno == EPERM || attempt >= kPrograms) {
      *details = log.take();
      return nullptr;
    }
    tcpscope_bpf__destroy(skel);  // and every link attached so far
    probe->skel_ = nullptr;
    probe->attached_.clear();
    if (hook)
      plan.unused_tracepoints.push_back(hook->tracepoint);
    else
      plan.refused_programs.push_back(refused);
    probe->left_out_.push_back({refused, reason, loses, log.take()});
  }
  probe->missing_ = plan.unused_tracepoints;
  if (previous) {
    // Ours run from here on, the previous daemon's no more: one write, so
    // each event is handled once. Then what is left of its objects goes
    // (its tracepoint links, and every map this probe did not take).
    if (probe->took_over_ && !set_active_generation(probe->skel_, probe->generation_, error)) {
      *details = log.take();
      return nullptr;
    }
    probe->takeover_note_ =
        probe->took_over_
            ? "took over the previous daemon's maps (generation " + std::to_string(previous->generation) +
                  "): its open flows and the records its ring holds go on here"
            : "the previous daemon's maps cannot be taken over (" + why_not +
                  "): started afresh; the records its ring held are lost and its open flows close as partial";
    previous->release();
    probe->previous_ = nullptr;
  }
  probe->ncpus_ = libbpf_num_possible_cpus();
  if (probe->ncpus_ <= 0) probe->ncpus_ = 1;
  // Said once loaded: a start that fails says one thing, why.
  std::fprintf(stderr, "tcpscope: kernel: %s\n", tick.source.c_str());
  return probe;
}

bool FlowProbe::adopt_link(bpf_program* prog, bool* adopted, std::string* error) {
  const std::string name = bpf_program__name(prog);
  *adopted = false;
  auto it = std::find_if(adopted_links_.begin(), adopted_links_.end(), [&](const NamedFd& l) { return l.name == name; });
  if (it == adopted_links_.end()) {
    if (!previous_) return true;
    auto& links = previous_->links;
    auto p = std::find_if(links.begin(), links.end(), [&](const NamedFd& l) { return l.name == name; });
    if (p == links.end()) return true;
    adopted_links_.push_back(*p);
    links.erase(p);
    it = adopted_links_.end() - 1;
  }
  if (bpf_link_update(it->fd, bpf_program__fd(prog), nullptr) != 0) {
    *error = "taking over the link of BPF program '" + name + "': " + errno_text(errno);
    return false;
  }
  if (std::find(attached_.begin(), attached_.end(), name) == attached_.end()) attached_.push_back(name);
  *adopted = true;
  return true;
}

bool FlowProbe::attach(bpf_program* prog, std::string* error) {
  const bpf_prog_type type = bpf_program__type(prog);
  const bool for_cgroup = type == BPF_PROG_TYPE_SOCK_OPS || type == BPF_PROG_TYPE_CGROUP_SOCKOPT ||
                          type == BPF_PROG_TYPE_CGROUP_SYSCTL;
  if (for_cgroup && cgroup_fd_ < 0) return true;  // no cgroup: loaded, not attached
  if (for_cgroup && took_over_) {
    bool adopted = false;
    if (!adopt_link(prog, &adopted, error)) return false;
    if (adopted) return true;
  }
  bpf_link* link = for_cgroup ? bpf_program__attach_cgroup(prog, cgroup_fd_) : bpf_program__attach(prog);
  if (!link) {
    const int err = errno;
    *error = std::string("attaching BPF program '") + bpf_program__name(prog) + "'" +
             (for_cgroup ? " to cgroup " + cgroup_path_ : std::string()) + " failed: " + errno_text(err);
    errno = err;  // for the caller, which tells a missing privilege from a kernel's refusal
    return false;
  }
  // The skeleton's destroy() closes links it knows; keep ours with it.
  for (int i = 0; i < skel_->skeleton->prog_cnt; ++i)
    if (*skel_->skeleton->progs[i].prog == prog) *skel_->skeleton->progs[i].link = link;
  attached_.push_back(bpf_program__name(prog));
  return true;
}

bool FlowProbe::set_cc_policy_attached(bool on, std::string* error) {
  bpf_link*& link = skel_->links.cc_policy;
  const std::string name = bpf_program__name(skel_->progs.cc_policy);
  // Taken over from the previous daemon: that link runs ours already.
  auto adopted = std::find_if(adopted_links_.begin(), adopted_links_.end(),
                              [&](const NamedFd& l) { return l.name == name; });
  if (adopted != adopted_links_.end()) {
    if (on) return true;
    close(adopted->fd);
    adopted_links_.erase(adopted);
    attached_.erase(std::remove(attached_.begin(), attached_.end(), name), attached_.end());
    return true;
  }
  if (on == (link != nullptr)) return true;
  if (on && !bpf_program__autoload(skel_->progs.cc_policy)) {
    *error = "the kernel refused BPF program 'cc_policy' at start, so its rules cannot be applied";
    for (const auto& p : left_out_)
      if (p.program == "cc_policy") *error += " (" + p.reason + ")";
    return false;
  }
  if (on) return attach(skel_->progs.cc_policy, error);
  bpf_link__destroy(link);
  link = nullptr;
  attached_.erase(std::remove(attached_.begin(), attached_.end(), name), attached_.end());
  return true;
}

bool FlowProbe::set_per_call_hooks(bool on, std::string* error) {
  for (auto member : kPerCallPrograms) {
    bpf_program* prog = skel_->progs.*member;
    if (!bpf_program__autoload(prog)) continue;  // this kernel runs without it
    bpf_link** link = nullptr;
    for (int i = 0; i < skel_->skeleton->prog_cnt; ++i)
      if (*skel_->skeleton->progs[i].prog == prog) link = skel_->skeleton->progs[i].link;
    const std::string name = bpf_program__name(prog);
    auto listed = std::find(attached_.begin(), attached_.end(), name);
    if (on && !*link) {
      if (!attach(prog, error)) return false;
    } else if (!on && *link) {
      bpf_link__destroy(*link);
      *link = nullptr;
      if (listed != attached_.end()) attached_.erase(listed);
    }
  }
  __atomic_store_n(&skel_->data->per_call_hooks_attached, on ? 1u : 0u, __ATOMIC_RELAXED);
  return true;
}

bool FlowProbe::update_followed_since(uint32_t shift, bool rule_followed, std::string* error) {
  const uint32_t zero = 0;
  const int fd = bpf_map__fd(skel_->maps.followed_since);
  tcpscope_followed_since since{};
  if (bpf_map_lookup_elem(fd, &zero, &since) != 0) {
    *error = "reading map 'followed_since': " + errno_text(errno);
    return false;
  }
  // A new map reads zero: a shift of 0 would be "every flow" rather than
  // "none yet".
  if (!followed_since_read_) since.floor_shift = took_over_ ? since.floor_shift : shift;
  followed_since_read_ = true;
  since.floor_shift = std::min(since.floor_shift, shift);
  since.rule_followed |= rule_followed;
  if (bpf_map_update_elem(fd, &zero, &since, BPF_ANY) != 0) {
    *error = "updating map 'followed_since': " + errno_text(errno);
    return false;
  }
  return true;
}

bool FlowProbe::set_transfer_sampling_rate(uint32_t rate, std::string* error) {
  // The programs read it once per flow; a plain store into the mapped
  // global is all a change takes. The floor first: a flow chosen at the
  // new rate is never taken for one the floor rules out.
  const uint32_t shift = transfer_sampling_shift(rate);
  if (!update_followed_since(shift, false, error)) return false;
  __atomic_store_n(&skel_->data->transfer_sampling_shift, shift, __ATOMIC_RELAXED);
  return true;
}

bool FlowProbe::note_rule_follows_transfers(std::string* error) {
  return update_followed_since(skel_->data->transfer_sampling_shift, true, error);
}

bool FlowProbe::set_ignored_netns(const std::vector<uint32_t>& inodes, std::string* error) {
  if (inodes.size() > TCPSCOPE_MAX_IGNORED_NETNS) {
    *error = "ignore_netns: " + std::to_string(inodes.size()) + " namespaces, at most " +
             std::to_string(TCPSCOPE_MAX_IGNORED_NETNS);
    return false;
  }
  // The new set first, then the old one's others out: no namespace of both
  // is followed in between.
  const int fd = bpf_map__fd(skel_->maps.ignored_netns);
  const uint8_t one = 1;
  for (uint32_t inode : inodes)
    if (bpf_map_update_elem(fd, &inode, &one, BPF_ANY) != 0) {
      *error = "updating map 'ignored_netns': " + errno_text(errno);
      return false;
    }
  uint32_t key = 0, next = 0;
  std::vector<uint32_t> stale;
  for (const uint32_t* prev = nullptr; bpf_map_get_next_key(fd, prev, &next) == 0; prev = &key) {
    key = next;
    if (std::find(inodes.begin(), inodes.end(), key) == inodes.end()) stale.push_back(key);
  }
  for (uint32_t inode : stale) bpf_map_delete_elem(fd, &inode);
  __atomic_store_n(&skel_->bss->ignored_netns_count, static_cast<uint32_t>(inodes.size()), __ATOMIC_RELAXED);
  return true;
}

void FlowProbe::detach() {
  if (skel_) tcpscope_bpf__detach(skel_);
  for (auto& l : adopted_links_) close(l.fd);
  adopted_links_.clear();
  attached_.clear();
}

FlowProbe::~FlowProbe() {
  tcpscope_bpf__destroy(skel_);
  for (auto& l : adopted_links_) close(l.fd);
  if (cgroup_fd_ >= 0) close(cgroup_fd_);
}

Handover FlowProbe::handover() const {
  Handover h;
  h.layout_version = TCPSCOPE_LAYOUT_VERSION;
  h.generation = generation_;
  bpf_map* map;
  bpf_object__for_each_map(map, skel_->obj)
    if (!bpf_map__is_internal(map)) h.maps.push_back({bpf_map__name(map), bpf_map__fd(map)});
  // The links that keep programs attached; the socket iterator's is the
  // daemon's own tool, which the next one makes anew.
  for (int i = 0; i < skel_->skeleton->prog_cnt; ++i) {
    bpf_link* link = *skel_->skeleton->progs[i].link;
    if (link && *skel_->skeleton->progs[i].prog != skel_->progs.snapshot_open_flows)
      h.links.push_back({skel_->skeleton->progs[i].name, bpf_link__fd(link)});
  }
  h.links.insert(h.links.end(), adopted_links_.begin(), adopted_links_.end());
  return h;
}

int FlowProbe::ring_buffer_fd() const { return bpf_map__fd(skel_->maps.events); }
int FlowProbe::cgroups_made_fd() const { return bpf_map__fd(skel_->maps.cgroups_made); }

int FlowProbe::snapshot_link_fd() const {
  return skel_->links.snapshot_open_flows ? bpf_link__fd(skel_->links.snapshot_open_flows) : -1;
}

std::vector<std::pair<std::string, uint64_t>> FlowProbe::recursion_misses() const {
  std::vector<std::pair<std::string, uint64_t>> out;
  bpf_program* prog;
  bpf_object__for_each_program(prog, skel_->obj) {
    if (!bpf_program__autoload(prog) || bpf_program__type(prog) != BPF_PROG_TYPE_TRACING) continue;
    int fd = bpf_program__fd(prog);
    if (fd < 0) continue;
    bpf_prog_info info{};
    uint32_t len = sizeof(info);
    if (bpf_obj_get_info_by_fd(fd, &info, &len) != 0) continue;
    out.emplace_back(bpf_program__name(prog), info.recursion_misses);
  }
  return out;
}

uint64_t FlowProbe::counter(tcpscope_counter which) const {
  std::vector<uint64_t> per_cpu(ncpus_);
  uint32_t key = which;
  if (bpf_map__lookup_elem(skel_->maps.counters, &key, sizeof(key), per_cpu.data(),
                           per_cpu.size() * sizeof(uint64_t), 0) != 0)
    return 0;
  uint64_t sum = 0;
  for (uint64_t v : per_cpu) sum += v;
  return sum;
}

}  // namespace tcpscope
