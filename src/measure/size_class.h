// Size classes: a flow (or transfer) is judged by completion time or by
// throughput depending on its payload size, so records are split at the
// configured boundaries (size_classes_bytes) into named classes.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace tcpscope {

// Names for size classes from boundaries: [100000, 1000000, 3000000] ->
// lt_100k, 100k_1m, 1m_3m, ge_3m (k = 1000, m = 1000000); no boundary: "all".
std::vector<std::string> size_class_names(const std::vector<uint64_t>& boundaries);

// Index into size_class_names(boundaries) for `bytes` payload bytes.
uint32_t size_class_index(uint64_t bytes, const std::vector<uint64_t>& boundaries);

}  // namespace tcpscope
