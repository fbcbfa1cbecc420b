#include "measure/size_class.h"

#include <gtest/gtest.h>

namespace tcpscope {
namespace {

TEST(SizeClassNamesTest, SpecDefault) {
  EXPECT_EQ(size_class_names({100000, 1000000, 3000000}),
            (std::vector<std::string>{"lt_100k", "100k_1m", "1m_3m", "ge_3m"}));
}

TEST(SizeClassNamesTest, UnitsOnlyWhenDivisible) {
  EXPECT_EQ(size_class_names({1500}), (std::vector<std::string>{"lt_1500", "ge_1500"}));
  EXPECT_EQ(size_class_names({1500000, 2000000000, 2500000000}),
            (std::vector<std::string>{"lt_1500k", "1500k_2g", "2g_2500m", "ge_2500m"}));
  EXPECT_EQ(size_class_names({999, 1000, 1000000000000}),
            (std::vector<std::string>{"lt_999", "999_1k", "1k_1000g", "ge_1000g"}));
}

TEST(SizeClassNamesTest, NoBoundariesIsOneClass) {
  EXPECT_EQ(size_class_names({}), std::vector<std::string>{"all"});
}

TEST(SizeClassIndexTest, BoundaryBelongsToTheClassAbove) {
  const std::vector<uint64_t> b{100000, 1000000, 3000000};
  EXPECT_EQ(size_class_index(0, b), 0u);
  EXPECT_EQ(size_class_index(99999, b), 0u);
  EXPECT_EQ(size_class_index(100000, b), 1u);
  EXPECT_EQ(size_class_index(2999999, b), 2u);
  EXPECT_EQ(size_class_index(3000000, b), 3u);
  EXPECT_EQ(size_class_index(UINT64_MAX, {}), 0u);
}

// Each name size_class_names() spells reads back as its byte range, as
// compare's Prometheus source reads the size_class label.
TEST(SizeClassRangeTest, EachNameReadsBackAsItsRange) {
  const std::vector<uint64_t> bounds{1500, 100000, 1000000, 3000000, 2000000000};
  const auto names = size_class_names(bounds);
  for (size_t i = 0; i < names.size(); ++i) {
    const auto r = size_class_range(names[i]);
    ASSERT_TRUE(r) << names[i];
    EXPECT_EQ(r->first, i == 0 ? 0 : bounds[i - 1]) << names[i];
    EXPECT_EQ(r->second, i == bounds.size() ? UINT64_MAX : bounds[i]) << names[i];
  }
  EXPECT_EQ(size_class_range("all"), std::make_pair(uint64_t{0}, UINT64_MAX));
  for (const char* other : {"", "lt_", "ge_x", "100k", "100k_", "1m_3q", "lt_1234567890123k"})
    EXPECT_FALSE(size_class_range(other)) << other;
}


}  // namespace
}  // namespace tcpscope
