#include "http_server.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>
#include <civetweb.h>
#include <prometheus/registry.h>
#include <prometheus/text_serializer.h>

#include <nlohmann/json.hpp>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <exception>
#include <fstream>
#include <stdexcept>
#include <thread>
#include <vector>

namespace tcpscope {

namespace {

constexpr const char* kMetricsContentType = "text/plain; version=0.0.4; charset=utf-8";
constexpr const char* kTextContentType = "text/plain; charset=utf-8";
constexpr const char* kJsonContentType = "application/json";
constexpr size_t kMaxHealthReason = 200;
constexpr int kMaxLogLinesPerMinute = 20;  // a misbehaving client must not flood the journal

// civetweb's feature bit for IPv6 listening sockets (mg_check_feature).
constexpr unsigned kCivetFeatureIpv6 = MG_FEATURES_IPV6;
constexpr size_t kMaxPemBytes = 1 << 20;
// civetweb's ssl_protocol_version 4: TLS 1.2 and newer only.
constexpr const char* kTlsMinimumProtocol = "4";

void init_civetweb_once() {
  static std::once_flag once;
  std::call_once(once, [] { mg_init_library(0); });
}

// Checks "HOST:PORT" with HOST an IPv4 literal or a bracketed IPv6 literal.
// civetweb's own messages for a bad spec are cryptic, so the daemon's user
// gets this one instead.
bool valid_listen(const std::string& listen, bool* ipv6, std::string* why) {
  const size_t colon = listen.rfind(':');
  if (colon == std::string::npos || colon + 1 == listen.size()) {
    *why = "expected HOST:PORT, e.g. 127.0.0.1:9810 or [::1]:9810";
    return false;
  }
  const std::string port = listen.substr(colon + 1);
  if (port.size() > 5 || port.find_first_not_of("0123456789") != std::string::npos || std::stoul(port) > 65535) {
    *why = "invalid port \"" + port + "\"";
    return false;
  }
  std::string host = listen.substr(0, colon);
  unsigned char buf[16];
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']') {
    *ipv6 = true;
    host = host.substr(1, host.size() - 2);
    if (inet_pton(AF_INET6, host.c_str(), buf) == 1) return true;
    *why = "invalid IPv6 address \"" + host + "\"";
    return false;
  }
  *ipv6 = false;
  if (inet_pton(AF_INET, host.c_str(), buf) == 1) return true;
  *why = "invalid host \"" + host + "\" (expected an IPv4 address or [IPv6 address])";
  return false;
}

// civetweb logs "cannot bind to 127.0.0.1:9810: 98 (Address already in use)";
// the user wants the reason in parentheses.
std::string bind_reason(const std::string& message) {
  const size_t open = message.rfind('(');
  const size_t close = message.rfind(')');
  if (message.rfind("cannot bind", 0) == 0 && open != std::string::npos && close != std::string::npos && close > open)
    return message.substr(open + 1, close - open - 1);
  return message;
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
    case 500: return "Internal Server Error";
    case 503: return "Service Unavailable";
    default: return "";
  }
}

int send(mg_connection* conn, int status, const char* content_type, const std::string& body) {
  mg_response_header_start(conn, status);
  mg_response_header_add(conn, "Content-Type", content_type, -1);
  mg_response_header_add(conn, "Content-Length", std::to_string(body.size()).c_str(), -1);
  mg_response_header_add(conn, "Cache-Control", "no-store", -1);
  mg_response_header_add(conn, "X-Content-Type-Options", "nosniff", -1);
  if (status == 405) mg_response_header_add(conn, "Allow", "GET", -1);
  if (status == 401) mg_response_header_add(conn, "WWW-Authenticate", "Basic realm=\"tcpscope\", charset=\"UTF-8\"", -1);
  mg_response_header_send(conn);
  if (!body.empty()) mg_write(conn, body.data(), body.size());
  return status;
}

int send_error(mg_connection* conn, int status) {
  return send(conn, status, kTextContentType, std::string(status_text(status)) + "\n");
}

// Nothing here takes a request body. civetweb would read (and discard) a
// body the handler left unread before it answers the next request, holding a
// worker for as long as a client trickles it: an error sent through
// mg_send_http_error marks the connection to be closed instead.
bool has_body(mg_connection* conn, const mg_request_info* ri) {
  return ri->content_length > 0 || mg_get_header(conn, "Transfer-Encoding") != nullptr;
}

// civetweb reads the private key and the certificate from one PEM file; a
// missing part gets a clearer line here than from OpenSSL.
bool check_pem(const std::string& path, std::string* why) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    *why = "cannot read " + path + ": " + std::strerror(errno);
    return false;
  }
  std::string text(kMaxPemBytes, '\0');
  in.read(&text[0], static_cast<std::streamsize>(text.size()));
  text.resize(static_cast<size_t>(in.gcount()));
  if (text.find("PRIVATE KEY-----") == std::string::npos) {
    *why = path + " has no private key (PEM \"BEGIN ... PRIVATE KEY\"): civetweb reads the key and the "
                  "certificate from this one file";
    return false;
  }
  if (text.find("BEGIN CERTIFICATE-----") == std::string::npos) {
    *why = path + " has no certificate (PEM \"BEGIN CERTIFICATE\")";
    return false;
  }
  return true;
}

}  // namespace

std::unique_ptr<HttpServer> HttpServer::start(const std::string& listen, std::string* error) {
  return start(listen, HttpConfig{}, error);
}

std::unique_ptr<HttpServer> HttpServer::start(const std::string& listen, const HttpConfig& security,
                                              std::string* error) {
  bool ipv6 = false;
  std::string why;
  if (!valid_listen(listen, &ipv6, &why)) {
    *error = "listen " + listen + ": " + why;
    return nullptr;
  }
  init_civetweb_once();
  if (ipv6 && !mg_check_feature(kCivetFeatureIpv6)) {
    *error = "listen " + listen + ": this civetweb library was built without IPv6 support; use an IPv4 address";
    return nullptr;
  }

  if (security.tls()) {
    // mg_check_feature() only says TLS was compiled in; whether civetweb can
    // load OpenSSL is known once it tries.
    if (!(mg_init_library(MG_FEATURES_TLS) & MG_FEATURES_TLS)) {
      *error = "listen " + listen + ": TLS (http.tls_certificate) is not available: this civetweb library "
               "cannot load OpenSSL at run time (Debian 12's civetweb 1.15 cannot use OpenSSL 3); serve "
               "plain HTTP on a loopback address behind a TLS proxy instead";
      return nullptr;
    }
    std::string why;
    if (!check_pem(security.tls_certificate, &why)) {
      *error = "listen " + listen + ": http.tls_certificate: " + why;
      return nullptr;
    }
  }
  std::unique_ptr<HttpServer> server(new HttpServer());
  server->listen_ = listen;
  if (!server->set_basic_auth(security, error)) {
    *error = "listen " + listen + ": " + *error;
    return nullptr;
  }
  // civetweb marks a TLS port with a trailing "s".
  const std::string listening_ports = security.tls() ? listen + "s" : listen;
  const std::string threads = std::to_string(kWorkerThreads);
  const std::string request_timeout = std::to_string(kRequestTimeoutMs);
  std::vector<const char*> options = {
      "listening_ports", listening_ports.c_str(),
      "num_threads", threads.c_str(),
      // Time for a whole request to arrive, and for each write of the
      // response to make progress: what a stuck client can hold a worker for.
      "request_timeout_ms", request_timeout.c_str(),
      "enable_keep_alive", "yes",
      // An idle keep-alive connection occupies a worker; keep the wait short.
      "keep_alive_timeout_ms", "1000",
      // Request line + headers; a scraper sends a few hundred bytes.
      "max_request_size", "8192",
      "tcp_nodelay", "1",
      "enable_directory_listing", "no",
  };
  if (security.tls()) {
    for (const char* o : {"ssl_certificate", security.tls_certificate.c_str(), "ssl_protocol_version",
                          kTlsMinimumProtocol})
      options.push_back(o);
  }
  options.push_back(nullptr);
  mg_callbacks callbacks{};
  callbacks.begin_request = &HttpServer::on_request;
  callbacks.log_message = &HttpServer::on_log;
  mg_init_data init{};
  init.callbacks = &callbacks;
  init.user_data = server.get();
  init.configuration_options = options.data();
  char text[256] = "";
  unsigned code = 0;
  mg_error_data err{&code, text, sizeof(text)};

  server->ctx_ = mg_start2(&init, &err);
  std::string messages;
  {
    std::lock_guard<std::mutex> lock(server->log_mu_);
    server->starting_ = false;
    messages = server->start_messages_;
  }
  if (!server->ctx_) {
    std::string reason = !messages.empty() ? bind_reason(messages) : text[0] ? text : "civetweb failed to start";
    *error = "listen " + listen + ": " + reason;
    return nullptr;
  }
  mg_server_port ports[4];
  const int n = mg_get_server_ports(server->ctx_, 4, ports);
  server->port_ = n > 0 ? ports[0].port : 0;
  return server;
}

HttpServer::~HttpServer() { stop(); }

void HttpServer::stop() {
  if (!ctx_) return;
  // civetweb's accept loop polls with a 2 s timeout and only then sees the
  // stop flag; a connection to ourselves wakes it so that SIGTERM and the
  // tests do not wait those 2 s.
  std::atomic<bool> stopped{false};
  std::thread waker([this, &stopped] {
    while (!stopped.load()) {
      poke_listener();
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
  });
  mg_stop(ctx_);  // joins the worker threads: no handler runs after this
  stopped = true;
  waker.join();
  ctx_ = nullptr;
  port_ = 0;
}

void HttpServer::poke_listener() const {
  const bool v6 = !listen_.empty() && listen_.front() == '[';
  std::string host = listen_.substr(0, listen_.rfind(':'));
  if (v6) host = host.substr(1, host.size() - 2);
  if (host == "0.0.0.0") host = "127.0.0.1";
  if (host == "::") host = "::1";
  const int fd = socket(v6 ? AF_INET6 : AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd < 0) return;
  if (v6) {
    sockaddr_in6 sa{};
    sa.sin6_family = AF_INET6;
    sa.sin6_port = htons(static_cast<uint16_t>(port_));
    inet_pton(AF_INET6, host.c_str(), &sa.sin6_addr);
    connect(fd, reinterpret_cast<sockaddr*>(&sa), sizeof(sa));
  } else {
    sockaddr_in sa{};
    sa.sin_family = AF_INET;
    sa.sin_port = htons(static_cast<uint16_t>(port_));
    inet_pton(AF_INET, host.c_str(), &sa.sin_addr);
    connect(fd, reinterpret_cast<sockaddr*>(&sa), sizeof(sa));
  }
  close(fd);
}

int HttpServer::port() const { return port_; }

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
}

int HttpServer::on_request(mg_connection* conn) {
  auto* self = static_cast<HttpServer*>(mg_get_user_data(mg_get_context(conn)));
  return self->handle(conn);
}

int HttpServer::on_log(const mg_connection* conn, const char* message) {
  const mg_context* ctx = conn ? mg_get_context(conn) : nullptr;
  auto* self = ctx ? static_cast<HttpServer*>(mg_get_user_data(ctx)) : nullptr;
  if (self) {
    self->log(message);
  } else {
    std::fprintf(stderr, "tcpscope: http: %s\n", message);
  }
  return 1;  // handled: civetweb must not write its own error log
}

void HttpServer::log(const char* message) {
  std::lock_guard<std::mutex> lock(log_mu_);
  if (starting_) {
    // The first message names the cause ("cannot bind to ..."); later ones
    // are civetweb's generic "Failed to setup server ports".
    if (start_messages_.empty()) start_messages_ = message;
    return;
  }
  const int64_t now_s =
      std::chrono::duration_cast<std::chrono::seconds>(std::chrono::steady_clock::now().time_since_epoch()).count();
  if (now_s - log_window_start_s_ >= 60) {
    log_window_start_s_ = now_s;
    log_lines_in_window_ = 0;
  }
  if (++log_lines_in_window_ <= kMaxLogLinesPerMinute)
    std::fprintf(stderr, "tcpscope: http: %s\n", message);
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

bool HttpServer::authorized(mg_connection* conn, const std::string& path) {
  std::shared_ptr<const BasicAuth> auth;
  {
    std::shared_lock<std::shared_mutex> lock(mu_);
    auth = auth_;
  }
  if (!auth || path == "/healthz") return true;
  const char* credentials = mg_get_header(conn, "Authorization");
  if (auth->accepts(credentials)) return true;
  // A client without credentials is the normal first step of Basic auth;
  // wrong ones are worth a (rate-limited) line.
  if (credentials) {
    const mg_request_info* ri = mg_get_request_info(conn);
    log((std::string("authentication failed for a request from ") + (ri->remote_addr[0] ? ri->remote_addr : "?"))
            .c_str());
  }
  return false;
}

int HttpServer::handle(mg_connection* conn) {
  const mg_request_info* ri = mg_get_request_info(conn);
  const std::string path = ri->local_uri ? ri->local_uri : "";
  const bool get = std::strcmp(ri->request_method, "GET") == 0;
  if (has_body(conn, ri)) {
    const int status = get ? 413 : 405;
    mg_send_http_error(conn, status, "%s", get ? "request bodies are not accepted" : "only GET is served");
    return status;
  }
  if (!get) return send_error(conn, 405);
  if (!authorized(conn, path)) return send_error(conn, 401);

  std::shared_ptr<prometheus::Registry> registry;
  HealthCheck health;
  JsonHandler json;
  {
    std::shared_lock<std::shared_mutex> lock(mu_);
    if (path == "/metrics") {
      registry = registry_;
    } else if (path == "/healthz") {
      health = health_;
    } else if (auto it = json_.find(path); it != json_.end()) {
      json = it->second;
    }
  }

  if (path == "/metrics") {
    if (!registry) return send_error(conn, 404);
    return send(conn, 200, kMetricsContentType, prometheus::TextSerializer().Serialize(registry->Collect()));
  }
  if (path == "/healthz") {
    if (!health) return send(conn, 503, kTextContentType, "starting\n");
    std::pair<bool, std::string> h;
    try {
      h = health();
    } catch (const std::exception& e) {
      h = {false, "health check failed"};
    }
    if (!h.first) return send(conn, 503, kTextContentType, one_line_reason(h.second) + "\n");
    // The status code is the contract; a healthy body may still name what degrades.
    return send(conn, 200, kTextContentType, (h.second.empty() ? "ok" : "ok; " + one_line_reason(h.second)) + "\n");
  }
  if (json) {
    const std::string query = ri->query_string ? ri->query_string : "";
    try {
      std::string body = json(query);
      body += '\n';
      return send(conn, 200, kJsonContentType, body);
    } catch (const std::invalid_argument& e) {
      const auto body = nlohmann::json{{"error", e.what()}};
      return send(conn, 400, kJsonContentType,
                  body.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) + "\n");
    } catch (const std::exception& e) {
      log((path + ": " + e.what()).c_str());
      return send(conn, 500, kJsonContentType, nlohmann::json{{"error", "internal error"}}.dump() + "\n");
    }
  }
  return send_error(conn, 404);
}

}  // namespace tcpscope
