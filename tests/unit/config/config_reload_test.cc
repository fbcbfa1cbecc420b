#include "config/config_reload.h"

#include <gtest/gtest.h>

#include <functional>
#include <map>
#include <set>

namespace tcpscope {
namespace {

TEST(ConfigReload, EveryKeyTheParserKnowsHasARule) {
  std::set<std::string> covered;
  for (const auto& rule : reload_rules()) {
    const std::string key = rule.key;
    covered.insert(key.substr(0, key.find('.')));
    EXPECT_TRUE((rule.apply == nullptr) != (rule.differs == nullptr)) << key;
  }
  const auto& keys = config_top_level_keys();
  EXPECT_EQ(covered, std::set<std::string>(keys.begin(), keys.end()));
}

// One change per rule: a rule added without a change here fails the test.
const std::map<std::string, std::function<void(Config&)>>& changes() {
  static const std::map<std::string, std::function<void(Config&)>> kChanges = {
      {"listen", [](Config& c) { c.listen = "127.0.0.1:9999"; }},
      {"flow_log", [](Config& c) { c.flow_log = "/var/log/elsewhere.ndjson"; }},
      {"cgroup", [](Config& c) { c.cgroup = "/sys/fs/cgroup/other"; }},
      {"ring_buffer_bytes", [](Config& c) { c.ring_buffer_bytes = 1u << 20; }},
      {"http.basic_auth_user", [](Config& c) { c.http.basic_auth_user = "prometheus"; }},
      {"http.basic_auth_password_sha256", [](Config& c) { c.http.basic_auth_password_sha256 = std::string(64, 'a'); }},
      {"asn", [](Config& c) { c.asn.top_n = 7; }},
      {"peer_classes", [](Config& c) { c.peer_classes.push_back(PeerClassSpec{"lab", {}, {64500}, 3}); }},
      {"default_peer_class", [](Config& c) { c.default_peer_class = "lab"; }},
      {"size_classes_bytes", [](Config& c) { c.size_classes_bytes = {1000}; }},
      {"throughput_min_bytes", [](Config& c) { c.throughput_min_bytes = 1; }},
      {"flow_log_transfers", [](Config& c) { c.flow_log_transfers = false; }},
      {"transfer_sampling_rate", [](Config& c) { c.transfer_sampling_rate = 1; }},
      {"cc_policy", [](Config& c) { c.cc_policy.sysctl_guard = SysctlGuard::kDeny; }},
      {"services", [](Config& c) { c.services.names.push_back(ServiceNameRule{"/web/(.*)", "web-$1", 3}); }},
      {"snapshot_interval_s", [](Config& c) { c.snapshot_interval_s = 1; }},
      {"ignore_netns", [](Config& c) { c.ignore_netns = {"loadgen"}; }},
      {"export", [](Config& c) { c.export_.kafka.brokers = {"kafka-1:9092"}; }},
  };
  return kChanges;
}

TEST(ConfigReload, EachKeyIsEitherAppliedOrNamedAsNextStart) {
  ASSERT_EQ(changes().size(), reload_rules().size());
  const Config running;
  for (const auto& rule : reload_rules()) {
    auto change = changes().find(rule.key);
    ASSERT_NE(change, changes().end()) << rule.key;
    Config fresh = running;
    change->second(fresh);
    std::vector<std::string> next_start;
    const Config merged = merge_reload(running, fresh, &next_start);
    // Either the running config now has it, or it kept the old value and
    // the reload names the key: never both, never neither.
    Config expect_applied = running;
    change->second(expect_applied);
    if (rule.apply) {
      EXPECT_TRUE(next_start.empty()) << rule.key;
      std::vector<std::string> none;
      EXPECT_TRUE(merge_reload(merged, fresh, &none).source == fresh.source && none.empty()) << rule.key;
    } else {
      EXPECT_EQ(next_start, std::vector<std::string>{rule.key});
      EXPECT_TRUE(rule.differs(running, fresh));
      EXPECT_FALSE(rule.differs(running, merged)) << rule.key << ": kept the old value";
    }
  }
}

TEST(ConfigReload, AppliedKeysReachTheRunningConfig) {
  Config running, fresh;
  fresh.http.basic_auth_user = "prometheus";
  fresh.http.basic_auth_password_sha256 = std::string(64, 'b');
  fresh.snapshot_interval_s = 0;
  fresh.throughput_min_bytes = 5;
  fresh.flow_log_transfers = false;
  fresh.listen = "0.0.0.0:1";
  std::vector<std::string> next_start;
  const Config merged = merge_reload(running, fresh, &next_start);
  EXPECT_EQ(merged.http.basic_auth_user, "prometheus");
  EXPECT_EQ(merged.http.basic_auth_password_sha256, std::string(64, 'b'));
  EXPECT_EQ(merged.snapshot_interval_s, 0u);
  EXPECT_EQ(merged.throughput_min_bytes, 5u);
  EXPECT_FALSE(merged.flow_log_transfers);
  EXPECT_EQ(merged.listen, running.listen);
  EXPECT_EQ(next_start, std::vector<std::string>{"listen"});
}

}  // namespace
}  // namespace tcpscope

namespace tcpscope {
namespace {

// The producer serializes every record it queues in one format: a new one
// waits for a restart, like every export.kafka key.
TEST(ConfigReload, KafkaFormatIsNamedAsNextStart) {
  Config running;
  running.export_.kafka.brokers = {"kafka-1:9092"};
  Config fresh = running;
  fresh.export_.kafka.format = "protobuf";
  std::vector<std::string> next_start;
  const Config merged = merge_reload(running, fresh, &next_start);
  EXPECT_EQ(next_start, std::vector<std::string>{"export"});
  EXPECT_EQ(merged.export_.kafka.format, "json");
}

}  // namespace
}  // namespace tcpscope
