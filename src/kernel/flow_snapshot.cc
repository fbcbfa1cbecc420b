#include "kernel/flow_snapshot.h"

#include <bpf/bpf.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstring>
#include <unordered_map>

#include "os/linux_capabilities.h"

namespace tcpscope {

namespace {

// A network namespace to visit, by its inode, and every file that names it:
// a process may leave it, or end, between the listing and the visit.
struct Namespace {
  ino_t inode;
  std::vector<std::string> paths;
};

// Namespaces worth visiting, one per distinct namespace, ours excluded.
std::vector<Namespace> other_namespaces(ino_t own) {
  std::vector<Namespace> found;
  std::unordered_map<ino_t, size_t> index{{own, SIZE_MAX}};
  auto consider = [&](const std::string& path) {
    struct stat st {};
    if (stat(path.c_str(), &st) != 0) return;
    auto [it, inserted] = index.emplace(st.st_ino, found.size());
    if (inserted)
      found.push_back({st.st_ino, {path}});
    else if (it->second != SIZE_MAX)
      found[it->second].paths.push_back(path);
  };
  if (DIR* d = opendir("/run/netns")) {
    while (dirent* e = readdir(d))
      if (e->d_name[0] != '.') consider(std::string("/run/netns/") + e->d_name);
    closedir(d);
  }
  if (DIR* d = opendir("/proc")) {
    while (dirent* e = readdir(d))
      if (e->d_name[0] >= '1' && e->d_name[0] <= '9')
        consider(std::string("/proc/") + e->d_name + "/ns/net");
    closedir(d);
  }
  return found;
}

// The first of the namespace's files that still names it. -1 with errno:
// ENOENT when every process named has left it or ended (the namespace is gone,
// or lives on in no process to enter it by), else the error of the first
// file that could not be opened.
int open_namespace(const Namespace& ns, const std::string** failed_path) {
  for (const auto& path : ns.paths) {
    const int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
      if (errno == ENOENT || errno == ESRCH) continue;
      *failed_path = &path;
      return -1;
    }
    struct stat st {};
    if (fstat(fd, &st) == 0 && st.st_ino == ns.inode) return fd;
    close(fd);  // the pid now belongs to a process of another namespace
  }
  errno = ENOENT;
  return -1;
}

// Whether the calling thread's network namespace has a TCP socket, from its
// sockstat ("TCP: inuse N orphan N tw N alloc N mem N"): a counter the
// kernel keeps per namespace, where the iterator would walk every bucket of
// the host's table. Unknown counts as yes.
bool has_tcp_sockets() {
  int fd = open("/proc/thread-self/net/sockstat", O_RDONLY | O_CLOEXEC);
  if (fd < 0) return true;
  char buf[512];
  const ssize_t n = read(fd, buf, sizeof(buf) - 1);
  close(fd);
  if (n <= 0) return true;
  buf[n] = '\0';
  // inuse counts this namespace's hashed sockets (orphans included until
  // they close); "orphan" is the whole host's, so it says nothing here.
  unsigned long inuse = 0;
  const char* tcp = strstr(buf, "\nTCP: ");
  if (!tcp || sscanf(tcp, "\nTCP: inuse %lu", &inuse) != 1) return true;
  return inuse > 0;
}

}  // namespace

bool read_open_flows(int iter_link_fd, std::vector<tcpscope_flow_event>* out, std::string* error) {
  int fd = bpf_iter_create(iter_link_fd);
  if (fd < 0) {
    *error = std::string("creating the TCP socket iterator: ") + strerror(errno);
    return false;
  }
  // The iterator writes whole records; a read may end mid-record, so keep the tail.
  std::vector<char> buf(1 << 16);
  size_t have = 0;
  for (;;) {
    ssize_t n = read(fd, buf.data() + have, buf.size() - have);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      *error = std::string("reading the TCP socket iterator: ") + strerror(errno);
      close(fd);
      return false;
    }
    if (n == 0) break;
    have += static_cast<size_t>(n);
    size_t whole = have / sizeof(tcpscope_flow_event);
    for (size_t i = 0; i < whole; ++i) {
      tcpscope_flow_event ev;
      std::memcpy(&ev, buf.data() + i * sizeof(ev), sizeof(ev));
      out->push_back(ev);
    }
    size_t used = whole * sizeof(tcpscope_flow_event);
    std::memmove(buf.data(), buf.data() + used, have - used);
    have -= used;
  }
  close(fd);
  return true;
}

FlowSnapshot snapshot_all_namespaces(int iter_link_fd, std::chrono::steady_clock::duration budget,
                                     size_t* rotation) {
  using Clock = std::chrono::steady_clock;
  FlowSnapshot snap;
  const auto t0 = Clock::now();
  auto note_error = [&](std::string what) {
    ++snap.namespace_errors;
    if (snap.first_error.empty()) snap.first_error = std::move(what);
  };
  std::string error;
  const int own = open("/proc/thread-self/ns/net", O_RDONLY | O_CLOEXEC);
  struct stat st {};
  if (own < 0 || fstat(own, &st) != 0) {
    note_error(std::string("opening the daemon's own namespace: ") + strerror(errno));
    if (own >= 0) close(own);
    return snap;
  }
  if (read_open_flows(iter_link_fd, &snap.flows, &error)) {
    ++snap.namespaces;
    snap.whole_namespaces.insert(static_cast<uint32_t>(st.st_ino));
  } else {
    note_error(error + " in the daemon's own namespace");
  }
  const auto caps = thread_capabilities();
  if (!caps || !(caps->effective & cap_bit(kCapSysAdmin))) {
    close(own);
    snap.seconds = std::chrono::duration<double>(Clock::now() - t0).count();
    return snap;
  }
  const std::vector<Namespace> others = other_namespaces(st.st_ino);
  const size_t first = others.empty() ? 0 : *rotation % others.size();
  *rotation = 0;
  for (size_t k = 0; k < others.size(); ++k) {
    const size_t i = (first + k) % others.size();
    const Namespace& ns = others[i];
    if (Clock::now() - t0 > budget) {
      snap.namespaces_skipped = static_cast<int>(others.size() - k);
      *rotation = i;
      break;
    }
    const std::string* failed_path = nullptr;
    const int fd = open_namespace(ns, &failed_path);
    if (fd < 0) {
      if (errno == ENOENT)  // ended since the listing: nothing left open in it
        snap.whole_namespaces.insert(static_cast<uint32_t>(ns.inode));
      else
        note_error("opening " + *failed_path + ": " + strerror(errno));
      continue;
    }
    const bool entered = setns(fd, CLONE_NEWNET) == 0;
    if (!entered) note_error("entering " + ns.paths.front() + ": " + strerror(errno));
    close(fd);
    if (!entered) continue;
    if (!has_tcp_sockets()) {
      ++snap.namespaces_empty;
    } else if (read_open_flows(iter_link_fd, &snap.flows, &error)) {
      ++snap.namespaces;
    } else {
      note_error(error + " in " + ns.paths.front());
      continue;
    }
    snap.whole_namespaces.insert(static_cast<uint32_t>(ns.inode));
  }
  // Back home: the caller's thread may live on.
  if (setns(own, CLONE_NEWNET) != 0)
    note_error(std::string("returning to the daemon's own namespace: ") + strerror(errno));
  close(own);
  snap.every_namespace = snap.namespace_errors == 0 && snap.namespaces_skipped == 0;
  snap.seconds = std::chrono::duration<double>(Clock::now() - t0).count();
  return snap;
}

}  // namespace tcpscope
