#include "pipeline/flow_pipeline.h"

#include <gtest/gtest.h>

#include <cstring>

#include "../record_fixtures.h"

namespace tcpscope {
namespace {

tcpscope_flow_event event_to(const char* raddr) {
  tcpscope_flow_event ev{};
  set_ipv4_id(&ev.id, TCPSCOPE_DIR_PASSIVE, raddr, 443, 50000, 1'000'000'000);
  ev.outcome = TCPSCOPE_OUTCOME_OK;
  ev.end_ns = 3'000'000'000;
  std::strcpy(ev.cc, "cubic");
  return ev;
}

struct Fixture {
  Fixture() {
    AsnConfig asn;
    asn.prefix_file = std::string(TCPSCOPE_TEST_DATA) + "/asn/pfx2as_sample.tsv";
    std::string error;
    tables.asn_db = AsnDatabase::load(asn, &error);
    EXPECT_TRUE(tables.asn_db) << error;
    PeerClassSpec google;
    google.name = "origin";
    google.asns = {15169};
    tables.classifier = std::make_shared<const PeerClassifier>(std::vector<PeerClassSpec>{google}, "client");
    CompiledRule rule;
    rule.name = "wan";
    rule.experiment = "bbr-trial";
    rule.arms = {"cubic", "bbr"};
    rule.arm_names = rule.arms;
    CompiledPolicy policy;
    policy.rules = {rule};
    install = names.next_install();
    names.add(policy);
  }
  EnrichmentTables tables;
  RuleNames names;
  uint16_t install = 0;
  MonotonicToRealtime clock{5'000'000'000};
};

// The stage under test, over the fixture's tables; built after them.
class FlowPipelineTest : public ::testing::Test {
 protected:
  Fixture fx;
  Enricher enricher{fx.tables};
  FlowPipeline pipeline{fx.clock, enricher, fx.names, TransferDelimiter::kWrite};
};

// A record of a flow to an address outside every class and rule.
template <class Record>
void expect_no_rule_names(const Record& r) {
  EXPECT_EQ(r.enrichment.asn, 0u);
  EXPECT_EQ(r.enrichment.peer_class, "client");
  EXPECT_FALSE(r.enrichment.cc_rule);
  EXPECT_FALSE(r.enrichment.experiment);
  EXPECT_FALSE(r.enrichment.arm);
}

TEST_F(FlowPipelineTest, DecodesEnrichesAndNamesTheRule) {
  tcpscope_flow_event ev = event_to("8.8.8.8");
  ev.cc_rule = TCPSCOPE_RULE_TAG(fx.install, 0);
  ev.arm = 2;  // arm index 1 + 1
  const FlowRecord f = pipeline.record_of(ev);
  EXPECT_EQ(f.start_ns, 6'000'000'000);  // the clock's offset applied
  EXPECT_EQ(f.raddr.to_string(), "8.8.8.8");
  EXPECT_EQ(f.enrichment.asn, 15169u);
  EXPECT_EQ(f.enrichment.peer_class, "origin");
  EXPECT_EQ(f.enrichment.cc_rule, "wan");
  EXPECT_EQ(f.enrichment.experiment, "bbr-trial");
  EXPECT_EQ(f.enrichment.arm, "bbr");
  EXPECT_EQ(pipeline.lookups(), 2u);  // ASN, then peer class
}

TEST_F(FlowPipelineTest, AFlowNoRuleChoseHasNoRuleNames) {
  expect_no_rule_names(pipeline.record_of(event_to("198.18.0.2")));
}

TEST_F(FlowPipelineTest, SeesTheTablesAReloadSwappedIn) {
  EXPECT_EQ(pipeline.record_of(event_to("8.8.8.8")).enrichment.peer_class, "origin");
  EnrichmentTables reloaded = fx.tables;
  reloaded.classifier = std::make_shared<const PeerClassifier>(std::vector<PeerClassSpec>{}, "client");
  enricher.replace(reloaded);
  EXPECT_EQ(pipeline.record_of(event_to("8.8.8.8")).enrichment.peer_class, "client");
}

tcpscope_transfer_event transfer_to(const char* raddr) {
  tcpscope_transfer_event ev{};
  set_ipv4_id(&ev.id, TCPSCOPE_DIR_PASSIVE, raddr, 443, 50000, 1'000'000'000);
  ev.direction = TCPSCOPE_XFER_SEND;
  ev.start_ns = 1'500'000'000;
  ev.end_ns = 1'750'000'000;
  ev.wait_us = TCPSCOPE_NO_WAIT;
  ev.bytes = 4'000'000;
  std::strcpy(ev.cc, "bbr");
  return ev;
}

// A flow to 8.8.8.8 and one of its transfers, both tagged with the
// fixture's rule and its second arm.
struct FlowAndTransfer {
  tcpscope_flow_event flow;
  tcpscope_transfer_event transfer;
};
FlowAndTransfer tagged_flow_and_transfer(const Fixture& fx) {
  FlowAndTransfer e{event_to("8.8.8.8"), transfer_to("8.8.8.8")};
  e.flow.cc_rule = e.transfer.cc_rule = TCPSCOPE_RULE_TAG(fx.install, 0);
  e.flow.arm = e.transfer.arm = 2;
  return e;
}

TEST_F(FlowPipelineTest, ATransferIsDecodedEnrichedAndNamedAsItsFlow) {
  const FlowAndTransfer ev = tagged_flow_and_transfer(fx);
  const FlowRecord f = pipeline.record_of(ev.flow);
  const TransferRecord t = pipeline.record_of(ev.transfer);
  EXPECT_EQ(t.flow_start_ns, 6'000'000'000);  // the clock's offset applied
  EXPECT_EQ(t.start_ns, 6'500'000'000);
  EXPECT_EQ(t.xfer_us, 250'000);
  EXPECT_FALSE(t.wait_us);
  EXPECT_EQ(t.raddr.to_string(), "8.8.8.8");
  EXPECT_EQ(t.cc, "bbr");
  EXPECT_EQ(t.enrichment.asn, 15169u);
  EXPECT_EQ(t.enrichment.peer_class, "origin");
  EXPECT_EQ(t.enrichment.as_org, f.enrichment.as_org);
  EXPECT_EQ(t.enrichment.cc_rule, "wan");
  EXPECT_EQ(t.enrichment.experiment, "bbr-trial");
  EXPECT_EQ(t.enrichment.arm, "bbr");
  EXPECT_EQ(pipeline.lookups(), 4u);  // ASN and peer class, for each record
}

TEST_F(FlowPipelineTest, ATransferClosedWithItsFlowTakesTheFlowsEnrichmentWithoutLookups) {
  const FlowAndTransfer ev = tagged_flow_and_transfer(fx);
  const FlowRecord f = pipeline.record_of(ev.flow);
  const TransferRecord alone = pipeline.record_of(ev.transfer);
  const uint64_t lookups = pipeline.lookups();
  const TransferRecord with_flow = pipeline.record_of(ev.transfer, f);
  EXPECT_EQ(pipeline.lookups(), lookups);
  // Every field as the transfer handed over on its own has it.
  EXPECT_EQ(with_flow.flow_start_ns, alone.flow_start_ns);
  EXPECT_EQ(with_flow.start_ns, alone.start_ns);
  EXPECT_EQ(with_flow.xfer_us, alone.xfer_us);
  EXPECT_EQ(with_flow.bytes, alone.bytes);
  EXPECT_EQ(with_flow.cc, alone.cc);
  EXPECT_EQ(with_flow.enrichment.asn, alone.enrichment.asn);
  EXPECT_EQ(with_flow.enrichment.as_org, alone.enrichment.as_org);
  EXPECT_EQ(with_flow.enrichment.peer_class, alone.enrichment.peer_class);
  EXPECT_EQ(with_flow.enrichment.cc_rule, alone.enrichment.cc_rule);
  EXPECT_EQ(with_flow.enrichment.experiment, alone.enrichment.experiment);
  EXPECT_EQ(with_flow.enrichment.arm, alone.enrichment.arm);
}

TEST_F(FlowPipelineTest, ATransferNoRuleChoseHasNoRuleNames) {
  expect_no_rule_names(pipeline.record_of(transfer_to("198.18.0.2")));
}

}  // namespace
}  // namespace tcpscope
