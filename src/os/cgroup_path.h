// Where the cgroup v2 (unified) hierarchy is mounted: /sys/fs/cgroup on
// modern hosts, /sys/fs/cgroup/unified on hybrid ones (Debian with systemd
// in hybrid mode), found from /proc/self/mountinfo rather than assumed.
#pragma once

#include <string>

namespace tcpscope {

// "" when no cgroup2 filesystem is mounted.
std::string cgroup2_mount_point(const std::string& mountinfo_path = "/proc/self/mountinfo");

}  // namespace tcpscope
