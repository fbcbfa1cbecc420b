#include "compare/metric_text.h"

#include "text/unit_text.h"

namespace tcpscope {

const char* metric_axis_label(Measure m, SampleUnit u) {
  switch (m) {
    case Measure::kFct: return u == SampleUnit::kTransfer ? "transfer time" : "flow completion time";
    case Measure::kThroughput: return "throughput";
    case Measure::kRtt: return "smoothed RTT";
    case Measure::kRetrans: return "retransmitted / sent segments";
  }
  return "";
}

std::string format_metric_value(Measure m, double v) {
  v *= display_scale(m);
  switch (m) {
    case Measure::kFct:
    case Measure::kRtt:
      return unit_text(v, {{1e3, 1, 0, "us"}, {1e4, 1e3, 2, "ms"}, {1e6, 1e3, 1, "ms"}, {kRestOfValues, 1e6, 2, "s"}});
    case Measure::kThroughput:
      return unit_text(v, {{1e6, 1e3, 0, "kbit/s"}, {1e9, 1e6, 1, "Mbit/s"}, {kRestOfValues, 1e9, 2, "Gbit/s"}});
    case Measure::kRetrans: return percent_text(v, 2);
  }
  return "";
}

std::string format_metric_tick(Measure m, double v) {
  constexpr int g = kShortestDecimals;
  v *= display_scale(m);
  switch (m) {
    case Measure::kFct:
    case Measure::kRtt:
      return unit_text(v, {{1e3, 1, g, "us"}, {1e6, 1e3, g, "ms"}, {kRestOfValues, 1e6, g, "s"}});
    case Measure::kThroughput:
      return unit_text(v, {{1e6, 1e3, g, "kbit/s"}, {1e9, 1e6, g, "Mbit/s"}, {kRestOfValues, 1e9, g, "Gbit/s"}});
    case Measure::kRetrans: return percent_text(v, g);
  }
  return "";
}

}  // namespace tcpscope
