// Which keys of a label get a value of their own in the metrics: the top-N
// by (decayed) bytes. The ASN ranking (asn_ranking.h) and the service
// ranking (service_ranking.h) are this one ranking over their own keys.
//
// Key 0 is the unknown value (ASN 0, no service) and always labels as its
// own value; a key among the top-N keeps its value, every other key is
// "other". The daemon remakes the ranking every 60 s and, while a fresh
// daemon warms up, every warmup_recompute_flows flows; between rankings a
// key joins the top-N at once while it has room.
//
// Not thread-safe: the daemon's loop thread is its only user.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "containers/flat_map.h"

namespace tcpscope {

// A record's label for a ranked key: the key's own value or "other".
enum class RankedLabel { kOwn, kOther };
constexpr const char* kOtherLabel = "other";

struct ByteRankingOptions {
  uint32_t top_n = 50;
  // At most this many keys have their bytes counted. A record whose key
  // finds the table full is labelled "other" and its bytes are not ranked
  // until a ranking prunes the table back to the half with the most bytes.
  size_t max_tracked = 100000;
  // Per-key byte counts decay with this half-life so that the top-N follows
  // the traffic mix instead of freezing on the first hours after start.
  double bytes_half_life_s = 3600;
  // A fresh daemon has no ranking: for its first `warmup_seconds`, add()
  // ranks every `warmup_recompute_flows` flows (0: never).
  uint64_t warmup_recompute_flows = 10000;
  double warmup_seconds = 300;
  // A key with no record for this long is dropped from the table (and the
  // top-N) at the next ranking; 0: kept while its bytes rank. Measured in
  // rankings: a key counts as seen at the first ranking after its record.
  double forget_after_s = 0;
};

template <class Key>
class ByteRanking {
 public:
  using Clock = std::chrono::steady_clock;

  explicit ByteRanking(ByteRankingOptions options);

  struct Counted {
    RankedLabel label;  // the record's label, by the ranking in force before it
    bool reranked;      // the record completed a warm-up batch and a new ranking is in force
  };
  // Counts a finished flow's payload bytes (both directions) for its key.
  Counted add(Key key, uint64_t bytes);

  // Ranks keys by decayed bytes and fixes the top-N for the flows from now
  // on; forgets the keys unseen for forget_after_s.
  void recompute();
  // Config reload; a new top_n ranks at once (returns true then).
  bool update_options(ByteRankingOptions options);

  RankedLabel label(Key key) const;
  // Whether the key's bytes are counted (false once forgotten or pruned).
  bool tracked(Key key) const { return bytes_.contains(key); }
  // Current top-N, most bytes first.
  const std::vector<Key>& top() const { return top_; }
  // Flows whose key found the tracking table full (labelled "other").
  uint64_t untracked_flows() const { return untracked_flows_; }

 private:
  struct Entry {
    double bytes = 0;
    bool top = false;
    bool seen = true;                 // a record since the last ranking
    Clock::time_point last_seen{};    // the ranking that last saw it seen
  };

  ByteRankingOptions options_;
  FlatMap<Key, Entry> bytes_;
  std::vector<Key> top_;
  uint64_t untracked_flows_ = 0;
  Clock::time_point created_;
  Clock::time_point last_recompute_;
  uint64_t flows_since_recompute_ = 0;
};

extern template class ByteRanking<uint32_t>;
extern template class ByteRanking<uint64_t>;

}  // namespace tcpscope
