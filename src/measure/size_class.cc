#include "measure/size_class.h"

#include <algorithm>
#include <cstdint>

namespace tcpscope {
namespace {

std::string size_label(uint64_t bytes) {
  if (bytes == 0) return "0";
  if (bytes % 1000000000 == 0) return std::to_string(bytes / 1000000000) + "g";
  if (bytes % 1000000 == 0) return std::to_string(bytes / 1000000) + "m";
  if (bytes % 1000 == 0) return std::to_string(bytes / 1000) + "k";
  return std::to_string(bytes);
}

// "100k" -> 100000 (size_label's spelling); nullopt otherwise.
std::optional<uint64_t> size_label_bytes(const std::string& s) {
  if (s.empty()) return std::nullopt;
  uint64_t mult = 1;
  std::string digits = s;
  switch (s.back()) {
    case 'k': mult = 1000; break;
    case 'm': mult = 1000000; break;
    case 'g': mult = 1000000000; break;
    default: break;
  }
  if (mult != 1) digits.pop_back();
  if (digits.empty() || digits.size() > 12 || digits.find_first_not_of("0123456789") != std::string::npos)
    return std::nullopt;
  return std::stoull(digits) * mult;
}

}  // namespace

std::vector<std::string> size_class_names(const std::vector<uint64_t>& boundaries) {
  if (boundaries.empty()) return {"all"};
  std::vector<std::string> names;
  names.push_back("lt_" + size_label(boundaries.front()));
  for (size_t i = 1; i < boundaries.size(); ++i) {
    names.push_back(size_label(boundaries[i - 1]) + "_" + size_label(boundaries[i]));
  }
  names.push_back("ge_" + size_label(boundaries.back()));
  return names;
}

uint32_t size_class_index(uint64_t bytes, const std::vector<uint64_t>& boundaries) {
  return static_cast<uint32_t>(std::upper_bound(boundaries.begin(), boundaries.end(), bytes) - boundaries.begin());
}

std::optional<std::pair<uint64_t, uint64_t>> size_class_range(const std::string& name) {
  constexpr uint64_t kNoEnd = UINT64_MAX;
  if (name == "all") return std::make_pair(uint64_t{0}, kNoEnd);
  if (name.rfind("lt_", 0) == 0) {
    if (auto hi = size_label_bytes(name.substr(3))) return std::make_pair(uint64_t{0}, *hi);
    return std::nullopt;
  }
  if (name.rfind("ge_", 0) == 0) {
    if (auto lo = size_label_bytes(name.substr(3))) return std::make_pair(*lo, kNoEnd);
    return std::nullopt;
  }
  const size_t us = name.find('_');
  if (us == std::string::npos) return std::nullopt;
  const auto lo = size_label_bytes(name.substr(0, us));
  const auto hi = size_label_bytes(name.substr(us + 1));
  if (!lo || !hi) return std::nullopt;
  return std::make_pair(*lo, *hi);
}

}  // namespace tcpscope
