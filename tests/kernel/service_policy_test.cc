// cc_policy rules that name services, on the real sockops program: cgroups
// made by hand under the cgroup2 mount stand for services (their ids, the
// directories' inodes, handed to PolicyMaps as the service resolver would),
// and a child process moves itself between them before making each socket,
// in a network namespace of its own. What each socket got is the kernel's
// answer to getsockopt(TCP_CONGESTION): an active socket is connected from
// inside the cgroup, a passive one accepted from a listener made inside it.
// Every policy ends in a rule for all sockets with a CC of its own, so the
// system's default never passes for a rule's choice.
#include <arpa/inet.h>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "kernel/flow_probe.h"
#include "kernel/policy_maps.h"
#include "netns_child.h"
#include "os/cgroup_path.h"
#include "os/congestion_controls.h"
#include "policy/cc_policy.h"

namespace tcpscope {
namespace {

// The cgroups under the test's own, by name; "a.service/worker" is nested in
// a service's cgroup, "plain" belongs to no service.
const std::vector<std::string> kCgroups = {"plain", "a.service", "a.service/worker", "b.service", "c.scope"};

bool move_self_to(const std::string& cgroup) {
  const int fd = open((cgroup + "/cgroup.procs").c_str(), O_WRONLY | O_CLOEXEC);
  if (fd < 0) return false;
  const std::string pid = std::to_string(getpid());
  const bool ok = write(fd, pid.data(), pid.size()) == static_cast<ssize_t>(pid.size());
  close(fd);
  return ok;
}

std::string congestion_control(int fd) {
  char name[TCPSCOPE_CC_NAME_LEN] = {};
  socklen_t len = sizeof(name);
  if (getsockopt(fd, IPPROTO_TCP, TCP_CONGESTION, name, &len) != 0)
    return std::string("getsockopt: ") + strerror(errno);
  return std::string(name, strnlen(name, sizeof(name)));
}

struct Ends {
  char active[TCPSCOPE_CC_NAME_LEN] = {};   // connected from inside the cgroup
  char passive[TCPSCOPE_CC_NAME_LEN] = {};  // accepted from a listener made inside it
};

// In the child: one connection each way between `owner` and `plain`.
int connect_both_ways(const std::string& owner, const std::string& plain, Ends* ends) {
  sockaddr_in a{};
  // Passive: the listener is the owner's; client and accept() are plain's.
  if (!move_self_to(owner)) return 1;
  int ls = listen_on_loopback(&a);
  if (ls < 0 || !move_self_to(plain)) return 2;
  int c = socket(AF_INET, SOCK_STREAM, 0);
  if (connect(c, reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0) return 3;
  int s = accept(ls, nullptr, nullptr);
  if (s < 0) return 4;
  std::strncpy(ends->passive, congestion_control(s).c_str(), sizeof(ends->passive) - 1);
  close(s);
  close(c);
  close(ls);
  // Active: the listener is plain's; the connecting socket the owner's.
  ls = listen_on_loopback(&a);
  if (ls < 0 || !move_self_to(owner)) return 5;
  c = socket(AF_INET, SOCK_STREAM, 0);
  if (connect(c, reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0) return 6;
  std::strncpy(ends->active, congestion_control(c).c_str(), sizeof(ends->active) - 1);
  s = accept(ls, nullptr, nullptr);
  if (s >= 0) close(s);
  close(c);
  close(ls);
  return move_self_to(plain) ? 0 : 7;
}

class ServicePolicy : public ::testing::Test {
 protected:
  void SetUp() override {
    if (geteuid() != 0) GTEST_SKIP() << "loading BPF programs needs root";
    if (access("/sys/kernel/btf/vmlinux", R_OK) != 0) GTEST_SKIP() << "no kernel BTF";
    const std::string mount = cgroup2_mount_point();
    if (mount.empty()) GTEST_SKIP() << "no cgroup v2 hierarchy";
    std::string error;
    ASSERT_TRUE(ensure_congestion_controls({"bbr", "cubic", "reno"}, &error)) << error;
    top_ = mount + "/tcpscope-test-" + std::to_string(getpid());
    ASSERT_EQ(mkdir(top_.c_str(), 0755), 0) << top_ << ": " << strerror(errno);
    made_.push_back(top_);
    for (const auto& name : kCgroups) ASSERT_TRUE(make_cgroup(name));
    FlowProbeOptions opts;
    opts.ring_buffer_bytes = 1u << 20;
    opts.remote_trie_entries = 1024;
    opts.service_cgroup_entries = 64;
    opts.cgroup_path = top_;  // the policy runs for the test's sockets only
    std::string details;
    probe_ = FlowProbe::open_and_attach(opts, &error, &details);
    ASSERT_TRUE(probe_) << error << "\n" << details;
    ASSERT_TRUE(probe_->set_cc_policy_attached(true, &error)) << error;
    maps_ = std::make_unique<PolicyMaps>(*probe_);
  }

  void TearDown() override {
    maps_.reset();
    probe_.reset();
    // Children first; a reaped child's cgroup may stay busy for a moment.
    for (auto it = made_.rbegin(); it != made_.rend(); ++it) {
      const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(2);
      while (rmdir(it->c_str()) != 0 && errno == EBUSY && std::chrono::steady_clock::now() < deadline)
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
      EXPECT_EQ(access(it->c_str(), F_OK), -1) << "cgroup " << *it << " left behind: " << strerror(errno);
    }
  }

  bool make_cgroup(const std::string& name) {
    const std::string path = top_ + "/" + name;
    if (mkdir(path.c_str(), 0755) != 0) {
      ADD_FAILURE() << "mkdir " << path << ": " << strerror(errno);
      return false;
    }
    made_.push_back(path);
    return true;
  }

  // On cgroup v2 a directory's inode number is the cgroup's id.
  uint64_t id_of(const std::string& name) const {
    struct stat st {};
    EXPECT_EQ(stat((top_ + "/" + name).c_str(), &st), 0) << name << ": " << strerror(errno);
    return st.st_ino;
  }

  // Installs rules (name, services, cc), in order; no services: any socket.
  void install(const std::vector<std::tuple<std::string, std::vector<std::string>, std::string>>& rules) {
    Config config;
    for (const auto& [name, services, cc] : rules) {
      CcRule r;
      r.name = name;
      r.match.services = services;
      r.cc = cc;
      config.cc_policy.rules.push_back(r);
    }
    std::string error;
    auto policy = compile_policy(config, nullptr, &error);
    ASSERT_TRUE(policy) << error;
    ASSERT_GE(maps_->install(*policy, ++install_id_, {}, &error), 0) << error;
  }

  // What a socket of each cgroup gets, both ways: cgroup -> {active, passive}.
  std::map<std::string, std::pair<std::string, std::string>> connect_from_each() {
    std::map<std::string, std::pair<std::string, std::string>> out;
    for (const auto& name : cgroups_) {
      int p[2];
      EXPECT_EQ(pipe(p), 0);
      run_in_private_netns([&] {
        Ends ends;
        const int rc = connect_both_ways(top_ + "/" + name, top_ + "/plain", &ends);
        if (rc) return rc;
        return write(p[1], &ends, sizeof(ends)) == static_cast<ssize_t>(sizeof(ends)) ? 0 : 8;
      });
      close(p[1]);
      Ends ends;
      EXPECT_EQ(read(p[0], &ends, sizeof(ends)), static_cast<ssize_t>(sizeof(ends))) << name;
      close(p[0]);
      out[name] = {ends.active, ends.passive};
    }
    return out;
  }

  static std::pair<std::string, std::string> both(const std::string& cc) { return {cc, cc}; }

  std::string top_;
  std::vector<std::string> made_;
  std::vector<std::string> cgroups_ = kCgroups;
  std::unique_ptr<FlowProbe> probe_;
  std::unique_ptr<PolicyMaps> maps_;
  uint16_t install_id_ = 0;
};

TEST_F(ServicePolicy, ARuleNamingAServiceSetsTheCcOfItsSocketsAndOfItsChildCgroups) {
  if (IsSkipped() || HasFatalFailure()) return;
  std::string error;
  // The service's own cgroup only: its child is found by the walk up.
  ASSERT_TRUE(maps_->set_service_cgroups({{id_of("a.service"), "a.service"}, {id_of("b.service"), "b.service"},
                                          {id_of("c.scope"), "unnamed.service"}},
                                         &error))
      << error;
  install({{"a-reno", {"a.service"}, "reno"}, {"b-bbr", {"x.service", "b.service"}, "bbr"}, {"rest", {}, "cubic"}});
  auto got = connect_from_each();
  EXPECT_EQ(got["a.service"], both("reno"));
  EXPECT_EQ(got["a.service/worker"], both("reno"));
  EXPECT_EQ(got["b.service"], both("bbr"));  // rule 1, not the default: "rest" would give cubic
  EXPECT_EQ(got["c.scope"], both("cubic"));  // a service no rule names
  EXPECT_EQ(got["plain"], both("cubic"));
}

TEST_F(ServicePolicy, CgroupsComeAndGoWithoutAReinstallAndAReloadKeepsThem) {
  if (IsSkipped() || HasFatalFailure()) return;
  std::string error;
  install({{"b-reno", {"b.service"}, "reno"}, {"rest", {}, "cubic"}});
  // Before the resolver has said anything, no socket is a service's.
  EXPECT_EQ(connect_from_each()["b.service"], both("cubic"));

  ASSERT_TRUE(maps_->add_service_cgroup({id_of("b.service"), "b.service"}, &error)) << error;
  // A new container of the service, made and named after the install.
  ASSERT_TRUE(make_cgroup("b2.scope"));
  cgroups_.push_back("b2.scope");
  ASSERT_TRUE(maps_->add_service_cgroup({id_of("b2.scope"), "b.service"}, &error)) << error;
  auto got = connect_from_each();
  EXPECT_EQ(got["b.service"], both("reno"));
  EXPECT_EQ(got["b2.scope"], both("reno"));
  EXPECT_EQ(got["a.service"], both("cubic"));

  ASSERT_TRUE(maps_->remove_service_cgroup(id_of("b.service"), &error)) << error;
  got = connect_from_each();
  EXPECT_EQ(got["b.service"], both("cubic"));
  EXPECT_EQ(got["b2.scope"], both("reno"));

  // A reload whose rules name other services: the cgroups known are
  // written into its generation before it becomes active, twice over so
  // that both generations have been rewritten.
  ASSERT_TRUE(maps_->add_service_cgroup({id_of("a.service"), "a.service"}, &error)) << error;
  install({{"a-bbr", {"a.service"}, "bbr"}, {"rest", {}, "reno"}});
  got = connect_from_each();
  EXPECT_EQ(got["a.service"], both("bbr"));
  EXPECT_EQ(got["a.service/worker"], both("bbr"));
  EXPECT_EQ(got["b2.scope"], both("reno"));
  install({{"b-bbr", {"b.service"}, "bbr"}, {"rest", {}, "cubic"}});
  got = connect_from_each();
  EXPECT_EQ(got["a.service"], both("cubic"));
  EXPECT_EQ(got["b2.scope"], both("bbr"));
  EXPECT_EQ(got["b.service"], both("cubic"));  // removed above
  EXPECT_EQ(got["plain"], both("cubic"));

  // A full list in place of the known cgroups: b2.scope is no longer b's.
  ASSERT_TRUE(maps_->set_service_cgroups({{id_of("b.service"), "b.service"}}, &error)) << error;
  got = connect_from_each();
  EXPECT_EQ(got["b.service"], both("bbr"));
  EXPECT_EQ(got["b2.scope"], both("cubic"));
}

TEST_F(ServicePolicy, AFullMapRefusesTheCgroupAndSaysSo) {
  if (IsSkipped() || HasFatalFailure()) return;
  install({{"s", {"s.service"}, "reno"}});
  std::string error;
  // The map holds 64 (SetUp); the ids need not exist for the map.
  std::vector<ServiceCgroup> many;
  for (uint64_t id = 1; id <= 65; ++id) many.push_back({id << 40, "s.service"});
  EXPECT_FALSE(maps_->set_service_cgroups(many, &error));
  EXPECT_NE(error.find("service_cgroups"), std::string::npos) << error;
  EXPECT_NE(error.find("errno 7"), std::string::npos) << error;  // E2BIG
  // Cgroups of no named service take no entry; one that no longer is a
  // named service's leaves room for another that now is.
  many.front().service = "other.service";
  for (uint64_t id = 66; id <= 200; ++id) many.push_back({id << 40, "other.service"});
  EXPECT_TRUE(maps_->set_service_cgroups(many, &error)) << error;
  EXPECT_FALSE(maps_->add_service_cgroup({1ull << 40, "s.service"}, &error));  // 2..65 are
  EXPECT_TRUE(maps_->remove_service_cgroup(2ull << 40, &error)) << error;
  EXPECT_TRUE(maps_->add_service_cgroup({1ull << 40, "s.service"}, &error)) << error;
}

}  // namespace
}  // namespace tcpscope
