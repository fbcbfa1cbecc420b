#include "text/unit_text.h"

#include <cmath>
#include <cstdio>

namespace tcpscope {

namespace {

std::string number_text(double v, int decimals, const char* suffix) {
  char buf[32];
  if (decimals == kShortestDecimals)
    std::snprintf(buf, sizeof(buf), "%g%s", v, suffix);
  else
    std::snprintf(buf, sizeof(buf), "%.*f%s", decimals, v, suffix);
  return buf;
}

}  // namespace

std::string unit_text(double value, std::initializer_list<UnitStep> ladder) {
  const UnitStep* step = ladder.end() - 1;
  for (const UnitStep* s = ladder.begin(); s != ladder.end() - 1; ++s) {
    if (value < s->below) {
      step = s;
      break;
    }
  }
  return number_text(value / step->divisor, step->decimals, step->suffix);
}

std::string percent_text(double ratio, int decimals) { return number_text(ratio * 100, decimals, "%"); }

std::string percent_change_text(double change) {
  if (std::isinf(change)) return change > 0 ? "+inf" : "-inf";
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%+.1f%%", change * 100);
  return buf;
}

}  // namespace tcpscope
