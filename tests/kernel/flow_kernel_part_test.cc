// The flow record's kernel part (tcpscope_flow_kernel) is filled by the BPF
// code in the record's units, and the daemon only copies it: what the
// record says must be what the kernel's own tcp_info says of the same
// socket at the same moment. An open flow's record (the socket iterator's
// snapshot, filled as the close record is) is read between two tcp_info
// readings of an idle connection.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <linux/tcp.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "attached_probe.h"
#include "kernel/flow_snapshot.h"
#include "netns_child.h"

namespace tcpscope {
namespace {

constexpr size_t kResponseBytes = 2000000;

// What the child hands the parent through a pipe.
struct Reading {
  tcp_info before{};
  tcp_info after{};
  tcpscope_flow_event record{};
  int records_of_the_socket = 0;
};

bool write_all(int fd, size_t n) {
  std::vector<char> buf(1 << 16, 'r');
  while (n > 0) {
    const ssize_t w = write(fd, buf.data(), std::min(n, buf.size()));
    if (w <= 0) return false;
    n -= static_cast<size_t>(w);
  }
  return true;
}

bool read_all(int fd, size_t n) {
  std::vector<char> buf(1 << 16);
  while (n > 0) {
    const ssize_t r = read(fd, buf.data(), std::min(n, buf.size()));
    if (r <= 0) return false;
    n -= static_cast<size_t>(r);
  }
  return true;
}

bool info_of(int fd, tcp_info* info) {
  socklen_t len = sizeof(*info);
  return getsockopt(fd, IPPROTO_TCP, TCP_INFO, info, &len) == 0 && len == sizeof(*info);
}

// The values the record's kernel part has counterparts of: equal in both
// readings, the socket did not change between them.
bool same_values(const tcp_info& a, const tcp_info& b) {
  return a.tcpi_snd_cwnd == b.tcpi_snd_cwnd && a.tcpi_snd_ssthresh == b.tcpi_snd_ssthresh &&
         a.tcpi_snd_mss == b.tcpi_snd_mss && a.tcpi_rttvar == b.tcpi_rttvar && a.tcpi_segs_in == b.tcpi_segs_in &&
         a.tcpi_bytes_retrans == b.tcpi_bytes_retrans && a.tcpi_delivery_rate == b.tcpi_delivery_rate &&
         a.tcpi_pacing_rate == b.tcpi_pacing_rate && a.tcpi_delivered_ce == b.tcpi_delivered_ce &&
         a.tcpi_options == b.tcpi_options;
}

// Runs in the child: ECN on (this namespace's own sysctl), a 2 MB response
// read whole, then, once the sender is idle, tcp_info / snapshot / tcp_info
// of the sending (accepted) socket until both readings agree, 5 tries.
int respond_then_read(int link_fd, int to_parent) {
  int ecn = open("/proc/sys/net/ipv4/tcp_ecn", O_WRONLY);
  if (ecn < 0 || write(ecn, "1", 1) != 1) return 6;
  close(ecn);
  sockaddr_in a{};
  const int listener = listen_on_loopback(&a);
  if (listener < 0) return 1;
  const int client = socket(AF_INET, SOCK_STREAM, 0);
  if (connect(client, reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0) return 2;
  const int server = accept(listener, nullptr, nullptr);
  if (server < 0) return 3;
  std::thread reader([client] { read_all(client, kResponseBytes); });
  const bool sent = write_all(server, kResponseBytes);
  reader.join();
  if (!sent) return 4;
  sockaddr_in local{};
  socklen_t len = sizeof(local);
  if (getsockname(server, reinterpret_cast<sockaddr*>(&local), &len) != 0) return 5;
  Reading r;
  for (int attempt = 0; attempt < 5; ++attempt) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));  // every byte acknowledged
    std::vector<tcpscope_flow_event> flows;
    std::string error;
    if (!info_of(server, &r.before) || !read_open_flows(link_fd, &flows, &error) || !info_of(server, &r.after))
      return 7;
    r.records_of_the_socket = 0;
    for (const auto& f : flows)
      if (f.id.dir == TCPSCOPE_DIR_PASSIVE && f.id.sport == ntohs(local.sin_port)) {
        r.record = f;
        ++r.records_of_the_socket;
      }
    if (same_values(r.before, r.after)) break;
  }
  close(client);
  close(server);
  close(listener);
  return write(to_parent, &r, sizeof(r)) == sizeof(r) ? 0 : 8;
}

TEST_F(AttachedProbe, TheFlowRecordsKernelPartIsWhatTcpInfoSays) {
  const int link_fd = probe_->snapshot_link_fd();
  if (link_fd < 0) GTEST_SKIP() << "no TCP socket iterator on this kernel: no open-flow snapshots";
  int p[2];
  ASSERT_EQ(pipe(p), 0) << strerror(errno);
  run_in_private_netns([&] {
    close(p[0]);
    return respond_then_read(link_fd, p[1]);
  });
  close(p[1]);
  Reading r;
  const ssize_t got = read(p[0], &r, sizeof(r));
  close(p[0]);
  ASSERT_EQ(got, static_cast<ssize_t>(sizeof(r))) << "the child handed over no reading";
  ASSERT_EQ(r.records_of_the_socket, 1);
  ASSERT_TRUE(same_values(r.before, r.after)) << "the idle socket changed between its readings, 5 times";
  const tcp_info& i = r.before;
  const tcpscope_flow_kernel& k = r.record.kernel;

  EXPECT_EQ(k.cwnd, i.tcpi_snd_cwnd);
  EXPECT_GE(k.max_cwnd, k.cwnd) << "the largest cwnd over the flow's life";
  EXPECT_EQ(k.ssthresh, i.tcpi_snd_ssthresh);
  EXPECT_EQ(k.mss, i.tcpi_snd_mss);
  EXPECT_EQ(k.rttvar_us, i.tcpi_rttvar);
  EXPECT_EQ(k.segs_in, i.tcpi_segs_in);
  EXPECT_EQ(k.bytes_retrans, i.tcpi_bytes_retrans);
  EXPECT_EQ(k.lost_segs, 0u) << "loopback loses nothing";
  EXPECT_EQ(k.delivered_ce, i.tcpi_delivered_ce);
  EXPECT_EQ(k.ecn, 1) << "ECN negotiated (net.ipv4.tcp_ecn=1 in the namespace)";
  EXPECT_TRUE(i.tcpi_options & TCPI_OPT_ECN);
  // tcp_info's rates are bytes/s; the record's bits/s, the delivery rate
  // divided once (so up to 7 b/s above tcp_info's x 8).
  ASSERT_GT(i.tcpi_delivery_rate, 0u) << "the response left a delivery-rate sample";
  EXPECT_GE(k.delivery_rate_bps, i.tcpi_delivery_rate * 8);
  EXPECT_LT(k.delivery_rate_bps, i.tcpi_delivery_rate * 8 + 8);
  ASSERT_NE(i.tcpi_pacing_rate, 0u);
  EXPECT_EQ(k.pacing_rate_bps, i.tcpi_pacing_rate == ~0ULL ? 0 : i.tcpi_pacing_rate * 8);
  for (uint8_t b : k.pad) EXPECT_EQ(b, 0);
}

}  // namespace
}  // namespace tcpscope
