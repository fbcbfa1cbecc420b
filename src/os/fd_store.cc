#include "os/fd_store.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cstdint>
#include <sstream>

namespace tcpscope {

namespace {

constexpr int kListenFdsStart = 3;  // SD_LISTEN_FDS_START

std::string errno_text(int err) { return std::string(strerror(err)) + " (errno " + std::to_string(err) + ")"; }

}  // namespace

FdStore FdStore::from_environment() {
  FdStore s;
  if (const char* n = getenv("NOTIFY_SOCKET"); n && *n) s.notify_socket_ = n;
  const char* pid = getenv("LISTEN_PID");
  const char* count = getenv("LISTEN_FDS");
  if (pid && count && strtol(pid, nullptr, 10) == getpid()) {
    const long n = strtol(count, nullptr, 10);
    std::vector<std::string> names;
    if (const char* fdnames = getenv("LISTEN_FDNAMES")) {
      std::stringstream in(fdnames);
      for (std::string name; std::getline(in, name, ':');) names.push_back(name);
    }
    for (long i = 0; i < n && i < 4096; ++i) {
      const int fd = kListenFdsStart + static_cast<int>(i);
      if (fcntl(fd, F_SETFD, FD_CLOEXEC) != 0) continue;  // not open: nothing to take
      s.inherited_.push_back({i < static_cast<long>(names.size()) ? names[i] : "", fd});
    }
  }
  unsetenv("LISTEN_PID");
  unsetenv("LISTEN_FDS");
  unsetenv("LISTEN_FDNAMES");
  return s;
}

ssize_t send_with_fds(int socket, const sockaddr* to, socklen_t to_len, const std::string& message,
                      const std::vector<int>& fds) {
  iovec iov{const_cast<char*>(message.data()), message.size()};
  msghdr msg{};
  msg.msg_name = const_cast<sockaddr*>(to);
  msg.msg_namelen = to ? to_len : 0;
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  std::vector<char> control;
  if (!fds.empty()) {
    control.assign(CMSG_SPACE(sizeof(int) * fds.size()), 0);
    msg.msg_control = control.data();
    msg.msg_controllen = control.size();
    cmsghdr* c = CMSG_FIRSTHDR(&msg);
    c->cmsg_level = SOL_SOCKET;
    c->cmsg_type = SCM_RIGHTS;
    c->cmsg_len = CMSG_LEN(sizeof(int) * fds.size());
    memcpy(CMSG_DATA(c), fds.data(), sizeof(int) * fds.size());
  }
  return sendmsg(socket, &msg, MSG_NOSIGNAL);
}

bool FdStore::notify(const std::string& message, const std::vector<int>& fds, std::string* error) const {
  if (notify_socket_.empty()) {
    *error = "no service manager to store descriptors with ($NOTIFY_SOCKET is not set)";
    return false;
  }
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  if (notify_socket_.size() >= sizeof(addr.sun_path) || (notify_socket_[0] != '/' && notify_socket_[0] != '@')) {
    *error = "$NOTIFY_SOCKET is not a socket path: " + notify_socket_;
    return false;
  }
  memcpy(addr.sun_path, notify_socket_.data(), notify_socket_.size());
  if (addr.sun_path[0] == '@') addr.sun_path[0] = '\0';  // the abstract namespace
  const socklen_t addr_len = static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + notify_socket_.size());

  const int s = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  if (s < 0) {
    *error = "notification socket: " + errno_text(errno);
    return false;
  }
  const bool ok = send_with_fds(s, reinterpret_cast<const sockaddr*>(&addr), addr_len, message, fds) >= 0;
  const int err = errno;
  close(s);
  if (!ok) *error = "notifying the service manager at " + notify_socket_ + ": " + errno_text(err);
  return ok;
}

bool FdStore::store(const std::string& name, const std::vector<int>& fds, std::string* error) const {
  return notify("FDSTORE=1\nFDNAME=" + name, fds, error);
}

bool FdStore::remove(const std::string& name, std::string* error) const {
  return notify("FDSTOREREMOVE=1\nFDNAME=" + name, {}, error);
}

}  // namespace tcpscope
