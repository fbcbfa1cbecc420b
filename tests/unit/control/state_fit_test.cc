#include "control/state_fit.h"

#include <gtest/gtest.h>

#include <cstdio>

#include <nlohmann/json.hpp>
#include <prometheus/registry.h>

#include "control/cc_controller.h"
#include "control/controller_store.h"
#include "record/transfer_record.h"

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
  TransferRecord t;
  t.netns = kNetns;
  t.dir = Direction::kPassive;
  t.laddr = *IpAddr::parse("198.18.0.1");
  t.raddr = *IpAddr::parse("198.18.1.2");
  t.lport = 443;
  t.flow_start_ns = connection;
  t.end_ns = 1'800'000'000'000'000'000;
  t.direction = TransferDirection::kSend;
  t.bytes = large ? 5'000'000 : 50'000;
  t.xfer_us = large ? (high ? 1 : 30'000'000'000) : (high ? 9'000'000'000 : 2);
  t.srtt_us = 55000;
  t.min_rtt_us = 50000;
  t.enrichment.asn = asn;
  t.enrichment.peer_class = "client";
  t.enrichment.cc_rule = "auto";
  t.enrichment.experiment = kControllerExperiment;
  t.enrichment.arm = arm;
  t.cc = arm;
  return t;
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

TEST(StateFit, AStateThatFitsIsWrittenWhole) {
  const nlohmann::json doc = {{"version", 4}, {"rules", nlohmann::json::object()}};
  const FittedState fitted = fit_state(doc, 1024);
  EXPECT_TRUE(fitted.fits);
  EXPECT_TRUE(fitted.trimmed.empty());
  EXPECT_EQ(nlohmann::json::parse(fitted.text), doc);
}

}  // namespace
}  // namespace tcpscope
