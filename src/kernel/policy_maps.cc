#include "kernel/policy_maps.h"

#include <bpf/bpf.h>
#include <bpf/libbpf.h>
#include <errno.h>
#include <string.h>

#include <cstring>

#include "kernel/flow_probe.h"
#include "tcpscope.skel.h"

namespace tcpscope {

namespace {

std::string errno_text(int err) {
  err = err < 0 ? -err : err;
  return std::string(strerror(err)) + " (errno " + std::to_string(err) + ")";
}

int ncpus() {
  static int n = [] {
    int c = libbpf_num_possible_cpus();
    return c > 0 ? c : 1;
  }();
  return n;
}

}  // namespace

bool PolicyMaps::clear_trie(int fd, std::string* error) {
  tcpscope_remote_key key{}, next{};
  // Deleting the key we just read makes "next after it" undefined for an LPM
  // trie, so always restart from the beginning.
  while (bpf_map_get_next_key(fd, nullptr, &next) == 0) {
    if (bpf_map_delete_elem(fd, &next) != 0) {
      *error = "clearing the policy trie: " + errno_text(errno);
      return false;
    }
  }
  (void)key;
  return true;
}

int PolicyMaps::install(const CompiledPolicy& policy, std::string* error) {
  auto* skel = probe_.skeleton();
  int state_fd = bpf_map__fd(skel->maps.policy_state);
  uint32_t zero = 0;
  tcpscope_policy_state st{};
  if (bpf_map_lookup_elem(state_fd, &zero, &st) != 0) {
    *error = "reading policy_state: " + errno_text(errno);
    return -1;
  }
  const uint32_t gen = installed_once_ ? 1 - (st.active_gen & 1) : 0;
  int trie_fd = bpf_map__fd(gen ? skel->maps.remote_gen1 : skel->maps.remote_gen0);

  // 1. The inactive generation's trie, rules and counters.
  if (!clear_trie(trie_fd, error)) return -1;
  for (const auto& e : policy.remote) {
    if (bpf_map_update_elem(trie_fd, &e.key, &e.info, BPF_ANY) != 0) {
      *error = "loading the policy trie (" + std::to_string(policy.remote.size()) +
               " prefixes; raise remote_trie_entries?): " + errno_text(errno);
      return -1;
    }
  }
  int rules_fd = bpf_map__fd(skel->maps.policy_rules);
  for (uint32_t i = 0; i < policy.rules.size(); ++i) {
    uint32_t slot = gen * TCPSCOPE_MAX_RULES + i;
    if (bpf_map_update_elem(rules_fd, &slot, &policy.rules[i].bpf, BPF_ANY) != 0) {
      *error = "loading policy rule '" + policy.rules[i].name + "': " + errno_text(errno);
      return -1;
    }
  }
  int assign_fd = bpf_map__fd(skel->maps.cc_assignments);
  std::vector<uint64_t> zeros(ncpus(), 0);
  for (uint32_t i = 0; i < TCPSCOPE_MAX_RULES * TCPSCOPE_MAX_ARMS; ++i) {
    uint32_t slot = gen * TCPSCOPE_MAX_RULES * TCPSCOPE_MAX_ARMS + i;
    bpf_map_update_elem(assign_fd, &slot, zeros.data(), BPF_ANY);
  }

  // 2. Publish: first the rule count of the new generation, then the flip,
  //    so a reader never sees the new generation without its rules.
  st.n_rules[gen] = static_cast<uint32_t>(policy.rules.size());
  st.app_override = policy.app_override;
  st.sysctl_guard = policy.sysctl_guard;
  st.loaded = 1;
  if (bpf_map_update_elem(state_fd, &zero, &st, BPF_ANY) != 0) {
    *error = "updating policy_state: " + errno_text(errno);
    return -1;
  }
  st.active_gen = gen;
  if (bpf_map_update_elem(state_fd, &zero, &st, BPF_ANY) != 0) {
    *error = "activating the policy: " + errno_text(errno);
    return -1;
  }
  installed_once_ = true;
  return static_cast<int>(gen);
}

void PolicyMaps::set_loaded(bool loaded) {
  int fd = bpf_map__fd(probe_.skeleton()->maps.policy_state);
  uint32_t zero = 0;
  tcpscope_policy_state st{};
  if (bpf_map_lookup_elem(fd, &zero, &st) != 0) return;
  st.loaded = loaded ? 1 : 0;
  bpf_map_update_elem(fd, &zero, &st, BPF_ANY);
}

uint64_t PolicyMaps::percpu_sum(int map_fd, uint32_t key) const {
  std::vector<uint64_t> vals(ncpus());
  if (bpf_map_lookup_elem(map_fd, &key, vals.data()) != 0) return 0;
  uint64_t sum = 0;
  for (uint64_t v : vals) sum += v;
  return sum;
}

uint64_t PolicyMaps::assignments(uint32_t gen, uint32_t rule, uint32_t arm) const {
  uint32_t slot = (gen * TCPSCOPE_MAX_RULES + rule) * TCPSCOPE_MAX_ARMS + arm;
  return percpu_sum(bpf_map__fd(probe_.skeleton()->maps.cc_assignments), slot);
}

std::vector<PolicyMaps::AppCcCount> PolicyMaps::app_cc_calls() const {
  std::vector<AppCcCount> out;
  int fd = bpf_map__fd(probe_.skeleton()->maps.app_cc_calls);
  tcpscope_app_cc_key key{}, next{};
  void* prev = nullptr;
  while (bpf_map_get_next_key(fd, prev, &next) == 0) {
    uint64_t v = 0;
    if (bpf_map_lookup_elem(fd, &next, &v) == 0)
      out.push_back({std::string(next.cc, strnlen(next.cc, sizeof(next.cc))), next.action, v});
    key = next;
    prev = &key;
  }
  return out;
}

std::array<uint64_t, TCPSCOPE_SYSCTL_SLOTS> PolicyMaps::sysctl_writes() const {
  std::array<uint64_t, TCPSCOPE_SYSCTL_SLOTS> out{};
  int fd = bpf_map__fd(probe_.skeleton()->maps.sysctl_writes);
  for (uint32_t i = 0; i < out.size(); ++i) out[i] = percpu_sum(fd, i);
  return out;
}

}  // namespace tcpscope
