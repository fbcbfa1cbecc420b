#include "aggregate/label_ids.h"

#include <gtest/gtest.h>

namespace tcpscope {
namespace {

TEST(LabelIdsTest, IdsInOrderOfFirstUseAfterTheGivenOnes) {
  LabelIds ids{{"null"}};
  EXPECT_EQ(ids.id("null"), 0);
  EXPECT_EQ(ids.id("bbr"), 1);
  EXPECT_EQ(ids.id("cubic"), 2);
  EXPECT_EQ(ids.id("bbr"), 1);
  EXPECT_EQ(ids.value(2), "cubic");
}

TEST(LabelIdsTest, ValuesPastTheByteShareOther) {
  LabelIds ids;
  for (int i = 0; i < 255; ++i) EXPECT_EQ(ids.id("v" + std::to_string(i)), i);
  EXPECT_EQ(ids.id("one too many"), LabelIds::kOverflow);
  EXPECT_EQ(ids.id("another"), LabelIds::kOverflow);
  EXPECT_EQ(ids.id("v7"), 7);  // known values keep their ids
  EXPECT_EQ(ids.value(LabelIds::kOverflow), "other");
  EXPECT_EQ(LabelIds().value(3), "other");  // an id never given out
}

}  // namespace
}  // namespace tcpscope
