#include "control/evidence_gate.h"

#include <gtest/gtest.h>

#include <fstream>
#include <memory>

namespace tcpscope {
namespace {

IpAddr ip(const char* text) { return *IpAddr::parse(text); }

constexpr uint32_t kService = 4026531840, kOther = 4026532999;  // namespaces, by inode

// A gate of the service's namespace, whose local routing table has its
// addresses, 127/8, ::1 and an AnyIP range.
EvidenceGate service_gate() {
  EvidenceGate gate;
  gate.netns = {kService};
  auto trie = std::make_shared<PrefixTrie<uint8_t>>();
  for (const char* p : {"198.18.0.1/32", "198.18.0.9/32", "127.0.0.0/8", "::1/128", "fd00:5::/64"}) {
    const Prefix prefix = *Prefix::parse(p);
    trie->insert(prefix.addr, prefix.len, 1);
  }
  auto local = std::make_shared<LocalAddresses>();
  (*local)[kService] = trie;
  gate.local = local;
  return gate;
}

struct Case {
  const char* what;
  Direction dir;
  const char* laddr;
  uint16_t lport;
  const char* raddr;
  std::vector<uint16_t> rule_lports;
  EvidenceVerdict verdict;
};

TEST(EvidenceGate, OnlyTheServicesAcceptedSocketsFromOtherHostsCount) {
  const Case cases[] = {
      {"served on 443", Direction::kPassive, "198.18.0.1", 443, "198.18.1.2", {}, EvidenceVerdict::kCounts},
      {"served over IPv6", Direction::kPassive, "fd00::1", 443, "fd00:1::2", {}, EvidenceVerdict::kCounts},
      {"outgoing, to a client address", Direction::kActive, "198.18.0.1", 40000, "198.18.1.2", {},
       EvidenceVerdict::kOutgoing},
      {"outgoing from port 443", Direction::kActive, "198.18.0.1", 443, "198.18.1.2", {}, EvidenceVerdict::kOutgoing},
      {"accepted on a port anyone can bind", Direction::kPassive, "198.18.0.1", 8080, "198.18.1.2", {},
       EvidenceVerdict::kPort},
      {"accepted on the rule's port", Direction::kPassive, "198.18.0.1", 8080, "198.18.1.2", {8080, 8443},
       EvidenceVerdict::kCounts},
      {"a privileged port the rule does not name", Direction::kPassive, "198.18.0.1", 443, "198.18.1.2", {8080},
       EvidenceVerdict::kPort},
      {"a client on this host, same address", Direction::kPassive, "198.18.0.1", 443, "198.18.0.1", {},
       EvidenceVerdict::kLocalPeer},
      {"a client over loopback", Direction::kPassive, "127.0.0.1", 443, "127.0.0.5", {}, EvidenceVerdict::kLocalPeer},
      {"a client over IPv6 loopback", Direction::kPassive, "::1", 443, "::1", {}, EvidenceVerdict::kLocalPeer},
  };
  for (const Case& c : cases) {
    EvidenceGate gate = service_gate();
    gate.lports = c.rule_lports;
    EXPECT_EQ(gate.judge(c.dir, kService, ip(c.laddr), c.lport, ip(c.raddr)), c.verdict) << c.what;
  }
}

TEST(EvidenceGate, OnlyTheNamespacesTheRuleNamesCount) {
  const EvidenceGate gate = service_gate();
  EXPECT_EQ(gate.judge(Direction::kPassive, kService, ip("198.18.0.1"), 443, ip("198.18.1.2")),
            EvidenceVerdict::kCounts);
  // A user's own namespace (unshare -rn): any address, port 443 is theirs there.
  EXPECT_EQ(gate.judge(Direction::kPassive, kOther, ip("198.18.0.1"), 443, ip("198.18.1.2")), EvidenceVerdict::kNetns);
  EvidenceGate none;  // no namespace resolved: nothing counts
  EXPECT_EQ(none.judge(Direction::kPassive, kService, ip("198.18.0.1"), 443, ip("198.18.1.2")), EvidenceVerdict::kNetns);
}

TEST(EvidenceGate, APeerAtAnyAddressOfTheHostIsLocal) {
  const EvidenceGate gate = service_gate();
  for (const char* peer : {"198.18.0.9", "127.0.0.5", "fd00:5::77"})
    EXPECT_EQ(gate.judge(Direction::kPassive, kService, ip("198.18.0.1"), 443, ip(peer)), EvidenceVerdict::kLocalPeer)
        << peer;
  EXPECT_EQ(gate.judge(Direction::kPassive, kService, ip("198.18.0.1"), 443, ip("198.18.0.10")),
            EvidenceVerdict::kCounts);
  EXPECT_EQ(gate.judge(Direction::kPassive, kService, ip("fd00::1"), 443, ip("fd00:6::1")), EvidenceVerdict::kCounts);
}

TEST(EvidenceGate, FollowsTheHostsUnprivilegedPortStart) {
  EvidenceGate gate = service_gate();
  gate.unprivileged_port_start = 80;
  EXPECT_EQ(gate.judge(Direction::kPassive, kService, ip("198.18.0.1"), 79, ip("198.18.1.2")), EvidenceVerdict::kCounts);
  EXPECT_EQ(gate.judge(Direction::kPassive, kService, ip("198.18.0.1"), 80, ip("198.18.1.2")), EvidenceVerdict::kPort);
  gate.unprivileged_port_start = 0;  // anyone may bind anything: no port is the service's by privilege
  EXPECT_EQ(gate.judge(Direction::kPassive, kService, ip("198.18.0.1"), 1, ip("198.18.1.2")), EvidenceVerdict::kPort);
}

TEST(EvidenceGate, ReadsThisHostsSetting) {
  std::ifstream f("/proc/sys/net/ipv4/ip_unprivileged_port_start");
  long v = 0;
  ASSERT_TRUE(f >> v);
  EXPECT_EQ(unprivileged_port_start(), v);
}

TEST(EvidenceGate, NamesEveryVerdict) {
  EXPECT_STREQ(to_string(EvidenceVerdict::kCounts), "counts");
  EXPECT_STREQ(to_string(EvidenceVerdict::kOutgoing), "outgoing");
  EXPECT_STREQ(to_string(EvidenceVerdict::kPort), "port");
  EXPECT_STREQ(to_string(EvidenceVerdict::kLocalPeer), "local_peer");
  EXPECT_STREQ(to_string(EvidenceVerdict::kConnectionCap), "connection_cap");
  EXPECT_STREQ(to_string(EvidenceVerdict::kNetns), "netns");
}

}  // namespace
}  // namespace tcpscope
