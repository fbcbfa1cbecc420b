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

// Makes sure the kernel has each algorithm loaded: a BPF program cannot make
// it load a module, but a setsockopt() from a privileged process can.
bool ensure_congestion_controls(const std::vector<std::string>& names, std::string* error);

}  // namespace tcpscope
