// Reads the cgroups_made map (bpf/cgroup.bpf.c): what the kernel recorded
// of a cgroup's making, for the service names of cgroups removed before
// the daemon read their directory.
#pragma once

#include <cstdint>
#include <optional>

#include "enrich/service_names.h"

namespace tcpscope {

// The record of cgroup `id`, taken out of the map; nullopt when the map has
// none (made before the programs ran, pushed out by newer ones, or taken).
std::optional<MadeCgroup> take_made_cgroup(int cgroups_made_fd, uint64_t id);
// Drops the record of cgroup `id`, if the map has one.
void forget_made_cgroup(int cgroups_made_fd, uint64_t id);

}  // namespace tcpscope
