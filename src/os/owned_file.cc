#include "os/owned_file.h"

#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

namespace tcpscope {

namespace {

// Why `st` is not a file this process may write to, or "" if it is.
std::string refusal(const struct stat& st) {
  if (!S_ISREG(st.st_mode)) return "is not a regular file";
  if (st.st_uid != geteuid())
    return "is owned by uid " + std::to_string(st.st_uid) + ", not by uid " + std::to_string(geteuid());
  if (st.st_mode & (S_IWGRP | S_IWOTH)) return "is writable by group or others";
  if (st.st_nlink != 1) return "has " + std::to_string(st.st_nlink) + " hard links";
  return "";
}

}  // namespace

int open_owned_file(const std::string& path, OwnedFileMode mode, std::string* error) {
  const int append = mode == OwnedFileMode::kAppend ? O_APPEND : 0;
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK | append, 0640);
  if (fd < 0) {
    const int e = errno;
    // O_NOFOLLOW fails a symlink with ELOOP; O_NONBLOCK fails a FIFO or a
    // socket with no reader with ENXIO instead of waiting for one.
    if (e == ELOOP)
      *error = path + ": is a symbolic link (refused: " + strerror(e) + ")";
    else if (e == ENXIO)
      *error = path + ": is not a regular file (refused: " + strerror(e) + ")";
    else
      *error = path + ": " + strerror(e);
    return -1;
  }
  struct stat st;
  std::string why;
  if (fstat(fd, &st) != 0)
    why = std::string("fstat: ") + strerror(errno);
  else if (std::string r = refusal(st); !r.empty())
    why = r + " (refused)";
  else if (fcntl(fd, F_SETFL, append) != 0)  // writes may block again: it is a file
    why = std::string("fcntl: ") + strerror(errno);
  else if (mode == OwnedFileMode::kTruncate && ftruncate(fd, 0) != 0)
    why = std::string("ftruncate: ") + strerror(errno);
  if (why.empty()) return fd;
  ::close(fd);
  *error = path + ": " + why;
  return -1;
}

}  // namespace tcpscope
