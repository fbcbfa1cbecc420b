// Numbers with units for people: durations, byte counts, bit rates and
// percentages as tables, notes and plot axes print them.
//
// A ladder of units picks the step for a value by size: the first step whose
// bound the value is below, the last step for every value the others do not
// take (its bound is not read). The step prints value / divisor with its
// decimals and its suffix, e.g. with {{1e3, 1, 0, "us"}, {1e6, 1e3, 1, "ms"},
// {kRestOfValues, 1e6, 2, "s"}}: 850us, 12.3ms, 1.24s. Like the printf it
// wraps, the text is at most 31 bytes.
#pragma once

#include <initializer_list>
#include <limits>
#include <string>

namespace tcpscope {

// Digits after the point: the shortest form instead (printf's %g), for
// round values such as axis ticks: 1ms, 200ms, 5s.
constexpr int kShortestDecimals = -1;
// The bound of a ladder's last step, for the reader (it is not read).
constexpr double kRestOfValues = std::numeric_limits<double>::infinity();

struct UnitStep {
  double below;        // the step for values below this
  double divisor;      // printed: value / divisor
  int decimals;        // digits after the point, or kShortestDecimals
  const char* suffix;  // "us", "kB", "Mbit/s", " min"
};

std::string unit_text(double value, std::initializer_list<UnitStep> ladder);

// A ratio as a percentage, 0.0012 -> "0.12%" (decimals 2), 0.01 -> "1%"
// (kShortestDecimals).
std::string percent_text(double ratio, int decimals);

// A relative change as a signed percentage: 0.123 -> "+12.3%", -0.04 ->
// "-4.0%"; infinite changes as "+inf" / "-inf".
std::string percent_change_text(double change);

}  // namespace tcpscope
