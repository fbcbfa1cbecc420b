#include "net/local_routes.h"

#include <gtest/gtest.h>

#include <algorithm>

namespace tcpscope {
namespace {

TEST(LocalRoutes, ThisNamespacesLocalTableHasItsLoopbackRange) {
  std::string error;
  auto routes = LocalRoutes::open("", &error);
  ASSERT_TRUE(routes) << error;
  std::vector<Prefix> table;
  ASSERT_TRUE(routes->read(&table, &error)) << error;
  const bool loopback = std::any_of(table.begin(), table.end(), [](const Prefix& p) {
    return p.to_string() == "127.0.0.0/8" || p.to_string() == "127.0.0.1/32";
  });
  EXPECT_TRUE(loopback) << table.size() << " local routes";
  // Read again on the same socket: a dump after a dump.
  std::vector<Prefix> again;
  ASSERT_TRUE(routes->read(&again, &error)) << error;
  EXPECT_EQ(again.size(), table.size());
}

TEST(LocalRoutes, ANamespaceThatIsNotThereIsNamedInTheError) {
  std::string error;
  EXPECT_FALSE(LocalRoutes::open("/run/netns/tcpscope-no-such-namespace", &error));
  EXPECT_NE(error.find("/run/netns/tcpscope-no-such-namespace"), std::string::npos) << error;
  EXPECT_NE(error.find("errno"), std::string::npos) << error;
}

}  // namespace
}  // namespace tcpscope
