// CDF figures as standalone SVG: one panel per group, two empirical CDFs
// (A and B) on a logarithmic x axis, a legend naming both selections, the
// way the CDN-study figures show FCT and throughput distributions.
// No dependency: the SVG is written by hand and opens in any browser.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <utility>
#include <vector>

namespace tcpscope {

// A quantile marked on a curve: a dot at (x, q) and a dotted line down to
// the x axis, where tail quantiles, crowded together at the top of a CDF,
// still read apart.
struct CdfMark {
  std::string key;   // "p99.9"
  double q = 0;      // its height, F
  double x = 0;      // its value
  std::string text;  // the dot's tooltip, e.g. "A p99.9 = 12.3ms"
};

struct CdfCurve {
  std::string label;  // legend text, e.g. "A: cc=cubic"
  // (x, F(x)) after each distinct value, x ascending, F rising to 1.
  std::vector<std::pair<double, double>> points;
  uint64_t n = 0;
  std::vector<CdfMark> marks;
};

struct CdfPanel {
  std::string title;     // e.g. "64501 lt_100k"
  std::string subtitle;  // e.g. "diff -10.2% [-12.0%, -8.1%]  b better"
  CdfCurve a, b;
};

struct CdfPlotOptions {
  std::string title;
  std::string x_label;
  std::function<std::string(double)> format_x;  // tick labels; plain %g when empty
  int columns = 0;                              // 0: up to 3 per row
  std::string note;                             // under the figure, e.g. what the marks are
};

// Step-CDF points of a sample given as ascending distinct values and the
// cumulative count through each, thinned so that consecutive points differ
// by at least 1/max_points in F (the last point is always kept).
std::vector<std::pair<double, double>> cdf_points(const std::vector<double>& values,
                                                  const std::vector<uint64_t>& cumulative, size_t max_points = 500);

// The whole figure. Each curve is one <path> with class "cdf-a" / "cdf-b"
// and data-n (its sample size), each mark a <circle> with class
// "quantile-a" / "quantile-b", data-quantile (its key) and data-value, so
// tests and scripts can find them. Values
// <= 0 cannot sit on a log axis; they are drawn at the left edge (the note
// under the figure says so when it happens).
std::string render_cdf_svg(const std::vector<CdfPanel>& panels, const CdfPlotOptions& options);

// XML text escaping (&, <, >, ", ').
std::string xml_escape(const std::string& s);

}  // namespace tcpscope
