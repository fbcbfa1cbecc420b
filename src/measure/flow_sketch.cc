#include "measure/flow_sketch.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <stdexcept>

#include <nlohmann/json.hpp>

namespace tcpscope {

namespace {

constexpr uint32_t kMinBuckets = 16;
// The largest array a document may describe (from_json).
constexpr uint32_t kMaxBucketsLimit = 1u << 20;

}  // namespace

uint32_t FlowSketch::buckets_for_span(double relative_accuracy, double lo, double hi) {
  const double log_gamma = std::log((1 + relative_accuracy) / (1 - relative_accuracy));
  // index(hi) - index(lo) + 1, with one bucket of slack for rounding.
  const double n = std::ceil(std::log(hi / lo) / log_gamma) + 2;
  return static_cast<uint32_t>(std::clamp(n, double{kMinBuckets}, double{kMaxBucketsLimit}));
}

FlowSketch::FlowSketch(double relative_accuracy, uint32_t max_buckets, double min_value, double max_value)
    : alpha_(relative_accuracy), lo_(min_value), hi_(max_value) {
  if (!(relative_accuracy >= 1e-4 && relative_accuracy <= 0.5))
    throw std::invalid_argument("sketch relative accuracy must be in [0.0001, 0.5], got " +
                                std::to_string(relative_accuracy));
  if (!(min_value >= kMinPositive && max_value > min_value && max_value <= kMaxValue))
    throw std::invalid_argument("sketch span must satisfy 1e-9 <= min_value < max_value <= 1e300");
  gamma_ = (1 + alpha_) / (1 - alpha_);
  inv_log_gamma_ = 1.0 / std::log(gamma_);
  if (max_buckets == 0) {
    const bool unbounded = min_value == kMinPositive && max_value == kMaxValue;
    max_buckets = unbounded ? buckets_for_span(alpha_, 1, std::pow(10.0, kDefaultDecades))
                            : buckets_for_span(alpha_, min_value, max_value);
  }
  max_buckets_ = std::clamp(max_buckets, kMinBuckets, kMaxBucketsLimit);
}

int32_t FlowSketch::index_of(double value) const {
  return static_cast<int32_t>(std::ceil(std::log(value) * inv_log_gamma_));
}

double FlowSketch::bucket_value(int32_t index) const {
  // The point of (gamma^(i-1), gamma^i] whose relative distance to both ends is a.
  return 2.0 * std::pow(gamma_, index) / (gamma_ + 1.0);
}

void FlowSketch::reserve_for(size_t need) {
  // Amortized growth, but never past max_buckets: the memory bound counts
  // capacity, not size.
  if (counts_.capacity() >= need) return;
  counts_.reserve(std::min<size_t>(max_buckets_, std::max(need, counts_.size() * 2)));
}

size_t FlowSketch::slot_for(int32_t index) {
  if (counts_.empty()) {
    offset_ = index;
    counts_.assign(1, 0);
    return 0;
  }
  const int64_t lo = offset_;
  const int64_t hi = offset_ + static_cast<int64_t>(counts_.size()) - 1;
  if (index >= lo && index <= hi) return static_cast<size_t>(index - lo);

  if (index < lo) {
    // Below the range: grow downwards while the span allows, else the value
    // joins the lowest bucket (which is then a collapsed one).
    const int64_t span = hi - index + 1;
    if (span > max_buckets_) {
      const int64_t new_lo = hi - max_buckets_ + 1;
      if (new_lo < lo) {
        reserve_for(counts_.size() + static_cast<size_t>(lo - new_lo));
        counts_.insert(counts_.begin(), static_cast<size_t>(lo - new_lo), 0);
        offset_ = static_cast<int32_t>(new_lo);
      }
      collapsed_ = true;
      return 0;
    }
    reserve_for(counts_.size() + static_cast<size_t>(lo - index));
    counts_.insert(counts_.begin(), static_cast<size_t>(lo - index), 0);
    offset_ = index;
    return 0;
  }

  // Above the range: grow upwards; if the span gets too wide, fold the
  // lowest buckets into the first one that is kept.
  const int64_t span = index - lo + 1;
  if (span > max_buckets_) {
    const int64_t new_lo = index - max_buckets_ + 1;
    const size_t drop = static_cast<size_t>(std::min<int64_t>(new_lo - lo, static_cast<int64_t>(counts_.size())));
    uint64_t folded = 0;
    for (size_t j = 0; j < drop; ++j) folded += counts_[j];
    counts_.erase(counts_.begin(), counts_.begin() + static_cast<std::ptrdiff_t>(drop));
    offset_ = static_cast<int32_t>(new_lo);
    if (counts_.empty()) counts_.assign(1, 0);
    // Saturating: a bucket holding 4 billion flows is beyond any window.
    counts_[0] = static_cast<uint32_t>(std::min<uint64_t>(uint64_t{counts_[0]} + folded, UINT32_MAX));
    if (folded) collapsed_ = true;
  }
  const size_t need = static_cast<size_t>(index - offset_) + 1;
  if (counts_.size() < need) {
    reserve_for(need);
    counts_.resize(need, 0);
  }
  return static_cast<size_t>(index - offset_);
}

void FlowSketch::bump(size_t slot, uint64_t count) {
  const uint64_t v = uint64_t{counts_[slot]} + count;
  counts_[slot] = static_cast<uint32_t>(std::min<uint64_t>(v, UINT32_MAX));
}

void FlowSketch::add(double value, uint64_t count) {
  if (count == 0) return;
  if (!(value >= 0)) {  // negative or NaN
    rejected_ += count;
    return;
  }
  if (value >= kMinPositive && (value < lo_ || value > hi_)) {
    // Outside the span: counted at its end (min and max stay exact below).
    clamped_ += count;
  }
  value = std::min(value, kMaxValue);
  if (total_ == 0) {
    min_ = max_ = value;
  } else {
    min_ = std::min(min_, value);
    max_ = std::max(max_, value);
  }
  total_ += count;
  if (value < kMinPositive) {
    zero_count_ += count;
    return;
  }
  bump(slot_for(index_of(std::clamp(value, lo_, hi_))), count);
}

void FlowSketch::add_bucket(int32_t index, uint64_t count, double min, double max) {
  if (count == 0) return;
  if (!(min >= 0) || !(max >= min)) {
    rejected_ += count;
    return;
  }
  if (total_ == 0) {
    min_ = min;
    max_ = max;
  } else {
    min_ = std::min(min_, min);
    max_ = std::max(max_, max);
  }
  total_ += count;
  if (index == kZeroBucket) {
    zero_count_ += count;
    return;
  }
  const int32_t lo = index_of(lo_), hi = index_of(hi_);
  if (index < lo || index > hi) clamped_ += count;
  bump(slot_for(std::clamp(index, lo, hi)), count);
}

void FlowSketch::merge(const FlowSketch& other) {
  if (other.alpha_ != alpha_)
    throw std::invalid_argument("cannot merge sketches of relative accuracy " + std::to_string(alpha_) + " and " +
                                std::to_string(other.alpha_));
  if (other.total_ == 0) return;
  if (total_ == 0) {
    min_ = other.min_;
    max_ = other.max_;
  } else {
    min_ = std::min(min_, other.min_);
    max_ = std::max(max_, other.max_);
  }
  total_ += other.total_;
  zero_count_ += other.zero_count_;
  rejected_ += other.rejected_;
  clamped_ += other.clamped_;
  collapsed_ = collapsed_ || other.collapsed_;
  // Highest first: if the span overflows, growing upwards collapses the low
  // end once instead of repeatedly.
  for (size_t j = other.counts_.size(); j-- > 0;) {
    if (!other.counts_[j]) continue;
    bump(slot_for(other.offset_ + static_cast<int32_t>(j)), other.counts_[j]);
  }
}

double FlowSketch::value_at_rank(uint64_t rank) const {
  if (total_ == 0) return 0;
  // The extremes are known exactly.
  if (rank == 0) return min_;
  if (rank >= total_ - 1) return max_;
  if (rank < zero_count_) return min_;  // every zero is below kMinPositive
  uint64_t seen = zero_count_;
  for (size_t j = 0; j < counts_.size(); ++j) {
    seen += counts_[j];
    if (seen > rank) return std::clamp(bucket_value(offset_ + static_cast<int32_t>(j)), min_, max_);
  }
  return max_;
}

double FlowSketch::quantile(double q) const {
  if (total_ == 0) return 0;
  q = std::clamp(q, 0.0, 1.0);
  return value_at_rank(static_cast<uint64_t>(std::floor(q * static_cast<double>(total_ - 1))));
}

std::vector<std::pair<double, uint64_t>> FlowSketch::bins() const {
  std::vector<std::pair<double, uint64_t>> out;
  if (zero_count_) out.emplace_back(0.0, zero_count_);
  for (size_t j = 0; j < counts_.size(); ++j)
    if (counts_[j]) out.emplace_back(std::clamp(bucket_value(offset_ + static_cast<int32_t>(j)), min_, max_), counts_[j]);
  return out;
}

nlohmann::json FlowSketch::to_json() const {
  // Trim empty buckets at both ends so the document carries only the span in use.
  size_t first = 0, last = counts_.size();
  while (first < last && counts_[first] == 0) ++first;
  while (last > first && counts_[last - 1] == 0) --last;
  nlohmann::json counts = nlohmann::json::array();
  for (size_t j = first; j < last; ++j) counts.push_back(counts_[j]);
  return nlohmann::json{{"relative_accuracy", alpha_},
                        {"max_buckets", max_buckets_},
                        {"min_value", lo_},
                        {"max_value", hi_},
                        {"count", total_},
                        {"zero_count", zero_count_},
                        {"min", min_},
                        {"max", max_},
                        {"collapsed", collapsed_},
                        {"clamped", clamped_},
                        {"offset", offset_ + static_cast<int32_t>(first)},
                        {"counts", std::move(counts)}};
}

FlowSketch FlowSketch::from_json(const nlohmann::json& j) {
  try {
    const uint32_t max_buckets = j.at("max_buckets").get<uint32_t>();
    if (max_buckets == 0 || max_buckets > kMaxBucketsLimit)
      throw std::invalid_argument("sketch max_buckets " + std::to_string(max_buckets) + " out of range");
    FlowSketch s(j.at("relative_accuracy").get<double>(), max_buckets, j.value("min_value", kMinPositive),
                 j.value("max_value", kMaxValue));
    const auto& counts = j.at("counts");
    if (!counts.is_array()) throw std::invalid_argument("\"counts\" is not an array");
    if (counts.size() > s.max_buckets_)
      throw std::invalid_argument("sketch has " + std::to_string(counts.size()) + " buckets, more than its max_buckets " +
                                  std::to_string(s.max_buckets_));
    s.offset_ = j.at("offset").get<int32_t>();
    s.counts_.reserve(counts.size());
    uint64_t sum = 0;
    for (const auto& c : counts) {
      s.counts_.push_back(c.get<uint32_t>());
      sum += s.counts_.back();
    }
    s.zero_count_ = j.at("zero_count").get<uint64_t>();
    s.total_ = j.at("count").get<uint64_t>();
    if (s.total_ != sum + s.zero_count_)
      throw std::invalid_argument("sketch count " + std::to_string(s.total_) + " is not the sum of its buckets " +
                                  std::to_string(sum + s.zero_count_));
    // Every bucket a sketch fills lies within its span (add() clamps into
    // it): one outside says the document was not made by a sketch, and its
    // offset arithmetic could run past int32.
    if (!s.counts_.empty() &&
        (int64_t{s.offset_} < int64_t{s.index_of(s.lo_)} - 1 ||
         int64_t{s.offset_} + static_cast<int64_t>(s.counts_.size()) - 1 > int64_t{s.index_of(s.hi_)} + 1))
      throw std::invalid_argument("sketch buckets " + std::to_string(s.offset_) + ".. lie outside its span");
    s.min_ = j.at("min").get<double>();
    s.max_ = j.at("max").get<double>();
    if (!std::isfinite(s.min_) || !std::isfinite(s.max_) || (s.total_ && s.min_ > s.max_))
      throw std::invalid_argument("sketch min and max are not an interval");
    s.collapsed_ = j.at("collapsed").get<bool>();
    s.clamped_ = j.value("clamped", uint64_t{0});
    return s;
  } catch (const nlohmann::json::exception& e) {
    throw std::invalid_argument(std::string("malformed sketch: ") + e.what());
  }
}

}  // namespace tcpscope
