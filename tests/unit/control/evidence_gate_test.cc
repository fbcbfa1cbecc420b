#include "control/evidence_gate.h"

#include <gtest/gtest.h>

#include <fstream>

namespace tcpscope {
namespace {

IpAddr ip(const char* text) { return *IpAddr::parse(text); }

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
    EvidenceGate gate;
    gate.lports = c.rule_lports;
    EXPECT_EQ(gate.judge(c.dir, ip(c.laddr), c.lport, ip(c.raddr)), c.verdict) << c.what;
  }
}

TEST(EvidenceGate, FollowsTheHostsUnprivilegedPortStart) {
  EvidenceGate gate;
  gate.unprivileged_port_start = 80;
  EXPECT_EQ(gate.judge(Direction::kPassive, ip("198.18.0.1"), 79, ip("198.18.1.2")), EvidenceVerdict::kCounts);
  EXPECT_EQ(gate.judge(Direction::kPassive, ip("198.18.0.1"), 80, ip("198.18.1.2")), EvidenceVerdict::kPort);
  gate.unprivileged_port_start = 0;  // anyone may bind anything: no port is the service's by privilege
  EXPECT_EQ(gate.judge(Direction::kPassive, ip("198.18.0.1"), 1, ip("198.18.1.2")), EvidenceVerdict::kPort);
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
}

}  // namespace
}  // namespace tcpscope
