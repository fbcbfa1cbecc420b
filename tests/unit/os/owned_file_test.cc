#include "os/owned_file.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <string>

namespace tcpscope {
namespace {

class OwnedFileTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/owned_file_test.XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
    target_ = dir_ + "/target";
    std::ofstream(target_) << "precious\n";
    ASSERT_EQ(chmod(target_.c_str(), 0600), 0);
  }
  void TearDown() override { ASSERT_EQ(std::system(("rm -rf " + dir_).c_str()), 0); }

  std::string content(const std::string& p) {
    std::ifstream f(p);
    return std::string(std::istreambuf_iterator<char>(f), {});
  }
  // The refusal message for `path`, or "" if it opened.
  std::string refused(const std::string& path, OwnedFileMode mode = OwnedFileMode::kAppend) {
    std::string error;
    const int fd = open_owned_file(path, mode, &error);
    if (fd >= 0) {
      ::close(fd);
      return "";
    }
    EXPECT_EQ(error.rfind(path + ": ", 0), 0u) << error;
    return error;
  }

  std::string dir_, target_;
};

TEST_F(OwnedFileTest, CreatesAndAppendsToItsOwnFile) {
  const std::string p = dir_ + "/log";
  std::string error;
  for (const char* line : {"a\n", "b\n"}) {
    const int fd = open_owned_file(p, OwnedFileMode::kAppend, &error);
    ASSERT_GE(fd, 0) << error;
    ASSERT_EQ(write(fd, line, 2), 2);
    EXPECT_FALSE(fcntl(fd, F_GETFL) & O_NONBLOCK);
    EXPECT_TRUE(fcntl(fd, F_GETFD) & FD_CLOEXEC);
    ::close(fd);
  }
  EXPECT_EQ(content(p), "a\nb\n");
  struct stat st;
  ASSERT_EQ(stat(p.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0640u);
}

TEST_F(OwnedFileTest, TruncatesOnlyAfterTheChecks) {
  std::string error;
  const int fd = open_owned_file(target_, OwnedFileMode::kTruncate, &error);
  ASSERT_GE(fd, 0) << error;
  ::close(fd);
  EXPECT_EQ(content(target_), "");
  // Someone else's file keeps its content.
  std::ofstream(target_) << "precious\n";
  ASSERT_EQ(chown(target_.c_str(), 65534, 65534), 0);
  EXPECT_NE(refused(target_, OwnedFileMode::kTruncate).find("owned by uid 65534"), std::string::npos);
  EXPECT_EQ(content(target_), "precious\n");
}

TEST_F(OwnedFileTest, RefusesASymlinkEvenToItsOwnFile) {
  const std::string link = dir_ + "/log";
  ASSERT_EQ(symlink(target_.c_str(), link.c_str()), 0);
  EXPECT_NE(refused(link).find("is a symbolic link"), std::string::npos);
  const std::string dangling = dir_ + "/dangling";
  ASSERT_EQ(symlink((dir_ + "/nowhere").c_str(), dangling.c_str()), 0);
  EXPECT_NE(refused(dangling).find("is a symbolic link"), std::string::npos);
  EXPECT_EQ(access((dir_ + "/nowhere").c_str(), F_OK), -1);  // not created through the link
  EXPECT_EQ(content(target_), "precious\n");
}

TEST_F(OwnedFileTest, RefusesAFifoWithoutBlocking) {
  const std::string fifo = dir_ + "/fifo";
  ASSERT_EQ(mkfifo(fifo.c_str(), 0600), 0);
  EXPECT_NE(refused(fifo).find("is not a regular file"), std::string::npos);
  // With a reader the open succeeds, and the type check refuses it.
  const int reader = ::open(fifo.c_str(), O_RDONLY | O_NONBLOCK);
  ASSERT_GE(reader, 0);
  EXPECT_NE(refused(fifo).find("is not a regular file"), std::string::npos);
  ::close(reader);
}

TEST_F(OwnedFileTest, RefusesADevice) {
  EXPECT_NE(refused("/dev/null").find("is not a regular file"), std::string::npos);
}

TEST_F(OwnedFileTest, RefusesAFileOthersCanWrite) {
  ASSERT_EQ(chmod(target_.c_str(), 0620), 0);
  EXPECT_NE(refused(target_).find("writable by group or others"), std::string::npos);
  ASSERT_EQ(chmod(target_.c_str(), 0602), 0);
  EXPECT_NE(refused(target_).find("writable by group or others"), std::string::npos);
}

TEST_F(OwnedFileTest, RefusesAHardLink) {
  const std::string link = dir_ + "/log";
  ASSERT_EQ(::link(target_.c_str(), link.c_str()), 0);
  EXPECT_NE(refused(link).find("has 2 hard links"), std::string::npos);
  EXPECT_EQ(content(target_), "precious\n");
}

}  // namespace
}  // namespace tcpscope
