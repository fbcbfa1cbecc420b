#include "kernel/policy_maps.h"

#include <bpf/bpf.h>
#include <bpf/libbpf.h>
#include <errno.h>
#include <string.h>
#include <sys/stat.h>

#include <algorithm>
#include <cstdio>
#include <cstring>

#include "kernel/flow_probe.h"
#include "tcpscope.skel.h"

namespace tcpscope {

namespace {

// The initial network namespace's inode: pid 1's (the daemon may run in a
// namespace of its own), else the daemon's.
uint32_t host_netns_inode() {
  struct stat st {};
  if (stat("/proc/1/ns/net", &st) == 0 || stat("/proc/self/ns/net", &st) == 0) return static_cast<uint32_t>(st.st_ino);
  return 0;
}

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

PolicyMaps::~PolicyMaps() {
  if (sysctl_ring_) ring_buffer__free(sysctl_ring_);
}

bool PolicyMaps::write_cohort_weights(uint32_t gen, const std::vector<CohortWeights>& weights, std::string* error) {
  int fd = bpf_map__fd(probe_.skeleton()->maps.cohort_weights);
  auto key_of = [gen](const CohortWeights& w) {
    return tcpscope_cohort_key{TCPSCOPE_RULE_SLOT(gen, w.rule), w.cohort};
  };
  std::vector<tcpscope_cohort_key> stale;
  tcpscope_cohort_key key{}, next{};
  for (const tcpscope_cohort_key* prev = nullptr; bpf_map_get_next_key(fd, prev, &next) == 0; prev = &key) {
    key = next;
    if (key.rule_slot / TCPSCOPE_MAX_RULES != gen) continue;
    if (std::none_of(weights.begin(), weights.end(), [&](const CohortWeights& w) {
          const tcpscope_cohort_key k = key_of(w);
          return k.rule_slot == key.rule_slot && k.cohort == key.cohort;
        }))
      stale.push_back(key);
  }
  for (const auto& k : stale) bpf_map_delete_elem(fd, &k);
  for (const CohortWeights& w : weights) {
    if (w.rule >= TCPSCOPE_MAX_RULES || w.percent.empty() || w.percent.size() > TCPSCOPE_MAX_ARMS) continue;
    tcpscope_cohort_weights v{};
    uint32_t cum = 0;
    for (size_t a = 0; a < w.percent.size(); ++a) v.cum_weight[a] = cum += w.percent[a];
    const tcpscope_cohort_key k = key_of(w);
    if (bpf_map_update_elem(fd, &k, &v, BPF_ANY) != 0) {
      *error = "writing cohort weights (rule " + std::to_string(w.rule) + ", cohort " + std::to_string(w.cohort) +
               "): " + errno_text(errno);
      return false;
    }
  }
  return true;
}

int PolicyMaps::install(const CompiledPolicy& policy, uint16_t install_id, const std::vector<CohortWeights>& weights,
                        std::string* error) {
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
    // Before the rule can assign a flow: its flows' send calls must reach
    // their state from then on.
    if (policy.rules[i].bpf.follow_transfers && !probe_.note_rule_follows_transfers(error)) return -1;
    uint32_t slot = TCPSCOPE_RULE_SLOT(gen, i);
    if (bpf_map_update_elem(rules_fd, &slot, &policy.rules[i].bpf, BPF_ANY) != 0) {
      *error = "loading policy rule '" + policy.rules[i].name + "': " + errno_text(errno);
      return -1;
    }
  }
  if (!write_cohort_weights(gen, weights, error)) return -1;
  rules_naming_[gen].clear();
  for (const auto& rule : policy.rules)
    for (const auto& service : rule.services) rules_naming_[gen][service] = policy.rules_naming(service);
  installed_gen_[gen] = true;
  if (!write_service_cgroups(error)) return -1;
  std::vector<uint64_t> zeros(ncpus(), 0);
  for (bpf_map* counters : {skel->maps.cc_assignments, skel->maps.cc_revoked}) {
    int fd = bpf_map__fd(counters);
    for (uint32_t rule = 0; rule < TCPSCOPE_MAX_RULES; ++rule)
      for (uint32_t arm = 0; arm < TCPSCOPE_MAX_ARMS; ++arm) {
        uint32_t slot = TCPSCOPE_ASSIGN_SLOT(gen, rule, arm);
        bpf_map_update_elem(fd, &slot, zeros.data(), BPF_ANY);
      }
  }

  // 2. Publish: first the rule count of the new generation, then the flip,
  //    so a reader never sees the new generation without its rules.
  st.n_rules[gen] = static_cast<uint32_t>(policy.rules.size());
  st.install_id[gen] = install_id;
  st.default_rules[gen] = policy.default_rules;
  st.service_rules[gen] = policy.service_rules;
  st.app_override = policy.app_override;
  st.sysctl_guard = policy.sysctl_guard;
  if (!st.host_netns) st.host_netns = host_netns_inode();  // read while every capability is held
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
  // Mapped now, while the daemon still holds every capability it started with.
  if (!open_sysctl_log()) std::fprintf(stderr, "tcpscope: sysctl write log unavailable: %s\n", errno_text(errno).c_str());
  return static_cast<int>(gen);
}

bool PolicyMaps::write_service_cgroup(uint64_t cgroup_id, const std::string* service, std::string* error) {
  const int fd = bpf_map__fd(probe_.skeleton()->maps.service_cgroups);
  const std::string what = "cgroup " + std::to_string(cgroup_id) + (service ? " of " + *service : std::string());
  tcpscope_service_rules v{};
  if (bpf_map_lookup_elem(fd, &cgroup_id, &v) != 0 && errno != ENOENT) {
    *error = "reading service_cgroups (" + what + "): " + errno_text(errno);
    return false;
  }
  bool named = false;
  for (uint32_t gen = 0; gen < TCPSCOPE_POLICY_GENERATIONS; ++gen) {
    if (installed_gen_[gen]) {
      const auto it = service ? rules_naming_[gen].find(*service) : rules_naming_[gen].end();
      v.rules[gen] = it != rules_naming_[gen].end() ? it->second : 0;
    }
    named = named || v.rules[gen];
  }
  if (named ? bpf_map_update_elem(fd, &cgroup_id, &v, BPF_ANY) == 0
            : bpf_map_delete_elem(fd, &cgroup_id) == 0 || errno == ENOENT)
    return true;
  const int err = errno;
  *error = std::string(named ? "writing" : "deleting") + " service_cgroups (" + what + "): " + errno_text(err);
  if (err == E2BIG)
    *error += ", the map is full (" + std::to_string(bpf_map__max_entries(probe_.skeleton()->maps.service_cgroups)) +
              " cgroups)";
  return false;
}

bool PolicyMaps::write_service_cgroups(std::string* error) {
  const int fd = bpf_map__fd(probe_.skeleton()->maps.service_cgroups);
  std::vector<uint64_t> in_map;
  uint64_t key = 0, next = 0;
  for (const uint64_t* prev = nullptr; bpf_map_get_next_key(fd, prev, &next) == 0; prev = &key) {
    key = next;
    if (!service_of_cgroup_.count(key)) in_map.push_back(key);
  }
  for (const uint64_t id : in_map)
    if (!write_service_cgroup(id, nullptr, error)) return false;
  // The cgroups of services no rule names first: their entries go, so that
  // a full map makes room before it grows.
  auto named = [this](const std::string& service) {
    for (const auto& naming : rules_naming_)
      if (naming.count(service)) return true;
    return false;
  };
  for (const bool pass_named : {false, true})
    for (const auto& [id, service] : service_of_cgroup_)
      if (named(service) == pass_named && !write_service_cgroup(id, &service, error)) return false;
  return true;
}

bool PolicyMaps::set_service_cgroups(const std::vector<ServiceCgroup>& cgroups, std::string* error) {
  service_of_cgroup_.clear();
  for (const auto& c : cgroups) service_of_cgroup_[c.cgroup_id] = c.service;
  return write_service_cgroups(error);
}

bool PolicyMaps::add_service_cgroup(const ServiceCgroup& cgroup, std::string* error) {
  const std::string& service = service_of_cgroup_[cgroup.cgroup_id] = cgroup.service;
  return write_service_cgroup(cgroup.cgroup_id, &service, error);
}

bool PolicyMaps::remove_service_cgroup(uint64_t cgroup_id, std::string* error) {
  service_of_cgroup_.erase(cgroup_id);
  return write_service_cgroup(cgroup_id, nullptr, error);
}

nlohmann::json PolicyMaps::handover_state() const {
  return {{"installed", installed_once_}, {"cc_names", cc_names_}};
}

void PolicyMaps::take_over(const nlohmann::json& state) {
  installed_once_ = state.value("installed", false);
  if (state.contains("cc_names") && state["cc_names"].is_array())
    for (const auto& n : state["cc_names"])
      if (n.is_string() && cc_names_.size() < TCPSCOPE_MAX_CC_NAMES) cc_names_.push_back(n.get<std::string>());
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

RuleCounts PolicyMaps::rule_counts(uint32_t gen, const CompiledPolicy& policy) const {
  const int assigned_fd = bpf_map__fd(probe_.skeleton()->maps.cc_assignments);
  const int revoked_fd = bpf_map__fd(probe_.skeleton()->maps.cc_revoked);
  RuleCounts out(policy.rules.size());
  for (uint32_t i = 0; i < policy.rules.size(); ++i)
    for (uint32_t a = 0; a < policy.rules[i].arms.size(); ++a)
      out[i].push_back({percpu_sum(assigned_fd, TCPSCOPE_ASSIGN_SLOT(gen, i, a)),
                        percpu_sum(revoked_fd, TCPSCOPE_ASSIGN_SLOT(gen, i, a))});
  return out;
}

void PolicyMaps::sync_cc_names(const std::vector<std::string>& available, const std::vector<std::string>& allowed) {
  if (available == synced_names_ && allowed == synced_allowed_) return;  // read every tick, changes rarely
  synced_names_ = available;
  synced_allowed_ = allowed;
  int fd = bpf_map__fd(probe_.skeleton()->maps.cc_names);
  auto key_of = [](const std::string& name) {
    tcpscope_cc_name k{};
    std::strncpy(k.name, name.c_str(), sizeof(k.name) - 1);
    return k;
  };
  for (const auto& name : available) {
    if (name.empty() || name.size() >= sizeof(tcpscope_cc_name::name)) continue;
    auto it = std::find(cc_names_.begin(), cc_names_.end(), name);
    uint32_t idx;
    if (it != cc_names_.end()) {
      idx = static_cast<uint32_t>(it - cc_names_.begin()) + 1;
    } else {
      if (cc_names_.size() >= TCPSCOPE_MAX_CC_NAMES) continue;  // counted as "other"
      cc_names_.push_back(name);
      idx = static_cast<uint32_t>(cc_names_.size());
    }
    if (std::find(allowed.begin(), allowed.end(), name) != allowed.end()) idx |= TCPSCOPE_CC_ALLOWED;
    tcpscope_cc_name k = key_of(name);
    bpf_map_update_elem(fd, &k, &idx, BPF_ANY);
  }
  // No longer offered (module unloaded): calls naming it fail again.
  for (const auto& name : cc_names_) {
    if (std::find(available.begin(), available.end(), name) != available.end()) continue;
    tcpscope_cc_name k = key_of(name);
    bpf_map_delete_elem(fd, &k);
  }
}

std::vector<AppCcCount> PolicyMaps::app_cc_calls() const {
  std::vector<AppCcCount> out;
  int fd = bpf_map__fd(probe_.skeleton()->maps.app_cc_calls);
  for (uint32_t idx = 0; idx <= cc_names_.size() && idx <= TCPSCOPE_MAX_CC_NAMES; ++idx)
    for (uint32_t action = 0; action < TCPSCOPE_APP_CC_ACTIONS; ++action) {
      uint64_t v = percpu_sum(fd, TCPSCOPE_APP_CC_SLOT(idx, action));
      if (v) out.push_back({idx ? cc_names_[idx - 1] : "other", action, v});
    }
  return out;
}

SysctlWrites PolicyMaps::sysctl_writes() const {
  SysctlWrites out{};
  int fd = bpf_map__fd(probe_.skeleton()->maps.sysctl_writes);
  for (uint32_t i = 0; i < out.size(); ++i) out[i] = percpu_sum(fd, i);
  return out;
}

int PolicyMaps::on_sysctl_event(void* ctx, void* data, size_t size) {
  auto* self = static_cast<PolicyMaps*>(ctx);
  tcpscope_sysctl_event ev{};
  std::memcpy(&ev, data, std::min(size, sizeof(ev)));
  ev.comm[sizeof(ev.comm) - 1] = 0;
  ev.value[sizeof(ev.value) - 1] = 0;
  if (self->sysctl_sink_) self->sysctl_sink_(ev);
  return 0;
}

bool PolicyMaps::open_sysctl_log() {
  if (!sysctl_ring_)
    sysctl_ring_ =
        ring_buffer__new(bpf_map__fd(probe_.skeleton()->maps.sysctl_log), &PolicyMaps::on_sysctl_event, this, nullptr);
  return sysctl_ring_ != nullptr;
}

void PolicyMaps::drain_sysctl_log(const std::function<void(const tcpscope_sysctl_event&)>& f) {
  if (!open_sysctl_log()) return;
  sysctl_sink_ = f;
  ring_buffer__consume(sysctl_ring_);
  sysctl_sink_ = nullptr;
}

}  // namespace tcpscope
