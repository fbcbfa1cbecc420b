// The argument parser every subcommand uses.
#include "cli/command_line.h"

#include <gtest/gtest.h>

#include <optional>
#include <string>
#include <vector>

namespace tcpscope {
namespace {

TEST(CommandLine, TakesFlagsAndValuesInBothSpellingsInAnyOrder) {
  bool json = false, reverse = false;
  std::string server = "default", sort;
  std::optional<std::string> listen;
  CommandLine cl;
  cl.flag("--json", &json).flag("--reverse", &reverse).option("--server", &server).option("--sort", &sort);
  cl.option("--listen", &listen);
  EXPECT_FALSE(cl.parse({"--sort=age", "--json", "--server", "http://h:1", "--listen=", "--sort", "srtt"}));
  EXPECT_TRUE(json);
  EXPECT_FALSE(reverse);
  EXPECT_EQ(server, "http://h:1");
  EXPECT_EQ(sort, "srtt");  // the last one wins
  EXPECT_EQ(listen, "");    // "--name=" is an empty value
  EXPECT_FALSE(cl.parse({}));
}

TEST(CommandLine, AValueIsTheNextArgumentWhateverItLooksLike) {
  bool json = false;
  std::string server;
  CommandLine cl;
  cl.flag("--json", &json).option("--server", &server);
  EXPECT_FALSE(cl.parse({"--server", "--json"}));
  EXPECT_EQ(server, "--json");
  EXPECT_FALSE(json);
  EXPECT_FALSE(cl.parse({"--server==x"}));
  EXPECT_EQ(server, "=x");
}

TEST(CommandLine, UnknownArgumentsAndMissingValuesHaveDefaultWording) {
  bool json = false;
  std::string server;
  CommandLine cl;
  cl.flag("--json", &json).option("--server", &server);
  for (const std::vector<std::string>& args :
       {std::vector<std::string>{"--bogus"}, {"--json=1"}, {"--serverx=1"}, {"--server-x"}, {"-"}, {"x"}, {"--"}}) {
    const auto e = cl.parse(args);
    ASSERT_TRUE(e) << args[0];
    EXPECT_EQ(e->kind, CommandLine::Error::kUnknown);
    EXPECT_EQ(e->message, "unknown option '" + args[0] + "'");
  }
  const auto e = cl.parse({"--json", "--server"});
  ASSERT_TRUE(e);
  EXPECT_EQ(e->kind, CommandLine::Error::kMissingValue);
  EXPECT_EQ(e->message, "--server needs a value");
}

TEST(CommandLine, HooksWordTheParsersErrors) {
  std::string server;
  CommandLine cl;
  auto incomplete = [](const std::string& arg) { return "unknown or incomplete option '" + arg + "'"; };
  cl.option("--server", &server).on_unknown(incomplete).on_missing_value(incomplete);
  EXPECT_EQ(cl.parse({"--bogus"})->message, "unknown or incomplete option '--bogus'");
  EXPECT_EQ(cl.parse({"--server"})->message, "unknown or incomplete option '--server'");
  EXPECT_EQ(cl.parse({"--server"})->kind, CommandLine::Error::kMissingValue);
  CommandLine quiet;
  quiet.option("--server", &server).on_missing_value(CommandLine::unknown_option_text);
  EXPECT_EQ(quiet.parse({"--server"})->message, "unknown option '--server'");
}

TEST(CommandLine, TheFirstProblemInArgumentOrderIsReported) {
  int calls = 0;
  CommandLine cl;
  cl.option("--count", [&](const std::string& v) -> std::string {
    ++calls;
    return v == "0" ? "--count wants a positive count, got \"0\"" : "";
  });
  auto e = cl.parse({"--count", "2", "--count=0", "--bogus"});
  ASSERT_TRUE(e);
  EXPECT_EQ(e->kind, CommandLine::Error::kBadValue);
  EXPECT_EQ(e->message, "--count wants a positive count, got \"0\"");
  EXPECT_EQ(calls, 2);
  e = cl.parse({"--bogus", "--count=0"});
  ASSERT_TRUE(e);
  EXPECT_EQ(e->kind, CommandLine::Error::kUnknown);
  EXPECT_EQ(calls, 2);
}

TEST(CommandLine, CountOptionsCheckDigitsAndBounds) {
  uint64_t watch = 0;
  CommandLine cl;
  cl.count_option("--watch", 9, 1, 3600, "whole seconds in [1, 3600]", [&](uint64_t n) { watch = n; });
  EXPECT_FALSE(cl.parse({"--watch", "3600"}));
  EXPECT_EQ(watch, 3600u);
  EXPECT_FALSE(cl.parse({"--watch=0001"}));
  EXPECT_EQ(watch, 1u);
  for (const char* bad : {"0", "3601", "0.5", "x", "", "-1", "0000000001"}) {
    const auto e = cl.parse({"--watch", bad});
    ASSERT_TRUE(e) << bad;
    EXPECT_EQ(e->kind, CommandLine::Error::kBadValue);
    EXPECT_EQ(e->message, "--watch wants whole seconds in [1, 3600], got \"" + std::string(bad) + "\"");
  }
  EXPECT_EQ(watch, 1u);
}

TEST(CommandLine, AStopFlagEndsThePass) {
  bool help = false;
  std::string server;
  CommandLine cl;
  cl.stop_flag("--help", &help).stop_flag("-h", &help).option("--server", &server);
  EXPECT_FALSE(cl.parse({"--server", "a", "-h", "--bogus", "--server"}));
  EXPECT_TRUE(help);
  EXPECT_EQ(server, "a");
  help = false;
  EXPECT_TRUE(cl.parse({"--bogus", "--help"}));
  EXPECT_FALSE(help);
  EXPECT_FALSE(cl.parse({"--server", "--help"}));  // a value, not the flag
  EXPECT_FALSE(help);
}

TEST(CommandLine, StartsWhereItIsTold) {
  bool json = false;
  CommandLine cl;
  cl.flag("--json", &json);
  EXPECT_FALSE(cl.parse({"show", "--json"}, 1));
  EXPECT_TRUE(json);
  EXPECT_EQ(cl.parse({"show", "--json"})->message, "unknown option 'show'");
}

TEST(ParseDecimal, DigitsOnlyUpToTheGivenLength) {
  uint64_t n = 7;
  EXPECT_TRUE(parse_decimal("0", 9, &n));
  EXPECT_EQ(n, 0u);
  EXPECT_TRUE(parse_decimal("000000042", 9, &n));
  EXPECT_EQ(n, 42u);
  EXPECT_TRUE(parse_decimal("9999999999999999999", 19, &n));
  EXPECT_EQ(n, 9999999999999999999ULL);
  for (const char* bad : {"", "1234567890", "-1", "+1", " 1", "1 ", "0x10", "1.5", "1e3"}) {
    n = 7;
    EXPECT_FALSE(parse_decimal(bad, 9, &n)) << bad;
    EXPECT_EQ(n, 7u) << bad;
  }
}

}  // namespace
}  // namespace tcpscope
