#include "config/config.h"

#include <dirent.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <regex>
#include <sstream>

#include "cli/check_config_command.h"
#include "policy/cc_policy.h"
#include "os/congestion_controls.h"

namespace tcpscope {
namespace {

// Tests never depend on what this machine's kernel offers.
const std::vector<std::string> kCc = {"cubic", "bbr", "reno"};
const std::string kDataDir = std::string(TCPSCOPE_TEST_DATA) + "/configs";

std::vector<ConfigError> errors_of(const std::string& yaml, Config* out = nullptr) {
  std::vector<ConfigError> errors;
  Config c = parse_config(yaml, "test.yaml", kCc, &errors);
  if (out) *out = c;
  return errors;
}

std::string dump(const std::vector<ConfigError>& errors) {
  std::string s;
  for (const auto& e : errors) s += "\n  " + e.to_string();
  return s.empty() ? " (none)" : s;
}

// Exactly one error, on `line`, whose message contains `text`.
::testing::AssertionResult OneError(const std::string& yaml, int line, const std::string& text) {
  auto errors = errors_of(yaml);
  if (errors.size() == 1 && errors[0].line == line &&
      errors[0].message.find(text) != std::string::npos && errors[0].file == "test.yaml") {
    return ::testing::AssertionSuccess();
  }
  return ::testing::AssertionFailure() << "want one error at line " << line << " containing \""
                                       << text << "\", got:" << dump(errors);
}

::testing::AssertionResult NoErrors(const std::string& yaml) {
  auto errors = errors_of(yaml);
  if (errors.empty()) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << "want no errors, got:" << dump(errors);
}

// The start of a config up to a rule's experiment, or its match; and a
// rule for the peer class "edge".
const std::string kExperimentHead = "cc_policy:\n  rules:\n    - name: r\n      experiment:\n        name: e\n";
const std::string kMatchHead = "cc_policy:\n  rules:\n    - name: r\n      cc: bbr\n      match:\n";
const std::string kEdgeRule = "cc_policy:\n  rules:\n    - name: r\n      cc: bbr\n      match: { peer_class: edge }\n";

std::string read_file(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

std::vector<std::string> corpus_files(const std::string& prefix) {
  std::vector<std::string> out;
  DIR* d = opendir(kDataDir.c_str());
  if (!d) return out;
  while (const dirent* e = readdir(d)) {
    std::string name = e->d_name;
    if (name.rfind(prefix, 0) == 0 && name.size() > 5 &&
        name.compare(name.size() - 5, 5, ".yaml") == 0) {
      out.push_back(name);
    }
  }
  closedir(d);
  std::sort(out.begin(), out.end());
  return out;
}

// ---------------------------------------------------------------------------
// Valid configs

TEST(ConfigTest, EmptyTextIsAllDefaults) {
  Config c;
  EXPECT_TRUE(errors_of("", &c).empty());
  EXPECT_EQ(c.listen, "127.0.0.1:9810");
  EXPECT_EQ(c.default_peer_class, "client");
  EXPECT_EQ(c.size_classes_bytes, (std::vector<uint64_t>{100000, 1000000, 3000000}));
  EXPECT_EQ(c.throughput_min_bytes, 3000000u);
  EXPECT_TRUE(c.flow_log_transfers);
  EXPECT_TRUE(c.peer_classes.empty());
  EXPECT_TRUE(c.cc_policy.rules.empty());
  EXPECT_EQ(c.source, "test.yaml");
  EXPECT_TRUE(NoErrors("# only a comment\n\n"));
  EXPECT_TRUE(NoErrors("---\n"));
  EXPECT_TRUE(NoErrors("~\n"));
}

TEST(ConfigTest, SpecExampleParsesClean) {
  std::vector<ConfigError> errors;
  Config c = load_config_file(kDataDir + "/spec_example.yaml", {"bbr", "cubic"}, &errors);
  ASSERT_TRUE(errors.empty()) << dump(errors);
  EXPECT_EQ(c.listen, "127.0.0.1:9810");
  EXPECT_EQ(c.flow_log, "/var/log/tcpscope/flows.ndjson");
  EXPECT_EQ(c.asn.mmdb, "/var/lib/GeoIP/GeoLite2-ASN.mmdb");
  EXPECT_EQ(c.asn.prefix_file, "/etc/tcpscope/pfx2as.tsv");
  EXPECT_EQ(c.asn.top_n, 50u);
  ASSERT_EQ(c.peer_classes.size(), 3u);
  EXPECT_EQ(c.peer_classes[0].name, "intra-pop");
  EXPECT_EQ(c.peer_classes[0].line, 10);
  ASSERT_EQ(c.peer_classes[1].prefixes.size(), 2u);
  EXPECT_EQ(c.peer_classes[1].prefixes[0].to_string(), "10.0.0.0/8");
  EXPECT_EQ(c.peer_classes[1].prefixes[1].to_string(), "fd00::/8");
  EXPECT_EQ(c.peer_classes[2].asns, std::vector<uint32_t>{64500});
  EXPECT_EQ(c.default_peer_class, "client");
  EXPECT_EQ(c.cc_policy.app_override, AppOverride::kRespect);
  EXPECT_EQ(c.cc_policy.sysctl_guard, SysctlGuard::kObserve);
  ASSERT_EQ(c.cc_policy.rules.size(), 3u);
  const CcRule& r0 = c.cc_policy.rules[0];
  EXPECT_EQ(r0.name, "wireless-bbr");
  EXPECT_EQ(r0.line, 23);
  EXPECT_EQ(r0.match.peer_class, std::optional<std::string>("client"));
  EXPECT_EQ(r0.match.asns, (std::vector<uint32_t>{64501, 64502}));
  EXPECT_EQ(r0.cc, std::optional<std::string>("bbr"));
  EXPECT_FALSE(r0.experiment);
  const CcRule& r1 = c.cc_policy.rules[1];
  EXPECT_FALSE(r1.cc);
  ASSERT_TRUE(r1.experiment);
  EXPECT_EQ(r1.experiment->name, "bbr-vs-cubic");
  using Arms = std::vector<std::pair<std::string, uint32_t>>;
  EXPECT_EQ(r1.experiment->arms, (Arms{{"bbr", 50}, {"cubic", 50}}));
  const CcRule& r2 = c.cc_policy.rules[2];
  ASSERT_TRUE(r2.controller);
  EXPECT_FALSE(r2.cc || r2.experiment);
  EXPECT_EQ(r2.controller->arms, (std::vector<std::string>{"bbr", "cubic"}));
  EXPECT_EQ(r2.controller->cohort, CohortKind::kAsn);
  EXPECT_EQ(r2.controller->control_percent, 10u);
  EXPECT_EQ(r2.controller->min_transfers, 500u);
  EXPECT_EQ(r2.controller->interval_s, 30u);  // the defaults of what SPEC's example leaves out
  EXPECT_EQ(r2.controller->fdr, 0.05);
}

TEST(ConfigTest, ControllerSettings) {
  Config c;
  auto errors = errors_of(
      "cc_policy:\n  rules:\n    - name: auto\n      controller:\n        arms: [cubic, cubic, bbr]\n"
      "        cohort: peer_class\n        control_percent: 20\n        min_transfers: 30\n        interval_s: 5\n"
      "        fdr: 0.1\n        ramp_step_percent: 50\n        max_cohorts: 7\n"
      "        guards: {retrans_share_increase: 0.02, rtt_inflation_increase: 1.5}\n",
      &c);
  ASSERT_TRUE(errors.empty()) << dump(errors);
  const ControllerSpec& s = *c.cc_policy.rules.at(0).controller;
  EXPECT_EQ(s.arms, (std::vector<std::string>{"cubic", "cubic", "bbr"}));  // an A/A pair may repeat a CC
  EXPECT_EQ(s.cohort, CohortKind::kPeerClass);
  EXPECT_EQ(s.control_percent, 20u);
  EXPECT_EQ(s.min_transfers, 30u);
  EXPECT_EQ(s.interval_s, 5u);
  EXPECT_DOUBLE_EQ(s.fdr, 0.1);
  EXPECT_EQ(s.ramp_step_percent, 50u);
  EXPECT_EQ(s.max_cohorts, 7u);
  EXPECT_DOUBLE_EQ(s.retrans_share_increase, 0.02);
  EXPECT_DOUBLE_EQ(s.rtt_inflation_increase, 1.5);
  EXPECT_FALSE(s.evidence_user);  // root's sockets, or any on a privileged port
}

TEST(ConfigTest, ControllerEvidenceUserIsAUserOrAUid) {
  const std::string rule = "cc_policy:\n  rules:\n    - name: auto\n      controller:\n        arms: [cubic, bbr]\n";
  for (const auto& [given, uid] : {std::pair<const char*, uint32_t>{"root", 0}, {"nobody", 65534}, {"33", 33}}) {
    Config c;
    auto errors = errors_of(rule + "        evidence_user: " + given + "\n", &c);
    ASSERT_TRUE(errors.empty()) << given << ": " << dump(errors);
    EXPECT_EQ(c.cc_policy.rules.at(0).controller->evidence_user, uid) << given;
  }
}

TEST(ConfigTest, SpecExampleNeedsTheKernelToOfferItsCcs) {
  std::vector<ConfigError> errors;
  load_config_file(kDataDir + "/spec_example.yaml", {"cubic", "reno"}, &errors);
  ASSERT_EQ(errors.size(), 3u) << dump(errors);  // cc: bbr, arm bbr, controller arm bbr
  EXPECT_EQ(errors[0].line, 25);
  EXPECT_EQ(errors[1].line, 28);
  EXPECT_NE(errors[0].message.find("\"bbr\" is not available"), std::string::npos);
}

TEST(ConfigTest, ExperimentArmsKeepFileOrder) {
  Config c;
  auto errors = errors_of(R"(cc_policy:
  rules:
    - name: ab
      experiment:
        name: x
        arms: { reno: 10, cubic: 60, bbr: 30 }
)",
                          &c);
  ASSERT_TRUE(errors.empty()) << dump(errors);
  const auto& arms = c.cc_policy.rules.at(0).experiment->arms;
  ASSERT_EQ(arms.size(), 3u);
  EXPECT_EQ(arms[0], (std::pair<std::string, uint32_t>{"reno", 10}));
  EXPECT_EQ(arms[1], (std::pair<std::string, uint32_t>{"cubic", 60}));
  EXPECT_EQ(arms[2], (std::pair<std::string, uint32_t>{"bbr", 30}));
}

TEST(ConfigTest, ExtensionKeysAreRead) {
  Config c;
  auto errors = errors_of(R"(cgroup: /sys/fs/cgroup/web.slice
ring_buffer_bytes: 1073741824
snapshot_interval_s: 3600
listen: "[::]:9100"
)",
                          &c);
  ASSERT_TRUE(errors.empty()) << dump(errors);
  EXPECT_EQ(c.cgroup, "/sys/fs/cgroup/web.slice");
  EXPECT_EQ(c.ring_buffer_bytes, 1ull << 30);
  EXPECT_EQ(c.snapshot_interval_s, 3600u);
  EXPECT_EQ(c.listen, "[::]:9100");
}

TEST(ConfigTest, NullValuesKeepDefaults) {
  Config c;
  auto errors = errors_of("listen:\nasn:\n  top_n: ~\nsize_classes_bytes:\ncc_policy:\n", &c);
  ASSERT_TRUE(errors.empty()) << dump(errors);
  EXPECT_EQ(c.listen, "127.0.0.1:9810");
  EXPECT_EQ(c.asn.top_n, 50u);
  EXPECT_EQ(c.size_classes_bytes.size(), 3u);
}

TEST(ConfigTest, LineNumbersAreRecordedForClassesAndRules) {
  Config c;
  auto errors = errors_of(R"(peer_classes:
  - name: a
    prefixes: [10.0.0.0/8]

  - asns: [1]
    name: b
cc_policy:
  rules:
    - name: r
      cc: bbr
)",
                          &c);
  ASSERT_TRUE(errors.empty()) << dump(errors);
  EXPECT_EQ(c.peer_classes.at(0).line, 2);
  EXPECT_EQ(c.peer_classes.at(1).line, 5);
  EXPECT_EQ(c.cc_policy.rules.at(0).line, 9);
}

// ---------------------------------------------------------------------------
// Errors: one test per class of problem, each with its line.

TEST(ConfigErrorTest, ListsInMessagesAreCut) {
  // Found by the config fuzzer: 40 long class names made a 2 kB message.
  std::string yaml = "peer_classes:\n";
  for (int i = 0; i < 40; ++i) {
    yaml += "  - { name: c" + std::to_string(100 + i) + std::string(60, 'x') + ", prefixes: [10." +
            std::to_string(i) + ".0.0/16] }\n";
  }
  yaml += "cc_policy:\n  rules:\n    - { name: r, match: { peer_class: nope }, cc: bbr }\n";
  EXPECT_TRUE(OneError(yaml, 44, "and 28 more)"));
  std::vector<tcpscope::ConfigError> errors;
  tcpscope::parse_config(yaml, "t.yaml", {"cubic", "bbr"}, &errors);
  ASSERT_EQ(errors.size(), 1u);
  EXPECT_LT(errors[0].message.size(), 800u) << errors[0].message;
  // Found the same way: the prefix parser echoed the whole rest of a line.
  EXPECT_TRUE(OneError("peer_classes:\n  - { name: a, prefixes: [\"10.0.0.0/1" + std::string(2000, 'y') +
                           "\"] }\n",
                       2, "prefix length \"1yyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyy...\" is not a number"));
}

TEST(ConfigErrorTest, DuplicateKey) {
  EXPECT_TRUE(OneError("top_n: 1\n", 1, "unknown key \"top_n\""));  // not top-level
  EXPECT_TRUE(OneError("asn:\n  top_n: 5\n  top_n: 6\n", 3,
                       "duplicate key \"top_n\" in asn (first at line 2)"));
}

TEST(ConfigErrorTest, ListenAddress) {
  EXPECT_TRUE(NoErrors("listen: 0.0.0.0:65535\n"));
  EXPECT_TRUE(NoErrors("listen: \"[::1]:1\"\n"));
}

TEST(ConfigErrorTest, TopNRange) {
  EXPECT_TRUE(NoErrors("asn:\n  top_n: 1\n"));
  EXPECT_TRUE(NoErrors("asn:\n  top_n: 10000\n"));
}

TEST(ConfigErrorTest, SizeClasses) {
  Config c;
  ASSERT_TRUE(errors_of("size_classes_bytes: [1500, 1000000000000]\n", &c).empty());
  EXPECT_EQ(c.size_classes_bytes, (std::vector<uint64_t>{1500, 1000000000000}));
}

TEST(ConfigErrorTest, AbsurdlyLargeIntegersAreErrorsNotCrashes) {
  const std::string big = "123456789012345678901234567890";
  EXPECT_TRUE(OneError("throughput_min_bytes: " + big + "\n", 1, big + " is out of range"));
  EXPECT_TRUE(OneError("asn:\n  top_n: " + big + "\n", 2, "out of range 1..10000"));
  // A huge value is cut short in the message.
  auto errors = errors_of("size_classes_bytes: [" + std::string(5000, '9') + "]\n");
  ASSERT_EQ(errors.size(), 1u);
  EXPECT_LT(errors[0].message.size(), 200u);
  EXPECT_NE(errors[0].message.find("..."), std::string::npos);
}

TEST(ConfigErrorTest, PeerClassOverlaps) {
  // Nested prefixes are fine: the longest match wins.
  EXPECT_TRUE(NoErrors("peer_classes:\n  - name: a\n    prefixes: [10.0.0.0/8]\n"
                       "  - name: b\n    prefixes: [10.20.0.0/16]\n"));
}

TEST(ConfigErrorTest, CcNotOfferedByKernel) {
  // Checked against what the caller passes, not against this machine.
  std::vector<ConfigError> errors;
  parse_config("cc_policy:\n  rules:\n    - name: r\n      cc: cubic\n", "f", {}, &errors);
  ASSERT_EQ(errors.size(), 1u);
  EXPECT_NE(errors[0].message.find("available: none found"), std::string::npos);
}

TEST(ConfigErrorTest, ExperimentWeights) {
  auto errors = errors_of(kExperimentHead + "        arms: {bbr: 150, cubic: -50}\n");
  ASSERT_EQ(errors.size(), 2u) << dump(errors);
  EXPECT_NE(errors[0].message.find("arms.bbr weight 150 is out of range 0..100"), std::string::npos);
  EXPECT_NE(errors[1].message.find("arms.cubic weight -50 is out of range 0..100"), std::string::npos);
  EXPECT_TRUE(NoErrors(kExperimentHead + "        arms: {bbr: 100, cubic: 0}\n"));
}

TEST(ConfigErrorTest, AppOverrideAndSysctlGuard) {
  Config c;
  ASSERT_TRUE(errors_of("cc_policy:\n  app_override: enforce\n  sysctl_guard: deny\n", &c).empty());
  EXPECT_EQ(c.cc_policy.app_override, AppOverride::kEnforce);
  EXPECT_EQ(c.cc_policy.sysctl_guard, SysctlGuard::kDeny);
}

TEST(ConfigErrorTest, MatchPeerClassMustExist) {
  // Defined after the rule, or the (renamed) default class: both fine.
  EXPECT_TRUE(NoErrors(kEdgeRule + "peer_classes:\n  - name: edge\n    asns: [1]\n"));
  EXPECT_TRUE(NoErrors(kEdgeRule + "default_peer_class: edge\n"));
}

TEST(ConfigErrorTest, LportsRange) {
  Config c;
  ASSERT_TRUE(errors_of(kMatchHead + "        lports: [1, 65535]\n", &c).empty());
  EXPECT_EQ(c.cc_policy.rules.at(0).match.lports, (std::vector<uint16_t>{1, 65535}));
}

TEST(ConfigErrorTest, MatchServices) {
  Config c;
  std::string names;
  for (int i = 0; i < 64; ++i) names += (i ? ", " : "") + std::string("s") + std::to_string(i) + ".service";
  ASSERT_TRUE(errors_of(kMatchHead + "        services: [video.service, \"media/streamer-0\", " +
                            std::string(512, 'x') + "]\n",
                        &c)
                  .empty());
  EXPECT_EQ(c.cc_policy.rules.at(0).match.services,
            (std::vector<std::string>{"video.service", "media/streamer-0", std::string(512, 'x')}));
  ASSERT_TRUE(errors_of(kMatchHead + "        services: [" + names + "]\n", &c).empty());
  EXPECT_EQ(c.cc_policy.rules.at(0).match.services.size(), 64u);
  EXPECT_TRUE(OneError(kMatchHead + "        services: [" + names + ", one-more]\n", 6,
                       "cc_policy.rules[0].match.services needs 1 to 64 services, has 65"));
  EXPECT_TRUE(OneError(kMatchHead + "        services: [" + std::string(513, 'x') + "]\n", 6,
                       "cc_policy.rules[0].match.services[0] must be 1 to 512 bytes, has 513"));
}

TEST(ConfigErrorTest, AsnsRange) {
  Config c;
  ASSERT_TRUE(errors_of("peer_classes:\n  - name: a\n    asns: [1, 4294967295]\n", &c).empty());
  EXPECT_EQ(c.peer_classes.at(0).asns, (std::vector<uint32_t>{1, 4294967295u}));
}

TEST(ConfigErrorTest, RingBufferBytes) {
  EXPECT_TRUE(NoErrors("ring_buffer_bytes: 65536\n"));
}

TEST(ConfigTest, FlowLogTransfers) {
  Config c;
  ASSERT_TRUE(errors_of("flow_log_transfers: false\n", &c).empty());
  EXPECT_FALSE(c.flow_log_transfers);
  ASSERT_TRUE(errors_of("flow_log_transfers: true\n", &c).empty());
  EXPECT_TRUE(c.flow_log_transfers);
  ASSERT_TRUE(errors_of("flow_log_transfers:\n", &c).empty());
  EXPECT_TRUE(c.flow_log_transfers) << "null keeps the default";
}

TEST(ConfigTest, TransferSamplingRate) {
  Config c;
  EXPECT_EQ(c.transfer_sampling_rate, 16u);
  ASSERT_TRUE(errors_of("transfer_sampling_rate: 1\n", &c).empty());
  EXPECT_EQ(c.transfer_sampling_rate, 1u);
  ASSERT_TRUE(errors_of("transfer_sampling_rate: 65536\n", &c).empty());
  EXPECT_EQ(c.transfer_sampling_rate, 65536u);
  ASSERT_TRUE(errors_of("transfer_sampling_rate: 0\n", &c).empty()) << "0: no sampled flow's transfers";
  EXPECT_EQ(c.transfer_sampling_rate, 0u);
  EXPECT_FALSE(transfers_followed(c));
  EXPECT_TRUE(OneError("transfer_sampling_rate: 10\n", 1,
                       "transfer_sampling_rate 10 is neither 0 nor a power of two (1, 2, 4, ... 65536)"));
  EXPECT_TRUE(OneError("transfer_sampling_rate: 131072\n", 1, "out of range 0..65536"));
}

// Whether any flow's transfers are followed (the per-call hooks attached):
// a sampling rate, a controller rule, or an experiment that follows them.
TEST(ConfigTest, TransfersFollowed) {
  Config c;
  EXPECT_TRUE(transfers_followed(c)) << "the default samples one flow in 16";
  ASSERT_TRUE(errors_of("transfer_sampling_rate: 0\n"
                        "cc_policy:\n  rules:\n"
                        "    - name: ab\n      experiment: { name: x, arms: { cubic: 50, reno: 50 }, follow_transfers: false }\n",
                        &c)
                  .empty());
  EXPECT_FALSE(transfers_followed(c)) << "an experiment judged on flow records follows none";
  ASSERT_TRUE(errors_of("transfer_sampling_rate: 0\n"
                        "cc_policy:\n  rules:\n"
                        "    - name: ab\n      experiment: { name: x, arms: { cubic: 50, reno: 50 } }\n",
                        &c)
                  .empty());
  EXPECT_TRUE(transfers_followed(c));
  ASSERT_TRUE(errors_of("transfer_sampling_rate: 0\n"
                        "cc_policy:\n  rules:\n    - name: auto\n      controller: { arms: [cubic, reno] }\n",
                        &c)
                  .empty());
  EXPECT_TRUE(transfers_followed(c));
}

TEST(ConfigTest, IgnoreNetns) {
  Config c;
  EXPECT_TRUE(c.ignore_netns.empty());
  ASSERT_TRUE(errors_of("ignore_netns: [loadgen, /proc/1234/ns/net]\n", &c).empty());
  EXPECT_EQ(c.ignore_netns, (std::vector<std::string>{"loadgen", "/proc/1234/ns/net"}));
  EXPECT_TRUE(OneError("ignore_netns: [self]\n", 1, "ignore_netns names self"));
  EXPECT_TRUE(OneError("ignore_netns: [\"a b\"]\n", 1, "must be self, a network namespace's name or an absolute path"));
  EXPECT_TRUE(OneError("ignore_netns: loadgen\n", 1, "ignore_netns"));
}

TEST(ConfigTest, ExperimentFollowsEveryTransferUnlessItSaysNot) {
  const std::string rule = "cc_policy:\n  rules:\n    - name: ab\n      match: {}\n"
                           "      experiment: { name: ab, arms: { bbr: 50, cubic: 50 }";
  Config c;
  ASSERT_TRUE(errors_of(rule + " }\n", &c).empty());
  ASSERT_EQ(c.cc_policy.rules.size(), 1u);
  EXPECT_TRUE(c.cc_policy.rules[0].experiment->follow_transfers);
  ASSERT_TRUE(errors_of(rule + ", follow_transfers: false }\n", &c).empty());
  EXPECT_FALSE(c.cc_policy.rules[0].experiment->follow_transfers);
}

TEST(ConfigErrorTest, SnapshotInterval) {
  EXPECT_TRUE(NoErrors("snapshot_interval_s: 0\n"));
}

TEST(ConfigErrorTest, CgroupMustBeAbsolute) {
  EXPECT_TRUE(NoErrors("cgroup: \"\"\n"));
}

TEST(ConfigErrorTest, EveryProblemIsReported) {
  auto errors = errors_of(R"(listen: nowhere
asn:
  top_n: 0
  mdb: x
size_classes_bytes: [3, 2, 1]
cc_policy:
  app_override: maybe
  rules:
    - name: r
      cc: vegas
)");
  std::vector<int> lines;
  for (const auto& e : errors) lines.push_back(e.line);
  // size_classes: 2 follows 3, 1 follows 2.
  EXPECT_EQ(lines, (std::vector<int>{1, 3, 4, 5, 5, 7, 10})) << dump(errors);
}

TEST(ConfigErrorTest, DeepNestingIsAnErrorNotACrash) {
  auto errors = errors_of("listen: " + std::string(100000, '[') + "\n");
  ASSERT_EQ(errors.size(), 1u) << dump(errors);
  EXPECT_NE(errors[0].message.find("YAML syntax error"), std::string::npos);
}

// Cutting a valid file anywhere gives text that is valid or broken; either way
// parsing must not throw, and every error must point into the text.
TEST(ConfigErrorTest, EveryTruncationOfAValidFileIsHandled) {
  const std::string full = read_file(kDataDir + "/good_full.yaml");
  ASSERT_GT(full.size(), 500u);
  size_t broken = 0;
  for (size_t n = 0; n <= full.size(); ++n) {
    const std::string text = full.substr(0, n);
    const int lines = static_cast<int>(std::count(text.begin(), text.end(), '\n')) + 1;
    std::vector<ConfigError> errors;
    ASSERT_NO_THROW(parse_config(text, "t.yaml", kCc, &errors)) << "cut at " << n;
    for (const auto& e : errors) {
      EXPECT_GE(e.line, 1) << "cut at " << n << ": " << e.to_string();
      EXPECT_LE(e.line, lines) << "cut at " << n << ": " << e.to_string();
    }
    broken += errors.empty() ? 0 : 1;
  }
  // Most cuts land mid-token or mid-structure.
  EXPECT_GT(broken, full.size() / 4);
}

// ---------------------------------------------------------------------------
// The corpus in tests/data/configs (see its README.md).

TEST(ConfigCorpusTest, GoodFilesParseClean) {
  const auto files = corpus_files("good_");
  ASSERT_GE(files.size(), 3u);
  for (const auto& name : files) {
    std::vector<ConfigError> errors;
    load_config_file(kDataDir + "/" + name, kCc, &errors);
    EXPECT_TRUE(errors.empty()) << name << ":" << dump(errors);
  }
}

TEST(ConfigCorpusTest, BadFilesGiveExactlyTheExpectedErrors) {
  const auto files = corpus_files("bad_");
  ASSERT_GE(files.size(), 10u);
  static const std::regex kExpect(R"(^# expect: (\d+): (.+)$)");
  for (const auto& name : files) {
    const std::string path = kDataDir + "/" + name;
    struct Expect {
      int line;
      std::string text;
    };
    std::vector<Expect> expects;
    std::istringstream in(read_file(path));
    std::string l;
    std::smatch m;
    while (std::getline(in, l) && std::regex_match(l, m, kExpect)) {
      expects.push_back({std::stoi(m[1]), m[2]});
    }
    ASSERT_FALSE(expects.empty()) << name << " has no '# expect: LINE: TEXT' header";

    std::vector<ConfigError> errors;
    load_config_file(path, kCc, &errors);
    EXPECT_EQ(errors.size(), expects.size()) << name << ":" << dump(errors);
    std::vector<bool> used(errors.size());
    for (const auto& x : expects) {
      bool found = false;
      for (size_t i = 0; i < errors.size() && !found; ++i) {
        if (!used[i] && errors[i].line == x.line &&
            errors[i].message.find(x.text) != std::string::npos) {
          used[i] = found = true;
        }
      }
      EXPECT_TRUE(found) << name << ": no error at line " << x.line << " containing \"" << x.text
                         << "\"; got:" << dump(errors);
    }
    for (const auto& e : errors) EXPECT_EQ(e.file, path);
  }
}

// ---------------------------------------------------------------------------
// Files, the embedded default, helpers

TEST(ConfigFileTest, UnreadableFileIsOneErrorWithStrerror) {
  std::vector<ConfigError> errors;
  const std::string path = kDataDir + "/does-not-exist.yaml";
  Config c = load_config_file(path, kCc, &errors);
  ASSERT_EQ(errors.size(), 1u);
  EXPECT_EQ(errors[0].file, path);
  EXPECT_EQ(errors[0].line, 0);
  EXPECT_EQ(errors[0].to_string(), path + ": cannot read config file: " + std::strerror(ENOENT));
  EXPECT_EQ(c.source, path);

  errors.clear();
  load_config_file(kDataDir, kCc, &errors);
  ASSERT_EQ(errors.size(), 1u);
  EXPECT_NE(errors[0].message.find(std::strerror(EISDIR)), std::string::npos) << errors[0].message;
}

TEST(ConfigFileTest, ErrorsNameTheFile) {
  std::vector<ConfigError> errors;
  load_config_file(kDataDir + "/bad_unknown_top_key.yaml", kCc, &errors);
  ASSERT_EQ(errors.size(), 1u);
  EXPECT_EQ(errors[0].to_string(), kDataDir + "/bad_unknown_top_key.yaml:4: unknown key \"listn\" "
                                   "in the top level; did you mean \"listen\"?");
}

TEST(ConfigFileTest, ErrorToString) {
  EXPECT_EQ((ConfigError{"/etc/t.yaml", 7, "boom"}).to_string(), "/etc/t.yaml:7: boom");
  EXPECT_EQ((ConfigError{"/etc/t.yaml", 0, "boom"}).to_string(), "/etc/t.yaml: boom");
}

TEST(DefaultConfigTest, IsTheSourceFileAndParsesClean) {
  EXPECT_EQ(default_config_text(), read_file(std::string(TCPSCOPE_TEST_DATA) +
                                             "/../../src/config/default_config.yaml"));
  // No rules, so it must be valid whatever the kernel offers.
  std::vector<ConfigError> errors;
  Config c = parse_config(default_config_text(), "<embedded>", {}, &errors);
  ASSERT_TRUE(errors.empty()) << dump(errors);
  EXPECT_EQ(c.source, "<embedded>");
}

TEST(DefaultConfigTest, OnlyObserves) {
  std::vector<ConfigError> errors;
  Config c = parse_config(default_config_text(), "<embedded>", kCc, &errors);
  ASSERT_TRUE(errors.empty()) << dump(errors);
  const Config defaults;
  EXPECT_EQ(c.listen, "127.0.0.1:9810");
  EXPECT_EQ(c.flow_log, "");
  EXPECT_EQ(c.asn.mmdb, "");
  EXPECT_EQ(c.asn.prefix_file, "");
  EXPECT_EQ(c.asn.top_n, defaults.asn.top_n);
  EXPECT_TRUE(c.peer_classes.empty());
  EXPECT_EQ(c.default_peer_class, "client");
  EXPECT_EQ(c.size_classes_bytes, (std::vector<uint64_t>{100000, 1000000, 3000000}));
  EXPECT_EQ(c.throughput_min_bytes, 3000000u);
  EXPECT_EQ(c.cc_policy.app_override, AppOverride::kRespect);
  EXPECT_EQ(c.cc_policy.sysctl_guard, SysctlGuard::kObserve);
  EXPECT_TRUE(c.cc_policy.rules.empty());
  EXPECT_EQ(c.cgroup, "");
  EXPECT_EQ(c.ring_buffer_bytes, defaults.ring_buffer_bytes);
  EXPECT_EQ(c.snapshot_interval_s, defaults.snapshot_interval_s);
  EXPECT_TRUE(c.flow_log_transfers);
}

TEST(ListenAddressTest, ParsesIpv4AndBracketedIpv6) {
  std::string why;
  auto a = parse_listen_address("127.0.0.1:9810", &why);
  ASSERT_TRUE(a) << why;
  EXPECT_EQ(a->addr, *IpAddr::parse("127.0.0.1"));
  EXPECT_EQ(a->port, 9810);
  auto b = parse_listen_address("[2001:db8::1]:443", &why);
  ASSERT_TRUE(b) << why;
  EXPECT_EQ(b->addr, *IpAddr::parse("2001:db8::1"));
  EXPECT_EQ(b->port, 443);
  EXPECT_FALSE(parse_listen_address("", &why));
  EXPECT_FALSE(parse_listen_address("[::1]", nullptr));
}

TEST(KernelCcTest, ListsWhatTheKernelOffers) {
  // reno is built into every kernel and always registered.
  auto cc = kernel_congestion_controls();
  EXPECT_NE(std::find(cc.begin(), cc.end(), "reno"), cc.end());
  auto sorted = cc;
  std::sort(sorted.begin(), sorted.end());
  EXPECT_EQ(std::adjacent_find(sorted.begin(), sorted.end()), sorted.end()) << "duplicates";
  EXPECT_EQ(std::find(cc.begin(), cc.end(), "diag"), cc.end());
}

TEST(ReferencedCcTest, RuleAndArmNamesOnceInOrder) {
  Config c;
  ASSERT_TRUE(errors_of(R"(cc_policy:
  rules:
    - name: a
      cc: bbr
    - name: b
      experiment: { name: e, arms: { cubic: 50, bbr: 25, reno: 25 } }
)",
                        &c)
                  .empty());
  EXPECT_EQ(referenced_congestion_controls(c), (std::vector<std::string>{"bbr", "cubic", "reno"}));
  EXPECT_TRUE(referenced_congestion_controls(Config{}).empty());
}

// ---------------------------------------------------------------------------
// check-config

TEST(CheckConfigCommandTest, ValidFilePrintsOkAndSummary) {
  std::ostringstream out, err;
  const std::string path = kDataDir + "/spec_example.yaml";
  EXPECT_EQ(check_config_command(path, kCc, out, err), 0);
  EXPECT_EQ(out.str(), path + ": ok\n3 peer classes, 3 rules (1 experiment, 1 controller)\n");
  EXPECT_EQ(err.str(), "");
}

TEST(CheckConfigCommandTest, InvalidFilePrintsEveryErrorAndReturns2) {
  std::ostringstream out, err;
  const std::string path = kDataDir + "/bad_numbers.yaml";
  EXPECT_EQ(check_config_command(path, kCc, out, err), 2);
  EXPECT_EQ(out.str(), "");
  std::istringstream lines(err.str());
  std::string l;
  int n = 0;
  while (std::getline(lines, l)) {
    EXPECT_EQ(l.rfind(path + ":", 0), 0u) << l;
    ++n;
  }
  EXPECT_EQ(n, 6);
}

// The daemon refuses a rule on ASNs without ASN data at start; check-config
// must say so first, not "ok".
TEST(CheckConfigCommandTest, ARuleOnAsnsWithoutAsnDataIsAnError) {
  const std::string path = ::testing::TempDir() + "tcpscope_asn_rule_test.yaml";
  const std::string rules =
      "cc_policy:\n  rules:\n    - name: canary\n      match: { asns: [64512] }\n      cc: bbr\n";
  {
    std::ofstream out(path);
    out << rules;
  }
  std::ostringstream out, err;
  EXPECT_EQ(check_config_command(path, kCc, out, err), 2);
  EXPECT_EQ(err.str(), path + ": " + kPolicyNeedsAsnData + "\n");
  {
    std::ofstream out(path);
    out << "asn:\n  prefix_file: /etc/tcpscope/pfx2as.tsv\n" << rules;
  }
  std::ostringstream out2, err2;
  EXPECT_EQ(check_config_command(path, kCc, out2, err2), 0) << err2.str();
  std::remove(path.c_str());
}

TEST(CheckConfigCommandTest, MissingFileReturns2) {
  std::ostringstream out, err;
  EXPECT_EQ(check_config_command("/nonexistent/tcpscope.yaml", kCc, out, err), 2);
  EXPECT_EQ(err.str(), std::string("/nonexistent/tcpscope.yaml: cannot read config file: ") +
                           std::strerror(ENOENT) + "\n");
}

TEST(CheckConfigCommandTest, EmptyFileSummary) {
  std::ostringstream out, err;
  const std::string path = kDataDir + "/good_empty.yaml";
  EXPECT_EQ(check_config_command(path, kCc, out, err), 0) << err.str();
  EXPECT_EQ(out.str(), path + ": ok\n0 peer classes, 0 rules (0 experiments, 0 controllers)\n");
}

}  // namespace
}  // namespace tcpscope

namespace tcpscope {
namespace {

// ---------------------------------------------------------------------------
// Flags over the file (SPEC.md: "Flags override the config file"), at start
// and at every SIGHUP: the daemon calls load_effective_config() for both.

class OverrideTest : public ::testing::Test {
 protected:
  std::string path_ = ::testing::TempDir() + "tcpscope_override_test.yaml";
  void write(const std::string& yaml) {
    std::ofstream out(path_);
    out << yaml;
  }
  void TearDown() override { std::remove(path_.c_str()); }
};

TEST_F(OverrideTest, FlagBeatsTheFile) {
  write("listen: 127.0.0.1:9001\nflow_log: /tmp/file.ndjson\ncgroup: /sys/fs/cgroup/file\n");
  ConfigOverrides flags;
  flags.listen = "127.0.0.1:9002";
  std::vector<ConfigError> errors;
  Config c = load_effective_config(path_, flags, kCc, &errors);
  EXPECT_TRUE(errors.empty()) << dump(errors);
  EXPECT_EQ(c.listen, "127.0.0.1:9002");
  EXPECT_EQ(c.flow_log, "/tmp/file.ndjson");  // not overridden: the file's
  EXPECT_EQ(c.cgroup, "/sys/fs/cgroup/file");

  flags.flow_log = "-";
  flags.cgroup = "/sys/fs/cgroup/flag";
  c = load_effective_config(path_, flags, kCc, &errors);
  EXPECT_TRUE(errors.empty()) << dump(errors);
  EXPECT_EQ(c.listen, "127.0.0.1:9002");
  EXPECT_EQ(c.flow_log, "-");
  EXPECT_EQ(c.cgroup, "/sys/fs/cgroup/flag");
}

TEST_F(OverrideTest, NoFlagsKeepTheFile) {
  write("listen: 127.0.0.1:9001\n");
  std::vector<ConfigError> errors;
  Config c = load_effective_config(path_, ConfigOverrides{}, kCc, &errors);
  EXPECT_TRUE(errors.empty()) << dump(errors);
  EXPECT_EQ(c.listen, "127.0.0.1:9001");
  EXPECT_EQ(c.flow_log, "");
}

TEST_F(OverrideTest, FlagStillWinsAfterTheFileChangesAndIsReloaded) {
  write("listen: 127.0.0.1:9001\ntop_n_is_not_here: 1\n");
  ConfigOverrides flags;
  flags.listen = "127.0.0.1:9002";
  std::vector<ConfigError> errors;
  load_effective_config(path_, flags, kCc, &errors);
  EXPECT_FALSE(errors.empty());  // a bad file is still an error with flags set

  // The operator edits the file, listen included, and sends SIGHUP.
  write("listen: 127.0.0.1:9003\nflow_log: /tmp/new.ndjson\nasn:\n  top_n: 7\n");
  errors.clear();
  Config c = load_effective_config(path_, flags, kCc, &errors);
  EXPECT_TRUE(errors.empty()) << dump(errors);
  EXPECT_EQ(c.listen, "127.0.0.1:9002");
  EXPECT_EQ(c.flow_log, "/tmp/new.ndjson");  // the file's new value
  EXPECT_EQ(c.asn.top_n, 7u);
}

TEST_F(OverrideTest, EmbeddedDefaultWithFlags) {
  ConfigOverrides flags;
  flags.listen = "[::1]:9100";
  flags.flow_log = "/tmp/f.ndjson";
  std::vector<ConfigError> errors;
  Config c = load_effective_config("", flags, kCc, &errors);
  EXPECT_TRUE(errors.empty()) << dump(errors);
  EXPECT_EQ(c.listen, "[::1]:9100");
  EXPECT_EQ(c.flow_log, "/tmp/f.ndjson");
  EXPECT_EQ(c.source, "<embedded>");
}

// --transfer-sampling-rate: the file key's rule, named by the flag.
TEST_F(OverrideTest, TransferSamplingRateFlag) {
  for (const auto& [flag, want] : std::vector<std::pair<std::string, std::string>>{
           {"10", "transfer_sampling_rate 10 is neither 0 nor a power of two (1, 2, 4, ... 65536)"},
           {"131072", "transfer_sampling_rate 131072 is neither 0 nor a power of two"},
           {"-4", "transfer_sampling_rate \"-4\" is not a number"},
           {"8x", "transfer_sampling_rate \"8x\" is not a number"}}) {
    ConfigOverrides flags;
    flags.transfer_sampling_rate = flag;
    std::vector<ConfigError> errors;
    Config c;
    apply_overrides(flags, &c, &errors);
    ASSERT_EQ(errors.size(), 1u) << flag;
    EXPECT_EQ(errors[0].file, "--transfer-sampling-rate");
    EXPECT_NE(errors[0].message.find(want), std::string::npos) << errors[0].message;
    EXPECT_EQ(c.transfer_sampling_rate, 16u) << "unchanged by a refused flag";
  }
  ConfigOverrides flags;
  flags.transfer_sampling_rate = "1";
  std::vector<ConfigError> errors;
  Config c;
  apply_overrides(flags, &c, &errors);
  EXPECT_TRUE(errors.empty());
  EXPECT_EQ(c.transfer_sampling_rate, 1u);
}

TEST_F(OverrideTest, BadListenFlagIsAnError) {
  ConfigOverrides flags;
  flags.listen = "localhost:9810";
  std::vector<ConfigError> errors;
  Config c;
  apply_overrides(flags, &c, &errors);
  ASSERT_EQ(errors.size(), 1u);
  EXPECT_EQ(errors[0].file, "--listen");
  EXPECT_NE(errors[0].to_string().find("--listen: localhost:9810: host \"localhost\" is not an IP address"), std::string::npos)
      << errors[0].to_string();
}

}  // namespace
}  // namespace tcpscope

namespace tcpscope {
namespace {

TEST(ConfigTest, KafkaExport) {
  Config c;
  ASSERT_TRUE(NoErrors("export:\n  kafka:\n    brokers: [\"kafka-1:9092\", \"[fd00::1]:9093\"]\n"
                       "    topic_transfers: \"\"\n    compression: lz4\n    queue_bytes: 33554432\n"
                       "    security_protocol: sasl_ssl\n    tls: {ca_file: /etc/ssl/ca.pem}\n"
                       "    sasl: {mechanism: SCRAM-SHA-512, username: edge, password_file: /etc/tcpscope/kafka.pw}\n"));
  errors_of("export:\n  kafka:\n    brokers: [\"kafka-1:9092\", \"[fd00::1]:9093\"]\n    topic_transfers: \"\"\n", &c);
  const KafkaConfig& k = c.export_.kafka;
  EXPECT_TRUE(k.enabled());
  EXPECT_EQ(k.brokers, (std::vector<std::string>{"kafka-1:9092", "[fd00::1]:9093"}));
  EXPECT_EQ(k.topic_flows, "tcpscope.flows");
  EXPECT_EQ(k.topic_transfers, "");
  EXPECT_EQ(k.compression, "zstd");
  EXPECT_EQ(k.format, "json");
  Config proto;
  ASSERT_TRUE(NoErrors("export:\n  kafka:\n    brokers: [\"kafka-1:9092\"]\n    format: protobuf\n"));
  errors_of("export:\n  kafka:\n    brokers: [\"kafka-1:9092\"]\n    format: protobuf\n", &proto);
  EXPECT_EQ(proto.export_.kafka.format, "protobuf");
  EXPECT_NE(proto.export_.kafka, c.export_.kafka);
  Config none;
  errors_of("listen: 127.0.0.1:9810\n", &none);
  EXPECT_FALSE(none.export_.kafka.enabled());
}

// Malformed configs, each exactly one error on its line: what the error says.
struct ErrorCase {
  const char* topic;  // what is wrong; the case's test is named after it
  std::string yaml;
  int line;
  std::string text;  // what the message says
};

const ErrorCase kErrorCases[] = {
    {"ControllerMistakes", "cc_policy:\n  rules:\n    - name: auto\n      controller:\n        arms: [bbr]\n", 5,
     "controller.arms needs 2 to 8 arms, has 1"},
    {"ControllerMistakes", "cc_policy:\n  rules:\n    - name: auto\n      controller:\n        arms: [bbr, vegas]\n", 5,
     "\"vegas\" is not available"},
    {"ControllerMistakes", "cc_policy:\n  rules:\n    - name: auto\n      controller:\n        arms: [bbr, cubic]\n        cohort: city\n", 6,
     "controller.cohort must be asn or peer_class"},
    {"ControllerMistakes", "cc_policy:\n  rules:\n    - name: auto\n      controller:\n        arms: [bbr, cubic]\n        fdr: 0.9\n", 6,
     "controller.fdr must be a number in 1e-06..0.5"},
    {"ControllerMistakes", "cc_policy:\n  rules:\n    - name: auto\n      controller:\n        arms: [bbr, cubic]\n        fdr: lots\n", 6,
     "got \"lots\""},
    {"ControllerMistakes", "cc_policy:\n  rules:\n    - name: auto\n      controller:\n        arms: [bbr, cubic]\n        control_percent: 0\n", 6,
     "control_percent 0 is out of range 1..100"},
    {"ControllerMistakes", "cc_policy:\n  rules:\n    - name: auto\n      controller:\n        cohort: asn\n", 4,
     "controller has no arms"},
    {"ControllerMistakes", "cc_policy:\n  rules:\n    - name: auto\n      controller:\n        arms: [bbr, cubic]\n        guards: {loss: 1}\n", 6,
     "loss"},
    {"ControllerMistakes", "cc_policy:\n  rules:\n    - name: auto\n      controller:\n        arms: [bbr, cubic]\n        evidence_user: no-such-user-here\n", 6,
     "controller.evidence_user no-such-user-here: no such user on this host"},
    {"ControllerMistakes", "cc_policy:\n  rules:\n    - name: auto\n      controller:\n        arms: [bbr, cubic]\n        evidence_user: 4294967295\n", 6,
     "controller.evidence_user 4294967295: is not a uid (0..4294967294)"},
    {"ControllerMistakes", "cc_policy:\n  rules:\n    - name: r\n      cc: bbr\n      controller: {arms: [bbr, cubic]}\n", 3,
     "has more than one of cc, experiment and controller"},
    {"ControllerMistakes", "cc_policy:\n  rules:\n    - name: r\n      experiment: {name: controller, arms: {bbr: 50, cubic: 50}}\n", 4,
     "is reserved for controller rules"},
    {"SyntaxErrorIsOneErrorWithItsLine", "listen: 127.0.0.1:9810\npeer_classes:\n  - name: [a\n  - name: b\n", 4,
     "YAML syntax error"},
    {"SyntaxErrorIsOneErrorWithItsLine", "a: 1\n\tb: 2\n", 2,
     "YAML syntax error"},
    {"UnquotedIpv6ListenGetsAHint", "# x\nlisten: [::1]:9810\n", 2,
     "quote IPv6 listen addresses"},
    {"TopLevelNotAMapping", "just a string\n", 1,
     "the top level must be a mapping"},
    {"TopLevelNotAMapping", "\n\n- a\n- b\n", 3,
     "the top level must be a mapping (key: value), got a list"},
    {"SecondDocument", "listen: 127.0.0.1:1\n---\nlisten: 127.0.0.1:2\n", 3,
     "one YAML document"},
    {"UnknownTopLevelKeySuggestsTheNearest", "listen: 127.0.0.1:9810\nflowlog: /tmp/x\n", 2,
     "unknown key \"flowlog\" in the top level; did you mean \"flow_log\"?"},
    {"UnknownTopLevelKeySuggestsTheNearest", "\nbanana: 1\n", 2,
     "(known keys: listen, flow_log,"},
    {"UnknownKeyInAsn", "asn:\n  mmdb: /x\n  db: /y\n", 3,
     "unknown key \"db\" in asn"},
    {"UnknownKeyInPeerClass", "peer_classes:\n  - name: a\n    asns: [1]\n    asn: [2]\n", 4,
     "unknown key \"asn\" in peer_classes[0]; did you mean \"asns\"?"},
    {"UnknownKeyInCcPolicy", "cc_policy:\n  app_overide: respect\n", 2,
     "unknown key \"app_overide\" in cc_policy; did you mean \"app_override\"?"},
    {"UnknownKeyInRule", "cc_policy:\n  rules:\n    - name: r\n      cc: bbr\n      when: x\n", 5,
     "unknown key \"when\" in cc_policy.rules[0]"},
    {"UnknownKeyInMatch", "cc_policy:\n  rules:\n    - name: r\n      cc: bbr\n      match:\n        rports: [443]\n", 6,
     "unknown key \"rports\" in cc_policy.rules[0].match"},
    {"UnknownKeyInExperiment", "cc_policy:\n  rules:\n    - name: r\n      experiment:\n        name: e\n        arms: {bbr: 50, cubic: 50}\n        seed: 7\n", 7,
     "unknown key \"seed\" in cc_policy.rules[0].experiment"},
    {"WrongTypes", "peer_classes:\n  - name: a\n    prefixes: 10.0.0.0/8\n", 3,
     "peer_classes[0].prefixes must be a list, got a scalar \"10.0.0.0/8\""},
    {"WrongTypes", "peer_classes: backbone\n", 1,
     "peer_classes must be a list"},
    {"WrongTypes", "asn: /var/lib/x.mmdb\n", 1,
     "asn must be a mapping"},
    {"WrongTypes", "flow_log: [a, b]\n", 1,
     "flow_log must be a string, got a list"},
    {"WrongTypes", "default_peer_class: {a: 1}\n", 1,
     "default_peer_class must be a string, got a mapping"},
    {"WrongTypes", "cc_policy:\n  rules: {name: x}\n", 2,
     "cc_policy.rules must be a list"},
    {"WrongTypes", "cc_policy:\n  rules:\n    - bbr\n", 3,
     "cc_policy.rules[0] must be a mapping"},
    {"WrongTypes", "cc_policy:\n  rules:\n    - name: r\n      cc: [bbr]\n", 4,
     "cc_policy.rules[0].cc must be a string, got a list"},
    {"WrongTypes", "cc_policy:\n  rules:\n    - name: r\n      experiment: bbr\n", 4,
     "cc_policy.rules[0].experiment must be a mapping"},
    {"WrongTypes", "cc_policy:\n  rules:\n    - name: r\n      experiment: {name: e, arms: [bbr, cubic]}\n", 4,
     "cc_policy.rules[0].experiment.arms must be a mapping"},
    {"WrongTypes", "cc_policy:\n  rules:\n    - name: r\n      cc: bbr\n      match: [a]\n", 5,
     "cc_policy.rules[0].match must be a mapping"},
    {"WrongTypes", "size_classes_bytes: [[1]]\n", 1,
     "size_classes_bytes[0] must be an integer in 1..1000000000000, got a list"},
    {"MalformedPrefixes", "peer_classes:\n  - name: a\n    prefixes: [10.0.0.0/8, 10.0.0/8]\n", 3,
     "peer_classes[0].prefixes[1]: malformed prefix \"10.0.0/8\": \"10.0.0\" is not an IPv4 or IPv6 address"},
    {"MalformedPrefixes", "peer_classes:\n  - name: a\n    prefixes:\n      - ::/0\n      - \"fd00::/200\"\n", 5,
     "prefix length 200 is out of range 0..128"},
    {"MalformedPrefixes", "peer_classes:\n  - name: a\n    prefixes: [192.0.2.1/24]\n", 3,
     "malformed prefix \"192.0.2.1/24\": host bits set (did you mean 192.0.2.0/24?)"},
    {"MalformedPrefixes", "peer_classes:\n  - name: a\n    prefixes: [[10.0.0.0/8]]\n", 3,
     "must be a prefix such as 10.0.0.0/8, got a list"},
    {"MalformedPrefixes", "cc_policy:\n  rules:\n    - name: r\n      cc: bbr\n      match: { prefixes: [10.0.0.1/8] }\n", 5,
     "cc_policy.rules[0].match.prefixes[0]: malformed prefix"},
    {"ListenAddress", "listen: 9810\n", 1,
     "\"9810\" is not HOST:PORT"},
    {"ListenAddress", "listen: localhost:9810\n", 1,
     "host \"localhost\" is not an IP address"},
    {"ListenAddress", "listen: \"::1:9810\"\n", 1,
     "must be in brackets, e.g. [::1]:9810"},
    {"ListenAddress", "listen: \"[::1]9810\"\n", 1,
     "is not [IPV6]:PORT"},
    {"ListenAddress", "listen: \"[10.0.0.1]:9810\"\n", 1,
     "in brackets is not an IPv6 address"},
    {"ListenAddress", "listen: \"127.0.0.1:\"\n", 1,
     "port \"\" is not a number"},
    {"ListenAddress", "listen: 127.0.0.1:http\n", 1,
     "port \"http\" is not a number"},
    {"ListenAddress", "\nlisten: 127.0.0.1:0\n", 2,
     "port 0 is out of range 1..65535"},
    {"ListenAddress", "listen: 127.0.0.1:65536\n", 1,
     "port 65536 is out of range 1..65535"},
    {"ListenAddress", "listen: 127.0.0.1:999999\n", 1,
     "port \"999999\" is not a number"},
    {"TopNRange", "asn:\n  top_n: 0\n", 2,
     "asn.top_n 0 is out of range 1..10000"},
    {"TopNRange", "asn:\n  top_n: 10001\n", 2,
     "asn.top_n 10001 is out of range 1..10000"},
    {"TopNRange", "asn:\n  top_n: -1\n", 2,
     "asn.top_n -1 is out of range 1..10000"},
    {"TopNRange", "asn:\n  top_n: 5.5\n", 2,
     "asn.top_n must be an integer in 1..10000, got a scalar \"5.5\""},
    {"TopNRange", "asn:\n  top_n: 0x10\n", 2,
     "must be an integer"},
    {"SizeClasses", "\nsize_classes_bytes: []\n", 2,
     "at least one boundary"},
    {"SizeClasses", "size_classes_bytes:\n  - 100\n  - 50\n", 3,
     "size_classes_bytes must be strictly increasing: 50 follows 100"},
    {"SizeClasses", "size_classes_bytes: [100, 100]\n", 1,
     "strictly increasing"},
    {"SizeClasses", "size_classes_bytes: [100, 1000000000001]\n", 1,
     "size_classes_bytes[1] 1000000000001 is out of range 1..1000000000000"},
    {"SizeClasses", "size_classes_bytes: [0, 100]\n", 1,
     "size_classes_bytes[0] 0 is out of range"},
    {"ThroughputMinBytes", "throughput_min_bytes: 0\n", 1,
     "throughput_min_bytes 0 is out of range"},
    {"ThroughputMinBytes", "throughput_min_bytes: 1000000000001\n", 1,
     "throughput_min_bytes 1000000000001 is out of range 1..1000000000000"},
    {"AbsurdlyLargeIntegersAreErrorsNotCrashes", "snapshot_interval_s: 18446744073709551616\n", 1,
     "out of range 0..3600"},
    {"AbsurdlyLargeIntegersAreErrorsNotCrashes", "ring_buffer_bytes: 18446744073709551615\n", 1,
     "out of range"},
    {"DuplicatePeerClassNames", "peer_classes:\n  - name: a\n    asns: [1]\n  - name: a\n    asns: [2]\n", 4,
     "duplicate peer class name \"a\" (first defined at line 2)"},
    {"PeerClassOverlaps", "peer_classes:\n  - name: a\n    prefixes: [10.0.0.0/8]\n  - name: b\n    prefixes: [10.0.0.0/8]\n", 5,
     "prefix 10.0.0.0/8 of peer class \"b\" is already in peer class \"a\""},
    // Same network written two ways is still the same network.
    {"PeerClassOverlaps", "peer_classes:\n  - name: a\n    prefixes: [\"fd00::/8\"]\n  - name: b\n    prefixes: [\"FD00:0::/8\"]\n", 5,
     "prefix fd00::/8 of peer class \"b\""},
    {"PeerClassOverlaps", "peer_classes:\n  - name: a\n    asns: [7, 7]\n", 3,
     "ASN 7 of peer class \"a\" is already in peer class \"a\""},
    {"PeerClassNeedsNameAndMembers", "peer_classes:\n  - prefixes: [10.0.0.0/8]\n", 2,
     "peer_classes[0] has no name"},
    {"PeerClassNeedsNameAndMembers", "peer_classes:\n  - name: \"\"\n    asns: [1]\n", 2,
     "peer_classes[0].name must not be empty"},
    {"PeerClassNeedsNameAndMembers", "peer_classes:\n  - name: a\n", 2,
     "has neither prefixes nor asns"},
    {"DuplicateRuleNames", "cc_policy:\n  rules:\n    - name: r\n      cc: bbr\n    - cc: cubic\n      name: r\n", 6,
     "duplicate rule name \"r\" (first defined at line 3)"},
    {"RuleWithBothCcAndExperiment", "cc_policy:\n  rules:\n    - name: r\n      cc: bbr\n      experiment: {name: e, arms: {bbr: 50, cubic: 50}}\n", 3,
     "cc_policy.rules[0] has more than one of cc, experiment and controller"},
    {"RuleWithNeitherCcNorExperiment", "cc_policy:\n  rules:\n    - name: a\n      cc: bbr\n    - name: r\n      match: {lports: [443]}\n", 5,
     "cc_policy.rules[1] has none of cc, experiment and controller"},
    {"RuleWithoutName", "cc_policy:\n  rules:\n    - cc: bbr\n", 3,
     "cc_policy.rules[0] has no name"},
    {"CcNotOfferedByKernel", "cc_policy:\n  rules:\n    - name: r\n      cc: bbr2\n", 4,
     "cc_policy.rules[0].cc: congestion control \"bbr2\" is not available in this kernel (available: cubic bbr reno)"},
    {"CcNotOfferedByKernel", "cc_policy:\n  rules:\n    - name: r\n      experiment:\n        name: e\n        arms:\n          bbr: 50\n          dctcp: 50\n", 8,
     "cc_policy.rules[0].experiment.arms.dctcp: congestion control \"dctcp\""},
    {"ExperimentWeights", "cc_policy:\n  rules:\n    - name: r\n      experiment:\n        name: e\n        arms: {bbr: 50, cubic: 49}\n", 6,
     "cc_policy.rules[0].experiment.arms weights sum to 99, must sum to 100"},
    {"ExperimentWeights", "cc_policy:\n  rules:\n    - name: r\n      experiment:\n        name: e\n        arms: {bbr: 60, cubic: 60}\n", 6,
     "weights sum to 120"},
    {"ExperimentWeights", "cc_policy:\n  rules:\n    - name: r\n      experiment:\n        name: e\n        arms:\n          bbr: 50.0\n          cubic: 50\n", 7,
     "cc_policy.rules[0].experiment.arms.bbr weight must be an integer in 0..100"},
    {"ExperimentWeights", "cc_policy:\n  rules:\n    - name: r\n      experiment:\n        name: e\n        arms: {bbr: 50, bbr: 50}\n", 6,
     "duplicate key \"bbr\" in cc_policy.rules[0].experiment.arms"},
    {"ExperimentNeedsTwoArmsAndAName", "cc_policy:\n  rules:\n    - name: r\n      experiment:\n        name: e\n        arms: {bbr: 100}\n", 6,
     "needs at least 2 arms, has 1"},
    {"ExperimentNeedsTwoArmsAndAName", "cc_policy:\n  rules:\n    - name: r\n      experiment:\n        name: e\n        arms: {}\n", 6,
     "needs at least 2 arms, has 0"},
    {"ExperimentNeedsTwoArmsAndAName", "cc_policy:\n  rules:\n    - name: r\n      experiment:\n        arms: {bbr: 50, cubic: 50}\n", 4,
     "cc_policy.rules[0].experiment has no name"},
    {"ExperimentNeedsTwoArmsAndAName", "cc_policy:\n  rules:\n    - name: r\n      experiment:\n        name: e\n", 4,
     "cc_policy.rules[0].experiment has no arms"},
    {"AppOverrideAndSysctlGuard", "cc_policy:\n  app_override: ignore\n", 2,
     "cc_policy.app_override must be respect or enforce, got \"ignore\""},
    {"AppOverrideAndSysctlGuard", "cc_policy:\n  sysctl_guard: Deny\n", 2,
     "cc_policy.sysctl_guard must be observe or deny, got \"Deny\""},
    {"MatchPeerClassMustExist", "cc_policy:\n  rules:\n    - name: r\n      cc: bbr\n      match: { peer_class: edge }\n", 5,
     "cc_policy.rules[0].match.peer_class \"edge\" is not a peer class (defined: client)"},
    {"MatchPeerClassMustExist", "cc_policy:\n  rules:\n    - name: r\n      cc: bbr\n      match: { peer_class: client }\ndefault_peer_class: internet\n", 5,
     "\"client\" is not a peer class (defined: internet)"},
    {"LportsRange", "cc_policy:\n  rules:\n    - name: r\n      cc: bbr\n      match:\n        lports: [0]\n", 6,
     "cc_policy.rules[0].match.lports[0] 0 is out of range 1..65535"},
    {"LportsRange", "cc_policy:\n  rules:\n    - name: r\n      cc: bbr\n      match:\n        lports:\n          - 443\n          - 65536\n", 8,
     "lports[1] 65536 is out of range 1..65535"},
    {"LportsRange", "cc_policy:\n  rules:\n    - name: r\n      cc: bbr\n      match:\n        lports: [https]\n", 6,
     "got a scalar \"https\""},
    {"MatchServices", "cc_policy:\n  rules:\n    - name: r\n      cc: bbr\n      match:\n        services: []\n", 6,
     "cc_policy.rules[0].match.services needs 1 to 64 services, has 0"},
    {"MatchServices", "cc_policy:\n  rules:\n    - name: r\n      cc: bbr\n      match:\n        services: [\"\"]\n", 6,
     "cc_policy.rules[0].match.services[0] must be 1 to 512 bytes, has 0"},
    {"MatchServices", "cc_policy:\n  rules:\n    - name: r\n      cc: bbr\n      match:\n        services:\n          - a.service\n          - a.service\n", 8,
     "cc_policy.rules[0].match.services[1] \"a.service\" is listed twice"},
    {"MatchServices", "cc_policy:\n  rules:\n    - name: r\n      cc: bbr\n      match:\n        services: [{name: a}]\n", 6,
     "cc_policy.rules[0].match.services[0] must be a service's name, got a mapping"},
    {"MatchServices", "cc_policy:\n  rules:\n    - name: r\n      cc: bbr\n      match:\n        services: a.service\n", 6,
     "cc_policy.rules[0].match.services must be a list"},
    {"AsnsRange", "peer_classes:\n  - name: a\n    asns: [0]\n", 3,
     "peer_classes[0].asns[0] 0 is out of range 1..4294967295"},
    {"AsnsRange", "peer_classes:\n  - name: a\n    asns:\n      - 1\n      - 4294967296\n", 5,
     "peer_classes[0].asns[1] 4294967296 is out of range 1..4294967295"},
    {"AsnsRange", "peer_classes:\n  - name: a\n    asns: [AS64500]\n", 3,
     "must be an integer"},
    {"AsnsRange", "cc_policy:\n  rules:\n    - name: r\n      cc: bbr\n      match: {asns: [0]}\n", 5,
     "cc_policy.rules[0].match.asns[0] 0 is out of range"},
    {"RingBufferBytes", "ring_buffer_bytes: 1000000\n", 1,
     "ring_buffer_bytes 1000000 is not a power of two"},
    {"RingBufferBytes", "ring_buffer_bytes: 32768\n", 1,
     "ring_buffer_bytes 32768 is out of range 65536..1073741824"},
    {"RingBufferBytes", "ring_buffer_bytes: 2147483648\n", 1,
     "out of range 65536..1073741824"},
    {"FlowLogTransfersMustBeABool", "flow_log_transfers: yes\n", 1,
     "flow_log_transfers must be true or false, got a scalar \"yes\""},
    {"FlowLogTransfersMustBeABool", "flow_log_transfers: 1\n", 1,
     "flow_log_transfers must be true or false"},
    {"FlowLogTransfersMustBeABool", "\nflow_log_transfers: [true]\n", 2,
     "flow_log_transfers must be true or false, got a list"},
    {"FlowLogTransfersMustBeABool", "flow_log_transfer: false\n", 1,
     "did you mean \"flow_log_transfers\"?"},
    {"SnapshotInterval", "snapshot_interval_s: 3601\n", 1,
     "snapshot_interval_s 3601 is out of range 0..3600"},
    {"CgroupMustBeAbsolute", "cgroup: web.slice\n", 1,
     "cgroup must be an absolute path"},
    {"ControlCharactersInStrings", "default_peer_class: \"a\\nb\"\n", 1,
     "default_peer_class contains a control character"},
    {"KafkaMistakes", "export:\n  kafka:\n    topic_flows: f\n", 2,
     "export.kafka needs brokers"},
    {"KafkaMistakes", "export:\n  kafka:\n    brokers: [kafka-1]\n", 3,
     "brokers[0] must be HOST:PORT"},
    {"KafkaMistakes", "export:\n  kafka:\n    brokers: [\"kafka-1:99999\"]\n", 3,
     "must be HOST:PORT"},
    {"KafkaMistakes", "export:\n  kafka:\n    brokers: [\"k:9092\"]\n    topic_flows: \"a b\"\n", 4,
     "is not a Kafka topic name"},
    {"KafkaMistakes", "export:\n  kafka:\n    brokers: [\"k:9092\"]\n    compression: brotli\n", 4,
     "compression must be one of none, gzip, snappy, lz4, zstd"},
    {"KafkaMistakes", "export:\n  kafka:\n    brokers: [\"k:9092\"]\n    format: avro\n", 4,
     "export.kafka.format must be json or protobuf, got \"avro\""},
    {"KafkaMistakes", "export:\n  kafka:\n    brokers: [\"k:9092\"]\n    format: [json]\n", 4,
     "export.kafka.format"},
    {"KafkaMistakes", "export:\n  kafka:\n    brokers: [\"k:9092\"]\n    queue_bytes: 1000\n", 4,
     "out of range"},
    {"KafkaMistakes", "export:\n  kafka:\n    brokers: [\"k:9092\"]\n    security_protocol: sasl_plaintext\n", 2,
     "needs sasl.mechanism, sasl.username and sasl.password_file"},
    {"KafkaMistakes", "export:\n  kafka:\n    brokers: [\"k:9092\"]\n    security_protocol: sasl_ssl\n    sasl: {mechanism: PLAIN, username: u, password_file: /pw, password: x}\n", 5,
     "a password is never written in the config"},
    {"KafkaMistakes", "export:\n  kafka:\n    brokers: [\"k:9092\"]\n    tls: {ca_file: /ca.pem}\n", 4,
     "tls is used only with security_protocol ssl or sasl_ssl"},
    {"KafkaMistakes", "export:\n  kafka:\n    brokers: [\"k:9092\"]\n    broker: x\n", 4,
     "did you mean \"brokers\""},
};

class ConfigErrorCase : public ::testing::TestWithParam<ErrorCase> {};

TEST_P(ConfigErrorCase, IsOneErrorOnItsLine) {
  EXPECT_TRUE(OneError(GetParam().yaml, GetParam().line, GetParam().text));
}

INSTANTIATE_TEST_SUITE_P(ConfigErrorTest, ConfigErrorCase, ::testing::ValuesIn(kErrorCases),
                         [](const ::testing::TestParamInfo<ErrorCase>& info) {
                           return std::string(info.param.topic) + "_" + std::to_string(info.index);
                         });

}  // namespace
}  // namespace tcpscope
