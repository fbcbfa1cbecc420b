// Compiles the config's cc_policy (with the peer classes and ASN data it
// refers to) into the flat tables the sockops program looks up: a rule array
// and one longest-prefix trie over remote addresses. Everything that needs a
// decision (which class, which ASN, which rule prefixes) is decided here, once
// per (re)load, so the kernel side does a trie lookup and a short rule scan.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "config.h"
#include "tcpscope/policy.h"

namespace tcpscope {

class AsnDatabase;

struct CompiledRule {
  std::string name;
  std::optional<std::string> experiment;
  std::vector<std::string> arms;  // CC per arm (one for a plain `cc:` rule)
  tcpscope_rule bpf{};
};

struct RemoteEntry {
  tcpscope_remote_key key{};
  tcpscope_remote_info info{};
};

struct CompiledPolicy {
  std::vector<CompiledRule> rules;
  std::vector<std::string> class_names;  // class_id -> peer class
  std::vector<RemoteEntry> remote;       // empty when there are no rules
  uint32_t app_override = TCPSCOPE_APP_RESPECT;
  uint32_t sysctl_guard = TCPSCOPE_SYSCTL_OBSERVE;

  // Every CC a rule can set (the kernel must have them loaded: BPF cannot
  // make it load a module).
  std::vector<std::string> congestion_controls() const;
};

// `asn_db` may be null when no ASN data is configured; rules or classes that
// match on ASNs then make this fail. Returns nullopt + one-line error.
std::optional<CompiledPolicy> compile_policy(const Config& config, const AsnDatabase* asn_db,
                                             std::string* error);

// The trie key of an address or prefix: IPv4 as ::ffff:a.b.c.d, length +96.
tcpscope_remote_key remote_key(const IpAddr& addr, int len);

// What the kernel will find for `addr`: the entry with the longest prefix
// containing it (a reference implementation, for tests and `policy show`).
const RemoteEntry* lookup_remote(const CompiledPolicy& policy, const IpAddr& addr);

// The rule the kernel picks for a remote address and local port, or -1.
int match_rule(const CompiledPolicy& policy, const IpAddr& remote, uint16_t lport);

}  // namespace tcpscope
