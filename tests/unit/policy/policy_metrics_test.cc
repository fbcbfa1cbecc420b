#include "policy/policy_metrics.h"

#include <gtest/gtest.h>

#include <prometheus/registry.h>

#include <map>
#include <optional>

namespace tcpscope {
namespace {

class PolicyMetricsTest : public ::testing::Test {
 protected:
  // The value of `family`'s counter with exactly these labels, if it exists.
  std::optional<double> value(const std::string& family, const std::map<std::string, std::string>& labels) const {
    for (const auto& f : registry_->Collect()) {
      if (f.name != family) continue;
      for (const auto& m : f.metric) {
        std::map<std::string, std::string> have;
        for (const auto& l : m.label) have[l.name] = l.value;
        if (have == labels) return m.counter.value;
      }
    }
    return std::nullopt;
  }
  size_t series(const std::string& family) const {
    for (const auto& f : registry_->Collect())
      if (f.name == family) return f.metric.size();
    return 0;
  }

  std::shared_ptr<prometheus::Registry> registry_ = std::make_shared<prometheus::Registry>();
  PolicyMetrics metrics_{registry_};
};

CompiledPolicy two_rules() {
  CompiledPolicy p;
  CompiledRule plain;
  plain.name = "lan";
  plain.arms = {"cubic"};
  plain.arm_names = plain.arms;
  CompiledRule exp;
  exp.name = "wan";
  exp.experiment = "trial";
  exp.arms = {"cubic", "bbr"};
  exp.arm_names = exp.arms;
  p.rules = {plain, exp};
  return p;
}

TEST_F(PolicyMetricsTest, RuleCountsByRuleExperimentAndArm) {
  const CompiledPolicy p = two_rules();
  metrics_.set_rule_counts(0, p, {{{4, 0}}, {{0, 0}, {6, 2}}});
  const std::map<std::string, std::string> lan = {{"rule", "lan"}, {"experiment", ""}, {"arm", ""}, {"cc", "cubic"}};
  const std::map<std::string, std::string> wan_bbr = {
      {"rule", "wan"}, {"experiment", "trial"}, {"arm", "bbr"}, {"cc", "bbr"}};
  EXPECT_EQ(value("tcpscope_cc_assignments_total", lan), 4);
  EXPECT_EQ(value("tcpscope_cc_assignments_total", wan_bbr), 6);
  EXPECT_EQ(value("tcpscope_cc_assignments_revoked_total", wan_bbr), 2);
  // Nothing counted, no series.
  EXPECT_EQ(series("tcpscope_cc_assignments_total"), 2u);
  EXPECT_EQ(series("tcpscope_cc_assignments_revoked_total"), 1u);

  // Running totals: only what they grew by is added.
  metrics_.set_rule_counts(0, p, {{{5, 0}}, {{0, 0}, {6, 2}}});
  EXPECT_EQ(value("tcpscope_cc_assignments_total", lan), 5);

  // The generation is reinstalled: its kernel counters restart at 0, and
  // the Prometheus counter goes on from where it was.
  metrics_.forget_generation(0);
  metrics_.set_rule_counts(0, p, {{{2, 0}}, {{0, 0}, {0, 0}}});
  EXPECT_EQ(value("tcpscope_cc_assignments_total", lan), 7);
  EXPECT_EQ(value("tcpscope_cc_assignments_total", wan_bbr), 6);
  // Another generation's slots are its own.
  metrics_.set_rule_counts(1, p, {{{1, 0}}, {{0, 0}, {0, 0}}});
  EXPECT_EQ(value("tcpscope_cc_assignments_total", lan), 8);
}

TEST_F(PolicyMetricsTest, ApplicationCallsAndSysctlWrites) {
  metrics_.set_app_cc_calls({{"bbr", TCPSCOPE_APP_CC_OBSERVED, 3}, {"other", TCPSCOPE_APP_CC_REFUSED, 1}});
  EXPECT_EQ(value("tcpscope_app_cc_setsockopt_total", {{"cc", "bbr"}, {"action", "observed"}}), 3);
  EXPECT_EQ(value("tcpscope_app_cc_setsockopt_total", {{"cc", "other"}, {"action", "refused"}}), 1);

  SysctlWrites w{};
  w[TCPSCOPE_SYSCTL_SLOT(0, 0, 1)] = 2;
  w[TCPSCOPE_SYSCTL_SLOT(1, 1, 0)] = 5;
  w[TCPSCOPE_SYSCTL_LOST] = 9;  // the log's, not a write of its own
  metrics_.set_sysctl_writes(w);
  EXPECT_EQ(value("tcpscope_sysctl_writes_total",
                  {{"name", "net.ipv4.tcp_congestion_control"}, {"action", "denied"}, {"netns", "host"}}),
            2);
  EXPECT_EQ(value("tcpscope_sysctl_writes_total",
                  {{"name", "net.ipv4.tcp_allowed_congestion_control"}, {"action", "observed"}, {"netns", "other"}}),
            5);
  EXPECT_EQ(series("tcpscope_sysctl_writes_total"), 2u);
}

}  // namespace
}  // namespace tcpscope
