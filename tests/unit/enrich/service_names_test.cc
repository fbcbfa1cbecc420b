// Service names from real cgroups: each test makes its layout by hand in a
// private subtree of the cgroup2 mount, moves a real sleeping process into
// the leaf, and names the cgroup /proc/PID/cgroup says it is in. The
// subtree is the namer's root, so tests see only their own cgroups.
#include "enrich/service_names.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "os/cgroup_path.h"
#include "../temp_dir.h"

namespace tcpscope {
namespace {

using Clock = std::chrono::steady_clock;

std::string read_text(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// The cgroup v2 path of a process ("0::PATH" in /proc/PID/cgroup).
std::string cgroup_of(pid_t pid) {
  std::istringstream in(read_text("/proc/" + std::to_string(pid) + "/cgroup"));
  for (std::string line; std::getline(in, line);)
    if (line.rfind("0::", 0) == 0) return line.substr(3);
  return "";
}

uint64_t inode_of(const std::string& path) {
  struct stat st;
  EXPECT_EQ(stat(path.c_str(), &st), 0) << "stat " << path << ": " << std::strerror(errno);
  return st.st_ino;
}

bool write_pid(const std::string& cgroup_dir, pid_t pid) {
  std::ofstream out(cgroup_dir + "/cgroup.procs");
  out << pid << "\n";
  out.flush();
  return out.good();
}

// A private subtree of the cgroup2 mount, removed however the test ends:
// its processes moved back to this test's own cgroup and killed, then its
// directories removed deepest first.
class CgroupSandbox {
 public:
  CgroupSandbox() {
    mount_ = cgroup2_mount_point();
    if (mount_.empty()) {
      why_not_ = "no cgroup2 filesystem is mounted";
      return;
    }
    static std::atomic<int> serial{0};
    root_ = mount_ + "/tcpscope-test-" + std::to_string(getpid()) + "-" + std::to_string(serial++);
    if (mkdir(root_.c_str(), 0755) != 0) {
      why_not_ = "mkdir " + root_ + ": " + std::strerror(errno) + " (the cgroup2 mount is not writable)";
      root_.clear();
      return;
    }
    home_ = mount_ + cgroup_of(getpid());
  }
  ~CgroupSandbox() {
    if (root_.empty()) return;
    std::vector<std::string> dirs;
    std::error_code ec;
    for (auto it = std::filesystem::recursive_directory_iterator(root_, ec);
         !ec && it != std::filesystem::recursive_directory_iterator(); it.increment(ec))
      if (it->is_directory(ec) && !it->is_symlink(ec)) dirs.push_back(it->path());
    dirs.push_back(root_);
    std::sort(dirs.begin(), dirs.end(), [](const std::string& a, const std::string& b) { return a.size() > b.size(); });
    for (const auto& d : dirs) move_out(d);
    for (pid_t pid : children_) {
      kill(pid, SIGKILL);
      waitpid(pid, nullptr, 0);
    }
    for (const auto& d : dirs)
      if (rmdir(d.c_str()) != 0) ADD_FAILURE() << "rmdir " << d << ": " << std::strerror(errno);
  }
  CgroupSandbox(const CgroupSandbox&) = delete;
  CgroupSandbox& operator=(const CgroupSandbox&) = delete;

  const std::string& why_not() const { return why_not_; }
  const std::string& root() const { return root_; }
  std::string full(const std::string& path) const { return path == "/" ? root_ : root_ + path; }

  // mkdir -p of `path` below the root.
  void make(const std::string& path) {
    std::string at = root_;
    std::istringstream parts(path);
    for (std::string part; std::getline(parts, part, '/');) {
      if (part.empty()) continue;
      at += "/" + part;
      if (mkdir(at.c_str(), 0755) != 0 && errno != EEXIST)
        ADD_FAILURE() << "mkdir " << at << ": " << std::strerror(errno);
    }
  }
  // Moves every process out of `path` and removes it.
  void remove(const std::string& path) {
    move_out(full(path));
    EXPECT_EQ(rmdir(full(path).c_str()), 0) << "rmdir " << full(path) << ": " << std::strerror(errno);
  }

  // A sleeping process of this test's own, in no cgroup of the sandbox yet.
  pid_t spawn() {
    const pid_t pid = fork();
    if (pid == 0) {
      execl("/bin/sleep", "sleep", "300", static_cast<char*>(nullptr));
      _exit(127);
    }
    EXPECT_GT(pid, 0) << "fork: " << std::strerror(errno);
    if (pid > 0) children_.push_back(pid);
    return pid;
  }
  // Moves `pid` into `path` (made if need be) and returns the id of the
  // cgroup the kernel then says it is in.
  uint64_t move(pid_t pid, const std::string& path) {
    make(path);
    EXPECT_TRUE(write_pid(full(path), pid)) << "move " << pid << " to " << full(path);
    const std::string now_in = cgroup_of(pid);
    EXPECT_EQ(mount_ + now_in, full(path)) << "process " << pid;
    return inode_of(mount_ + now_in);
  }
  uint64_t id(const std::string& path) const { return inode_of(full(path)); }

 private:
  void move_out(const std::string& dir) {
    std::istringstream procs(read_text(dir + "/cgroup.procs"));
    for (std::string pid; std::getline(procs, pid);)
      if (!pid.empty() && !write_pid(home_, std::stoi(pid))) ADD_FAILURE() << "move " << pid << " to " << home_;
  }

  std::string mount_, root_, home_, why_not_;
  std::vector<pid_t> children_;
};

// Container runtimes' state files, in a temp dir.
class StateFiles {
 public:
  ContainerStateDirs dirs() const {
    return ContainerStateDirs{tmp_.file("docker"), tmp_.file("containerd"), tmp_.file("crio")};
  }
  void write(const std::string& path, const std::string& content) {
    const std::string file = tmp_.file(path);
    std::filesystem::create_directories(std::filesystem::path(file).parent_path());
    std::ofstream(file) << content;
  }
  void docker(const std::string& id, const std::string& name) {
    write("docker/containers/" + id + "/config.v2.json", R"({"ID":")" + id + R"(","Name":")" + name + R"("})");
  }
  void containerd(const std::string& ns, const std::string& id, const std::string& annotations) {
    write("containerd/io.containerd.runtime.v2.task/" + ns + "/" + id + "/config.json",
          R"({"ociVersion":"1.1.0","annotations":{)" + annotations + "}}");
  }
  void crio(const std::string& id, const std::string& annotations) {
    write("crio/overlay-containers/" + id + "/userdata/config.json", R"({"annotations":{)" + annotations + "}}");
  }

 private:
  TempDir tmp_;
};

// Each test's sandbox, state files and namer (made by start()), in the
// order they are undone: the namer first, the cgroups last.
class ServiceNamesTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!sandbox.why_not().empty()) GTEST_SKIP() << sandbox.why_not();
  }
  // A namer of the sandbox as it is now.
  ::testing::AssertionResult start(std::vector<ServiceNameRule> rules = {},
                                   size_t max_watches = ServiceNamesOptions{}.max_watches) {
    ServiceNamesOptions o;
    o.cgroup_root = sandbox.root();
    o.names = std::move(rules);
    o.state_dirs = files.dirs();
    o.max_watches = max_watches;
    o.warn = [this](const std::string& w) { warnings.push_back(w); };
    std::string error;
    names = ServiceNames::create(std::move(o), &error);
    return names ? ::testing::AssertionSuccess() : ::testing::AssertionFailure() << error;
  }

  CgroupSandbox sandbox;
  StateFiles files;
  std::vector<std::string> warnings;
  std::unique_ptr<ServiceNames> names;
};

const std::string kId1 = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";
const std::string kId2 = "fedcba9876543210fedcba9876543210fedcba9876543210fedcba9876543210";
const std::string kId3 = "aaaaaaaaaaaabbbbbbbbbbbbccccccccccccddddddddddddeeeeeeeeeeeeffff";
const std::string kPodUid = "6f3c1a2b-4d5e-4f60-8a9b-0c1d2e3f4a5b";
const std::string kPodUid2 = "11112222-3333-4444-5555-666677778888";

std::string underscored(std::string uid) {
  std::replace(uid.begin(), uid.end(), '-', '_');
  return uid;
}

// The module rests on this: a cgroup v2 directory's inode number is the
// cgroup's id, the one the kernel's file handle for it carries
// (name_to_handle_at: kernfs' 64-bit node id, which bpf_get_current_cgroup_id
// and bpf_sk_cgroup_id return).
TEST_F(ServiceNamesTest, CgroupIdIsTheDirectoryInode) {
  const pid_t child = sandbox.spawn();
  sandbox.move(child, "/leaf");
  const std::string dir = cgroup2_mount_point() + cgroup_of(child);
  alignas(file_handle) unsigned char storage[sizeof(file_handle) + 64];
  auto* handle = reinterpret_cast<file_handle*>(storage);
  handle->handle_bytes = 64;
  int mount_id = 0;
  ASSERT_EQ(name_to_handle_at(AT_FDCWD, dir.c_str(), handle, &mount_id, 0), 0)
      << "name_to_handle_at " << dir << ": " << std::strerror(errno);
  ASSERT_EQ(handle->handle_bytes, 8u);
  EXPECT_EQ(handle->handle_type, 0xfe);  // FILEID_KERNFS
  uint64_t handle_id = 0;
  std::memcpy(&handle_id, handle->f_handle, sizeof handle_id);
  EXPECT_EQ(inode_of(dir), handle_id);

  ASSERT_TRUE(start());
  EXPECT_EQ(names->owner_of(handle_id, 0)->cgroup_id, handle_id);
}

struct Layout {
  std::string path;
  std::string name, unit, container_id, pod_uid;
};

TEST_F(ServiceNamesTest, NamesEachLayout) {
  files.docker(kId1, "/web");
  files.docker(kId3, "/db");
  files.containerd("k8s.io", kId1,
                   R"("io.kubernetes.cri.sandbox-namespace":"shop","io.kubernetes.cri.sandbox-name":"cart-7d9f")");
  files.crio(kId2, R"("io.kubernetes.pod.namespace":"kube-system","io.kubernetes.pod.name":"dns-1")");
  files.containerd("default", "redis", R"("nerdctl/name":"cache")");
  files.containerd("default", "plain", R"("other":"x")");
  const std::string pod_slice =
      "/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod" + underscored(kPodUid) + ".slice";
  const std::string guaranteed_pod = "/kubepods.slice/kubepods-pod" + underscored(kPodUid2) + ".slice";
  const std::vector<Layout> layouts = {
      {"/system.slice/nginx.service", "nginx.service", "nginx.service", "", ""},
      {"/system.slice/nginx.service/workers", "nginx.service", "nginx.service", "", ""},
      {"/user.slice/user-1000.slice/user@1000.service/app.slice/foo.service", "foo.service", "foo.service", "", ""},
      {"/user.slice/user-1000.slice/session-3.scope", "session-3.scope", "session-3.scope", "", ""},
      {"/system.slice", "", "", "", ""},
      {"/unmatched/thing", "", "", "", ""},
      {"/system.slice/docker-" + kId1 + ".scope", "web", "docker-" + kId1 + ".scope", kId1, ""},
      {"/system.slice/docker-" + kId2 + ".scope", kId2.substr(0, 12), "docker-" + kId2 + ".scope", kId2, ""},
      {"/docker/" + kId3, "db", "", kId3, ""},
      {"/system.slice/docker-" + kId1 + ".scope/system.slice/x.service", "web", "docker-" + kId1 + ".scope", kId1, ""},
      {"/system.slice/crio-" + kId3 + ".scope", kId3.substr(0, 12), "crio-" + kId3 + ".scope", kId3, ""},
      {"/system.slice/cri-containerd-" + kId3 + ".scope", kId3.substr(0, 12), "cri-containerd-" + kId3 + ".scope", kId3,
       ""},
      {pod_slice + "/cri-containerd-" + kId1 + ".scope", "shop/cart-7d9f", "cri-containerd-" + kId1 + ".scope", kId1,
       kPodUid},
      {pod_slice, kPodUid, "", "", kPodUid},
      {guaranteed_pod + "/crio-" + kId2 + ".scope", "kube-system/dns-1", "crio-" + kId2 + ".scope", kId2, kPodUid2},
      {guaranteed_pod + "/crio-conmon-" + kId2 + ".scope", kPodUid2, "crio-conmon-" + kId2 + ".scope", "", kPodUid2},
      {"/kubepods/besteffort/pod" + kPodUid + "/" + kId1, "shop/cart-7d9f", "", kId1, kPodUid},
      {"/kubepods/besteffort/pod" + kPodUid + "/" + kId3, kPodUid, "", kId3, kPodUid},
      {"/default/redis", "cache", "", "redis", ""},
      {"/default/plain", "plain", "", "plain", ""},
  };
  for (const auto& l : layouts) sandbox.make(l.path);
  ASSERT_TRUE(start());
  const pid_t child = sandbox.spawn();
  for (const auto& l : layouts) {
    const uint64_t id = sandbox.move(child, l.path);
    const ServiceIdentity& got = *names->owner_of(id, 0);
    EXPECT_EQ(got.name, l.name) << l.path;
    EXPECT_EQ(got.unit, l.unit) << l.path;
    EXPECT_EQ(got.container_id, l.container_id) << l.path;
    EXPECT_EQ(got.pod_uid, l.pod_uid) << l.path;
    EXPECT_EQ(got.cgroup_id, id) << l.path;
  }
  EXPECT_EQ(names->owner_of(sandbox.id("/"), 0)->name, "");
  EXPECT_EQ(names->counts().unresolved_lookups, 0u);
  EXPECT_EQ(names->counts().lookups, 0u);
}

TEST_F(ServiceNamesTest, NamesAreBoundedPrintableUtf8) {
  std::string umlauts;
  for (int i = 0; i < 100; ++i) umlauts += "\xc3\xbc";  // 200 bytes
  sandbox.make("/long/" + umlauts);
  sandbox.make("/system.slice/bad\xff\x01.service");
  ASSERT_TRUE(start({ServiceNameRule{"/long/(.*)", "$1$1", 1}}));
  const std::string& cut = names->owner_of(sandbox.id("/long/" + umlauts), 0)->name;
  EXPECT_EQ(cut, (umlauts + umlauts).substr(0, 254));  // 127 characters: a 128th would pass 255 bytes
  EXPECT_EQ(names->owner_of(sandbox.id("/system.slice/bad\xff\x01.service"), 0)->name, "bad??.service");
}

TEST_F(ServiceNamesTest, AConfigRuleWinsAndAnUpdateRenames) {
  files.docker(kId1, "/web");
  ASSERT_TRUE(start({ServiceNameRule{"/system\\.slice/(nginx)\\.service(/.*)?", "edge-$1", 1},
                     ServiceNameRule{"/system\\.slice/.*", "second", 2}}));
  const pid_t child = sandbox.spawn();
  const uint64_t nginx = sandbox.move(child, "/system.slice/nginx.service/workers");
  const uint64_t docker = sandbox.move(child, "/system.slice/docker-" + kId1 + ".scope");
  names->on_readable();
  EXPECT_EQ(names->owner_of(nginx, 0)->name, "edge-nginx");
  EXPECT_EQ(names->owner_of(nginx, 0)->unit, "nginx.service");
  EXPECT_EQ(names->owner_of(docker, 0)->name, "second");
  EXPECT_EQ(names->owner_of(docker, 0)->container_id, kId1);

  ServicesConfig config;
  config.names = {ServiceNameRule{"/system\\.slice/docker-.*", "containers", 1}};
  names->update(config);
  EXPECT_EQ(names->owner_of(nginx, 0)->name, "nginx.service");
  EXPECT_EQ(names->owner_of(docker, 0)->name, "containers");
  names->update(ServicesConfig{});
  EXPECT_EQ(names->owner_of(docker, 0)->name, "web");
}

TEST_F(ServiceNamesTest, ACgroupMadeLaterIsNamedWhenMade) {
  ASSERT_TRUE(start());
  const auto before = names->counts();
  // Nested at once: the deeper directories exist before their parent's
  // watch does, and are found by listing it.
  sandbox.make("/system.slice/late.service/a/b");
  names->on_readable();
  EXPECT_EQ(names->counts().known_cgroups, before.known_cgroups + 4);
  EXPECT_EQ(names->counts().watches, before.watches + 4);
  const pid_t child = sandbox.spawn();
  const uint64_t id = sandbox.move(child, "/system.slice/late.service/a/b");
  EXPECT_EQ(names->owner_of(id, 0)->name, "late.service");
  EXPECT_EQ(names->counts().lookups, 0u) << "named from the event, not looked up";
}

TEST_F(ServiceNamesTest, ARecordBeforeItsCgroupsEventReadsTheEventsFirst) {
  ASSERT_TRUE(start());
  const pid_t child = sandbox.spawn();
  // Made after create(), its event not read yet: a record can come first.
  const uint64_t id = sandbox.move(child, "/system.slice/early.service");
  EXPECT_EQ(names->owner_of(id, 0)->name, "early.service");
  EXPECT_EQ(names->counts().lookups, 1u);
  names->on_readable();  // the event for a cgroup already known changes nothing
  EXPECT_EQ(names->owner_of(id, 0)->name, "early.service");
  EXPECT_EQ(names->counts().lookups, 1u);
  EXPECT_EQ(names->counts().unresolved_lookups, 0u);
}

TEST_F(ServiceNamesTest, HitsMakeNoLookupAndMissesAreRateLimited) {
  sandbox.make("/system.slice/hit.service");
  ASSERT_TRUE(start());
  const uint64_t id = sandbox.id("/system.slice/hit.service");
  for (int i = 0; i < 1000; ++i) ASSERT_EQ(names->owner_of(id, 0)->name, "hit.service");
  EXPECT_EQ(names->counts().lookups, 0u);
  // An id no cgroup has (ids count up from 1; this one is far past any).
  const uint64_t none = (uint64_t{1} << 62) + 12345;
  const auto& unknown = names->owner_of(none, 0);
  ASSERT_NE(unknown, nullptr);
  EXPECT_EQ(unknown->name, "");
  EXPECT_EQ(names->counts().lookups, 1u);
  for (int i = 0; i < 100; ++i) EXPECT_EQ(names->owner_of(none, 0).get(), unknown.get());
  EXPECT_EQ(names->counts().lookups, 1u) << "looked up again within a second";
  EXPECT_EQ(names->counts().unresolved_lookups, 101u);
  EXPECT_EQ(names->owner_of(0, 0)->name, "");
  EXPECT_EQ(names->counts().lookups, 1u) << "0 is the kernel's unknown, never looked up";
  names->expire(Clock::now() + std::chrono::seconds(2));
  names->owner_of(none, 0);
  EXPECT_EQ(names->counts().lookups, 2u) << "looked up again after a second";
}

TEST_F(ServiceNamesTest, PidOnesCgroupsAskTheTasksCgroup) {
  files.docker(kId1, "/web");
  ASSERT_TRUE(start());
  const pid_t child = sandbox.spawn();
  const uint64_t init = sandbox.move(child, "/init.scope");
  const uint64_t app = sandbox.move(child, "/system.slice/app.service");
  const uint64_t container_init = sandbox.move(child, "/system.slice/docker-" + kId1 + ".scope/init.scope");
  const uint64_t root = sandbox.id("/");
  names->on_readable();
  EXPECT_EQ(names->owner_of(init, app)->name, "app.service");
  EXPECT_EQ(names->owner_of(root, app)->name, "app.service");
  EXPECT_EQ(names->owner_of(init, 0)->name, "init.scope");
  EXPECT_EQ(names->owner_of(init, root)->name, "init.scope");
  EXPECT_EQ(names->owner_of(root, 0)->name, "");
  EXPECT_EQ(names->owner_of(app, init)->name, "app.service") << "only PID 1's cgroups ask the task's";
  EXPECT_EQ(names->owner_of(container_init, app)->name, "web") << "a container's own init is the container";
}

TEST_F(ServiceNamesTest, ARemovedCgroupKeepsItsNameForTheGrace) {
  sandbox.make("/system.slice");
  ASSERT_TRUE(start());
  const auto before = names->counts();
  const pid_t child = sandbox.spawn();
  const uint64_t id = sandbox.move(child, "/system.slice/gone.service");
  names->on_readable();
  sandbox.remove("/system.slice/gone.service");
  const Clock::time_point removed = Clock::now();
  names->on_readable();
  EXPECT_EQ(names->counts().removed_in_grace, 1u);
  EXPECT_EQ(names->owner_of(id, 0)->name, "gone.service");
  names->expire(removed + std::chrono::seconds(599));
  EXPECT_EQ(names->owner_of(id, 0)->name, "gone.service");
  names->expire(Clock::now() + std::chrono::seconds(600));
  EXPECT_EQ(names->counts().known_cgroups, before.known_cgroups);
  EXPECT_EQ(names->counts().removed_in_grace, 0u);
  EXPECT_EQ(names->counts().watches, before.watches);
  EXPECT_EQ(names->owner_of(id, 0)->name, "");
  EXPECT_EQ(names->counts().unresolved_lookups, 1u);
}

// The same path made again (a restarted unit) is a new cgroup: the old one's
// removal does not remove the new one.
TEST_F(ServiceNamesTest, APathMadeAgainIsANewCgroup) {
  sandbox.make("/system.slice/restart.service");
  ASSERT_TRUE(start());
  const uint64_t first = sandbox.id("/system.slice/restart.service");
  sandbox.remove("/system.slice/restart.service");
  sandbox.make("/system.slice/restart.service");
  const uint64_t second = sandbox.id("/system.slice/restart.service");
  ASSERT_NE(first, second);
  EXPECT_EQ(names->owner_of(second, 0)->name, "restart.service");  // looked up before the events are read
  names->on_readable();
  EXPECT_EQ(names->counts().removed_in_grace, 1u);
  names->expire(Clock::now() + std::chrono::seconds(601));
  EXPECT_EQ(names->owner_of(second, 0)->name, "restart.service");
  EXPECT_EQ(names->counts().removed_in_grace, 0u);
}

TEST_F(ServiceNamesTest, TenThousandShortLivedCgroupsLeaveNothingBehind) {
  sandbox.make("/system.slice");
  ASSERT_TRUE(start());
  const auto before = names->counts();
  constexpr int kTotal = 10000, kBatch = 500;
  const auto start = Clock::now();
  Clock::duration reading{};  // in on_readable(): naming and forgetting
  auto read_events = [&] {
    const auto t = Clock::now();
    names->on_readable();
    reading += Clock::now() - t;
  };
  for (int made = 0; made < kTotal; made += kBatch) {
    for (int i = made; i < made + kBatch; ++i) sandbox.make("/system.slice/run-" + std::to_string(i) + ".scope");
    read_events();
    ASSERT_EQ(names->counts().known_cgroups, before.known_cgroups + made + kBatch) << "batch at " << made;
    const uint64_t last = sandbox.id("/system.slice/run-" + std::to_string(made + kBatch - 1) + ".scope");
    ASSERT_EQ(names->owner_of(last, 0)->name, "run-" + std::to_string(made + kBatch - 1) + ".scope");
    for (int i = made; i < made + kBatch; ++i) sandbox.remove("/system.slice/run-" + std::to_string(i) + ".scope");
    read_events();
    ASSERT_EQ(names->counts().removed_in_grace, static_cast<uint64_t>(made + kBatch)) << "batch at " << made;
    ASSERT_LT(Clock::now() - start, std::chrono::seconds(120)) << "after " << made + kBatch << " cgroups";
  }
  const double seconds = std::chrono::duration<double>(Clock::now() - start).count();
  names->expire(Clock::now() + std::chrono::seconds(601));
  const auto after = names->counts();
  EXPECT_TRUE(warnings.empty()) << warnings[0];
  EXPECT_EQ(after.known_cgroups, before.known_cgroups);
  EXPECT_EQ(after.watches, before.watches);
  EXPECT_EQ(after.removed_in_grace, 0u);
  EXPECT_EQ(after.lookups, 0u);
  const double in_names = std::chrono::duration<double>(reading).count();
  std::printf("[ service names ] %d cgroups made and removed: %.1f us each, %.1f us of it in on_readable()\n",
              kTotal, seconds * 1e6 / kTotal, in_names * 1e6 / kTotal);
  EXPECT_LT(in_names / kTotal, 0.002) << "seconds per cgroup in on_readable()";
}

// Beyond max_watches (as when the kernel's per-user limit answers ENOSPC)
// watching stops, said once, and rescans find what events would have.
TEST_F(ServiceNamesTest, WithoutWatchesRescansFindMadeAndRemovedCgroups) {
  sandbox.make("/system.slice/a.service");
  sandbox.make("/system.slice/b.service");
  ASSERT_TRUE(start({}, 2));
  ASSERT_EQ(warnings.size(), 1u);
  EXPECT_NE(warnings[0].find("watching cgroups stopped at 2 directories (the 2 watches it may take are in use)"),
            std::string::npos)
      << warnings[0];
  EXPECT_EQ(names->counts().watches, 2u);
  EXPECT_EQ(names->counts().known_cgroups, 4u) << "the walk names what it cannot watch";

  // Made below an unwatched directory: no event; the rescan after a second finds it.
  sandbox.make("/system.slice/a.service/late");
  names->on_readable();
  EXPECT_EQ(names->counts().known_cgroups, 4u);
  names->expire(Clock::now() + std::chrono::seconds(2));
  EXPECT_EQ(names->counts().known_cgroups, 5u);
  EXPECT_EQ(names->owner_of(sandbox.id("/system.slice/a.service/late"), 0)->name, "a.service");

  const uint64_t late = sandbox.id("/system.slice/a.service/late");
  sandbox.remove("/system.slice/a.service/late");
  names->on_readable();
  EXPECT_EQ(names->counts().removed_in_grace, 0u) << "no event below an unwatched directory";
  names->expire(Clock::now() + std::chrono::seconds(4));
  EXPECT_EQ(names->counts().removed_in_grace, 1u);
  EXPECT_EQ(names->owner_of(late, 0)->name, "a.service");
  names->expire(Clock::now() + std::chrono::seconds(4 + 601));
  EXPECT_EQ(names->counts().removed_in_grace, 0u);
  EXPECT_EQ(names->counts().known_cgroups, 4u);
  EXPECT_EQ(warnings.size(), 1u) << "said once";
}

TEST(ServiceNamesCreate, NamesWhatFailed) {
  std::string error;
  ServiceNamesOptions o;
  o.cgroup_root = "/nonexistent/tcpscope-cgroup";
  EXPECT_EQ(ServiceNames::create(std::move(o), &error), nullptr);
  EXPECT_EQ(error, "service names: stat /nonexistent/tcpscope-cgroup: No such file or directory (errno 2)");
}

}  // namespace
}  // namespace tcpscope
