#include "policy/rule_names.h"

#include <gtest/gtest.h>

#include "record/enrichment.h"

namespace tcpscope {
namespace {

CompiledRule plain(const std::string& name, const std::string& cc) {
  CompiledRule r;
  r.name = name;
  r.arms = {cc};
  r.arm_names = r.arms;
  return r;
}

CompiledRule experiment(const std::string& name, const std::string& exp, std::vector<std::string> arms) {
  CompiledRule r;
  r.name = name;
  r.experiment = exp;
  r.arms = std::move(arms);
  r.arm_names = r.arms;
  return r;
}

CompiledPolicy policy_of(std::vector<CompiledRule> rules) {
  CompiledPolicy p;
  p.rules = std::move(rules);
  return p;
}

// Installs `p` and returns the id its sockets are tagged with.
uint16_t install(RuleNames& names, const CompiledPolicy& p) {
  const uint16_t id = names.next_install();
  names.add(p);
  return id;
}

Enrichment named(const RuleNames& names, uint32_t rule_tag, uint8_t arm_tag = 0) {
  Enrichment e;
  names.name(rule_tag, arm_tag, &e);
  return e;
}

TEST(RuleNames, NamesTheRuleExperimentAndArmOfTheTag) {
  RuleNames names;
  const uint16_t id = install(names, policy_of({plain("lan", "cubic"), experiment("wan", "bbr-trial", {"cubic", "bbr"})}));
  EXPECT_EQ(id, 1u);

  Enrichment f = named(names, TCPSCOPE_RULE_TAG(id, 0));
  EXPECT_EQ(f.cc_rule, "lan");
  EXPECT_FALSE(f.experiment);
  EXPECT_FALSE(f.arm);

  f = named(names, TCPSCOPE_RULE_TAG(id, 1), 2);
  EXPECT_EQ(f.cc_rule, "wan");
  EXPECT_EQ(f.experiment, "bbr-trial");
  EXPECT_EQ(f.arm, "bbr");
}

TEST(RuleNames, NoTagNoNames) {
  RuleNames names;
  install(names, policy_of({plain("lan", "cubic")}));
  Enrichment f = named(names, 0, 1);
  EXPECT_FALSE(f.cc_rule);
  EXPECT_FALSE(f.experiment);
  EXPECT_FALSE(f.arm);
}

TEST(RuleNames, AFlowFromAnOldInstallKeepsItsNamesAfterItsGenerationIsReused) {
  // Generations alternate 0, 1, 0: the third install reuses the first's,
  // but the names go by install id, which the socket carries.
  RuleNames names;
  const uint16_t first = install(names, policy_of({plain("old-a", "cubic"), plain("old-b", "reno")}));
  const uint16_t second = install(names, policy_of({plain("mid", "bbr")}));
  const uint16_t third = install(names, policy_of({plain("new", "htcp")}));
  EXPECT_NE(first, second);
  EXPECT_NE(first, third);

  EXPECT_EQ(named(names, TCPSCOPE_RULE_TAG(first, 1)).cc_rule, "old-b");
  EXPECT_EQ(named(names, TCPSCOPE_RULE_TAG(second, 0)).cc_rule, "mid");
  EXPECT_EQ(named(names, TCPSCOPE_RULE_TAG(third, 0)).cc_rule, "new");
  // The old install had two rules, the new one has one.
  EXPECT_FALSE(named(names, TCPSCOPE_RULE_TAG(third, 1)).cc_rule);
}

TEST(RuleNames, AnInstallOlderThanTheKeptWindowGetsNoNames) {
  RuleNames names;
  const uint16_t oldest = install(names, policy_of({plain("oldest", "cubic")}));
  const uint16_t kept = install(names, policy_of({plain("kept", "cubic")}));
  for (size_t i = 2; i < RuleNames::kKeepInstalls; ++i) install(names, policy_of({plain("later", "bbr")}));
  // Exactly kKeepInstalls installs so far: all are kept.
  EXPECT_EQ(named(names, TCPSCOPE_RULE_TAG(oldest, 0)).cc_rule, "oldest");

  install(names, policy_of({plain("one-more", "bbr")}));
  EXPECT_FALSE(named(names, TCPSCOPE_RULE_TAG(oldest, 0)).cc_rule);
  EXPECT_EQ(named(names, TCPSCOPE_RULE_TAG(kept, 0)).cc_rule, "kept");
}

TEST(RuleNames, InstallIdsWrapInSixteenBitsSkippingZeroAndAReusedIdGetsTheNewNames) {
  RuleNames names;
  const uint16_t first = install(names, policy_of({plain("first", "cubic")}));
  EXPECT_EQ(first, 1u);
  while (names.next_install() != TCPSCOPE_INSTALL_MASK) install(names, policy_of({plain("filler", "bbr")}));
  install(names, policy_of({plain("last-id", "reno")}));
  EXPECT_EQ(named(names, TCPSCOPE_RULE_TAG(TCPSCOPE_INSTALL_MASK, 0)).cc_rule, "last-id");

  EXPECT_EQ(names.next_install(), 1u);  // not 0: 0 means no rule
  install(names, policy_of({plain("wrapped", "htcp")}));
  EXPECT_EQ(named(names, TCPSCOPE_RULE_TAG(1, 0)).cc_rule, "wrapped");
  EXPECT_EQ(names.next_install(), 2u);
}

TEST(RuleNames, OutOfRangeRuleAndArmIndexes) {
  RuleNames names;
  const uint16_t id = install(names, policy_of({experiment("exp", "trial", {"cubic", "bbr"})}));

  // A rule index past the install's rules, and a tag whose index part is 0
  // (index -1): no names at all.
  EXPECT_FALSE(named(names, TCPSCOPE_RULE_TAG(id, 1), 1).cc_rule);
  EXPECT_FALSE(named(names, TCPSCOPE_RULE_TAG(id, TCPSCOPE_MAX_RULES), 1).cc_rule);
  EXPECT_FALSE(named(names, static_cast<uint32_t>(id) << 16, 1).cc_rule);
  // An install id never used.
  EXPECT_FALSE(named(names, TCPSCOPE_RULE_TAG(id + 1, 0), 1).cc_rule);

  // The rule is known but the arm is not: rule and experiment, no arm.
  Enrichment f = named(names, TCPSCOPE_RULE_TAG(id, 0), 3);
  EXPECT_EQ(f.cc_rule, "exp");
  EXPECT_EQ(f.experiment, "trial");
  EXPECT_FALSE(f.arm);
  f = named(names, TCPSCOPE_RULE_TAG(id, 0), 0);
  EXPECT_EQ(f.experiment, "trial");
  EXPECT_FALSE(f.arm);
  EXPECT_EQ(named(names, TCPSCOPE_RULE_TAG(id, 0), 1).arm, "cubic");
}

TEST(RuleNames, APlainRuleHasNoArmWhateverTheTag) {
  RuleNames names;
  const uint16_t id = install(names, policy_of({plain("lan", "cubic")}));
  Enrichment f = named(names, TCPSCOPE_RULE_TAG(id, 0), 1);
  EXPECT_EQ(f.cc_rule, "lan");
  EXPECT_FALSE(f.experiment);
  EXPECT_FALSE(f.arm);
}

// Across a restart the next daemon names the flows the last one's installs
// tagged, and installs on from the next id.
TEST(RuleNames, SurviveARestartThroughJson) {
  RuleNames names;
  install(names, policy_of({plain("lan", "cubic")}));
  const uint16_t id = install(names, policy_of({plain("lan", "bbr")}));
  auto back = RuleNames::from_json(nlohmann::json::parse(names.to_json().dump()));
  ASSERT_TRUE(back);
  EXPECT_EQ(back->next_install(), names.next_install());
  EXPECT_EQ(named(*back, TCPSCOPE_RULE_TAG(id, 0), 1).cc_rule, "lan");
  EXPECT_EQ(back->to_json(), names.to_json());
  for (const char* bad : {R"({"next_install": 0, "installs": []})", R"({"next_install": 70000, "installs": []})",
                          R"({"next_install": 2, "installs": [{"id": 0, "rules": []}]})",
                          R"({"next_install": 2, "installs": [{"id": 1, "rules": [{"name": 3}]}]})", "[]"})
    EXPECT_FALSE(RuleNames::from_json(nlohmann::json::parse(bad))) << bad;
}

}  // namespace
}  // namespace tcpscope
