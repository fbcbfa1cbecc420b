#include "http/http_server.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

#include <prometheus/metric_family.h>
#include <prometheus/registry.h>
#include <prometheus/text_serializer.h>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cerrno>
#include <condition_variable>
#include <cstdio>
#include <cstring>
#include <deque>
#include <exception>
#include <new>
#include <stdexcept>

#include "http/http_request.h"
#include "text/json_text.h"

namespace tcpscope {

namespace {

constexpr const char* kMetricsContentType = "text/plain; version=0.0.4; charset=utf-8";
constexpr const char* kTextContentType = "text/plain; charset=utf-8";
constexpr const char* kJsonContentType = "application/json";
constexpr size_t kMaxHealthReason = 200;
constexpr int kMaxLogLinesPerMinute = 20;  // a misbehaving client must not flood the journal
constexpr int kLingerMs = 1000;            // reading what a refused client still sends, before close
constexpr size_t kLingerBytes = 64 * 1024;
constexpr int kStalledWriteMs = 1000;      // a response not taken for this long may be replaced
constexpr int kExpiryPeriodMs = 100;
constexpr int kAcceptPauseMs = 100;        // after accept() fails for want of descriptors or memory
constexpr int kFdReserve = 64;             // descriptors kept for BPF objects, files, the flow log

constexpr uint64_t kListenerId = 0;
constexpr uint64_t kWakeId = 1;

int64_t now_ms() {
  timespec ts{};
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return int64_t(ts.tv_sec) * 1000 + ts.tv_nsec / 1000000;
}

// The socket address of a `listen` value (config.h's one parser; port 0:
// any free port).
bool parse_listen(const std::string& listen, sockaddr_storage* sa, socklen_t* len, std::string* why) {
  const auto a = parse_listen_address(listen, why, 0);
  if (!a) return false;
  std::memset(sa, 0, sizeof(*sa));
  if (a->addr.family == 6) {
    auto* a6 = reinterpret_cast<sockaddr_in6*>(sa);
    a6->sin6_family = AF_INET6;
    a6->sin6_port = htons(a->port);
    std::memcpy(&a6->sin6_addr, a->addr.bytes.data(), 16);
    *len = sizeof(sockaddr_in6);
  } else {
    auto* a4 = reinterpret_cast<sockaddr_in*>(sa);
    a4->sin_family = AF_INET;
    a4->sin_port = htons(a->port);
    std::memcpy(&a4->sin_addr, a->addr.bytes.data(), 4);
    *len = sizeof(sockaddr_in);
  }
  return true;
}

// 127.0.0.0/8 or ::1.
bool is_loopback(const sockaddr_storage& sa) {
  if (sa.ss_family == AF_INET)
    return (ntohl(reinterpret_cast<const sockaddr_in&>(sa).sin_addr.s_addr) >> 24) == 127;
  return IN6_IS_ADDR_LOOPBACK(&reinterpret_cast<const sockaddr_in6&>(sa).sin6_addr);
}

// The per-peer key of this host. A client on this host may take any of the
// host's addresses as its source, 127.0.0.2, 127.0.0.3, ... or any other of
// its own, and would pass the per-peer cap by cycling through them. So this
// host is one peer: every client of a loopback listener (only this host can
// reach a loopback address) and, on any listener, one from 127.0.0.0/8 or
// ::1. (A listener has one family, IPV6_V6ONLY: IPv4 and IPv6 peers never
// meet in one count, but they are one host.)
constexpr char kThisHost[] = "this host";

// (key, text) of a peer address: the key counts connections per peer, the
// text goes into log lines.
std::pair<std::string, std::string> peer_of(const sockaddr_storage& sa, bool loopback_listener) {
  char text[INET6_ADDRSTRLEN] = "?";
  const void* a = sa.ss_family == AF_INET ? static_cast<const void*>(&reinterpret_cast<const sockaddr_in&>(sa).sin_addr)
                                          : static_cast<const void*>(&reinterpret_cast<const sockaddr_in6&>(sa).sin6_addr);
  const size_t size = sa.ss_family == AF_INET ? sizeof(in_addr) : sizeof(in6_addr);
  inet_ntop(sa.ss_family, a, text, sizeof(text));
  if (loopback_listener || is_loopback(sa)) return {kThisHost, text};
  return {std::string(static_cast<const char*>(a), size), text};
}

// One line, bounded, with anything that looks like a file path redacted: the
// endpoint is unauthenticated.
std::string one_line_reason(const std::string& reason) {
  std::string out;
  size_t i = 0;
  while (i < reason.size() && out.size() < kMaxHealthReason) {
    const char c = reason[i];
    const bool token_start = i == 0 || static_cast<unsigned char>(reason[i - 1]) <= 0x20;
    if (c == '/' && token_start) {
      out += "[path]";
      while (i < reason.size() && static_cast<unsigned char>(reason[i]) > 0x20) ++i;
      continue;
    }
    out += (static_cast<unsigned char>(c) < 0x20 || c == 0x7f) ? ' ' : c;
    ++i;
  }
  return out.empty() ? "unhealthy" : out;
}

const char* status_text(int status) {
  switch (status) {
    case 200: return "OK";
    case 400: return "Bad Request";
    case 401: return "Unauthorized";
    case 404: return "Not Found";
    case 405: return "Method Not Allowed";
    case 408: return "Request Timeout";
    case 413: return "Content Too Large";
    case 414: return "URI Too Long";
    case 431: return "Request Header Fields Too Large";
    case 500: return "Internal Server Error";
    case 503: return "Service Unavailable";
    case 505: return "HTTP Version Not Supported";
    default: return "Error";
  }
}

// Raises the soft descriptor limit to the hard one: each connection holds one.
int usable_descriptors() {
  rlimit rl{};
  if (getrlimit(RLIMIT_NOFILE, &rl) != 0) return 1024;
  if (rl.rlim_cur < rl.rlim_max) {
    rlimit raised = rl;
    raised.rlim_cur = std::min<rlim_t>(rl.rlim_max, 1 << 20);
    if (setrlimit(RLIMIT_NOFILE, &raised) == 0) rl = raised;
  }
  return static_cast<int>(std::min<rlim_t>(rl.rlim_cur, 1 << 20));
}

}  // namespace

struct HttpServer::Connection {
  enum State { kReading, kWorking, kWriting, kLingering };
  uint64_t id = 0;
  int fd = -1;
  std::string peer;       // the per-peer count's key: address bytes, or kThisHost
  std::string peer_text;  // for log lines
  State state = kReading;
  std::string in;
  std::string head;                         // of the answer being sent
  std::shared_ptr<const std::string> body;  // shared with the other requests it answers
  size_t out_sent = 0;                      // of head, then body
  size_t out_size() const { return head.size() + (body ? body->size() : 0); }
  int64_t state_since_ms = 0;
  int64_t deadline_ms = 0;
  int requests = 0;
  bool keep_alive = true;
  bool peer_closed = false;  // the client shut down its side: answer what came, then close
  bool watched = true;     // in the epoll set
  size_t lingered = 0;
};

struct HttpServer::Pool {
  std::mutex mu;
  std::condition_variable cv;
  struct Request {
    uint64_t connection;
    std::string path;
    std::string query;
  };
  std::deque<Request> queue;
  bool stopping = false;
};

const char* HttpServer::rejection_name(Rejection r) {
  switch (r) {
    case kHeadTimeout: return "head_timeout";
    case kResponseTimeout: return "response_timeout";
    case kConnectionLimit: return "connection_limit";
    case kMalformed: return "malformed";
    case kBusy: return "busy";
    case kAuthFailed: return "auth_failed";
    default: return "?";
  }
}

std::unique_ptr<HttpServer> HttpServer::start(const std::string& listen, std::string* error) {
  return start(listen, HttpConfig{}, Limits{}, error);
}

std::unique_ptr<HttpServer> HttpServer::start(const std::string& listen, const HttpConfig& security,
                                              std::string* error) {
  return start(listen, security, Limits{}, error);
}

std::unique_ptr<HttpServer> HttpServer::start(const std::string& listen, const HttpConfig& security,
                                              const Limits& limits, std::string* error) {
  sockaddr_storage sa{};
  socklen_t sa_len = 0;
  std::string why;
  if (!parse_listen(listen, &sa, &sa_len, &why)) {
    *error = "listen " + listen + ": " + why;
    return nullptr;
  }
  std::unique_ptr<HttpServer> s(new HttpServer(limits));
  s->listen_ = listen;
  s->loopback_listener_ = is_loopback(sa);
  s->limits_.max_connections = std::max(1, std::min(limits.max_connections, usable_descriptors() - kFdReserve));
  if (!s->set_basic_auth(security, error)) {
    *error = "listen " + listen + ": " + *error;
    return nullptr;
  }
  auto fail = [&](const char* what) {
    *error = "listen " + listen + ": " + what + ": " + std::strerror(errno);
    return nullptr;
  };
  s->listen_fd_ = socket(sa.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (s->listen_fd_ < 0) return fail("socket");
  const int one = 1;
  // A restart must not wait out the previous run's TIME_WAIT connections; a
  // port another process listens on still fails (no SO_REUSEPORT).
  setsockopt(s->listen_fd_, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  if (sa.ss_family == AF_INET6) setsockopt(s->listen_fd_, IPPROTO_IPV6, IPV6_V6ONLY, &one, sizeof(one));
  if (bind(s->listen_fd_, reinterpret_cast<sockaddr*>(&sa), sa_len) != 0) {
    *error = "listen " + listen + ": " + std::strerror(errno);
    return nullptr;
  }
  if (::listen(s->listen_fd_, 1024) != 0) return fail("listen");
  sockaddr_storage bound{};
  socklen_t bound_len = sizeof(bound);
  getsockname(s->listen_fd_, reinterpret_cast<sockaddr*>(&bound), &bound_len);
  s->port_ = ntohs(bound.ss_family == AF_INET6 ? reinterpret_cast<sockaddr_in6&>(bound).sin6_port
                                               : reinterpret_cast<sockaddr_in&>(bound).sin_port);

  s->epoll_fd_ = epoll_create1(EPOLL_CLOEXEC);
  if (s->epoll_fd_ < 0) return fail("epoll_create1");
  s->wake_fd_ = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  if (s->wake_fd_ < 0) return fail("eventfd");
  epoll_event ev{};
  ev.events = EPOLLIN;
  ev.data.u64 = kListenerId;
  if (epoll_ctl(s->epoll_fd_, EPOLL_CTL_ADD, s->listen_fd_, &ev) != 0) return fail("epoll_ctl");
  ev.data.u64 = kWakeId;
  if (epoll_ctl(s->epoll_fd_, EPOLL_CTL_ADD, s->wake_fd_, &ev) != 0) return fail("epoll_ctl");

  s->scrape_pool_ = std::make_unique<Pool>();
  s->api_pool_ = std::make_unique<Pool>();
  for (int i = 0; i < std::max(1, limits.scrape_workers); ++i)
    s->workers_.emplace_back(&HttpServer::run_worker, s.get(), s->scrape_pool_.get());
  for (int i = 0; i < std::max(1, limits.api_workers); ++i)
    s->workers_.emplace_back(&HttpServer::run_worker, s.get(), s->api_pool_.get());
  s->io_ = std::thread(&HttpServer::run_io, s.get());
  return s;
}

HttpServer::HttpServer(const Limits& limits) : limits_(limits), budget_(limits.max_pending_output_bytes) {}

HttpServer::~HttpServer() {
  stop();
  if (listen_fd_ >= 0) close(listen_fd_);
  if (epoll_fd_ >= 0) close(epoll_fd_);
  if (wake_fd_ >= 0) close(wake_fd_);
}

void HttpServer::stop() {
  if (stopping_.exchange(true)) return;
  for (Pool* p : {scrape_pool_.get(), api_pool_.get()}) {
    if (!p) continue;
    std::lock_guard<std::mutex> lock(p->mu);
    p->stopping = true;
    p->cv.notify_all();
  }
  for (auto& w : workers_) w.join();
  workers_.clear();
  if (wake_fd_ >= 0) {
    const uint64_t one = 1;
    (void)!write(wake_fd_, &one, sizeof(one));
  }
  if (io_.joinable()) io_.join();
  for (auto& [id, c] : connections_) close(c->fd);
  connections_.clear();
  per_peer_.clear();
  if (listen_fd_ >= 0) {
    close(listen_fd_);
    listen_fd_ = -1;
  }
  port_ = 0;
}

void HttpServer::serve_metrics(std::shared_ptr<prometheus::Registry> registry) {
  std::unique_lock<std::shared_mutex> lock(mu_);
  registry_ = std::move(registry);
}

void HttpServer::set_health(HealthCheck check) {
  std::unique_lock<std::shared_mutex> lock(mu_);
  health_ = std::move(check);
}

void HttpServer::handle_json(const std::string& path, JsonHandler handler) {
  std::unique_lock<std::shared_mutex> lock(mu_);
  json_[path] = std::move(handler);
  query_free_.erase(path);
}

void HttpServer::handle_json(const std::string& path, std::function<std::string()> handler) {
  std::unique_lock<std::shared_mutex> lock(mu_);
  json_[path] = [handler = std::move(handler)](const std::string&) { return handler(); };
  query_free_.insert(path);
}

bool HttpServer::set_basic_auth(const HttpConfig& security, std::string* error) {
  std::shared_ptr<const BasicAuth> auth;
  if (security.basic_auth()) {
    auto digest = parse_sha256_hex(security.basic_auth_password_sha256);
    if (!digest) {
      *error = "http.basic_auth_password_sha256 is not 64 hex digits";
      return false;
    }
    auth = std::make_shared<const BasicAuth>(security.basic_auth_user, *digest);
  }
  std::unique_lock<std::shared_mutex> lock(mu_);
  auth_ = std::move(auth);
  return true;
}

void HttpServer::log(const std::string& message) {
  std::lock_guard<std::mutex> lock(log_mu_);
  const int64_t now_s = now_ms() / 1000;
  if (now_s - log_window_start_s_ >= 60) {
    log_window_start_s_ = now_s;
    log_lines_in_window_ = 0;
  }
  if (++log_lines_in_window_ <= kMaxLogLinesPerMinute) std::fprintf(stderr, "tcpscope: http: %s\n", message.c_str());
}

// ---------------------------------------------------------------- the I/O thread

void HttpServer::run_io() {
  epoll_event events[256];
  while (!stopping_.load(std::memory_order_relaxed)) {
    const int n = epoll_wait(epoll_fd_, events, 256, kExpiryPeriodMs);
    if (n < 0 && errno != EINTR) {
      log(std::string("epoll_wait: ") + std::strerror(errno));
      return;
    }
    const int64_t now = now_ms();
    for (int i = 0; i < n; ++i) {
      const uint64_t id = events[i].data.u64;
      if (id == kListenerId) {
        accept_all(now);
        continue;
      }
      if (id == kWakeId) {
        uint64_t v;
        (void)!read(wake_fd_, &v, sizeof(v));
        collect_done(now);
        continue;
      }
      auto it = connections_.find(id);
      if (it == connections_.end()) continue;
      Connection& c = *it->second;
      const uint32_t e = events[i].events;
      if (c.state == Connection::kWriting && (e & (EPOLLOUT | EPOLLERR | EPOLLHUP))) {
        on_writable(c, now);
      } else if (c.state == Connection::kReading || c.state == Connection::kLingering) {
        on_readable(c, now);
      }
    }
    if (now - last_expiry_ms_ >= kExpiryPeriodMs) {
      expire(now);
      last_expiry_ms_ = now;
    }
    if (accept_paused_until_ms_ && now >= accept_paused_until_ms_) {
      epoll_event ev{};
      ev.events = EPOLLIN;
      ev.data.u64 = kListenerId;
      epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, listen_fd_, &ev);
      accept_paused_until_ms_ = 0;
    }
  }
}

// Level-triggered interest for the connection's state. A connection a worker
// is answering leaves the set: a hang-up is reported whatever the mask, and
// it is found when the answer is written.
void HttpServer::watch(Connection& c, uint32_t events) {
  if (events == 0) {
    if (c.watched) epoll_ctl(epoll_fd_, EPOLL_CTL_DEL, c.fd, nullptr);
    c.watched = false;
    return;
  }
  epoll_event ev{};
  ev.events = events;
  ev.data.u64 = c.id;
  epoll_ctl(epoll_fd_, c.watched ? EPOLL_CTL_MOD : EPOLL_CTL_ADD, c.fd, &ev);
  c.watched = true;
}

void HttpServer::accept_all(int64_t now) {
  for (;;) {
    sockaddr_storage sa{};
    socklen_t len = sizeof(sa);
    const int fd = accept4(listen_fd_, reinterpret_cast<sockaddr*>(&sa), &len, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd < 0) {
      if (errno == EINTR || errno == ECONNABORTED) continue;
      if (errno == EAGAIN || errno == EWOULDBLOCK) return;
      // Out of descriptors or memory: the pending connection stays in the
      // backlog and the listener readable; stop watching it for a moment
      // rather than spin on it.
      log(std::string("accept: ") + std::strerror(errno) + "; not accepting for " +
          std::to_string(kAcceptPauseMs) + " ms");
      epoll_ctl(epoll_fd_, EPOLL_CTL_DEL, listen_fd_, nullptr);
      accept_paused_until_ms_ = now + kAcceptPauseMs;
      return;
    }
    auto [peer, peer_text] = peer_of(sa, loopback_listener_);
    if (!make_room_for(peer, now)) {
      count(kConnectionLimit);
      close(fd);
      continue;
    }
    const int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    auto c = std::make_unique<Connection>();
    c->id = next_id_++;
    c->fd = fd;
    c->peer = peer;
    c->peer_text = peer_text;
    c->state_since_ms = now;
    c->deadline_ms = now + limits_.head_deadline_ms;
    epoll_event ev{};
    ev.events = EPOLLIN | EPOLLRDHUP;
    ev.data.u64 = c->id;
    if (epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, fd, &ev) != 0) {
      close(fd);
      continue;
    }
    ++per_peer_[peer];
    Connection& added = *connections_.emplace(c->id, std::move(c)).first->second;
    on_readable(added, now);
  }
}

// At the peer's cap or the total cap, the oldest connection that holds a
// place without using it goes: first one answered and closing, then one idle
// or still sending its request, else one whose client has not taken its
// response for kStalledWriteMs. Connections a worker is answering stay; with none to
// replace, the new connection is refused. A new connection is read at once
// (a client sends its request with the handshake's last ACK), so a
// scraper's is being answered before a flood from its address can make it
// the oldest.
bool HttpServer::make_room_for(const std::string& peer, int64_t now) {
  auto it = per_peer_.find(peer);
  const bool peer_full = it != per_peer_.end() && it->second >= limits_.max_connections_per_peer;
  const bool all_full = static_cast<int>(connections_.size()) >= limits_.max_connections;
  if (!peer_full && !all_full) return true;
  // Passes: answered and closing; idle or still sending a request; stalled.
  auto candidate = [&](const Connection& c, int pass) {
    switch (pass) {
      case 0: return c.state == Connection::kLingering;
      case 1: return c.state == Connection::kReading;
      default: return c.state == Connection::kWriting && now - c.state_since_ms >= kStalledWriteMs;
    }
  };
  Connection* victim = nullptr;
  for (int pass = 0; pass < 3 && !victim; ++pass) {
    for (auto& [id, c] : connections_) {  // ids grow with accept time: oldest first
      if ((!peer_full || c->peer == peer) && candidate(*c, pass)) {
        victim = c.get();
        break;
      }
    }
  }
  if (!victim) return false;
  count(kConnectionLimit);
  close_connection(victim->id);
  return true;
}

void HttpServer::close_connection(uint64_t id) {
  auto it = connections_.find(id);
  if (it == connections_.end()) return;
  Connection& c = *it->second;
  if (c.state == Connection::kWriting) {
    // Reset: what the kernel still holds for a client that does not read
    // would otherwise go on being sent after the close.
    const linger reset{1, 0};
    setsockopt(c.fd, SOL_SOCKET, SO_LINGER, &reset, sizeof(reset));
  }
  let_go_of_response(c);
  close(c.fd);  // also leaves the epoll set
  auto p = per_peer_.find(c.peer);
  if (p != per_peer_.end() && --p->second <= 0) per_peer_.erase(p);
  connections_.erase(it);
}

void HttpServer::let_go_of_response(Connection& c) {
  if (c.body) budget_.release(c.body, c.head.size());
  c.head.clear();
  c.body.reset();
  c.out_sent = 0;
}

void HttpServer::on_readable(Connection& c, int64_t now) {
  char buf[16384];
  for (;;) {
    const ssize_t n = recv(c.fd, buf, sizeof(buf), 0);
    if (n > 0) {
      if (c.state == Connection::kLingering) {
        c.lingered += static_cast<size_t>(n);
        if (c.lingered > kLingerBytes) return close_connection(c.id);
        continue;
      }
      c.in.append(buf, static_cast<size_t>(n));
      if (c.in.size() >= limits_.max_head_bytes) break;
      continue;
    }
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) break;
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 || c.state == Connection::kLingering) return close_connection(c.id);
    // End of stream: what has come may still be a whole request.
    c.peer_closed = true;
    break;
  }
  if (c.state != Connection::kReading) return;
  const uint64_t id = c.id;
  const bool peer_closed = c.peer_closed;
  next_request(c, now);  // may answer, and close, c
  if (!peer_closed) return;
  auto it = connections_.find(id);
  if (it != connections_.end() && it->second->state == Connection::kReading) close_connection(id);
}

// Parses what has arrived; answers what the I/O thread can answer itself and
// hands the rest to a worker.
void HttpServer::next_request(Connection& c, int64_t now) {
  HttpRequest request;
  const HttpParse p = parse_http_request(c.in, limits_.max_head_bytes, &request);
  if (p.status == HttpParse::kIncomplete) return;  // closed at its deadline if the rest never comes
  if (p.status == HttpParse::kBad) {
    count(kMalformed);
    c.keep_alive = false;
    return respond(c, Reply{p.error, kTextContentType, std::string(status_text(p.error)) + "\n"}, now);
  }
  c.in.erase(0, p.consumed);
  ++c.requests;
  c.keep_alive = request.keep_alive && !c.peer_closed && c.requests < limits_.max_requests_per_connection;
  dispatch(c, std::move(request), now);
}

void HttpServer::dispatch(Connection& c, HttpRequest&& request, int64_t now) {
  auto error = [&](int status) {
    return respond(c, Reply{status, kTextContentType, std::string(status_text(status)) + "\n"}, now);
  };
  const bool get = request.method == "GET";
  if (request.has_body) {
    // Nothing here takes a body: answer at once and close without reading it.
    count(kMalformed);
    c.keep_alive = false;
    return error(get ? 413 : 405);
  }
  if (!get) {
    count(kMalformed);
    c.keep_alive = false;  // a client that sends what is never served gets no second turn
    return error(405);
  }
  if (!authorized(request, c.peer_text)) return error(401);
  if (request.path == "/healthz") return respond(c, health_reply(), now);  // a few loads: no queue to wait in
  Pool* pool = nullptr;
  if (request.path == "/metrics") {
    pool = scrape_pool_.get();
  } else {
    std::shared_lock<std::shared_mutex> lock(mu_);
    if (json_.count(request.path)) pool = api_pool_.get();
  }
  if (!pool) return error(404);
  if (budget_.exhausted()) {
    count(kBusy);
    return error(503);
  }
  // /metrics and the query-free JSON answers ignore their query: their
  // requests share one answer whatever their query says, so /metrics?n=1,
  // ?n=2, ... cannot each cost a serialisation.
  if (request.path == "/metrics" || takes_no_query(request.path)) request.query.clear();
  {
    std::lock_guard<std::mutex> lock(pool->mu);
    if (pool->queue.size() >= limits_.max_queued_requests) {
      count(kBusy);
      return error(503);
    }
    pool->queue.push_back({c.id, std::move(request.path), std::move(request.query)});
  }
  pool->cv.notify_one();
  c.state = Connection::kWorking;
  c.state_since_ms = now;
  watch(c, 0);
}

void HttpServer::respond(Connection& c, const Reply& reply, int64_t now) {
  std::string head = "HTTP/1.1 " + std::to_string(reply.status) + " " + status_text(reply.status) + "\r\n";
  head += std::string("Content-Type: ") + reply.content_type + "\r\n";
  head += "Content-Length: " + std::to_string(reply.body->size()) + "\r\n";
  head += "Cache-Control: no-store\r\nX-Content-Type-Options: nosniff\r\n";
  if (reply.status == 405) head += "Allow: GET\r\n";
  if (reply.status == 401) head += "WWW-Authenticate: Basic realm=\"tcpscope\", charset=\"UTF-8\"\r\n";
  if (!c.keep_alive) head += "Connection: close\r\n";
  head += "\r\n";
  let_go_of_response(c);
  budget_.hold(reply.body, head.size());
  c.head = std::move(head);
  c.body = reply.body;
  c.state = Connection::kWriting;
  c.state_since_ms = now;
  c.deadline_ms = now + limits_.response_deadline_ms;
  watch(c, EPOLLOUT);
  on_writable(c, now);
}

void HttpServer::on_writable(Connection& c, int64_t now) {
  while (c.out_sent < c.out_size()) {
    iovec iov[2];
    int parts = 0;
    if (c.out_sent < c.head.size()) iov[parts++] = {&c.head[c.out_sent], c.head.size() - c.out_sent};
    const size_t body_sent = c.out_sent > c.head.size() ? c.out_sent - c.head.size() : 0;
    iov[parts++] = {const_cast<char*>(c.body->data()) + body_sent, c.body->size() - body_sent};
    msghdr msg{};
    msg.msg_iov = iov;
    msg.msg_iovlen = static_cast<size_t>(parts);
    const ssize_t n = sendmsg(c.fd, &msg, MSG_NOSIGNAL);
    if (n > 0) {
      c.out_sent += static_cast<size_t>(n);
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return;
    return close_connection(c.id);
  }
  let_go_of_response(c);
  if (!c.keep_alive) {
    // Read (and drop) what the client still sends for a moment, so that the
    // close does not reset the connection before it has read the answer.
    shutdown(c.fd, SHUT_WR);
    c.state = Connection::kLingering;
    c.state_since_ms = now;
    c.deadline_ms = now + kLingerMs;
    c.in.clear();
    watch(c, EPOLLIN | EPOLLRDHUP);
    return;
  }
  c.state = Connection::kReading;
  c.state_since_ms = now;
  c.deadline_ms = now + (c.in.empty() ? limits_.idle_keep_alive_ms : limits_.head_deadline_ms);
  watch(c, EPOLLIN | EPOLLRDHUP);
  if (!c.in.empty()) next_request(c, now);
}

void HttpServer::collect_done(int64_t now) {
  std::vector<Done> done;
  {
    std::lock_guard<std::mutex> lock(done_mu_);
    done.swap(done_);
  }
  // A reply that was queued counts against the response budget as a new
  // request does: past it, 503. Requests answered together share one body:
  // once the first of them holds it, the others cost only their heads.
  for (Done& d : done) {
    auto it = connections_.find(d.connection);
    if (it == connections_.end()) continue;
    Connection& c = *it->second;
    if (c.state != Connection::kWorking) continue;
    if (!budget_.fits(d.reply.body)) {
      count(kBusy);
      respond(c, Reply{503, kTextContentType, std::string(status_text(503)) + "\n"}, now);
      continue;
    }
    respond(c, d.reply, now);
  }
}

void HttpServer::expire(int64_t now) {
  std::vector<uint64_t> expired;
  for (auto& [id, c] : connections_)
    if (c->state != Connection::kWorking && now >= c->deadline_ms) expired.push_back(id);
  for (uint64_t id : expired) {
    auto it = connections_.find(id);
    if (it == connections_.end()) continue;
    Connection& c = *it->second;
    if (c.state == Connection::kReading && (!c.in.empty() || c.requests == 0)) {
      // A request that did not arrive in time (or never began) gets 408 on
      // its way out; an idle kept-alive connection just closes.
      count(kHeadTimeout);
      c.keep_alive = false;
      c.in.clear();
      respond(c, Reply{408, kTextContentType, "Request Timeout\n"}, now);
      continue;
    }
    if (c.state == Connection::kWriting) count(kResponseTimeout);
    close_connection(id);
  }
}

// ---------------------------------------------------------------- workers

void HttpServer::run_worker(Pool* pool) {
  for (;;) {
    Pool::Request request;
    std::vector<uint64_t> also;  // queued for the same path and query: the same answer
    {
      std::unique_lock<std::mutex> lock(pool->mu);
      pool->cv.wait(lock, [&] { return pool->stopping || !pool->queue.empty(); });
      if (pool->stopping) return;
      request = std::move(pool->queue.front());
      pool->queue.pop_front();
      for (auto it = pool->queue.begin(); it != pool->queue.end();) {
        if (it->path == request.path && it->query == request.query) {
          also.push_back(it->connection);
          it = pool->queue.erase(it);
        } else {
          ++it;
        }
      }
    }
    Reply reply;
    try {
      reply = serve(request.path, request.query);
    } catch (const std::bad_alloc&) {
      reply = Reply{503, kTextContentType, "Service Unavailable\n"};
    } catch (const std::exception& e) {
      log(request.path + ": " + e.what());
      reply = Reply{500, kTextContentType, "Internal Server Error\n"};
    }
    {
      std::lock_guard<std::mutex> lock(done_mu_);
      for (uint64_t id : also) done_.push_back(Done{id, reply});
      done_.push_back(Done{request.connection, std::move(reply)});
    }
    const uint64_t one = 1;
    (void)!write(wake_fd_, &one, sizeof(one));
  }
}

bool HttpServer::authorized(const HttpRequest& request, const std::string& peer_text) {
  std::shared_ptr<const BasicAuth> auth;
  {
    std::shared_lock<std::shared_mutex> lock(mu_);
    auth = auth_;
  }
  if (!auth || request.path == "/healthz") return true;
  if (auth->accepts(request.authorization.empty() ? nullptr : request.authorization.c_str())) return true;
  // A client without credentials is the normal first step of Basic auth;
  // wrong ones are counted and worth a (rate-limited) line.
  if (!request.authorization.empty()) {
    count(kAuthFailed);
    log("authentication failed for a request from " + peer_text);
  }
  return false;
}

std::string HttpServer::metrics_text() {
  std::shared_ptr<prometheus::Registry> registry;
  {
    std::shared_lock<std::shared_mutex> lock(mu_);
    registry = registry_;
  }
  if (!registry) return {};
  std::vector<prometheus::MetricFamily> families = registry->Collect();
  prometheus::MetricFamily rejected;
  rejected.name = "tcpscope_http_rejected_total";
  rejected.help = "HTTP connections and requests turned away, by reason (docs/security.md \"Robustness\").";
  rejected.type = prometheus::MetricType::Counter;
  for (int r = 0; r < kRejectionCount; ++r) {
    prometheus::ClientMetric m;
    m.label.push_back({"reason", rejection_name(static_cast<Rejection>(r))});
    m.counter.value = static_cast<double>(this->rejected(static_cast<Rejection>(r)));
    rejected.metric.push_back(std::move(m));
  }
  families.push_back(std::move(rejected));
  return prometheus::TextSerializer().Serialize(families);
}

HttpServer::Reply HttpServer::health_reply() {
  HealthCheck health;
  {
    std::shared_lock<std::shared_mutex> lock(mu_);
    health = health_;
  }
  if (!health) return Reply{503, kTextContentType, "starting\n"};
  std::pair<bool, std::string> h;
  try {
    h = health();
  } catch (const std::exception&) {
    h = {false, "health check failed"};
  }
  if (!h.first) return Reply{503, kTextContentType, one_line_reason(h.second) + "\n"};
  // The status code is the contract; a healthy body may still name what degrades.
  return Reply{200, kTextContentType, (h.second.empty() ? "ok" : "ok; " + one_line_reason(h.second)) + "\n"};
}

bool HttpServer::takes_no_query(const std::string& path) const {
  std::shared_lock<std::shared_mutex> lock(mu_);
  return query_free_.count(path) > 0;
}

HttpServer::Reply HttpServer::serve(const std::string& path, const std::string& query) {
  if (path == "/metrics") {
    std::string text = metrics_text();
    if (text.empty()) return Reply{404, kTextContentType, "Not Found\n"};
    return Reply{200, kMetricsContentType, std::move(text)};
  }
  JsonHandler json;
  {
    std::shared_lock<std::shared_mutex> lock(mu_);
    if (auto it = json_.find(path); it != json_.end()) json = it->second;
  }
  if (!json) return Reply{404, kTextContentType, "Not Found\n"};
  try {
    std::string body = json(query);
    body += '\n';
    return Reply{200, kJsonContentType, std::move(body)};
  } catch (const std::invalid_argument& e) {
    const auto body = nlohmann::json{{"error", e.what()}};
    return Reply{400, kJsonContentType, json_text(body) + "\n"};
  } catch (const std::bad_alloc&) {
    throw;
  } catch (const std::exception& e) {
    log(path + ": " + e.what());
    return Reply{500, kJsonContentType, json_text(nlohmann::json{{"error", "internal error"}}) + "\n"};
  }
}

}  // namespace tcpscope
