#include "measure/size_class.h"

#include <algorithm>

namespace tcpscope {
namespace {

std::string size_label(uint64_t bytes) {
  if (bytes == 0) return "0";
  if (bytes % 1000000000 == 0) return std::to_string(bytes / 1000000000) + "g";
  if (bytes % 1000000 == 0) return std::to_string(bytes / 1000000) + "m";
  if (bytes % 1000 == 0) return std::to_string(bytes / 1000) + "k";
  return std::to_string(bytes);
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

}  // namespace tcpscope
