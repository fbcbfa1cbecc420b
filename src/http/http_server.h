// The daemon's HTTP endpoint: GET /metrics (Prometheus text format 0.0.4),
// GET /healthz, and JSON API paths other modules register. Only GET: other
// methods get 405, a request with a body 413 (the connection is closed
// without reading the body), unknown paths 404. There is no file serving.
//
// Optional basic authentication (config `http:`, docs/security.md "Security"): every
// path but /healthz answers 401 without valid credentials; /healthz says only
// "ok" or a short generic reason. Plain HTTP only: TLS is a proxy's job.
//
// Slow and hostile clients cannot hold what a scrape needs. One thread reads
// every connection with epoll, so a client that sends half a request, one
// byte a second or nothing costs a file descriptor and a few bytes, not a
// thread, and is closed at its deadline (Limits). /healthz is answered on
// that thread; other complete requests go to workers: /metrics has its own,
// the JSON API others, so slow queries never delay a scrape. A worker
// answers every request queued for the same path and query (for /metrics,
// whatever its query) with one result, made after they all arrived: a flood
// of /metrics costs one serialisation at a time. Each peer address has a
// connection cap, and this host is one peer whatever its source address
// (every client of a loopback listener; one from 127.0.0.0/8 or ::1 on any
// listener). At the cap (or the total cap) a new connection replaces the
// peer's oldest one that is done, idle or still sending its request, or
// still taking its response after a second, so a flood from an address
// cannot lock out a scraper at the same address. Responses wait in memory
// up to a total budget, which a queued request's reply asks for when it is
// ready, as a new request does; past it, 503. An answer shared by many
// connections counts once (ResponseBudget), so clients that ask /metrics
// together and never read cannot spend the budget on copies that do not
// exist.
// What is refused and why is counted
// (tcpscope_http_rejected_total{reason}, served with /metrics).
//
// Handlers run on the worker threads; everything they read is set through
// the methods below, which are safe to call while serving.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <shared_mutex>
#include <set>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "config/config.h"
#include "http/http_auth.h"
#include "http/response_budget.h"

namespace prometheus {
class Registry;
}

namespace tcpscope {

struct HttpRequest;

class HttpServer {
 public:
  // (healthy, reason). Healthy: 200 "ok", or "ok; <reason>" naming what
  // degrades (a failing output). Else 503 "<reason>". One line either way;
  // keep secrets and file paths out of it (tokens that look like paths are
  // redacted anyway). It runs on the server's I/O thread: it must not block.
  using HealthCheck = std::function<std::pair<bool, std::string>()>;
  // Gets the raw query string ("" when none; its escapes decode to valid
  // UTF-8) and returns a JSON document. Throw std::invalid_argument for a bad
  // query (-> 400 {"error": what()}); any other exception is a 500.
  using JsonHandler = std::function<std::string(const std::string& query)>;

  struct Limits {
    int max_connections = 1024;        // also held under RLIMIT_NOFILE
    int max_connections_per_peer = 64;
    int head_deadline_ms = 2000;       // request line + headers, from accept or the previous response
    int idle_keep_alive_ms = 5000;     // a kept-alive connection with nothing sent is closed after this
    int response_deadline_ms = 10000;  // the whole response taken by the client
    int max_requests_per_connection = 100;
    size_t max_head_bytes = 8192;
    size_t max_pending_output_bytes = size_t(128) << 20;  // answers held (ResponseBudget: a shared one once)
    int scrape_workers = 1;  // /metrics
    int api_workers = 2;     // JSON handlers
    size_t max_queued_requests = 256;  // per worker pool; past it 503
  };

  // Why a connection or request was turned away (the `reason` label).
  enum Rejection : int {
    kHeadTimeout,       // the request did not arrive within head_deadline_ms
    kResponseTimeout,   // the client did not take the response within response_deadline_ms
    kConnectionLimit,   // refused, or replaced, at the per-peer or total cap
    kMalformed,         // 400, 405, 413, 414, 431, 505
    kBusy,              // 503: worker queue or response memory full
    kAuthFailed,        // 401 with credentials that are wrong
    kRejectionCount
  };
  static const char* rejection_name(Rejection r);

  // listen: "127.0.0.1:9810", "0.0.0.0:9810", "[::1]:9810"; port 0 picks a
  // free port (see port()). On failure returns null and sets *error to one
  // line naming the address and the reason, e.g.
  // "listen 127.0.0.1:9810: Address already in use".
  static std::unique_ptr<HttpServer> start(const std::string& listen, std::string* error);
  // With basic auth as `security` asks.
  static std::unique_ptr<HttpServer> start(const std::string& listen, const HttpConfig& security,
                                           std::string* error);
  static std::unique_ptr<HttpServer> start(const std::string& listen, const HttpConfig& security,
                                           const Limits& limits, std::string* error);
  ~HttpServer();
  HttpServer(const HttpServer&) = delete;
  HttpServer& operator=(const HttpServer&) = delete;

  // GET /metrics renders this registry, and the server's own counters (404 until set).
  void serve_metrics(std::shared_ptr<prometheus::Registry> registry);
  // GET /healthz: 200 "ok[; <reason>]\n" or 503 "<reason>\n". Until set: 503 "starting".
  void set_health(HealthCheck check);
  // GET <path> (exact match, e.g. "/api/v1/flows") answers with handler(query)
  // as application/json. /metrics and /healthz cannot be overridden.
  void handle_json(const std::string& path, JsonHandler handler);
  // The same for an answer that has no query: the query is dropped, so
  // concurrent requests share one answer whatever their query strings say.
  void handle_json(const std::string& path, std::function<std::string()> handler);

  // Replaces the basic-auth credentials (none when `security` has no user),
  // for requests from now on; a SIGHUP applies a rotated password this way.
  // False with *error if the digest is malformed (the old ones stay).
  bool set_basic_auth(const HttpConfig& security, std::string* error);

  // The bound port (useful after listening on port 0); 0 once stopped.
  int port() const { return port_; }
  const std::string& listen_address() const { return listen_; }
  const Limits& limits() const { return limits_; }
  uint64_t rejected(Rejection r) const { return rejected_[r].load(std::memory_order_relaxed); }
  // What the answers connections hold count against max_pending_output_bytes
  // (a body shared by several connections once).
  size_t response_bytes_held() const { return budget_.used(); }
  // Stops accepting, finishes the requests workers hold, closes every connection; idempotent.
  void stop();

 private:
  struct Connection;
  struct Pool;
  // Copies share the body: one answer for many waiting requests is one string.
  struct Reply {
    Reply() = default;
    Reply(int s, const char* type, std::string text)
        : status(s), content_type(type), body(std::make_shared<const std::string>(std::move(text))) {}
    int status = 200;
    const char* content_type = nullptr;
    std::shared_ptr<const std::string> body;
  };
  struct Done {
    uint64_t connection;
    Reply reply;
  };

  explicit HttpServer(const Limits& limits);
  void run_io();
  void run_worker(Pool* pool);
  void accept_all(int64_t now_ms);
  bool make_room_for(const std::string& peer, int64_t now_ms);
  void on_readable(Connection& c, int64_t now_ms);
  void on_writable(Connection& c, int64_t now_ms);
  void next_request(Connection& c, int64_t now_ms);
  void dispatch(Connection& c, HttpRequest&& request, int64_t now_ms);
  void respond(Connection& c, const Reply& reply, int64_t now_ms);
  void collect_done(int64_t now_ms);
  void expire(int64_t now_ms);
  void close_connection(uint64_t id);  // a response not yet taken is reset, not sent on
  void let_go_of_response(Connection& c);  // its head and its share of the body leave the budget
  void watch(Connection& c, uint32_t events);
  void count(Rejection r) { rejected_[r].fetch_add(1, std::memory_order_relaxed); }
  Reply serve(const std::string& path, const std::string& query);
  bool takes_no_query(const std::string& path) const;
  std::string metrics_text();
  Reply health_reply();
  bool authorized(const HttpRequest& request, const std::string& peer_text);
  void log(const std::string& message);

  std::string listen_;
  bool loopback_listener_ = false;  // bound to 127.0.0.0/8 or ::1: every peer is this host
  Limits limits_;
  int port_ = 0;
  int listen_fd_ = -1;
  int epoll_fd_ = -1;
  int wake_fd_ = -1;  // eventfd: a worker finished, or stop()
  std::atomic<bool> stopping_{false};
  std::thread io_;
  std::vector<std::thread> workers_;
  std::unique_ptr<Pool> scrape_pool_, api_pool_;

  // The I/O thread's own state.
  std::map<uint64_t, std::unique_ptr<Connection>> connections_;
  std::map<std::string, int> per_peer_;
  uint64_t next_id_ = 2;  // 0: the listener, 1: wake_fd_
  ResponseBudget budget_;  // of the answers connections hold
  int64_t last_expiry_ms_ = 0;
  int64_t accept_paused_until_ms_ = 0;  // 0: the listener is watched

  std::mutex done_mu_;
  std::vector<Done> done_;

  std::atomic<uint64_t> rejected_[kRejectionCount] = {};

  mutable std::shared_mutex mu_;  // guards the credentials and handlers below
  std::shared_ptr<const BasicAuth> auth_;  // null: no authentication
  std::shared_ptr<prometheus::Registry> registry_;
  HealthCheck health_;
  std::map<std::string, JsonHandler> json_;
  std::set<std::string> query_free_;  // paths whose handler takes no query

  std::mutex log_mu_;
  int64_t log_window_start_s_ = 0;
  int log_lines_in_window_ = 0;
};

}  // namespace tcpscope
