#include "kernel/cgroups_made.h"

#include <bpf/bpf.h>

#include <cstring>

#include "tcpscope/flow_event.h"

namespace tcpscope {

std::optional<MadeCgroup> take_made_cgroup(int cgroups_made_fd, uint64_t id) {
  tcpscope_cgroup_made made{};
  if (bpf_map_lookup_and_delete_elem(cgroups_made_fd, &id, &made) != 0) return std::nullopt;
  const size_t len = strnlen(made.name, sizeof(made.name));
  if (len == 0 || len == sizeof(made.name)) return std::nullopt;  // the program writes neither
  return MadeCgroup{made.parent_id, std::string(made.name, len)};
}

void forget_made_cgroup(int cgroups_made_fd, uint64_t id) { bpf_map_delete_elem(cgroups_made_fd, &id); }

}  // namespace tcpscope
