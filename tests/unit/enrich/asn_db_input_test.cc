// Hostile prefix-file input found by the fuzz targets and the reliability
// tests (tests/fuzz, tests/integration/test_reliability.py): a NUL byte must
// not silently cut a line, and bytes echoed in an error stay on one line.
#include <unistd.h>

#include <gtest/gtest.h>

#include <cstdlib>
#include <fstream>
#include <string>

#include "enrich/asn_db.h"

namespace tcpscope {
namespace {

class PrefixFileInput : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/tcpscope_asn_input.XXXXXX";
    const int fd = mkstemp(tmpl);
    ASSERT_GE(fd, 0);
    close(fd);
    path_ = tmpl;
  }
  void TearDown() override { unlink(path_.c_str()); }

  std::shared_ptr<const AsnDatabase> load(const std::string& bytes, std::string* error) {
    std::ofstream(path_, std::ios::binary) << bytes;
    AsnConfig cfg;
    cfg.prefix_file = path_;
    return AsnDatabase::load(cfg, error);
  }

  std::string path_;
};

TEST_F(PrefixFileInput, NulByteIsAnErrorWithTheLine) {
  std::string error;
  // Without the check the second line was read as "" and skipped as blank.
  EXPECT_FALSE(load(std::string("1.0.0.0\t24\t13335\n\0garbage\tline\n", 30), &error));
  EXPECT_EQ(error, path_ + ":2: NUL byte in the line (not a text file?)");
  EXPECT_FALSE(load(std::string("1.0.0.0\t24\t133\0" "35\n", 17), &error));
  EXPECT_EQ(error, path_ + ":1: NUL byte in the line (not a text file?)");
}

TEST_F(PrefixFileInput, LongLinesAndBytesNear0xffStillParse) {
  std::string error;
  // 0xff is what the read buffer is pre-filled with; in an org name it is data.
  auto db = load("1.0.0.0\t1.0.0.255\t13335\tUS\tOrg \xff\xfe name\n" + std::string(10000, '#') + "\n",
                 &error);
  ASSERT_TRUE(db) << error;
  EXPECT_EQ(db->lookup(*IpAddr::parse("1.0.0.7")).org, "Org \xff\xfe name");
}

TEST_F(PrefixFileInput, EchoedBytesAreEscapedAndClipped) {
  std::string error;
  EXPECT_FALSE(load("1.0.0.0\t24\t13\x1b[31m35\r\n", &error));
  EXPECT_EQ(error, path_ + ":1: bad AS number '13\\x1b[31m35'");
  EXPECT_FALSE(load("1.0.0.0\t24\t" + std::string(500, '9') + "\n", &error));
  EXPECT_EQ(error, path_ + ":1: bad AS number '" + std::string(64, '9') + "...'");
}

}  // namespace
}  // namespace tcpscope
