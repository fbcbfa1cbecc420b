// The owner of a cgroup, named from the cgroup's path (docs/services.md
// "Services"): the config's `services.names` rules first, then the layouts
// systemd, Docker, containerd, CRI-O and the kubelet make, reading the
// container runtimes' state files for containers' and pods' names.
#pragma once

#include <cstdint>
#include <regex>
#include <string>
#include <vector>

#include "config/config.h"
#include "record/enrichment.h"

namespace tcpscope {

// Where the container runtimes keep their containers' configs (tests point
// them at temp dirs).
struct ContainerStateDirs {
  std::string docker_root = "/var/lib/docker";                // containers/<id>/config.v2.json: "Name"
  std::string containerd_state = "/run/containerd";           // io.containerd.runtime.v2.task/<ns>/<id>/config.json
  std::string crio_state = "/run/containers/storage";         // overlay-containers/<id>/userdata/config.json
};

// The config's rules, compiled: the first whose expression matches the
// whole path names it.
class ServiceNameRules {
 public:
  // A rule whose expression does not compile is left out (the config's
  // check refuses such a file before it gets here).
  explicit ServiceNameRules(const std::vector<ServiceNameRule>& rules);
  // False when no rule matches; else *name is the rule's template with
  // $1 ... $9 replaced by the expression's groups.
  bool name(const std::string& path, std::string* name) const;

 private:
  std::vector<std::pair<std::regex, std::string>> rules_;
};

// Names are at most this long, cut on a character boundary.
constexpr size_t kMaxServiceNameBytes = 255;

// `path` is the cgroup's path below the cgroup2 mount ("/" for the root,
// "/system.slice/nginx.service").
ServiceIdentity identify_cgroup(const std::string& path, uint64_t cgroup_id, const ServiceNameRules& rules,
                                const ContainerStateDirs& dirs);

}  // namespace tcpscope
