#include "prometheus_helpers/total_counter.h"

#include <gtest/gtest.h>
#include <prometheus/counter.h>

namespace tcpscope {
namespace {

TEST(TotalCounterTest, AdvancesByTheGrowthAndRestartsFromZeroAfterAReset) {
  prometheus::Counter counter;
  TotalCounter total(&counter);
  total.set(10);
  EXPECT_EQ(counter.Value(), 10);
  total.set(10);
  EXPECT_EQ(counter.Value(), 10);
  total.set(25);
  EXPECT_EQ(counter.Value(), 25);
  total.set(4);  // the source restarted: its 4 are new
  EXPECT_EQ(counter.Value(), 29);
  total.set(6);
  EXPECT_EQ(counter.Value(), 31);
}

}  // namespace
}  // namespace tcpscope
