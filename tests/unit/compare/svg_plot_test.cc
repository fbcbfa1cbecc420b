#include "compare/svg_plot.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <regex>
#include <string>
#include <vector>

namespace tcpscope {
namespace {

// A minimal well-formedness check: every tag closes in order, attributes
// are quoted, and no stray '<' or '&' appears in text.
bool well_formed_xml(const std::string& s, std::string* why) {
  std::vector<std::string> stack;
  size_t i = 0;
  if (s.rfind("<?xml", 0) == 0) i = s.find("?>") + 2;
  while (i < s.size()) {
    if (s[i] == '&') {
      const size_t semi = s.find(';', i);
      const std::string ent = s.substr(i, semi - i + 1);
      if (ent != "&amp;" && ent != "&lt;" && ent != "&gt;" && ent != "&quot;" && ent != "&apos;") {
        *why = "bad entity at " + std::to_string(i);
        return false;
      }
      i = semi + 1;
      continue;
    }
    if (s[i] != '<') {
      ++i;
      continue;
    }
    const size_t end = s.find('>', i);
    if (end == std::string::npos) {
      *why = "unterminated tag";
      return false;
    }
    std::string tag = s.substr(i + 1, end - i - 1);
    i = end + 1;
    if (tag.empty()) {
      *why = "empty tag";
      return false;
    }
    // Quotes balance inside the tag, and no '<' inside it.
    if (std::count(tag.begin(), tag.end(), '"') % 2 || tag.find('<') != std::string::npos) {
      *why = "bad attributes in <" + tag + ">";
      return false;
    }
    if (tag[0] == '/') {
      const std::string name = tag.substr(1);
      if (stack.empty() || stack.back() != name) {
        *why = "</" + name + "> closes " + (stack.empty() ? "nothing" : stack.back());
        return false;
      }
      stack.pop_back();
    } else if (tag.back() != '/') {
      stack.push_back(tag.substr(0, tag.find_first_of(" \n\t")));
    }
  }
  if (!stack.empty()) {
    *why = "unclosed <" + stack.back() + ">";
    return false;
  }
  return true;
}

struct Path {
  std::string cls, d;
  int n = 0;
};

std::vector<Path> cdf_paths(const std::string& svg) {
  std::vector<Path> out;
  std::regex re("<path class=\"(cdf-[ab])\" data-n=\"(\\d+)\" data-points=\"\\d+\" d=\"([^\"]*)\"");
  for (std::sregex_iterator it(svg.begin(), svg.end(), re), end; it != end; ++it)
    out.push_back({(*it)[1].str(), (*it)[3].str(), std::stoi((*it)[2].str())});
  return out;
}

// The (x, y) vertices of an "M x,y H x V y ..." path.
std::vector<std::pair<double, double>> vertices(const std::string& d) {
  std::vector<std::pair<double, double>> v;
  double x = 0, y = 0;
  std::regex tok("([MHV])([-0-9.]+)(?:,([-0-9.]+))?");
  for (std::sregex_iterator it(d.begin(), d.end(), tok), end; it != end; ++it) {
    const std::string cmd = (*it)[1];
    if (cmd == "M") {
      x = std::stod((*it)[2]);
      y = std::stod((*it)[3]);
    } else if (cmd == "H") {
      x = std::stod((*it)[2]);
    } else {
      y = std::stod((*it)[2]);
    }
    v.emplace_back(x, y);
  }
  return v;
}

CdfPanel panel(const std::string& title, double scale_b) {
  CdfPanel p;
  p.title = title;
  p.subtitle = "diff -10.0% [-12.0%, -8.0%]   b better";
  std::vector<double> va, vb;
  std::vector<uint64_t> ca, cb;
  for (int i = 1; i <= 100; ++i) {
    va.push_back(1000.0 * i);
    ca.push_back(static_cast<uint64_t>(i));
    vb.push_back(1000.0 * i * scale_b);
    cb.push_back(static_cast<uint64_t>(2 * i));
  }
  p.a.points = cdf_points(va, ca);
  p.a.n = 100;
  p.a.label = "A: cc=cubic";
  p.b.points = cdf_points(vb, cb);
  p.b.n = 200;
  p.b.label = "B: cc=bbr & <friends>";
  return p;
}

TEST(SvgPlot, RendersAValidImageWithBothCurvesPerPanel) {
  CdfPlotOptions o;
  o.title = "fct: A cc=cubic vs B cc=bbr";
  o.x_label = "fct [us]";
  o.format_x = [](double x) { return std::to_string(static_cast<long long>(x)) + "us"; };
  const std::string svg = render_cdf_svg({panel("asn 64501 lt_100k", 0.9), panel("asn 64502 lt_100k", 1.1)}, o);
  std::string why;
  ASSERT_TRUE(well_formed_xml(svg, &why)) << why;
  EXPECT_NE(svg.find("<svg xmlns=\"http://www.w3.org/2000/svg\""), std::string::npos);
  EXPECT_NE(svg.find("&lt;friends&gt;"), std::string::npos);  // labels are escaped
  EXPECT_NE(svg.find("(log scale)"), std::string::npos);
  const auto paths = cdf_paths(svg);
  ASSERT_EQ(paths.size(), 4u);
  EXPECT_EQ(paths[0].cls, "cdf-a");
  EXPECT_EQ(paths[1].cls, "cdf-b");
  EXPECT_EQ(paths[0].n, 100);
  EXPECT_EQ(paths[1].n, 200);
  for (const auto& p : paths) {
    const auto v = vertices(p.d);
    ASSERT_GT(v.size(), 100u) << p.cls;
    // A CDF only goes right and up (SVG y grows downwards) and spans the plot.
    for (size_t i = 1; i < v.size(); ++i) {
      EXPECT_GE(v[i].first, v[i - 1].first - 1e-9) << p.cls << " vertex " << i;
      EXPECT_LE(v[i].second, v[i - 1].second + 1e-9) << p.cls << " vertex " << i;
    }
    EXPECT_GT(v.front().second - v.back().second, 200) << "rises from 0 to 1";
  }
  // B at 0.9x sits left of A: at the median height B reaches x first.
  auto x_at_half = [](const std::vector<std::pair<double, double>>& v, double y_half) {
    for (const auto& [x, y] : v)
      if (y <= y_half) return x;
    return 1e9;
  };
  const auto va = vertices(paths[0].d), vb = vertices(paths[1].d);
  const double y_half = (va.front().second + va.back().second) / 2;
  EXPECT_LT(x_at_half(vb, y_half), x_at_half(va, y_half));
}

// Each mark a dot on its curve at (value, q), in the arm's colour, with its
// key and value for scripts and a tooltip for readers, and its line down to
// the x axis.
TEST(SvgPlot, MarksTheQuantilesOnEachCurve) {
  CdfPanel p = panel("asn 64501", 0.9);
  p.a.marks = {{"p50", 0.5, 50000, "A p50 = 50.0ms"}, {"p99.9", 0.999, 100000, "A p99.9 = 100ms"}};
  p.b.marks = {{"p50", 0.5, 45000, "B p50 = 45.0ms"}};
  CdfPlotOptions o;
  o.note = "dots: p50, p99.9 of each arm";
  const std::string svg = render_cdf_svg({p}, o);
  std::string why;
  ASSERT_TRUE(well_formed_xml(svg, &why)) << why;
  std::regex re("<circle class=\"(quantile-[ab])\" data-quantile=\"([^\"]*)\" data-value=\"([^\"]*)\" "
                "cx=\"([-0-9.]+)\" cy=\"([-0-9.]+)\"[^>]*><title>([^<]*)</title>");
  std::vector<std::vector<std::string>> marks;
  for (std::sregex_iterator it(svg.begin(), svg.end(), re), end; it != end; ++it)
    marks.push_back({(*it)[1], (*it)[2], (*it)[3], (*it)[4], (*it)[5], (*it)[6]});
  ASSERT_EQ(marks.size(), 3u) << svg;
  EXPECT_EQ(marks[0][0], "quantile-a");
  EXPECT_EQ(marks[0][1], "p50");
  EXPECT_EQ(std::stod(marks[0][2]), 50000);
  EXPECT_EQ(marks[1][1], "p99.9");
  EXPECT_EQ(marks[1][5], "A p99.9 = 100ms");
  EXPECT_EQ(marks[2][0], "quantile-b");
  // Heights: p50 halfway up the plot, p99.9 at the top; the tail's x right of the median's.
  const auto v = vertices(cdf_paths(svg)[0].d);
  const double y0 = v.front().second, y1 = v.back().second;
  EXPECT_NEAR(std::stod(marks[0][4]), (y0 + y1) / 2, 0.1);
  EXPECT_NEAR(std::stod(marks[1][4]), y1 + 0.001 * (y0 - y1), 0.1);
  EXPECT_GT(std::stod(marks[1][3]), std::stod(marks[0][3]));
  EXPECT_LT(std::stod(marks[2][3]), std::stod(marks[0][3]));  // B's median left of A's
  EXPECT_NE(svg.find("stroke-dasharray=\"1,3\""), std::string::npos);
  EXPECT_NE(svg.find("dots: p50, p99.9 of each arm"), std::string::npos);
}

TEST(SvgPlot, ThinsLongCurvesAndMarksZeros) {
  std::vector<double> values;
  std::vector<uint64_t> cum;
  values.push_back(0);
  cum.push_back(500);
  for (int i = 1; i <= 100000; ++i) {
    values.push_back(i);
    cum.push_back(500 + static_cast<uint64_t>(i));
  }
  const auto pts = cdf_points(values, cum, 200);
  EXPECT_LE(pts.size(), 202u);
  EXPECT_EQ(pts.back().second, 1.0);
  EXPECT_EQ(pts.front().first, 0.0);
  CdfPanel p;
  p.title = "retrans";
  p.a.points = pts;
  p.b.points = pts;
  const std::string svg = render_cdf_svg({p}, CdfPlotOptions{});
  std::string why;
  EXPECT_TRUE(well_formed_xml(svg, &why)) << why;
  EXPECT_NE(svg.find("values of 0 are drawn at the left edge"), std::string::npos);
}

TEST(SvgPlot, NoPanelsIsStillAnImage) {
  const std::string svg = render_cdf_svg({}, CdfPlotOptions{});
  std::string why;
  EXPECT_TRUE(well_formed_xml(svg, &why)) << why;
  EXPECT_NE(svg.find("no groups with flows"), std::string::npos);
}

TEST(SvgPlot, XmlEscapeWritesMarkupAsTextAndLeavesOutControlCharacters) {
  EXPECT_EQ(xml_escape("a<b>&\"c'"), "a&lt;b&gt;&amp;&quot;c&apos;");
  EXPECT_EQ(xml_escape(std::string("tab\tline\nbell\x07nul") + '\0' + "del\x7f"), "tab\tline\nbellnuldel\x7f")
      << "XML 1.0 text holds tab, newline and DEL, no other control character";
}

}  // namespace
}  // namespace tcpscope
