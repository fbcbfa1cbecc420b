#include "text/utf8_text.h"

#include <gtest/gtest.h>

#include <string>
#include <tuple>
#include <vector>

#include <nlohmann/json.hpp>

#include "cli/flows_command.h"

namespace tcpscope {
namespace {

TEST(Utf8Text, ValidUtf8) {
  EXPECT_TRUE(valid_utf8("plain"));
  EXPECT_TRUE(valid_utf8("Deutsche Telekom \xC3\xA9\xE2\x82\xAC\xF0\x9F\x98\x80"));
  EXPECT_FALSE(valid_utf8("\xff"));
  EXPECT_FALSE(valid_utf8("\xC0\xAF"));          // overlong '/'
  EXPECT_FALSE(valid_utf8("\xED\xA0\x80"));      // a surrogate
  EXPECT_FALSE(valid_utf8("\xE2\x82"));          // cut short
  EXPECT_FALSE(valid_utf8("\xF4\x90\x80\x80"));  // past U+10FFFF
}

TEST(Utf8Text, ControlsAndBrokenBytesBecomeQuestionMarks) {
  EXPECT_EQ(printable_text("nginx"), "nginx");
  EXPECT_EQ(printable_text("\x1b]0;owned\x07x"), "?]0;owned?x");           // OSC: retitle the terminal
  EXPECT_EQ(printable_text("a\x1b[2Jb\r\n\t\x7f"), "a?[2Jb????");            // CSI, CR, LF, TAB, DEL
  EXPECT_EQ(printable_text("\xC2\x9B" "31m"), "?31m");                       // C1 CSI as UTF-8
  EXPECT_EQ(printable_text("\x9B" "31m"), "?31m");                           // C1 CSI as a raw byte
  EXPECT_EQ(printable_text("Telef\xC3\xB3nica"), "Telef\xC3\xB3nica");       // text stays
}

TEST(Utf8Text, DisplayWidthCountsTerminalColumns) {
  EXPECT_EQ(display_width("nginx"), 5u);
  EXPECT_EQ(display_width("Telef\xC3\xB3nica"), 10u);
  EXPECT_EQ(display_width("\xE4\xB8\xAD\xE5\x9B\xBD\xE7\x94\xB5\xE4\xBF\xA1"), 8u);  // four wide characters
  EXPECT_EQ(display_width("ab\xC3"), 3u);                                                    // a stray byte: one
  EXPECT_EQ(display_prefix("Telef\xC3\xB3nica", 6), "Telef\xC3\xB3");
  EXPECT_EQ(display_prefix("\xE4\xB8\xAD\xE5\x9B\xBD", 3), "\xE4\xB8\xAD");  // the second needs two columns
  EXPECT_EQ(display_prefix("abc", 10), "abc");
}

TEST(Utf8Text, FlowsTableShowsNamesWithoutTheirEscapes) {
  nlohmann::json flows = nlohmann::json::array();
  flows.push_back({{"laddr", "198.18.0.1"}, {"lport", 80}, {"raddr", "198.18.0.2"}, {"rport", 5000},
                   {"dir", "passive"}, {"peer_class", "client"}, {"asn", 64500},
                   {"as_org", "Evil\x1b[2J Org"}, {"cc", "bbr"}, {"comm", "x\x1b]0;t\x07"}, {"pid", 7}});
  FlowsViewOptions o;
  const std::string table = format_flows_table(flows, o, 1);
  EXPECT_EQ(table.find('\x1b'), std::string::npos) << table;
  EXPECT_EQ(table.find('\x07'), std::string::npos) << table;
  EXPECT_NE(table.find("Evil?[2J Org"), std::string::npos) << table;
  EXPECT_NE(table.find("x?]0;t?/7"), std::string::npos) << table;
}

TEST(Utf8Text, FlowsTableShowsUtf8NamesInLineAndCutByCharacters) {
  const std::string kTelefonica = "Telef\xC3\xB3nica de Espa\xC3\xB1" "a";
  const std::string kChinaTelecom = "\xE4\xB8\xAD\xE5\x9B\xBD\xE7\x94\xB5\xE4\xBF\xA1";
  nlohmann::json flows = nlohmann::json::array();
  for (const auto& [org, comm, pid] : {std::tuple{kTelefonica, std::string("cl\xC3\xAF" "ent-\xC3\xBCtf8"), 7},
                                       std::tuple{kChinaTelecom, std::string("cut-name-abcd\xEF\xBF\xBD"), 8},
                                       std::tuple{std::string("Example"), std::string("nginx"), 9}})
    flows.push_back({{"laddr", "198.18.0.1"}, {"lport", 80}, {"raddr", "198.18.0.2"}, {"rport", 5000},
                     {"dir", "passive"}, {"peer_class", "client"}, {"asn", 64500}, {"as_org", org}, {"cc", "bbr"},
                     {"comm", comm}, {"pid", pid}});
  const std::string table = format_flows_table(flows, FlowsViewOptions{}, 3);
  EXPECT_NE(table.find("cl\xC3\xAF" "ent-\xC3\xBCtf8/7"), std::string::npos) << table;
  EXPECT_NE(table.find("cut-name-abcd\xEF\xBF\xBD/8"), std::string::npos) << table;
  EXPECT_NE(table.find("64500 Telef\xC3\xB3nica de Esp~"), std::string::npos) << table;  // 17 characters and ~
  EXPECT_NE(table.find("64500 " + kChinaTelecom), std::string::npos) << table;
  // PROCESS, the last column, starts in the same terminal column on every line.
  std::vector<std::string> lines;
  for (size_t at = 0, nl; (nl = table.find('\n', at)) != std::string::npos; at = nl + 1)
    lines.push_back(table.substr(at, nl - at));
  ASSERT_GE(lines.size(), 4u);
  const size_t column = lines[0].find("PROCESS");
  for (size_t i = 1; i <= 3; ++i) {
    const std::string& row = lines[i];
    const size_t process = row.rfind("  ") + 2;
    EXPECT_EQ(display_width(row.substr(0, process)), column) << table;
  }
}

}  // namespace
}  // namespace tcpscope
