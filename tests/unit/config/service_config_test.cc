// The `services:` section: what it reads, and the rules it refuses before
// the namer (enrich/service_names.h) sees them.
#include <gtest/gtest.h>

#include "config/config.h"

namespace tcpscope {
namespace {

std::vector<ConfigError> parse(const std::string& yaml, Config* out) {
  std::vector<ConfigError> errors;
  *out = parse_config(yaml, "test.yaml", {"cubic"}, &errors);
  return errors;
}

std::string one_error(const std::string& yaml) {
  Config c;
  const auto errors = parse(yaml, &c);
  if (errors.size() != 1) return "expected one error, got " + std::to_string(errors.size());
  return errors[0].to_string();
}

TEST(ServiceConfig, ReadsEveryKey) {
  Config c;
  const auto errors = parse(
      "services:\n"
      "  top_n: 5\n"
      "  grace_seconds: 30\n"
      "  names:\n"
      "    - path: '/apps\\.slice/([a-z]+)-[0-9]+\\.scope'\n"
      "      name: 'app-$1'\n"
      "    - path: '/batch(/.*)?'\n"
      "      name: batch\n",
      &c);
  ASSERT_TRUE(errors.empty()) << errors[0].to_string();
  EXPECT_EQ(c.services.top_n, 5u);
  EXPECT_EQ(c.services.grace_seconds, 30u);
  ASSERT_EQ(c.services.names.size(), 2u);
  EXPECT_EQ(c.services.names[0].path, "/apps\\.slice/([a-z]+)-[0-9]+\\.scope");
  EXPECT_EQ(c.services.names[0].name, "app-$1");
  EXPECT_EQ(c.services.names[0].line, 5);
  EXPECT_EQ(c.services.names[1].name, "batch");
}

TEST(ServiceConfig, DefaultsWhenAbsent) {
  Config c;
  ASSERT_TRUE(parse("listen: 127.0.0.1:9810\n", &c).empty());
  EXPECT_EQ(c.services.top_n, 20u);
  EXPECT_EQ(c.services.grace_seconds, 600u);
  EXPECT_TRUE(c.services.names.empty());
}

TEST(ServiceConfig, RefusesAnExpressionThatDoesNotCompile) {
  EXPECT_NE(one_error("services:\n  names:\n    - path: '/a(['\n      name: a\n")
                .find("test.yaml:3: services.names[0]: path \"/a([\" is not a regular expression"),
            std::string::npos);
}

TEST(ServiceConfig, RefusesAGroupThePathDoesNotHave) {
  EXPECT_NE(one_error("services:\n  names:\n    - path: '/(a)/b'\n      name: '$1-$2'\n")
                .find("test.yaml:3: services.names[0]: name \"$1-$2\" uses $2 but path has 1 group(s)"),
            std::string::npos);
}

TEST(ServiceConfig, RefusesARuleWithoutPathOrName) {
  EXPECT_NE(one_error("services:\n  names:\n    - path: '/a'\n").find("services.names[0] has no name"),
            std::string::npos);
  EXPECT_NE(one_error("services:\n  names:\n    - name: a\n").find("services.names[0] has no path"),
            std::string::npos);
  EXPECT_NE(one_error("services:\n  names:\n    - path: '/a'\n      name: ''\n").find("services.names[0].name"),
            std::string::npos);
}

TEST(ServiceConfig, RefusesUnknownKeysAndRanges) {
  EXPECT_NE(one_error("services:\n  top_n: 0\n").find("services.top_n"), std::string::npos);
  EXPECT_NE(one_error("services:\n  grace_seconds: 86401\n").find("services.grace_seconds"), std::string::npos);
  EXPECT_NE(one_error("services:\n  names:\n    - path: '/a'\n      name: a\n      unit: b\n").find("unit"),
            std::string::npos);
}

}  // namespace
}  // namespace tcpscope
