// What the pipeline adds to a record that the kernel cannot know: the
// peer's class, AS number and organisation (the enricher), the service that
// owns the socket (enrich/service_names.h) and the names of the rule that
// chose its congestion control (the rule names). A flow's record and its
// transfers' records carry the same part.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <utility>

namespace tcpscope {

// The key a service is counted and labelled by (the rankings, the series,
// the /api/v1 sketches): 0 for the unknown service "", the name's 64-bit
// hash otherwise (never 0, never kOtherServiceKey), so a name has one key
// for the daemon's life and two names share one only on a collision (~1e-10
// for 100k names).
constexpr uint64_t kOtherServiceKey = ~uint64_t{0};  // the services out of the top-N, folded together
inline uint64_t service_key(const std::string& name) {
  if (name.empty()) return 0;
  const uint64_t h = std::hash<std::string>{}(name);
  return h != 0 && h != kOtherServiceKey ? h : 1;
}

// Who owns a socket, named from its cgroup: the systemd unit, the container
// or the Kubernetes pod, and the parts the name was made from. One object
// per cgroup, shared by every record of that cgroup's sockets. Its key is
// hashed once, with the name, not per record.
struct ServiceIdentity {
  ServiceIdentity() = default;
  explicit ServiceIdentity(std::string name_, std::string unit_ = {}, std::string container_id_ = {},
                           std::string pod_uid_ = {}, uint64_t cgroup_id_ = 0)
      : key(service_key(name_)),
        name(std::move(name_)),
        unit(std::move(unit_)),
        container_id(std::move(container_id_)),
        pod_uid(std::move(pod_uid_)),
        cgroup_id(cgroup_id_) {}

  // First: with the reference counts make_shared puts before it, what a
  // record reads of its owner shares a cache line.
  const uint64_t key = 0;          // service_key(name)
  const std::string name;          // "nginx.service", a container's name or id, "namespace/pod" or a pod's uid
  const std::string unit;          // the systemd unit whose cgroup holds it ("" outside systemd's tree)
  const std::string container_id;  // 64 hex digits, "" when not a container
  const std::string pod_uid;       // the Kubernetes pod's uid, "" when not a pod
  const uint64_t cgroup_id = 0;    // the cgroup it was named from
};

struct Enrichment {
  std::string peer_class;
  uint32_t asn = 0;
  std::string as_org;
  std::optional<std::string> cc_rule;
  std::optional<std::string> experiment;
  std::optional<std::string> arm;
  // Null until the pipeline names the owner; an unknown owner is an
  // identity with empty parts.
  std::shared_ptr<const ServiceIdentity> service;

  const ServiceIdentity& owner() const {
    static const ServiceIdentity kUnknown;
    return service ? *service : kUnknown;
  }
};

}  // namespace tcpscope
