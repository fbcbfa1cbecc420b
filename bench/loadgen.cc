// Load generator for the system benchmarks (bench/churn.py, bench/scale.py).
//
// Not part of the CMake build (bench/*_bench.cc are Google Benchmarks); the
// scripts compile it on demand: c++ -O2 -pthread bench/loadgen.cc.
//
//   loadgen serve --bind ADDR --port P [--threads N] [--req BYTES] [--resp BYTES] [--ready FILE]
//                 [--cgroups DIR1,DIR2,... --home-cgroup DIR]
//       Request/response server: each thread owns an SO_REUSEPORT listener,
//       accepts, reads the request, writes the response and closes first
//       (so TIME_WAIT stays on the server, as with HTTP/1.0 or
//       "Connection: close", and the clients never run out of ports).
//       With --cgroups, one listener per cgroup v2 directory, on ports P,
//       P+1, ..., each made while the process is in that cgroup (an
//       accepted socket has its listener's cgroup, so a client picks the
//       cgroup by the port); the threads share the listeners through epoll.
//       The process then returns to --home-cgroup.
//       Needs the cgroup2 mount visible (nsenter, not `ip netns exec`,
//       which mounts a fresh /sys).
//   loadgen churn --addr ADDR --port P [--threads N] [--seconds S] [--req BYTES] [--resp BYTES]
//                 [--port-count K --spread even|zipf]
//       N blocking clients: connect, send, read to EOF, close, as fast as
//       possible for S seconds. Prints one JSON object on stdout. With
//       --port-count, each connection goes to one of ports P..P+K-1: each
//       as often (even) or port P+i with weight 1/(i+1) (zipf).
//   loadgen hold-serve --bind ADDR --ports P1,P2,... [--ready FILE]
//       Accepts and keeps every connection until SIGTERM/SIGINT.
//   loadgen hold --addr ADDR --ports P1,P2,... --count N [--ready FILE]
//       Opens N connections spread over the ports, keeps them open until
//       SIGTERM/SIGINT, then prints one JSON object.
//
// Why not wrk + nginx: on a 2-core machine the load generator and server
// share the CPUs with the observer under test; a blocking loop of plain
// syscalls spends the least user-space CPU per connection, so the kernel's
// per-connection work (where the BPF programs run) is the largest share and
// an observer's cost shows up undiluted.
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <signal.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <random>
#include <string>
#include <thread>
#include <vector>

namespace {

using Clock = std::chrono::steady_clock;

std::atomic<bool> g_stop{false};

void on_signal(int) { g_stop = true; }

[[noreturn]] void die(const std::string& what) {
  std::fprintf(stderr, "loadgen: %s: %s\n", what.c_str(), strerror(errno));
  std::exit(1);
}

struct Args {
  std::map<std::string, std::string> kv;
  std::string get(const std::string& k, const std::string& def = "") const {
    auto it = kv.find(k);
    return it == kv.end() ? def : it->second;
  }
  long num(const std::string& k, long def) const {
    auto it = kv.find(k);
    return it == kv.end() ? def : std::strtol(it->second.c_str(), nullptr, 10);
  }
};

std::vector<std::string> split_commas(const std::string& s) {
  std::vector<std::string> out;
  size_t pos = 0;
  while (pos < s.size()) {
    size_t comma = s.find(',', pos);
    if (comma == std::string::npos) comma = s.size();
    out.push_back(s.substr(pos, comma - pos));
    pos = comma + 1;
  }
  return out;
}

std::vector<int> parse_ports(const std::string& s) {
  std::vector<int> out;
  size_t pos = 0;
  while (pos < s.size()) {
    size_t comma = s.find(',', pos);
    if (comma == std::string::npos) comma = s.size();
    out.push_back(std::atoi(s.substr(pos, comma - pos).c_str()));
    pos = comma + 1;
  }
  return out;
}

// IPv4 or IPv6 literal -> sockaddr_storage.
socklen_t make_addr(const std::string& host, int port, sockaddr_storage* ss) {
  memset(ss, 0, sizeof(*ss));
  auto* v4 = reinterpret_cast<sockaddr_in*>(ss);
  if (inet_pton(AF_INET, host.c_str(), &v4->sin_addr) == 1) {
    v4->sin_family = AF_INET;
    v4->sin_port = htons(static_cast<uint16_t>(port));
    return sizeof(*v4);
  }
  auto* v6 = reinterpret_cast<sockaddr_in6*>(ss);
  if (inet_pton(AF_INET6, host.c_str(), &v6->sin6_addr) == 1) {
    v6->sin6_family = AF_INET6;
    v6->sin6_port = htons(static_cast<uint16_t>(port));
    return sizeof(*v6);
  }
  errno = EINVAL;
  die("bad address '" + host + "'");
}

// Raises the soft fd limit towards `want`, up to the hard limit (raising the
// hard limit needs CAP_SYS_RESOURCE, which containers often lack: the
// scripts then spread connections over several processes).
void raise_fd_limit(rlim_t want) {
  rlimit rl{};
  if (getrlimit(RLIMIT_NOFILE, &rl) != 0) die("getrlimit(RLIMIT_NOFILE)");
  if (rl.rlim_cur >= want) return;
  rl.rlim_cur = want < rl.rlim_max ? want : rl.rlim_max;
  if (setrlimit(RLIMIT_NOFILE, &rl) != 0) die("setrlimit(RLIMIT_NOFILE, " + std::to_string(rl.rlim_cur) + ")");
}

int listen_on(const std::string& host, int port, bool reuseport) {
  sockaddr_storage ss;
  socklen_t len = make_addr(host, port, &ss);
  int fd = socket(ss.ss_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) die("socket");
  int one = 1;
  setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  if (reuseport && setsockopt(fd, SOL_SOCKET, SO_REUSEPORT, &one, sizeof(one)) != 0) die("SO_REUSEPORT");
  if (bind(fd, reinterpret_cast<sockaddr*>(&ss), len) != 0) die("bind " + host + ":" + std::to_string(port));
  if (listen(fd, 65535) != 0) die("listen");
  return fd;
}

void write_ready(const std::string& path) {
  if (path.empty()) return;
  FILE* f = std::fopen(path.c_str(), "w");
  if (!f) die("open " + path);
  std::fputs("ready\n", f);
  std::fclose(f);
}

bool write_all(int fd, const char* p, size_t n) {
  while (n) {
    ssize_t w = write(fd, p, n);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) return false;
    p += w;
    n -= static_cast<size_t>(w);
  }
  return true;
}

// Reads exactly n bytes (n > 0) or to EOF (n == 0); false on error or early EOF.
bool read_some(int fd, char* buf, size_t cap, size_t n) {
  size_t got = 0;
  for (;;) {
    ssize_t r = read(fd, buf, cap);
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) return false;
    if (r == 0) return n == 0 || got >= n;
    got += static_cast<size_t>(r);
    if (n && got >= n) return true;
  }
}

// Moves this (single-threaded) process into the cgroup v2 directory `dir`.
void enter_cgroup(const std::string& dir) {
  const std::string procs = dir + "/cgroup.procs";
  FILE* f = std::fopen(procs.c_str(), "w");
  if (!f) die("open " + procs);
  const bool ok = std::fprintf(f, "0\n") > 0;
  if (std::fclose(f) != 0 || !ok) die("write " + procs);
}

void serve_connection(int fd, size_t req, const std::string& resp, std::vector<char>& buf) {
  if (read_some(fd, buf.data(), buf.size(), req)) write_all(fd, resp.data(), resp.size());
  close(fd);
}

int cmd_serve(const Args& a) {
  const std::string bind_addr = a.get("bind", "0.0.0.0");
  const int port = static_cast<int>(a.num("port", 8080));
  const int threads = static_cast<int>(a.num("threads", 2));
  const size_t req = static_cast<size_t>(a.num("req", 100));
  const std::string resp(static_cast<size_t>(a.num("resp", 1000)), 'x');
  const std::vector<std::string> cgroups = split_commas(a.get("cgroups"));
  std::vector<std::thread> pool;
  if (cgroups.empty()) {
    std::vector<int> listeners;
    for (int i = 0; i < threads; ++i) listeners.push_back(listen_on(bind_addr, port, true));
    write_ready(a.get("ready"));
    for (int lfd : listeners) {
      pool.emplace_back([lfd, req, &resp] {
        std::vector<char> buf(64 * 1024);
        for (;;) {
          int fd = accept4(lfd, nullptr, nullptr, SOCK_CLOEXEC);
          if (fd < 0) {
            if (errno == EINTR || errno == ECONNABORTED || errno == EMFILE || errno == ENFILE) continue;
            die("accept");
          }
          serve_connection(fd, req, resp, buf);
        }
      });
    }
  } else {
    raise_fd_limit(cgroups.size() + 1024);
    const std::string home = a.get("home-cgroup");
    if (home.empty()) die("--cgroups needs --home-cgroup");
    const int ep = epoll_create1(EPOLL_CLOEXEC);
    if (ep < 0) die("epoll_create1");
    for (const auto& dir : cgroups) {
      enter_cgroup(dir);
      const int lfd = listen_on(bind_addr, port + static_cast<int>(&dir - cgroups.data()), false);
      if (fcntl(lfd, F_SETFL, O_NONBLOCK) != 0) die("fcntl(O_NONBLOCK)");
      epoll_event ev{};
      ev.events = EPOLLIN | EPOLLEXCLUSIVE;
      ev.data.fd = lfd;
      if (epoll_ctl(ep, EPOLL_CTL_ADD, lfd, &ev) != 0) die("epoll_ctl(ADD)");
    }
    enter_cgroup(home);
    write_ready(a.get("ready"));
    for (int i = 0; i < threads; ++i) {
      pool.emplace_back([ep, req, &resp] {
        std::vector<char> buf(64 * 1024);
        epoll_event evs[64];
        for (;;) {
          const int n = epoll_wait(ep, evs, 64, -1);
          if (n < 0 && errno == EINTR) continue;
          if (n < 0) die("epoll_wait");
          for (int k = 0; k < n; ++k) {
            for (int accepted = 0; accepted < 64; ++accepted) {
              int fd = accept4(evs[k].data.fd, nullptr, nullptr, SOCK_CLOEXEC);
              if (fd < 0) {
                if (errno == EAGAIN || errno == EINTR || errno == ECONNABORTED) break;
                if (errno == EMFILE || errno == ENFILE) break;
                die("accept");
              }
              serve_connection(fd, req, resp, buf);
            }
          }
        }
      });
    }
  }
  for (auto& t : pool) t.join();
  return 0;
}

// Which of `count` ports each connection goes to: the cumulative weights
// of the spread, searched with a uniform draw.
std::vector<double> port_weights_cdf(int count, const std::string& spread) {
  if (spread != "even" && spread != "zipf") {
    errno = EINVAL;
    die("--spread " + spread + " (even or zipf)");
  }
  std::vector<double> cdf(static_cast<size_t>(count));
  double sum = 0;
  for (int i = 0; i < count; ++i) cdf[static_cast<size_t>(i)] = sum += spread == "zipf" ? 1.0 / (i + 1) : 1.0;
  for (double& c : cdf) c /= sum;
  return cdf;
}

int cmd_churn(const Args& a) {
  const int base_port = static_cast<int>(a.num("port", 8080));
  const int port_count = static_cast<int>(a.num("port-count", 1));
  if (port_count < 1 || base_port + port_count > 65536) {
    errno = EINVAL;
    die("--port-count");
  }
  const std::vector<double> cdf = port_weights_cdf(port_count, a.get("spread", "even"));
  std::vector<sockaddr_storage> addrs(static_cast<size_t>(port_count));
  socklen_t len = 0;
  for (int i = 0; i < port_count; ++i) len = make_addr(a.get("addr"), base_port + i, &addrs[static_cast<size_t>(i)]);
  const int threads = static_cast<int>(a.num("threads", 4));
  const double seconds = std::strtod(a.get("seconds", "10").c_str(), nullptr);
  const std::string req(static_cast<size_t>(a.num("req", 100)), 'q');
  std::atomic<uint64_t> ok{0}, failed{0};
  std::atomic<int> first_errno{0};
  const auto start = Clock::now();
  const auto deadline = start + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(seconds));
  std::vector<std::thread> pool;
  for (int i = 0; i < threads; ++i) {
    pool.emplace_back([&, i] {
      std::vector<char> buf(64 * 1024);
      std::mt19937_64 rng(static_cast<uint64_t>(i) + 1);
      std::uniform_real_distribution<double> uniform(0.0, 1.0);
      uint64_t n_ok = 0, n_failed = 0;
      while (Clock::now() < deadline && !g_stop) {
        const size_t k = port_count == 1 ? 0
                                         : std::min(cdf.size() - 1, static_cast<size_t>(std::lower_bound(
                                                                        cdf.begin(), cdf.end(), uniform(rng)) -
                                                                    cdf.begin()));
        const sockaddr_storage& ss = addrs[k];
        int fd = socket(ss.ss_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
        if (fd < 0) die("socket");
        bool good = connect(fd, reinterpret_cast<const sockaddr*>(&ss), len) == 0 &&
                    write_all(fd, req.data(), req.size()) && read_some(fd, buf.data(), buf.size(), 0);
        if (good) {
          ++n_ok;
        } else {
          int expected = 0;
          first_errno.compare_exchange_strong(expected, errno ? errno : -1);
          ++n_failed;
        }
        close(fd);
      }
      ok += n_ok;
      failed += n_failed;
    });
  }
  for (auto& t : pool) t.join();
  const double elapsed = std::chrono::duration<double>(Clock::now() - start).count();
  std::printf(
      "{\"connections\": %llu, \"failed\": %llu, \"first_errno\": %d, \"seconds\": %.3f, \"threads\": %d, "
      "\"rate\": %.1f}\n",
      static_cast<unsigned long long>(ok.load()), static_cast<unsigned long long>(failed.load()),
      first_errno.load(), elapsed, threads, static_cast<double>(ok.load()) / elapsed);
  return 0;
}

int cmd_hold_serve(const Args& a) {
  raise_fd_limit(static_cast<rlim_t>(a.num("max-fds", 2200000)));
  const std::string bind_addr = a.get("bind", "0.0.0.0");
  std::vector<pollfd> pfds;
  for (int p : parse_ports(a.get("ports", "8080"))) {
    int fd = listen_on(bind_addr, p, false);
    fcntl(fd, F_SETFL, O_NONBLOCK);
    pfds.push_back({fd, POLLIN, 0});
  }
  write_ready(a.get("ready"));
  std::vector<int> held;
  while (!g_stop) {
    if (poll(pfds.data(), pfds.size(), 200) < 0 && errno != EINTR) die("poll");
    for (auto& p : pfds) {
      for (;;) {
        int fd = accept4(p.fd, nullptr, nullptr, SOCK_CLOEXEC);
        if (fd < 0) {
          if (errno == EAGAIN || errno == EINTR || errno == ECONNABORTED) break;
          die("accept (holding " + std::to_string(held.size()) + ")");
        }
        held.push_back(fd);
      }
    }
  }
  std::printf("{\"held\": %zu}\n", held.size());
  return 0;
}

int cmd_hold(const Args& a) {
  const long count = a.num("count", 1000);
  raise_fd_limit(static_cast<rlim_t>(count + 1000));
  const std::string addr = a.get("addr");
  std::vector<sockaddr_storage> targets;
  socklen_t len = 0;
  for (int p : parse_ports(a.get("ports", "8080"))) {
    sockaddr_storage ss;
    len = make_addr(addr, p, &ss);
    targets.push_back(ss);
  }
  std::vector<int> held;
  held.reserve(static_cast<size_t>(count));
  const auto start = Clock::now();
  for (long i = 0; i < count && !g_stop; ++i) {
    const auto& t = targets[static_cast<size_t>(i) % targets.size()];
    int fd = socket(t.ss_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) die("socket (holding " + std::to_string(held.size()) + ")");
    if (connect(fd, reinterpret_cast<const sockaddr*>(&t), len) != 0)
      die("connect (holding " + std::to_string(held.size()) + ")");
    held.push_back(fd);
  }
  const double open_s = std::chrono::duration<double>(Clock::now() - start).count();
  write_ready(a.get("ready"));
  while (!g_stop) pause();
  std::printf("{\"held\": %zu, \"open_seconds\": %.3f}\n", held.size(), open_s);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: loadgen serve|churn|hold-serve|hold [--key value]...\n");
    return 2;
  }
  Args a;
  for (int i = 2; i + 1 < argc; i += 2) {
    std::string k = argv[i];
    if (k.rfind("--", 0) != 0) {
      std::fprintf(stderr, "loadgen: expected --key, got '%s'\n", argv[i]);
      return 2;
    }
    a.kv[k.substr(2)] = argv[i + 1];
  }
  struct sigaction sa {};
  sa.sa_handler = on_signal;
  sigaction(SIGTERM, &sa, nullptr);
  sigaction(SIGINT, &sa, nullptr);
  signal(SIGPIPE, SIG_IGN);
  const std::string cmd = argv[1];
  if (cmd == "serve") return cmd_serve(a);
  if (cmd == "churn") return cmd_churn(a);
  if (cmd == "hold-serve") return cmd_hold_serve(a);
  if (cmd == "hold") return cmd_hold(a);
  std::fprintf(stderr, "loadgen: unknown command '%s'\n", cmd.c_str());
  return 2;
}
