// The network namespaces the config names: "self" (the daemon's own), a name
// of /run/netns (as `ip netns` makes them), or the path of a namespace's
// nsfs file (/proc/PID/ns/net, a container runtime's).
#pragma once

#include <cstdint>
#include <string>

namespace tcpscope {

std::string netns_path(const std::string& name);

// The namespace's inode number, as the kernel tags sockets with it
// (sk->__sk_common.skc_net.net->ns.inum); false and *error naming the path
// and the errno when it cannot be read.
bool netns_inode(const std::string& name, uint32_t* inode, std::string* error);

}  // namespace tcpscope
