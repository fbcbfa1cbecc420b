// `tcpscope policy show`'s tables: names as the daemon gives them, UTF-8
// shown as itself, control characters neutralised, columns by what a
// terminal draws.
#include "cli/policy_command.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "text/utf8_text.h"

namespace tcpscope {
namespace {

std::vector<std::string> lines_of(const std::string& text) {
  std::vector<std::string> lines;
  for (size_t at = 0, nl; (nl = text.find('\n', at)) != std::string::npos; at = nl + 1)
    lines.push_back(text.substr(at, nl - at));
  return lines;
}

const std::string kUtf8Rule = "r\xC3\xA8gle-\xE4\xB8\xAD";  // règle-中: 8 columns, 10 bytes

TEST(PolicyCommand, TableShowsUtf8NamesInLineAndNoControls) {
  const nlohmann::json policy = {
      {"cgroup", "/sys/fs/cgroup/\x1b]0;owned\x07"},
      {"app_override", "respect"},
      {"sysctl_guard", "observe"},
      {"rules",
       {{{"name", kUtf8Rule},
         {"match", {{"peer_class", "cli\x1b[2Jent"}}},
         {"experiment", {{"name", "exp\xC3\xA9"}, {"arms", {{{"cc", "bbr"}, {"weight", 50}, {"assigned", 3}}}}}},
         {"assigned", 3}},
        {{"name", "plain"}, {"match", {{"peer_class", "client"}}}, {"cc", "cubic"}, {"assigned", 1}}}},
      {"app_cc_setsockopt", nlohmann::json::array()},
      {"sysctl_writes", nlohmann::json::object()}};
  const std::string table = render_policy(policy.dump());
  EXPECT_EQ(table.find('\x1b'), std::string::npos) << table;
  EXPECT_EQ(table.find('\x07'), std::string::npos) << table;
  EXPECT_NE(table.find(kUtf8Rule), std::string::npos) << table;
  EXPECT_NE(table.find("peer_class=cli?[2Jent"), std::string::npos) << table;
  EXPECT_NE(table.find("experiment exp\xC3\xA9"), std::string::npos) << table;
  const auto lines = lines_of(table);
  size_t header = 0;
  while (header < lines.size() && lines[header].find("MATCH") == std::string::npos) ++header;
  ASSERT_LT(header + 3, lines.size()) << table;
  const size_t match = lines[header].find("MATCH");
  size_t rules = 0;
  for (const auto& line : lines) {
    const size_t at = line.find("peer_class=");
    if (at == std::string::npos) continue;
    ++rules;
    EXPECT_EQ(display_width(line.substr(0, at)), match) << table;
  }
  EXPECT_EQ(rules, 2u) << table;
}

TEST(PolicyCommand, TableListsARulesServices) {
  const nlohmann::json policy = {
      {"cgroup", "/sys/fs/cgroup"},
      {"rules",
       {{{"name", "video"},
         {"match", {{"lports", {443}}, {"services", {"video.service", "media/streamer-0\x1b[2J"}}}},
         {"cc", "bbr"},
         {"assigned", 2}}}},
      {"app_cc_setsockopt", nlohmann::json::array()},
      {"sysctl_writes", nlohmann::json::object()}};
  const std::string table = render_policy(policy.dump());
  EXPECT_NE(table.find("lports=443 services=video.service,media/streamer-0?[2J"), std::string::npos) << table;
}

TEST(PolicyCommand, ControllerTableShowsCohortsWithoutTheirEscapes) {
  const nlohmann::json controller = {
      {"rules",
       {{{"rule", kUtf8Rule},
         {"cohort", "asn"},
         {"cohorts",
          {{{"kind", "asn"},
            {"cohort", "64501"},
            {"state", "decided\x1b[1m"},
            {"winner", "bbr"},
            {"weights", {{"bbr", 90}, {"cubic", 10}}},
            {"evidence", {{"arms", nlohmann::json::object()}, {"test", nlohmann::json::object()}}}}}}}}}};
  const std::string table = render_controller(controller.dump());
  EXPECT_EQ(table.find('\x1b'), std::string::npos) << table;
  EXPECT_NE(table.find("controller of rule " + kUtf8Rule), std::string::npos) << table;
  EXPECT_NE(table.find("decided?[1m"), std::string::npos) << table;
}

}  // namespace
}  // namespace tcpscope
