#include "policy/policy_json.h"

#include <nlohmann/json.hpp>

#include "text/json_text.h"

namespace tcpscope {

std::string policy_json(const PolicyStatus& s) {
  const CcPolicy& config = s.config;
  nlohmann::json j;
  j["cgroup"] = s.cgroup;
  j["app_override"] = config.app_override == AppOverride::kEnforce ? "enforce" : "respect";
  j["sysctl_guard"] = config.sysctl_guard == SysctlGuard::kDeny ? "deny" : "observe";
  j["generation"] = s.generation;
  j["rules"] = nlohmann::json::array();
  if (s.active) {
    const CompiledPolicy& p = *s.active;
    j["remote_prefixes"] = p.remote.size();
    for (uint32_t i = 0; i < p.rules.size(); ++i) {
      const CompiledRule& r = p.rules[i];
      const CcRule& src = config.rules[i];
      nlohmann::json rule;
      rule["name"] = r.name;
      nlohmann::json match = nlohmann::json::object();
      if (src.match.peer_class) match["peer_class"] = *src.match.peer_class;
      if (!src.match.asns.empty()) match["asns"] = src.match.asns;
      if (!src.match.lports.empty()) match["lports"] = src.match.lports;
      if (!src.match.services.empty()) match["services"] = src.match.services;
      if (!src.match.prefixes.empty()) {
        match["prefixes"] = nlohmann::json::array();
        for (const auto& pf : src.match.prefixes) match["prefixes"].push_back(pf.to_string());
      }
      rule["match"] = match;
      uint64_t total = 0;
      nlohmann::json arms = nlohmann::json::array();
      for (uint32_t a = 0; a < r.arms.size(); ++a) {
        const ArmCounts n = i < s.counts.size() && a < s.counts[i].size() ? s.counts[i][a] : ArmCounts{};
        total += n.assigned;
        uint32_t weight = r.bpf.cum_weight[a] - (a ? r.bpf.cum_weight[a - 1] : 0);
        nlohmann::json arm = {{"cc", r.arms[a]}, {"weight", weight}, {"assigned", n.assigned}, {"revoked", n.revoked}};
        if (r.arm_names[a] != r.arms[a]) arm["arm"] = r.arm_names[a];
        arms.push_back(std::move(arm));
      }
      if (src.controller) {
        // The weights per cohort are the controller's (/api/v1/controller);
        // these are those of a cohort it has not decided for.
        rule["controller"] = {{"cohort", src.controller->cohort == CohortKind::kAsn ? "asn" : "peer_class"},
                              {"control_percent", src.controller->control_percent},
                              {"min_transfers", src.controller->min_transfers},
                              {"min_connections", src.controller->min_connections},
                              {"interval_s", src.controller->interval_s},
                              {"fdr", src.controller->fdr},
                              {"arms", arms}};
      } else if (r.experiment)
        rule["experiment"] = {{"name", *r.experiment}, {"arms", arms}};
      else
        rule["cc"] = r.arms[0];
      rule["assigned"] = total;
      j["rules"].push_back(rule);
    }
  }
  nlohmann::json app = nlohmann::json::array();
  for (const auto& c : s.app_cc)
    app.push_back({{"cc", c.cc}, {"action", app_cc_action_name(c.action)}, {"calls", c.calls}});
  j["app_cc_setsockopt"] = app;
  j["install"] = s.install;
  // observed/denied: the host's; other namespaces' writes are never denied.
  const SysctlWrites& w = s.sysctl_writes;
  for (uint32_t n = 0; n < TCPSCOPE_SYSCTL_NAMES; ++n)
    j["sysctl_writes"][sysctl_name(n)] = {
        {"observed", w[TCPSCOPE_SYSCTL_SLOT(n, 0, 0)]},
        {"denied", w[TCPSCOPE_SYSCTL_SLOT(n, 0, 1)]},
        {"observed_other_netns", w[TCPSCOPE_SYSCTL_SLOT(n, 1, 0)] + w[TCPSCOPE_SYSCTL_SLOT(n, 1, 1)]}};
  return json_text(j, 2) + "\n";
}

}  // namespace tcpscope
