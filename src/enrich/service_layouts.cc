#include "enrich/service_layouts.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <nlohmann/json.hpp>
#include <optional>
#include <string_view>

#include "text/utf8_text.h"

namespace tcpscope {

namespace {

// A runtime's config of one container is a few kB; a larger file is not one.
constexpr size_t kMaxStateFileBytes = 4 << 20;
constexpr size_t kShortIdLength = 12;  // as `docker ps` shows an id
constexpr std::string_view kContainerdTasks = "/io.containerd.runtime.v2.task/";
constexpr std::string_view kContainerdKubernetesNamespace = "k8s.io";

enum class Runtime { kNone, kDocker, kContainerd, kCrio, kUnsaid };

// What the path says, before any file is read.
struct Layout {
  std::string unit;  // the innermost systemd unit, up to a container's own scope
  Runtime runtime = Runtime::kNone;
  std::string container_id;
  std::string containerd_namespace;
  std::string pod_uid;
};

bool is_hex(std::string_view s, size_t length) {
  if (s.size() != length) return false;
  for (char c : s)
    if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'))) return false;
  return true;
}

// A pod's uid as the kubelet writes it: 36 characters of hex and `dash`.
bool is_pod_uid(std::string_view s, char dash) {
  if (s.size() != 36) return false;
  for (size_t i = 0; i < s.size(); ++i) {
    const bool dash_here = i == 8 || i == 13 || i == 18 || i == 23;
    if (dash_here ? s[i] != dash : !is_hex(s.substr(i, 1), 1)) return false;
  }
  return true;
}

// The part of `s` between `prefix` and `suffix`, or nullopt.
std::optional<std::string_view> between(std::string_view s, std::string_view prefix, std::string_view suffix) {
  if (s.size() < prefix.size() + suffix.size() || s.substr(0, prefix.size()) != prefix ||
      s.substr(s.size() - suffix.size()) != suffix)
    return std::nullopt;
  return s.substr(prefix.size(), s.size() - prefix.size() - suffix.size());
}

bool ends_with(std::string_view s, std::string_view suffix) {
  return s.size() >= suffix.size() && s.substr(s.size() - suffix.size()) == suffix;
}

// Printable UTF-8, at most kMaxServiceNameBytes.
std::string bounded(std::string_view s) {
  const std::string text = printable_text(s);
  size_t end = 0;
  uint32_t cp;
  while (end < text.size()) {
    const size_t n = utf8_sequence_at(text, end, &cp);
    if (end + n > kMaxServiceNameBytes) break;
    end += n;
  }
  return text.substr(0, end);
}

std::vector<std::string_view> components(std::string_view path) {
  std::vector<std::string_view> out;
  for (size_t at = 0; at < path.size();) {
    const size_t slash = path.find('/', at);
    const size_t end = slash == std::string_view::npos ? path.size() : slash;
    if (end > at) out.push_back(path.substr(at, end - at));
    at = end + 1;
  }
  return out;
}

bool is_directory(const std::string& path) {
  struct stat st;
  return stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
}

Layout parse_layout(std::string_view path, const ContainerStateDirs& dirs) {
  Layout out;
  const std::vector<std::string_view> parts = components(path);
  bool in_kubepods = false;
  for (size_t i = 0; i < parts.size(); ++i) {
    const std::string_view c = parts[i];
    const std::string_view parent = i ? parts[i - 1] : std::string_view();
    std::optional<std::string_view> id;
    if (c == "kubepods" || (c.substr(0, 8) == "kubepods" && ends_with(c, ".slice"))) in_kubepods = true;
    if (in_kubepods && ends_with(c, ".slice")) {
      // kubepods-pod<uid>.slice (guaranteed) or kubepods-<qos>-pod<uid>.slice.
      const size_t pod = c.rfind("pod");
      if (pod != std::string_view::npos && pod > 0 && c[pod - 1] == '-' && pod + 3 + 6 <= c.size()) {
        const std::string_view uid = c.substr(pod + 3, c.size() - pod - 3 - 6);
        if (is_pod_uid(uid, '_')) {
          out.pod_uid = std::string(uid);
          for (char& ch : out.pod_uid) ch = ch == '_' ? '-' : ch;
        }
      }
    } else if (in_kubepods && c.substr(0, 3) == "pod" && is_pod_uid(c.substr(3), '-')) {
      out.pod_uid = std::string(c.substr(3));
    } else if ((id = between(c, "docker-", ".scope")) && is_hex(*id, 64)) {
      out.runtime = Runtime::kDocker, out.container_id = std::string(*id);
      out.unit = std::string(c);
    } else if ((id = between(c, "cri-containerd-", ".scope")) && is_hex(*id, 64)) {
      out.runtime = Runtime::kContainerd, out.container_id = std::string(*id);
      out.unit = std::string(c);
      out.containerd_namespace = std::string(kContainerdKubernetesNamespace);
    } else if ((id = between(c, "crio-", ".scope")) && is_hex(*id, 64)) {
      out.runtime = Runtime::kCrio, out.container_id = std::string(*id);
      out.unit = std::string(c);
    } else if (parent == "docker" && is_hex(c, 64)) {
      out.runtime = Runtime::kDocker, out.container_id = std::string(c);
    } else if (!out.pod_uid.empty() && is_hex(c, 64)) {
      out.runtime = Runtime::kUnsaid, out.container_id = std::string(c);  // cgroupfs driver: the files say whose
    } else if (out.runtime == Runtime::kNone && (ends_with(c, ".service") || ends_with(c, ".scope"))) {
      out.unit = std::string(c);
    }
  }
  // containerd's cgroupfs layout, /<namespace>/<id>: its task directory says it is one.
  if (out.runtime == Runtime::kNone && out.pod_uid.empty() && parts.size() >= 2 && !ends_with(parts[0], ".slice") &&
      is_directory(dirs.containerd_state + std::string(kContainerdTasks) + std::string(parts[0]) + "/" +
                   std::string(parts[1]))) {
    out.runtime = Runtime::kContainerd;
    out.containerd_namespace = std::string(parts[0]);
    out.container_id = std::string(parts[1]);
    out.unit.clear();
  }
  return out;
}

std::optional<nlohmann::json> read_json(const std::string& path) {
  const int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK);
  if (fd < 0) return std::nullopt;
  std::string text;
  char buf[65536];
  ssize_t n = 0;
  while (text.size() <= kMaxStateFileBytes && (n = read(fd, buf, sizeof buf)) > 0) text.append(buf, n);
  close(fd);
  if (n < 0 || text.size() > kMaxStateFileBytes) return std::nullopt;
  nlohmann::json j = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return std::nullopt;
  return j;
}

std::string string_at(const nlohmann::json& j, const char* key) {
  if (!j.is_object()) return "";
  const auto it = j.find(key);
  return it != j.end() && it->is_string() ? it->get<std::string>() : "";
}

// The OCI config's annotations of a container, or null.
nlohmann::json annotations(const Layout& l, const ContainerStateDirs& dirs) {
  std::vector<std::string> files;
  if (l.runtime == Runtime::kContainerd || l.runtime == Runtime::kUnsaid) {
    const std::string ns = l.containerd_namespace.empty() ? std::string(kContainerdKubernetesNamespace)
                                                          : l.containerd_namespace;
    files.push_back(dirs.containerd_state + std::string(kContainerdTasks) + ns + "/" + l.container_id +
                    "/config.json");
  }
  if (l.runtime == Runtime::kCrio || l.runtime == Runtime::kUnsaid)
    files.push_back(dirs.crio_state + "/overlay-containers/" + l.container_id + "/userdata/config.json");
  for (const auto& file : files) {
    if (auto j = read_json(file); j && j->is_object() && j->contains("annotations")) return (*j)["annotations"];
  }
  return nullptr;
}

std::string short_id(const std::string& id) { return is_hex(id, 64) ? id.substr(0, kShortIdLength) : id; }

std::string container_name(const Layout& l, const ContainerStateDirs& dirs) {
  if (l.runtime == Runtime::kDocker) {
    if (auto j = read_json(dirs.docker_root + "/containers/" + l.container_id + "/config.v2.json")) {
      std::string name = string_at(*j, "Name");
      if (!name.empty() && name[0] == '/') name.erase(0, 1);
      if (!name.empty()) return name;
    }
    return short_id(l.container_id);
  }
  const std::string nerdctl = string_at(annotations(l, dirs), "nerdctl/name");
  return nerdctl.empty() ? short_id(l.container_id) : nerdctl;
}

std::string pod_name(const Layout& l, const ContainerStateDirs& dirs) {
  if (!l.container_id.empty()) {
    const nlohmann::json a = annotations(l, dirs);
    for (const auto& [ns_key, name_key] :
         {std::pair{"io.kubernetes.cri.sandbox-namespace", "io.kubernetes.cri.sandbox-name"},
          std::pair{"io.kubernetes.pod.namespace", "io.kubernetes.pod.name"}}) {
      const std::string ns = string_at(a, ns_key), name = string_at(a, name_key);
      if (!ns.empty() && !name.empty()) return ns + "/" + name;
    }
  }
  return l.pod_uid;
}

}  // namespace

ServiceNameRules::ServiceNameRules(const std::vector<ServiceNameRule>& rules) {
  for (const auto& rule : rules) {
    try {
      rules_.emplace_back(std::regex(rule.path, std::regex::ECMAScript), rule.name);
    } catch (const std::regex_error&) {
    }
  }
}

bool ServiceNameRules::name(const std::string& path, std::string* name) const {
  std::smatch m;
  for (const auto& [expression, pattern] : rules_) {
    if (!std::regex_match(path, m, expression)) continue;
    name->clear();
    for (size_t i = 0; i < pattern.size(); ++i) {
      const char next = i + 1 < pattern.size() ? pattern[i + 1] : '\0';
      if (pattern[i] == '$' && next >= '1' && next <= '9') {
        const size_t group = next - '0';
        if (group < m.size()) *name += m[group].str();
        ++i;
      } else {
        *name += pattern[i];
      }
    }
    return true;
  }
  return false;
}

ServiceIdentity identify_cgroup(const std::string& path, uint64_t cgroup_id, const ServiceNameRules& rules,
                                const ContainerStateDirs& dirs) {
  const Layout l = parse_layout(path, dirs);
  std::string name;
  if (!rules.name(path, &name))
    name = !l.pod_uid.empty() ? pod_name(l, dirs) : l.runtime != Runtime::kNone ? container_name(l, dirs) : l.unit;
  return ServiceIdentity(bounded(name), bounded(l.unit), bounded(l.container_id), l.pod_uid, cgroup_id);
}

}  // namespace tcpscope
