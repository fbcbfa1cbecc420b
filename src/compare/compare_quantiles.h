// The quantiles `tcpscope compare` reports per arm (--quantiles 50,90,99,99.9).
//
// A quantile q is the order statistic of rank floor(q (n - 1)) of the arm's n
// values (compare_stats.h). An arm tells it only when it is expected to hold
// a value above it, n (1 - q) >= 1: p99.99 needs 10,000 values. A smaller arm
// reports none (n/a in the table, null in JSON): there the order statistic is
// one of the sample's few largest values, a number about those values and
// not about the tail it would be named after.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace tcpscope {

struct ReportedQuantile {
  double q = 0;            // in (0, 1): 0.999
  std::string key;         // "p99.9": the table's column and the JSON key
  uint64_t min_count = 0;  // the fewest values that hold it: ceil(1 / (1 - q)), exact
};

// p50, p90, p99.
std::vector<ReportedQuantile> default_quantiles();

// Percentages in (0, 100), comma-separated, plain decimals with at most 9
// decimal places ("99.9", "99.99"): sorted, duplicates (also "99.90" and
// "99.9") taken once, keys spelled without trailing zeros. None and *why
// (naming the value) otherwise.
std::optional<std::vector<ReportedQuantile>> parse_quantiles(const std::string& text, std::string* why);

}  // namespace tcpscope
