// The key of a Prometheus label set (aggregator.h) or of a distributions
// entry (flow_distributions.h): the byte-sized ids and the ASN packed into
// one word by their owner, and the service's key (service_ranking.h) in the
// other, so that the per-record lookup hashes two integers, not strings.
#pragma once

#include <cstddef>
#include <cstdint>

namespace tcpscope {

struct PackedKey {
  uint64_t ids;
  uint64_t service;
  bool operator==(const PackedKey& o) const { return ids == o.ids && service == o.service; }
};

struct PackedKeyHash {
  size_t operator()(const PackedKey& k) const {
    // The service key is already a hash; the ids are not: mix both (murmur3's finaliser).
    uint64_t h = k.ids ^ (k.service * 0x9e3779b97f4a7c15ULL);
    h ^= h >> 33;
    h *= 0xff51afd7ed558ccdULL;
    h ^= h >> 33;
    return static_cast<size_t>(h);
  }
};

}  // namespace tcpscope
