#include "control/state_fit.h"

#include "../temp_dir.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <iterator>
#include <map>
#include <regex>
#include <utility>

#include <nlohmann/json.hpp>
#include <prometheus/registry.h>

#include "control/cc_controller.h"
#include "control/connection_table.h"
#include "control/controller_store.h"
#include "control/state_writer.h"
#include "record/transfer_record.h"
#include "controller_transfer.h"

namespace tcpscope {
namespace {

constexpr uint32_t kNetns = 4026531840;
const std::vector<std::string> kEightArms = {"bbr", "cubic", "reno", "bic", "htcp", "vegas", "westwood", "illinois"};

Config largest_config() {
  Config c;
  c.default_peer_class = "client";
  CcRule r;
  r.name = "auto";
  ControllerSpec s;
  s.arms = kEightArms;
  s.cohort = CohortKind::kAsn;
  s.min_transfers = 2;
  s.min_connections = 2;
  s.max_cohorts = 1000;  // the config's maximum
  r.controller = s;
  c.cc_policy.rules = {r};
  return c;
}

// A transfer of its own connection, whose value lies at an end of its
// metric's span, so that each sketch spans all of it (the largest a sketch
// gets).
TransferRecord extreme(const std::string& arm, uint32_t asn, bool large, bool high, int64_t connection) {
  return controller_transfer(kNetns, connection, arm, asn, large ? 5'000'000 : 50'000,
                             large ? (high ? 1 : 30'000'000'000) : (high ? 9'000'000'000 : 2),
                             1'800'000'000'000'000'000);
}

// The largest state the config allows: 1000 ASN cohorts and 4000 candidate
// ASNs of 8 arms, every sketch across its whole span, the table of open
// connections full. It does not fit as it is; trimmed, it does, and a
// controller of the same config reads it back.
TEST(StateFit, TheLargestConfigsStateIsTrimmedToWhatLoadingAccepts) {
  CcController c(std::make_shared<prometheus::Registry>(), nullptr);
  c.set_namespaces({{"self", kNetns}}, nullptr);
  const Config cfg = largest_config();
  c.configure(cfg);
  int64_t connection = 1;
  auto feed = [&](uint32_t first_asn, uint32_t asns) {
    for (uint32_t asn = first_asn; asn < first_asn + asns; ++asn)
      for (const auto& arm : kEightArms)
        for (bool large : {false, true})
          for (bool high : {false, true}) c.observe(extreme(arm, asn, large, high, connection++));
  };
  feed(1000, 1000);
  c.step(10);  // promotes them: 1000 cohorts
  feed(100000, 4000);  // and as many candidates as a rule follows
  const nlohmann::json doc = c.save();
  ASSERT_EQ(doc["rules"]["auto"]["cohorts"].size(), 1001u);  // the client pool and 1000 ASNs
  ASSERT_EQ(doc["rules"]["auto"]["candidates"].size(), 4000u);
  const size_t whole = fit_state(doc, SIZE_MAX).text.size();
  const FittedState fitted = fit_state(doc, ControllerStore::kMaxStateBytes);
  std::printf("largest state: %.1f MiB whole, %.1f MiB written (cap %zu MiB), trimmed: %s\n", whole / 1048576.0,
              fitted.text.size() / 1048576.0, ControllerStore::kMaxStateBytes >> 20, fitted.trimmed.c_str());
  EXPECT_GT(whole, ControllerStore::kMaxStateBytes) << "the test must need trimming";
  ASSERT_TRUE(fitted.fits);
  EXPECT_LE(fitted.text.size(), ControllerStore::kMaxStateBytes);
  EXPECT_FALSE(fitted.trimmed.empty());

  CcController back(std::make_shared<prometheus::Registry>(), nullptr);
  back.set_namespaces({{"self", kNetns}}, nullptr);
  back.configure(cfg);
  std::string error;
  ASSERT_TRUE(back.restore(nlohmann::json::parse(fitted.text), &error)) << error;
  EXPECT_EQ(back.cohort_asns().size(), 1000u);
  EXPECT_EQ(back.cohort_weights(), c.cohort_weights());
}

// Several rules whose tables of open connections are full, each
// connection last seen at a time of its own: over the cap with every cohort
// and median the config allows far under it. The longest idle connections
// go, across all rules, and only as many as the cap needs; nothing else
// does, and the state reads back.
// Three busy rules of 8,192 open connections each, against a cap of 3/4 of
// their state (the shipped cap, 64 MiB, takes 13 full tables to exceed: the
// order is the same at any size).
TEST(StateFit, BusyRulesLoseTheirLongestIdleConnectionsFirst) {
  constexpr int kRules = 3;
  constexpr int64_t kConnections = 8192;
  Config cfg;
  cfg.default_peer_class = "client";
  for (int r = 0; r < kRules; ++r) {
    CcRule rule;
    rule.name = "busy" + std::to_string(r);
    ControllerSpec s;
    s.arms = {"bbr", "cubic"};
    s.cohort = CohortKind::kPeerClass;
    rule.controller = s;
    cfg.cc_policy.rules.push_back(rule);
  }
  CcController c(std::make_shared<prometheus::Registry>(), nullptr);
  c.set_namespaces({{"self", kNetns}}, nullptr);
  c.configure(cfg);
  // Connection i of rule r last seen at 1e9 + i * kRules + r (seconds): the
  // rules' connections interleaved in age.
  for (int64_t i = 0; i < kConnections; ++i)
    for (int r = 0; r < kRules; ++r) {
      TransferRecord t = extreme(kEightArms[i % 2], 0, true, i % 3 == 0, i + 1);
      t.enrichment.cc_rule = "busy" + std::to_string(r);
      t.end_ns = (1'000'000'000 + i * kRules + r) * 1'000'000'000;
      c.observe(t);
    }
  const nlohmann::json doc = c.save();
  // Every open connection as saved: its last time seen, by rule and key.
  using Seen = std::map<std::pair<std::string, uint64_t>, double>;
  auto open_of = [](const nlohmann::json& state) {
    Seen seen;
    for (const auto& [name, rule] : state["rules"].items())
      for (const auto& cohort : rule["cohorts"])
        for (const auto& arm : cohort["evidence"])
          for (const auto& o : arm["open"]) seen[{name, o[0].get<uint64_t>()}] = o[7].get<double>();
    return seen;
  };
  const Seen all = open_of(doc);
  ASSERT_EQ(all.size(), static_cast<size_t>(kRules * kConnections));
  const size_t whole = fit_state(doc, SIZE_MAX).text.size();
  const size_t cap = whole / 4 * 3;
  const FittedState fitted = fit_state(doc, cap);
  std::printf("%d busy rules: %.1f MiB whole, %.1f MiB written, trimmed: %s\n", kRules, whole / 1048576.0,
              fitted.text.size() / 1048576.0, fitted.trimmed.c_str());
  ASSERT_TRUE(fitted.fits);
  EXPECT_LE(fitted.text.size(), cap);
  const nlohmann::json written = nlohmann::json::parse(fitted.text);
  const Seen kept = open_of(written);
  ASSERT_LT(kept.size(), all.size());
  double newest_dropped = 0, oldest_kept = INFINITY;
  for (const auto& [id, seen] : all) {
    if (kept.count(id))
      oldest_kept = std::min(oldest_kept, seen);
    else
      newest_dropped = std::max(newest_dropped, seen);
  }
  EXPECT_LT(newest_dropped, oldest_kept) << "the longest idle went first";
  const size_t dropped = all.size() - kept.size();
  EXPECT_EQ(fitted.trimmed, std::to_string(dropped) + " of " + std::to_string(all.size()) +
                                " open connections (the longest idle)");
  // Only as many as the cap needs: each of these connections' entries is
  // under 200 bytes, so a few hundred more would have fitted.
  EXPECT_GT(fitted.text.size() + 200 * 1000, cap);
  // Nothing else went: without their open connections, the states are one.
  auto without_open = [](nlohmann::json state) {
    for (auto& [_, rule] : state["rules"].items())
      for (auto& cohort : rule["cohorts"])
        for (auto& arm : cohort["evidence"]) arm["open"] = nlohmann::json::array();
    return state;
  };
  EXPECT_TRUE(without_open(written) == without_open(doc));

  CcController back(std::make_shared<prometheus::Registry>(), nullptr);
  back.set_namespaces({{"self", kNetns}}, nullptr);
  back.configure(cfg);
  std::string error;
  ASSERT_TRUE(back.restore(written, &error)) << error;
  const nlohmann::json restored = back.save();
  EXPECT_TRUE(open_of(restored) == kept);
  EXPECT_TRUE(without_open(restored) == without_open(written));
}

TEST(StateFit, AStateThatFitsIsWrittenWhole) {
  const nlohmann::json doc = {{"version", 4}, {"rules", nlohmann::json::object()}};
  const FittedState fitted = fit_state(doc, 1024);
  EXPECT_TRUE(fitted.fits);
  EXPECT_TRUE(fitted.trimmed.empty());
  EXPECT_EQ(nlohmann::json::parse(fitted.text), doc);
}

// A state over the cap even trimmed is not written, and the one on disk,
// older than what the controllers hold now, is set aside, saying so in the
// failure's line: no start restores it as if it were current.
TEST(StateFit, AStateThatCannotFitSetsTheStaleOneAside) {
  TempDir dir;
  const ControllerStore store(dir.path());
  std::string error;
  ASSERT_TRUE(store.save("{\"version\": 4, \"rules\": {}}\n", &error)) << error;
  StateWriter writer(store);
  for (int i = 0; i < 2; ++i) {
    writer.save({{"version", 4}, {"rules", nlohmann::json::object()},
                 {"x", std::string(ControllerStore::kMaxStateBytes + i, 'x')}});
    ASSERT_TRUE(writer.flush(std::chrono::seconds(60)));
  }
  const auto said = writer.take_messages();
  ASSERT_EQ(said.size(), 1u) << said.back();
  const std::regex line("controller state not saved: .* that loading accepts; not written; the previous state, "
                        "now stale, moved to (" + dir.path() + "/controller.json.unreadable-[0-9]+) so that no start "
                        "restores it");
  std::smatch m;
  ASSERT_TRUE(std::regex_match(said[0], m, line)) << said[0];
  EXPECT_NE(access(store.path().c_str(), F_OK), 0) << "no state left to restore";
  std::ifstream aside(m[1].str());
  EXPECT_EQ(std::string(std::istreambuf_iterator<char>(aside), {}), "{\"version\": 4, \"rules\": {}}\n");
}

}  // namespace
}  // namespace tcpscope
