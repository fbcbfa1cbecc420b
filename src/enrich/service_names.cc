#include "enrich/service_names.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/inotify.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <unordered_set>

namespace tcpscope {

namespace {

using Clock = std::chrono::steady_clock;

// A walk stops here: no host has a million cgroups, a runaway tree must not
// hold the loop.
constexpr size_t kMaxCgroups = 1 << 20;
// An id not found is looked up again, and watching-less rescans run, at
// most this often.
constexpr auto kRetryAfter = std::chrono::seconds(1);
constexpr size_t kMaxMisses = 4096;
// One call reads at most this much; the fd stays readable for the rest.
constexpr size_t kEventBuffer = 64 << 10;
constexpr int kMaxReadsPerCall = 16;
std::string errno_text(int err) { return std::string(std::strerror(err)) + " (errno " + std::to_string(err) + ")"; }

std::string child_path(const std::string& parent, const char* name) {
  return parent == "/" ? "/" + std::string(name) : parent + "/" + name;
}

std::string last_component(const std::string& path) { return path.substr(path.rfind('/') + 1); }

}  // namespace

std::unique_ptr<ServiceNames> ServiceNames::create(ServiceNamesOptions options, std::string* error) {
  while (options.cgroup_root.size() > 1 && options.cgroup_root.back() == '/') options.cgroup_root.pop_back();
  struct stat st {};
  if (stat(options.cgroup_root.c_str(), &st) != 0 || !S_ISDIR(st.st_mode)) {
    *error = "service names: stat " + options.cgroup_root + ": " + errno_text(errno ? errno : ENOTDIR);
    return nullptr;
  }
  const int inotify_fd = inotify_init1(IN_NONBLOCK | IN_CLOEXEC);
  if (inotify_fd < 0) {
    *error = "service names: inotify_init1: " + errno_text(errno);
    return nullptr;
  }
  std::unique_ptr<ServiceNames> names(new ServiceNames(std::move(options), inotify_fd));
  names->walk("/", nullptr);
  return names;
}

ServiceNames::ServiceNames(ServiceNamesOptions options, int inotify_fd)
    : options_(std::move(options)), rules_(options_.names), inotify_fd_(inotify_fd) {}

ServiceNames::~ServiceNames() { close(inotify_fd_); }

std::string ServiceNames::full_path(const std::string& path) const {
  return path == "/" ? options_.cgroup_root : options_.cgroup_root + path;
}

bool ServiceNames::walk(const std::string& start, std::vector<uint64_t>* seen) {
  std::vector<std::string> todo{start};
  for (size_t visited = 0; !todo.empty(); ++visited) {
    if (visited == kMaxCgroups) return false;
    const std::string path = std::move(todo.back());
    todo.pop_back();
    // The watch before the listing: a child made in between is in the
    // listing or in an event, maybe both (add() keeps one).
    const int wd = watch(path);
    const int fd = open(full_path(path).c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0) continue;  // removed meanwhile: its IN_DELETE or the next rescan says so
    struct stat st;
    DIR* dir = fstat(fd, &st) == 0 ? fdopendir(fd) : nullptr;
    if (!dir) {
      close(fd);
      continue;
    }
    const uint64_t id = st.st_ino;  // on cgroup v2 the inode number is the cgroup's id
    add(path, id);
    if (wd >= 0) watched_[wd] = id, cgroups_.find(id)->wd = wd;
    if (seen) seen->push_back(id);
    while (const dirent* e = readdir(dir)) {
      if (e->d_type == DT_DIR && std::strcmp(e->d_name, ".") != 0 && std::strcmp(e->d_name, "..") != 0)
        todo.push_back(child_path(path, e->d_name));
    }
    closedir(dir);
  }
  return true;
}

void ServiceNames::add(const std::string& path, uint64_t id, std::optional<Clock::time_point> removed_at) {
  if (cgroups_.contains(id)) return;
  // A path holds one cgroup at a time: one found there now replaces the one
  // whose removal is still in the queue.
  if (auto old = live_paths_.find(path); !removed_at && old != live_paths_.end())
    mark_removed(old->second, Clock::now());
  Cgroup c;
  c.path = path;
  c.identity = std::make_shared<const ServiceIdentity>(identify_cgroup(path, id, rules_, options_.state_dirs));
  c.made_by_pid1 = path == "/" || (last_component(path) == "init.scope" && c.identity->container_id.empty() &&
                                   c.identity->pod_uid.empty());
  c.removed = removed_at.has_value();
  if (options_.on_named) options_.on_named(id, *c.identity);
  cgroups_.try_emplace(id, std::move(c));
  if (removed_at)
    removals_.emplace_back(*removed_at, id);
  else
    live_paths_[path] = id;
}

bool ServiceNames::learn_made(uint64_t id, Clock::time_point now) {
  if (!options_.take_made) return false;
  const std::optional<MadeCgroup> made = options_.take_made(id);
  if (!made) return false;
  const Cgroup* parent = cgroups_.find(made->parent_id);
  if (!parent) return false;
  const std::string path = child_path(parent->path, made->name.c_str());
  struct stat st;
  if (stat(full_path(path).c_str(), &st) == 0 && st.st_ino == id)
    walk(path, nullptr);  // still there after all
  else
    add(path, id, now);
  return cgroups_.contains(id);
}

int ServiceNames::watch(const std::string& path) {
  if (!watching_) return -1;
  if (watched_.size() >= options_.max_watches) {
    stop_watching("the " + std::to_string(options_.max_watches) + " watches it may take are in use");
    return -1;
  }
  const std::string dir = full_path(path);
  const int wd = inotify_add_watch(inotify_fd_, dir.c_str(), IN_CREATE | IN_DELETE | IN_ONLYDIR | IN_DONT_FOLLOW);
  if (wd < 0 && errno != ENOENT) stop_watching("inotify_add_watch " + dir + ": " + errno_text(errno));
  return wd;
}

void ServiceNames::stop_watching(const std::string& why) {
  if (!watching_) return;
  watching_ = false;
  if (options_.warn)
    options_.warn("service names: watching cgroups stopped at " + std::to_string(watched_.size()) +
                  " directories (" + why + "); cgroups made or removed below the rest are found by rescanning " +
                  options_.cgroup_root + ", at most once a second");
}

void ServiceNames::mark_removed(uint64_t id, Clock::time_point now) {
  Cgroup* c = cgroups_.find(id);
  if (!c || c->removed) return;
  c->removed = true;
  removals_.emplace_back(now, id);
  // A removed cgroup's directory lives on while a watch holds its inode:
  // without this no IN_IGNORED would ever come, and the watch would stay.
  if (c->wd >= 0) {
    inotify_rm_watch(inotify_fd_, c->wd);
    watched_.erase(c->wd);
    c->wd = -1;
  }
  if (auto p = live_paths_.find(c->path); p != live_paths_.end() && p->second == id) live_paths_.erase(p);
}

void ServiceNames::on_readable() {
  alignas(inotify_event) char buf[kEventBuffer];
  bool overflowed = false;
  for (int reads = 0; reads < kMaxReadsPerCall; ++reads) {
    const ssize_t n = read(inotify_fd_, buf, sizeof buf);
    if (n <= 0) break;  // EAGAIN: all read
    const Clock::time_point now = Clock::now();
    for (ssize_t at = 0; at < n;) {
      const auto* ev = reinterpret_cast<const inotify_event*>(buf + at);
      at += sizeof(inotify_event) + ev->len;
      if (ev->mask & IN_Q_OVERFLOW) {
        overflowed = true;
        continue;
      }
      const auto w = watched_.find(ev->wd);
      if (w == watched_.end()) continue;
      if (ev->mask & IN_IGNORED) {
        watched_.erase(w);
        continue;
      }
      const Cgroup* parent = cgroups_.find(w->second);
      if (!(ev->mask & IN_ISDIR) || ev->len == 0 || !parent) continue;
      const std::string path = child_path(parent->path, ev->name);
      if (ev->mask & IN_CREATE) {
        walk(path, nullptr);
      } else if (auto p = live_paths_.find(path); (ev->mask & IN_DELETE) && p != live_paths_.end()) {
        // Unless a cgroup made since at the same path is the one known there.
        struct stat st;
        if (stat(full_path(path).c_str(), &st) != 0 || st.st_ino != p->second) mark_removed(p->second, now);
      }
    }
  }
  if (overflowed) rescan(Clock::now());
}

void ServiceNames::rescan(Clock::time_point now) {
  ++lookups_;
  last_rescan_ = now;
  std::vector<uint64_t> seen;
  if (!walk("/", &seen)) return;  // cut short: what it did not reach may still be there
  const std::unordered_set<uint64_t> found(seen.begin(), seen.end());
  std::vector<uint64_t> gone;
  cgroups_.for_each([&](uint64_t id, const Cgroup& c) {
    if (!c.removed && !found.count(id)) gone.push_back(id);
  });
  for (uint64_t id : gone) mark_removed(id, now);
}

void ServiceNames::expire(Clock::time_point now) {
  while (!removals_.empty() && now - removals_.front().first >= options_.grace) {
    const uint64_t id = removals_.front().second;
    cgroups_.erase(id);
    if (options_.forget_made) options_.forget_made(id);
    if (options_.on_forgotten) options_.on_forgotten(id);
    removals_.pop_front();
  }
  for (auto it = misses_.begin(); it != misses_.end();)
    it = now - it->second >= kRetryAfter ? misses_.erase(it) : std::next(it);
  if (!watching_ && now - last_rescan_ >= kRetryAfter) rescan(now);
}

const ServiceNames::Cgroup* ServiceNames::find(uint64_t id) {
  if (const Cgroup* c = cgroups_.find(id)) return c;
  if (id == 0) return nullptr;
  const Clock::time_point now = Clock::now();
  if (auto m = misses_.find(id); m != misses_.end() && now - m->second < kRetryAfter) return nullptr;
  // A record can be read before the event of its cgroup's making, when
  // both came in one wake-up of the loop: read the events first. Without
  // watches, rescan instead. An id still unknown then is gone: removed
  // before its directory was read (the kernel's record of its making names
  // it), or outside this hierarchy.
  ++lookups_;
  if (watching_)
    on_readable();
  else if (now - last_rescan_ >= kRetryAfter)
    rescan(now);
  if (!cgroups_.contains(id)) learn_made(id, now);
  if (const Cgroup* c = cgroups_.find(id)) {
    misses_.erase(id);
    return c;
  }
  if (misses_.size() >= kMaxMisses) misses_.clear();
  misses_[id] = now;
  return nullptr;
}

const std::shared_ptr<const ServiceIdentity>& ServiceNames::owner_of(uint64_t sock_cgroup_id,
                                                                     uint64_t task_cgroup_id) {
  const Cgroup* sock = find(sock_cgroup_id);
  if (sock && sock->made_by_pid1 && task_cgroup_id != 0 && task_cgroup_id != sock_cgroup_id) {
    if (const Cgroup* task = find(task_cgroup_id); task && !task->made_by_pid1) return task->identity;
    sock = find(sock_cgroup_id);  // again: looking for the task's may have read events and moved entries
  }
  if (sock) return sock->identity;
  ++unresolved_;
  return unknown_;
}

void ServiceNames::update(const ServicesConfig& config) {
  options_.names = config.names;
  options_.grace = std::chrono::seconds(config.grace_seconds);
  rules_ = ServiceNameRules(options_.names);
  cgroups_.for_each([this](uint64_t id, Cgroup& c) {
    c.identity = std::make_shared<const ServiceIdentity>(identify_cgroup(c.path, id, rules_, options_.state_dirs));
    if (options_.on_named) options_.on_named(id, *c.identity);
  });
}

ServiceNames::Counts ServiceNames::counts() const {
  return Counts{cgroups_.size(), removals_.size(), unresolved_, lookups_, watched_.size()};
}

}  // namespace tcpscope
