#include "compare/svg_plot.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>
#include <sstream>
#include <tuple>

#include "compare/char_escapes.h"

namespace tcpscope {

namespace {

// Panel geometry (px).
constexpr double kPanelW = 440, kPanelH = 310;
constexpr double kLeft = 62, kRight = 30, kTop = 48, kBottom = 46;  // room for the edge tick labels
constexpr double kHeader = 34, kFooter = 24;
constexpr const char* kColorA = "#1f77b4";
constexpr const char* kColorB = "#d62728";

std::string fmt(double v) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.1f", v);
  return buf;
}

std::string default_format(double v) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%g", v);
  return buf;
}

struct Axis {
  double lo = 1, hi = 10;  // powers of ten
  double left = 0, width = 1;
  double px(double x) const {
    if (!(x > 0)) return left;
    const double t = (std::log10(x) - std::log10(lo)) / (std::log10(hi) - std::log10(lo));
    return left + std::clamp(t, 0.0, 1.0) * width;
  }
};

Axis x_axis_for(const CdfPanel& p, bool* has_nonpositive) {
  double mn = std::numeric_limits<double>::infinity(), mx = 0;
  for (const CdfCurve* c : {&p.a, &p.b}) {
    for (const auto& [x, f] : c->points) {
      if (x > 0) {
        mn = std::min(mn, x);
        mx = std::max(mx, x);
      } else {
        *has_nonpositive = true;
      }
    }
  }
  Axis a;
  if (mx > 0) {
    a.lo = std::pow(10.0, std::floor(std::log10(mn)));
    a.hi = std::pow(10.0, std::ceil(std::log10(mx)));
    if (a.hi <= a.lo) a.hi = a.lo * 10;
  }
  return a;
}

void curve_path(std::ostringstream& out, const CdfCurve& c, const Axis& ax, double top, double ph,
                const char* cls, const char* color, const char* dash) {
  auto py = [&](double f) { return top + (1 - std::clamp(f, 0.0, 1.0)) * ph; };
  std::string d = "M" + fmt(ax.left) + "," + fmt(py(0));
  for (const auto& [x, f] : c.points) d += " H" + fmt(ax.px(x)) + " V" + fmt(py(f));
  if (!c.points.empty()) d += " H" + fmt(ax.left + ax.width);
  out << "<path class=\"" << cls << "\" data-n=\"" << c.n << "\" data-points=\"" << c.points.size()
      << "\" d=\"" << d << "\" fill=\"none\" stroke=\"" << color << "\" stroke-width=\"2\"";
  if (*dash) out << " stroke-dasharray=\"" << dash << "\"";
  out << "/>\n";
}

void quantile_marks(std::ostringstream& out, const CdfCurve& c, const Axis& ax, double top, double ph,
                    const char* cls, const char* color) {
  const double bottom = top + ph;
  for (const CdfMark& m : c.marks) {
    const double x = ax.px(m.x), y = top + (1 - std::clamp(m.q, 0.0, 1.0)) * ph;
    out << "<line x1=\"" << fmt(x) << "\" y1=\"" << fmt(y) << "\" x2=\"" << fmt(x) << "\" y2=\"" << fmt(bottom)
        << "\" stroke=\"" << color << "\" stroke-width=\"1\" stroke-dasharray=\"1,3\"/>\n";
    char value[32];
    std::snprintf(value, sizeof(value), "%.17g", m.x);
    out << "<circle class=\"" << cls << "\" data-quantile=\"" << xml_escape(m.key) << "\" data-value=\"" << value
        << "\" cx=\"" << fmt(x) << "\" cy=\"" << fmt(y) << "\" r=\"3\" fill=\"" << color << "\"><title>"
        << xml_escape(m.text) << "</title></circle>\n";
  }
}

}  // namespace

std::string xml_escape(const std::string& s) {
  // Control characters other than tab and newline are not allowed in XML 1.0 text.
  static const CharEscapes kXmlText{
      {{'&', "&amp;"}, {'<', "&lt;"}, {'>', "&gt;"}, {'"', "&quot;"}, {'\'', "&apos;"}, {'\t', "\t"}, {'\n', "\n"}},
      nullptr, false};
  return escape_chars(s, kXmlText);
}

std::vector<std::pair<double, double>> cdf_points(const std::vector<double>& values,
                                                  const std::vector<uint64_t>& cumulative, size_t max_points) {
  std::vector<std::pair<double, double>> out;
  if (values.empty() || cumulative.empty()) return out;
  const double n = static_cast<double>(cumulative.back());
  const double step = max_points ? 1.0 / static_cast<double>(max_points) : 0;
  double last_f = -1;
  for (size_t i = 0; i < values.size(); ++i) {
    const double f = static_cast<double>(cumulative[i]) / n;
    if (i + 1 == values.size() || f - last_f >= step) {
      out.emplace_back(values[i], f);
      last_f = f;
    }
  }
  return out;
}

std::string render_cdf_svg(const std::vector<CdfPanel>& panels, const CdfPlotOptions& o) {
  const size_t count = std::max<size_t>(panels.size(), 1);
  const size_t cols = o.columns > 0 ? static_cast<size_t>(o.columns) : std::min<size_t>(3, count);
  const size_t rows = (count + cols - 1) / cols;
  const double width = static_cast<double>(cols) * kPanelW;
  const double height = kHeader + static_cast<double>(rows) * kPanelH + kFooter;
  auto format_x = o.format_x ? o.format_x : default_format;

  std::ostringstream out;
  out << "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n";
  out << "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" << fmt(width) << "\" height=\"" << fmt(height)
      << "\" viewBox=\"0 0 " << fmt(width) << " " << fmt(height)
      << "\" font-family=\"DejaVu Sans, Helvetica, Arial, sans-serif\" font-size=\"11\">\n";
  out << "<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n";
  out << "<text x=\"12\" y=\"22\" font-size=\"15\" font-weight=\"bold\">" << xml_escape(o.title) << "</text>\n";

  bool any_nonpositive = false;
  for (size_t i = 0; i < panels.size(); ++i) {
    const CdfPanel& p = panels[i];
    const double ox = static_cast<double>(i % cols) * kPanelW;
    const double oy = kHeader + static_cast<double>(i / cols) * kPanelH;
    const double left = ox + kLeft, top = oy + kTop;
    const double pw = kPanelW - kLeft - kRight, ph = kPanelH - kTop - kBottom;
    bool nonpositive = false;
    Axis ax = x_axis_for(p, &nonpositive);
    any_nonpositive = any_nonpositive || nonpositive;
    ax.left = left;
    ax.width = pw;

    out << "<g class=\"panel\" data-title=\"" << xml_escape(p.title) << "\">\n";
    out << "<text x=\"" << fmt(left) << "\" y=\"" << fmt(oy + 16) << "\" font-size=\"13\" font-weight=\"bold\">"
        << xml_escape(p.title) << "</text>\n";
    out << "<text x=\"" << fmt(left) << "\" y=\"" << fmt(oy + 32) << "\" fill=\"#444\">" << xml_escape(p.subtitle)
        << "</text>\n";
    out << "<rect x=\"" << fmt(left) << "\" y=\"" << fmt(top) << "\" width=\"" << fmt(pw) << "\" height=\""
        << fmt(ph) << "\" fill=\"none\" stroke=\"#999\"/>\n";
    // y grid and labels: F = 0, 0.25, ..., 1.
    for (int k = 0; k <= 4; ++k) {
      const double f = k / 4.0;
      const double y = top + (1 - f) * ph;
      out << "<line x1=\"" << fmt(left) << "\" y1=\"" << fmt(y) << "\" x2=\"" << fmt(left + pw) << "\" y2=\""
          << fmt(y) << "\" stroke=\"#e5e5e5\"/>\n";
      out << "<text x=\"" << fmt(left - 6) << "\" y=\"" << fmt(y + 4) << "\" text-anchor=\"end\">"
          << (k == 0 ? "0" : k == 4 ? "1" : fmt(f).substr(0, 4)) << "</text>\n";
    }
    // x ticks: every decade, plus 2 and 5 when the axis spans few decades.
    const int d0 = static_cast<int>(std::lround(std::log10(ax.lo)));
    const int d1 = static_cast<int>(std::lround(std::log10(ax.hi)));
    const bool minor = d1 - d0 <= 2;
    for (int d = d0; d <= d1; ++d) {
      for (double mult : {1.0, 2.0, 5.0}) {
        if (mult != 1.0 && (!minor || d == d1)) continue;
        const double x = mult * std::pow(10.0, d);
        const double px = ax.px(x);
        out << "<line x1=\"" << fmt(px) << "\" y1=\"" << fmt(top) << "\" x2=\"" << fmt(px) << "\" y2=\""
            << fmt(top + ph) << "\" stroke=\"" << (mult == 1.0 ? "#e5e5e5" : "#f2f2f2") << "\"/>\n";
        out << "<text x=\"" << fmt(px) << "\" y=\"" << fmt(top + ph + 14) << "\" text-anchor=\"middle\">"
            << xml_escape(format_x(x)) << "</text>\n";
      }
    }
    out << "<text x=\"" << fmt(left + pw / 2) << "\" y=\"" << fmt(top + ph + 32) << "\" text-anchor=\"middle\">"
        << xml_escape(o.x_label) << " (log scale)</text>\n";
    out << "<text transform=\"translate(" << fmt(ox + 16) << "," << fmt(top + ph / 2)
        << ") rotate(-90)\" text-anchor=\"middle\">CDF</text>\n";

    curve_path(out, p.a, ax, top, ph, "cdf-a", kColorA, "");
    curve_path(out, p.b, ax, top, ph, "cdf-b", kColorB, "6,3");
    quantile_marks(out, p.a, ax, top, ph, "quantile-a", kColorA);
    quantile_marks(out, p.b, ax, top, ph, "quantile-b", kColorB);

    // Legend in the upper left, where a CDF has no ink (high F only comes
    // with large x).
    const std::string label_a = p.a.label + " (n=" + std::to_string(p.a.n) + ")";
    const std::string label_b = p.b.label + " (n=" + std::to_string(p.b.n) + ")";
    // ~6.3 px per character at font-size 11.
    const double lw = std::min(pw - 8, 44 + 6.3 * static_cast<double>(std::max(label_a.size(), label_b.size())));
    const double lx = left + 6, ly = top + 6;
    out << "<rect x=\"" << fmt(lx) << "\" y=\"" << fmt(ly) << "\" width=\"" << fmt(lw) << "\" height=\"38\" fill=\"white\" "
        << "fill-opacity=\"0.85\" stroke=\"#ccc\"/>\n";
    int row = 0;
    for (const auto& [label, color, dash] :
         {std::tuple<const std::string*, const char*, const char*>{&label_a, kColorA, ""}, {&label_b, kColorB, "6,3"}}) {
      const double y = ly + 13 + 16 * row++;
      out << "<line class=\"legend\" x1=\"" << fmt(lx + 6) << "\" y1=\"" << fmt(y - 4) << "\" x2=\"" << fmt(lx + 30)
          << "\" y2=\"" << fmt(y - 4) << "\" stroke=\"" << color << "\" stroke-width=\"2\"";
      if (*dash) out << " stroke-dasharray=\"" << dash << "\"";
      out << "/>\n<text x=\"" << fmt(lx + 36) << "\" y=\"" << fmt(y) << "\">"
          << xml_escape(*label) << "</text>\n";
    }
    out << "</g>\n";
  }
  if (panels.empty())
    out << "<text x=\"12\" y=\"" << fmt(kHeader + 20) << "\">no groups with flows</text>\n";
  std::string footer = o.note;
  if (any_nonpositive)
    footer += (footer.empty() ? "" : "; ") + std::string("values of 0 are drawn at the left edge of the log axis");
  if (!footer.empty())
    out << "<text x=\"12\" y=\"" << fmt(height - 8) << "\" fill=\"#444\">" << xml_escape(footer) << "</text>\n";
  out << "</svg>\n";
  return out.str();
}

}  // namespace tcpscope
