#include "compare/compare_quantiles.h"

#include <algorithm>

namespace tcpscope {

namespace {

constexpr size_t kMaxDecimals = 9;

// "INT[.FRACTION]" as an exact fraction of 100: the key and min_count come
// from the digits, not from a double, so 99.9 needs exactly 1000 values.
std::optional<ReportedQuantile> parse_percentage(const std::string& text) {
  const size_t dot = text.find('.');
  std::string whole = text.substr(0, dot);
  std::string fraction = dot == std::string::npos ? "" : text.substr(dot + 1);
  const auto digits = [](const std::string& s) {
    return !s.empty() && std::all_of(s.begin(), s.end(), [](char c) { return c >= '0' && c <= '9'; });
  };
  if (!digits(whole) || (dot != std::string::npos && !digits(fraction))) return std::nullopt;
  whole.erase(0, std::min(whole.find_first_not_of('0'), whole.size() - 1));
  fraction.erase(fraction.find_last_not_of('0') + 1);
  if (whole.size() > 2 || fraction.size() > kMaxDecimals) return std::nullopt;
  uint64_t scale = 100;
  uint64_t percent = std::stoull(whole);
  for (char c : fraction) {
    scale *= 10;
    percent = percent * 10 + static_cast<uint64_t>(c - '0');
  }
  if (percent == 0) return std::nullopt;
  // q = percent / scale; n (1 - q) >= 1  <=>  n >= scale / (scale - percent).
  const uint64_t rest = scale - percent;
  ReportedQuantile r;
  r.q = static_cast<double>(percent) / static_cast<double>(scale);
  r.key = "p" + whole + (fraction.empty() ? "" : "." + fraction);
  r.min_count = (scale + rest - 1) / rest;
  return r;
}

}  // namespace

std::vector<ReportedQuantile> default_quantiles() { return *parse_quantiles("50,90,99", nullptr); }

std::optional<std::vector<ReportedQuantile>> parse_quantiles(const std::string& text, std::string* why) {
  std::vector<ReportedQuantile> out;
  size_t start = 0;
  while (true) {
    const size_t comma = text.find(',', start);
    const std::string part = text.substr(start, comma == std::string::npos ? std::string::npos : comma - start);
    const auto q = parse_percentage(part);
    if (!q) {
      if (why)
        *why = "--quantiles wants percentages in (0, 100) with at most " + std::to_string(kMaxDecimals) +
               " decimals, separated by commas (e.g. 50,90,99,99.9,99.99): \"" + part + "\" is not one";
      return std::nullopt;
    }
    out.push_back(*q);
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  std::sort(out.begin(), out.end(), [](const ReportedQuantile& x, const ReportedQuantile& y) { return x.q < y.q; });
  out.erase(std::unique(out.begin(), out.end(),
                        [](const ReportedQuantile& x, const ReportedQuantile& y) { return x.key == y.key; }),
            out.end());
  return out;
}

}  // namespace tcpscope
