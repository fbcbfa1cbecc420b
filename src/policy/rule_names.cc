#include "policy/rule_names.h"

#include <algorithm>

namespace tcpscope {

void RuleNames::add(const CompiledPolicy& policy) {
  const uint16_t install = next_install_;
  next_install_ = next_install_ == TCPSCOPE_INSTALL_MASK ? 1 : next_install_ + 1;

  std::vector<RuleLabel> labels;
  for (const auto& r : policy.rules) labels.push_back({r.name, r.experiment, r.arm_names});
  // The counter wrapped: the install that had this id is long gone.
  install_order_.erase(std::remove(install_order_.begin(), install_order_.end(), install), install_order_.end());
  installs_[install] = std::move(labels);
  install_order_.push_back(install);
  while (install_order_.size() > kKeepInstalls) {
    installs_.erase(install_order_.front());
    install_order_.pop_front();
  }
}

nlohmann::json RuleNames::to_json() const {
  nlohmann::json installs = nlohmann::json::array();
  for (uint16_t id : install_order_) {
    nlohmann::json rules = nlohmann::json::array();
    for (const auto& r : installs_.at(id))
      rules.push_back({{"name", r.name}, {"experiment", r.experiment ? nlohmann::json(*r.experiment) : nlohmann::json()},
                       {"arms", r.arms}});
    installs.push_back({{"id", id}, {"rules", std::move(rules)}});
  }
  return {{"next_install", next_install_}, {"installs", std::move(installs)}};
}

std::optional<RuleNames> RuleNames::from_json(const nlohmann::json& j) {
  try {
    RuleNames n;
    const uint64_t next = j.at("next_install").get<uint64_t>();
    if (next == 0 || next > TCPSCOPE_INSTALL_MASK) return std::nullopt;
    n.next_install_ = static_cast<uint16_t>(next);
    const auto& installs = j.at("installs");
    if (!installs.is_array() || installs.size() > kKeepInstalls) return std::nullopt;
    for (const auto& ij : installs) {
      const uint64_t id = ij.at("id").get<uint64_t>();
      if (id == 0 || id > TCPSCOPE_INSTALL_MASK || n.installs_.count(static_cast<uint16_t>(id))) return std::nullopt;
      std::vector<RuleLabel> rules;
      for (const auto& rj : ij.at("rules")) {
        RuleLabel r{rj.at("name").get<std::string>(), std::nullopt, rj.at("arms").get<std::vector<std::string>>()};
        if (!rj.at("experiment").is_null()) r.experiment = rj.at("experiment").get<std::string>();
        rules.push_back(std::move(r));
      }
      n.installs_[static_cast<uint16_t>(id)] = std::move(rules);
      n.install_order_.push_back(static_cast<uint16_t>(id));
    }
    return n;
  } catch (const nlohmann::json::exception&) {
    return std::nullopt;
  }
}

const RuleNames::RuleLabel* RuleNames::rule_of(uint32_t rule_tag) const {
  if (!rule_tag) return nullptr;
  const uint16_t install = static_cast<uint16_t>(TCPSCOPE_RULE_TAG_INSTALL(rule_tag));
  const uint32_t idx = TCPSCOPE_RULE_TAG_INDEX(rule_tag);
  auto it = installs_.find(install);
  if (it == installs_.end() || idx >= it->second.size()) return nullptr;
  return &it->second[idx];
}

}  // namespace tcpscope
