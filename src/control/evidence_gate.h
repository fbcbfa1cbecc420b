// Which records may count as a controller's evidence. The kernel gives a
// controller rule's arms to every socket the rule matches, a local user's
// too: sock_ops runs for every network namespace, so an unprivileged process
// could open connections of its own that match (a rule on `peer_class:
// client` matches outgoing connections as well, and in a user and network
// namespace of its own, `unshare -rn`, anyone serves any port from any
// address), see its arm (getsockopt TCP_CONGESTION), and make one arm look
// worse by how it sends or reads. So only the service's sockets count:
//   - in a network namespace the rule names (evidence_netns, by default the
//     daemon's own);
//   - accepted ones: an outgoing connection's sends are requests, and anyone
//     can open one;
//   - on a port the rule names (match.lports), else on a privileged port
//     (below net.ipv4.ip_unprivileged_port_start of the socket's own
//     namespace, as its record says), which only a process with
//     CAP_NET_BIND_SERVICE can listen on;
//   - the service's own: a port is a number, not who listens on it (anyone
//     may listen on [::] and the service's unprivileged port with
//     IPV6_V6ONLY beside its IPv4 listener, or on another address). A rule
//     that names its services (match.services) counts only the sockets
//     those own, by the socket's cgroup (record/enrichment.h): only root
//     moves a process into a system service's or a container's cgroup, so
//     the port no longer matters. Otherwise a socket's owner (sk_uid) is
//     who accepted it, so with the rule's evidence_user only that user's
//     sockets count; without one, privilege stands for the service: a
//     privileged port, or a socket root accepted;
//   - from a peer that is not this host: a peer inside its namespace's local
//     routing table (any of the host's addresses: a second NIC, docker0, a
//     VIP; loopback; AnyIP ranges) is a local user again, and so is one
//     inside the daemon's namespace's table: a service in a container or a
//     named namespace is reached from the host over a veth or docker0, whose
//     host end's address is local to the host's namespace only.
// Steering is not changed: the other sockets still get the cohort's arms.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "net/ip_addr.h"
#include "net/prefix_trie.h"
#include "record/flow_record.h"

namespace tcpscope {

// kConnectionCap is the controller's, not the gate's: a connection that
// found no room in its rule's table of open connections (connection_table.h).
enum class EvidenceVerdict : uint8_t { kCounts, kOutgoing, kPort, kLocalPeer, kConnectionCap, kNetns, kService };
constexpr int kEvidenceVerdicts = 7;
// "counts", "outgoing", "port", "local_peer", "connection_cap", "netns",
// "service": the reason label of tcpscope_controller_records_refused_total.
const char* to_string(EvidenceVerdict v);

// This host's addresses as each network namespace routes them: its local
// routing table (net/local_routes.h).
struct LocalAddresses {
  std::map<uint32_t, std::shared_ptr<const PrefixTrie<uint8_t>>> by_netns;  // by inode
  uint32_t host_netns = 0;  // the daemon's namespace, whose table every namespace's sockets are judged by too
};

struct EvidenceGate {
  std::vector<uint16_t> lports;  // the rule's match.lports; empty: privileged ports only
  std::vector<std::string> services;  // the rule's match.services; when set, lports and the user do not count
  std::vector<uint32_t> netns;   // the namespaces whose sockets count (inodes); empty: none
  // The namespaces' local addresses. When set, a socket counts only while
  // both its namespace's table and the daemon's are known; when null (no
  // table read), only loopback and the socket's own address are local.
  std::shared_ptr<const LocalAddresses> local;

  // `service_uid`: the rule's evidence_user, the uid whose sockets are the
  // service's; none: root's, or any on a privileged port. `service`: the
  // socket owner's name.
  EvidenceVerdict judge(Direction dir, uint32_t netns, const IpAddr& laddr, uint16_t lport, const IpAddr& raddr,
                        const SocketOwner& socket, const std::string& service,
                        std::optional<uint32_t> service_uid) const;
  // A flow or transfer record.
  template <class Record>
  EvidenceVerdict judge(const Record& r, std::optional<uint32_t> service_uid) const {
    return judge(r.dir, r.netns, r.laddr, r.lport, r.raddr, r.socket, r.enrichment.owner().name, service_uid);
  }
};

}  // namespace tcpscope
