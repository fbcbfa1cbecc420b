// --quantiles: the percentages it takes, their keys, and the fewest values
// each needs, exactly.
#include "compare/compare_quantiles.h"

#include <gtest/gtest.h>

namespace tcpscope {
namespace {

std::vector<std::string> keys(const std::vector<ReportedQuantile>& qs) {
  std::vector<std::string> out;
  for (const auto& q : qs) out.push_back(q.key);
  return out;
}

TEST(Quantiles, DefaultIsP50P90P99) {
  const auto d = default_quantiles();
  EXPECT_EQ(keys(d), (std::vector<std::string>{"p50", "p90", "p99"}));
  EXPECT_EQ(d[0].q, 0.5);
  EXPECT_EQ(d[1].q, 0.9);
  EXPECT_EQ(d[2].q, 0.99);
}

TEST(Quantiles, SortedDeduplicatedWithTheFewestValuesEachNeeds) {
  std::string why;
  const auto q = parse_quantiles("99.99,50,99.9,90,99,99.90,050.0", &why);
  ASSERT_TRUE(q) << why;
  EXPECT_EQ(keys(*q), (std::vector<std::string>{"p50", "p90", "p99", "p99.9", "p99.99"}));
  std::vector<uint64_t> min;
  for (const auto& r : *q) min.push_back(r.min_count);
  // ceil(1 / (1 - q)) from the digits: 1 / (1 - 0.999) is 1000.0000000000568 in doubles.
  EXPECT_EQ(min, (std::vector<uint64_t>{2, 10, 100, 1000, 10000}));
  EXPECT_EQ((*q)[3].q, 0.999);
  EXPECT_EQ((*q)[4].q, 0.9999);
  const auto odd = parse_quantiles("99.5,75,0.1,33.3,99.999999999", &why);
  ASSERT_TRUE(odd) << why;
  EXPECT_EQ(keys(*odd), (std::vector<std::string>{"p0.1", "p33.3", "p75", "p99.5", "p99.999999999"}));
  min.clear();
  for (const auto& r : *odd) min.push_back(r.min_count);
  EXPECT_EQ(min, (std::vector<uint64_t>{2, 2, 4, 200, 100000000000}));
}

TEST(Quantiles, RefusesWhatIsNotAPercentageInsideTheRangeNamingIt) {
  for (const std::string bad : {"100", "0", "0.0", "101", "-5", "abc", "", "99.", ".5", "1e2", "99.9%", " 99",
                                "50,,90", "50,", "99.9999999999", "nan", "inf", "0x10"}) {
    std::string why;
    EXPECT_FALSE(parse_quantiles(bad, &why)) << bad;
    EXPECT_EQ(why.rfind("--quantiles wants percentages in (0, 100)", 0), 0u) << why;
  }
  std::string why;
  EXPECT_FALSE(parse_quantiles("50,100,99.9", &why));
  EXPECT_NE(why.find("\"100\" is not one"), std::string::npos) << why;
  EXPECT_FALSE(parse_quantiles("50,,90", &why));
  EXPECT_NE(why.find("\"\" is not one"), std::string::npos) << why;
}

}  // namespace
}  // namespace tcpscope
