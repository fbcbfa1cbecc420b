#include "policy/policy_json.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

namespace tcpscope {
namespace {

Config config_with_rules() {
  Config c;
  c.peer_classes = {{"pop-to-pop", {*Prefix::parse("10.0.0.0/8")}, {}, 0}};
  c.default_peer_class = "client";
  c.cc_policy.app_override = AppOverride::kEnforce;
  c.cc_policy.sysctl_guard = SysctlGuard::kDeny;
  CcRule p2p;
  p2p.name = "p2p";
  p2p.match.peer_class = "pop-to-pop";
  p2p.match.lports = {443, 8443};
  p2p.cc = "cubic";
  CcRule ab;
  ab.name = "ab";
  ab.match.prefixes = {*Prefix::parse("203.0.113.0/24")};
  ab.match.services = {"video.service", "media/streamer-0"};
  ab.experiment = ExperimentSpec{"bbr-trial", {{"bbr", 30}, {"cubic", 70}}};
  c.cc_policy.rules = {p2p, ab};
  return c;
}

TEST(PolicyJson, BeforeTheFirstInstall) {
  PolicyStatus s;
  s.cgroup = "/sys/fs/cgroup";
  EXPECT_EQ(policy_json(s), R"({
  "app_cc_setsockopt": [],
  "app_override": "respect",
  "cgroup": "/sys/fs/cgroup",
  "generation": -1,
  "install": 0,
  "rules": [],
  "sysctl_guard": "observe",
  "sysctl_writes": {
    "net.ipv4.tcp_allowed_congestion_control": {
      "denied": 0,
      "observed": 0,
      "observed_other_netns": 0
    },
    "net.ipv4.tcp_congestion_control": {
      "denied": 0,
      "observed": 0,
      "observed_other_netns": 0
    }
  }
}
)");
}

TEST(PolicyJson, RulesArmsAndTheKernelsCounts) {
  const Config c = config_with_rules();
  std::string err;
  auto compiled = compile_policy(c, nullptr, &err);
  ASSERT_TRUE(compiled) << err;

  PolicyStatus s;
  s.cgroup = "/sys/fs/cgroup/test";
  s.config = c.cc_policy;
  s.active = std::make_shared<const CompiledPolicy>(*compiled);
  s.generation = 1;
  s.install = 7;
  s.counts = {{{5, 1}}, {{3, 0}, {4, 2}}};
  s.app_cc = {{"bbr", TCPSCOPE_APP_CC_OBSERVED, 2}, {"other", TCPSCOPE_APP_CC_REFUSED, 1},
              {"reno", TCPSCOPE_APP_CC_OVERRIDDEN, 9}};
  s.sysctl_writes[TCPSCOPE_SYSCTL_SLOT(0, 0, 0)] = 1;
  s.sysctl_writes[TCPSCOPE_SYSCTL_SLOT(0, 0, 1)] = 2;
  s.sysctl_writes[TCPSCOPE_SYSCTL_SLOT(0, 1, 0)] = 3;
  s.sysctl_writes[TCPSCOPE_SYSCTL_SLOT(0, 1, 1)] = 4;  // with the other namespaces' observed
  s.sysctl_writes[TCPSCOPE_SYSCTL_SLOT(1, 0, 1)] = 5;
  s.sysctl_writes[TCPSCOPE_SYSCTL_LOST] = 6;  // the log's, not shown

  const nlohmann::json j = nlohmann::json::parse(policy_json(s));
  const nlohmann::json want = nlohmann::json::parse(R"({
    "app_cc_setsockopt": [
      {"action": "observed", "calls": 2, "cc": "bbr"},
      {"action": "refused", "calls": 1, "cc": "other"},
      {"action": "overridden", "calls": 9, "cc": "reno"}
    ],
    "app_override": "enforce",
    "cgroup": "/sys/fs/cgroup/test",
    "generation": 1,
    "install": 7,
    "remote_prefixes": 4,
    "rules": [
      {"name": "p2p", "match": {"peer_class": "pop-to-pop", "lports": [443, 8443]},
       "cc": "cubic", "assigned": 5},
      {"name": "ab", "match": {"prefixes": ["203.0.113.0/24"], "services": ["video.service", "media/streamer-0"]},
       "experiment": {"name": "bbr-trial", "arms": [
         {"cc": "bbr", "weight": 30, "assigned": 3, "revoked": 0},
         {"cc": "cubic", "weight": 70, "assigned": 4, "revoked": 2}]},
       "assigned": 7}
    ],
    "sysctl_guard": "deny",
    "sysctl_writes": {
      "net.ipv4.tcp_congestion_control": {"observed": 1, "denied": 2, "observed_other_netns": 7},
      "net.ipv4.tcp_allowed_congestion_control": {"observed": 0, "denied": 5, "observed_other_netns": 0}
    }
  })");
  EXPECT_EQ(j, want) << j.dump(2);
}

}  // namespace
}  // namespace tcpscope
