// The `http:` section of the config (basic auth for the endpoint).
// Its error cases are in the corpus: tests/data/configs/bad_http*.yaml.
#include <gtest/gtest.h>

#include "config/config.h"
#include "http/http_auth.h"

namespace tcpscope {
namespace {

const std::vector<std::string> kCc = {"cubic", "bbr", "reno"};

TEST(HttpConfigTest, OffByDefault) {
  std::vector<ConfigError> errors;
  Config c = parse_config("listen: 127.0.0.1:9810\n", "t.yaml", kCc, &errors);
  ASSERT_TRUE(errors.empty());
  EXPECT_FALSE(c.http.basic_auth());
}

TEST(HttpConfigTest, ReadsBasicAuth) {
  const std::string digest = to_hex(sha256("s3cret"));
  std::vector<ConfigError> errors;
  Config c = parse_config("listen: 0.0.0.0:9810\n"
                          "http:\n"
                          "  basic_auth_user: prometheus\n"
                          "  basic_auth_password_sha256: " + digest + "\n",
                          "t.yaml", kCc, &errors);
  ASSERT_TRUE(errors.empty()) << errors[0].to_string();
  EXPECT_TRUE(c.http.basic_auth());
  EXPECT_EQ(c.http.basic_auth_user, "prometheus");
  EXPECT_EQ(c.http.basic_auth_password_sha256, digest);
}

TEST(HttpConfigTest, NullsKeepTheDefaults) {
  std::vector<ConfigError> errors;
  Config c = parse_config("http:\n  basic_auth_user: ~\n", "t.yaml", kCc, &errors);
  ASSERT_TRUE(errors.empty()) << errors[0].to_string();
  EXPECT_FALSE(c.http.basic_auth());
}

TEST(HttpConfigTest, AUserNeedsADigest) {
  std::vector<ConfigError> errors;
  parse_config("http:\n  basic_auth_user: prometheus\n", "t.yaml", kCc, &errors);
  ASSERT_EQ(errors.size(), 1u);
  EXPECT_EQ(errors[0].to_string(), "t.yaml:2: http.basic_auth_user needs http.basic_auth_password_sha256");
}

}  // namespace
}  // namespace tcpscope
