#include "control/evidence_gate.h"

#include <algorithm>
#include <fstream>

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
                                    const IpAddr& raddr) const {
  if (std::find(netns.begin(), netns.end(), ns) == netns.end()) return EvidenceVerdict::kNetns;
  if (dir != Direction::kPassive) return EvidenceVerdict::kOutgoing;
  const bool governed = lports.empty() ? lport < unprivileged_port_start
                                       : std::find(lports.begin(), lports.end(), lport) != lports.end();
  if (!governed) return EvidenceVerdict::kPort;
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

uint16_t unprivileged_port_start() {
  std::ifstream f("/proc/sys/net/ipv4/ip_unprivileged_port_start");
  long v = -1;
  if (!(f >> v) || v < 0 || v > 65536) return 1024;
  // 0 lets anyone bind any port: then no port is privileged.
  return static_cast<uint16_t>(std::min<long>(v, 65535));
}

}  // namespace tcpscope
