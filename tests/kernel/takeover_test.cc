// A restart's takeover on the real BPF programs (docs/packaging.md "Restarts"): a
// second probe opened on what the first hands over reads the records the
// first one's ring still holds, records every connection that closes while
// both are attached exactly once, and keeps the start of a connection open
// across it; a probe whose maps differ starts afresh and says why.
#include <arpa/inet.h>
#include <bpf/bpf.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <map>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include "attached_probe.h"
#include "kernel/ring_reader.h"
#include "netns_child.h"
#include "os/cgroup_path.h"

namespace tcpscope {
namespace {

constexpr int kBeforeConnections = 20;  // closed before the takeover, never read by the first probe
constexpr size_t kHalfBytes = 100000;   // the long connection's payload before and after it
// The first probe's ring: nothing reads it until the next probe does, so it
// holds every record of the connections made while the restart runs.
constexpr uint32_t kRingBytes = 32u << 20;
// Those connections, at most: two records of 624 bytes each (a close record
// and the ring's header), 30 MiB of the ring. This machine makes about 30,000
// loopback connections a second and takes over in about 100 ms, so the churn
// lasts about eight takeovers.
constexpr int kMaxDuringConnections = 25000;

uint64_t monotonic_ns() {
  timespec ts{};
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<uint64_t>(ts.tv_sec) * 1000000000ull + static_cast<uint64_t>(ts.tv_nsec);
}

bool send_and_receive(int from, int to, size_t n) {
  std::vector<char> buf(1 << 16, 'x');
  size_t sent = 0, got = 0;
  while (got < n) {
    if (sent < n) {
      ssize_t w = send(from, buf.data(), std::min(n - sent, buf.size()), MSG_DONTWAIT);
      if (w > 0) sent += static_cast<size_t>(w);
    }
    ssize_t r = recv(to, buf.data(), buf.size(), MSG_DONTWAIT);
    if (r > 0) got += static_cast<size_t>(r);
    if (r == 0) return false;
  }
  return true;
}

int one_exchange(const sockaddr_in& a, int ls) {
  int c = socket(AF_INET, SOCK_STREAM, 0);
  if (connect(c, reinterpret_cast<const sockaddr*>(&a), sizeof(a)) != 0) return 1;
  int s = accept(ls, nullptr, nullptr);
  if (s < 0 || !send_and_receive(c, s, 1)) return 2;
  close(c);
  close(s);
  return 0;
}

struct Pipe {
  int fd[2] = {-1, -1};
  Pipe() { EXPECT_EQ(pipe(fd), 0); }
  ~Pipe() {
    for (int f : fd)
      if (f >= 0) close(f);
  }
};

// The descriptors of `h` duplicated: what a parcel carries to the next daemon.
Handover duplicated(const Handover& h) {
  Handover d = h;
  for (auto* list : {&d.maps, &d.links})
    for (auto& o : *list) o.fd = dup(o.fd);
  return d;
}

struct Ends {
  int records = 0;
  int partial = 0;
  int whole_long = 0;  // the long connection's ends, whole, with every byte
  uint64_t long_start_ns = 0;
};

class Takeover : public AttachedProbe {
 protected:
  uint32_t ring_buffer_bytes() const override { return kRingBytes; }

  // Drains `probe`'s ring until `want` records of `netns` arrived (or 5 s).
  Ends read_ends(FlowProbe& probe, uint32_t netns, int want, uint16_t long_port) {
    Ends ends;
    // An end is its ports and its start: loopback reuses a port in
    // TIME_WAIT for a new connection (tcp_tw_reuse 2), a new end.
    std::map<std::tuple<uint16_t, uint16_t, uint64_t>, int> per_end;
    auto on_flow = [&](const tcpscope_flow_event& ev) {
      if (ev.id.netns != netns) return;
      ++ends.records;
      ++per_end[{ev.id.sport, ev.id.dport, ev.id.start_ns}];
      if (ev.flags & TCPSCOPE_F_PARTIAL) ++ends.partial;
      if ((ev.id.sport == long_port || ev.id.dport == long_port) && !(ev.flags & TCPSCOPE_F_PARTIAL) &&
          ev.bytes_acked + ev.bytes_received == 2 * kHalfBytes) {
        ++ends.whole_long;
        ends.long_start_ns = ev.id.start_ns;
      }
    };
    RingReader::Handlers handlers;
    handlers.flow = on_flow;
    handlers.transfer = [](const tcpscope_transfer_event&) {};
    handlers.close = [&](const tcpscope_close_event& ev) { on_flow(ev.flow); };
    std::string error;
    auto reader = RingReader::create(probe.ring_buffer_fd(), probe.ring_buffer_bytes(), std::move(handlers), &error);
    EXPECT_TRUE(reader) << error;
    if (!reader) return ends;
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
    while (ends.records < want && std::chrono::steady_clock::now() < deadline)
      if (reader->drain(1 << 20) == 0) std::this_thread::sleep_for(std::chrono::milliseconds(20));
    for (const auto& [end, n] : per_end)
      EXPECT_EQ(n, 1) << "end " << std::get<0>(end) << "->" << std::get<1>(end) << " started at "
                      << std::get<2>(end) << " recorded " << n << " times";
    return ends;
  }
};

TEST_F(Takeover, TheNextProbeReadsOnEveryRecordOnceAndKeepsTheOpenFlowsStart) {
  Pipe ready, go, report;
  uint64_t takeover_ns = 0, taken_over_ns = 0;
  std::unique_ptr<FlowProbe> next;
  std::string error, details, note;
  // The restart, while the child's traffic runs: the first probe never
  // drains; the second opens on its handover, then the first goes.
  std::thread restart([&] {
    char b;
    if (read(ready.fd[0], &b, 1) != 1) return;
    Handover h = duplicated(probe_->handover());
    FlowProbeOptions opts;
    opts.ring_buffer_bytes = kRingBytes;
    opts.remote_trie_entries = 1024;
    opts.previous = &h;
    takeover_ns = monotonic_ns();
    next = FlowProbe::open_and_attach(opts, &error, &details);
    taken_over_ns = monotonic_ns();
    probe_.reset();
    if (next) note = next->takeover_note();
    (void)!write(go.fd[1], "g", 1);
  });

  // In the child: a long connection opened and half sent, connections closed
  // (their records queued, unread), then churn while the restart runs, and
  // the long connection's second half and close after it.
  const uint32_t netns = run_in_private_netns([&] {
    sockaddr_in a{};
    int ls = listen_on_loopback(&a);
    if (ls < 0) return 1;
    int lc = socket(AF_INET, SOCK_STREAM, 0);
    if (connect(lc, reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0) return 2;
    int lsrv = accept(ls, nullptr, nullptr);
    sockaddr_in local{};
    socklen_t len = sizeof(local);
    getsockname(lc, reinterpret_cast<sockaddr*>(&local), &len);
    if (lsrv < 0 || !send_and_receive(lc, lsrv, kHalfBytes)) return 3;
    for (int i = 0; i < kBeforeConnections; ++i)
      if (one_exchange(a, ls)) return 4;
    if (write(ready.fd[1], "r", 1) != 1) return 5;
    int during = 0;
    pollfd p{go.fd[0], POLLIN, 0};
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
    while (poll(&p, 1, 0) == 0 && std::chrono::steady_clock::now() < deadline) {
      if (during == kMaxDuringConnections) {
        poll(&p, 1, 100);
        continue;
      }
      if (one_exchange(a, ls)) return 6;
      ++during;
    }
    if (!send_and_receive(lsrv, lc, kHalfBytes)) return 7;
    close(lc);
    close(lsrv);
    close(ls);
    const uint32_t out[2] = {static_cast<uint32_t>(during), ntohs(local.sin_port)};
    return write(report.fd[1], out, sizeof(out)) == sizeof(out) ? 0 : 8;
  });
  restart.join();
  ASSERT_TRUE(next) << error << "\n" << details;
  EXPECT_NE(note.find("took over"), std::string::npos) << note;
  uint32_t during_and_port[2] = {0, 0};
  ASSERT_EQ(read(report.fd[0], during_and_port, sizeof(during_and_port)),
            static_cast<ssize_t>(sizeof(during_and_port)));
  const int connections = kBeforeConnections + static_cast<int>(during_and_port[0]) + 1;
  std::printf("connections: %d closed before the takeover, %u during its %.0f ms, 1 open across it\n",
              kBeforeConnections, during_and_port[0], (taken_over_ns - takeover_ns) / 1e6);

  const Ends ends = read_ends(*next, netns, 2 * connections, static_cast<uint16_t>(during_and_port[1]));
  EXPECT_EQ(ends.records, 2 * connections);
  EXPECT_EQ(ends.partial, 0);
  EXPECT_EQ(ends.whole_long, 2) << "the long connection's two ends, whole, with both halves' bytes";
  EXPECT_LT(ends.long_start_ns, takeover_ns) << "its start is the first SYN, before the takeover";
  EXPECT_EQ(next->counter(TCPSCOPE_CNT_RECORDS_LOST), 0u);
}

TEST_F(Takeover, MapsOfAnotherSizeAreNotTakenOverAndTheProbeStartsAfresh) {
  Handover h = duplicated(probe_->handover());
  FlowProbeOptions opts;
  opts.ring_buffer_bytes = kRingBytes / 2;
  opts.remote_trie_entries = 1024;
  opts.previous = &h;
  std::string error, details;
  auto next = FlowProbe::open_and_attach(opts, &error, &details);
  ASSERT_TRUE(next) << error << "\n" << details;
  EXPECT_FALSE(next->took_over());
  EXPECT_NE(next->takeover_note().find("cannot be taken over (map 'events' is of another shape or size"),
            std::string::npos)
      << next->takeover_note();
  EXPECT_NE(next->ring_buffer_fd(), probe_->ring_buffer_fd());
  probe_.reset();
  // It records on its own: a connection made now has both ends in its ring.
  const uint32_t netns = run_in_private_netns([] {
    sockaddr_in a{};
    int ls = listen_on_loopback(&a);
    return ls < 0 ? 1 : one_exchange(a, ls);
  });
  const Ends ends = read_ends(*next, netns, 2, 0);
  EXPECT_EQ(ends.records, 2);
}

// {program name: (link id, the id of the program it runs)} of `probe`'s links.
std::map<std::string, std::pair<uint32_t, uint32_t>> links_of(const FlowProbe& probe) {
  std::map<std::string, std::pair<uint32_t, uint32_t>> out;
  for (const auto& l : probe.handover().links) {
    bpf_link_info info{};
    uint32_t len = sizeof(info);
    EXPECT_EQ(bpf_obj_get_info_by_fd(l.fd, &info, &len), 0) << l.name;
    out[l.name] = {info.id, info.prog_id};
  }
  return out;
}

TEST(TakeoverOfCgroupLinks, TheLinksStayAndRunTheNextProbesPrograms) {
  if (geteuid() != 0) GTEST_SKIP() << "loading BPF programs needs root";
  const std::string root = cgroup2_mount_point();
  if (root.empty()) GTEST_SKIP() << "no cgroup v2 hierarchy";
  const std::string cgroup = root + "/tcpscope-takeover-" + std::to_string(getpid());
  ASSERT_EQ(mkdir(cgroup.c_str(), 0755), 0) << cgroup << ": " << strerror(errno);
  {
    FlowProbeOptions opts;
    opts.ring_buffer_bytes = 1u << 20;
    opts.remote_trie_entries = 1024;
    opts.cgroup_path = cgroup;
    std::string error, details;
    auto first = FlowProbe::open_and_attach(opts, &error, &details);
    ASSERT_TRUE(first) << error << "\n" << details;
    ASSERT_TRUE(first->set_cc_policy_attached(true, &error)) << error;
    const auto before = links_of(*first);
    for (const char* name : {"cc_policy", "watch_setsockopt", "guard_sysctl"})
      ASSERT_TRUE(before.count(name)) << name << " is not linked";

    Handover h = duplicated(first->handover());
    opts.previous = &h;
    auto next = FlowProbe::open_and_attach(opts, &error, &details);
    ASSERT_TRUE(next) << error << "\n" << details;
    ASSERT_TRUE(next->took_over()) << next->takeover_note();
    first.reset();
    ASSERT_TRUE(next->set_cc_policy_attached(true, &error)) << error;  // linked already: a no-op
    const auto after = links_of(*next);
    for (const char* name : {"cc_policy", "watch_setsockopt", "guard_sysctl"}) {
      ASSERT_TRUE(after.count(name)) << name << " is not linked after the takeover";
      EXPECT_EQ(after.at(name).first, before.at(name).first) << name << ": not the same link";
      EXPECT_NE(after.at(name).second, before.at(name).second) << name << ": still the first probe's program";
      const int prog = bpf_prog_get_fd_by_id(after.at(name).second);
      ASSERT_GE(prog, 0) << name << ": the program it runs is gone";
      bpf_prog_info info{};
      uint32_t len = sizeof(info);
      EXPECT_EQ(bpf_obj_get_info_by_fd(prog, &info, &len), 0);
      EXPECT_EQ(std::string(info.name), std::string(name).substr(0, sizeof(info.name) - 1));
      close(prog);
    }
    // Detaching the policy takes the adopted link down.
    ASSERT_TRUE(next->set_cc_policy_attached(false, &error)) << error;
    EXPECT_FALSE(links_of(*next).count("cc_policy"));
  }
  EXPECT_EQ(rmdir(cgroup.c_str()), 0) << cgroup << ": " << strerror(errno);
}

}  // namespace
}  // namespace tcpscope
