#include "net/local_routes.h"

#include <errno.h>
#include <fcntl.h>
#include <linux/netlink.h>
#include <linux/rtnetlink.h>
#include <sched.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstring>
#include <thread>

namespace tcpscope {

namespace {

std::string errno_text(int err) { return std::string(strerror(err)) + " (errno " + std::to_string(err) + ")"; }

int netlink_socket() {
  const int fd = socket(AF_NETLINK, SOCK_RAW | SOCK_CLOEXEC, NETLINK_ROUTE);
  if (fd < 0) return -1;
  const timeval timeout{2, 0};  // a dump answers at once; never hang the caller
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &timeout, sizeof(timeout));
  return fd;
}

// A socket that hears of every route added or removed in its namespace.
int route_events_socket() {
  const int fd = socket(AF_NETLINK, SOCK_RAW | SOCK_CLOEXEC | SOCK_NONBLOCK, NETLINK_ROUTE);
  if (fd < 0) return -1;
  sockaddr_nl local{};
  local.nl_family = AF_NETLINK;
  local.nl_groups = RTMGRP_IPV4_ROUTE | RTMGRP_IPV6_ROUTE;
  if (bind(fd, reinterpret_cast<sockaddr*>(&local), sizeof(local)) != 0) {
    const int err = errno;
    ::close(fd);
    errno = err;
    return -1;
  }
  return fd;
}

// Both sockets, made in this thread's namespace; false and errno on failure.
bool make_sockets(int* fd, int* events) {
  *fd = netlink_socket();
  if (*fd < 0) return false;
  *events = route_events_socket();
  if (*events < 0) {
    const int err = errno;
    ::close(*fd);
    errno = err;
    return false;
  }
  return true;
}

}  // namespace

std::unique_ptr<LocalRoutes> LocalRoutes::open(const std::string& netns_path, std::string* error) {
  int fd = -1, events = -1, err = 0;
  if (netns_path.empty()) {
    if (!make_sockets(&fd, &events)) {
      *error = "netlink socket: " + errno_text(errno);
      return nullptr;
    }
    return std::unique_ptr<LocalRoutes>(new LocalRoutes(fd, events));
  }
  const int ns = ::open(netns_path.c_str(), O_RDONLY | O_CLOEXEC);
  if (ns < 0) {
    *error = netns_path + ": " + errno_text(errno);
    return nullptr;
  }
  // setns() moves the calling thread only: a thread of its own enters the
  // namespace, makes the sockets there and ends.
  std::thread([&] {
    if (setns(ns, CLONE_NEWNET) != 0 || !make_sockets(&fd, &events)) err = errno;
  }).join();
  ::close(ns);
  if (fd < 0) {
    *error = netns_path + ": " + (err == EPERM ? "entering it needs CAP_SYS_ADMIN: " : "") + errno_text(err);
    return nullptr;
  }
  return std::unique_ptr<LocalRoutes>(new LocalRoutes(fd, events));
}

LocalRoutes::~LocalRoutes() {
  ::close(fd_);
  ::close(events_);
}

bool LocalRoutes::changed() {
  bool any = false;
  char buf[8192];
  // Bounded: a storm of route changes is one change, read again later.
  for (int i = 0; i < 64; ++i) {
    const ssize_t n = recv(events_, buf, sizeof(buf), 0);
    if (n > 0) {
      any = true;
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && errno == ENOBUFS) any = true;  // notifications were lost: something changed
    break;
  }
  return any;
}

bool LocalRoutes::read(std::vector<Prefix>* out, std::string* error) {
  struct {
    nlmsghdr nh;
    rtmsg rt;
  } req{};
  req.nh.nlmsg_len = sizeof(req);
  req.nh.nlmsg_type = RTM_GETROUTE;
  req.nh.nlmsg_flags = NLM_F_REQUEST | NLM_F_DUMP;
  req.nh.nlmsg_seq = ++seq_;
  req.rt.rtm_family = AF_UNSPEC;
  req.rt.rtm_table = RT_TABLE_LOCAL;
  sockaddr_nl kernel{};
  kernel.nl_family = AF_NETLINK;
  if (sendto(fd_, &req, sizeof(req), 0, reinterpret_cast<sockaddr*>(&kernel), sizeof(kernel)) < 0) {
    *error = "netlink route dump: " + errno_text(errno);
    return false;
  }
  std::vector<Prefix> routes;
  alignas(nlmsghdr) char buf[32768];
  for (;;) {
    const ssize_t n = recv(fd_, buf, sizeof(buf), 0);
    if (n < 0) {
      if (errno == EINTR) continue;
      *error = "netlink route dump: " + errno_text(errno);
      return false;
    }
    int len = static_cast<int>(n);
    for (auto* nh = reinterpret_cast<nlmsghdr*>(buf); NLMSG_OK(nh, len); nh = NLMSG_NEXT(nh, len)) {
      if (nh->nlmsg_seq != seq_) continue;  // an answer to an earlier, abandoned dump
      if (nh->nlmsg_type == NLMSG_DONE) {
        *out = std::move(routes);
        return true;
      }
      if (nh->nlmsg_type == NLMSG_ERROR) {
        const auto* e = static_cast<const nlmsgerr*>(NLMSG_DATA(nh));
        *error = "netlink route dump: " + errno_text(-e->error);
        return false;
      }
      if (nh->nlmsg_type != RTM_NEWROUTE) continue;
      const auto* rt = static_cast<const rtmsg*>(NLMSG_DATA(nh));
      if (rt->rtm_type != RTN_LOCAL || (rt->rtm_family != AF_INET && rt->rtm_family != AF_INET6)) continue;
      // The dump may cover every table (the kernel filters only under
      // strict checking): keep the local table's.
      uint32_t table = rt->rtm_table;
      const uint8_t* dst = nullptr;
      int alen = static_cast<int>(RTM_PAYLOAD(nh));
      for (auto* a = RTM_RTA(rt); RTA_OK(a, alen); a = RTA_NEXT(a, alen)) {
        if (a->rta_type == RTA_TABLE) table = *static_cast<const uint32_t*>(RTA_DATA(a));
        if (a->rta_type == RTA_DST) dst = static_cast<const uint8_t*>(RTA_DATA(a));
      }
      if (table != RT_TABLE_LOCAL || !dst) continue;
      Prefix p;
      p.addr = rt->rtm_family == AF_INET ? IpAddr::v4(dst) : IpAddr::v6(dst);
      p.len = rt->rtm_dst_len;
      routes.push_back(p.unmapped());
    }
  }
}

}  // namespace tcpscope
