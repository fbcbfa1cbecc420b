// The congestion-control algorithms of the running kernel, as /proc and
// /lib/modules list them.
#pragma once

#include <string>
#include <vector>

namespace tcpscope {

// Loaded now (/proc/sys/net/ipv4/tcp_available_congestion_control).
std::vector<std::string> loaded_congestion_controls();
// The ones a caller without CAP_NET_ADMIN may choose (tcp_allowed_congestion_control).
std::vector<std::string> allowed_congestion_controls();
// Loaded, plus the modules the kernel can load on demand (tcp_<name>.ko*).
std::vector<std::string> kernel_congestion_controls();

}  // namespace tcpscope
