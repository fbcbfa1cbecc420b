#include "text/utf8_text.h"

#include <gtest/gtest.h>

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

}  // namespace
}  // namespace tcpscope
