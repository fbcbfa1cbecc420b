#include "control/cc_controller.h"
#include "control/connection_table.h"

#include "../temp_dir.h"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <optional>
#include <random>
#include <regex>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>
#include <prometheus/registry.h>
#include <prometheus/text_serializer.h>

#include "control/controller_store.h"
#include "control/state_writer.h"
#include "record/flow_record.h"
#include "record/transfer_record.h"
#include "tcpscope/policy.h"

namespace tcpscope {
namespace {

constexpr uint64_t kLarge = 5'000'000;  // >= throughput_min_bytes

Config controller_config(CohortKind cohort, std::vector<std::string> arms = {"bbr", "cubic"}, uint64_t min_transfers = 200,
                         uint32_t max_cohorts = 50) {
  Config c;
  c.peer_classes = {{"pop-to-pop", {*Prefix::parse("10.0.0.0/8")}, {}, 0}};
  c.default_peer_class = "client";
  CcRule static_rule;
  static_rule.name = "origin-cubic";
  static_rule.match.asns = {64500};
  static_rule.cc = "cubic";
  CcRule r;
  r.name = "auto";
  ControllerSpec s;
  s.arms = std::move(arms);
  s.cohort = cohort;
  s.min_transfers = min_transfers;
  s.interval_s = 10;
  s.max_cohorts = max_cohorts;
  r.controller = s;
  c.cc_policy.rules = {static_rule, r};
  return c;
}

// The service's network namespace, the one its rules' evidence_netns
// ("self") names.
constexpr uint32_t kServiceNetns = 4026531840;

// Configures `c` with `cfg`, its "self" being the service's namespace.
void configure(CcController& c, const Config& cfg) {
  c.set_namespaces({{"self", kServiceNetns}}, nullptr);
  c.configure(cfg);
}

// A record of a socket the service accepted on 443 from another host in its
// namespace: the only kind that counts as evidence (evidence_gate.h).
template <class Record>
void served(Record* r) {
  r->netns = kServiceNetns;
  r->dir = Direction::kPassive;
  r->laddr = *IpAddr::parse("198.18.0.1");
  r->raddr = *IpAddr::parse("198.18.1.2");
  r->lport = 443;
}

// Each transfer of a connection of its own (its flow's start tells them
// apart), unless the caller gives it one.
TransferRecord transfer(const std::string& arm, uint32_t asn, const std::string& peer_class, uint64_t bytes,
                        double seconds, uint32_t srtt_us = 55000, uint32_t min_rtt_us = 50000) {
  static int64_t next_connection = 1;
  TransferRecord t;
  served(&t);
  t.flow_start_ns = next_connection++;
  t.direction = TransferDirection::kSend;
  t.bytes = bytes;
  t.xfer_us = std::max<int64_t>(1, std::llround(seconds * 1e6));
  t.srtt_us = srtt_us;
  t.min_rtt_us = min_rtt_us;
  t.enrichment.asn = asn;
  t.enrichment.peer_class = peer_class;
  t.enrichment.cc_rule = "auto";
  t.enrichment.experiment = kControllerExperiment;
  t.enrichment.arm = arm;
  t.cc = arm.substr(0, arm.find('#'));
  return t;
}

struct Lines {
  std::vector<std::string> lines;
  LogLine sink() {
    return [this](const std::string& l) { lines.push_back(l); };
  }
};

nlohmann::json status(const CcController& c) { return nlohmann::json::parse(c.status_json()); }

const nlohmann::json* cohort(const nlohmann::json& s, const std::string& label) {
  for (const auto& c : s["rules"][0]["cohorts"])
    if (c["cohort"] == label) return &c;
  return nullptr;
}

// Large transfers whose throughput is lognormal around `mbps` per arm.
// `edit`, if given, changes each record before the controller sees it.
void feed_large(CcController* c, std::mt19937_64* rng, const std::string& arm, uint32_t asn, const std::string& cls,
                double mbps, int n, void (*edit)(TransferRecord*) = nullptr) {
  std::lognormal_distribution<double> rate(std::log(mbps * 1e6 / 8), 0.5);
  for (int i = 0; i < n; ++i) {
    TransferRecord t = transfer(arm, asn, cls, kLarge, kLarge / rate(*rng));
    if (edit) edit(&t);
    c->observe(t);
  }
}

// Configured with `cfg`, 300 large transfers per arm, bbr at 40 Mbit/s and
// cubic at 20, one step.
void feed_bbr_twice_as_fast(CcController* c, const Config& cfg) {
  configure(*c, cfg);
  std::mt19937_64 rng(6);
  feed_large(c, &rng, "bbr", 0, "client", 40, 300);
  feed_large(c, &rng, "cubic", 0, "client", 20, 300);
  c->step(10);
}

TEST(CcController, LearnsTheBetterArmPerPeerClassAndRampsItUp) {
  Lines log;
  CcController c(std::make_shared<prometheus::Registry>(), log.sink());
  configure(c, controller_config(CohortKind::kPeerClass));
  std::mt19937_64 rng(1);
  double now = 1000;
  EXPECT_TRUE(c.step(now).tested);  // nothing yet
  feed_large(&c, &rng, "bbr", 64501, "client", 40, 300);    // BBR better for clients
  feed_large(&c, &rng, "cubic", 64501, "client", 25, 300);
  feed_large(&c, &rng, "bbr", 0, "pop-to-pop", 200, 300);   // CUBIC better pop-to-pop
  feed_large(&c, &rng, "cubic", 0, "pop-to-pop", 400, 300);
  EXPECT_FALSE(c.step(now + 5).tested) << "tested before its interval";
  ASSERT_TRUE(c.step(now += 10).changed);
  auto s = status(c);
  ASSERT_TRUE(cohort(s, "client") && cohort(s, "pop-to-pop")) << s.dump(2);
  EXPECT_EQ((*cohort(s, "client"))["state"], "decided");
  EXPECT_EQ((*cohort(s, "client"))["winner"], "bbr");
  EXPECT_EQ((*cohort(s, "pop-to-pop"))["winner"], "cubic");
  EXPECT_EQ((*cohort(s, "client"))["evidence"]["last_decision"]["test"]["objective"], "throughput");
  EXPECT_EQ((*cohort(s, "client"))["weights"]["bbr"], 50) << "ramps from the next interval on";
  ASSERT_EQ(log.lines.size(), 2u);
  EXPECT_NE(log.lines[0].find("cohort peer_class client: decided bbr (throughput bbr vs cubic +"), std::string::npos)
      << log.lines[0];
  // A decisive e-value in scientific notation, not 60 digits cut at the buffer's end.
  EXPECT_TRUE(std::regex_search(log.lines[0], std::regex(", e [1-9]\\.[0-9]e\\+[0-9]+ \\(e-BH over 2 cohorts")))
      << log.lines[0];
  // Ramp: +25 per interval up to 100 - 10 + 10/2 = 95.
  std::vector<int> ramp;
  for (int i = 0; i < 4; ++i) {
    c.step(now += 10);
    ramp.push_back((*cohort(status(c), "client"))["weights"]["bbr"]);
  }
  EXPECT_EQ(ramp, (std::vector<int>{75, 95, 95, 95}));
  EXPECT_EQ((*cohort(status(c), "client"))["weights"]["cubic"], 5);
  // What the kernel gets: rule index 1, the class keys of compile_policy.
  auto w = c.cohort_weights();
  ASSERT_EQ(w.size(), 2u);
  for (const auto& cw : w) {
    EXPECT_EQ(cw.rule, 1u);
    if (cw.cohort == TCPSCOPE_COHORT_CLASS_KEY(1))  // client: the default class, after pop-to-pop
      EXPECT_EQ(cw.percent, (std::vector<uint32_t>{95, 5}));
    else
      EXPECT_EQ(cw.cohort, TCPSCOPE_COHORT_CLASS_KEY(0));
  }
  EXPECT_TRUE(c.cohort_asns().empty());
}

// A kernel without send transfers (no tcp_sendmsg_locked, no tcp_probe):
// the status says so instead of waiting for min_transfers.
TEST(CcController, SaysWhenTheKernelHasNoSendTransfers) {
  Lines log;
  CcController c(std::make_shared<prometheus::Registry>(), log.sink());
  configure(c, controller_config(CohortKind::kPeerClass));
  std::mt19937_64 rng(3);
  feed_large(&c, &rng, "bbr", 0, "client", 40, 5);
  c.step(1000);
  auto s = status(c);
  EXPECT_FALSE(s.contains("note")) << s.dump(2);
  ASSERT_TRUE(cohort(s, "client")) << s.dump(2);
  EXPECT_EQ((*cohort(s, "client"))["evidence"]["test"]["waiting_for"].get<std::string>().rfind("min_transfers", 0),
            0u);
  c.set_send_transfers(false);
  c.step(1010);
  s = status(c);
  const std::string none = "no send transfers on this kernel (they need tcp_sendmsg_locked, Linux 6.16, or tcp_probe)";
  EXPECT_EQ(s["note"], none);
  EXPECT_EQ((*cohort(s, "client"))["evidence"]["test"]["waiting_for"], none);
}

TEST(CcController, CountsOnlyItsOwnRulesSendTransfers) {
  CcController c(std::make_shared<prometheus::Registry>(), nullptr);
  configure(c, controller_config(CohortKind::kPeerClass, {"bbr", "cubic"}, 2));
  TransferRecord recv = transfer("bbr", 0, "client", 1000, 0.1);
  recv.direction = TransferDirection::kRecv;
  TransferRecord other = transfer("bbr", 0, "client", 1000, 0.1);
  other.enrichment.experiment = "bbr-vs-cubic";
  TransferRecord unknown_arm = transfer("vegas", 0, "client", 1000, 0.1);
  TransferRecord unknown_class = transfer("bbr", 0, "martian", 1000, 0.1);
  for (const auto* t : {&recv, &other, &unknown_arm, &unknown_class}) c.observe(*t);
  c.step(1);
  EXPECT_TRUE(status(c)["rules"][0]["cohorts"].empty()) << status(c).dump(2);
  c.observe(transfer("bbr", 0, "client", 1000, 0.1));
  c.step(100);
  EXPECT_EQ((*cohort(status(c), "client"))["evidence"]["arms"]["bbr"]["n_fct"], 1);
}

// The medians /api/v1/controller reports come out of the evidence's sketches
// (1 % relative accuracy) in the metrics' units: known transfers, known
// medians. fct was once added in seconds to a µs sketch (values below 1 s
// clamped), which read 35.8 ms for a 33.7 ms median.
TEST(CcController, ReportsTheMediansOfTheTransfersItWasFed) {
  CcController c(std::make_shared<prometheus::Registry>(), nullptr);
  configure(c, controller_config(CohortKind::kPeerClass, {"bbr", "cubic"}, 1000));
  std::mt19937_64 rng(11);
  std::lognormal_distribution<double> fct_s(std::log(0.0337), 0.3), rate_bytes(std::log(5e6), 0.4);
  std::vector<double> fct_ms, rate_bps;
  for (int i = 0; i < 601; ++i) {
    const TransferRecord small = transfer("bbr", 0, "client", 60'000, fct_s(rng));
    fct_ms.push_back(static_cast<double>(small.xfer_us) / 1e3);
    c.observe(small);
    const TransferRecord large = transfer("bbr", 0, "client", kLarge, kLarge / rate_bytes(rng));
    rate_bps.push_back(8.0 * kLarge / (static_cast<double>(large.xfer_us) / 1e6));
    c.observe(large);
  }
  c.step(100);
  const auto median = [](std::vector<double> v) {
    std::nth_element(v.begin(), v.begin() + v.size() / 2, v.end());
    return v[v.size() / 2];
  };
  const nlohmann::json arm = (*cohort(status(c), "client"))["evidence"]["arms"]["bbr"];
  const double want_fct = median(fct_ms), want_rate = median(rate_bps);
  EXPECT_NEAR(arm["fct_p50_ms"].get<double>(), want_fct, 0.01 * want_fct) << arm.dump();
  EXPECT_NEAR(arm["throughput_p50_bps"].get<double>(), want_rate, 0.01 * want_rate) << arm.dump();
}

// A state of a version that counted transfers as independent units
// (versions 1 to 3, moments of log values per arm): its cohorts keep their
// states, winners and weights, their evidence starts afresh (it cannot be
// turned into connections), and one log line says so.
TEST(CcController, AStateThatCountedTransfersKeepsItsDecisionsAndDropsItsEvidence) {
  CcController a(std::make_shared<prometheus::Registry>(), nullptr);
  const Config cfg = controller_config(CohortKind::kPeerClass);
  feed_bbr_twice_as_fast(&a, cfg);
  a.step(20);
  ASSERT_EQ((*cohort(status(a), "client"))["state"], "decided");
  nlohmann::json v3 = a.save();
  ASSERT_EQ(v3["version"], 4);
  v3["version"] = 3;
  for (auto& rule : v3["rules"])
    for (auto& cohort_json : rule["cohorts"])
      for (auto& ev : cohort_json["evidence"])
        ev = {{"transfers", 300}, {"fct", {{"n", 0}, {"mean", 0}, {"m2", 0}}},
              {"throughput", {{"n", 300}, {"mean", 15.2}, {"m2", 70.1}}}};
  Lines log;
  CcController b(std::make_shared<prometheus::Registry>(), log.sink());
  configure(b, cfg);
  std::string error;
  ASSERT_TRUE(b.restore(v3, &error)) << error;
  const auto restored = *cohort(status(b), "client");
  EXPECT_EQ(restored["state"], "decided");
  EXPECT_EQ(restored["winner"], "bbr");
  EXPECT_EQ(b.cohort_weights(), a.cohort_weights());
  EXPECT_EQ(restored["evidence"]["arms"]["bbr"]["transfers"], 0) << restored.dump();
  ASSERT_EQ(log.lines.size(), 1u);
  EXPECT_NE(log.lines[0].find("saved state version 3 counted transfers as independent units"), std::string::npos)
      << log.lines[0];
  v3["version"] = 5;
  CcController d(std::make_shared<prometheus::Registry>(), nullptr);
  configure(d, cfg);
  EXPECT_FALSE(d.restore(v3, &error));
  EXPECT_NE(error.find("version"), std::string::npos) << error;
}

// The kernel draws an arm per connection, so a connection's transfers are
// one unit of evidence however many there are: 2 connections per arm with
// 300 transfers each are 2 units, too few to test, and an A/A pair of them
// decides nothing however far apart their clients are.
TEST(CcController, AConnectionsTransfersAreOneUnitOfEvidence) {
  CcController c(std::make_shared<prometheus::Registry>(), nullptr);
  configure(c, controller_config(CohortKind::kPeerClass, {"cubic", "cubic"}, 200));
  std::mt19937_64 rng(21);
  // A near client for cubic, a far one for cubic#2: 10 Mbit/s apart.
  std::lognormal_distribution<double> near(std::log(40e6 / 8), 0.3), far(std::log(30e6 / 8), 0.3);
  for (int conn = 0; conn < 4; ++conn)
    for (int i = 0; i < 300; ++i) {
      const bool is_near = conn % 2 == 0;
      TransferRecord t = transfer(is_near ? "cubic" : "cubic#2", 0, "client", kLarge,
                                  kLarge / (is_near ? near(rng) : far(rng)));
      t.flow_start_ns = 42 + conn;  // four connections, two per arm
      c.observe(t);
    }
  c.step(10);
  const auto s = status(c);
  const auto& pool = *cohort(s, "client");
  EXPECT_EQ(pool["evidence"]["arms"]["cubic"]["n_throughput"], 600);
  EXPECT_EQ(pool["evidence"]["arms"]["cubic"]["connections_throughput"], 2);
  EXPECT_EQ(pool["state"], "exploring");
  EXPECT_NE(pool["evidence"]["test"]["waiting_for"].get<std::string>().find("min_connections 4"), std::string::npos)
      << pool.dump();
}

// An open connection's sums survive a restart: its next transfer joins its
// cluster instead of counting as another connection.
TEST(CcController, AnOpenConnectionStaysOneUnitAcrossARestart) {
  CcController a(std::make_shared<prometheus::Registry>(), nullptr);
  const Config cfg = controller_config(CohortKind::kPeerClass, {"bbr", "cubic"}, 1000);
  configure(a, cfg);
  for (int i = 0; i < 10; ++i) {
    TransferRecord t = transfer("bbr", 0, "client", kLarge, 1.0 + 0.1 * i);
    t.flow_start_ns = 7;
    a.observe(t);
  }
  CcController b(std::make_shared<prometheus::Registry>(), nullptr);
  configure(b, cfg);
  std::string error;
  ASSERT_TRUE(b.restore(nlohmann::json::parse(a.save().dump()), &error)) << error;
  TransferRecord later = transfer("bbr", 0, "client", kLarge, 2.0);
  later.flow_start_ns = 7;
  b.observe(later);
  b.step(10);
  const auto sb = status(b);
  ASSERT_TRUE(cohort(sb, "client")) << sb.dump() << "\n" << a.save().dump();
  const auto& arm = (*cohort(sb, "client"))["evidence"]["arms"]["bbr"];
  EXPECT_EQ(arm["n_throughput"], 11);
  EXPECT_EQ(arm["connections_throughput"], 1) << arm.dump();
  // Closed, it leaves the table: nothing is saved for it any more.
  FlowRecord f;
  served(&f);
  f.start_ns = 7;
  f.segs_out = 100;
  f.enrichment = later.enrichment;
  b.observe(f);
  const nlohmann::json saved = b.save();
  EXPECT_TRUE(saved["rules"]["auto"]["cohorts"][0]["evidence"][0]["open"].empty()) << saved.dump();
}

// A restored connection keeps its network namespace: a pass of the socket
// iterator that saw another namespace whole, and not every one, leaves it;
// one that saw its namespace whole without finding it drops it.
TEST(CcController, ARestoredConnectionIsForgottenOnlyByAPassOfItsNamespace) {
  CcController a(std::make_shared<prometheus::Registry>(), nullptr);
  const Config cfg = controller_config(CohortKind::kPeerClass, {"bbr", "cubic"}, 1000);
  configure(a, cfg);
  a.observe(transfer("bbr", 0, "client", kLarge, 1.0));
  CcController b(std::make_shared<prometheus::Registry>(), nullptr);
  configure(b, cfg);
  std::string error;
  ASSERT_TRUE(b.restore(nlohmann::json::parse(a.save().dump()), &error)) << error;
  auto open = [&] { return status(b)["rules"][0]["open_connections"].get<int>(); };
  ASSERT_EQ(open(), 1);
  const double later = 4e9;
  b.forget_closed(SocketPass{{}, {kServiceNetns + 1}, false, later});
  EXPECT_EQ(open(), 1) << "another namespace's pass";
  b.forget_closed(SocketPass{{}, {kServiceNetns}, false, later});
  EXPECT_EQ(open(), 0);
  EXPECT_EQ(status(b)["rules"][0]["connections_closed_unseen"], 1);
}

TEST(CcController, AnAsnWithEnoughTransfersGetsItsOwnCohort) {
  Lines log;
  CcController c(std::make_shared<prometheus::Registry>(), log.sink());
  configure(c, controller_config(CohortKind::kAsn, {"bbr", "cubic"}, 50, 2));
  std::mt19937_64 rng(2);
  for (uint32_t asn : {64501u, 64502u, 64503u}) {
    feed_large(&c, &rng, "bbr", asn, "client", 30, 60 + static_cast<int>(asn - 64500));
    feed_large(&c, &rng, "cubic", asn, "client", 30, 60);
  }
  feed_large(&c, &rng, "bbr", 64504, "client", 30, 10);  // too few: stays pooled
  feed_large(&c, &rng, "cubic", 64504, "client", 30, 10);
  c.step(10);
  auto s = status(c);
  // max_cohorts 2: the two largest.
  EXPECT_TRUE(cohort(s, "64503") && cohort(s, "64502")) << s.dump(2);
  EXPECT_FALSE(cohort(s, "64501") || cohort(s, "64504"));
  EXPECT_EQ((*cohort(s, "64503"))["kind"], "asn");
  EXPECT_EQ((*cohort(s, "64503"))["evidence"]["arms"]["bbr"]["n_throughput"], 63) << "its pooled evidence moves along";
  EXPECT_EQ(c.cohort_asns(), (std::vector<uint32_t>{64502, 64503}));
  // The pool keeps every ASN's flows it had, and the new cohorts' from now on go to them.
  EXPECT_EQ((*cohort(s, "client"))["evidence"]["arms"]["cubic"]["n_throughput"], 4 * 60 - 60 + 10);
  c.observe(transfer("bbr", 64503, "client", kLarge, 1));
  c.step(20);
  EXPECT_EQ((*cohort(status(c), "64503"))["evidence"]["arms"]["bbr"]["n_throughput"], 64);
}

// The sequential tests and e-BH keep an A/A run from deciding: two arms of
// one distribution, 60 cohorts, tested every interval for 40 intervals.
TEST(CcController, AnAaRunDecidesAlmostNothing) {
  Lines log;
  CcController c(std::make_shared<prometheus::Registry>(), log.sink());
  configure(c, controller_config(CohortKind::kAsn, {"cubic", "cubic"}, 30, 60));
  std::mt19937_64 rng(3);
  std::lognormal_distribution<double> fct(std::log(0.08), 0.8);
  double now = 0;
  for (int interval = 0; interval < 40; ++interval) {
    for (uint32_t asn = 64600; asn < 64660; ++asn)
      for (const char* arm : {"cubic", "cubic#2"})
        for (int i = 0; i < 8; ++i) c.observe(transfer(arm, asn, "client", 50'000, fct(rng)));
    c.step(now += 10);
  }
  auto s = status(c);
  int decided = 0, cohorts = 0;
  for (const auto& co : s["rules"][0]["cohorts"]) {
    ++cohorts;
    decided += co["state"] != "exploring";
  }
  std::printf("A/A through the controller: %d of %d cohorts decided in 40 intervals\n", decided, cohorts);
  EXPECT_GE(cohorts, 60);
  EXPECT_LE(decided, cohorts * 5 / 100) << "decided in " << decided << " of " << cohorts << " A/A cohorts";
  EXPECT_EQ(s["rules"][0]["arms"], (nlohmann::json{"cubic", "cubic#2"}));
}

TEST(CcController, RevertsWhenTheControlSliceShowsTheWinnerWorse) {
  Lines log;
  CcController c(std::make_shared<prometheus::Registry>(), log.sink());
  configure(c, controller_config(CohortKind::kPeerClass, {"bbr", "cubic"}, 100));
  std::mt19937_64 rng(4);
  feed_large(&c, &rng, "bbr", 0, "client", 40, 150);
  feed_large(&c, &rng, "cubic", 0, "client", 20, 150);
  c.step(10);
  ASSERT_EQ((*cohort(status(c), "client"))["winner"], "bbr");
  // The path changes: now CUBIC is better, seen in the control slice.
  feed_large(&c, &rng, "bbr", 0, "client", 15, 400);
  feed_large(&c, &rng, "cubic", 0, "client", 30, 150);
  c.step(20);
  auto s = status(c);
  EXPECT_EQ((*cohort(s, "client"))["state"], "reverted") << s.dump(2);
  EXPECT_EQ((*cohort(s, "client"))["weights"], (nlohmann::json{{"bbr", 50}, {"cubic", 50}}));
  ASSERT_EQ(log.lines.size(), 2u);
  EXPECT_NE(log.lines[1].find("reverted bbr"), std::string::npos) << log.lines[1];
  // And decides again, for the other arm, on fresh evidence.
  feed_large(&c, &rng, "bbr", 0, "client", 15, 150);
  feed_large(&c, &rng, "cubic", 0, "client", 30, 150);
  c.step(30);
  EXPECT_EQ((*cohort(status(c), "client"))["winner"], "cubic");
  EXPECT_EQ(status(c)["rules"][0]["reverts"], 1);
  EXPECT_EQ(status(c)["rules"][0]["decisions"], 2);
}

TEST(CcController, AGuardBlocksAWinner) {
  CcController c(std::make_shared<prometheus::Registry>(), nullptr);
  configure(c, controller_config(CohortKind::kPeerClass, {"bbr", "cubic"}, 100));
  std::mt19937_64 rng(5);
  feed_large(&c, &rng, "bbr", 0, "client", 40, 150);
  feed_large(&c, &rng, "cubic", 0, "client", 20, 150);
  // BBR's flows retransmit 25 % of their segments, CUBIC's 1 %: beyond the 20-point guard.
  FlowRecord f;
  served(&f);
  f.enrichment.cc_rule = "auto";
  f.enrichment.experiment = kControllerExperiment;
  f.enrichment.peer_class = "client";
  f.segs_out = 10000;
  f.enrichment.arm = "bbr";
  f.retrans_segs = 2500;
  c.observe(f);
  f.enrichment.arm = "cubic";
  f.retrans_segs = 100;
  c.observe(f);
  c.step(10);
  auto s = status(c);
  EXPECT_EQ((*cohort(s, "client"))["state"], "exploring") << s.dump(2);
  EXPECT_EQ((*cohort(s, "client"))["evidence"]["test"]["blocked_by_guard"], "retransmit share 25.00% vs 1.00%");
}

// A local user's sockets get the rule's arms too, but what they do is no
// evidence: with only those, a 10x effect decides nothing, and the status
// and the metric say why each record was kept out.
TEST(CcController, OnlyTheServicesSocketsAreEvidence) {
  auto registry = std::make_shared<prometheus::Registry>();
  CcController c(registry, nullptr);
  configure(c, controller_config(CohortKind::kPeerClass, {"bbr", "cubic"}, 20));
  const std::pair<const char*, void (*)(TransferRecord*)> hostile[] = {
      {"outgoing", [](TransferRecord* t) { t->dir = Direction::kActive; }},
      {"port", [](TransferRecord* t) { t->lport = 9090; }},
      {"local_peer", [](TransferRecord* t) { t->raddr = t->laddr; }},
      {"netns", [](TransferRecord* t) { t->netns = kServiceNetns + 1; }},  // a user's own namespace
  };
  std::mt19937_64 rng(7);
  for (const auto& [reason, make_hostile] : hostile) {
    feed_large(&c, &rng, "bbr", 0, "client", 4, 100, make_hostile);
    feed_large(&c, &rng, "cubic", 0, "client", 40, 100, make_hostile);
  }
  const auto step = c.step(100);
  EXPECT_FALSE(step.changed);
  auto s = status(c);
  const auto& rule = s["rules"][0];
  EXPECT_EQ(rule["decisions"], 0) << s.dump(2);
  EXPECT_EQ(rule["records_refused"], nlohmann::json({{"outgoing", 200},
                                                     {"port", 200},
                                                     {"local_peer", 200},
                                                     {"netns", 200},
                                                     {"connection_cap", 0},
                                                     {"service", 0}}));
  const auto* pool = cohort(s, "client");
  EXPECT_TRUE(!pool || (*pool)["evidence"]["arms"]["bbr"]["transfers"] == 0) << s.dump(2);
  const std::string text = prometheus::TextSerializer().Serialize(registry->Collect());
  EXPECT_NE(text.find("tcpscope_controller_records_refused_total{reason=\"port\",rule=\"auto\"} 200"),
            std::string::npos)
      << text;
  // The same records from the service's own sockets decide at once.
  feed_large(&c, &rng, "bbr", 0, "client", 4, 100);
  feed_large(&c, &rng, "cubic", 0, "client", 40, 100);
  EXPECT_TRUE(c.step(200).changed);
  EXPECT_EQ((*cohort(status(c), "client"))["winner"], "cubic");
}

// A reload the kernel refuses: revert() puts the rules before it back as they
// were, the decided cohort and its open connections included, and forgets
// the rule the reload added; confirm() would have kept the reload.
TEST(CcController, RevertPutsBackTheRulesBeforeTheLastConfigure) {
  CcController c(std::make_shared<prometheus::Registry>(), nullptr);
  const Config before = controller_config(CohortKind::kPeerClass);
  feed_bbr_twice_as_fast(&c, before);
  const nlohmann::json was = status(c);
  ASSERT_EQ((*cohort(was, "client"))["state"], "decided");

  Config next = before;
  for (auto& r : next.cc_policy.rules)
    if (r.controller) r.controller->control_percent = 20;  // a changed rule starts afresh
  CcRule added = next.cc_policy.rules.back();
  added.name = "added";
  next.cc_policy.rules.push_back(added);
  c.configure(next);
  ASSERT_EQ(status(c)["rules"].size(), 2u);
  ASSERT_EQ(cohort(status(c), "client"), nullptr) << "the changed rule started afresh";

  c.revert(before);
  EXPECT_EQ(status(c), was);

  c.configure(next);
  c.confirm();
  c.revert(before);
  EXPECT_EQ(cohort(status(c), "client"), nullptr) << "confirmed: nothing to put back";
}

TEST(CcController, StateSurvivesARestartAndAChangedRuleStartsAfresh) {
  CcController a(std::make_shared<prometheus::Registry>(), nullptr);
  const Config cfg = controller_config(CohortKind::kPeerClass);
  feed_bbr_twice_as_fast(&a, cfg);
  a.step(20);
  const nlohmann::json saved = a.save();

  CcController b(std::make_shared<prometheus::Registry>(), nullptr);
  configure(b, cfg);
  std::string error;
  ASSERT_TRUE(b.restore(nlohmann::json::parse(saved.dump()), &error)) << error;
  // The state keeps the open connections' sums in evidence still tested;
  // these 600 have sums only in the epoch the decision closed.
  auto without_open = [](nlohmann::json j) {
    for (auto& r : j["rules"]) r.erase("open_connections");
    return j;
  };
  EXPECT_EQ(without_open(status(b)), without_open(status(a)));
  EXPECT_EQ(status(b)["rules"][0]["open_connections"], 0);
  EXPECT_EQ(b.cohort_weights(), a.cohort_weights());

  Config changed = cfg;
  changed.cc_policy.rules[1].controller->control_percent = 20;
  CcController d(std::make_shared<prometheus::Registry>(), nullptr);
  configure(d, changed);
  ASSERT_TRUE(d.restore(saved, &error)) << error;
  EXPECT_TRUE(status(d)["rules"][0]["cohorts"].empty()) << "a saved state of other settings does not apply";

  // Naming its services changes the rule too.
  Config by_service = cfg;
  by_service.cc_policy.rules[1].match.services = {"video.service"};
  CcController e(std::make_shared<prometheus::Registry>(), nullptr);
  configure(e, by_service);
  ASSERT_TRUE(e.restore(saved, &error)) << error;
  EXPECT_TRUE(status(e)["rules"][0]["cohorts"].empty()) << "evidence of other sockets does not apply";

  // SIGHUP: the same rule keeps its cohorts, a changed one starts afresh.
  configure(a, cfg);
  EXPECT_EQ((*cohort(status(a), "client"))["state"], "decided");
  configure(a, changed);
  EXPECT_TRUE(status(a)["rules"][0]["cohorts"].empty());
  configure(a, Config{});
  EXPECT_TRUE(a.empty());
  EXPECT_TRUE(a.cohort_weights().empty());
}

TEST(CcController, AMalformedStateIsRefusedWhole) {
  CcController a(std::make_shared<prometheus::Registry>(), nullptr);
  configure(a, controller_config(CohortKind::kPeerClass));
  std::mt19937_64 rng(7);
  feed_large(&a, &rng, "bbr", 0, "client", 40, 300);
  feed_large(&a, &rng, "cubic", 0, "client", 20, 300);
  const nlohmann::json fed = a.save();  // before the decision starts the evidence afresh
  a.step(10);
  nlohmann::json good = a.save();
  const std::string before = a.status_json();
  std::string error;
  for (auto bad : {nlohmann::json(42), nlohmann::json{{"version", 99}}}) {
    EXPECT_FALSE(a.restore(bad, &error));
    EXPECT_FALSE(error.empty());
  }
  nlohmann::json bad_weights = good;
  bad_weights["rules"]["auto"]["cohorts"][0]["weights"] = {90, 20};
  EXPECT_FALSE(a.restore(bad_weights, &error));
  EXPECT_NE(error.find("weights"), std::string::npos) << error;
  // Summed in 64 bits: 4294967196 + 200 is not 100.
  bad_weights["rules"]["auto"]["cohorts"][0]["weights"] = {4294967196u, 200u};
  EXPECT_FALSE(a.restore(bad_weights, &error));
  EXPECT_NE(error.find("weight"), std::string::npos) << error;
  nlohmann::json bad_asn = good;
  bad_asn["rules"]["auto"]["candidates"]["4294967297"] = good["rules"]["auto"]["cohorts"][0]["evidence"];
  EXPECT_FALSE(a.restore(bad_asn, &error));
  EXPECT_NE(error.find("4294967297"), std::string::npos) << error;
  nlohmann::json bad_sketch = fed;
  bad_sketch["rules"]["auto"]["cohorts"][0]["evidence"][0]["throughput_sketch"]["offset"] = 2147483000;
  EXPECT_FALSE(a.restore(bad_sketch, &error)) << "a sketch whose buckets lie outside its span";
  nlohmann::json bad_moments = fed;
  bad_moments["rules"]["auto"]["cohorts"][0]["evidence"][0]["throughput"]["clusters"] = 1000000;
  EXPECT_FALSE(a.restore(bad_moments, &error)) << "more connections than transfers";
  nlohmann::json bad_evidence = good;
  bad_evidence["rules"]["auto"]["cohorts"][0]["evidence"][0]["fct"] = "x";
  EXPECT_FALSE(a.restore(bad_evidence, &error));
  EXPECT_EQ(a.status_json(), before) << "nothing applied";
}

TEST(ControllerStore, SavesAtomicallyAndReportsACorruptFile) {
  TempDir dir;
  ControllerStore store(dir.path() + "/state");
  std::string error;
  EXPECT_FALSE(store.load(&error));
  EXPECT_EQ(error, "") << "no state yet is not an error";
  ASSERT_TRUE(store.save("{\"version\": 1, \"x\": 2}\n", &error)) << error;
  struct stat st {};
  ASSERT_EQ(stat((dir.path() + "/state").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0700u);
  auto doc = store.load(&error);
  ASSERT_TRUE(doc) << error;
  EXPECT_EQ((*doc)["x"], 2);
  EXPECT_NE(access((dir.path() + "/state/controller.json.tmp").c_str(), F_OK), 0);
  std::ofstream(store.path()) << "{\"version\": 1, trunc";
  EXPECT_FALSE(store.load(&error));
  EXPECT_NE(error.find("not valid JSON"), std::string::npos) << error;
}

TEST(ControllerStore, RefusesADirectoryOthersCanWriteAndASymlink) {
  TempDir dir;
  const std::string open_dir = dir.path() + "/open";
  ASSERT_EQ(mkdir(open_dir.c_str(), 0777), 0);
  ASSERT_EQ(chmod(open_dir.c_str(), 0777), 0);
  std::string error;
  EXPECT_FALSE(ControllerStore(open_dir).save("{\"version\": 1}\n", &error));
  EXPECT_NE(error.find("writable by others"), std::string::npos) << error;
  const std::string safe = dir.path() + "/safe";
  ASSERT_EQ(mkdir(safe.c_str(), 0700), 0);
  ASSERT_EQ(symlink((dir.path() + "/elsewhere").c_str(), (safe + "/controller.json").c_str()), 0);
  EXPECT_FALSE(ControllerStore(safe).load(&error));
  EXPECT_FALSE(error.empty());
  EXPECT_TRUE(ControllerStore(safe).save("{\"version\": 1}\n", &error)) << "the rename replaces the link itself: " << error;
  struct stat st {};
  ASSERT_EQ(lstat((safe + "/controller.json").c_str(), &st), 0);
  EXPECT_TRUE(S_ISREG(st.st_mode));
  EXPECT_NE(access((dir.path() + "/elsewhere").c_str(), F_OK), 0) << "nothing written through the link";
}

// What loading would refuse is not written: the cap is the one constant.
TEST(ControllerStore, RefusesToWriteWhatLoadingWouldRefuse) {
  TempDir dir;
  ControllerStore store(dir.path() + "/state");
  std::string error;
  const std::string big = "\"" + std::string(ControllerStore::kMaxStateBytes, 'x') + "\"\n";
  EXPECT_FALSE(store.save(big, &error));
  EXPECT_NE(error.find(std::to_string(big.size()) + " bytes, over the " +
                       std::to_string(ControllerStore::kMaxStateBytes) + " that loading accepts"),
            std::string::npos)
      << error;
  EXPECT_NE(access(store.path().c_str(), F_OK), 0) << "nothing written";
}

// A state that cannot be used moves aside, the newest few kept, so the next
// save does not overwrite it.
TEST(ControllerStore, SetsAnUnreadableStateAsideKeepingTheNewestFew) {
  TempDir dir;
  ControllerStore store(dir.path() + "/state");
  std::string error;
  ASSERT_TRUE(store.save("{\"version\": 1}\n", &error)) << error;
  const std::string state_dir = dir.path() + "/state";
  // Older ones, as earlier starts left them.
  for (int t : {100, 200, 300}) std::ofstream(state_dir + "/controller.json.unreadable-" + std::to_string(t)) << t;
  std::ofstream(store.path()) << "{\"version\": 1, trunc";
  const std::string aside = store.set_aside(&error);
  ASSERT_FALSE(aside.empty()) << error;
  EXPECT_EQ(aside.rfind(state_dir + "/controller.json.unreadable-", 0), 0u) << aside;
  std::ifstream moved(aside);
  EXPECT_EQ(std::string(std::istreambuf_iterator<char>(moved), {}), "{\"version\": 1, trunc");
  EXPECT_NE(access(store.path().c_str(), F_OK), 0) << "no state left in its place";
  EXPECT_NE(access((state_dir + "/controller.json.unreadable-100").c_str(), F_OK), 0) << "the oldest went";
  EXPECT_EQ(access((state_dir + "/controller.json.unreadable-200").c_str(), F_OK), 0);
  EXPECT_EQ(access((state_dir + "/controller.json.unreadable-300").c_str(), F_OK), 0);
  EXPECT_TRUE(store.set_aside(&error).empty()) << "nothing to move";
}

// Set aside again within the same second (a daemon restarted in a loop):
// each under a name of its own, never over another, the newest kept whole.
TEST(ControllerStore, SetsAsideSeveralInOneSecondEachUnderItsOwnName) {
  TempDir dir;
  ControllerStore store(dir.path());
  std::string error;
  std::vector<std::string> moved;
  for (int i = 0; i < 5; ++i) {
    std::ofstream(store.path()) << "unreadable " << i;
    moved.push_back(store.set_aside(&error));
    ASSERT_FALSE(moved.back().empty()) << error;
    EXPECT_EQ(error, "");
  }
  for (size_t i = moved.size() - ControllerStore::kKeptUnreadable; i < moved.size(); ++i) {
    std::ifstream in(moved[i]);
    EXPECT_EQ(std::string(std::istreambuf_iterator<char>(in), {}), "unreadable " + std::to_string(i)) << moved[i];
  }
  size_t kept = 0;
  for (const auto& e : std::filesystem::directory_iterator(dir.path())) kept += e.path() != store.path();
  EXPECT_EQ(kept, ControllerStore::kKeptUnreadable);
}

// The writer fits and writes off the caller's thread; a state waiting when
// a newer one comes is replaced; a failure is said once while it lasts.
TEST(StateWriter, WritesTheLatestStateAndSaysAFailureOnce) {
  TempDir dir;
  ControllerStore store(dir.path() + "/state");
  {
    StateWriter writer(store);
    for (int i = 0; i < 50; ++i) writer.save({{"version", 4}, {"i", i}});
    ASSERT_TRUE(writer.flush(std::chrono::seconds(10)));
    std::string error;
    auto doc = store.load(&error);
    ASSERT_TRUE(doc) << error;
    EXPECT_EQ((*doc)["i"], 49) << "the last one handed over";
    EXPECT_TRUE(writer.take_messages().empty());
  }
  ASSERT_EQ(chmod((dir.path() + "/state").c_str(), 0777), 0);  // unsafe: every save fails
  StateWriter writer(store);
  for (int i = 0; i < 3; ++i) {
    writer.save({{"version", 4}});
    ASSERT_TRUE(writer.flush(std::chrono::seconds(10)));
  }
  const auto said = writer.take_messages();
  ASSERT_EQ(said.size(), 1u);
  EXPECT_NE(said[0].find("controller state not saved: "), std::string::npos) << said[0];
}

// A state over the cap names its size, which differs at every save: still
// one failure, said once while it lasts.
TEST(StateWriter, SaysAStateOverTheCapOnceThoughItsSizeChanges) {
  TempDir dir;
  StateWriter writer{ControllerStore(dir.path())};
  for (size_t extra = 1; extra <= 3; ++extra) {
    writer.save({{"version", 4}, {"x", std::string(ControllerStore::kMaxStateBytes + extra, 'x')}});
    ASSERT_TRUE(writer.flush(std::chrono::seconds(60)));
  }
  const auto said = writer.take_messages();
  ASSERT_EQ(said.size(), 1u) << said.back();
  EXPECT_NE(said[0].find("that loading accepts; not written"), std::string::npos) << said[0];
}

// A stop does not wait for a write under way (a disk that hangs would hold
// the daemon's exit): the writer goes at once, and the write ends on its own.
TEST(StateWriter, IsDestroyedWithoutWaitingForAWriteUnderWay) {
  TempDir dir;
  const ControllerStore store(dir.path());
  const nlohmann::json state = {{"version", 4}, {"x", std::string(size_t{48} << 20, 'x')}};
  std::optional<StateWriter> writer;
  writer.emplace(store);
  writer->save(state);
  // Fitting and writing 48 MiB takes far longer than this: the write is under way.
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  ASSERT_FALSE(writer->flush(std::chrono::milliseconds(0))) << "the write ended before the test could stop it";
  const auto start = std::chrono::steady_clock::now();
  writer.reset();
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::milliseconds(50));
  std::optional<nlohmann::json> back;
  std::string error;
  for (int i = 0; i < 600 && !back; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    back = store.load(&error);
  }
  ASSERT_TRUE(back) << "the write did not end on its own: " << error;
  EXPECT_EQ(*back, state);
}

TEST(ControllerStore, TakesStateDirectoryFromTheEnvironment) {
  setenv("STATE_DIRECTORY", "/run/x:/run/y", 1);
  EXPECT_EQ(ControllerStore().path(), "/run/x/controller.json");
  unsetenv("STATE_DIRECTORY");
  EXPECT_EQ(ControllerStore().path(), "/var/lib/tcpscope/controller.json");
}

}  // namespace
}  // namespace tcpscope
