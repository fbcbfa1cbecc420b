#include "export/output_status.h"

#include <gtest/gtest.h>

namespace tcpscope {
namespace {

using std::chrono::seconds;

TEST(OutputStatus, SaysOnceWhenItFailsRemindsAndSaysWhenItRecovers) {
  OutputStatus s("flow log", seconds(60));
  const auto t0 = OutputStatus::Clock::time_point{} + seconds(1000);
  EXPECT_TRUE(s.update("", 0, t0).empty());
  EXPECT_EQ(s.health(), "");

  auto lines = s.update("No space left on device", 10, t0 + seconds(1));
  ASSERT_EQ(lines.size(), 1u);
  EXPECT_EQ(lines[0], "flow log failing: No space left on device; records are dropped and counted");
  EXPECT_TRUE(s.failing());
  EXPECT_EQ(s.health(), "flow log: No space left on device");
  // Rate-limited: nothing more until the reminder is due.
  for (int i = 2; i < 60; ++i) EXPECT_TRUE(s.update("No space left on device", 10 * i, t0 + seconds(i)).empty());
  lines = s.update("No space left on device", 700, t0 + seconds(61));
  ASSERT_EQ(lines.size(), 1u);
  EXPECT_EQ(lines[0], "flow log still failing: No space left on device; 700 records dropped since it began");

  lines = s.update("", 700, t0 + seconds(62));
  ASSERT_EQ(lines.size(), 1u);
  EXPECT_EQ(lines[0], "flow log recovered: 700 records dropped while it failed");
  EXPECT_FALSE(s.failing());
  EXPECT_EQ(s.health(), "");
}

TEST(OutputStatus, DropsWithoutAnErrorAreAWriterNotKeepingUp) {
  OutputStatus s("flow log", seconds(60));
  const auto t0 = OutputStatus::Clock::time_point{} + seconds(1000);
  EXPECT_EQ(s.update("", 5, t0).size(), 1u);               // drops before the first tick count too
  EXPECT_EQ(s.update("", 5, t0 + seconds(1)).size(), 1u);  // none since: recovered
  auto lines = s.update("", 9, t0 + seconds(1));
  ASSERT_EQ(lines.size(), 1u);
  EXPECT_EQ(lines[0], "flow log failing: not keeping up (its queue is full); records are dropped and counted");
  // A changed reason is said at once.
  lines = s.update("Input/output error", 9, t0 + seconds(2));
  ASSERT_EQ(lines.size(), 1u);
  EXPECT_EQ(lines[0], "flow log still failing: Input/output error; 4 records dropped since it began");
  EXPECT_EQ(s.update("", 9, t0 + seconds(3)).at(0), "flow log recovered: 4 records dropped while it failed");
}

}  // namespace
}  // namespace tcpscope
