#include "http_server.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <gtest/gtest.h>
#include <prometheus/counter.h>
#include <prometheus/registry.h>

#include <algorithm>
#include <cctype>
#include <chrono>
#include <vector>
#include <cerrno>
#include <cstring>
#include <map>
#include <stdexcept>
#include <string>

namespace tcpscope {
namespace {

struct Response {
  int status = 0;
  std::map<std::string, std::string> headers;  // lower-case names
  std::string body;
};

// A connected socket to 127.0.0.1:port with a receive timeout so that a
// server that never answers fails the test instead of hanging it.
int connect_to(int port) {
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) throw std::runtime_error(std::string("socket: ") + strerror(errno));
  timeval tv{5, 0};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  sockaddr_in sa{};
  sa.sin_family = AF_INET;
  sa.sin_port = htons(static_cast<uint16_t>(port));
  sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (connect(fd, reinterpret_cast<sockaddr*>(&sa), sizeof(sa)) != 0) {
    int e = errno;
    close(fd);
    throw std::runtime_error(std::string("connect: ") + strerror(e));
  }
  return fd;
}

void send_all(int fd, const std::string& data) {
  size_t off = 0;
  while (off < data.size()) {
    ssize_t n = write(fd, data.data() + off, data.size() - off);
    if (n <= 0) throw std::runtime_error(std::string("write: ") + strerror(errno));
    off += static_cast<size_t>(n);
  }
}

// Reads exactly one response (headers + Content-Length body) from fd;
// `pending` carries bytes read past it for the next call.
Response read_response(int fd, std::string* pending) {
  std::string& buf = *pending;
  char chunk[65536];
  auto fill = [&] {
    ssize_t n = read(fd, chunk, sizeof(chunk));
    if (n < 0) throw std::runtime_error(std::string("read: ") + strerror(errno));
    if (n == 0) return false;
    buf.append(chunk, static_cast<size_t>(n));
    return true;
  };
  size_t header_end;
  while ((header_end = buf.find("\r\n\r\n")) == std::string::npos)
    if (!fill()) throw std::runtime_error("connection closed before the end of the headers");

  Response r;
  const std::string head = buf.substr(0, header_end);
  size_t line_end = head.find("\r\n");
  const std::string status_line = head.substr(0, line_end);
  if (status_line.rfind("HTTP/1.1 ", 0) != 0) throw std::runtime_error("bad status line: " + status_line);
  r.status = std::stoi(status_line.substr(9, 3));
  size_t pos = line_end == std::string::npos ? head.size() : line_end + 2;
  while (pos < head.size()) {
    size_t end = head.find("\r\n", pos);
    if (end == std::string::npos) end = head.size();
    const std::string line = head.substr(pos, end - pos);
    const size_t colon = line.find(':');
    std::string name = line.substr(0, colon);
    std::transform(name.begin(), name.end(), name.begin(), [](unsigned char c) { return std::tolower(c); });
    std::string value = line.substr(colon + 1);
    value.erase(0, value.find_first_not_of(' '));
    r.headers[name] = value;
    pos = end + 2;
  }
  buf.erase(0, header_end + 4);
  if (!r.headers.count("content-length")) throw std::runtime_error("no Content-Length");
  const size_t length = std::stoul(r.headers["content-length"]);
  while (buf.size() < length)
    if (!fill()) throw std::runtime_error("connection closed before the end of the body");
  r.body = buf.substr(0, length);
  buf.erase(0, length);
  return r;
}

Response request(int port, const std::string& method, const std::string& target) {
  int fd = connect_to(port);
  std::string pending;
  try {
    send_all(fd, method + " " + target + " HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n");
    Response r = read_response(fd, &pending);
    close(fd);
    return r;
  } catch (...) {
    close(fd);
    throw;
  }
}

std::unique_ptr<HttpServer> start_ephemeral() {
  std::string error;
  auto server = HttpServer::start("127.0.0.1:0", &error);
  EXPECT_TRUE(server) << error;
  return server;
}

TEST(HttpServerTest, BindsAnEphemeralPort) {
  auto server = start_ephemeral();
  ASSERT_TRUE(server);
  EXPECT_GT(server->port(), 0);
  EXPECT_LT(server->port(), 65536);
}

TEST(HttpServerTest, MetricsRendersTheRegistryInTextFormat) {
  auto server = start_ephemeral();
  ASSERT_TRUE(server);
  EXPECT_EQ(request(server->port(), "GET", "/metrics").status, 404);  // nothing to serve yet

  auto registry = std::make_shared<prometheus::Registry>();
  auto& c = prometheus::BuildCounter().Name("test_things_total").Help("things").Register(*registry).Add({{"k", "v"}});
  c.Increment(3);
  server->serve_metrics(registry);

  Response r = request(server->port(), "GET", "/metrics");
  EXPECT_EQ(r.status, 200);
  EXPECT_EQ(r.headers["content-type"], "text/plain; version=0.0.4; charset=utf-8");
  EXPECT_NE(r.body.find("# TYPE test_things_total counter\n"), std::string::npos) << r.body;
  EXPECT_NE(r.body.find("test_things_total{k=\"v\"} 3\n"), std::string::npos) << r.body;

  // The registry is rendered per request, not cached.
  c.Increment(2);
  r = request(server->port(), "GET", "/metrics");
  EXPECT_NE(r.body.find("test_things_total{k=\"v\"} 5\n"), std::string::npos) << r.body;
}

TEST(HttpServerTest, HealthzReportsTheCheck) {
  auto server = start_ephemeral();
  ASSERT_TRUE(server);
  Response r = request(server->port(), "GET", "/healthz");
  EXPECT_EQ(r.status, 503);
  EXPECT_EQ(r.body, "starting\n");

  bool healthy = true;
  std::string reason;
  server->set_health([&] { return std::make_pair(healthy, reason); });
  r = request(server->port(), "GET", "/healthz");
  EXPECT_EQ(r.status, 200);
  EXPECT_EQ(r.body, "ok\n");

  healthy = false;
  reason = "ring buffer not drained in time";
  r = request(server->port(), "GET", "/healthz");
  EXPECT_EQ(r.status, 503);
  EXPECT_EQ(r.body, "ring buffer not drained in time\n");

  // One line, and paths do not leak to an unauthenticated endpoint.
  reason = "cannot read /var/lib/secret/asn.mmdb\nsecond line";
  r = request(server->port(), "GET", "/healthz");
  EXPECT_EQ(r.status, 503);
  EXPECT_EQ(r.body, "cannot read [path] second line\n");

  server->set_health([]() -> std::pair<bool, std::string> { throw std::runtime_error("boom"); });
  r = request(server->port(), "GET", "/healthz");
  EXPECT_EQ(r.status, 503);
  EXPECT_EQ(r.body, "health check failed\n");
}

TEST(HttpServerTest, UnknownPathIs404AndOtherMethodsAre405) {
  auto server = start_ephemeral();
  ASSERT_TRUE(server);
  server->serve_metrics(std::make_shared<prometheus::Registry>());
  EXPECT_EQ(request(server->port(), "GET", "/nope").status, 404);
  EXPECT_EQ(request(server->port(), "GET", "/").status, 404);
  EXPECT_EQ(request(server->port(), "GET", "/metrics/extra").status, 404);
  EXPECT_EQ(request(server->port(), "GET", "/../etc/passwd").status, 404);
  for (const char* method : {"POST", "PUT", "DELETE", "HEAD"}) {
    Response r = request(server->port(), method, "/metrics");
    EXPECT_EQ(r.status, 405) << method;
    EXPECT_EQ(r.headers["allow"], "GET") << method;
  }
}

TEST(HttpServerTest, JsonHandlersGetTheQuery) {
  auto server = start_ephemeral();
  ASSERT_TRUE(server);
  server->handle_json("/api/v1/flows", [](const std::string& query) {
    if (query == "bad") throw std::invalid_argument("unknown filter \"bad\"");
    if (query == "crash") throw std::runtime_error("internal detail");
    return "{\"query\":\"" + query + "\"}";
  });
  Response r = request(server->port(), "GET", "/api/v1/flows?peer_class=client");
  EXPECT_EQ(r.status, 200);
  EXPECT_EQ(r.headers["content-type"], "application/json");
  EXPECT_EQ(r.body, "{\"query\":\"peer_class=client\"}\n");

  r = request(server->port(), "GET", "/api/v1/flows");
  EXPECT_EQ(r.body, "{\"query\":\"\"}\n");

  r = request(server->port(), "GET", "/api/v1/flows?bad");
  EXPECT_EQ(r.status, 400);
  EXPECT_EQ(r.body, "{\"error\":\"unknown filter \\\"bad\\\"\"}\n");

  r = request(server->port(), "GET", "/api/v1/flows?crash");
  EXPECT_EQ(r.status, 500);
  EXPECT_EQ(r.body.find("internal detail"), std::string::npos);

  // Built-in paths cannot be taken over.
  server->handle_json("/healthz", [](const std::string&) { return std::string("{}"); });
  EXPECT_EQ(request(server->port(), "GET", "/healthz").body, "starting\n");
}

TEST(HttpServerTest, KeepAliveServesSeveralRequestsOnOneConnection) {
  auto server = start_ephemeral();
  ASSERT_TRUE(server);
  server->set_health([] { return std::make_pair(true, std::string()); });
  int fd = connect_to(server->port());
  std::string pending;
  for (int i = 0; i < 3; ++i) {
    send_all(fd, "GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n");
    Response r = read_response(fd, &pending);
    EXPECT_EQ(r.status, 200) << "request " << i;
    EXPECT_EQ(r.body, "ok\n");
  }
  close(fd);
}

TEST(HttpServerTest, SecondServerOnTheSamePortFailsWithOneClearLine) {
  auto first = start_ephemeral();
  ASSERT_TRUE(first);
  const std::string listen = "127.0.0.1:" + std::to_string(first->port());
  std::string error;
  auto second = HttpServer::start(listen, &error);
  EXPECT_FALSE(second);
  EXPECT_EQ(error, "listen " + listen + ": Address already in use");
  // The first one is unaffected.
  EXPECT_EQ(request(first->port(), "GET", "/nope").status, 404);
}

TEST(HttpServerTest, RejectsMalformedListenAddresses) {
  for (const char* bad : {"9810", "localhost:9810", "127.0.0.1:", "127.0.0.1:99999", "127.0.0.1:http", "[::1:9810",
                          "[zz::1]:9810", "300.0.0.1:9810"}) {
    std::string error;
    EXPECT_FALSE(HttpServer::start(bad, &error)) << bad;
    EXPECT_EQ(error.rfind(std::string("listen ") + bad + ": ", 0), 0u) << error;
    EXPECT_EQ(error.find('\n'), std::string::npos) << error;
  }
}

TEST(HttpServerTest, Ipv6ListenServesOrSaysWhyNot) {
  std::string error;
  auto server = HttpServer::start("[::1]:0", &error);
  if (server) {
    EXPECT_GT(server->port(), 0);
  } else {
    // Debian's libcivetweb is built without IPv6; the message must say so.
    EXPECT_EQ(error, "listen [::1]:0: this civetweb library was built without IPv6 support; use an IPv4 address");
  }
}

TEST(HttpServerTest, StopClosesTheListener) {
  auto server = start_ephemeral();
  ASSERT_TRUE(server);
  const int port = server->port();
  server->stop();
  EXPECT_EQ(server->port(), 0);
  EXPECT_THROW(connect_to(port), std::runtime_error);
  server->stop();  // idempotent
  server.reset();
}

// --- Security: basic auth, request bodies, stuck clients, TLS availability.

Response request_with(int port, const std::string& target, const std::string& extra_headers) {
  int fd = connect_to(port);
  std::string pending;
  try {
    send_all(fd, "GET " + target + " HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n" + extra_headers + "\r\n");
    Response r = read_response(fd, &pending);
    close(fd);
    return r;
  } catch (...) {
    close(fd);
    throw;
  }
}

double seconds_since(const std::chrono::steady_clock::time_point& t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// Reads until the server closes the connection (or the 5 s receive timeout).
std::string read_until_close(int fd) {
  std::string out;
  char buf[4096];
  for (;;) {
    ssize_t n = read(fd, buf, sizeof buf);
    if (n <= 0) break;
    out.append(buf, static_cast<size_t>(n));
  }
  return out;
}

TEST(HttpServerSecurityTest, BasicAuthGuardsEverythingButHealthz) {
  HttpConfig security;
  security.basic_auth_user = "prometheus";
  security.basic_auth_password_sha256 = to_hex(sha256("s3cret"));
  std::string error;
  auto server = HttpServer::start("127.0.0.1:0", security, &error);
  ASSERT_TRUE(server) << error;
  server->serve_metrics(std::make_shared<prometheus::Registry>());
  server->set_health([] { return std::make_pair(true, std::string()); });
  server->handle_json("/api/v1/flows", [](const std::string&) { return std::string("[]"); });
  const int port = server->port();

  for (const char* path : {"/metrics", "/api/v1/flows", "/nope"}) {
    Response r = request(port, "GET", path);
    EXPECT_EQ(r.status, 401) << path;
    EXPECT_EQ(r.headers["www-authenticate"], "Basic realm=\"tcpscope\", charset=\"UTF-8\"") << path;
    EXPECT_EQ(r.body, "Unauthorized\n") << path;
    // prometheus:wrong
    EXPECT_EQ(request_with(port, path, "Authorization: Basic cHJvbWV0aGV1czp3cm9uZw==\r\n").status, 401) << path;
  }
  // prometheus:s3cret
  const std::string good = "Authorization: Basic cHJvbWV0aGV1czpzM2NyZXQ=\r\n";
  EXPECT_EQ(request_with(port, "/metrics", good).status, 200);
  EXPECT_EQ(request_with(port, "/api/v1/flows", good).body, "[]\n");
  EXPECT_EQ(request_with(port, "/nope", good).status, 404);
  // /healthz needs no credentials and says nothing but ok.
  Response h = request(port, "GET", "/healthz");
  EXPECT_EQ(h.status, 200);
  EXPECT_EQ(h.body, "ok\n");
}

TEST(HttpServerSecurityTest, BadDigestIsRefusedAtStart) {
  HttpConfig security;
  security.basic_auth_user = "prometheus";
  security.basic_auth_password_sha256 = "not-hex";
  std::string error;
  EXPECT_FALSE(HttpServer::start("127.0.0.1:0", security, &error));
  EXPECT_EQ(error, "listen 127.0.0.1:0: http.basic_auth_password_sha256 is not 64 hex digits");
}

// A client announcing a body it never sends must not hold a worker: the
// answer comes at once and the connection is closed without reading on.
TEST(HttpServerSecurityTest, RequestBodiesAreRefusedAndTheConnectionClosed) {
  auto server = start_ephemeral();
  ASSERT_TRUE(server);
  server->serve_metrics(std::make_shared<prometheus::Registry>());
  struct Case {
    const char* request;
    const char* status;
  };
  for (const Case& c : {Case{"GET /metrics HTTP/1.1\r\nHost: x\r\nContent-Length: 100000000\r\n\r\nabc", " 413 "},
                        Case{"POST /metrics HTTP/1.1\r\nHost: x\r\nContent-Length: 100000000\r\n\r\nabc", " 405 "},
                        Case{"PUT /metrics HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nab", " 405 "}}) {
    int fd = connect_to(server->port());
    const auto t0 = std::chrono::steady_clock::now();
    send_all(fd, c.request);
    const std::string reply = read_until_close(fd);
    const double took = seconds_since(t0);
    close(fd);
    EXPECT_NE(reply.find(c.status), std::string::npos) << c.request << " -> " << reply;
    EXPECT_LT(took, 1.0) << c.request;
  }
  EXPECT_EQ(request(server->port(), "GET", "/metrics").status, 200);
}

TEST(HttpServerSecurityTest, OversizedAndMalformedRequestsAre4xxAndServingGoesOn) {
  auto server = start_ephemeral();
  ASSERT_TRUE(server);
  server->set_health([] { return std::make_pair(true, std::string()); });
  const std::string huge_header = "GET /healthz HTTP/1.1\r\nHost: x\r\nX-Big: " + std::string(20000, 'a') + "\r\n\r\n";
  const std::string huge_target = "GET /" + std::string(20000, 'b') + " HTTP/1.1\r\nHost: x\r\n\r\n";
  for (const std::string& bad : {huge_header, huge_target, std::string("GARBAGE\r\n\r\n"),
                                 std::string("\x00\x01\x02\r\n\r\n", 7), std::string("GET /healthz HTTP/9.9\r\n\r\n"),
                                 std::string("GET healthz HTTP/1.1\r\n\r\n")}) {
    int fd = connect_to(server->port());
    try {
      send_all(fd, bad);
    } catch (const std::runtime_error&) {
      // The server may close before taking all of an oversized request.
    }
    const std::string reply = read_until_close(fd);
    close(fd);
    ASSERT_GE(reply.size(), 12u) << bad.substr(0, 40);
    const int status = std::stoi(reply.substr(9, 3));
    EXPECT_GE(status, 400) << reply;
    EXPECT_LT(status, 600) << reply;
    EXPECT_NE(status, 500) << reply;
  }
  EXPECT_EQ(request(server->port(), "GET", "/healthz").status, 200);
}

// Clients that send half a request and hang: with fewer of them than worker
// threads /metrics answers at once; with more, within the request timeout.
TEST(HttpServerSecurityTest, StuckClientsDoNotStarveMetrics) {
  auto server = start_ephemeral();
  ASSERT_TRUE(server);
  server->serve_metrics(std::make_shared<prometheus::Registry>());
  auto hang = [&](int n) {
    std::vector<int> fds;
    for (int i = 0; i < n; ++i) {
      fds.push_back(connect_to(server->port()));
      send_all(fds.back(), "GET /metrics HTTP/1.1\r\nHost: x\r\n");
    }
    return fds;
  };
  std::vector<int> stuck = hang(8);
  usleep(200 * 1000);
  auto t0 = std::chrono::steady_clock::now();
  EXPECT_EQ(request(server->port(), "GET", "/metrics").status, 200);
  EXPECT_LT(seconds_since(t0), 0.5);
  for (int fd : stuck) close(fd);

  stuck = hang(HttpServer::kWorkerThreads + 8);
  usleep(200 * 1000);
  t0 = std::chrono::steady_clock::now();
  EXPECT_EQ(request(server->port(), "GET", "/metrics").status, 200);
  EXPECT_LT(seconds_since(t0), HttpServer::kRequestTimeoutMs / 1000.0 + 1.5);
  for (int fd : stuck) close(fd);
}

// Whether this civetweb can do TLS is only known at run time; either way the
// answer is one line that says what is wrong.
TEST(HttpServerSecurityTest, TlsWithAMissingCertificateIsOneLine) {
  HttpConfig security;
  security.tls_certificate = "/nonexistent/tcpscope.pem";
  std::string error;
  EXPECT_FALSE(HttpServer::start("127.0.0.1:0", security, &error));
  EXPECT_EQ(error.find('\n'), std::string::npos) << error;
  const bool unavailable = error.find("TLS (http.tls_certificate) is not available") != std::string::npos;
  const bool unreadable = error.find("cannot read /nonexistent/tcpscope.pem: No such file or directory") != std::string::npos;
  EXPECT_TRUE(unavailable || unreadable) << error;
}

}  // namespace
}  // namespace tcpscope
