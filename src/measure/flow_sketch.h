// A log-bucketed quantile sketch with a stated relative error (the DDSketch
// idea): a positive value v falls into bucket i = ceil(log(v) / log(gamma)),
// gamma = (1 + a) / (1 - a), and is read back as 2 gamma^i / (gamma + 1),
// which is within a factor (1 +- a) of every value the bucket can hold. With
// a = 0.01 every quantile the sketch returns is within 1 % of the true order
// statistic of the same rank (see value_at_rank), whatever the distribution,
// for every value inside the sketch's span and as long as it has not
// collapsed (both below).
//
// Why this and not the Prometheus histograms: their 1-2-3-5 buckets are up to
// a factor 2 wide, so a 10 % change of a median can hide inside one bucket.
// This sketch keeps ~115 buckets per decade instead, in bounded memory:
// counts live in one dense array spanning the lowest to the highest bucket
// seen, at most `max_buckets` long.
//
// Span. Each sketch has a span [min_value, max_value] (metric_sketch_span in
// measure.h gives every metric its realistic one, 10 decades: fct and rtt
// 1 us to 10^4 s, throughput 125 bytes/s to 1.25e12 bytes/s, retrans 1e-9
// to 10) and by
// default max_buckets covers that span (1153 buckets at a = 0.01, 4.6 KB
// at most), so no value inside it can force a collapse: one 2-hour flow
// among 10,000 of 30 ms widens the array to ~620 buckets and every quantile
// keeps its 1 %. A value outside the span is counted at the span's end
// (clamped(), its own rank then reads as that end, but min() and max() stay
// exact and every other rank keeps its guarantee). Only a max_buckets
// smaller than the span (a caller's choice) can still collapse: a value that
// would stretch the array further folds the lowest buckets into one, low
// quantiles lose their guarantee and `collapsed()` says so.
//
// Values below kMinPositive (including 0) are counted apart as zeros: the
// retransmit ratio of most flows is exactly 0 and must stay exact.
//
// Two sketches with the same relative accuracy merge exactly (bucket-wise
// sums), so per-server or per-key sketches can be added up for a query.
// Not thread-safe; the owner locks.
#pragma once

#include <cstdint>
#include <limits>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json_fwd.hpp>

namespace tcpscope {

class FlowSketch {
 public:
  static constexpr double kDefaultRelativeAccuracy = 0.01;
  static constexpr double kMinPositive = 1e-9;
  // Bucket indices are kept well inside int32 so that offset arithmetic cannot
  // overflow: 1e-9 .. 1e300 at a = 0.0001 is about +-3.5 million.
  static constexpr double kMaxValue = 1e300;
  // The span a sketch without an explicit one covers without collapsing
  // (max_buckets 0 and the default [kMinPositive, kMaxValue] span).
  static constexpr double kDefaultDecades = 10;

  // max_buckets 0: enough buckets for [min_value, max_value], or for
  // kDefaultDecades when the span is the unbounded default. Values in
  // (0, min_value) and above max_value are clamped into the span.
  explicit FlowSketch(double relative_accuracy = kDefaultRelativeAccuracy, uint32_t max_buckets = 0,
                      double min_value = kMinPositive, double max_value = kMaxValue);

  // The buckets needed to hold [lo, hi] at this relative accuracy without
  // collapsing.
  static uint32_t buckets_for_span(double relative_accuracy, double lo, double hi);

  // Counts `value` (`count` times). Negative values and NaN are ignored and
  // counted in rejected(): every metric the sketches hold is >= 0.
  void add(double value, uint64_t count = 1);
  // Bucketed input from elsewhere (a database's GROUP BY, see
  // clickhouse_source.h): `count` values of bucket `index` (as bucket_index()
  // numbers them, kZeroBucket for values below kMinPositive), the smallest
  // and largest of them exact. Indices outside the span are counted at its
  // ends, as add() does with values.
  static constexpr int32_t kZeroBucket = std::numeric_limits<int32_t>::min();
  void add_bucket(int32_t index, uint64_t count, double min, double max);
  // The bucket a positive value falls into: ceil(log(value) * inv_log_gamma()).
  int32_t bucket_index(double value) const { return index_of(value); }
  double inv_log_gamma() const { return inv_log_gamma_; }

  // Adds every count of `other`. Throws std::invalid_argument when the
  // relative accuracies differ (bucket boundaries would not line up).
  void merge(const FlowSketch& other);

  uint64_t count() const { return total_; }
  uint64_t zero_count() const { return zero_count_; }
  uint64_t rejected() const { return rejected_; }
  bool empty() const { return total_ == 0; }
  double relative_accuracy() const { return alpha_; }
  uint32_t max_buckets() const { return max_buckets_; }
  double min_value() const { return lo_; }
  double max_value() const { return hi_; }
  // True once low buckets were folded together to stay within max_buckets
  // (only possible when max_buckets is smaller than the span).
  bool collapsed() const { return collapsed_; }
  // Values counted at the span's ends because they lay outside it.
  uint64_t clamped() const { return clamped_; }
  // Exact smallest / largest value added (0 when empty).
  double min() const { return min_; }
  double max() const { return max_; }

  // The order statistic of 0-based rank `rank` (0 = smallest, count()-1 =
  // largest), within the relative accuracy; clamped to [min(), max()].
  // rank >= count() reads the largest. Empty sketch: 0.
  double value_at_rank(uint64_t rank) const;
  // value_at_rank(floor(q * (count() - 1))): the lower order-statistic
  // definition, which is also what compare uses on exact data so the two
  // modes report the same quantity.
  double quantile(double q) const;

  // Non-empty buckets in increasing order as (representative value, count),
  // the zeros first as (0, zero_count()). What rank tests and CDF plots use.
  std::vector<std::pair<double, uint64_t>> bins() const;

  // Bytes of heap this sketch holds (for the daemon's memory accounting).
  size_t memory_bytes() const { return counts_.capacity() * sizeof(uint32_t); }

  // {"relative_accuracy", "max_buckets", "min_value", "max_value", "count",
  //  "zero_count", "min", "max", "collapsed", "clamped", "offset",
  //  "counts": [...]}: counts[j] belongs to bucket offset + j. from_json
  // accepts documents without the span fields (older daemons: unbounded
  // span, nothing clamped) and throws std::invalid_argument on malformed
  // input.
  nlohmann::json to_json() const;
  static FlowSketch from_json(const nlohmann::json& j);

 private:
  int32_t index_of(double value) const;
  double bucket_value(int32_t index) const;
  // Makes counts_ cover `index`, collapsing low buckets if the span would
  // exceed max_buckets_; returns the slot to increment.
  size_t slot_for(int32_t index);
  void reserve_for(size_t need);
  void bump(size_t slot, uint64_t count);

  double alpha_;
  double gamma_;
  double inv_log_gamma_;
  uint32_t max_buckets_;
  double lo_, hi_;
  int32_t offset_ = 0;            // bucket index of counts_[0]
  std::vector<uint32_t> counts_;  // dense, counts_[j] = bucket offset_ + j
  uint64_t zero_count_ = 0;
  uint64_t total_ = 0;
  uint64_t rejected_ = 0;
  uint64_t clamped_ = 0;
  double min_ = 0, max_ = 0;
  bool collapsed_ = false;
};

}  // namespace tcpscope
