// Which records may count as a controller's evidence. The kernel gives a
// controller rule's arms to every socket the rule matches, a local user's
// too: an unprivileged process could open connections of its own that match
// (a rule on `peer_class: client` matches outgoing connections as well), see
// its arm (getsockopt TCP_CONGESTION), and make one arm look worse by how it
// sends or reads. So only the service's sockets count:
//   - accepted ones: an outgoing connection's sends are requests, and anyone
//     can open one;
//   - on a port the rule names (match.lports), else on a privileged port
//     (below net.ipv4.ip_unprivileged_port_start), which only a process
//     with CAP_NET_BIND_SERVICE can listen on;
//   - from a peer that is not this host: a local client of the service
//     (loopback, or the same address at both ends) is a local user again.
// Steering is not changed: the other sockets still get the cohort's arms.
#pragma once

#include <cstdint>
#include <vector>

#include "net/ip_addr.h"
#include "record/flow_record.h"

namespace tcpscope {

enum class EvidenceVerdict : uint8_t { kCounts, kOutgoing, kPort, kLocalPeer };
constexpr int kEvidenceVerdicts = 4;
// "counts", "outgoing", "port", "local_peer": the reason label of
// tcpscope_controller_records_refused_total.
const char* to_string(EvidenceVerdict v);

struct EvidenceGate {
  std::vector<uint16_t> lports;  // the rule's match.lports; empty: privileged ports only
  uint16_t unprivileged_port_start = 1024;

  EvidenceVerdict judge(Direction dir, const IpAddr& laddr, uint16_t lport, const IpAddr& raddr) const;
};

// This host's net.ipv4.ip_unprivileged_port_start, 1024 (the kernel's
// default) when it cannot be read.
uint16_t unprivileged_port_start();

}  // namespace tcpscope
