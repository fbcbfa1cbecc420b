#include "http/http_auth.h"

#include <gtest/gtest.h>

#include <string>

namespace tcpscope {
namespace {

// FIPS 180-4 / NIST CSRC example vectors.
TEST(Sha256Test, NistVectors) {
  EXPECT_EQ(to_hex(sha256("")), "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  EXPECT_EQ(to_hex(sha256("abc")), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  EXPECT_EQ(to_hex(sha256("abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq")),
            "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
  EXPECT_EQ(to_hex(sha256("abcdefghbcdefghicdefghijdefghijkefghijklfghijklmghijklmnhijklmnoijklmnopjklmnopqklmnopqrlmnopq"
                          "rsmnopqrstnopqrstu")),
            "cf5b16a778af8380036ce59e7b0492370b249b11e8f07a51afac45037afee9d1");
  EXPECT_EQ(to_hex(sha256(std::string(1000000, 'a'))),
            "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");
}

// Every length across the one- and two-block padding boundaries (55, 56, 63,
// 64, 119, 120 bytes): the digests of all prefixes of a pattern, chained,
// against the same computed with Python's hashlib.
TEST(Sha256Test, EveryLengthAroundTheBlockBoundaries) {
  std::string pattern;
  for (int i = 0; i < 200; ++i) pattern += static_cast<char>((i * 7 + 3) % 256);
  std::string chained;
  for (size_t n = 0; n < 130; ++n) chained += to_hex(sha256(std::string_view(pattern).substr(0, n)));
  EXPECT_EQ(to_hex(sha256(chained)), "417bafa972bf70d91d99263f3746a4a63241dec532460cb1f50f4fe60a50d20b");
}

TEST(Sha256Test, HexRoundTripAndRejects) {
  const Sha256Digest d = sha256("password");
  EXPECT_EQ(to_hex(d), "5e884898da28047151d0e56f8dc6292773603d0d6aabbdd62a11ef721d1542d8");
  auto parsed = parse_sha256_hex("5E884898DA28047151D0E56F8DC6292773603D0D6AABBDD62A11EF721D1542D8");
  ASSERT_TRUE(parsed);
  EXPECT_EQ(*parsed, d);
  EXPECT_FALSE(parse_sha256_hex(""));
  EXPECT_FALSE(parse_sha256_hex(std::string(63, 'a')));
  EXPECT_FALSE(parse_sha256_hex(std::string(65, 'a')));
  EXPECT_FALSE(parse_sha256_hex(std::string(63, 'a') + "g"));
}

TEST(Base64Test, DecodesWithPadding) {
  EXPECT_EQ(base64_decode(""), std::string());
  EXPECT_EQ(base64_decode("Zg=="), std::string("f"));
  EXPECT_EQ(base64_decode("Zm8="), std::string("fo"));
  EXPECT_EQ(base64_decode("Zm9v"), std::string("foo"));
  EXPECT_EQ(base64_decode("Zm9vYmFy"), std::string("foobar"));
  EXPECT_EQ(base64_decode("AP8A/w=="), std::string("\x00\xff\x00\xff", 4));
  EXPECT_EQ(base64_decode("+/+/"), std::string("\xfb\xff\xbf"));
}

TEST(Base64Test, RejectsEverythingElse) {
  for (const char* bad : {"Zg", "Zg=", "Z===", "Zg=a", "Zm9", "Zg==Zg==", "Zm9v!", "Zm 9v", "Zm-v", "Zm_v",
                          "====", "Z\n=="}) {
    EXPECT_FALSE(base64_decode(bad)) << bad;
  }
}

class BasicAuthTest : public ::testing::Test {
 protected:
  // user "prometheus", password "s3cr3t päss:word" (a colon is allowed in passwords).
  BasicAuth auth_{"prometheus", sha256("s3cr3t p\xc3\xa4ss:word")};
};

TEST_F(BasicAuthTest, AcceptsTheRightCredentials) {
  EXPECT_TRUE(auth_.accepts("Basic cHJvbWV0aGV1czpzM2NyM3QgcMOkc3M6d29yZA=="));
  EXPECT_TRUE(auth_.accepts("basic cHJvbWV0aGV1czpzM2NyM3QgcMOkc3M6d29yZA=="));  // scheme is case-insensitive
  EXPECT_TRUE(auth_.accepts("BASIC   cHJvbWV0aGV1czpzM2NyM3QgcMOkc3M6d29yZA==  "));
}

TEST_F(BasicAuthTest, RejectsEverythingElse) {
  EXPECT_FALSE(auth_.accepts(nullptr));
  EXPECT_FALSE(auth_.accepts(""));
  EXPECT_FALSE(auth_.accepts("Basic"));
  EXPECT_FALSE(auth_.accepts("Basic "));
  // prometheus:wrong
  EXPECT_FALSE(auth_.accepts("Basic cHJvbWV0aGV1czp3cm9uZw=="));
  // grafana:s3cr3t päss:word
  EXPECT_FALSE(auth_.accepts("Basic Z3JhZmFuYTpzM2NyM3QgcMOkc3M6d29yZA=="));
  // "prometheus" (no colon)
  EXPECT_FALSE(auth_.accepts("Basic cHJvbWV0aGV1cw=="));
  // The right credentials under another scheme, or not base64.
  EXPECT_FALSE(auth_.accepts("Bearer cHJvbWV0aGV1czpzM2NyM3QgcMOkc3M6d29yZA=="));
  EXPECT_FALSE(auth_.accepts("Basic prometheus:s3cr3t p\xc3\xa4ss:word"));
  // The digest itself is not a password.
  EXPECT_FALSE(auth_.accepts(("Basic " + std::string("cHJvbWV0aGV1czo=")).c_str()));  // "prometheus:"
}

}  // namespace
}  // namespace tcpscope
