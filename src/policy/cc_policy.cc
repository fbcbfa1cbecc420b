#include "policy/cc_policy.h"

#include <algorithm>
#include <cstring>
#include <map>
#include <set>
#include <unordered_map>

#include "enrich/asn_db.h"

namespace tcpscope {

bool policy_matches_asns(const Config& config) {
  for (const auto& r : config.cc_policy.rules)
    if (!r.match.asns.empty()) return true;
  return false;
}

namespace {

struct KeyHash {
  size_t operator()(const std::pair<std::array<uint8_t, 16>, int>& k) const {
    uint64_t a, b;
    std::memcpy(&a, k.first.data(), 8);
    std::memcpy(&b, k.first.data() + 8, 8);
    return std::hash<uint64_t>()(a * 0x9E3779B97F4A7C15ULL ^ b ^ static_cast<uint64_t>(k.second));
  }
};
using Key = std::pair<std::array<uint8_t, 16>, int>;

std::array<uint8_t, 16> masked(const std::array<uint8_t, 16>& a, int len) {
  std::array<uint8_t, 16> out{};
  for (int i = 0; i < 16; ++i) {
    int bits = std::min(8, std::max(0, len - 8 * i));
    out[i] = bits ? static_cast<uint8_t>(a[i] & (0xff00 >> bits)) : 0;
  }
  return out;
}

bool is_v4(const Key& k) {
  static const uint8_t kMapped[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
  return k.second >= 96 && std::memcmp(k.first.data(), kMapped, 12) == 0;
}

Key key_of(const IpAddr& addr, int len) {
  tcpscope_remote_key k = remote_key(addr, len);
  std::array<uint8_t, 16> a;
  std::memcpy(a.data(), k.addr, 16);
  return {masked(a, static_cast<int>(k.prefixlen)), static_cast<int>(k.prefixlen)};
}

// Prefixes of one kind (class, ASN, rule) with the lengths in use, so the
// "longest prefix of this kind containing P" walk only tries those lengths.
template <class V>
struct PrefixSet {
  std::unordered_map<Key, V, KeyHash> entries;
  std::set<int, std::greater<int>> lengths;

  // Keeps the first value for a prefix listed twice (the first class wins).
  bool add(const Key& k, V v) {
    lengths.insert(k.second);
    return entries.emplace(k, std::move(v)).second;
  }
  // IPv4 space (::ffff:0:0/96) is only covered by IPv4 prefixes (length
  // >= 96): an IPv6 prefix such as ::/0 must not reach IPv4 peers.
  template <class F>
  void for_each_containing(const Key& p, F f) const {
    const int min_len = is_v4(p) ? 96 : 0;
    for (int len : lengths) {
      if (len > p.second || len < min_len) continue;
      auto it = entries.find({masked(p.first, len), len});
      if (it != entries.end() && !f(it->second)) return;
    }
  }
};

}  // namespace

tcpscope_remote_key remote_key(const IpAddr& addr, int len) {
  tcpscope_remote_key k{};
  IpAddr a = addr.unmapped();
  if (a.family == 4) {
    k.addr[10] = k.addr[11] = 0xff;
    std::memcpy(&k.addr[12], a.bytes.data(), 4);
    k.prefixlen = static_cast<uint32_t>(96 + len);
  } else {
    std::memcpy(k.addr, a.bytes.data(), 16);
    k.prefixlen = static_cast<uint32_t>(len);
  }
  std::array<uint8_t, 16> m;
  std::memcpy(m.data(), k.addr, 16);
  m = masked(m, static_cast<int>(k.prefixlen));
  std::memcpy(k.addr, m.data(), 16);
  return k;
}

std::vector<std::pair<std::string, std::string>> unloaded_module_congestion_controls(
    const Config& config, const std::vector<std::string>& loaded) {
  std::vector<std::pair<std::string, std::string>> out;
  for (const auto& rule : config.cc_policy.rules) {
    std::vector<std::string> names;
    if (rule.cc) names.push_back(*rule.cc);
    if (rule.experiment)
      for (const auto& arm : rule.experiment->arms) names.push_back(arm.first);
    if (rule.controller) names.insert(names.end(), rule.controller->arms.begin(), rule.controller->arms.end());
    for (const auto& name : names) {
      if (std::find(loaded.begin(), loaded.end(), name) != loaded.end()) continue;
      if (std::none_of(out.begin(), out.end(), [&](const auto& e) { return e.first == name; }))
        out.emplace_back(name, rule.name);
    }
  }
  return out;
}

std::vector<std::string> CompiledPolicy::congestion_controls() const {
  std::set<std::string> names;
  for (const auto& r : rules)
    for (const auto& cc : r.arms) names.insert(cc);
  return {names.begin(), names.end()};
}

uint64_t CompiledPolicy::rules_naming(const std::string& service) const {
  uint64_t mask = 0;
  for (size_t i = 0; i < rules.size() && i < TCPSCOPE_MAX_RULES; ++i)
    if (std::find(rules[i].services.begin(), rules[i].services.end(), service) != rules[i].services.end())
      mask |= 1ULL << i;
  return mask;
}

std::vector<std::string> arm_names(const std::vector<std::string>& ccs) {
  std::vector<std::string> out;
  std::map<std::string, int> seen;
  for (const auto& cc : ccs) {
    const int n = ++seen[cc];
    out.push_back(n == 1 ? cc : cc + "#" + std::to_string(n));
  }
  return out;
}

std::optional<CompiledPolicy> compile_policy(const Config& config, const AsnDatabase* asn_db,
                                             std::string* error, const std::vector<uint32_t>& cohort_asns) {
  static_assert(kMaxControllerArms == TCPSCOPE_MAX_ARMS, "config and kernel agree on the arms");
  CompiledPolicy out;
  out.app_override = config.cc_policy.app_override == AppOverride::kEnforce ? TCPSCOPE_APP_ENFORCE
                                                                             : TCPSCOPE_APP_RESPECT;
  out.sysctl_guard = config.cc_policy.sysctl_guard == SysctlGuard::kDeny ? TCPSCOPE_SYSCTL_DENY
                                                                          : TCPSCOPE_SYSCTL_OBSERVE;
  for (const auto& c : config.peer_classes) out.class_names.push_back(c.name);
  const uint32_t default_class = static_cast<uint32_t>(out.class_names.size());
  out.class_names.push_back(config.default_peer_class);
  auto class_id = [&](const std::string& name) -> uint32_t {
    for (size_t i = 0; i < out.class_names.size(); ++i)
      if (out.class_names[i] == name) return static_cast<uint32_t>(i);
    return default_class;
  };

  const auto& rules = config.cc_policy.rules;
  if (rules.size() > TCPSCOPE_MAX_RULES) {
    *error = "cc_policy: " + std::to_string(rules.size()) + " rules, at most " +
             std::to_string(TCPSCOPE_MAX_RULES) + " are supported";
    return std::nullopt;
  }
  for (size_t i = 0; i < rules.size(); ++i) {
    const CcRule& r = rules[i];
    CompiledRule cr;
    cr.name = r.name;
    tcpscope_rule& b = cr.bpf;
    if (r.match.peer_class) {
      cr.match |= kMatchClass;
      cr.class_id = class_id(*r.match.peer_class);
    }
    if (!r.match.asns.empty()) cr.match |= kMatchAsn;
    if (!r.match.prefixes.empty()) cr.match |= kMatchPrefix;
    if (!r.match.services.empty()) {
      cr.match |= kMatchService;
      cr.services = r.match.services;
      out.service_rules |= 1ULL << i;
    }
    if (!r.match.lports.empty()) {
      if (r.match.lports.size() > TCPSCOPE_MAX_LPORTS) {
        *error = "cc_policy rule '" + r.name + "': at most " + std::to_string(TCPSCOPE_MAX_LPORTS) + " lports";
        return std::nullopt;
      }
      for (size_t j = 0; j < r.match.lports.size(); ++j) b.lports[j] = r.match.lports[j];
      b.n_lports = static_cast<uint32_t>(r.match.lports.size());
    }
    std::vector<std::pair<std::string, uint32_t>> arms;
    if (r.experiment) {
      cr.experiment = r.experiment->name;
      arms = r.experiment->arms;
    } else if (r.controller) {
      // Until the controller decides for a cohort, every arm gets an equal
      // share (the remainder to the first arms).
      cr.experiment = kControllerExperiment;
      const uint32_t k = static_cast<uint32_t>(r.controller->arms.size());
      for (uint32_t j = 0; j < k; ++j) arms.emplace_back(r.controller->arms[j], 100 / k + (j < 100 % k ? 1 : 0));
      b.cohort_mode = r.controller->cohort == CohortKind::kAsn ? TCPSCOPE_COHORT_ASN : TCPSCOPE_COHORT_PEER_CLASS;
    } else if (r.cc) {
      arms = {{*r.cc, 100}};
    }
    if (arms.empty() || arms.size() > TCPSCOPE_MAX_ARMS) {
      *error = "cc_policy rule '" + r.name + "': needs 1 to " + std::to_string(TCPSCOPE_MAX_ARMS) + " arms";
      return std::nullopt;
    }
    uint32_t cum = 0;
    for (size_t j = 0; j < arms.size(); ++j) {
      cum += arms[j].second;
      b.cum_weight[j] = cum;
      std::strncpy(b.cc[j], arms[j].first.c_str(), sizeof(b.cc[j]) - 1);
      cr.arms.push_back(arms[j].first);
    }
    b.n_arms = static_cast<uint32_t>(arms.size());
    // A controller's evidence is its flows' transfers, all of them.
    b.follow_transfers = r.controller || (r.experiment && r.experiment->follow_transfers);
    cr.arm_names = arm_names(cr.arms);
    out.rules.push_back(std::move(cr));
  }
  if (rules.empty()) return out;  // nothing for the kernel to decide

  // (A peer class listing ASNs without ASN data simply never matches by ASN,
  // for the daemon's classifier as for the kernel; a rule that does is a mistake.)
  if (!asn_db && policy_matches_asns(config)) {
    *error = kPolicyNeedsAsnData;
    return std::nullopt;
  }

  // The three kinds of prefixes that decide a remote address's fate.
  PrefixSet<uint32_t> class_prefixes;   // -> class id
  PrefixSet<uint32_t> asn_prefixes;     // -> ASN (disjoint, from prefixes_of)
  PrefixSet<uint64_t> rule_prefixes;    // -> rule bit mask
  std::map<uint32_t, uint32_t> asn_class;  // ASN -> first class listing it
  std::map<uint32_t, uint64_t> asn_rules;  // ASN -> rules listing it
  std::vector<Key> all;

  for (size_t ci = 0; ci < config.peer_classes.size(); ++ci) {
    const auto& c = config.peer_classes[ci];
    for (const auto& p : c.prefixes) {
      Key k = key_of(p.addr, p.len);
      class_prefixes.add(k, static_cast<uint32_t>(ci));
      all.push_back(k);
    }
    for (uint32_t asn : c.asns) asn_class.emplace(asn, static_cast<uint32_t>(ci));
  }
  for (size_t i = 0; i < rules.size(); ++i) {
    for (const auto& p : rules[i].match.prefixes) {
      Key k = key_of(p.addr, p.len);
      auto it = rule_prefixes.entries.find(k);
      if (it == rule_prefixes.entries.end())
        rule_prefixes.add(k, 1ULL << i);
      else
        it->second |= 1ULL << i;
      all.push_back(k);
    }
    for (uint32_t asn : rules[i].match.asns) asn_rules[asn] |= 1ULL << i;
  }
  std::set<uint32_t> relevant;
  for (const auto& [asn, _] : asn_class) relevant.insert(asn);
  for (const auto& [asn, _] : asn_rules) relevant.insert(asn);
  relevant.insert(cohort_asns.begin(), cohort_asns.end());
  relevant.erase(0);
  if (asn_db) {
    for (uint32_t asn : relevant)
      for (const Prefix& p : asn_db->prefixes_of(asn)) {
        Key k = key_of(p.addr, p.len);
        asn_prefixes.add(k, asn);
        all.push_back(k);
      }
  }
  all.push_back(key_of(*IpAddr::parse("::"), 0));  // everything else
  // All of IPv4: so that no IPv4 peer falls under a short IPv6 entry.
  all.push_back(key_of(*IpAddr::parse("0.0.0.0"), 0));

  std::sort(all.begin(), all.end());
  all.erase(std::unique(all.begin(), all.end()), all.end());
  out.remote.reserve(all.size());
  for (const Key& k : all) {
    // Every address under k but outside more specific entries shares these.
    RemoteEntry e;
    e.key.prefixlen = static_cast<uint32_t>(k.second);
    std::memcpy(e.key.addr, k.first.data(), 16);
    uint32_t asn = 0;
    asn_prefixes.for_each_containing(k, [&](uint32_t a) { asn = a; return false; });
    std::optional<uint32_t> cls;
    class_prefixes.for_each_containing(k, [&](uint32_t c) { cls = c; return false; });
    if (!cls) {
      auto it = asn_class.find(asn);
      cls = it != asn_class.end() && asn ? it->second : default_class;
    }
    e.class_id = *cls;
    e.asn = asn;
    rule_prefixes.for_each_containing(k, [&](uint64_t m) { e.prefix_rules |= m; return true; });
    if (asn) {
      auto it = asn_rules.find(asn);
      if (it != asn_rules.end()) e.asn_rules = it->second;
    }
    e.info.rules = rules_mask(out.rules, e.class_id, e.prefix_rules, e.asn_rules);
    e.info.asn = asn;
    e.info.class_id = e.class_id;
    if (k.second == 0) out.default_rules = e.info.rules;  // ::/0
    out.remote.push_back(e);
  }
  return out;
}

uint64_t rules_mask(const std::vector<CompiledRule>& rules, uint32_t class_id, uint64_t prefix_rules,
                    uint64_t asn_rules) {
  uint64_t mask = 0;
  for (size_t i = 0; i < rules.size() && i < TCPSCOPE_MAX_RULES; ++i) {
    const CompiledRule& r = rules[i];
    if ((r.match & kMatchClass) && r.class_id != class_id) continue;
    if ((r.match & kMatchAsn) && !(asn_rules >> i & 1)) continue;
    if ((r.match & kMatchPrefix) && !(prefix_rules >> i & 1)) continue;
    mask |= 1ULL << i;
  }
  return mask;
}

const RemoteEntry* lookup_remote(const CompiledPolicy& policy, const IpAddr& addr) {
  tcpscope_remote_key full = remote_key(addr, addr.unmapped().family == 4 ? 32 : 128);
  const RemoteEntry* best = nullptr;
  for (const auto& e : policy.remote) {
    std::array<uint8_t, 16> a;
    std::memcpy(a.data(), full.addr, 16);
    a = masked(a, static_cast<int>(e.key.prefixlen));
    if (std::memcmp(a.data(), e.key.addr, 16) == 0 && (!best || e.key.prefixlen > best->key.prefixlen)) best = &e;
  }
  return best;
}

namespace {

// As the sockops program checks it: no local ports is any local port.
bool lport_matches(const tcpscope_rule& r, uint16_t lport) {
  if (!r.n_lports) return true;
  for (uint32_t j = 0; j < r.n_lports && j < TCPSCOPE_MAX_LPORTS; ++j)
    if (r.lports[j] == lport) return true;
  return false;
}

}  // namespace

int match_rule(const CompiledPolicy& policy, const IpAddr& remote, uint16_t lport,
               const std::vector<std::string>& services) {
  const RemoteEntry* e = lookup_remote(policy, remote);
  if (!e) return -1;  // rules exist only with the ::/0 entry
  for (size_t i = 0; i < policy.rules.size(); ++i) {
    const CompiledRule& r = policy.rules[i];
    if ((r.match & kMatchClass) && r.class_id != e->class_id) continue;
    if ((r.match & kMatchAsn) && !(e->asn_rules >> i & 1)) continue;
    if ((r.match & kMatchPrefix) && !(e->prefix_rules >> i & 1)) continue;
    if ((r.match & kMatchService) && std::none_of(services.begin(), services.end(), [&](const std::string& s) {
          return std::find(r.services.begin(), r.services.end(), s) != r.services.end();
        }))
      continue;
    if (!lport_matches(r.bpf, lport)) continue;
    return static_cast<int>(i);
  }
  return -1;
}

int match_rule_masked(const CompiledPolicy& policy, const IpAddr& remote, uint16_t lport,
                      const std::vector<std::string>& services) {
  if (policy.rules.empty()) return -1;  // n_rules == 0: the kernel stops here
  const RemoteEntry* e = lookup_remote(policy, remote);
  uint64_t mask = e ? e->info.rules : policy.default_rules;
  if (mask & policy.service_rules) {
    uint64_t owned = 0;  // the OR of service_cgroups' masks over the socket's cgroups
    for (const auto& s : services) owned |= policy.rules_naming(s);
    mask &= ~policy.service_rules | owned;
  }
  while (mask) {
    int i = __builtin_ctzll(mask);
    mask &= mask - 1;
    if (static_cast<size_t>(i) >= policy.rules.size()) return -1;  // no such rule in the map
    if (lport_matches(policy.rules[i].bpf, lport)) return i;
  }
  return -1;
}

}  // namespace tcpscope
