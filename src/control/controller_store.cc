#include "control/controller_store.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>

#include <dirent.h>
#include <stdio.h>

#include <algorithm>
#include <ctime>
#include <tuple>
#include <vector>

namespace tcpscope {

namespace {

constexpr const char* kDefaultDir = "/var/lib/tcpscope";
constexpr const char* kFileName = "controller.json";
constexpr size_t kMaxStateBytes = ControllerStore::kMaxStateBytes;

std::string errno_text(int err) { return std::string(std::strerror(err)) + " (errno " + std::to_string(err) + ")"; }

// The directory as an fd, if it is a safe place for root's state.
int open_safe_dir(const std::string& dir, bool create, std::string* error) {
  if (create && ::mkdir(dir.c_str(), 0700) != 0 && errno != EEXIST) {
    *error = dir + ": " + errno_text(errno);
    return -1;
  }
  int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  if (fd < 0) {
    *error = dir + ": " + errno_text(errno);
    return -1;
  }
  struct stat st {};
  if (::fstat(fd, &st) != 0 || st.st_uid != ::geteuid() || (st.st_mode & (S_IWGRP | S_IWOTH))) {
    *error = dir + ": not owned by uid " + std::to_string(::geteuid()) + " or writable by others";
    ::close(fd);
    return -1;
  }
  return fd;
}

}  // namespace

ControllerStore::ControllerStore(std::string dir) : dir_(std::move(dir)) {
  if (dir_.empty()) {
    const char* env = std::getenv("STATE_DIRECTORY");
    dir_ = env && *env ? std::string(env) : kDefaultDir;
    dir_ = dir_.substr(0, dir_.find(':'));
  }
  path_ = dir_ + "/" + kFileName;
}

std::optional<nlohmann::json> ControllerStore::load(std::string* error) const {
  error->clear();
  struct stat st {};
  if (::lstat(dir_.c_str(), &st) != 0 && errno == ENOENT) return std::nullopt;
  int dfd = open_safe_dir(dir_, false, error);
  if (dfd < 0) return std::nullopt;
  int fd = ::openat(dfd, kFileName, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
  ::close(dfd);
  if (fd < 0) {
    if (errno != ENOENT) *error = path_ + ": " + errno_text(errno);
    return std::nullopt;
  }
  std::string text;
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) || st.st_uid != ::geteuid() ||
      static_cast<size_t>(st.st_size) > kMaxStateBytes) {
    *error = path_ + ": not a regular file of uid " + std::to_string(::geteuid()) + " under " +
             std::to_string(kMaxStateBytes >> 20) + " MiB";
    ::close(fd);
    return std::nullopt;
  }
  char buf[65536];
  for (;;) {
    ssize_t n = ::read(fd, buf, sizeof(buf));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      *error = path_ + ": " + errno_text(errno);
      ::close(fd);
      return std::nullopt;
    }
    if (n == 0 || text.size() + static_cast<size_t>(n) > kMaxStateBytes) break;
    text.append(buf, static_cast<size_t>(n));
  }
  ::close(fd);
  auto doc = nlohmann::json::parse(text, nullptr, false);
  if (doc.is_discarded()) {
    *error = path_ + ": not valid JSON";
    return std::nullopt;
  }
  return doc;
}

bool ControllerStore::save(const std::string& text, std::string* error) const {
  if (text.size() > kMaxStateBytes) {
    *error = path_ + ": the state is " + std::to_string(text.size()) + " bytes, over the " +
             std::to_string(kMaxStateBytes) + " that loading accepts; not written";
    return false;
  }
  int dfd = open_safe_dir(dir_, true, error);
  if (dfd < 0) return false;
  const std::string tmp = std::string(kFileName) + ".tmp";
  ::unlinkat(dfd, tmp.c_str(), 0);
  int fd = ::openat(dfd, tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
  bool ok = fd >= 0;
  size_t off = 0;
  while (ok && off < text.size()) {
    ssize_t n = ::write(fd, text.data() + off, text.size() - off);
    if (n < 0 && errno == EINTR) continue;
    ok = n > 0;
    off += ok ? static_cast<size_t>(n) : 0;
  }
  ok = ok && ::fsync(fd) == 0;
  const int err = errno;
  if (fd >= 0) ::close(fd);
  ok = ok && ::renameat(dfd, tmp.c_str(), dfd, kFileName) == 0;
  if (!ok) {
    *error = path_ + ": " + errno_text(errno ? errno : err);
    ::unlinkat(dfd, tmp.c_str(), 0);
  } else {
    ::fsync(dfd);
  }
  ::close(dfd);
  return ok;
}

std::string ControllerStore::set_aside(std::string* error) const {
  error->clear();
  int dfd = open_safe_dir(dir_, false, error);
  if (dfd < 0) return "";
  // Those set aside before, oldest first by their name's time and count: a
  // second one in the same second (a daemon restarted in a loop) is -2, and
  // so on, never over another.
  const std::string prefix = std::string(kFileName) + ".unreadable-";
  struct SetAside {
    unsigned long long time, count;
    std::string name;
    bool operator<(const SetAside& o) const { return std::tie(time, count) < std::tie(o.time, o.count); }
  };
  std::vector<SetAside> before;
  const int list_fd = ::dup(dfd);
  DIR* d = list_fd >= 0 ? ::fdopendir(list_fd) : nullptr;
  if (!d) {
    *error = dir_ + ": " + errno_text(errno);
    if (list_fd >= 0) ::close(list_fd);
    ::close(dfd);
    return "";
  }
  while (const dirent* e = ::readdir(d)) {
    if (std::strncmp(e->d_name, prefix.c_str(), prefix.size()) != 0) continue;
    char* end = nullptr;
    const unsigned long long time = std::strtoull(e->d_name + prefix.size(), &end, 10);
    before.push_back({time, *end == '-' ? std::strtoull(end + 1, nullptr, 10) : 1, e->d_name});
  }
  ::closedir(d);
  std::sort(before.begin(), before.end());
  const auto now = static_cast<unsigned long long>(std::time(nullptr));
  unsigned long long count = 1;
  for (const auto& b : before)
    if (b.time == now) count = std::max(count, b.count + 1);
  const std::string name = prefix + std::to_string(now) + (count > 1 ? "-" + std::to_string(count) : "");
  if (::renameat2(dfd, kFileName, dfd, name.c_str(), RENAME_NOREPLACE) != 0) {
    if (errno != ENOENT) *error = path_ + " -> " + name + ": " + errno_text(errno);
    ::close(dfd);
    return "";
  }
  // The oldest go beyond the few kept; the one just moved stays, even if
  // the clock went back.
  for (size_t i = 0; i + kKeptUnreadable < before.size() + 1; ++i)
    if (::unlinkat(dfd, before[i].name.c_str(), 0) != 0) *error = dir_ + "/" + before[i].name + ": " + errno_text(errno);
  ::fsync(dfd);
  ::close(dfd);
  return dir_ + "/" + name;
}

}  // namespace tcpscope
