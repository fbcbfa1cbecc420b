// systemd's file descriptor store (FileDescriptorStoreMax=, sd_notify(3)'s
// FDSTORE=1): descriptors a service hands to the service manager, which
// keeps duplicates of them across a restart of the service (systemctl
// restart, or Restart= after a crash) and passes them to the next instance
// (LISTEN_FDS, LISTEN_FDNAMES, as socket activation does), and closes them
// when the service stops for good. The protocol is implemented here, not
// linked from libsystemd.
#pragma once

#include <sys/socket.h>

#include <string>
#include <vector>

namespace tcpscope {

// sendmsg() of `message` with `fds` attached (SCM_RIGHTS), to `to` if given
// (a datagram socket's destination). sendmsg's return, errno as it left it.
ssize_t send_with_fds(int socket, const sockaddr* to, socklen_t to_len, const std::string& message,
                      const std::vector<int>& fds);

struct NamedFd {
  std::string name;
  int fd;
};

class FdStore {
 public:
  // The store of the service this process runs as: usable when the manager
  // gave it a notification socket ($NOTIFY_SOCKET). Takes the descriptors
  // the manager passed to this process (LISTEN_PID must be ours), marks them
  // close-on-exec and unsets the variables, so no child inherits them.
  static FdStore from_environment();

  bool usable() const { return !notify_socket_.empty(); }
  // The descriptors passed at start, by name; the caller owns them.
  const std::vector<NamedFd>& inherited() const { return inherited_; }

  // Hands `fds` to the manager under `name` (it keeps duplicates). False
  // and *error (with the errno) on failure.
  bool store(const std::string& name, const std::vector<int>& fds, std::string* error) const;
  // The manager closes its duplicates of every descriptor named `name`.
  bool remove(const std::string& name, std::string* error) const;

 private:
  bool notify(const std::string& message, const std::vector<int>& fds, std::string* error) const;
  std::string notify_socket_;
  std::vector<NamedFd> inherited_;
};

}  // namespace tcpscope
