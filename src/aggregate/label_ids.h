// Byte-sized ids for the few values of a label (peer class, congestion
// control, arm), so that series and sketch keys pack an id rather than a
// string. Past 255 values every new one shares kOverflow, named "other": a
// misconfigured peer-class list cannot grow the key space without bound.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace tcpscope {

class LabelIds {
 public:
  static constexpr uint8_t kOverflow = 255;
  static const std::string& overflow_name();

  // `first` take ids 0, 1, ... in order (e.g. "null" for no arm).
  explicit LabelIds(std::vector<std::string> first = {}) : values_(std::move(first)) {}

  // The value's id, kOverflow once 255 values are known.
  uint8_t id(const std::string& value) {
    // A handful of values: a linear scan beats hashing.
    for (size_t i = 0; i < values_.size(); ++i)
      if (values_[i] == value) return static_cast<uint8_t>(i);
    if (values_.size() >= kOverflow) return kOverflow;
    values_.push_back(value);
    return static_cast<uint8_t>(values_.size() - 1);
  }
  // The value of an id; overflow_name() for kOverflow or an unknown id.
  const std::string& value(uint8_t id) const { return id < values_.size() ? values_[id] : overflow_name(); }

 private:
  std::vector<std::string> values_;
};

}  // namespace tcpscope
