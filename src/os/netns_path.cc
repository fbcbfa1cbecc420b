#include "os/netns_path.h"

#include <sys/stat.h>

#include <cerrno>
#include <cstring>

namespace tcpscope {

std::string netns_path(const std::string& name) {
  if (name == "self") return "/proc/self/ns/net";
  return name[0] == '/' ? name : "/run/netns/" + name;
}

bool netns_inode(const std::string& name, uint32_t* inode, std::string* error) {
  const std::string path = netns_path(name);
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) {
    *error = path + ": " + std::strerror(errno);
    return false;
  }
  *inode = static_cast<uint32_t>(st.st_ino);
  return true;
}

}  // namespace tcpscope
