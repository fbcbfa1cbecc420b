#include "os/cgroup_path.h"

#include <fstream>
#include <sstream>

namespace tcpscope {

namespace {

// mountinfo escapes space, tab, newline and backslash as \ooo.
std::string unescape(const std::string& s) {
  std::string out;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '\\' && i + 3 < s.size()) {
      int v = 0;
      bool ok = true;
      for (size_t j = 1; j <= 3 && ok; ++j) {
        char c = s[i + j];
        ok = c >= '0' && c <= '7';
        v = v * 8 + (c - '0');
      }
      if (ok) {
        out.push_back(static_cast<char>(v));
        i += 3;
        continue;
      }
    }
    out.push_back(s[i]);
  }
  return out;
}

}  // namespace

std::string cgroup2_mount_point(const std::string& mountinfo_path) {
  std::ifstream in(mountinfo_path);
  std::string line, best;
  while (std::getline(in, line)) {
    // id parent major:minor root mount-point options [optional...] - fstype source super-options
    size_t sep = line.find(" - ");
    if (sep == std::string::npos) continue;
    std::istringstream rest(line.substr(sep + 3));
    std::string fstype;
    rest >> fstype;
    if (fstype != "cgroup2") continue;
    std::istringstream head(line.substr(0, sep));
    std::string id, parent, dev, root, mount;
    head >> id >> parent >> dev >> root >> mount;
    if (root != "/") continue;  // a bind mount of a sub-tree, not the hierarchy's root
    mount = unescape(mount);
    // Several mounts of the same hierarchy: the shortest path is the canonical one.
    if (best.empty() || mount.size() < best.size()) best = mount;
  }
  return best;
}

}  // namespace tcpscope
