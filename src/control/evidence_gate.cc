#include "control/evidence_gate.h"

#include <algorithm>

namespace tcpscope {

const char* to_string(EvidenceVerdict v) {
  switch (v) {
    case EvidenceVerdict::kCounts:
      return "counts";
    case EvidenceVerdict::kOutgoing:
      return "outgoing";
    case EvidenceVerdict::kPort:
      return "port";
    case EvidenceVerdict::kLocalPeer:
      return "local_peer";
    case EvidenceVerdict::kConnectionCap:
      return "connection_cap";
    case EvidenceVerdict::kNetns:
      return "netns";
    case EvidenceVerdict::kService:
      return "service";
  }
  return "counts";
}

namespace {

bool loopback(const IpAddr& a) {
  if (a.family == 4) return a.bytes[0] == 127;
  static const std::array<uint8_t, 16> kV6Loopback = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1};
  return a.family == 6 && a.bytes == kV6Loopback;
}

}  // namespace

EvidenceVerdict EvidenceGate::judge(Direction dir, uint32_t ns, const IpAddr& laddr, uint16_t lport,
                                    const IpAddr& raddr, const SocketOwner& socket, const std::string& service,
                                    std::optional<uint32_t> service_uid) const {
  if (std::find(netns.begin(), netns.end(), ns) == netns.end()) return EvidenceVerdict::kNetns;
  if (dir != Direction::kPassive) return EvidenceVerdict::kOutgoing;
  if (!services.empty()) {
    if (std::find(services.begin(), services.end(), service) == services.end()) return EvidenceVerdict::kService;
  } else {
    const bool privileged = lport < socket.unprivileged_port_start;
    const bool governed =
        lports.empty() ? privileged : std::find(lports.begin(), lports.end(), lport) != lports.end();
    if (!governed) return EvidenceVerdict::kPort;
    const bool own = service_uid ? socket.uid == *service_uid : privileged || socket.uid == 0;
    if (!own) return EvidenceVerdict::kService;
  }
  if (raddr == laddr || loopback(raddr)) return EvidenceVerdict::kLocalPeer;
  if (!local) return EvidenceVerdict::kCounts;
  auto own = local->by_netns.find(ns);
  auto host = local->by_netns.find(local->host_netns);
  // Without both tables a peer cannot be told from this host: nothing counts,
  // as for a namespace whose table cannot be read.
  if (own == local->by_netns.end() || host == local->by_netns.end()) return EvidenceVerdict::kNetns;
  if (own->second->lookup(raddr) || host->second->lookup(raddr)) return EvidenceVerdict::kLocalPeer;
  return EvidenceVerdict::kCounts;
}

}  // namespace tcpscope
