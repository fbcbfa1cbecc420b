// The prometheus-cpp types that headers of classes exporting metrics name,
// declared without prometheus-cpp's headers (as <iosfwd> declares streams).
#pragma once

namespace prometheus {
class Counter;
class Gauge;
class Histogram;
class Registry;
template <typename T>
class Family;
}  // namespace prometheus
