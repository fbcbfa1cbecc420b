#include "record/transfer_sampling.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>

namespace tcpscope {
namespace {

// Values ClickHouse 26.9 (chdb) returned for SELECT intHash64(toUInt64(x)):
// compare --clickhouse picks the flows with it.
TEST(TransferSampling, HashIsClickHousesIntHash64) {
  EXPECT_EQ(int_hash64(1234567890123456789ull), 8838629509554173056ull);
  EXPECT_EQ(int_hash64(static_cast<uint64_t>(-5)), 13263830642547698461ull);
}

// Both ends of a connection have the same two ports the other way round.
TEST(TransferSampling, BothEndsOfAConnectionFallTheSameWay) {
  for (uint32_t p = 1024; p < 65536; p += 7) {
    const auto port = static_cast<uint16_t>(p);
    EXPECT_EQ(sampling_hash(443, port), sampling_hash(port, 443));
    EXPECT_EQ(sampling_hash(443, port), int_hash64(p < 443 ? (uint64_t{p} << 16 | 443) : (443ull << 16 | p)));
  }
}

TEST(TransferSampling, RateOneKeepsEveryFlow) {
  for (uint32_t p = 1024; p < 65536; p += 13) EXPECT_TRUE(transfer_sampled(443, static_cast<uint16_t>(p), 1));
}

// A server's port against every ephemeral port a client can have.
TEST(TransferSampling, KeepsAboutOneFlowInRateAndTheChoicesNest) {
  for (uint32_t rate : {2u, 16u, 1024u}) {
    int kept = 0, flows = 0;
    for (uint32_t p = 1024; p < 65536; ++p, ++flows) {
      const auto port = static_cast<uint16_t>(p);
      if (!transfer_sampled(8080, port, rate)) continue;
      ++kept;
      EXPECT_TRUE(transfer_sampled(8080, port, rate / 2)) << "kept at " << rate << " but not at " << rate / 2;
      EXPECT_GE(sampling_level(8080, port), __builtin_ctz(rate));
    }
    const double expected = double(flows) / rate;
    EXPECT_NEAR(kept, expected, 5 * std::sqrt(expected)) << "rate " << rate;
  }
}

TEST(TransferSampling, LevelSaysTheLargestRateThatKeepsTheFlow) {
  for (uint32_t p = 30000; p < 35000; ++p) {
    const auto port = static_cast<uint16_t>(p);
    const int level = sampling_level(443, port);
    if (level < 16) {
      EXPECT_FALSE(transfer_sampled(443, port, 2u << level)) << p;
    }
    EXPECT_TRUE(transfer_sampled(443, port, 1u << std::min(level, 16))) << p;
  }
}

}  // namespace
}  // namespace tcpscope
