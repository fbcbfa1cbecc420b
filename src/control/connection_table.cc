#include "control/connection_table.h"

#include <algorithm>
#include <iterator>

#include "record/transfer_record.h"
#include "record/transfer_sampling.h"

namespace tcpscope {

namespace {

uint64_t mix(uint64_t h, uint64_t v) { return int_hash64(h ^ (v + 0x9e3779b97f4a7c15ULL)); }

uint64_t identity_key(uint32_t netns, Direction dir, const IpAddr& laddr, uint16_t lport, const IpAddr& raddr,
                      uint16_t rport, int64_t start_ns) {
  uint64_t h = int_hash64(static_cast<uint64_t>(start_ns));
  h = mix(h, (uint64_t{netns} << 32) | (uint64_t{lport} << 16) | rport);
  h = mix(h, static_cast<uint64_t>(dir) | (uint64_t{laddr.family} << 8));
  for (const IpAddr* a : {&laddr, &raddr}) {
    uint64_t hi = 0, lo = 0;
    std::copy_n(a->bytes.begin(), 8, reinterpret_cast<uint8_t*>(&hi));
    std::copy_n(a->bytes.begin() + 8, 8, reinterpret_cast<uint8_t*>(&lo));
    h = mix(mix(h, hi), lo);
  }
  return h;
}

}  // namespace

uint64_t connection_key(const FlowRecord& f) {
  return identity_key(f.netns, f.dir, f.laddr, f.lport, f.raddr, f.rport, f.start_ns);
}

uint64_t connection_key(const TransferRecord& t) {
  return identity_key(t.netns, t.dir, t.laddr, t.lport, t.raddr, t.rport, t.flow_start_ns);
}

ConnectionTable::Entry* ConnectionTable::find_or_add(uint64_t key, uint32_t netns, double now_s) {
  auto it = entries_.find(key);
  if (it == entries_.end()) {
    // Full: a scan for idle connections, at most once a minute (a full
    // table of busy connections would otherwise be scanned per record).
    if (entries_.size() >= kMaxConnections && now_s >= next_scan_s_) {
      next_scan_s_ = now_s + 60;
      for (auto e = entries_.begin(); e != entries_.end();)
        e = now_s - e->second.last_seen_s > kIdleEvictS ? entries_.erase(e) : std::next(e);
    }
    if (entries_.size() >= kMaxConnections) return nullptr;
    it = entries_.emplace(key, Entry{}).first;
  }
  if (!it->second.netns) it->second.netns = netns;
  it->second.last_seen_s = std::max(it->second.last_seen_s, now_s);
  return &it->second;
}

size_t ConnectionTable::drop_absent(const SocketPass& pass) {
  size_t dropped = 0;
  for (auto e = entries_.begin(); e != entries_.end();) {
    const uint32_t netns = e->second.netns;
    const bool seen_whole = netns ? pass.whole_netns.count(netns) > 0 : pass.every_netns;
    if (seen_whole && e->second.last_seen_s < pass.start_s && !pass.open.count(e->first)) {
      e = entries_.erase(e);
      ++dropped;
    } else {
      ++e;
    }
  }
  return dropped;
}

ConnectionSums* ConnectionTable::sums_in(Entry* e, uint64_t id, std::initializer_list<uint64_t> in_use) {
  for (auto& s : e->slots)
    if (s.evidence == id) return &s;
  for (auto& s : e->slots)
    if (s.evidence == 0 || std::find(in_use.begin(), in_use.end(), s.evidence) == in_use.end()) {
      s = ConnectionSums{id, {}, {}};
      return &s;
    }
  return nullptr;  // more evidences at once than slots: a caller's bug
}

bool ConnectionTable::restore(uint64_t key, uint32_t netns, const ConnectionSums& sums, double last_seen_s) {
  Entry* e = find_or_add(key, netns, last_seen_s);
  if (!e) return false;
  for (auto& s : e->slots)
    if (!s.evidence) {
      s = sums;
      return true;
    }
  return false;
}

}  // namespace tcpscope
