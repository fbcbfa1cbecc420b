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
  EXPECT_EQ(flow_sampling_hash(1234567890123456789), 8838629509554173056ull);
  EXPECT_EQ(flow_sampling_hash(-5), 13263830642547698461ull);
}

TEST(TransferSampling, RateOneKeepsEveryFlow) {
  for (int64_t t = 0; t < 1000; ++t) EXPECT_TRUE(transfer_sampled(1700000000000000000 + t * 7919, 1));
}

// Start times as a busy host sees them: ns apart by a few µs each.
TEST(TransferSampling, KeepsAboutOneFlowInRateAndTheChoicesNest) {
  constexpr int kFlows = 1 << 18;
  for (uint32_t rate : {2u, 16u, 1024u}) {
    int kept = 0;
    for (int i = 0; i < kFlows; ++i) {
      const int64_t start = 1700000000000000000 + int64_t{i} * 3331;
      if (!transfer_sampled(start, rate)) continue;
      ++kept;
      EXPECT_TRUE(transfer_sampled(start, rate / 2)) << "kept at " << rate << " but not at " << rate / 2;
      EXPECT_GE(sampling_level(start), __builtin_ctz(rate));
    }
    const double expected = double(kFlows) / rate;
    EXPECT_NEAR(kept, expected, 5 * std::sqrt(expected)) << "rate " << rate;
  }
}

TEST(TransferSampling, LevelSaysTheLargestRateThatKeepsTheFlow) {
  for (int64_t start = 1; start < 5000; ++start) {
    const int level = sampling_level(start);
    if (level < 16) EXPECT_FALSE(transfer_sampled(start, 2u << level)) << start;
    EXPECT_TRUE(transfer_sampled(start, 1u << std::min(level, 16))) << start;
  }
}

}  // namespace
}  // namespace tcpscope
