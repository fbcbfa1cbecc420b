// An address as a test writes it. A malformed one fails the test that wrote
// it (and stands in as the unset address), so that a typo cannot pass.
#pragma once

#include <gtest/gtest.h>

#include <optional>
#include <string>

#include "net/ip_addr.h"

namespace tcpscope {

inline IpAddr ip(const std::string& text) {
  std::optional<IpAddr> a = IpAddr::parse(text);
  EXPECT_TRUE(a.has_value()) << text;
  return a.value_or(IpAddr{});
}

}  // namespace tcpscope
