// Which flows' transfers the flow log and Kafka carry (config
// transfer_sampling_rate): one flow in `rate`, rate a power of two, chosen by
// a hash of the flow's flow_start_ns so that every record of a flow falls the
// same way and a sampled flow keeps all its transfers. Metrics and
// distributions count every transfer; only the records written out are
// sampled.
//
// The hash is ClickHouse's intHash64, so a query can pick the same flows
// (compare --clickhouse), and the choices nest: a flow kept at rate 16 is
// kept at 8, 4, 2. Records written at different rates are made comparable by
// keeping only the flows the largest rate keeps (sampling_level >= its log2).
#pragma once

#include <cstdint>

namespace tcpscope {

// ClickHouse's intHash64(x): MurmurHash3's 64-bit finaliser of x with a
// fixed key mixed in.
constexpr uint64_t flow_sampling_hash(int64_t flow_start_ns) {
  uint64_t x = static_cast<uint64_t>(flow_start_ns) ^ 0x4CF2D2BAAE6DA887ull;
  x ^= x >> 33;
  x *= 0xff51afd7ed558ccdull;
  x ^= x >> 33;
  x *= 0xc4ceb9fe1a85ec53ull;
  x ^= x >> 33;
  return x;
}

// The largest log2(rate) at which this flow's transfers are written.
constexpr int sampling_level(int64_t flow_start_ns) {
  const uint64_t h = flow_sampling_hash(flow_start_ns);
  return h == 0 ? 64 : __builtin_ctzll(h);
}

constexpr bool transfer_sampled(int64_t flow_start_ns, uint32_t rate) {
  return (flow_sampling_hash(flow_start_ns) & (rate - 1)) == 0;
}

}  // namespace tcpscope
