// Selections and comparison options as the compare tests write them; a
// selection that does not parse fails the test that wrote it.
#pragma once

#include <gtest/gtest.h>

#include <string>

#include "compare/compare.h"
#include "measure/selection.h"

namespace tcpscope {

inline Selection sel(const std::string& text) {
  std::string why;
  auto s = Selection::parse(text, &why);
  EXPECT_TRUE(s) << text << ": " << why;
  return *s;
}

inline CompareOptions opts(Measure m, SampleUnit u, const std::string& by, const std::string& a,
                           const std::string& b) {
  CompareOptions o;
  o.metric = m;
  o.unit = u;
  o.by = by;
  o.a = a;
  o.b = b;
  return o;
}

// The unit left at CompareOptions' own default.
inline CompareOptions opts(Measure m, const std::string& by, const std::string& a, const std::string& b) {
  return opts(m, CompareOptions{}.unit, by, a, b);
}

}  // namespace tcpscope
