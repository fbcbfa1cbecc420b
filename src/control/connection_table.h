// The open connections whose send transfers a controller rule counts: each
// one's sums in the evidence it adds to (its cluster there, arm_evidence.h),
// kept until its flow record says it closed, so that a connection's later
// transfers join its cluster instead of passing for a new connection.
//
// A connection adds to at most three evidences at once: its cohort's (this
// epoch), its decided cohort's current batch (the reversal detector), and
// while its ASN is pooled, that ASN's own (followed for promotion; promoted,
// it becomes the cohort's, and the connection's sums go with it). So an
// entry has three slots, each naming the evidence it is for.
//
// Bounded: at most kMaxConnections entries per rule (about 200 bytes each).
// A connection whose close record was lost (a ring overflow) would stay, so
// each pass of the socket iterator drops the entries it did not find in the
// network namespaces it saw whole (drop_absent()): a namespace it could not
// enter, or did not reach in its time budget, keeps its entries until a
// pass sees it. A full table also
// drops connections idle for kIdleEvictS; a connection that still finds no
// room is not counted (the caller counts it refused): counting it as a new
// cluster each time would be the error the clusters exist to avoid.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <unordered_map>
#include <unordered_set>

#include "control/arm_evidence.h"
#include "net/ip_addr.h"
#include "record/flow_record.h"

namespace tcpscope {

struct TransferRecord;

// Which connection a record is of: its identity and start, hashed.
uint64_t connection_key(const FlowRecord& f);
uint64_t connection_key(const TransferRecord& t);

// What one pass of the socket iterator saw.
struct SocketPass {
  std::unordered_set<uint64_t> open;          // connection_key()s of the sockets found open
  std::unordered_set<uint32_t> whole_netns;   // inodes of the namespaces it saw every socket of
  bool every_netns = false;                   // it saw every namespace there was
  double start_s = 0;                         // when it started (unix seconds)
};

class ConnectionTable {
 public:
  static constexpr size_t kMaxConnections = size_t{1} << 16;
  static constexpr double kIdleEvictS = 3600;
  static constexpr size_t kSlots = 3;

  struct Entry {
    std::array<ConnectionSums, kSlots> slots;
    double last_seen_s = 0;
    uint32_t netns = 0;  // its network namespace's inode; 0: unknown (a saved state without it)
  };

  // The entry of connection `key` in namespace `netns`, made if new;
  // nullptr when the table is full of connections seen within kIdleEvictS
  // of `now_s`.
  Entry* find_or_add(uint64_t key, uint32_t netns, double now_s);
  // Its sums in evidence `id`: the slot kept for it, or else a free one or
  // one whose evidence is not among `in_use` (the other evidences this
  // record adds to; 0 stands for none), started afresh.
  static ConnectionSums* sums_in(Entry* e, uint64_t id, std::initializer_list<uint64_t> in_use);
  void close(uint64_t key) { entries_.erase(key); }
  // The entries `pass` did not find open, in a namespace it saw whole (any
  // namespace, for an entry whose namespace is unknown, once a pass has seen
  // every one), and last seen before it started, are of closed sockets.
  // Returns how many went.
  size_t drop_absent(const SocketPass& pass);
  size_t size() const { return entries_.size(); }
  void clear() { entries_.clear(); }

  // For the saved state: every slot with its connection, and back.
  template <class F>
  void for_each_slot(F f) const {
    for (const auto& [key, e] : entries_)
      for (const auto& s : e.slots)
        if (s.evidence) f(key, s, e);
  }
  // Puts `sums` into connection `key`'s first free slot (false if none, or no room).
  bool restore(uint64_t key, uint32_t netns, const ConnectionSums& sums, double last_seen_s);

 private:
  std::unordered_map<uint64_t, Entry> entries_;
  double next_scan_s_ = 0;
};

}  // namespace tcpscope
