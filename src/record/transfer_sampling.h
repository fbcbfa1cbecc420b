// Which flows' transfers the kernel follows (config transfer_sampling_rate,
// bpf/transfer.h "Which flows"): one flow in `rate`, rate a power of two,
// chosen by a hash of the connection's two ports, so that both ends of a
// connection on one host agree and a followed flow keeps all its transfers.
// Flows a rule follows for its evidence are followed whatever the hash says
// (their records say sampling_rate 1).
//
// The hash is ClickHouse's intHash64 of the two ports (the smaller in the
// upper 16 bits), so a query can pick the same flows (compare --clickhouse),
// and the choices nest: a flow followed at rate 16 is followed at 8, 4, 2.
// Records of different rates are made comparable by keeping only the flows
// the largest rate follows (sampling_level >= its log2).
#pragma once

#include <algorithm>
#include <cstdint>

namespace tcpscope {

// ClickHouse's intHash64(x): MurmurHash3's 64-bit finaliser of x with a
// fixed key mixed in.
constexpr uint64_t int_hash64(uint64_t x) {
  x ^= 0x4CF2D2BAAE6DA887ull;
  x ^= x >> 33;
  x *= 0xff51afd7ed558ccdull;
  x ^= x >> 33;
  x *= 0xc4ceb9fe1a85ec53ull;
  x ^= x >> 33;
  return x;
}

// The same as bpf/transfer.h's sampling_hash(): the order of the ports does
// not matter, so either end's record gives it.
constexpr uint64_t sampling_hash(uint16_t lport, uint16_t rport) {
  return int_hash64(static_cast<uint64_t>(std::min(lport, rport)) << 16 | std::max(lport, rport));
}

// The largest log2(rate) at which this flow's transfers are followed.
constexpr int sampling_level(uint16_t lport, uint16_t rport) {
  const uint64_t h = sampling_hash(lport, rport);
  return h == 0 ? 64 : __builtin_ctzll(h);
}

constexpr bool transfer_sampled(uint16_t lport, uint16_t rport, uint32_t rate) {
  return (sampling_hash(lport, rport) & (rate - 1)) == 0;
}

}  // namespace tcpscope
