#include "control/evidence_gate.h"

#include <gtest/gtest.h>

#include <memory>
#include <optional>
#include <string>

namespace tcpscope {
namespace {

IpAddr ip(const char* text) { return *IpAddr::parse(text); }

constexpr uint32_t kService = 4026531840, kOther = 4026532999;  // namespaces, by inode
constexpr uint32_t kWwwData = 33, kNobody = 65534;

// A socket root accepted, in a namespace with the kernel's default bound.
constexpr SocketOwner kRootsSocket{0, 1024};

EvidenceVerdict judge(const EvidenceGate& gate, Direction dir, uint32_t ns, const IpAddr& laddr, uint16_t lport,
                      const IpAddr& raddr, SocketOwner socket = kRootsSocket,
                      std::optional<uint32_t> service_uid = std::nullopt, const std::string& service = "") {
  return gate.judge(dir, ns, laddr, lport, raddr, socket, service, service_uid);
}

std::shared_ptr<const PrefixTrie<uint8_t>> table(std::initializer_list<const char*> prefixes) {
  auto trie = std::make_shared<PrefixTrie<uint8_t>>();
  for (const char* p : prefixes) {
    const Prefix prefix = *Prefix::parse(p);
    trie->insert(prefix.addr, prefix.len, 1);
  }
  return trie;
}

// The daemon's namespace's local routing table: the host's addresses, 127/8,
// ::1 and an AnyIP range.
std::shared_ptr<const PrefixTrie<uint8_t>> host_table() {
  return table({"198.18.0.1/32", "198.18.0.9/32", "127.0.0.0/8", "::1/128", "fd00:5::/64"});
}

// A gate of the service in the daemon's own namespace.
EvidenceGate service_gate() {
  EvidenceGate gate;
  gate.netns = {kService};
  auto local = std::make_shared<LocalAddresses>();
  local->by_netns[kService] = host_table();
  local->host_netns = kService;
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
    EXPECT_EQ(judge(gate, c.dir, kService, ip(c.laddr), c.lport, ip(c.raddr)), c.verdict) << c.what;
  }
}

TEST(EvidenceGate, OnlyTheNamespacesTheRuleNamesCount) {
  const EvidenceGate gate = service_gate();
  EXPECT_EQ(judge(gate, Direction::kPassive, kService, ip("198.18.0.1"), 443, ip("198.18.1.2")),
            EvidenceVerdict::kCounts);
  // A user's own namespace (unshare -rn): any address, port 443 is theirs there.
  EXPECT_EQ(judge(gate, Direction::kPassive, kOther, ip("198.18.0.1"), 443, ip("198.18.1.2")), EvidenceVerdict::kNetns);
  EvidenceGate none;  // no namespace resolved: nothing counts
  EXPECT_EQ(judge(none, Direction::kPassive, kService, ip("198.18.0.1"), 443, ip("198.18.1.2")), EvidenceVerdict::kNetns);
}

TEST(EvidenceGate, APeerAtAnyAddressOfTheHostIsLocal) {
  const EvidenceGate gate = service_gate();
  for (const char* peer : {"198.18.0.9", "127.0.0.5", "fd00:5::77"})
    EXPECT_EQ(judge(gate, Direction::kPassive, kService, ip("198.18.0.1"), 443, ip(peer)), EvidenceVerdict::kLocalPeer)
        << peer;
  EXPECT_EQ(judge(gate, Direction::kPassive, kService, ip("198.18.0.1"), 443, ip("198.18.0.10")),
            EvidenceVerdict::kCounts);
  EXPECT_EQ(judge(gate, Direction::kPassive, kService, ip("fd00::1"), 443, ip("fd00:6::1")), EvidenceVerdict::kCounts);
}

// A service in a container's namespace (kOther), reached from the host over
// a veth (as over docker0): the host's end, 198.18.0.1, and every other
// address of the host are in the daemon's table, not in the container's.
TEST(EvidenceGate, InAnotherNamespaceTheHostsAddressesAreLocalToo) {
  EvidenceGate gate;
  gate.netns = {kOther};
  auto local = std::make_shared<LocalAddresses>();
  local->by_netns[kService] = host_table();
  local->by_netns[kOther] = table({"198.18.0.2/32", "198.18.7.7/32", "127.0.0.0/8", "::1/128"});
  local->host_netns = kService;
  gate.local = local;
  const IpAddr service = ip("198.18.0.2");
  for (const char* host : {"198.18.0.1", "198.18.0.9", "fd00:5::77"})
    EXPECT_EQ(judge(gate, Direction::kPassive, kOther, service, 443, ip(host)), EvidenceVerdict::kLocalPeer) << host;
  // The container's own other address is local as before.
  EXPECT_EQ(judge(gate, Direction::kPassive, kOther, service, 443, ip("198.18.7.7")), EvidenceVerdict::kLocalPeer);
  // A client routed through the host is not the host.
  EXPECT_EQ(judge(gate, Direction::kPassive, kOther, service, 443, ip("198.18.1.2")), EvidenceVerdict::kCounts);
  EXPECT_EQ(judge(gate, Direction::kPassive, kOther, ip("fd00:9::2"), 443, ip("fd00:6::1")), EvidenceVerdict::kCounts);
  // The container's addresses are not the host's: a service in the daemon's
  // namespace is judged by the daemon's table alone.
  gate.netns = {kService};
  EXPECT_EQ(judge(gate, Direction::kPassive, kService, ip("198.18.0.1"), 443, ip("198.18.7.7")),
            EvidenceVerdict::kCounts);
}

TEST(EvidenceGate, WithoutTheDaemonsTableOrItsOwnNothingCounts) {
  EvidenceGate gate;
  gate.netns = {kOther};
  auto local = std::make_shared<LocalAddresses>();
  local->by_netns[kOther] = table({"198.18.0.2/32", "127.0.0.0/8"});
  local->host_netns = kService;  // its table unreadable
  gate.local = local;
  EXPECT_EQ(judge(gate, Direction::kPassive, kOther, ip("198.18.0.2"), 443, ip("198.18.1.2")), EvidenceVerdict::kNetns);
  auto unknown_host = std::make_shared<LocalAddresses>(*local);
  unknown_host->host_netns = 0;  // the daemon's namespace could not be opened
  gate.local = unknown_host;
  EXPECT_EQ(judge(gate, Direction::kPassive, kOther, ip("198.18.0.2"), 443, ip("198.18.1.2")), EvidenceVerdict::kNetns);
  auto no_own = std::make_shared<LocalAddresses>();
  no_own->by_netns[kService] = table({"198.18.0.1/32"});
  no_own->host_netns = kService;
  gate.local = no_own;
  EXPECT_EQ(judge(gate, Direction::kPassive, kOther, ip("198.18.0.2"), 443, ip("198.18.1.2")), EvidenceVerdict::kNetns);
}

// Each namespace has its own net.ipv4.ip_unprivileged_port_start: a
// socket is judged by its own namespace's, as its record carries it.
TEST(EvidenceGate, EachSocketIsJudgedByItsOwnNamespacesUnprivilegedPortStart) {
  EvidenceGate gate = service_gate();
  const SocketOwner bound_80{kNobody, 80}, bound_2000{kNobody, 2000}, anyone{kNobody, 0};
  EXPECT_EQ(judge(gate, Direction::kPassive, kService, ip("198.18.0.1"), 79, ip("198.18.1.2"), bound_80),
            EvidenceVerdict::kCounts);
  EXPECT_EQ(judge(gate, Direction::kPassive, kService, ip("198.18.0.1"), 80, ip("198.18.1.2"), bound_80),
            EvidenceVerdict::kPort);
  EXPECT_EQ(judge(gate, Direction::kPassive, kService, ip("198.18.0.1"), 1500, ip("198.18.1.2"), bound_2000),
            EvidenceVerdict::kCounts);
  // 0 lets anyone bind anything: no port is the service's by privilege.
  EXPECT_EQ(judge(gate, Direction::kPassive, kService, ip("198.18.0.1"), 1, ip("198.18.1.2"), anyone),
            EvidenceVerdict::kPort);
  // Named in lports, a port anyone may bind in its namespace is a
  // privileged process's only when root accepted on it.
  gate.lports = {443};
  EXPECT_EQ(judge(gate, Direction::kPassive, kService, ip("198.18.0.1"), 443, ip("198.18.1.2"), anyone),
            EvidenceVerdict::kService);
  EXPECT_EQ(judge(gate, Direction::kPassive, kService, ip("198.18.0.1"), 443, ip("198.18.1.2"), SocketOwner{0, 0}),
            EvidenceVerdict::kCounts);
}

// A port is a number, not who listens: another user listens on [::] and
// the service's unprivileged port (IPV6_V6ONLY) beside its IPv4 listener.
TEST(EvidenceGate, OnlyTheServicesUsersSocketsCount) {
  EvidenceGate gate = service_gate();
  gate.lports = {8080};
  const SocketOwner service{kWwwData, 1024}, other{kNobody, 1024};
  const IpAddr client4 = ip("198.18.1.2"), client6 = ip("fd00:1::2");
  EXPECT_EQ(judge(gate, Direction::kPassive, kService, ip("198.18.0.1"), 8080, client4, service, kWwwData),
            EvidenceVerdict::kCounts);
  EXPECT_EQ(judge(gate, Direction::kPassive, kService, ip("fd00::1"), 8080, client6, other, kWwwData),
            EvidenceVerdict::kService);
  // Root is not the service either when the rule names its user.
  EXPECT_EQ(judge(gate, Direction::kPassive, kService, ip("fd00::1"), 8080, client6, kRootsSocket, kWwwData),
            EvidenceVerdict::kService);
  // Without evidence_user: root's sockets count, another user's do not.
  EXPECT_EQ(judge(gate, Direction::kPassive, kService, ip("198.18.0.1"), 8080, client4, kRootsSocket),
            EvidenceVerdict::kCounts);
  EXPECT_EQ(judge(gate, Direction::kPassive, kService, ip("fd00::1"), 8080, client6, other), EvidenceVerdict::kService);
  EXPECT_EQ(judge(gate, Direction::kPassive, kService, ip("198.18.0.1"), 8080, client4, service),
            EvidenceVerdict::kService);
  // On a privileged port any user's accepted socket is the service's: only
  // a privileged process could listen there.
  gate.lports = {443};
  EXPECT_EQ(judge(gate, Direction::kPassive, kService, ip("198.18.0.1"), 443, client4, service),
            EvidenceVerdict::kCounts);
  // With evidence_user, even there only the service's user's.
  EXPECT_EQ(judge(gate, Direction::kPassive, kService, ip("198.18.0.1"), 443, client4, other, kWwwData),
            EvidenceVerdict::kService);
  // A port the rule does not name is refused for that first.
  EXPECT_EQ(judge(gate, Direction::kPassive, kService, ip("198.18.0.1"), 8081, client4, other, kWwwData),
            EvidenceVerdict::kPort);
}

TEST(EvidenceGate, ARuleThatNamesItsServicesCountsOnlyTheirSocketsOnAnyPort) {
  EvidenceGate gate = service_gate();
  gate.services = {"video.service", "web/api-7c9f8d6b5-x2k4z"};
  const SocketOwner nobody{kNobody, 1024};
  const IpAddr client4 = ip("198.18.1.2"), client6 = ip("fd00:1::2");
  // The service's sockets count on an unprivileged port, whoever accepted them.
  EXPECT_EQ(judge(gate, Direction::kPassive, kService, ip("198.18.0.1"), 8080, client4, nobody, std::nullopt,
                  "video.service"),
            EvidenceVerdict::kCounts);
  EXPECT_EQ(judge(gate, Direction::kPassive, kService, ip("fd00::1"), 18080, client6, nobody, kWwwData,
                  "web/api-7c9f8d6b5-x2k4z"),
            EvidenceVerdict::kCounts);
  // Another service's (a takeover of the same port) and an unknown owner's do not, root's neither.
  for (const char* other : {"api.service", "", "video"})
    EXPECT_EQ(judge(gate, Direction::kPassive, kService, ip("198.18.0.1"), 443, client4, kRootsSocket,
                    std::nullopt, other),
              EvidenceVerdict::kService)
        << other;
  // The other conditions stay: outgoing, a local peer, another namespace.
  EXPECT_EQ(judge(gate, Direction::kActive, kService, ip("198.18.0.1"), 8080, client4, nobody, std::nullopt,
                  "video.service"),
            EvidenceVerdict::kOutgoing);
  EXPECT_EQ(judge(gate, Direction::kPassive, kService, ip("198.18.0.1"), 8080, ip("198.18.0.9"), nobody,
                  std::nullopt, "video.service"),
            EvidenceVerdict::kLocalPeer);
  EXPECT_EQ(judge(gate, Direction::kPassive, kOther, ip("198.18.0.1"), 8080, client4, nobody, std::nullopt,
                  "video.service"),
            EvidenceVerdict::kNetns);
}

TEST(EvidenceGate, NamesEveryVerdict) {
  EXPECT_STREQ(to_string(EvidenceVerdict::kCounts), "counts");
  EXPECT_STREQ(to_string(EvidenceVerdict::kOutgoing), "outgoing");
  EXPECT_STREQ(to_string(EvidenceVerdict::kPort), "port");
  EXPECT_STREQ(to_string(EvidenceVerdict::kLocalPeer), "local_peer");
  EXPECT_STREQ(to_string(EvidenceVerdict::kConnectionCap), "connection_cap");
  EXPECT_STREQ(to_string(EvidenceVerdict::kNetns), "netns");
  EXPECT_STREQ(to_string(EvidenceVerdict::kService), "service");
}

}  // namespace
}  // namespace tcpscope
