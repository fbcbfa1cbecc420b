// The names a record carries for the rule that chose its congestion control.
// The sockops program tags a socket with (install id, rule index) and the
// experiment arm (tcpscope/policy.h: TCPSCOPE_RULE_TAG, arm + 1); this maps
// them back to the rule's name, experiment and arm as that install had them.
// Kept per install, not per generation: a flow opened under one install may
// close after later reloads have reused its generation.
#pragma once

#include <cstddef>
#include <cstdint>
#include <deque>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "policy/cc_policy.h"
#include "record/enrichment.h"
#include "tcpscope/policy.h"

namespace tcpscope {

class RuleNames {
 public:
  // The last kKeepInstalls installs are kept, so a flow that stays open
  // across more reloads than that closes with cc_rule null.
  static constexpr size_t kKeepInstalls = 256;

  // The id the next install's sockets are tagged with: 1, 2, ... wrapping
  // in 16 bits (TCPSCOPE_INSTALL_MASK), never 0 (0 is "no rule").
  uint16_t next_install() const { return next_install_; }
  // `policy` was installed as next_install(): keeps its names, moves on.
  void add(const CompiledPolicy& policy);

  // Across a restart (kernel/handover.h): the next daemon names the flows
  // this one's installs tagged. from_json() refuses anything malformed.
  nlohmann::json to_json() const;
  static std::optional<RuleNames> from_json(const nlohmann::json& j);
  // cc_rule / experiment / arm of a record of a flow whose socket the kernel
  // tagged `rule_tag` and `arm_tag` (the cc_rule and arm of its
  // tcpscope_flow_event or tcpscope_transfer_event); left unset when no rule
  // chose it or its install is no longer kept.
  void name(uint32_t rule_tag, uint8_t arm_tag, Enrichment* enrichment) const {
    const RuleLabel* rule = rule_of(rule_tag);
    if (!rule) return;
    enrichment->cc_rule = rule->name;
    if (rule->experiment) {
      enrichment->experiment = rule->experiment;
      if (arm_tag && arm_tag <= rule->arms.size()) enrichment->arm = rule->arms[TCPSCOPE_ARM_TAG_INDEX(arm_tag)];
    }
  }

 private:
  struct RuleLabel {
    std::string name;
    std::optional<std::string> experiment;
    std::vector<std::string> arms;
  };

  // The rule of a tag, null for no rule or an install no longer kept.
  const RuleLabel* rule_of(uint32_t rule_tag) const;

  uint16_t next_install_ = 1;
  std::map<uint16_t, std::vector<RuleLabel>> installs_;
  std::deque<uint16_t> install_order_;  // oldest first
};

}  // namespace tcpscope
