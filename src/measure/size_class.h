// Size classes: a flow (or transfer) is judged by completion time or by
// throughput depending on its payload size, so records are split at the
// configured boundaries (size_classes_bytes) into named classes.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace tcpscope {

// Names for size classes from boundaries: [100000, 1000000, 3000000] ->
// lt_100k, 100k_1m, 1m_3m, ge_3m (k = 1000, m = 1000000); no boundary: "all".
std::vector<std::string> size_class_names(const std::vector<uint64_t>& boundaries);

// Index into size_class_names(boundaries) for `bytes` payload bytes.
uint32_t size_class_index(uint64_t bytes, const std::vector<uint64_t>& boundaries);

// A size class name's byte range [lo, hi): "lt_100k", "100k_1m", "ge_3m",
// "all" (hi UINT64_MAX: no end); nullopt for a name size_class_names()
// would not spell.
std::optional<std::pair<uint64_t, uint64_t>> size_class_range(const std::string& name);

}  // namespace tcpscope
