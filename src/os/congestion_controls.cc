#include "os/congestion_controls.h"

#include <dirent.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/utsname.h>
#include <unistd.h>

#include <algorithm>
#include <fstream>

namespace tcpscope {

namespace {
std::vector<std::string> words_of(const char* path) {
  std::vector<std::string> out;
  std::ifstream in(path);
  std::string name;
  while (in >> name) out.push_back(name);
  return out;
}
}  // namespace

std::vector<std::string> loaded_congestion_controls() {
  return words_of("/proc/sys/net/ipv4/tcp_available_congestion_control");
}

std::vector<std::string> allowed_congestion_controls() {
  return words_of("/proc/sys/net/ipv4/tcp_allowed_congestion_control");
}

std::vector<std::string> kernel_congestion_controls() {
  std::vector<std::string> out;
  auto add = [&](const std::string& name) {
    if (!name.empty() && std::find(out.begin(), out.end(), name) == out.end()) {
      out.push_back(name);
    }
  };
  for (const auto& name : loaded_congestion_controls()) add(name);
  // Not yet loaded but loadable: the kernel runs request_module("tcp_<name>")
  // when a socket asks for an unknown CC (not from BPF: see config.h).
  struct utsname u;
  if (::uname(&u) != 0) return out;
  const std::string dir = std::string("/lib/modules/") + u.release + "/kernel/net/ipv4";
  std::vector<std::string> modules;
  if (DIR* d = ::opendir(dir.c_str())) {
    while (const dirent* ent = ::readdir(d)) {
      const std::string file = ent->d_name;
      const size_t ko = file.find(".ko");
      if (file.rfind("tcp_", 0) != 0 || ko == std::string::npos) continue;
      const std::string suffix = file.substr(ko);
      if (suffix != ".ko" && suffix != ".ko.xz" && suffix != ".ko.zst" && suffix != ".ko.gz") {
        continue;
      }
      const std::string name = file.substr(4, ko - 4);
      if (name == "diag") continue;  // tcp_diag.ko is the sock_diag backend, not a CC
      modules.push_back(name);
    }
    ::closedir(d);
  }
  std::sort(modules.begin(), modules.end());
  for (const auto& m : modules) add(m);
  return out;
}

bool ensure_congestion_controls(const std::vector<std::string>& names, std::string* error) {
  for (const auto& name : names) {
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) {
      *error = std::string("socket: ") + strerror(errno);
      return false;
    }
    int rc = setsockopt(fd, IPPROTO_TCP, TCP_CONGESTION, name.c_str(), static_cast<socklen_t>(name.size()));
    int err = errno;
    close(fd);
    if (rc != 0) {
      *error = "congestion control '" + name + "' is not available in this kernel: " + strerror(err);
      return false;
    }
  }
  return true;
}

}  // namespace tcpscope
