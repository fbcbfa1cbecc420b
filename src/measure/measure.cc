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

namespace {

// Every input's value, by MetricInput: input_value()'s one definition.
struct InputValues {
  double of[kMetricInputCount];
};
InputValues input_values(const MetricInputs& in) {
  InputValues r;
  r.of[static_cast<int>(MetricInput::kOk)] = in.ok;
  r.of[static_cast<int>(MetricInput::kPartial)] = in.partial;
  r.of[static_cast<int>(MetricInput::kRecv)] = in.recv;
  r.of[static_cast<int>(MetricInput::kBytes)] = static_cast<double>(in.bytes);
  r.of[static_cast<int>(MetricInput::kTime)] = static_cast<double>(in.fct_us);
  r.of[static_cast<int>(MetricInput::kSrtt)] = static_cast<double>(in.srtt_us);
  r.of[static_cast<int>(MetricInput::kRetransSegs)] = static_cast<double>(in.retrans_segs);
  r.of[static_cast<int>(MetricInput::kSegsOut)] = static_cast<double>(in.segs_out);
  r.of[static_cast<int>(MetricInput::kRwndLimited)] = in.rwnd_limited;
  return r;
}

}  // namespace

double input_value(MetricInput i, const MetricInputs& in) { return input_values(in).of[static_cast<int>(i)]; }

namespace {

// Which tests hold for an input's value: bit t for MetricTest t.
// Inputs are whole numbers: never NaN, so each test's opposite is its negation.
TermBits test_bits(double v, double throughput_min) {
  const TermBits zero = v == 0, below = v < throughput_min;
  return (zero ^ 1) << static_cast<int>(MetricTest::kTrue) | zero << static_cast<int>(MetricTest::kFalse) |
         TermBits{v > 0} << static_cast<int>(MetricTest::kPositive) |
         below << static_cast<int>(MetricTest::kBelowThroughputMin) |
         (below ^ 1) << static_cast<int>(MetricTest::kAtLeastThroughputMin);
}

}  // namespace

bool term_holds(const PopulationTerm& t, const MetricInputs& in, const MetricOptions& opts) {
  return test_bits(input_value(t.input, in), static_cast<double>(opts.throughput_min_bytes)) >>
             static_cast<int>(t.test) & 1;
}

bool in_population(const Population& p, const MetricInputs& in, const MetricOptions& opts) {
  return std::all_of(p.begin(), p.end(), [&](const PopulationTerm& t) { return term_holds(t, in, opts); });
}

TermBits population_mask(const Population& p) {
  TermBits mask = 0;
  for (const PopulationTerm& t : p) mask |= term_bit(t);
  return mask;
}

namespace {

TermBits holding_terms(const InputValues& v, const MetricOptions& opts) {
  const double min = static_cast<double>(opts.throughput_min_bytes);
  TermBits bits = 0;
  for (int i = 0; i < kMetricInputCount; ++i) bits |= test_bits(v.of[i], min) << (i * kMetricTestCount);
  return bits;
}

}  // namespace

TermBits holding_terms(const MetricInputs& in, const MetricOptions& opts) {
  return holding_terms(input_values(in), opts);
}

namespace {

// Each metric's population as a mask (population_mask()) and its formula,
// made once, before main().
struct Compiled {
  TermBits completed;
  TermBits population[kMeasureCount];
  const MetricFormula* formula[kMeasureCount];
  Compiled() : completed(population_mask(completed_population())) {
    for (int m = 0; m < kMeasureCount; ++m) {
      population[m] = population_mask(metric_population(static_cast<Measure>(m)));
      formula[m] = &metric_formula(static_cast<Measure>(m));
    }
  }
};
const Compiled kCompiled;

bool holds_all(TermBits holding, TermBits mask) { return (holding & mask) == mask; }

std::optional<double> value_if_counted(Measure m, SampleUnit unit, const InputValues& in, TermBits holding) {
  if (!unit_supported(m, unit) || !holds_all(holding, kCompiled.population[static_cast<int>(m)]))
    return std::nullopt;
  const MetricFormula& f = *kCompiled.formula[static_cast<int>(m)];
  const double numerator = f.scale * in.of[static_cast<int>(f.numerator)];
  if (!f.denominator) return numerator;
  return numerator / (in.of[static_cast<int>(*f.denominator)] / f.denominator_scale);
}

}  // namespace

std::optional<double> metric_value(Measure m, const MetricInputs& in, const MetricOptions& opts) {
  const InputValues values = input_values(in);
  return value_if_counted(m, in.unit, values, holding_terms(values, opts));
}

MetricValues metric_values(const MetricInputs& in, const MetricOptions& opts) {
  const InputValues values = input_values(in);
  const TermBits holding = holding_terms(values, opts);
  MetricValues v;
  v.completed = holds_all(holding, kCompiled.completed);
  v.bytes = in.bytes;
  v.time = values.of[static_cast<int>(MetricInput::kTime)];
  for (int m = 0; m < kMeasureCount; ++m)
    v.value[m] = value_if_counted(static_cast<Measure>(m), in.unit, values, holding);
  // The same record with the window's limit taken out of it.
  const TermBits unlimited = (holding & ~(term_bit({MetricInput::kRwndLimited, MetricTest::kTrue}) |
                                          term_bit({MetricInput::kRwndLimited, MetricTest::kPositive}))) |
                             term_bit({MetricInput::kRwndLimited, MetricTest::kFalse});
  v.throughput_held_by_window = !v.value[static_cast<int>(Measure::kThroughput)] &&
                                value_if_counted(Measure::kThroughput, in.unit, values, unlimited);
  return v;
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
