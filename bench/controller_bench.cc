// How long the controller holds its lock on the largest state a fleet
// config can make it keep: 64 controller rules, each with its table of open
// connections full (65,536 connections, each with its sums in its cohort's
// and its ASN's evidence). The daemon's ring loop does not take this lock (the
// controller works on a thread of its own: daemon/closed_loop.h); what it
// holds the lock for is what /api/v1/controller and the state's snapshot
// delay the controller's own thread by, and how far its records queue up
// meanwhile.
//
//   tcpscope_bench --benchmark_filter=ControllerState
//
// Reported per iteration: the snapshot for the disk (CcController::save(),
// taken under the lock; fitting, serialising and writing are the state
// writer's, off it), the /api/v1/controller answer (status_json()), and one
// transfer's observe() on that state; the counters say the state's size.
#include <benchmark/benchmark.h>
#include <prometheus/registry.h>

#include <cmath>
#include <memory>
#include <string>

#include <nlohmann/json.hpp>

#include "config/config.h"
#include "control/cc_controller.h"
#include "control/connection_table.h"
#include "net/ip_addr.h"
#include "record/transfer_record.h"

namespace tcpscope {
namespace {

constexpr uint32_t kNetns = 4026531840;  // the namespace "self" names
constexpr int kRules = 64;
constexpr uint32_t kAsns = 50;  // a ControllerSpec's default max_cohorts

Config fleet_config() {
  Config c;
  for (int i = 0; i < kRules; ++i) {
    CcRule r;
    r.name = "r" + std::to_string(i);
    r.match.lports = {static_cast<uint16_t>(400 + i)};
    ControllerSpec s;
    s.arms = {"bbr", "cubic"};
    s.cohort = CohortKind::kAsn;
    s.min_transfers = 100;
    s.evidence_netns = {"self"};
    r.controller = s;
    c.cc_policy.rules.push_back(r);
  }
  return c;
}

// A send transfer of connection `connection` of rule `rule`, BBR twice as fast.
TransferRecord transfer(int rule, int64_t connection, uint32_t asn, const std::string& arm) {
  TransferRecord t;
  t.netns = kNetns;
  t.dir = Direction::kPassive;
  t.laddr = *IpAddr::parse("198.18.0.1");
  t.raddr = *IpAddr::parse("198.18.1.2");
  t.lport = static_cast<uint16_t>(400 + rule);
  t.flow_start_ns = connection;
  t.end_ns = 1'800'000'000'000'000'000 + connection;
  t.direction = TransferDirection::kSend;
  t.bytes = 5'000'000;
  t.xfer_us = arm == "bbr" ? 400'000 : 800'000 + connection % 1000;
  t.srtt_us = 55000;
  t.min_rtt_us = 50000;
  t.enrichment.asn = 64512 + asn;
  t.enrichment.peer_class = "client";
  t.enrichment.cc_rule = "r" + std::to_string(rule);
  t.enrichment.experiment = kControllerExperiment;
  t.enrichment.arm = arm;
  t.cc = arm;
  return t;
}

struct LargestState {
  CcController controller{std::make_shared<prometheus::Registry>(), nullptr};
  size_t decided = 0, connections = 0;

  LargestState() {
    controller.set_namespaces({{"self", kNetns}}, nullptr);
    controller.configure(fleet_config());
    // A transfer of every connection, a minute of tests, and again.
    for (double until : {60.0, 120.0}) {
      for (int rule = 0; rule < kRules; ++rule)
        for (int64_t c = 1; c <= static_cast<int64_t>(ConnectionTable::kMaxConnections); ++c)
          controller.observe(transfer(rule, rule * (int64_t{1} << 32) + c, static_cast<uint32_t>(c % kAsns),
                                      c % 2 ? "bbr" : "cubic"));
      for (double t = until - 59; t <= until; t += 1) controller.step(t);
    }
    const auto status = nlohmann::json::parse(controller.status_json());
    for (const auto& r : status["rules"]) {
      connections += r["open_connections"].get<size_t>();
      for (const auto& c : r["cohorts"]) decided += c["state"] == "decided";
    }
  }
};

LargestState& state() {
  static LargestState s;
  return s;
}

void counters(benchmark::State& bm) {
  bm.counters["rules"] = kRules;
  bm.counters["open_connections"] = static_cast<double>(state().connections);
  bm.counters["decided_cohorts"] = static_cast<double>(state().decided);
}

void BM_ControllerStateSnapshot(benchmark::State& bm) {
  size_t bytes = 0;
  for (auto _ : bm) {
    nlohmann::json doc = state().controller.save();
    benchmark::DoNotOptimize(doc);
    bm.PauseTiming();
    bytes = doc.dump().size();
    bm.ResumeTiming();
  }
  counters(bm);
  bm.counters["state_bytes"] = static_cast<double>(bytes);
}
BENCHMARK(BM_ControllerStateSnapshot)->Unit(benchmark::kMillisecond)->Iterations(3);

void BM_ControllerStateStatus(benchmark::State& bm) {
  size_t bytes = 0;
  for (auto _ : bm) {
    const std::string text = state().controller.status_json();
    bytes = text.size();
    benchmark::DoNotOptimize(text.data());
  }
  counters(bm);
  bm.counters["answer_bytes"] = static_cast<double>(bytes);
}
BENCHMARK(BM_ControllerStateStatus)->Unit(benchmark::kMillisecond)->Iterations(5);

void BM_ControllerStateObserve(benchmark::State& bm) {
  int64_t c = 1;
  for (auto _ : bm) state().controller.observe(transfer(static_cast<int>(c % kRules), c % 1000 + 1, 7, "bbr")), ++c;
  counters(bm);
}
BENCHMARK(BM_ControllerStateObserve);

}  // namespace
}  // namespace tcpscope
