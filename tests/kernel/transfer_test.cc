// Drives the real BPF programs through request/response exchanges on a
// kept-alive loopback connection and checks the transfer records the kernel
// side hands over: one per request and per response, exact payload bytes,
// seq in start order, and wait_us covering the server's think time; and
// where a flow's receive side ends when the wake-ups of its data were missed,
// and the record of a flow whose close the kernel skipped.
#include <arpa/inet.h>
#include <bpf/libbpf.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "attached_probe.h"
#include "kernel/ring_reader.h"
#include "netns_child.h"
#include "tcpscope.skel.h"

namespace tcpscope {
namespace {

// How late a woken thread may run, on top of what it waited for: 20 ms. On
// an emulated CPU (tests/real_kernels' TCG runs set TCPSCOPE_TEST_EMULATED)
// timing is not checked: a busy host delayed a wake-up there by 200 ms.
uint32_t scheduling_slack_us() {
  const char* emulated = std::getenv("TCPSCOPE_TEST_EMULATED");
  return emulated && *emulated ? UINT32_MAX / 2 : 20000u;
}

constexpr size_t kRequestBytes = 100;
constexpr int kThinkMs = 30;  // the server's delay before each response
const std::vector<size_t> kResponseBytes = {50000, 5000000, 50000};
constexpr int kClientRcvBuf = 128 * 1024;
// Responses this large are read slowly, so that the client's window limits them.
constexpr size_t kSlowReadBytes = 1000000;

bool write_all(int fd, size_t n) {
  std::vector<char> buf(std::min<size_t>(n, 1 << 16), 'r');
  while (n > 0) {
    ssize_t w = write(fd, buf.data(), std::min(n, buf.size()));
    if (w <= 0) return false;
    n -= static_cast<size_t>(w);
  }
  return true;
}

// A positive `pause` makes a slow reader: the sender's window fills.
bool read_all(int fd, size_t n, std::chrono::microseconds pause = {}) {
  std::vector<char> buf(1 << 16);
  while (n > 0) {
    ssize_t r = read(fd, buf.data(), std::min(n, buf.size()));
    if (r <= 0) return false;
    n -= static_cast<size_t>(r);
    if (pause.count()) std::this_thread::sleep_for(pause);
  }
  return true;
}

// A connected loopback pair, closed with the object: the listener, the
// client and the accepted server end.
struct LoopbackConnection {
  int listener = -1, client = -1, server = -1;
  ~LoopbackConnection() {
    for (int fd : {client, server, listener})
      if (fd >= 0) close(fd);
  }
  // 0, or the child's exit code for the step that failed. A positive
  // `client_rcvbuf` is set before connect() (the window follows it).
  int open(int client_rcvbuf = 0) {
    sockaddr_in a{};
    if ((listener = listen_on_loopback(&a)) < 0) return 1;
    client = socket(AF_INET, SOCK_STREAM, 0);
    if (client_rcvbuf > 0 &&
        setsockopt(client, SOL_SOCKET, SO_RCVBUF, &client_rcvbuf, sizeof(client_rcvbuf)) != 0)
      return 5;
    if (connect(client, reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0) return 2;
    if ((server = accept(listener, nullptr, nullptr)) < 0) return 3;
    return 0;
  }
};

// One kept-alive connection: per response size, the client sends a request,
// the server reads it, thinks, and answers; the client reads the answer and
// pauses before the next request. Runs in the child.
int keep_alive_exchange() {
  LoopbackConnection conn;
  // A small window and a slow reader: the large response is limited by the
  // client's window for most of its time, which its record must say.
  if (int failed = conn.open(kClientRcvBuf)) return failed;
  const int c = conn.client, s = conn.server;
  std::thread server([s] {
    for (size_t bytes : kResponseBytes) {
      if (!read_all(s, kRequestBytes)) return;
      std::this_thread::sleep_for(std::chrono::milliseconds(kThinkMs));
      if (!write_all(s, bytes)) return;
    }
  });
  bool ok = true;
  for (size_t bytes : kResponseBytes) {
    const auto pause = bytes >= kSlowReadBytes ? std::chrono::microseconds(1000) : std::chrono::microseconds(0);
    ok = ok && write_all(c, kRequestBytes) && read_all(c, bytes, pause);
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  server.join();
  return ok ? 0 : 4;
}

// One request, one response written in kPieces pieces with a pause between
// them: loopback acknowledges each piece before the next is written, yet no
// request came in between, so it is one send transfer. Runs in the child.
constexpr int kPieces = 10;
constexpr size_t kPieceBytes = 10000;

int response_in_pieces() {
  LoopbackConnection conn;
  if (int failed = conn.open()) return failed;
  const int c = conn.client, s = conn.server;
  bool ok = write_all(c, kRequestBytes) && read_all(s, kRequestBytes);
  for (int i = 0; ok && i < kPieces; ++i) {
    ok = write_all(s, kPieceBytes);
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  ok = ok && read_all(c, kPieces * kPieceBytes);
  return ok ? 0 : 4;
}

// A response whose arrival wakes no program (the parent detaches
// sk_data_ready's two programs while it comes in: a wake-up the kernel
// skipped), then the server's FIN kIdleBeforeFinMs later, with the programs
// back. The client's record must end where the data arrived, not at that
// FIN. Runs in the child; `to_parent` and `from_parent` are the pipe ends
// it steps through that with: "detach" and the time the last byte was read.
constexpr size_t kUnseenResponseBytes = 200000;
constexpr int kIdleBeforeFinMs = 300;

bool wait_readable(int fd, int timeout_ms) {
  pollfd p{fd, POLLIN, 0};
  return poll(&p, 1, timeout_ms) == 1;
}

uint64_t monotonic_ns() {
  timespec ts{};
  clock_gettime(CLOCK_MONOTONIC, &ts);  // bpf_ktime_get_ns()'s clock
  return uint64_t(ts.tv_sec) * 1000000000ULL + uint64_t(ts.tv_nsec);
}

// The request, then the response while the parent has sk_data_ready's
// programs detached, read whole; then the time it was read goes to the
// parent, which attaches them again. False if a step failed.
bool request_then_unseen_response(int c, int s, int to_parent, int from_parent) {
  char ack;
  bool ok = write_all(c, kRequestBytes) && read_all(s, kRequestBytes);
  ok = ok && write(to_parent, "d", 1) == 1 && wait_readable(from_parent, 10000) && read(from_parent, &ack, 1) == 1;
  ok = ok && write_all(s, kUnseenResponseBytes) && read_all(c, kUnseenResponseBytes);
  const uint64_t read_ns = monotonic_ns();
  return ok && write(to_parent, &read_ns, sizeof(read_ns)) == sizeof(read_ns) && wait_readable(from_parent, 10000) &&
         read(from_parent, &ack, 1) == 1;
}

int response_unseen_then_late_fin(int to_parent, int from_parent) {
  LoopbackConnection conn;
  if (int failed = conn.open()) return failed;
  const int c = conn.client, s = conn.server;
  char eof;
  bool ok = request_then_unseen_response(c, s, to_parent, from_parent);
  std::this_thread::sleep_for(std::chrono::milliseconds(kIdleBeforeFinMs));
  ok = ok && shutdown(s, SHUT_WR) == 0 && read(c, &eof, 1) == 0;
  return ok ? 0 : 4;
}

// A response whose arrival wakes no program, read whole, then the next
// request and its response with the programs back: a wake-up skipped under
// load (a preempted program's CPU running the other copy too). The client's
// next write must still close the first response's receive transfer at its
// bytes, not let the next response's arrival take them.
constexpr size_t kSecondResponseBytes = 30000;

int response_unseen_then_next_request(int to_parent, int from_parent) {
  LoopbackConnection conn;
  if (int failed = conn.open()) return failed;
  const int c = conn.client, s = conn.server;
  bool ok = request_then_unseen_response(c, s, to_parent, from_parent);
  ok = ok && write_all(c, kRequestBytes) && read_all(s, kRequestBytes);
  ok = ok && write_all(s, kSecondResponseBytes) && read_all(c, kSecondResponseBytes);
  return ok ? 0 : 4;
}

// A request and its response, then both ends close while the parent has
// the state-change program detached (closes the kernel skipped): the socket
// is destroyed with its record not yet out. Runs in the child; the time it
// sends the parent is when both ends had closed.
int exchange_then_unseen_close(int to_parent, int from_parent) {
  auto conn = std::make_unique<LoopbackConnection>();
  if (int failed = conn->open()) return failed;
  const int c = conn->client, s = conn->server;
  char ack, eof;
  bool ok = write_all(c, kRequestBytes) && read_all(s, kRequestBytes) && write_all(s, kSecondResponseBytes) &&
            read_all(c, kSecondResponseBytes);
  ok = ok && write(to_parent, "d", 1) == 1 && wait_readable(from_parent, 10000) && read(from_parent, &ack, 1) == 1;
  // The server closes first (its end waits in TIME_WAIT); the client's
  // close answers the FIN, and the server's last ACK ends both.
  ok = ok && shutdown(s, SHUT_WR) == 0 && read(c, &eof, 1) == 0;
  conn.reset();
  std::this_thread::sleep_for(std::chrono::milliseconds(50));  // loopback: both are gone by now
  const uint64_t closed_ns = monotonic_ns();
  return ok && write(to_parent, &closed_ns, sizeof(closed_ns)) == sizeof(closed_ns) &&
                 wait_readable(from_parent, 10000) && read(from_parent, &ack, 1) == 1
             ? 0
             : 4;
}

// A response whose arrival wakes no program, then, kIdleBeforeFinMs later,
// the client aborts (SO_LINGER 0: RST, no FIN, no data-ready): the close
// must place the receive side's end where the data arrived.
int response_unseen_then_abort(int to_parent, int from_parent) {
  LoopbackConnection conn;
  if (int failed = conn.open()) return failed;
  const int c = conn.client, s = conn.server;
  bool ok = request_then_unseen_response(c, s, to_parent, from_parent);
  std::this_thread::sleep_for(std::chrono::milliseconds(kIdleBeforeFinMs));
  const linger abort{1, 0};
  ok = ok && setsockopt(c, SOL_SOCKET, SO_LINGER, &abort, sizeof(abort)) == 0;
  return ok ? 0 : 4;
}

class TransferProbe : public AttachedProbe {
 protected:
  void SetUp() override {
    AttachedProbe::SetUp();
    if (IsSkipped() || HasFatalFailure()) return;
    ring_ = ring_buffer__new(probe_->ring_buffer_fd(), &TransferProbe::on_sample, this, nullptr);
    ASSERT_TRUE(ring_) << "ring_buffer__new: " << strerror(errno);
  }
  void TearDown() override {
    if (ring_) ring_buffer__free(ring_);
  }

  static int on_sample(void* ctx, void* data, size_t size) {
    auto* self = static_cast<TransferProbe*>(ctx);
    switch (sample_kind(data, size)) {
      case SampleKind::kTransfer: {
        tcpscope_transfer_event t;
        std::memcpy(&t, data, sizeof(t));
        self->transfers_.push_back(t);
        break;
      }
      case SampleKind::kClose: {
        tcpscope_close_event c;
        std::memcpy(&c, data, sizeof(c));
        for (uint32_t i = 0; i < c.n_transfers && i < TCPSCOPE_CLOSE_TRANSFERS; ++i)
          self->transfers_.push_back(c.transfers[i]);
        self->flows_.push_back(c.flow);
        break;
      }
      case SampleKind::kFlow: {
        tcpscope_flow_event f;
        std::memcpy(&f, data, sizeof(f));
        self->flows_.push_back(f);
        break;
      }
      case SampleKind::kMalformed:
        break;
    }
    return 0;
  }

  // Reads the ring until both ends of the child's connection have their
  // flow records (the passive end closes on the final ACK, which may trail
  // the child's exit), at most 5 s; returns how many it has.
  long wait_for_both_ends(uint32_t netns) {
    auto ours = [&] {
      return std::count_if(flows_.begin(), flows_.end(), [&](const auto& f) { return f.id.netns == netns; });
    };
    auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
    // The kernel wakes readers only for a filling ring: consume, do not poll.
    while (ours() < 2 && std::chrono::steady_clock::now() < deadline) {
      ring_buffer__consume(ring_);
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    return ours();
  }

  // The client's record of the child's connection, once both ends have
  // theirs; nullptr after a failure.
  const tcpscope_flow_event* client_record(uint32_t netns) {
    const long ends = wait_for_both_ends(netns);
    EXPECT_EQ(ends, 2);
    for (const auto& f : flows_)
      if (f.id.netns == netns && f.id.dir == TCPSCOPE_DIR_ACTIVE) return &f;
    return nullptr;
  }

  // Transfers of `netns`'s socket on local port `lport`, in seq order.
  std::vector<tcpscope_transfer_event> of(uint32_t netns, uint16_t lport) const {
    std::vector<tcpscope_transfer_event> out;
    for (const auto& t : transfers_)
      if (t.id.netns == netns && t.id.sport == lport) out.push_back(t);
    std::sort(out.begin(), out.end(), [](const auto& x, const auto& y) { return x.seq < y.seq; });
    return out;
  }

  // Runs `child(to_parent, from_parent)` in a private netns with one of the
  // probe's programs detached between its two steps (events the kernel
  // skipped, as it does for a program already running on that CPU): the
  // child writes one byte ("detach") and waits for the reply, then writes an
  // 8-byte time of its own, kept in `*child_ns` ("attach again"), and waits
  // for the reply. Returns the child's netns, or 0 after a failure.
  uint32_t run_with_program_detached(bpf_link** link, bpf_program* prog, int (*child)(int, int),
                                     uint64_t* child_ns) {
    int to_parent[2], from_parent[2];
    if (pipe(to_parent) != 0 || pipe(from_parent) != 0) {
      ADD_FAILURE() << "pipe: " << strerror(errno);
      return 0;
    }
    std::string driver_error;
    std::thread driver([&] {
      char step;
      if (!wait_readable(to_parent[0], 10000) || read(to_parent[0], &step, 1) != 1) {
        driver_error = "the child never asked to detach";
        return;
      }
      bpf_link__destroy(*link);
      *link = nullptr;
      if (write(from_parent[1], "k", 1) != 1) return;
      if (!wait_readable(to_parent[0], 10000) ||
          read(to_parent[0], child_ns, sizeof(*child_ns)) != sizeof(*child_ns)) {
        driver_error = "the child never finished its step";
        return;
      }
      *link = bpf_program__attach(prog);
      if (!*link)
        driver_error = std::string("re-attaching ") + bpf_program__name(prog) + ": " + strerror(errno);
      if (write(from_parent[1], "k", 1) != 1) return;
    });
    const uint32_t netns = run_in_private_netns([&] {
      // A link lives while any descriptor of it is open: the child's copy
      // would keep the program attached.
      close(bpf_link__fd(*link));
      close(to_parent[0]);
      close(from_parent[1]);
      return child(to_parent[1], from_parent[0]);
    });
    driver.join();
    for (int fd : {to_parent[0], to_parent[1], from_parent[0], from_parent[1]}) close(fd);
    if (!driver_error.empty()) {
      ADD_FAILURE() << driver_error;
      return 0;
    }
    return netns;
  }

  // sk_data_ready's program detached: wake-ups the kernel skipped.
  uint32_t run_with_wake_ups_missed(int (*child)(int, int), uint64_t* read_ns) {
    tcpscope_bpf* skel = probe_->skeleton();
    return run_with_program_detached(&skel->links.on_data_ready, skel->progs.on_data_ready, child, read_ns);
  }

  // The state-change program detached: state changes the kernel skipped.
  uint32_t run_with_state_changes_missed(int (*child)(int, int), uint64_t* closed_ns) {
    tcpscope_bpf* skel = probe_->skeleton();
    return run_with_program_detached(&skel->links.on_state_change, skel->progs.on_state_change, child, closed_ns);
  }

  bool missing(const std::string& tracepoint) const {
    const auto& missing = probe_->missing_tracepoints();
    return std::find(missing.begin(), missing.end(), tracepoint) != missing.end();
  }

  ring_buffer* ring_ = nullptr;
  std::vector<tcpscope_transfer_event> transfers_;
  std::vector<tcpscope_flow_event> flows_;
};

TEST_F(TransferProbe, KeptAliveRequestsAndResponsesAreOneTransferEach) {
  const uint32_t netns = run_in_private_netns(keep_alive_exchange);
  ASSERT_EQ(wait_for_both_ends(netns), 2);
  EXPECT_EQ(probe_->counter(TCPSCOPE_CNT_TRANSFERS_LOST), 0u);

  const tcpscope_flow_event* server = nullptr;
  const tcpscope_flow_event* client = nullptr;
  for (const auto& f : flows_)
    if (f.id.netns == netns) {
      (f.id.dir == TCPSCOPE_DIR_PASSIVE ? server : client) = &f;
    }
  ASSERT_TRUE(server && client);

  const size_t n = kResponseBytes.size();
  for (const auto* flow : {server, client}) {
    const bool is_server = flow == server;
    SCOPED_TRACE(is_server ? "server" : "client");
    auto ts = of(netns, flow->id.sport);
    std::string seen;
    for (const auto& t : ts)
      seen += std::to_string(t.seq) + (t.direction == TCPSCOPE_XFER_SEND ? " send " : " recv ") +
              std::to_string(t.bytes) + " B " + std::to_string((t.end_ns - t.start_ns) / 1000) + " us wait " +
              std::to_string(t.wait_us) + "\n";
    ASSERT_EQ(ts.size(), 2 * n) << seen;
    for (size_t i = 0; i < ts.size(); ++i) {
      const auto& t = ts[i];
      EXPECT_EQ(t.seq, i);
      EXPECT_EQ(t.id.start_ns, flow->id.start_ns) << "the flow record's start";
      EXPECT_EQ(t.id.dir, flow->id.dir);
      EXPECT_LE(t.start_ns, t.end_ns);
      EXPECT_GE(t.start_ns, flow->id.start_ns);
      EXPECT_LE(t.end_ns, flow->end_ns);
      if (i > 0) {
        EXPECT_GE(t.start_ns, ts[i - 1].end_ns) << "request and response alternate";
      }
      // Requests first: the client sends, the server receives; then the response.
      const bool request = i % 2 == 0;
      const bool sent = request != is_server;
      EXPECT_EQ(t.direction, sent ? TCPSCOPE_XFER_SEND : TCPSCOPE_XFER_RECV) << "seq " << i;
      EXPECT_EQ(t.bytes, request ? kRequestBytes : kResponseBytes[i / 2]) << "seq " << i;
      if (!request && is_server) {
        // Request arrival to response start: the think time, plus scheduling.
        EXPECT_GE(t.wait_us, kThinkMs * 1000u) << "seq " << i;
        EXPECT_LT(t.wait_us, kThinkMs * 1000u + scheduling_slack_us()) << "seq " << i;
      }
      if (!request && is_server && t.bytes >= kSlowReadBytes) {
        // Time counters tick in jiffies (4 ms at HZ=250), reads take >= 1 ms each.
        const uint64_t xfer_us = (t.end_ns - t.start_ns) / 1000;
        EXPECT_GT(2 * uint64_t{t.rwnd_limited_us}, xfer_us) << "the slow reader's window limited most of it";
        EXPECT_LE(uint64_t{t.kernel.busy_us} + t.rwnd_limited_us + t.kernel.sndbuf_limited_us, xfer_us + 8000)
            << "accrued during it, to two ticks";
        for (uint32_t part : {t.kernel.busy_us, t.rwnd_limited_us, t.kernel.sndbuf_limited_us})
          EXPECT_LE(part, xfer_us) << "each is cut to the transfer's own time";
      }
      if (!request && !is_server) {
        // Time to first byte from the request: covers the think time.
        EXPECT_GE(t.wait_us, kThinkMs * 1000u) << "seq " << i;
        EXPECT_LT(t.wait_us, kThinkMs * 1000u + scheduling_slack_us()) << "seq " << i;
      }
      if (i == 0) {
        EXPECT_EQ(t.wait_us, TCPSCOPE_NO_WAIT) << "nothing came before the first request";
      }
    }
    uint64_t sent = 0, received = 0;
    for (const auto& t : ts) {
      (t.direction == TCPSCOPE_XFER_SEND ? sent : received) += t.bytes;
    }
    EXPECT_EQ(sent, flow->bytes_acked);
    EXPECT_EQ(received, flow->bytes_received);
  }
}

TEST_F(TransferProbe, AResponseWrittenInPiecesIsOneTransfer) {
  const uint32_t netns = run_in_private_netns(response_in_pieces);
  ASSERT_EQ(wait_for_both_ends(netns), 2);
  for (const auto& f : flows_) {
    if (f.id.netns != netns || f.id.dir != TCPSCOPE_DIR_PASSIVE) continue;
    auto ts = of(netns, f.id.sport);
    ASSERT_EQ(ts.size(), 2u);
    EXPECT_EQ(ts[0].direction, TCPSCOPE_XFER_RECV);
    EXPECT_EQ(ts[1].direction, TCPSCOPE_XFER_SEND);
    EXPECT_EQ(ts[1].bytes, kPieces * kPieceBytes);
    // It spans the pauses between the pieces.
    EXPECT_GE(ts[1].end_ns - ts[1].start_ns, (kPieces - 1) * 5000000ULL);
  }
}

TEST_F(TransferProbe, PayloadWhoseWakeUpWasMissedEndsTheFlowWhereItArrivedNotAtTheFin) {
  if (missing("sk_data_ready"))
    GTEST_SKIP() << "no sk_data_ready on this kernel (before 6.3): arrivals come from tcp_probe's segments, "
                    "which no wake-up can miss";
  uint64_t read_ns = 0;
  const uint32_t netns = run_with_wake_ups_missed(response_unseen_then_late_fin, &read_ns);
  ASSERT_NE(netns, 0u);
  const tcpscope_flow_event* client = client_record(netns);
  ASSERT_TRUE(client);
  EXPECT_EQ(client->bytes_received, kUnseenResponseBytes);
  // The data arrived before the client read it, which was 300 ms before the
  // FIN: the end is placed from the kernel's tick-grained time of the
  // latest data segment (HZ=100 at the coarsest: two ticks are 20 ms).
  const int64_t after_read_us = (int64_t(client->data_end_ns) - int64_t(read_ns)) / 1000;
  EXPECT_LT(after_read_us, 20000) << "the flow ends at the FIN, " << kIdleBeforeFinMs << " ms after the data";
  EXPECT_GT(after_read_us, -20000);
}

TEST_F(TransferProbe, ResponseWhoseWakeUpWasMissedIsStillItsOwnReceiveTransfer) {
  if (missing("sk_data_ready"))
    GTEST_SKIP() << "no sk_data_ready on this kernel: arrivals come from tcp_probe's segments";
  if (missing("tcp_sendmsg_locked"))
    GTEST_SKIP() << "no tcp_sendmsg_locked on this kernel: the write that catches up unseen arrivals is not hooked";
  uint64_t read_ns = 0;
  const uint32_t netns = run_with_wake_ups_missed(response_unseen_then_next_request, &read_ns);
  ASSERT_NE(netns, 0u);
  const tcpscope_flow_event* client = client_record(netns);
  ASSERT_TRUE(client);
  std::vector<uint64_t> received;
  for (const auto& t : of(netns, client->id.sport))
    if (t.direction == TCPSCOPE_XFER_RECV) received.push_back(t.bytes);
  EXPECT_EQ(received, (std::vector<uint64_t>{kUnseenResponseBytes, kSecondResponseBytes}));
}

TEST_F(TransferProbe, ACloseTheKernelSkippedIsRecordedWhenTheSocketIsDestroyed) {
  if (missing("tcp_destroy_sock")) GTEST_SKIP() << "no tcp_destroy_sock on this kernel";
  const uint64_t before = probe_->counter(TCPSCOPE_CNT_CLOSED_AT_DESTROY);
  uint64_t closed_ns = 0;
  const uint32_t netns = run_with_state_changes_missed(exchange_then_unseen_close, &closed_ns);
  ASSERT_NE(netns, 0u);
  ASSERT_EQ(wait_for_both_ends(netns), 2) << "each end's record, made at its destruction";
  // The host's other sockets that closed meanwhile were recorded so too.
  EXPECT_GE(probe_->counter(TCPSCOPE_CNT_CLOSED_AT_DESTROY) - before, 2u);
  for (const auto& f : flows_) {
    if (f.id.netns != netns) continue;
    const bool server = f.id.dir == TCPSCOPE_DIR_PASSIVE;
    SCOPED_TRACE(server ? "server" : "client");
    EXPECT_EQ(f.outcome, TCPSCOPE_OUTCOME_OK);
    EXPECT_TRUE(f.flags & TCPSCOPE_F_ESTABLISHED);
    EXPECT_FALSE(f.flags & TCPSCOPE_F_PARTIAL);
    EXPECT_EQ(f.bytes_acked, server ? kSecondResponseBytes : kRequestBytes);
    EXPECT_EQ(f.bytes_received, server ? kRequestBytes : kSecondResponseBytes);
    // Its end: its destruction, before the child said both were gone, and
    // no earlier than its close began.
    EXPECT_GE(f.end_ns, f.data_end_ns);
    EXPECT_LE(f.end_ns, closed_ns);
    EXPECT_GT(f.end_ns + 50000000ULL + scheduling_slack_us() * 1000ULL, closed_ns) << "within the child's 50 ms wait";
  }
}

TEST_F(TransferProbe, PayloadWhoseWakeUpWasMissedEndsAnAbortedFlowWhereItArrived) {
  if (missing("sk_data_ready"))
    GTEST_SKIP() << "no sk_data_ready on this kernel (before 6.3): arrivals come from tcp_probe's segments";
  uint64_t read_ns = 0;
  const uint32_t netns = run_with_wake_ups_missed(response_unseen_then_abort, &read_ns);
  ASSERT_NE(netns, 0u);
  const tcpscope_flow_event* client = client_record(netns);
  ASSERT_TRUE(client);
  EXPECT_EQ(client->bytes_received, kUnseenResponseBytes);
  EXPECT_EQ(client->outcome, TCPSCOPE_OUTCOME_RESET) << "the client's own abort";
  // As at a FIN: from the kernel's tick-grained time of the latest data
  // segment, not the abort 300 ms later.
  const int64_t after_read_us = (int64_t(client->data_end_ns) - int64_t(read_ns)) / 1000;
  EXPECT_LT(after_read_us, 20000) << "the flow ends at the abort, " << kIdleBeforeFinMs << " ms after the data";
  EXPECT_GT(after_read_us, -20000);
}

}  // namespace
}  // namespace tcpscope
