// A scratch directory for a unit test, removed with everything in it when
// the test ends, however it ends.
#pragma once

#include <gtest/gtest.h>
#include <stdlib.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>

namespace tcpscope {

class TempDir {
 public:
  TempDir() {
    char tmpl[] = "/tmp/tcpscope-unit-XXXXXX";
    const char* d = mkdtemp(tmpl);
    EXPECT_NE(d, nullptr) << "mkdtemp " << tmpl << ": " << std::strerror(errno);
    path_ = d ? d : "";
  }
  ~TempDir() {
    std::error_code ec;
    if (!path_.empty()) std::filesystem::remove_all(path_, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;

  const std::string& path() const { return path_; }
  std::string file(const std::string& name) const { return path_ + "/" + name; }
  // Writes `content` to file(name) and returns its path.
  std::string write(const std::string& name, const std::string& content) const {
    std::ofstream out(file(name), std::ios::binary);
    out << content;
    EXPECT_TRUE(out.good()) << file(name);
    return file(name);
  }

 private:
  std::string path_;
};

}  // namespace tcpscope
