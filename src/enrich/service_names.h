// The service that owns a socket, from the socket's cgroup v2 id
// (docs/services.md "Services"). On cgroup v2 a cgroup's id is its
// directory's inode number, so the tree is walked once at start and then
// watched with inotify: a cgroup is named when it is made, before its
// sockets' records can arrive, and a removed one keeps its name for a grace
// period, for the records of its sockets still closing.
//
// For the daemon's loop thread: not thread-safe.
#pragma once

#include <chrono>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "config/config.h"
#include "containers/flat_map.h"
#include "enrich/service_layouts.h"
#include "record/enrichment.h"

namespace tcpscope {

// What the kernel recorded of a cgroup's making (kernel/cgroups_made.h).
struct MadeCgroup {
  uint64_t parent_id = 0;
  std::string name;  // its directory's name
};

struct ServiceNamesOptions {
  std::string cgroup_root;  // the cgroup2 mount (cgroup2_mount_point()); cgroup paths are below it
  std::vector<ServiceNameRule> names;
  std::chrono::seconds grace{600};
  ContainerStateDirs state_dirs;
  // inotify watches are counted per user, with every other program's: beyond
  // this many cgroups the tree is rescanned (at most once a second) instead.
  size_t max_watches = 65536;
  // The kernel's record of a cgroup's making, by id, taken (none: null or
  // nullopt): names a cgroup removed before its directory was read. And
  // what drops a forgotten cgroup's record, so that it stays forgotten.
  std::function<std::optional<MadeCgroup>(uint64_t id)> take_made;
  std::function<void(uint64_t id)> forget_made;
  // Told of each cgroup named (made, found, or named anew after a reload)
  // and of each forgotten (its grace over): the policy's map of the
  // services' cgroups follows them.
  std::function<void(uint64_t id, const ServiceIdentity& owner)> on_named;
  std::function<void(uint64_t id)> on_forgotten;
  // Told once, with the errno, when watching stops and rescans take over.
  std::function<void(const std::string&)> warn;
};

class ServiceNames {
 public:
  // Walks the tree and starts watching it; null and *error (with the errno)
  // when the root cannot be opened or inotify is refused.
  static std::unique_ptr<ServiceNames> create(ServiceNamesOptions options, std::string* error);
  ~ServiceNames();
  ServiceNames(const ServiceNames&) = delete;
  ServiceNames& operator=(const ServiceNames&) = delete;

  int fd() const { return inotify_fd_; }  // the loop polls it for EPOLLIN
  // Cgroups made and removed since: the new ones are named at once.
  void on_readable();
  // Forgets cgroups removed more than `grace` before `now`; rescans when
  // watching has stopped and the last rescan is a second old.
  void expire(std::chrono::steady_clock::time_point now);

  // The owner of a socket: named from its cgroup, or, when that is the root
  // or PID 1's init.scope (a listener a socket-activating PID 1 made), from
  // the cgroup of the task the record was taken in (0: unknown). No system
  // call for a known cgroup; for an unknown one, the inotify events are
  // read first (a record can come before its cgroup's event), or, without
  // watches, the tree is rescanned, at most once a second per id. Never
  // null: an unknown owner is a shared identity with empty parts, and is
  // counted. The reference holds until the next call that is not const.
  const std::shared_ptr<const ServiceIdentity>& owner_of(uint64_t sock_cgroup_id, uint64_t task_cgroup_id);

  // SIGHUP: the new rules and grace; every known cgroup is named again.
  void update(const ServicesConfig& config);

  struct Counts {
    uint64_t known_cgroups;       // live and removed within the grace
    uint64_t removed_in_grace;
    uint64_t unresolved_lookups;  // owner_of() answers that are unknown for want of the cgroup
    uint64_t lookups;             // looks for unknown cgroups (event reads or rescans)
    uint64_t watches;
  };
  Counts counts() const;

 private:
  // What a record's lookup reads comes first: with the id, one cache line.
  struct Cgroup {
    std::shared_ptr<const ServiceIdentity> identity;
    // The root or PID 1's init.scope: owner_of() asks the task's cgroup.
    bool made_by_pid1 = false;
    bool removed = false;
    int wd = -1;       // its inotify watch, -1 for none
    std::string path;  // below the root, "/" for the root itself
  };
  using Clock = std::chrono::steady_clock;

  ServiceNames(ServiceNamesOptions options, int inotify_fd);
  // Watches, names and lists `path` and every cgroup below it. Returns
  // false when the walk was cut short (the cap on cgroups).
  bool walk(const std::string& path, std::vector<uint64_t>* seen);
  // `removed_at`: a cgroup known only once gone, in its grace from then.
  void add(const std::string& path, uint64_t id, std::optional<Clock::time_point> removed_at = std::nullopt);
  // Names a cgroup from the kernel's record of its making and its parent's
  // path; false when there is no record or the parent is unknown.
  bool learn_made(uint64_t id, Clock::time_point now);
  int watch(const std::string& path);
  void stop_watching(const std::string& why);
  void mark_removed(uint64_t id, Clock::time_point now);
  void rescan(Clock::time_point now);
  const Cgroup* find(uint64_t id);
  // Names the cgroup with this id if it is below the root.
  std::string full_path(const std::string& path) const;

  ServiceNamesOptions options_;
  ServiceNameRules rules_;
  int inotify_fd_;
  FlatMap<uint64_t, Cgroup> cgroups_;  // by id: each record's lookup (flat_map.h says why flat)
  std::unordered_map<std::string, uint64_t> live_paths_;  // live cgroups' ids by path
  std::unordered_map<int, uint64_t> watched_;             // watch descriptor -> cgroup id
  std::deque<std::pair<Clock::time_point, uint64_t>> removals_;  // removed cgroups in grace, oldest first
  std::unordered_map<uint64_t, Clock::time_point> misses_;        // ids not found, when last looked up
  bool watching_ = true;
  Clock::time_point last_rescan_{};
  uint64_t unresolved_ = 0;
  uint64_t lookups_ = 0;
  const std::shared_ptr<const ServiceIdentity> unknown_ = std::make_shared<const ServiceIdentity>();
};

}  // namespace tcpscope
