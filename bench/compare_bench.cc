// The costs behind `tcpscope compare`: what the daemon pays per flow to keep
// the --server distributions (FlowSketch::add, FlowDistributions::add), and
// what a query costs (merging, the statistics, reading a flow log).
#include <benchmark/benchmark.h>

#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "aggregate/flow_distributions.h"
#include "compare/compare.h"
#include "compare/flow_log_source.h"
#include "measure/flow_sketch.h"
#include "measure/selection.h"
#include "record/flow_json.h"
#include "record/flow_record.h"

namespace tcpscope {
namespace {

const std::vector<std::string> kClasses{"client", "intra-pop", "pop-to-pop", "origin", "transit"};
const std::vector<std::string> kCcs{"cubic", "bbr"};

// Edge-like flows: 5 peer classes, 60 ASNs with a Zipf-like share, 2 CCs
// split by an experiment, mostly small objects, a few resets.
std::vector<FlowRecord> make_flows(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<double> w;
  for (int i = 1; i <= 60; ++i) w.push_back(1.0 / i);
  std::discrete_distribution<int> asn_pick(w.begin(), w.end());
  std::lognormal_distribution<double> size(10.0, 2.0), fct(std::log(50000), 1.0), rtt(std::log(30000), 0.6);
  std::uniform_int_distribution<int> pct(0, 99);
  std::vector<FlowRecord> flows(n);
  for (auto& f : flows) {
    f.peer_class = kClasses[static_cast<size_t>(pct(rng)) % kClasses.size()];
    f.cc = kCcs[static_cast<size_t>(pct(rng)) % kCcs.size()];
    f.arm = f.cc;
    f.experiment = "bbr-vs-cubic";
    f.asn = 64500 + static_cast<uint32_t>(asn_pick(rng));
    f.outcome = pct(rng) < 97 ? Outcome::kOk : Outcome::kReset;
    f.bytes_acked = static_cast<uint64_t>(size(rng));
    f.bytes_received = 400;
    f.fct_us = static_cast<int64_t>(fct(rng));
    f.srtt_us = static_cast<uint32_t>(rtt(rng));
    f.segs_out = 10 + static_cast<uint32_t>(f.bytes_acked / 1400);
    f.retrans_segs = pct(rng) < 20 ? 1 : 0;
    f.laddr = *IpAddr::parse("198.18.0.1");
    f.raddr = *IpAddr::parse("198.18.0.2");
  }
  return flows;
}

void BM_SketchAdd(benchmark::State& state) {
  std::mt19937_64 rng(1);
  std::lognormal_distribution<double> d(std::log(50000), 1.0);
  std::vector<double> values(4096);
  for (auto& v : values) v = d(rng);
  FlowSketch s;
  size_t i = 0;
  for (auto _ : state) s.add(values[i++ & 4095]);
  state.SetItemsProcessed(state.iterations());
}
BENCHMARK(BM_SketchAdd);

// The per-record cost the ring reader pays: key, lookup, three sketch adds.
void BM_DistributionsAdd(benchmark::State& state) {
  const auto flows = make_flows(1 << 16, 7);
  FlowDistributions d{FlowDistributionsOptions{}};
  size_t i = 0;
  for (auto _ : state) {
    const size_t k = i++ & (flows.size() - 1);
    d.add(flows[k], AsnLabel::kOwn);
  }
  state.SetItemsProcessed(state.iterations());
  const auto st = d.stats();
  state.counters["keys"] = static_cast<double>(st.keys);
  state.counters["MiB"] = static_cast<double>(st.memory_bytes) / 1048576.0;
}
BENCHMARK(BM_DistributionsAdd);

// One --server query over a full table: merge per group, serialize.
void BM_DistributionsQuery(benchmark::State& state) {
  const auto flows = make_flows(1 << 18, 8);
  FlowDistributions d{FlowDistributionsOptions{}};
  for (const auto& f : flows) d.add(f, AsnLabel::kOwn);
  for (auto _ : state) benchmark::DoNotOptimize(d.handle_query("metric=fct&by=asn&a=cc%3Dcubic&b=cc%3Dbbr"));
  state.counters["keys"] = static_cast<double>(d.stats().keys);
}
BENCHMARK(BM_DistributionsQuery)->Unit(benchmark::kMillisecond);

// The statistics of one group: rank test + 10000 bootstrap resamples.
void BM_CompareGroup(benchmark::State& state) {
  const size_t n = static_cast<size_t>(state.range(0));
  std::mt19937_64 rng(3);
  std::lognormal_distribution<double> d(std::log(50000), 1.0);
  std::vector<double> a(n), b(n);
  for (auto& x : a) x = d(rng);
  for (auto& x : b) x = 0.95 * d(rng);
  CompareOptions o;
  for (auto _ : state) {
    std::vector<GroupSamples> groups(1);
    groups[0].group = "g";
    groups[0].a = ArmDistribution::exact(a);
    groups[0].b = ArmDistribution::exact(b);
    benchmark::DoNotOptimize(compare_groups(std::move(groups), o));
  }
}
BENCHMARK(BM_CompareGroup)->Arg(100)->Arg(10000)->Arg(1000000)->Unit(benchmark::kMillisecond);

// Reading a flow log: JSON parse, metric, selection, grouping per line.
void BM_FlowLogLine(benchmark::State& state) {
  const auto flows = make_flows(4096, 9);
  std::vector<std::string> lines;
  for (const auto& f : flows) {
    std::string s;
    append_flow_json(f, &s);
    lines.push_back(std::move(s));
  }
  CompareOptions o;
  o.by = "asn";
  std::string why;
  const Selection a = *Selection::parse("cc=cubic", &why), b = *Selection::parse("cc=bbr", &why);
  FlowLogCollector c(o, a, b);
  size_t i = 0, bytes = 0;
  for (auto _ : state) {
    const std::string& l = lines[i++ & 4095];
    c.add_line(l);
    bytes += l.size();
  }
  state.SetItemsProcessed(state.iterations());
  state.SetBytesProcessed(static_cast<int64_t>(bytes));
}
BENCHMARK(BM_FlowLogLine);

}  // namespace
}  // namespace tcpscope
