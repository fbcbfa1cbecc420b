// A metric's values as people read them: compare's tables and its plot's
// axis. The units themselves are measure/'s (metric_unit, display_unit,
// display_scale).
#pragma once

#include <string>

#include "measure/measure.h"

namespace tcpscope {

// The plot's x axis: "flow completion time", "transfer time", ...
const char* metric_axis_label(Measure m, SampleUnit u);
// Human-readable text, in display_unit(), of a value in metric_unit(), for
// tables: 850us, 12.3ms, 1.24s; 85.2Mbit/s; 0.12%.
std::string format_metric_value(Measure m, double v);
// Shortest form for axis ticks of a value in metric_unit() (round values in
// display_unit()): 1ms, 200ms, 5s; 100Mbit/s; 1%.
std::string format_metric_tick(Measure m, double v);

}  // namespace tcpscope
