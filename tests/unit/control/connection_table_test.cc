#include "control/connection_table.h"

#include <gtest/gtest.h>

#include <unordered_set>

namespace tcpscope {
namespace {

constexpr uint32_t kHostNetns = 4026531840, kContainerNetns = 4026532200;

SocketPass pass(std::unordered_set<uint64_t> open, double start_s, std::unordered_set<uint32_t> whole = {kHostNetns},
                bool every = true) {
  return {std::move(open), std::move(whole), every, start_s};
}

// A full table of connections whose close records were lost refuses every
// new connection until an hour passes; the socket iterator's pass empties
// it of them at once, and keeps what it found open and what was seen since
// it started.
TEST(ConnectionTable, APassOfTheSocketIteratorDropsTheConnectionsItDidNotFind) {
  ConnectionTable table;
  const double t0 = 1e9;
  for (uint64_t key = 1; key <= ConnectionTable::kMaxConnections; ++key)
    ASSERT_NE(table.find_or_add(key << 20, kHostNetns, t0), nullptr);
  EXPECT_EQ(table.find_or_add(0xfeed, kHostNetns, t0 + 10), nullptr) << "full of connections seen within the hour";

  const uint64_t still_open = 7 << 20, seen_during_pass = 9 << 20;
  // A transfer that ended after the pass began.
  ASSERT_NE(table.find_or_add(seen_during_pass, kHostNetns, t0 + 21), nullptr);
  const std::unordered_set<uint64_t> open = {still_open, 0xabc};  // 0xabc: open, never counted
  EXPECT_EQ(table.drop_absent(pass(open, t0 + 20)), ConnectionTable::kMaxConnections - 2);
  EXPECT_EQ(table.size(), 2u);
  EXPECT_NE(table.find_or_add(0xfeed, kHostNetns, t0 + 22), nullptr) << "room again";
  EXPECT_EQ(table.drop_absent(pass({still_open}, t0 + 20)), 0u) << "the others were seen after that pass began";
  EXPECT_EQ(table.drop_absent(pass({}, t0 + 30)), 3u);
}

// A pass that could not enter a container's namespace (or did not reach it
// in its time budget) says nothing of the connections there: they stay
// until a pass sees that namespace whole. A connection of a saved state
// whose namespace is unknown goes only once a pass has seen every one.
TEST(ConnectionTable, APassForgetsOnlyInTheNamespacesItSawWhole) {
  ConnectionTable table;
  const double t0 = 1e9;
  ASSERT_NE(table.find_or_add(1, kHostNetns, t0), nullptr);
  ASSERT_NE(table.find_or_add(2, kContainerNetns, t0), nullptr);
  ASSERT_TRUE(table.restore(3, 0, ConnectionSums{7, {}, {}}, t0));

  EXPECT_EQ(table.drop_absent(pass({}, t0 + 10, {kHostNetns}, false)), 1u) << "the host's connection";
  EXPECT_EQ(table.size(), 2u);
  EXPECT_EQ(table.drop_absent(pass({2}, t0 + 20, {kHostNetns, kContainerNetns}, true)), 1u)
      << "the unknown namespace's connection, once every namespace was seen; the container's is open";
  EXPECT_EQ(table.size(), 1u);
  EXPECT_EQ(table.drop_absent(pass({}, t0 + 30, {kContainerNetns}, false)), 1u);
  EXPECT_EQ(table.size(), 0u);
}

}  // namespace
}  // namespace tcpscope
