// Runs a test's traffic in a child process inside a network namespace of its
// own (only lo, brought up), so the records it makes are told from the host's
// by their netns inode and nothing of it outlives the child; and the
// loopback listener that traffic connects to.
#pragma once

#include <gtest/gtest.h>
#include <arpa/inet.h>
#include <net/if.h>
#include <netinet/in.h>
#include <sched.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdint>
#include <cstring>

namespace tcpscope {

// `body` runs in the child and returns its exit code (0 = success; codes
// below 10, as the setup uses 10..14). Returns the child's namespace inode.
template <typename Body>
uint32_t run_in_private_netns(Body body) {
  int p[2];
  EXPECT_EQ(pipe(p), 0);
  pid_t pid = fork();
  if (pid == 0) {
    close(p[0]);
    if (unshare(CLONE_NEWNET) != 0) _exit(10);
    struct stat st {};
    if (stat("/proc/self/ns/net", &st) != 0) _exit(11);
    uint32_t inum = static_cast<uint32_t>(st.st_ino);
    if (write(p[1], &inum, sizeof(inum)) != sizeof(inum)) _exit(12);
    int ctl = socket(AF_INET, SOCK_DGRAM, 0);
    ifreq ifr{};
    std::strncpy(ifr.ifr_name, "lo", IFNAMSIZ - 1);
    if (ioctl(ctl, SIOCGIFFLAGS, &ifr) != 0) _exit(13);
    ifr.ifr_flags |= IFF_UP;
    if (ioctl(ctl, SIOCSIFFLAGS, &ifr) != 0) _exit(14);
    close(ctl);
    _exit(body());
  }
  close(p[1]);
  uint32_t inum = 0;
  EXPECT_EQ(read(p[0], &inum, sizeof(inum)), static_cast<ssize_t>(sizeof(inum)));
  close(p[0]);
  int status = 0;
  EXPECT_EQ(waitpid(pid, &status, 0), pid);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "child status " << status;
  return inum;
}

// A listening TCP socket on 127.0.0.1, its address in `*addr`; -1 on failure.
inline int listen_on_loopback(sockaddr_in* addr) {
  int ls = socket(AF_INET, SOCK_STREAM, 0);
  *addr = sockaddr_in{};
  addr->sin_family = AF_INET;
  addr->sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof(*addr);
  if (ls < 0 || bind(ls, reinterpret_cast<sockaddr*>(addr), sizeof(*addr)) != 0 || listen(ls, 128) != 0 ||
      getsockname(ls, reinterpret_cast<sockaddr*>(addr), &len) != 0)
    return -1;
  return ls;
}

}  // namespace tcpscope
