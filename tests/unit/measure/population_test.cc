// Which records count for a metric is measure/measure.h's rule, and every
// reader of records takes it from there: moving the rule's threshold
// (throughput_min_bytes) in one place moves the aggregator's histogram, the
// controller's evidence, the flow-log reader and the ClickHouse SQL
// together.
#include "measure/measure.h"

#include <gtest/gtest.h>
#include <prometheus/registry.h>

#include <memory>
#include <string>
#include <vector>

#include "../record_fixtures.h"
#include "../temp_dir.h"
#include "aggregate/aggregator.h"
#include "compare/clickhouse_source.h"
#include "compare/flow_log_source.h"
#include "control/arm_evidence.h"
#include "measure/flow_sketch.h"
#include "measure/selection.h"
#include "record/flow_json.h"
#include "record/flow_record.h"
#include "record/transfer_record.h"

namespace tcpscope {
namespace {

constexpr uint64_t kBytes = 2000000;

FlowRecord completed_flow() {
  FlowRecord f = client_flow("cubic", 0, kBytes, 1000000);
  f.srtt_us = 20000;
  f.segs_out = 1400;
  return f;
}

TransferRecord sent_transfer() { return client_transfer("cubic", 0, TransferDirection::kSend, kBytes, 1000000); }

uint64_t histogram_samples(const prometheus::Registry& registry, const std::string& family) {
  uint64_t n = 0;
  for (const auto& f : registry.Collect())
    if (f.name == family)
      for (const auto& m : f.metric) n += m.histogram.sample_count;
  return n;
}

// Throughput samples the aggregator's histograms got from one flow and one
// transfer: {flow, transfer}.
std::pair<uint64_t, uint64_t> aggregated(const MetricOptions& mo) {
  auto registry = std::make_shared<prometheus::Registry>();
  AggregatorOptions options;
  options.size_classes_bytes = mo.size_classes_bytes;
  options.throughput_min_bytes = mo.throughput_min_bytes;
  Aggregator aggregator(registry, options);
  aggregator.add(completed_flow(), AsnLabel::kOwn);
  aggregator.add(sent_transfer(), AsnLabel::kOwn);
  return {histogram_samples(*registry, "tcpscope_flow_throughput_bytes_per_second"),
          histogram_samples(*registry, "tcpscope_transfer_throughput_bytes_per_second")};
}

uint64_t evidence(const MetricOptions& mo) {
  ArmEvidence e;
  ConnectionSums sums;
  e.add_transfer(sent_transfer(), mo.throughput_min_bytes, &sums);
  return static_cast<uint64_t>(e.objective(Objective::kThroughput).x);
}

uint64_t read_from_flow_log(const MetricOptions& mo) {
  TempDir dir;
  std::string line;
  append_flow_json(completed_flow(), &line);
  FlowLogSource source(dir.write("flows.ndjson", line), mo);
  CompareOptions o;
  o.metric = Measure::kThroughput;
  o.by = "all";
  std::string why, error;
  const Selection cubic = *Selection::parse("cc=cubic", &why);
  CompareSamples samples;
  EXPECT_TRUE(source.collect(o, cubic, cubic, &samples, &error)) << error;
  uint64_t n = 0;
  for (const auto& g : samples.groups) n += g.a.count();
  return n;
}

std::string clickhouse_where(const MetricOptions& mo, SampleUnit unit) {
  CompareOptions o;
  o.metric = Measure::kThroughput;
  o.unit = unit;
  o.by = "all";
  o.metric_options = mo;
  std::string why;
  const std::string sql = clickhouse_arm_sql(ClickHouseQuery{}, "records", {}, o, *Selection::parse("cc=cubic", &why),
                                             FlowSketch().inv_log_gamma(), 1);
  return sql.substr(sql.find(" WHERE "));
}

TEST(Population, EveryReaderFollowsTheRule) {
  for (const uint64_t tmin : {kBytes + 1, kBytes}) {
    SCOPED_TRACE("throughput_min_bytes " + std::to_string(tmin));
    MetricOptions mo;
    mo.throughput_min_bytes = tmin;
    const bool counts = in_population(metric_population(Measure::kThroughput),
                                      metric_inputs(completed_flow()), mo);
    EXPECT_EQ(counts, tmin <= kBytes);
    EXPECT_EQ(counts, in_population(metric_population(Measure::kThroughput),
                                    metric_inputs(sent_transfer()), mo));

    EXPECT_EQ(aggregated(mo), (std::pair<uint64_t, uint64_t>(counts, counts)));
    EXPECT_EQ(evidence(mo), counts ? 1u : 0u);
    EXPECT_EQ(read_from_flow_log(mo), counts ? 1u : 0u);
    const std::string t = std::to_string(tmin);
    EXPECT_NE(clickhouse_where(mo, SampleUnit::kFlow).find("(`bytes_acked` + `bytes_received`) >= " + t),
              std::string::npos);
    EXPECT_NE(clickhouse_where(mo, SampleUnit::kTransfer).find("`bytes` >= " + t), std::string::npos);
  }
}

// The ClickHouse query writes every term of a metric's population, and
// nothing of another metric's.
TEST(Population, ClickHouseWritesEachTerm) {
  MetricOptions mo;
  const auto where = [&](Measure m, SampleUnit u) {
    CompareOptions o;
    o.metric = m;
    o.unit = u;
    o.by = "all";
    o.metric_options = mo;
    std::string why;
    const std::string sql = clickhouse_arm_sql(ClickHouseQuery{}, "records", {}, o,
                                               *Selection::parse("cc=cubic", &why), FlowSketch().inv_log_gamma(), 1);
    return sql.substr(sql.find(" WHERE "));
  };
  EXPECT_NE(where(Measure::kRtt, SampleUnit::kFlow).find("`srtt_us` > 0"), std::string::npos);
  EXPECT_EQ(where(Measure::kFct, SampleUnit::kFlow).find("`srtt_us`"), std::string::npos);
  EXPECT_NE(where(Measure::kRetrans, SampleUnit::kFlow).find("`segs_out` > 0"), std::string::npos);
  const std::string fct = where(Measure::kFct, SampleUnit::kFlow);
  for (const char* term : {"(`outcome` = 'ok')", "`partial` = 0", "< 3000000"})
    EXPECT_NE(fct.find(term), std::string::npos) << term << " in " << fct;
  // A completion under a microsecond is a sample, as the histograms count it.
  EXPECT_EQ(fct.find("`fct_us` > 0"), std::string::npos) << fct;
  const std::string sent = where(Measure::kThroughput, SampleUnit::kTransfer);
  for (const char* term : {"(`direction` != 'send') = 0", "`xfer_us` > 0", "2 * toInt64(`rwnd_limited_us`)"})
    EXPECT_NE(sent.find(term), std::string::npos) << term << " in " << sent;
  // A transfer is a finished run: no outcome, no partial.
  EXPECT_EQ(sent.find("`outcome`"), std::string::npos);
}

// The per-record evaluation (one bit per term, a mask per population) says
// what term_holds() says, for every term, and metric_values() what
// in_population() and metric_value() say, over records on both sides of
// every threshold.
TEST(Population, TermBitsFollowTermHolds) {
  MetricOptions mo;
  mo.throughput_min_bytes = 1000;
  std::vector<MetricInputs> inputs;
  for (const uint64_t bytes : {0ul, 1ul, 999ul, 1000ul, 5000ul})
    for (const int64_t time : {0l, 1l, 250l})
      for (const bool flag : {false, true}) {
        MetricInputs in;
        in.unit = flag ? SampleUnit::kTransfer : SampleUnit::kFlow;
        in.ok = flag || bytes != 1;
        in.partial = !flag && bytes == 999;
        in.recv = flag && time == 1;
        in.rwnd_limited = flag && bytes == 5000;
        in.bytes = bytes;
        in.fct_us = time;
        in.srtt_us = static_cast<uint64_t>(time);
        in.retrans_segs = flag ? 1 : 0;
        in.segs_out = bytes / 10;
        inputs.push_back(in);
      }
  for (const MetricInputs& in : inputs) {
    const TermBits holding = holding_terms(in, mo);
    for (int i = 0; i < kMetricInputCount; ++i)
      for (int t = 0; t < kMetricTestCount; ++t) {
        const PopulationTerm term{static_cast<MetricInput>(i), static_cast<MetricTest>(t)};
        EXPECT_EQ((holding & term_bit(term)) != 0, term_holds(term, in, mo)) << i << " " << t;
      }
    const MetricValues values = metric_values(in, mo);
    EXPECT_EQ(values.completed, in_population(completed_population(), in, mo));
    EXPECT_EQ(values.bytes, in.bytes);
    EXPECT_EQ(values.time, input_value(MetricInput::kTime, in));
    for (int m = 0; m < kMeasureCount; ++m) {
      const auto measure = static_cast<Measure>(m);
      const bool counts = unit_supported(measure, in.unit) && in_population(metric_population(measure), in, mo);
      EXPECT_EQ(values.value[m].has_value(), counts) << to_string(measure);
      EXPECT_EQ(values.value[m], metric_value(measure, in, mo)) << to_string(measure);
    }
    MetricInputs unlimited = in;
    unlimited.rwnd_limited = false;
    EXPECT_EQ(values.throughput_held_by_window,
              !values.value[static_cast<int>(Measure::kThroughput)] &&
                  in_population(metric_population(Measure::kThroughput), unlimited, mo));
  }
}

}  // namespace
}  // namespace tcpscope
