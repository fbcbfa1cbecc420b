#include "control/connection_table.h"

#include <gtest/gtest.h>

#include <unordered_set>

namespace tcpscope {
namespace {

// A full table of connections whose close records were lost refuses every
// new connection until an hour passes; the socket iterator's complete pass
// empties it of them at once, and keeps what it found open and what was
// seen since it started.
TEST(ConnectionTable, APassOfTheSocketIteratorDropsTheConnectionsItDidNotFind) {
  ConnectionTable table;
  const double t0 = 1e9;
  for (uint64_t key = 1; key <= ConnectionTable::kMaxConnections; ++key)
    ASSERT_NE(table.find_or_add(key << 20, t0), nullptr);
  EXPECT_EQ(table.find_or_add(0xfeed, t0 + 10), nullptr) << "full of connections seen within the hour";

  const uint64_t still_open = 7 << 20, seen_during_pass = 9 << 20;
  ASSERT_NE(table.find_or_add(seen_during_pass, t0 + 21), nullptr);  // a transfer that ended after the pass began
  const std::unordered_set<uint64_t> open = {still_open, 0xabc};     // 0xabc: open, never counted
  EXPECT_EQ(table.drop_absent(open, t0 + 20), ConnectionTable::kMaxConnections - 2);
  EXPECT_EQ(table.size(), 2u);
  EXPECT_NE(table.find_or_add(0xfeed, t0 + 22), nullptr) << "room again";
  EXPECT_EQ(table.drop_absent({still_open}, t0 + 20), 0u) << "the others were seen after that pass began";
  EXPECT_EQ(table.drop_absent({}, t0 + 30), 3u);
}

}  // namespace
}  // namespace tcpscope
