// Compiles the config's cc_policy (with the peer classes and ASN data it
// refers to) into the flat tables the sockops program looks up: a rule array
// and one longest-prefix trie over remote addresses. Everything that needs a
// decision (which class, which ASN, which rule prefixes) is decided here, once
// per (re)load, down to a mask per trie entry of the rules that can match
// there: the kernel does a trie lookup and visits only those rules.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "config/config.h"
#include "tcpscope/policy.h"

namespace tcpscope {

class AsnDatabase;

// A rule's conditions (CompiledRule::match): every one set must hold. The
// first three are on the remote address; kMatchService on the socket's
// owner. Its local ports are in `bpf` (none: any port).
enum : uint32_t {
  kMatchClass = 1u << 0,
  kMatchAsn = 1u << 1,
  kMatchPrefix = 1u << 2,
  kMatchService = 1u << 3,
};

struct CompiledRule {
  std::string name;
  std::optional<std::string> experiment;  // kControllerExperiment for a controller rule
  std::vector<std::string> arms;       // CC per arm (one for a plain `cc:` rule)
  std::vector<std::string> arm_names;  // what records call each arm: its CC, "cc#2" for a CC listed twice
  // Decided here, into each trie entry's rules mask: only the daemon reads
  // them. The kernel gets `bpf` and checks its local ports itself.
  uint32_t match = 0;     // kMatch*
  uint32_t class_id = 0;  // with kMatchClass: index into class_names
  std::vector<std::string> services;  // with kMatchService: the services' names
  tcpscope_rule bpf{};
};

struct RemoteEntry {
  tcpscope_remote_key key{};
  tcpscope_remote_info info{};  // what the kernel gets: the rules mask
  // What info.rules is made from (daemon side only, for the reference
  // matcher): the peer class (index into class_names) and ASN of these
  // addresses, and bit i: rule i's prefixes / asns contain them.
  uint32_t class_id = 0;
  uint32_t asn = 0;  // 0 when the ASN is not one any rule, class or controller cohort names
  uint64_t prefix_rules = 0;
  uint64_t asn_rules = 0;
};

// A controller's weights for one cohort of one rule (percent per arm, summing
// to 100), as the kernel's cohort_weights map holds them.
struct CohortWeights {
  uint32_t rule = 0;    // index in the policy's rules
  uint32_t cohort = 0;  // an ASN, or TCPSCOPE_COHORT_CLASS_KEY(class id)
  std::vector<uint32_t> percent;
  bool operator==(const CohortWeights& o) const {
    return rule == o.rule && cohort == o.cohort && percent == o.percent;
  }
};

struct CompiledPolicy {
  std::vector<CompiledRule> rules;
  std::vector<std::string> class_names;  // class_id -> peer class
  std::vector<RemoteEntry> remote;       // empty when there are no rules
  uint64_t default_rules = 0;            // rules mask of an address no entry covers
  // The rules with kMatchService: the kernel drops them from an address's
  // mask unless the socket's cgroup has their bits (service_cgroups).
  uint64_t service_rules = 0;
  uint32_t app_override = TCPSCOPE_APP_RESPECT;
  uint32_t sysctl_guard = TCPSCOPE_SYSCTL_OBSERVE;

  // Every CC a rule can set (the kernel must have them loaded: BPF cannot
  // make it load a module).
  std::vector<std::string> congestion_controls() const;
  // Bit i: rule i names `service`; what service_cgroups holds for each of
  // its cgroups.
  uint64_t rules_naming(const std::string& service) const;
};

// The congestion controls `config` names that `loaded` lacks (present only as
// modules on disk), each with the first rule naming it: the daemon loads them
// at start, but under the packaged systemd unit (ProtectKernelModules=yes
// hides /lib/modules) its own config check cannot find them and refuses the
// config. check-config warns about each.
std::vector<std::pair<std::string, std::string>> unloaded_module_congestion_controls(
    const Config& config, const std::vector<std::string>& loaded);

// Whether a rule matches on ASNs, which needs ASN data (asn.mmdb or
// asn.prefix_file): without it compile_policy() fails with this message,
// and check-config says so before a daemon does.
bool policy_matches_asns(const Config& config);
constexpr const char* kPolicyNeedsAsnData =
    "cc_policy: a rule matches on asns, but no ASN data is configured (asn.mmdb / asn.prefix_file)";

// `asn_db` may be null when no ASN data is configured; rules or classes that
// match on ASNs then make this fail. `cohort_asns`: the ASNs controllers keep
// weights for; the trie then names them (tcpscope_remote_info.asn) so the
// kernel finds their weights. Returns nullopt + one-line error.
std::optional<CompiledPolicy> compile_policy(const Config& config, const AsnDatabase* asn_db,
                                             std::string* error, const std::vector<uint32_t>& cohort_asns = {});

// The arms of a rule as records name them: each CC, and "cc#N" for the N-th
// time one CC is listed (an A/A run: arms [cubic, cubic]).
std::vector<std::string> arm_names(const std::vector<std::string>& ccs);

// The trie key of an address or prefix: IPv4 as ::ffff:a.b.c.d, length +96.
tcpscope_remote_key remote_key(const IpAddr& addr, int len);

// What the kernel will find for `addr`: the entry with the longest prefix
// containing it (a reference implementation, for tests and `policy show`).
const RemoteEntry* lookup_remote(const CompiledPolicy& policy, const IpAddr& addr);

// The rule the policy picks for a remote address and local port, or -1: the
// reference, every rule in order with each of its conditions. `services`:
// the names of the services owning the socket's cgroup and its ancestors.
int match_rule(const CompiledPolicy& policy, const IpAddr& remote, uint16_t lport,
               const std::vector<std::string>& services = {});

// The same decision made as the sockops program makes it: the entry's rules
// mask less the service rules the socket's cgroups do not have, set bits
// lowest first, local ports. Must agree with match_rule.
int match_rule_masked(const CompiledPolicy& policy, const IpAddr& remote, uint16_t lport,
                      const std::vector<std::string>& services = {});

// Bit i: rule i's peer_class, asns and prefixes conditions hold for an
// address with this class and these prefix / ASN rule sets.
uint64_t rules_mask(const std::vector<CompiledRule>& rules, uint32_t class_id, uint64_t prefix_rules,
                    uint64_t asn_rules);

}  // namespace tcpscope
