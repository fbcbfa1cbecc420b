// What the pipeline adds to a record that the kernel cannot know: the
// peer's class, AS number and organisation (the enricher), the service that
// owns the socket (enrich/service_names.h) and the names of the rule that
// chose its congestion control (the rule names). A flow's record and its
// transfers' records carry the same part.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>

namespace tcpscope {

// Who owns a socket, named from its cgroup: the systemd unit, the container
// or the Kubernetes pod, and the parts the name was made from. One object
// per cgroup, shared by every record of that cgroup's sockets.
struct ServiceIdentity {
  std::string name;          // "nginx.service", a container's name or id, "namespace/pod" or a pod's uid
  std::string unit;          // the systemd unit whose cgroup holds it ("" outside systemd's tree)
  std::string container_id;  // 64 hex digits, "" when not a container
  std::string pod_uid;       // the Kubernetes pod's uid, "" when not a pod
  uint64_t cgroup_id = 0;    // the cgroup it was named from
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
