// The daemon's per-record path, stage by stage and end to end, on one core:
// decode_flow_event (kernel event -> FlowRecord), Enricher::enrich (ASN trie +
// peer class), Aggregator::add (Prometheus series), append_flow_json (the
// NDJSON line). This is what the ring reader does for every finished flow
// (pipeline/record_fanout.h, then each record sink).
//
//   tcpscope_bench --benchmark_filter=Pipeline
//
// "items_per_second" is records per second on one core. The ASN database is
// a generated CAIDA pfx2as file of 100k prefixes shaped like a BGP table;
// remote addresses are half inside its prefixes, half random, cycled over
// 64Ki records so lookups miss the caches as real traffic does. Records have
// the label variety of edge traffic (3 peer classes + default, ~60 ASNs
// with a skewed share, 2 CCs).
//
// BM_FlowPathServices: the same path with and without naming the service
// that owns each socket, over 1,000 real cgroups (needs root).
//
// BM_PipelineSeriesMemory fills every label combination of the default
// series cap and reports the heap held per series (mallinfo2 delta).
#include <benchmark/benchmark.h>
#include <malloc.h>
#include <prometheus/registry.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <fstream>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "aggregate/aggregate_sinks.h"
#include "aggregate/aggregator.h"
#include "aggregation.h"
#include "pipeline/asn_ranking.h"
#include "pipeline/record_fanout.h"
#include "aggregate/flow_distributions.h"
#include "enrich/asn_db.h"
#include "enrich/enricher.h"
#include "enrich/peer_classifier.h"
#include "enrich/service_names.h"
#include "export/kafka_protobuf.h"
#include "os/cgroup_path.h"
#include "record/flow_decoder.h"
#include "record/flow_json.h"
#include "pipeline/flow_pipeline.h"
#include "policy/rule_names.h"
#include "record/transfer_json.h"

namespace tcpscope {
namespace {

using bench::rank_and_add;
using bench::rerank;

constexpr size_t kRecords = 1 << 16;
constexpr size_t kAsnPrefixes = 100000;

struct Fixture {
  std::vector<tcpscope_flow_event> events;
  std::shared_ptr<const AsnDatabase> asn_db;
  std::shared_ptr<const PeerClassifier> classifier;
  MonotonicToRealtime clock{1700000000000000000LL};

  EnrichmentTables tables() const { return {classifier, asn_db}; }
};

uint32_t v4(uint8_t a, uint8_t b, uint8_t c, uint8_t d) {
  return uint32_t{a} << 24 | uint32_t{b} << 16 | uint32_t{c} << 8 | d;
}

void put_v4(__u8 out[16], uint32_t addr) {
  std::memset(out, 0, 16);
  out[0] = uint8_t(addr >> 24);
  out[1] = uint8_t(addr >> 16);
  out[2] = uint8_t(addr >> 8);
  out[3] = uint8_t(addr);
}

const Fixture& fixture() {
  static const Fixture* f = [] {
    auto* fx = new Fixture();
    std::mt19937_64 rng(7);
    // pfx2as: mostly /24s, some /16-/23, few /8-/15, ~60k origin ASNs; the
    // first 60 ASNs own the prefixes most traffic goes to (Zipf-like).
    char path[] = "/tmp/tcpscope-pipeline-bench-XXXXXX";
    int fd = mkstemp(path);
    if (fd < 0) std::abort();
    close(fd);
    std::vector<std::pair<uint32_t, int>> prefixes;
    {
      std::ofstream out(path);
      for (size_t i = 0; i < kAsnPrefixes; ++i) {
        const int r = int(rng() % 100);
        const int len = r < 60 ? 24 : r < 90 ? 16 + int(rng() % 8) : 8 + int(rng() % 8);
        const uint32_t addr = uint32_t(rng()) & (len ? ~0u << (32 - len) : 0);
        const uint32_t asn = i < 6000 ? 64500 + uint32_t(i % 60) : 1000 + uint32_t(rng() % 60000);
        prefixes.emplace_back(addr, len);
        out << (addr >> 24) << '.' << ((addr >> 16) & 255) << '.' << ((addr >> 8) & 255) << '.' << (addr & 255)
            << '\t' << len << '\t' << asn << '\n';
      }
    }
    AsnConfig cfg;
    cfg.prefix_file = path;
    std::string error;
    fx->asn_db = AsnDatabase::load(cfg, &error);
    std::remove(path);
    if (!fx->asn_db) {
      std::fprintf(stderr, "pipeline_bench: loading the generated pfx2as failed: %s\n", error.c_str());
      std::abort();
    }
    std::vector<PeerClassSpec> classes(3);
    classes[0].name = "intra-pop";
    classes[0].prefixes = {*Prefix::parse("10.20.0.0/16")};
    classes[1].name = "pop-to-pop";
    classes[1].prefixes = {*Prefix::parse("10.0.0.0/8"), *Prefix::parse("fd00::/8")};
    classes[2].name = "origin";
    classes[2].asns = {64500};
    fx->classifier = std::make_shared<const PeerClassifier>(classes, "client");

    std::uniform_int_distribution<int> pct(0, 99);
    std::lognormal_distribution<double> size(10.0, 2.0);
    fx->events.resize(kRecords);
    uint64_t t = 1000000000000ULL;
    for (auto& ev : fx->events) {
      std::memset(&ev, 0, sizeof(ev));
      const int p = pct(rng);
      uint32_t raddr;
      if (p < 10) {
        raddr = v4(10, uint8_t(rng() % 40), uint8_t(rng()), uint8_t(rng()));  // pop / intra-pop
      } else if (p < 60) {
        // Inside a stored prefix, weighted to the first (popular) ones.
        const auto& [base, len] = prefixes[pct(rng) < 70 ? rng() % 6000 : rng() % prefixes.size()];
        raddr = base | (len < 32 ? uint32_t(rng()) & (~0u >> len) : 0);
      } else {
        raddr = uint32_t(rng());
      }
      ev.id.family = 4;
      put_v4(ev.id.saddr, v4(198, 18, 0, 1));
      put_v4(ev.id.daddr, raddr);
      ev.id.sport = 443;
      ev.id.dport = uint16_t(1024 + rng() % 60000);
      ev.id.dir = TCPSCOPE_DIR_PASSIVE;
      ev.outcome = p < 97 ? TCPSCOPE_OUTCOME_OK : TCPSCOPE_OUTCOME_RESET;
      ev.flags = TCPSCOPE_F_ESTABLISHED | TCPSCOPE_F_FIN_SENT | TCPSCOPE_F_TX_DONE;
      ev.id.start_ns = t;
      ev.established_ns = t + 20000000;
      ev.bytes_acked = uint64_t(size(rng));
      ev.bytes_received = 300 + uint64_t(pct(rng)) * 10;
      ev.data_end_ns = ev.established_ns + ev.bytes_acked * 100;
      ev.end_ns = ev.data_end_ns + 1000000;
      ev.srtt_us = 1000 + uint32_t(pct(rng)) * 800;
      ev.min_rtt_us = ev.srtt_us * 3 / 4;
      ev.kernel.rttvar_us = ev.srtt_us / 4;
      ev.kernel.cwnd = 10 + uint32_t(pct(rng));
      ev.kernel.max_cwnd = ev.kernel.cwnd + 5;
      ev.kernel.ssthresh = 0x7fffffff;
      ev.kernel.mss = 1448;
      ev.segs_out = uint32_t(ev.bytes_acked / 1448 + 3);
      ev.kernel.segs_in = ev.segs_out / 2 + 2;
      ev.total_retrans = pct(rng) < 10 ? 1 : 0;
      ev.kernel.delivery_rate_bps = 10ULL * 1448 * 8 * 1000000 / ev.srtt_us;
      ev.kernel.pacing_rate_bps = 10000000;
      ev.ca_state_ns[0] = ev.end_ns - ev.established_ns;
      ev.pid = 1234;
      ev.id.task_cgroup_id = 5678;
      ev.id.netns = 4026531840u;
      std::strcpy(ev.cc, pct(rng) < 50 ? "bbr" : "cubic");
      std::strcpy(ev.comm, "nginx");
      t += 50000;
    }
    return fx;
  }();
  return *f;
}

std::vector<FlowRecord> decoded() {
  const auto& fx = fixture();
  std::vector<FlowRecord> out;
  out.reserve(fx.events.size());
  for (const auto& ev : fx.events) out.push_back(decode_flow_event(ev, fx.clock));
  return out;
}

std::vector<FlowRecord> enriched() {
  Enricher enricher(fixture().tables());
  auto flows = decoded();
  for (auto& f : flows) enricher.enrich(f.raddr, &f.enrichment);
  return flows;
}

void BM_PipelineDecode(benchmark::State& state) {
  const auto& fx = fixture();
  size_t i = 0;
  for (auto _ : state) {
    FlowRecord r = decode_flow_event(fx.events[i], fx.clock);
    benchmark::DoNotOptimize(r);
    i = (i + 1) & (kRecords - 1);
  }
  state.SetItemsProcessed(state.iterations());
}
BENCHMARK(BM_PipelineDecode);

void BM_PipelineEnrich(benchmark::State& state) {
  Enricher enricher(fixture().tables());
  auto flows = decoded();
  size_t i = 0;
  for (auto _ : state) {
    benchmark::DoNotOptimize(enricher.enrich(flows[i].raddr, &flows[i].enrichment));
    i = (i + 1) & (kRecords - 1);
  }
  state.SetItemsProcessed(state.iterations());
}
BENCHMARK(BM_PipelineEnrich);

// The daemon adds a drain's records in one Aggregator batch and publishes
// them at its end; at 75k records/s and a drain every 100 ms a drain holds
// about 7,500. The benchmarks publish every 1,024 records (more often).
constexpr size_t kDrainRecords = 1024;
void publish_drain(Aggregator& agg) {
  agg.end_batch();
  agg.begin_batch();
}

// The measured loop: record i of kRecords, in turn, through `step`, with
// the drain published every kDrainRecords.
template <class Step>
void run_drains(benchmark::State& state, Aggregator& agg, Step step) {
  size_t i = 0;
  agg.begin_batch();
  for (auto _ : state) {
    step(i);
    i = (i + 1) & (kRecords - 1);
    if ((i & (kDrainRecords - 1)) == 0) publish_drain(agg);
  }
  agg.end_batch();
  state.SetItemsProcessed(state.iterations());
}

void BM_PipelineAggregate(benchmark::State& state) {
  const auto flows = enriched();
  auto registry = std::make_shared<prometheus::Registry>();
  Aggregator agg(registry, AggregatorOptions{});
  AsnRanking ranking(AsnRankingOptions{});
  for (const auto& f : flows) rank_and_add(ranking, agg, f);  // series exist, as in a running daemon
  rerank(ranking, agg);
  run_drains(state, agg, [&](size_t i) { rank_and_add(ranking, agg, flows[i]); });
}
BENCHMARK(BM_PipelineAggregate);

// Each record through `append` into a batch the daemon hands to its writer
// every drain (1,024 records here).
template <class Append>
void run_writer(benchmark::State& state, Append append) {
  const auto flows = enriched();
  std::string batch;
  batch.reserve(1 << 20);
  size_t i = 0;
  for (auto _ : state) {
    append(flows[i], &batch);
    i = (i + 1) & (kRecords - 1);
    if ((i & 1023) == 0) batch.clear();
  }
  state.SetItemsProcessed(state.iterations());
}

void BM_PipelineFlowJson(benchmark::State& state) {
  run_writer(state, [](const FlowRecord& r, std::string* out) { append_flow_json(r, out); });
}
BENCHMARK(BM_PipelineFlowJson);

// The same records as Kafka's protobuf messages (export.kafka.format: protobuf).
void BM_PipelineFlowProtobuf(benchmark::State& state) {
  run_writer(state, [](const FlowRecord& r, std::string* out) { append_protobuf(r, out); });
}
BENCHMARK(BM_PipelineFlowProtobuf);

// The goal: enrichment + aggregation >= 2M records/s per core.
void BM_PipelineEnrichAggregate(benchmark::State& state) {
  Enricher enricher(fixture().tables());
  auto flows = decoded();
  auto registry = std::make_shared<prometheus::Registry>();
  Aggregator agg(registry, AggregatorOptions{});
  AsnRanking ranking(AsnRankingOptions{});
  for (auto f : flows) {
    enricher.enrich(f.raddr, &f.enrichment);
    rank_and_add(ranking, agg, f);
  }
  rerank(ranking, agg);
  run_drains(state, agg, [&](size_t i) {
    enricher.enrich(flows[i].raddr, &flows[i].enrichment);
    rank_and_add(ranking, agg, flows[i]);
  });
}
BENCHMARK(BM_PipelineEnrichAggregate);

// Everything the ring reader does per record; Arg(1) adds the flow-log line.
void BM_PipelineEndToEnd(benchmark::State& state) {
  const bool flow_log = state.range(0) != 0;
  const auto& fx = fixture();
  Enricher enricher(fx.tables());
  auto registry = std::make_shared<prometheus::Registry>();
  Aggregator agg(registry, AggregatorOptions{});
  AsnRanking ranking(AsnRankingOptions{});
  for (const auto& ev : fx.events) {
    FlowRecord f = decode_flow_event(ev, fx.clock);
    enricher.enrich(f.raddr, &f.enrichment);
    rank_and_add(ranking, agg, f);
  }
  rerank(ranking, agg);
  std::string batch;
  batch.reserve(1 << 20);
  run_drains(state, agg, [&](size_t i) {
    FlowRecord f = decode_flow_event(fx.events[i], fx.clock);
    enricher.enrich(f.raddr, &f.enrichment);
    rank_and_add(ranking, agg, f);
    if (flow_log) {
      append_flow_json(f, &batch);
      if ((i & 1023) == 0) batch.clear();
    }
  });
  state.SetLabel(flow_log ? "decode+enrich+aggregate+json" : "decode+enrich+aggregate");
}
BENCHMARK(BM_PipelineEndToEnd)->Arg(0)->Arg(1);

// Heap per series at the default cap (5 classes x 52 asn values x 2 CCs x
// 4 size classes, every dir/outcome/state): what the daemon holds per series
// on top of its fixed start-up memory.
void BM_PipelineSeriesMemory(benchmark::State& state) {
  for (auto _ : state) {
    const size_t heap0 = mallinfo2().uordblks;
    auto registry = std::make_shared<prometheus::Registry>();
    auto agg = std::make_unique<Aggregator>(registry, AggregatorOptions{});
    AsnRanking ranking(AsnRankingOptions{});
    FlowRecord f;
    f.srtt_us = 20000;
    f.min_rtt_us = 15000;
    f.fct_us = 500000;
    f.segs_out = 10;
    f.retrans_segs = 1;
    bench::fill_default_cap(ranking, agg.get(), f);
    size_t series = 0, samples = 0;
    for (const auto& fam : registry->Collect()) {
      series += fam.metric.size();
      for (const auto& m : fam.metric) samples += m.histogram.bucket.empty() ? 1 : m.histogram.bucket.size() + 2;
    }
    const size_t heap = mallinfo2().uordblks - heap0;
    state.counters["series"] = static_cast<double>(series);
    state.counters["samples"] = static_cast<double>(samples);
    state.counters["heap_MiB"] = static_cast<double>(heap) / 1048576.0;
    state.counters["bytes_per_series"] = static_cast<double>(heap) / static_cast<double>(series);
    state.counters["bytes_per_sample"] = static_cast<double>(heap) / static_cast<double>(samples);
  }
}
BENCHMARK(BM_PipelineSeriesMemory)->Iterations(1)->Unit(benchmark::kMillisecond);

}  // namespace
}  // namespace tcpscope

namespace tcpscope {
namespace {

// The flow log's part of a drain without its writer thread: the JSON lines
// of the records, batched (export/output_sinks.h).
class LineBatchSink final : public RecordSink {
 public:
  void add(const RoutedFlow& flow) override { batch.append(flow.json()); }
  void add(const RoutedTransfer& transfer) override { batch.append(transfer.json()); }
  void end_drain() override { batch.clear(); }
  std::string batch;
};

// A transfer's path through the daemon, by the daemon's own code: decode
// and enrich (FlowPipeline), the fanout's ASN label, then the sinks: the
// Prometheus series and the /api/v1 distributions; with Arg 1 their flow-log
// lines too. Every transfer record the kernel hands over is of a followed flow.
// Transfers of the fixture's flows, 1-2 kB, four per flow (a kept-alive
// connection's requests and responses), of 2,048 connections at a time
// whose transfers interleave, as a busy edge's do.
void BM_TransferPath(benchmark::State& state) {
  const bool flow_log = state.range(0) != 0;
  const auto& fx = fixture();
  constexpr size_t kActive = 2048;
  std::vector<tcpscope_transfer_event> events(kRecords);
  for (size_t i = 0; i < kRecords; ++i) {
    const size_t block = i / (4 * kActive), j = i % (4 * kActive);
    const tcpscope_flow_event& f = fx.events[block * kActive + j % kActive];
    tcpscope_transfer_event& e = events[i];
    std::memset(&e, 0, sizeof(e));
    e.id = f.id;
    e.seq = uint32_t(j / kActive);
    e.direction = e.seq % 2 ? TCPSCOPE_XFER_RECV : TCPSCOPE_XFER_SEND;
    e.start_ns = f.established_ns + e.seq * 1000000;
    e.end_ns = e.start_ns + 200000;
    e.bytes = 1000 + (i % 7) * 150;
    e.wait_us = 40;
    e.srtt_us = f.srtt_us;
    e.min_rtt_us = f.min_rtt_us;
    std::memcpy(e.cc, f.cc, sizeof(e.cc));
  }
  Enricher enricher(fx.tables());
  RuleNames rule_names;
  FlowPipeline pipeline(fx.clock, enricher, rule_names, TransferDelimiter::kWrite);
  Config config;
  RecordFanout fanout(pipeline, config);
  AggregatorSink series(std::make_shared<prometheus::Registry>(), AggregatorOptions{});
  DistributionsSink distributions(FlowDistributionsOptions{}, [](const std::string&) {});
  LineBatchSink lines;
  fanout.add_sink(&series);
  fanout.add_sink(&distributions);
  if (flow_log) fanout.add_sink(&lines);
  // As in a running daemon: the flows ranked, their series and sketches there.
  auto now = RecordSink::Clock::now();
  fanout.begin_drain(now);
  for (const auto& ev : fx.events) fanout.on_flow(ev);
  fanout.tick(now + std::chrono::minutes(2));
  for (const auto& ev : events) fanout.on_transfer(ev);
  fanout.end_drain();
  const uint64_t warm_lookups = pipeline.lookups();
  size_t i = 0;
  fanout.begin_drain(now);
  for (auto _ : state) {
    fanout.on_transfer(events[i]);
    i = (i + 1) & (kRecords - 1);
    if ((i & (kDrainRecords - 1)) == 0) {
      fanout.end_drain();
      fanout.begin_drain(now = RecordSink::Clock::now());  // the daemon reads the clock once per drain
    }
  }
  fanout.end_drain();
  state.SetItemsProcessed(state.iterations());
  state.counters["lookups_per_record"] = double(pipeline.lookups() - warm_lookups) / double(state.iterations());
  state.SetLabel(flow_log ? "transfer: decode+enrich+aggregate+distributions+sampled json"
                          : "transfer: decode+enrich+aggregate+distributions");
}
BENCHMARK(BM_TransferPath)->Arg(0)->Arg(1);

// Real cgroups for the service names to name: kCgroups units made under the
// cgroup2 mount for the benchmark's run, removed with it.
class BenchCgroups {
 public:
  static constexpr size_t kCgroups = 1000;
  BenchCgroups() {
    root_ = cgroup2_mount_point();
    if (root_.empty()) return;
    base_ = root_ + "/tcpscope-bench-" + std::to_string(getpid());
    if (mkdir(base_.c_str(), 0755) != 0) return;
    for (size_t i = 0; i < kCgroups; ++i) {
      const std::string dir = base_ + "/svc-" + std::to_string(i) + ".service";
      struct stat st {};
      if (mkdir(dir.c_str(), 0755) != 0 || stat(dir.c_str(), &st) != 0) return;
      dirs_.push_back(dir);
      ids_.push_back(st.st_ino);  // on cgroup v2 the directory's inode is the cgroup's id
    }
  }
  ~BenchCgroups() {
    for (const auto& d : dirs_) rmdir(d.c_str());
    if (!base_.empty()) rmdir(base_.c_str());
  }
  bool ok() const { return ids_.size() == kCgroups; }
  const std::string& root() const { return root_; }
  const std::vector<uint64_t>& ids() const { return ids_; }

 private:
  std::string root_, base_;
  std::vector<std::string> dirs_;
  std::vector<uint64_t> ids_;
};

// A finished flow's path through the daemon (FlowPipeline, the fanout, the
// Prometheus series and the /api/v1 distributions), the flows' sockets in
// 1,000 cgroups: Arg 0 without service names (every owner unknown, as where
// no cgroup v2 is mounted), Args 1 and 2 with them (the namer watching the
// host's whole tree and the 1,000 units; the series gain the service
// label). The difference is what naming costs per record.
void BM_FlowPathServices(benchmark::State& state) {
  const bool named = state.range(0) != 0;
  const auto& fx = fixture();
  BenchCgroups cgroups;
  if (!cgroups.ok()) {
    state.SkipWithError("cannot make 1,000 cgroups under the cgroup2 mount (needs root and cgroup v2)");
    return;
  }
  std::unique_ptr<ServiceNames> names;
  if (named) {
    ServiceNamesOptions options;
    options.cgroup_root = cgroups.root();
    std::string error;
    names = ServiceNames::create(std::move(options), &error);
    if (!names) {
      state.SkipWithError(error.c_str());
      return;
    }
  }
  // Arg 1: every cgroup as busy as the next (the top-N of the service
  // ranking unsettled, the worst case); Arg 2: a Zipf(1) share each, as a
  // host's services carry traffic (a few most of it).
  std::vector<tcpscope_flow_event> events = fx.events;
  std::mt19937_64 rng(11);
  std::vector<double> weights(cgroups.ids().size());
  for (size_t k = 0; k < weights.size(); ++k) weights[k] = 1.0 / double(k + 1);
  std::discrete_distribution<size_t> zipf(weights.begin(), weights.end());
  for (size_t i = 0; i < events.size(); ++i)
    events[i].id.sock_cgroup_id = cgroups.ids()[state.range(0) == 2 ? zipf(rng) : i % cgroups.ids().size()];
  Enricher enricher(fx.tables());
  RuleNames rule_names;
  FlowPipeline pipeline(fx.clock, enricher, rule_names, TransferDelimiter::kWrite, names.get());
  Config config;
  RecordFanout fanout(pipeline, config);
  AggregatorSink series(std::make_shared<prometheus::Registry>(), AggregatorOptions::from_config(config));
  DistributionsSink distributions(FlowDistributionsOptions{}, [](const std::string&) {});
  fanout.add_sink(&series);
  fanout.add_sink(&distributions);
  auto now = RecordSink::Clock::now();
  fanout.begin_drain(now);
  for (const auto& ev : events) fanout.on_flow(ev);
  fanout.tick(now + std::chrono::minutes(2));
  fanout.end_drain();
  size_t i = 0;
  fanout.begin_drain(now);
  for (auto _ : state) {
    fanout.on_flow(events[i]);
    i = (i + 1) & (kRecords - 1);
    if ((i & (kDrainRecords - 1)) == 0) {
      fanout.end_drain();
      fanout.begin_drain(now = RecordSink::Clock::now());
    }
  }
  fanout.end_drain();
  state.SetItemsProcessed(state.iterations());
  if (names) state.counters["unresolved"] = double(names->counts().unresolved_lookups);
  state.SetLabel(!named                 ? "flow: decode+enrich+aggregate+distributions, no service names"
                 : state.range(0) == 1 ? "flow: ... + name 1,000 services, even traffic"
                                       : "flow: ... + name 1,000 services, Zipf traffic");
}
BENCHMARK(BM_FlowPathServices)->Arg(0)->Arg(1)->Arg(2);

// A finished flow's path at the shipped defaults: no ASN data, no peer
// classes (every peer the default class), the Prometheus series and the
// /api/v1 distributions, no flow log; owners unknown (the naming is
// BM_FlowPathServices'). What the daemon does per record of bench/edge.py.
void BM_FlowPathDefaultConfig(benchmark::State& state) {
  const auto& fx = fixture();
  Config config;
  EnrichmentTables tables;
  tables.classifier = std::make_shared<const PeerClassifier>(std::vector<PeerClassSpec>{}, config.default_peer_class);
  Enricher enricher(tables);
  RuleNames rule_names;
  FlowPipeline pipeline(fx.clock, enricher, rule_names, TransferDelimiter::kWrite);
  RecordFanout fanout(pipeline, config);
  AggregatorSink series(std::make_shared<prometheus::Registry>(), AggregatorOptions::from_config(config));
  DistributionsSink distributions(FlowDistributionsOptions::from_config(config), [](const std::string&) {});
  fanout.add_sink(&series);
  fanout.add_sink(&distributions);
  size_t i = 0;
  auto now = RecordSink::Clock::now();
  fanout.begin_drain(now);
  for (auto _ : state) {
    fanout.on_flow(fx.events[i]);
    i = (i + 1) & (kRecords - 1);
    if ((i & (kDrainRecords - 1)) == 0) {
      fanout.end_drain();
      fanout.begin_drain(now = RecordSink::Clock::now());
    }
  }
  fanout.end_drain();
  state.SetItemsProcessed(state.iterations());
  state.SetLabel("flow at the shipped defaults: decode+enrich+aggregate+distributions");
}
BENCHMARK(BM_FlowPathDefaultConfig);

}  // namespace
}  // namespace tcpscope
