#include "config/config_reload.h"

#include "config/config_sections.h"

namespace tcpscope {

const std::vector<ReloadRule>& reload_rules() {
  static const std::vector<ReloadRule> kRules = [] {
    std::vector<ReloadRule> rules;
    for (const auto& key : top_level_section().keys) {
      if (key.reload == ConfigReload::kApplied) {
        rules.push_back(ReloadRule{key.name, key.apply, nullptr});
      } else if (key.reload == ConfigReload::kNextStart) {
        rules.push_back(ReloadRule{key.name, nullptr, key.differs});
      } else if (key.reload == ConfigReload::kEachKey) {
        for (auto& rule : key.key_rules(key.name)) rules.push_back(std::move(rule));
      }
    }
    return rules;
  }();
  return kRules;
}

Config merge_reload(const Config& running, const Config& fresh, std::vector<std::string>* next_start) {
  Config merged = running;
  for (const auto& rule : reload_rules()) {
    if (rule.apply)
      rule.apply(merged, fresh);
    else if (next_start && rule.differs(running, fresh))
      next_start->push_back(rule.key);
  }
  merged.source = fresh.source;
  return merged;
}

}  // namespace tcpscope
