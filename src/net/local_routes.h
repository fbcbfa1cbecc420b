// A network namespace's local routing table (`ip route show table local`,
// the routes of type local): every address its host owns, its loopback
// range, and AnyIP ranges routed locally. A peer inside one of these is this
// host: a client the controller must not count as the service's
// (control/evidence_gate.h).
//
// Read through a netlink socket made inside the namespace: a socket stays
// in the namespace it was made in, so one made at start (when the daemon
// may still enter other namespaces) keeps serving reads after the daemon
// has dropped that privilege.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "net/ip_addr.h"

namespace tcpscope {

class LocalRoutes {
 public:
  // A reader of the namespace at `netns_path` (its nsfs file, e.g.
  // /run/netns/NAME); "" for this process's own. Entering another namespace
  // needs CAP_SYS_ADMIN. nullptr and *error (naming the path and the errno)
  // on failure.
  static std::unique_ptr<LocalRoutes> open(const std::string& netns_path, std::string* error);
  ~LocalRoutes();
  LocalRoutes(const LocalRoutes&) = delete;
  LocalRoutes& operator=(const LocalRoutes&) = delete;

  // The table's local routes now, IPv4 and IPv6. False and *error on failure.
  bool read(std::vector<Prefix>* out, std::string* error);
  // Whether a route of the namespace changed since the last call (the
  // kernel's notifications, drained without blocking): an address added
  // counts from the next read, not the next periodic one.
  bool changed();

 private:
  LocalRoutes(int fd, int events) : fd_(fd), events_(events) {}
  int fd_;      // dumps
  int events_;  // route notifications
  uint32_t seq_ = 0;
};

}  // namespace tcpscope
