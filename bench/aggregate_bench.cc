// Aggregator::add() throughput with realistic label variety, and the cost of
// rendering /metrics when every label combination of the default series cap
// is present.
#include <benchmark/benchmark.h>
#include <prometheus/registry.h>
#include <prometheus/text_serializer.h>

#include <atomic>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "aggregate/aggregator.h"
#include "aggregation.h"
#include "pipeline/asn_ranking.h"

namespace tcpscope {
namespace {

using bench::kCcs;
using bench::kClasses;
using bench::rank_and_add;
using bench::rerank;

// A pool of flows shaped like edge traffic: 5 peer classes, 60 ASNs with a
// skewed (Zipf-like) byte share, 2 CCs, mostly small objects, a few resets.
std::vector<FlowRecord> make_flows(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<FlowRecord> flows(n);
  std::vector<double> asn_weights;
  for (int i = 1; i <= 60; ++i) asn_weights.push_back(1.0 / i);
  std::discrete_distribution<int> asn_pick(asn_weights.begin(), asn_weights.end());
  std::lognormal_distribution<double> size(10.0, 2.0);  // median ~22 kB, long tail
  std::uniform_int_distribution<int> pct(0, 99);
  for (auto& f : flows) {
    f.enrichment.peer_class = kClasses[static_cast<size_t>(pct(rng)) % kClasses.size()];
    f.cc = kCcs[static_cast<size_t>(pct(rng)) % kCcs.size()];
    const int a = asn_pick(rng);
    f.enrichment.asn = a == 59 ? 0 : 64500 + static_cast<uint32_t>(a);
    f.dir = pct(rng) < 80 ? Direction::kPassive : Direction::kActive;
    const int p = pct(rng);
    f.outcome = p < 95 ? Outcome::kOk : p < 98 ? Outcome::kReset : Outcome::kTimeout;
    f.bytes_acked = static_cast<uint64_t>(size(rng));
    f.bytes_received = 300 + static_cast<uint64_t>(pct(rng)) * 10;
    f.srtt_us = 1000 + static_cast<uint32_t>(pct(rng)) * 800;
    f.min_rtt_us = f.srtt_us * 3 / 4;
    f.fct_us = 3 * f.srtt_us + static_cast<int64_t>(f.bytes_acked / 100);
    f.segs_out = static_cast<uint32_t>(f.bytes_acked / 1400 + 3);
    f.retrans_segs = pct(rng) < 10 ? 1 : 0;
    f.ca_state_us[0] = static_cast<uint64_t>(f.fct_us);
    if (f.retrans_segs) f.ca_state_us[3] = f.srtt_us;
  }
  return flows;
}

void BM_AggregatorAdd(benchmark::State& state) {
  auto registry = std::make_shared<prometheus::Registry>();
  Aggregator agg(registry, AggregatorOptions{});
  AsnRanking ranking(AsnRankingOptions{});
  const auto flows = make_flows(1 << 16, 1);
  for (const auto& f : flows) rank_and_add(ranking, agg, f);  // warm the series cache
  rerank(ranking, agg);
  size_t i = 0;
  for (auto _ : state) {
    rank_and_add(ranking, agg, flows[i]);
    i = (i + 1) & (flows.size() - 1);
  }
  state.SetItemsProcessed(state.iterations());
}
BENCHMARK(BM_AggregatorAdd);

// The same while another thread renders /metrics back to back: the cost of
// sharing prometheus-cpp's per-histogram mutexes and family locks with scrapes
// (a real scraper renders every 15 s or so, so this is the worst case).
void BM_AggregatorAddWhileScraping(benchmark::State& state) {
  auto registry = std::make_shared<prometheus::Registry>();
  Aggregator agg(registry, AggregatorOptions{});
  AsnRanking ranking(AsnRankingOptions{});
  const auto flows = make_flows(1 << 16, 2);
  for (const auto& f : flows) rank_and_add(ranking, agg, f);
  rerank(ranking, agg);
  std::atomic<bool> done{false};
  std::atomic<uint64_t> scrapes{0};
  std::thread scraper([&] {
    prometheus::TextSerializer serializer;
    while (!done) {
      benchmark::DoNotOptimize(serializer.Serialize(registry->Collect()).size());
      ++scrapes;
    }
  });
  size_t i = 0;
  for (auto _ : state) {
    rank_and_add(ranking, agg, flows[i]);
    i = (i + 1) & (flows.size() - 1);
  }
  done = true;
  scraper.join();
  state.SetItemsProcessed(state.iterations());
  state.counters["scrapes"] = static_cast<double>(scrapes.load());
}
BENCHMARK(BM_AggregatorAddWhileScraping);

// The default cap's series, each flow a completed one with its RTTs.
void fill_default_cap(Aggregator* agg) {
  FlowRecord f;
  f.outcome = Outcome::kOk;
  f.srtt_us = 20000;
  f.min_rtt_us = 15000;
  f.fct_us = 500000;
  f.segs_out = 10;
  AsnRanking ranking(AsnRankingOptions{});
  bench::fill_default_cap(ranking, agg, f);
}

// Collect + TextSerializer, as GET /metrics does.
void BM_RenderFullCap(benchmark::State& state) {
  auto registry = std::make_shared<prometheus::Registry>();
  Aggregator agg(registry, AggregatorOptions{});
  fill_default_cap(&agg);
  state.counters["label_sets"] = static_cast<double>(agg.label_sets());
  prometheus::TextSerializer serializer;
  size_t out_bytes = 0;
  for (auto _ : state) {
    auto text = serializer.Serialize(registry->Collect());
    out_bytes = text.size();
    benchmark::DoNotOptimize(text.data());
  }
  state.counters["bytes"] = static_cast<double>(out_bytes);
}
BENCHMARK(BM_RenderFullCap)->Unit(benchmark::kMillisecond);

// The Collect() half alone (what holds the family locks).
void BM_CollectFullCap(benchmark::State& state) {
  auto registry = std::make_shared<prometheus::Registry>();
  Aggregator agg(registry, AggregatorOptions{});
  fill_default_cap(&agg);
  size_t samples = 0;
  for (auto _ : state) {
    auto families = registry->Collect();
    samples = 0;
    for (const auto& f : families) samples += f.metric.size();
    benchmark::DoNotOptimize(families.data());
  }
  state.counters["series"] = static_cast<double>(samples);
}
BENCHMARK(BM_CollectFullCap)->Unit(benchmark::kMillisecond);

}  // namespace
}  // namespace tcpscope
