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

const RuleNames::RuleLabel* RuleNames::rule_of(uint32_t rule_tag) const {
  if (!rule_tag) return nullptr;
  const uint16_t install = static_cast<uint16_t>(TCPSCOPE_RULE_TAG_INSTALL(rule_tag));
  const uint32_t idx = TCPSCOPE_RULE_TAG_INDEX(rule_tag);
  auto it = installs_.find(install);
  if (it == installs_.end() || idx >= it->second.size()) return nullptr;
  return &it->second[idx];
}

}  // namespace tcpscope
