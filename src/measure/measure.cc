#include "measure/measure.h"

#include <algorithm>
#include <cmath>

#include "record/flow_record.h"
#include "record/transfer_record.h"

namespace tcpscope {

const char* to_string(Measure m) {
  switch (m) {
    case Measure::kFct: return "fct";
    case Measure::kThroughput: return "throughput";
    case Measure::kRtt: return "rtt";
    case Measure::kRetrans: return "retrans";
  }
  return "?";
}

namespace {

// The value of an enum of `count` values whose to_string() is `name`.
template <class Enum>
std::optional<Enum> parse_by_name(const std::string& name, int count) {
  for (int i = 0; i < count; ++i) {
    const auto e = static_cast<Enum>(i);
    if (name == to_string(e)) return e;
  }
  return std::nullopt;
}

}  // namespace

std::optional<Measure> parse_measure(const std::string& name) {
  return parse_by_name<Measure>(name, kMeasureCount);
}

const char* to_string(SampleUnit u) { return u == SampleUnit::kTransfer ? "transfer" : "flow"; }

std::optional<SampleUnit> parse_sample_unit(const std::string& name) {
  return parse_by_name<SampleUnit>(name, kSampleUnitCount);
}

const char* unit_plural(SampleUnit u) { return u == SampleUnit::kTransfer ? "transfers" : "flows"; }

SampleUnit default_unit(Measure m) {
  return m == Measure::kFct || m == Measure::kThroughput ? SampleUnit::kTransfer : SampleUnit::kFlow;
}

bool unit_supported(Measure m, SampleUnit u) {
  return u == SampleUnit::kFlow || m == Measure::kFct || m == Measure::kThroughput;
}

std::string unit_unsupported_reason(Measure m, SampleUnit u) {
  if (unit_supported(m, u)) return "";
  switch (m) {
    case Measure::kFct:
    case Measure::kThroughput: return "";
    case Measure::kRtt:
      // The rank test and the bootstrap assume independent samples; one
      // connection's transfers all read the same smoothed estimate.
      return "rtt is compared per flow only: a transfer's srtt_us is its connection's smoothed RTT, which "
             "the connection's other transfers repeat, so per-transfer samples are not independent (use --unit flow)";
    case Measure::kRetrans:
      return "retrans is compared per flow only: a transfer record has no count of segments sent, so it has "
             "no retransmitted / sent ratio (use --unit flow)";
  }
  return "";
}

const char* metric_unit(Measure m) {
  switch (m) {
    case Measure::kFct:
    case Measure::kRtt: return "us";
    case Measure::kThroughput: return "bytes/s";
    case Measure::kRetrans: return "ratio";
  }
  return "";
}

const char* display_unit(Measure m) { return m == Measure::kThroughput ? "bit/s" : metric_unit(m); }

double display_scale(Measure m) { return m == Measure::kThroughput ? 8 : 1; }

std::string metric_description(Measure m, SampleUnit u, uint64_t throughput_min_bytes) {
  const std::string tmin = std::to_string(throughput_min_bytes);
  if (u == SampleUnit::kTransfer) {
    switch (m) {
      case Measure::kFct:
        return "transfer time (xfer_us) of send transfers below " + tmin + " bytes, per size class of the transfer";
      case Measure::kThroughput:
        return "throughput (8 * bytes / xfer_us) of send transfers of at least " + tmin +
               " bytes that the receiver's window did not limit";
      case Measure::kRtt:
      case Measure::kRetrans: break;  // unit_unsupported_reason()
    }
  }
  switch (m) {
    case Measure::kFct:
      return "flow completion time (fct_us) of completed flows below " + tmin + " bytes, per size class";
    case Measure::kThroughput:
      return "throughput (8 * bytes / fct) of completed flows of at least " + tmin + " bytes";
    case Measure::kRtt: return "smoothed RTT at close (srtt_us) of completed flows that moved data";
    case Measure::kRetrans: return "retransmitted / sent segments per completed flow";
  }
  return "";
}

bool lower_is_better(Measure m) { return m != Measure::kThroughput; }

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
  in.unit = SampleUnit::kTransfer;
  in.ok = true;
  in.bytes = t.bytes;
  in.fct_us = t.xfer_us;
  in.srtt_us = t.srtt_us;
  in.retrans_segs = t.retrans_segs;
  in.recv = t.direction == TransferDirection::kRecv;
  in.rwnd_limited = t.rwnd_limited();
  return in;
}

const Population& completed_population() {
  static const Population p = {{MetricInput::kOk, MetricTest::kTrue},
                               {MetricInput::kPartial, MetricTest::kFalse},
                               {MetricInput::kBytes, MetricTest::kPositive}};
  return p;
}

namespace {

struct MetricDefinition {
  Population population;
  MetricFormula formula;
};

// Per Measure, in its order.
const MetricDefinition& definition(Measure m) {
  const auto completed_and = [](std::initializer_list<PopulationTerm> terms) {
    Population p = completed_population();
    p.insert(p.end(), terms);
    return p;
  };
  // Transfers: only what this host sent (received ones follow the peer's
  // congestion control), and for throughput not what the receiver's window
  // held back; see the tables in the header. srtt_us 0: the kernel has no
  // RTT sample.
  static const MetricDefinition table[kMeasureCount] = {
      // fct
      // Any time, 0 included: a request on a short path is acknowledged
      // in less than a microsecond, and the histograms count it so.
      {completed_and({{MetricInput::kBytes, MetricTest::kBelowThroughputMin},
                      {MetricInput::kRecv, MetricTest::kFalse}}),
       {MetricInput::kTime}},
      // throughput: bytes per µs to bytes/s
      {completed_and({{MetricInput::kBytes, MetricTest::kAtLeastThroughputMin},
                      {MetricInput::kTime, MetricTest::kPositive},
                      {MetricInput::kRecv, MetricTest::kFalse},
                      {MetricInput::kRwndLimited, MetricTest::kFalse}}),
       {MetricInput::kBytes, MetricInput::kTime, 1, 1e6}},
      // rtt
      {completed_and({{MetricInput::kSrtt, MetricTest::kPositive}}), {MetricInput::kSrtt}},
      // retrans
      {completed_and({{MetricInput::kSegsOut, MetricTest::kPositive}}),
       {MetricInput::kRetransSegs, MetricInput::kSegsOut}},
  };
  return table[static_cast<int>(m)];
}

}  // namespace

const Population& metric_population(Measure m) { return definition(m).population; }

const MetricFormula& metric_formula(Measure m) { return definition(m).formula; }

double input_value(MetricInput i, const MetricInputs& in) {
  switch (i) {
    case MetricInput::kOk: return in.ok;
    case MetricInput::kPartial: return in.partial;
    case MetricInput::kRecv: return in.recv;
    case MetricInput::kBytes: return static_cast<double>(in.bytes);
    case MetricInput::kTime: return static_cast<double>(in.fct_us);
    case MetricInput::kSrtt: return static_cast<double>(in.srtt_us);
    case MetricInput::kRetransSegs: return static_cast<double>(in.retrans_segs);
    case MetricInput::kSegsOut: return static_cast<double>(in.segs_out);
    case MetricInput::kRwndLimited: return in.rwnd_limited;
  }
  return 0;
}

bool term_holds(const PopulationTerm& t, const MetricInputs& in, const MetricOptions& opts) {
  const double v = input_value(t.input, in);
  switch (t.test) {
    case MetricTest::kTrue: return v != 0;
    case MetricTest::kFalse: return v == 0;
    case MetricTest::kPositive: return v > 0;
    case MetricTest::kBelowThroughputMin: return v < static_cast<double>(opts.throughput_min_bytes);
    case MetricTest::kAtLeastThroughputMin: return v >= static_cast<double>(opts.throughput_min_bytes);
  }
  return false;
}

bool in_population(const Population& p, const MetricInputs& in, const MetricOptions& opts) {
  return std::all_of(p.begin(), p.end(), [&](const PopulationTerm& t) { return term_holds(t, in, opts); });
}

std::optional<double> metric_value(Measure m, const MetricInputs& in, const MetricOptions& opts) {
  if (!unit_supported(m, in.unit) || !in_population(metric_population(m), in, opts)) return std::nullopt;
  const MetricFormula& f = metric_formula(m);
  const double numerator = f.scale * input_value(f.numerator, in);
  if (!f.denominator) return numerator;
  return numerator / (input_value(*f.denominator, in) / f.denominator_scale);
}

std::optional<MetricHistogram> metric_histogram(Measure m, SampleUnit u) {
  const bool transfer = u == SampleUnit::kTransfer;
  switch (m) {
    case Measure::kFct:
      if (transfer) return MetricHistogram{"tcpscope_transfer_seconds", "direction=\"send\"", 1e6, true};
      return MetricHistogram{"tcpscope_flow_completion_seconds", "", 1e6, true};
    case Measure::kThroughput:
      if (transfer) return MetricHistogram{"tcpscope_transfer_throughput_bytes_per_second", "", 1, false};
      return MetricHistogram{"tcpscope_flow_throughput_bytes_per_second", "", 1, false};
    case Measure::kRtt:
      if (transfer) return std::nullopt;
      return MetricHistogram{"tcpscope_srtt_seconds", "", 1e6, false};
    case Measure::kRetrans: break;
  }
  return std::nullopt;
}

double to_bucket_unit(Measure m, double v) {
  // Every unit the flows have; fct's and rtt's is the same for transfers.
  const auto h = metric_histogram(m, SampleUnit::kFlow);
  return h ? v / h->metric_per_bucket_unit : v;
}

MetricSpan metric_sketch_span(Measure m) {
  switch (m) {
    case Measure::kFct:
    case Measure::kRtt: return {1, 1e10};
    case Measure::kThroughput: return {125, 1.25e12};
    case Measure::kRetrans: return {1e-9, 10};
  }
  return {1e-9, 1e300};
}

bool split_by_size_class(Measure m) { return m == Measure::kFct; }

}  // namespace tcpscope
