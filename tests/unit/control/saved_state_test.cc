// The controller's saved state on the way in (controller_saved_state.cc):
// anything malformed or inconsistent refuses the whole document, saying
// why, and nothing of it is applied.
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>
#include <prometheus/registry.h>

#include "control/cc_controller.h"
#include "control/connection_table.h"
#include "record/transfer_record.h"
#include "controller_transfer.h"

namespace tcpscope {
namespace {

constexpr uint32_t kNetns = 4026531840;  // the service's, which "self" names
constexpr uint32_t kPooledAsn = 64509;   // followed as a candidate, not a cohort
constexpr uint32_t kCohortAsn = 64501;   // a cohort of its own
constexpr int64_t kOpenConnection = 100000;

Config asn_config() {
  Config c;
  c.default_peer_class = "client";
  CcRule r;
  r.name = "auto";
  ControllerSpec s;
  s.arms = {"bbr", "cubic"};
  s.cohort = CohortKind::kAsn;
  s.min_transfers = 50;
  s.interval_s = 10;
  s.max_cohorts = 2;
  r.controller = s;
  c.cc_policy.rules = {r};
  return c;
}

std::unique_ptr<CcController> configured() {
  auto c = std::make_unique<CcController>(std::make_shared<prometheus::Registry>(), nullptr);
  c->set_namespaces({{"self", kNetns}}, nullptr);
  c->configure(asn_config());
  return c;
}

// A large send transfer of connection `connection` (its flow's start tells
// connections apart), served on 443, at `mbps`, ending at `end_s`.
TransferRecord transfer(int64_t connection, const std::string& arm, uint32_t asn, double mbps, double end_s) {
  constexpr uint64_t kBytes = 5'000'000;
  return controller_transfer(kNetns, connection, arm, asn, kBytes, std::llround(kBytes * 8 / mbps),
                             static_cast<int64_t>(end_s * 1e9));
}

nlohmann::json& cohort_of(nlohmann::json& doc, const std::string& label) {
  for (auto& c : doc["rules"]["auto"]["cohorts"])
    if (c["label"] == label) return c;
  throw std::runtime_error("no cohort " + label + " in " + doc.dump());
}

// A state with all a saved state holds: the client pool decided for bbr,
// ASN 64501 a cohort of its own, ASN 64509 a candidate, and open
// connections in the pool's, the cohort's and the candidate's evidence.
const nlohmann::json& good_state() {
  static const nlohmann::json state = [] {
    auto a = configured();
    std::mt19937_64 rng(5);
    std::lognormal_distribution<double> noise(0, 0.3);
    int64_t connection = 1;
    for (int i = 0; i < 300; ++i) {
      a->observe(transfer(connection++, "bbr", 0, 40e6 * noise(rng), 100));
      a->observe(transfer(connection++, "cubic", 0, 20e6 * noise(rng), 100));
    }
    for (int i = 0; i < 60; ++i)
      for (const char* arm : {"bbr", "cubic"}) a->observe(transfer(connection++, arm, kCohortAsn, 30e6 * noise(rng), 100));
    a->step(10);
    a->step(20);
    a->observe(transfer(kOpenConnection, "bbr", kPooledAsn, 30e6, 200));
    a->observe(transfer(kOpenConnection + 1, "cubic", kCohortAsn, 30e6, 300));
    return a->save();
  }();
  return state;
}

TEST(SavedState, TheFixtureHoldsEveryPartOfAState) {
  nlohmann::json doc = good_state();
  EXPECT_EQ(cohort_of(doc, "client")["state"], "decided") << doc.dump();
  EXPECT_EQ(cohort_of(doc, std::to_string(kCohortAsn))["state"], "exploring");
  EXPECT_TRUE(doc["rules"]["auto"]["candidates"].contains(std::to_string(kPooledAsn)));
  EXPECT_EQ(cohort_of(doc, "client")["evidence"][0]["open"].size(), 1u);
  EXPECT_EQ(doc["rules"]["auto"]["candidates"][std::to_string(kPooledAsn)][0]["open"].size(), 1u);
  EXPECT_FALSE(cohort_of(doc, std::to_string(kCohortAsn))["evidence"][1]["open"].empty());
  auto b = configured();
  std::string error;
  ASSERT_TRUE(b->restore(doc, &error)) << error;
}

struct Malformation {
  const char* what;
  std::function<void(nlohmann::json&)> edit;
  const char* reason;  // in the error
};

// Each malformation alone refuses the whole state, with its reason; a
// controller holding a state before keeps it exactly.
TEST(SavedState, EachMalformationIsRefusedWholeWithItsReason) {
  const std::string asn = std::to_string(kCohortAsn), pooled = std::to_string(kPooledAsn);
  auto pool_open = [](nlohmann::json& d) -> nlohmann::json& { return cohort_of(d, "client")["evidence"][0]["open"]; };
  auto candidate = [&](nlohmann::json& d) -> nlohmann::json& { return d["rules"]["auto"]["candidates"][pooled]; };
  const std::vector<Malformation> cases = {
      {"a pool of no peer class of the rule", [](nlohmann::json& d) { cohort_of(d, "client")["label"] = "elsewhere"; },
       "cohort elsewhere: not a peer class of this rule"},
      {"a pool twice",
       [](nlohmann::json& d) { d["rules"]["auto"]["cohorts"].push_back(cohort_of(d, "client")); },
       "cohort client is there twice"},
      {"an ASN cohort twice",
       [&](nlohmann::json& d) { d["rules"]["auto"]["cohorts"].push_back(cohort_of(d, asn)); },
       "cohort 64501 is there twice"},
      {"an ASN both a cohort and a candidate",
       [&](nlohmann::json& d) { d["rules"]["auto"]["candidates"][asn] = candidate(d); },
       "ASN 64501 is both a cohort and a candidate"},
      {"a candidate ASN of another spelling",
       [&](nlohmann::json& d) { d["rules"]["auto"]["candidates"]["0" + pooled] = candidate(d); },
       "ASN \"064509\" is not a decimal number"},
      {"an open connection twice in one evidence",
       [&](nlohmann::json& d) { pool_open(d).push_back(pool_open(d)[0]); }, "is twice in one arm's evidence"},
      {"an open connection of two arms",
       [](nlohmann::json& d) {
         auto& ev = cohort_of(d, "client")["evidence"];
         ev[1]["open"].push_back(ev[0]["open"][0]);
       },
       "is of two arms"},
      {"an open connection in more evidences than a connection has slots",
       [&](nlohmann::json& d) {
         const nlohmann::json conn = pool_open(d)[0];
         cohort_of(d, asn)["evidence"][0]["open"].push_back(conn);
         auto& other = d["rules"]["auto"]["candidates"]["64510"] = candidate(d);
         other[0]["open"] = nlohmann::json::array({conn});
       },
       "is in more than 3 evidences"},
      {"an open connection last seen at two times",
       [&](nlohmann::json& d) { candidate(d)[0]["open"][0][7] = 1.0; }, "was last seen at two times"},
      {"an open connection in two network namespaces",
       [&](nlohmann::json& d) { candidate(d)[0]["open"][0][8] = 7; }, "is in two network namespaces"},
      {"an open connection in a namespace that is no inode", [&](nlohmann::json& d) { pool_open(d)[0][8] = -1; },
       "network namespace is not an inode number"},
      {"an open connection last seen before 1970", [&](nlohmann::json& d) {
         pool_open(d)[0][7] = -1.0;
         candidate(d)[0]["open"][0][7] = -1.0;
       },
       "last seen time is negative"},
      {"a negative count in an open connection", [&](nlohmann::json& d) { pool_open(d)[0][2] = -1.0; },
       "count is out of range"},
      {"a negative count of decisions", [](nlohmann::json& d) { d["rules"]["auto"]["decisions"] = -1; },
       "decisions is not an unsigned integer"},
      {"an exploring cohort with a decision",
       [&](nlohmann::json& d) { cohort_of(d, asn)["decision"] = cohort_of(d, "client")["decision"]; },
       "cohort 64501: exploring by a decision of another state"},
      {"a decided cohort whose decision is a revert",
       [](nlohmann::json& d) { cohort_of(d, "client")["decision"]["action"] = "reverted"; },
       "cohort client: decided by a decision of another state"},
      {"a decision that is no decision", [](nlohmann::json& d) { cohort_of(d, "client")["decision"] = "yes"; },
       "cohort client: decided by a decision of another state"},
      {"a decision at no time", [](nlohmann::json& d) { cohort_of(d, "client")["decision"]["at_s"] = "noon"; },
       "cohort client: a decision at no time"},
      {"a decided cohort with no time of decision",
       [](nlohmann::json& d) { cohort_of(d, "client").erase("decided_at_s"); },
       "cohort client: decided_at_s missing"},
      {"an exploring cohort with a time of decision",
       [&](nlohmann::json& d) { cohort_of(d, asn)["decided_at_s"] = 5.0; },
       "cohort 64501: decided_at_s in a cohort not decided"},
      {"a latest test that is no test", [&](nlohmann::json& d) { cohort_of(d, asn)["last_test"] = 7; },
       "cohort 64501: last_test is not a test"},
  };
  const nlohmann::json& good = good_state();
  for (const auto& c : cases) {
    SCOPED_TRACE(c.what);
    nlohmann::json bad = good;
    c.edit(bad);
    ASSERT_NE(bad, good);
    auto b = configured();
    std::string error;
    ASSERT_TRUE(b->restore(good, &error)) << error;
    const std::string before = b->status_json();
    const nlohmann::json saved_before = b->save();
    EXPECT_FALSE(b->restore(bad, &error));
    EXPECT_NE(error.find(c.reason), std::string::npos) << error;
    EXPECT_EQ(b->status_json(), before) << "nothing applied";
    EXPECT_TRUE(b->save() == saved_before) << "nothing applied";
    auto fresh = configured();
    EXPECT_FALSE(fresh->restore(bad, &error));
    EXPECT_TRUE(nlohmann::json::parse(fresh->status_json())["rules"][0]["cohorts"].empty()) << "starts empty";
  }
}

// A connection three times in the pool's evidence filled all its slots
// with one evidence: its next transfer, which also adds to its candidate
// ASN's evidence, found no slot for that and wrote through a null pointer.
// The state is refused, and the transfer counts in the state kept.
TEST(SavedState, AConnectionTwiceInOneEvidenceIsRefusedAndItsNextTransferCounts) {
  nlohmann::json bad = good_state();
  auto& open = cohort_of(bad, "client")["evidence"][0]["open"];
  open = nlohmann::json::array({open[0], open[0], open[0]});
  const TransferRecord next = transfer(kOpenConnection, "bbr", kPooledAsn, 30e6, 400);
  ASSERT_EQ(open[0][0], connection_key(next));
  auto b = configured();
  std::string error;
  ASSERT_TRUE(b->restore(good_state(), &error)) << error;
  EXPECT_FALSE(b->restore(bad, &error));
  EXPECT_NE(error.find("open connection " + std::to_string(connection_key(next)) + " is twice in one arm's evidence"),
            std::string::npos)
      << error;
  b->observe(next);
  const nlohmann::json after = b->save();
  const auto& candidate = after["rules"]["auto"]["candidates"][std::to_string(kPooledAsn)][0];
  EXPECT_EQ(candidate["transfers"], 2) << "its cluster goes on: " << candidate.dump();
  EXPECT_EQ(candidate["throughput"]["clusters"], 1) << candidate.dump();
}

}  // namespace
}  // namespace tcpscope
