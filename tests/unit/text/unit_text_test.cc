#include "text/unit_text.h"

#include <gtest/gtest.h>

#include <cmath>
#include <string>

namespace tcpscope {
namespace {

std::string us(double v) {
  return unit_text(v, {{1e3, 1, 0, "us"}, {1e4, 1e3, 2, "ms"}, {1e6, 1e3, 1, "ms"}, {kRestOfValues, 1e6, 2, "s"}});
}

TEST(UnitText, PicksTheFirstStepTheValueIsBelow) {
  EXPECT_EQ(us(0), "0us");
  EXPECT_EQ(us(850), "850us");
  EXPECT_EQ(us(999.4), "999us");
  EXPECT_EQ(us(1000), "1.00ms");
  EXPECT_EQ(us(9999), "10.00ms");  // the step by the value, then the rounding
  EXPECT_EQ(us(12345), "12.3ms");
  EXPECT_EQ(us(1e6), "1.00s");
  EXPECT_EQ(us(3.6e9), "3600.00s");
  EXPECT_EQ(us(-5), "-5us");
  // The last step takes what no other does, NaN too.
  EXPECT_EQ(us(std::nan("")), "nans");
  EXPECT_EQ(us(INFINITY), "infs");
}

TEST(UnitText, ShortestDecimalsForRoundValues) {
  const int g = kShortestDecimals;
  auto tick = [&](double v) {
    return unit_text(v, {{1e6, 1e3, g, "kbit/s"}, {1e9, 1e6, g, "Mbit/s"}, {kRestOfValues, 1e9, g, "Gbit/s"}});
  };
  EXPECT_EQ(tick(1e3), "1kbit/s");
  EXPECT_EQ(tick(2e5), "200kbit/s");
  EXPECT_EQ(tick(1e8), "100Mbit/s");
  EXPECT_EQ(tick(2.5e9), "2.5Gbit/s");
}

TEST(UnitText, SuffixesMayHaveSpacesAndTheTextStaysWithin31Bytes) {
  auto seconds = [](double s) {
    return unit_text(s, {{120, 1, 0, " s"}, {7200, 60, 0, " min"}, {kRestOfValues, 3600, 1, " h"}});
  };
  EXPECT_EQ(seconds(90), "90 s");
  EXPECT_EQ(seconds(3600), "60 min");
  EXPECT_EQ(seconds(5400 * 2), "3.0 h");
  EXPECT_EQ(unit_text(1e300, {{kRestOfValues, 1, 0, "B"}}).size(), 31u);
}

TEST(PercentText, RatiosAndChanges) {
  EXPECT_EQ(percent_text(0.0012, 2), "0.12%");
  EXPECT_EQ(percent_text(0, 2), "0.00%");
  EXPECT_EQ(percent_text(0.01, kShortestDecimals), "1%");
  EXPECT_EQ(percent_text(0.005, kShortestDecimals), "0.5%");
  EXPECT_EQ(percent_change_text(0.123), "+12.3%");
  EXPECT_EQ(percent_change_text(-0.04), "-4.0%");
  EXPECT_EQ(percent_change_text(0), "+0.0%");
  EXPECT_EQ(percent_change_text(INFINITY), "+inf");
  EXPECT_EQ(percent_change_text(-INFINITY), "-inf");
}

}  // namespace
}  // namespace tcpscope
