#include "containers/flat_map.h"

#include <gtest/gtest.h>

#include <random>
#include <string>
#include <unordered_map>

namespace tcpscope {
namespace {

TEST(FlatMap, FindsWhatItHoldsAndNothingElse) {
  FlatMap<uint64_t, std::string> m;
  EXPECT_EQ(m.find(7), nullptr);
  EXPECT_TRUE(m.try_emplace(7, "seven").second);
  EXPECT_FALSE(m.try_emplace(7, "again").second);
  ASSERT_NE(m.find(7), nullptr);
  EXPECT_EQ(*m.find(7), "seven");
  EXPECT_EQ(m.find(8), nullptr);
  EXPECT_EQ(m.find(0), nullptr);  // the empty-slot key is never found
  EXPECT_FALSE(m.erase(0));
  EXPECT_TRUE(m.erase(7));
  EXPECT_FALSE(m.erase(7));
  EXPECT_TRUE(m.empty());
}

// Against std::unordered_map through growth and many erasures: ids in runs
// (as cgroup ids and AS numbers come) and random ones, so that probe runs
// collide and wrap around the array's end.
TEST(FlatMap, AgreesWithUnorderedMapThroughInsertsAndErasures) {
  FlatMap<uint64_t, uint64_t> flat;
  std::unordered_map<uint64_t, uint64_t> ref;
  std::mt19937_64 rng(5);
  for (int round = 0; round < 200000; ++round) {
    const uint64_t key = rng() % 3 == 0 ? 1 + rng() : 1 + rng() % 4096;
    switch (rng() % 4) {
      case 0:
      case 1: {
        const auto [v, made] = flat.try_emplace(key, key * 3);
        EXPECT_EQ(made, ref.emplace(key, key * 3).second);
        *v += 1;
        ref[key] += 1;
        break;
      }
      case 2:
        EXPECT_EQ(flat.erase(key), ref.erase(key) == 1);
        break;
      default: {
        const uint64_t* v = flat.find(key);
        const auto it = ref.find(key);
        ASSERT_EQ(v != nullptr, it != ref.end()) << key;
        if (v) {
          EXPECT_EQ(*v, it->second);
        }
      }
    }
    ASSERT_EQ(flat.size(), ref.size());
  }
  size_t seen = 0;
  flat.for_each([&](uint64_t k, uint64_t v) {
    ++seen;
    EXPECT_EQ(ref.at(k), v);
  });
  EXPECT_EQ(seen, ref.size());
}

TEST(FlatMap, EraseIfKeepsTheRestFindable) {
  FlatMap<uint32_t, int> m;
  for (uint32_t k = 1; k <= 1000; ++k) m[k] = static_cast<int>(k);
  EXPECT_EQ(m.erase_if([](uint32_t k, int&) { return k % 3 == 0; }), 333u);
  EXPECT_EQ(m.size(), 667u);
  for (uint32_t k = 1; k <= 1000; ++k) EXPECT_EQ(m.find(k) != nullptr, k % 3 != 0) << k;
  m.clear();
  EXPECT_EQ(m.find(1), nullptr);
  EXPECT_EQ(m.size(), 0u);
}

}  // namespace
}  // namespace tcpscope
