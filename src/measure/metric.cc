#include "measure/metric.h"

#include <algorithm>
#include <cmath>

#include "record/flow_record.h"
#include "record/transfer_record.h"
#include "text/unit_text.h"

namespace tcpscope {

const char* to_string(CompareMetric m) {
  switch (m) {
    case CompareMetric::kFct: return "fct";
    case CompareMetric::kThroughput: return "throughput";
    case CompareMetric::kRtt: return "rtt";
    case CompareMetric::kRetrans: return "retrans";
  }
  return "?";
}

std::optional<CompareMetric> parse_compare_metric(const std::string& name) {
  for (int i = 0; i < kCompareMetricCount; ++i) {
    auto m = static_cast<CompareMetric>(i);
    if (name == to_string(m)) return m;
  }
  return std::nullopt;
}

const char* to_string(CompareUnit u) { return u == CompareUnit::kTransfer ? "transfer" : "flow"; }

std::optional<CompareUnit> parse_compare_unit(const std::string& name) {
  for (int i = 0; i < kCompareUnitCount; ++i) {
    auto u = static_cast<CompareUnit>(i);
    if (name == to_string(u)) return u;
  }
  return std::nullopt;
}

const char* unit_plural(CompareUnit u) { return u == CompareUnit::kTransfer ? "transfers" : "flows"; }

CompareUnit default_unit(CompareMetric m) {
  return m == CompareMetric::kFct || m == CompareMetric::kThroughput ? CompareUnit::kTransfer : CompareUnit::kFlow;
}

bool unit_supported(CompareMetric m, CompareUnit u) {
  return u == CompareUnit::kFlow || m == CompareMetric::kFct || m == CompareMetric::kThroughput;
}

std::string unit_unsupported_reason(CompareMetric m, CompareUnit u) {
  if (unit_supported(m, u)) return "";
  switch (m) {
    case CompareMetric::kFct:
    case CompareMetric::kThroughput: return "";
    case CompareMetric::kRtt:
      // The rank test and the bootstrap assume independent samples; one
      // connection's transfers all read the same smoothed estimate.
      return "rtt is compared per flow only: a transfer's srtt_us is its connection's smoothed RTT, which "
             "the connection's other transfers repeat, so per-transfer samples are not independent (use --unit flow)";
    case CompareMetric::kRetrans:
      return "retrans is compared per flow only: a transfer record has no count of segments sent, so it has "
             "no retransmitted / sent ratio (use --unit flow)";
  }
  return "";
}

const char* metric_unit(CompareMetric m) {
  switch (m) {
    case CompareMetric::kFct:
    case CompareMetric::kRtt: return "us";
    case CompareMetric::kThroughput: return "bit/s";
    case CompareMetric::kRetrans: return "ratio";
  }
  return "";
}

std::string metric_description(CompareMetric m, CompareUnit u, uint64_t throughput_min_bytes) {
  const std::string tmin = std::to_string(throughput_min_bytes);
  if (u == CompareUnit::kTransfer) {
    switch (m) {
      case CompareMetric::kFct:
        return "transfer time (xfer_us) of send transfers below " + tmin + " bytes, per size class of the transfer";
      case CompareMetric::kThroughput:
        return "throughput (8 * bytes / xfer_us) of send transfers of at least " + tmin +
               " bytes that the receiver's window did not limit";
      case CompareMetric::kRtt:
      case CompareMetric::kRetrans: break;  // unit_unsupported_reason()
    }
  }
  switch (m) {
    case CompareMetric::kFct:
      return "flow completion time (fct_us) of completed flows below " + tmin + " bytes, per size class";
    case CompareMetric::kThroughput:
      return "throughput (8 * bytes / fct) of completed flows of at least " + tmin + " bytes";
    case CompareMetric::kRtt: return "smoothed RTT at close (srtt_us) of completed flows that moved data";
    case CompareMetric::kRetrans: return "retransmitted / sent segments per completed flow";
  }
  return "";
}

const char* metric_axis_label(CompareMetric m, CompareUnit u) {
  switch (m) {
    case CompareMetric::kFct: return u == CompareUnit::kTransfer ? "transfer time" : "flow completion time";
    case CompareMetric::kThroughput: return "throughput";
    case CompareMetric::kRtt: return "smoothed RTT";
    case CompareMetric::kRetrans: return "retransmitted / sent segments";
  }
  return "";
}

bool lower_is_better(CompareMetric m) { return m != CompareMetric::kThroughput; }

std::string format_metric_value(CompareMetric m, double v) {
  switch (m) {
    case CompareMetric::kFct:
    case CompareMetric::kRtt:
      return unit_text(v, {{1e3, 1, 0, "us"}, {1e4, 1e3, 2, "ms"}, {1e6, 1e3, 1, "ms"}, {kRestOfValues, 1e6, 2, "s"}});
    case CompareMetric::kThroughput:
      return unit_text(v, {{1e6, 1e3, 0, "kbit/s"}, {1e9, 1e6, 1, "Mbit/s"}, {kRestOfValues, 1e9, 2, "Gbit/s"}});
    case CompareMetric::kRetrans: return percent_text(v, 2);
  }
  return "";
}

std::string format_metric_tick(CompareMetric m, double v) {
  constexpr int g = kShortestDecimals;
  switch (m) {
    case CompareMetric::kFct:
    case CompareMetric::kRtt:
      return unit_text(v, {{1e3, 1, g, "us"}, {1e6, 1e3, g, "ms"}, {kRestOfValues, 1e6, g, "s"}});
    case CompareMetric::kThroughput:
      return unit_text(v, {{1e6, 1e3, g, "kbit/s"}, {1e9, 1e6, g, "Mbit/s"}, {kRestOfValues, 1e9, g, "Gbit/s"}});
    case CompareMetric::kRetrans: return percent_text(v, g);
  }
  return "";
}

MetricInputs metric_inputs(const FlowRecord& f) {
  MetricInputs in;
  in.ok = f.outcome == Outcome::kOk;
  in.partial = f.partial;
  in.bytes = f.bytes_acked + f.bytes_received;
  in.fct_us = f.fct_us;
  in.srtt_us = f.srtt_us;
  in.retrans_segs = f.retrans_segs;
  in.segs_out = f.segs_out;
  return in;
}

MetricInputs metric_inputs(const TransferRecord& t) {
  MetricInputs in;
  in.unit = CompareUnit::kTransfer;
  in.ok = true;
  in.bytes = t.bytes;
  in.fct_us = t.xfer_us;
  in.srtt_us = t.srtt_us;
  in.retrans_segs = t.retrans_segs;
  in.recv = t.direction == TransferDirection::kRecv;
  in.rwnd_limited = t.rwnd_limited();
  return in;
}

std::optional<double> metric_value(CompareMetric m, const MetricInputs& in, const MetricOptions& opts) {
  // The same population as the Prometheus distributions: flows that did
  // their job, with a known start, that moved data.
  if (!in.ok || in.partial || in.bytes == 0) return std::nullopt;
  if (!unit_supported(m, in.unit)) return std::nullopt;
  switch (m) {
    case CompareMetric::kFct:
      if (in.bytes >= opts.throughput_min_bytes || in.fct_us <= 0) return std::nullopt;
      if (in.recv) return std::nullopt;  // transfers: see the table in the header
      return static_cast<double>(in.fct_us);
    case CompareMetric::kThroughput:
      if (in.bytes < opts.throughput_min_bytes || in.fct_us <= 0) return std::nullopt;
      if (in.recv || in.rwnd_limited) return std::nullopt;  // transfers: see the table in the header
      return 8.0 * static_cast<double>(in.bytes) / (static_cast<double>(in.fct_us) / 1e6);
    case CompareMetric::kRtt:
      // 0 means the kernel has no RTT sample.
      if (in.srtt_us == 0) return std::nullopt;
      return static_cast<double>(in.srtt_us);
    case CompareMetric::kRetrans:
      if (in.segs_out == 0) return std::nullopt;
      return static_cast<double>(in.retrans_segs) / static_cast<double>(in.segs_out);
  }
  return std::nullopt;
}

MetricSpan metric_sketch_span(CompareMetric m) {
  switch (m) {
    case CompareMetric::kFct:
    case CompareMetric::kRtt: return {1, 1e10};
    case CompareMetric::kThroughput: return {1e3, 1e13};
    case CompareMetric::kRetrans: return {1e-9, 10};
  }
  return {1e-9, 1e300};
}

bool split_by_size_class(CompareMetric m) { return m == CompareMetric::kFct; }

}  // namespace tcpscope
