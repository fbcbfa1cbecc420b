// The daemon's HTTP endpoint (civetweb): GET /metrics (Prometheus text format
// 0.0.4), GET /healthz, and JSON API paths other modules register. Only GET:
// other methods get 405, a request with a body 413 (and the connection is
// closed without reading the body), unknown paths 404. There is no file
// serving.
//
// Optional TLS and basic authentication (config `http:`, README "Security"):
// with basic auth every path but /healthz answers 401 without valid
// credentials; /healthz says only "ok" or a short generic reason.
//
// Slow and stuck clients: civetweb gives each connection a worker thread for
// as long as it takes to read the request and write the response. There are
// kWorkerThreads of them, and a request must arrive (and each part of a
// response be taken) within kRequestTimeoutMs, so fewer stuck clients than
// workers (ones that send half a request and hang) do not delay /metrics at
// all, and each further kWorkerThreads of them by kRequestTimeoutMs.
//
// Handlers run on civetweb's worker threads; everything they read is set
// through the methods below, which are safe to call while serving.
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <shared_mutex>
#include <string>
#include <utility>

#include "config.h"
#include "http_auth.h"

struct mg_context;
struct mg_connection;

namespace prometheus {
class Registry;
}

namespace tcpscope {

class HttpServer {
 public:
  // (healthy, reason). Healthy: 200 "ok", or "ok; <reason>" naming what
  // degrades (a failing output). Else 503 "<reason>". One line either way;
  // keep secrets and file paths out of it (tokens that look like paths are
  // redacted anyway).
  using HealthCheck = std::function<std::pair<bool, std::string>()>;
  // Gets the raw query string ("" when none) and returns a JSON document.
  // Throw std::invalid_argument for a bad query (-> 400 {"error": what()});
  // any other exception is a 500.
  using JsonHandler = std::function<std::string(const std::string& query)>;

  // listen: "127.0.0.1:9810", "0.0.0.0:9810", "[::1]:9810"; port 0 picks a
  // free port (see port()). On failure returns null and sets *error to one
  // line naming the address and the reason, e.g.
  // "listen 127.0.0.1:9810: Address already in use".
  static std::unique_ptr<HttpServer> start(const std::string& listen, std::string* error);
  // The same with TLS and/or basic auth as `security` asks. TLS needs a
  // civetweb that can load OpenSSL at run time: when it cannot, start fails
  // with one line saying so (Debian 12's civetweb 1.15 cannot use OpenSSL 3).
  static std::unique_ptr<HttpServer> start(const std::string& listen, const HttpConfig& security,
                                           std::string* error);

  static constexpr int kWorkerThreads = 32;
  static constexpr int kRequestTimeoutMs = 3000;
  ~HttpServer();
  HttpServer(const HttpServer&) = delete;
  HttpServer& operator=(const HttpServer&) = delete;

  // GET /metrics renders this registry (404 until set).
  void serve_metrics(std::shared_ptr<prometheus::Registry> registry);
  // GET /healthz: 200 "ok[; <reason>]\n" or 503 "<reason>\n". Until set: 503 "starting".
  void set_health(HealthCheck check);
  // GET <path> (exact match, e.g. "/api/v1/flows") answers with handler(query)
  // as application/json. /metrics and /healthz cannot be overridden.
  void handle_json(const std::string& path, JsonHandler handler);

  // Replaces the basic-auth credentials (none when `security` has no user),
  // for requests from now on; a SIGHUP applies a rotated password this way.
  // False with *error if the digest is malformed (the old ones stay).
  bool set_basic_auth(const HttpConfig& security, std::string* error);

  // The bound port (useful after listening on port 0); 0 once stopped.
  int port() const;
  const std::string& listen_address() const { return listen_; }
  // Stops accepting, waits for requests in flight; idempotent.
  void stop();

 private:
  HttpServer() = default;
  static int on_request(mg_connection* conn);
  static int on_log(const mg_connection* conn, const char* message);
  int handle(mg_connection* conn);
  bool authorized(mg_connection* conn, const std::string& path);
  void log(const char* message);
  void poke_listener() const;

  std::string listen_;
  mg_context* ctx_ = nullptr;
  int port_ = 0;
  mutable std::shared_mutex mu_;  // guards the credentials and handlers below
  std::shared_ptr<const BasicAuth> auth_;  // null: no authentication
  std::shared_ptr<prometheus::Registry> registry_;
  HealthCheck health_;
  std::map<std::string, JsonHandler> json_;

  std::mutex log_mu_;
  bool starting_ = true;        // civetweb messages are collected, not printed, during start
  std::string start_messages_;  // last message civetweb logged while starting
  int64_t log_window_start_s_ = 0;
  int log_lines_in_window_ = 0;
};

}  // namespace tcpscope
