#include "http/http_server.h"
#include "http/response_budget.h"

#include <arpa/inet.h>
#include <linux/ipv6.h>
#include <net/if.h>
#include <netinet/in.h>
#include <sched.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <unistd.h>

#include <gtest/gtest.h>
#include <prometheus/counter.h>
#include <prometheus/gauge.h>
#include <prometheus/registry.h>

#include <algorithm>
#include <atomic>
#include <cctype>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <functional>
#include <map>
#include <set>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

namespace tcpscope {
namespace {

struct Response {
  int status = 0;
  std::map<std::string, std::string> headers;  // lower-case names
  std::string body;
};

// A connected socket to 127.0.0.1:port with a receive timeout so that a
// server that never answers fails the test instead of hanging it;
// receive_buffer > 0: that small a receive buffer (a slow reader).
int connect_to(int port, int receive_buffer = 0) {
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) throw std::runtime_error(std::string("socket: ") + strerror(errno));
  timeval tv{5, 0};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  if (receive_buffer > 0) setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &receive_buffer, sizeof(receive_buffer));
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

// One request on a connection of its own; extra_headers are whole lines.
Response request(int port, const std::string& method, const std::string& target,
                 const std::string& extra_headers = "") {
  int fd = connect_to(port);
  std::string pending;
  try {
    send_all(fd, method + " " + target + " HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n" + extra_headers +
                     "\r\n");
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

TEST(HttpServerTest, Ipv6ListenServes) {
  std::string error;
  auto server = HttpServer::start("[::1]:0", &error);
  ASSERT_TRUE(server) << error;
  server->set_health([] { return std::make_pair(true, std::string()); });
  int fd = socket(AF_INET6, SOCK_STREAM | SOCK_CLOEXEC, 0);
  ASSERT_GE(fd, 0);
  timeval tv{5, 0};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  sockaddr_in6 sa{};
  sa.sin6_family = AF_INET6;
  sa.sin6_port = htons(static_cast<uint16_t>(server->port()));
  sa.sin6_addr = in6addr_loopback;
  ASSERT_EQ(connect(fd, reinterpret_cast<sockaddr*>(&sa), sizeof(sa)), 0) << strerror(errno);
  send_all(fd, "GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n");
  std::string pending;
  EXPECT_EQ(read_response(fd, &pending).body, "ok\n");
  close(fd);
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
    EXPECT_EQ(request(port, "GET", path, "Authorization: Basic cHJvbWV0aGV1czp3cm9uZw==\r\n").status, 401) << path;
  }
  // prometheus:s3cret
  const std::string good = "Authorization: Basic cHJvbWV0aGV1czpzM2NyZXQ=\r\n";
  EXPECT_EQ(request(port, "GET", "/metrics", good).status, 200);
  EXPECT_EQ(request(port, "GET", "/api/v1/flows", good).body, "[]\n");
  EXPECT_EQ(request(port, "GET", "/nope", good).status, 404);
  // Wrong credentials are counted (one per path above); none at all are not.
  EXPECT_EQ(server->rejected(HttpServer::kAuthFailed), 3u);
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

std::vector<int> hang(int port, int n, const std::string& partial) {
  std::vector<int> fds;
  for (int i = 0; i < n; ++i) {
    fds.push_back(connect_to(port));
    if (!partial.empty()) send_all(fds.back(), partial);
  }
  return fds;
}

void close_all(const std::vector<int>& fds) {
  for (int fd : fds) close(fd);
}

HttpServer::Limits test_limits() {
  HttpServer::Limits l;
  l.max_connections_per_peer = 2000;  // these tests' clients are all 127.0.0.1
  return l;
}

// A server on test_limits(), but for what `adjust` changes in them.
std::unique_ptr<HttpServer> start_with(const std::function<void(HttpServer::Limits&)>& adjust = {}) {
  HttpServer::Limits limits = test_limits();
  if (adjust) adjust(limits);
  std::string error;
  auto server = HttpServer::start("127.0.0.1:0", HttpConfig{}, limits, &error);
  EXPECT_TRUE(server) << error;
  if (server) {
    server->serve_metrics(std::make_shared<prometheus::Registry>());
    server->set_health([] { return std::make_pair(true, std::string()); });
  }
  return server;
}

// Clients that connect and say nothing, send half a request, or stop in the
// middle of a header cost the server a descriptor each, not a thread:
// /metrics answers at once with 600 of them holding connections.
TEST(HttpServerSecurityTest, StuckClientsDoNotDelayMetrics) {
  auto server = start_with();
  ASSERT_TRUE(server);
  std::vector<int> stuck = hang(server->port(), 200, "");
  for (int fd : hang(server->port(), 200, "GET /metrics HTTP/1.1\r\nHost: x\r\n")) stuck.push_back(fd);
  for (int fd : hang(server->port(), 200, "GET /metr")) stuck.push_back(fd);
  usleep(100 * 1000);
  const auto t0 = std::chrono::steady_clock::now();
  EXPECT_EQ(request(server->port(), "GET", "/metrics").status, 200);
  EXPECT_LT(seconds_since(t0), 0.2);
  close_all(stuck);
}

// A request must be whole within the head deadline however it trickles in:
// one header line every 100 ms gets 408 at the deadline, counted.
TEST(HttpServerSecurityTest, TricklingRequestGets408AtTheHeadDeadline) {
  auto server = start_with([](HttpServer::Limits& l) { l.head_deadline_ms = 400; });
  ASSERT_TRUE(server);
  int fd = connect_to(server->port());
  const auto t0 = std::chrono::steady_clock::now();
  send_all(fd, "GET /metrics HTTP/1.1\r\n");
  std::string reply;
  for (int i = 0; i < 20 && reply.empty(); ++i) {
    usleep(100 * 1000);
    try {
      send_all(fd, "X-Slow-" + std::to_string(i) + ": 1\r\n");
    } catch (const std::runtime_error&) {
      break;  // closed already
    }
    char buf[256];
    const ssize_t n = recv(fd, buf, sizeof(buf), MSG_DONTWAIT);
    if (n > 0) reply.assign(buf, static_cast<size_t>(n));
  }
  if (reply.empty()) reply = read_until_close(fd);
  close(fd);
  EXPECT_EQ(reply.rfind("HTTP/1.1 408 ", 0), 0u) << reply;
  EXPECT_LT(seconds_since(t0), 0.4 + 0.5);
  EXPECT_EQ(server->rejected(HttpServer::kHeadTimeout), 1u);

  // Connect and wait: the same.
  fd = connect_to(server->port());
  EXPECT_EQ(read_until_close(fd).rfind("HTTP/1.1 408 ", 0), 0u);
  close(fd);
  EXPECT_EQ(server->rejected(HttpServer::kHeadTimeout), 2u);
}

// At a peer's cap a new connection replaces the peer's oldest idle one; when
// every one is being answered, the new one is refused.
TEST(HttpServerSecurityTest, PeerCapReplacesTheOldestIdleConnection) {
  auto server = start_with([](HttpServer::Limits& l) { l.max_connections_per_peer = 4; });
  ASSERT_TRUE(server);
  std::vector<int> idle = hang(server->port(), 4, "GET /he");
  Response r = request(server->port(), "GET", "/healthz");
  EXPECT_EQ(r.status, 200);
  EXPECT_EQ(server->rejected(HttpServer::kConnectionLimit), 1u);
  // The first (oldest) was closed; the others still wait for their deadline.
  char c;
  EXPECT_EQ(recv(idle[0], &c, 1, 0), 0);
  EXPECT_EQ(recv(idle[1], &c, 1, MSG_DONTWAIT), -1);
  EXPECT_EQ(errno, EAGAIN);
  close_all(idle);
  usleep(100 * 1000);  // the server sees them go

  server->handle_json("/api/v1/slow", [](const std::string&) {
    usleep(800 * 1000);
    return std::string("{}");
  });
  std::vector<int> busy = hang(server->port(), 4, "GET /api/v1/slow HTTP/1.1\r\nHost: x\r\n\r\n");
  usleep(100 * 1000);
  EXPECT_THROW(request(server->port(), "GET", "/healthz"), std::runtime_error);
  EXPECT_EQ(server->rejected(HttpServer::kConnectionLimit), 2u);
  for (int fd : busy) {
    std::string pending;
    EXPECT_EQ(read_response(fd, &pending).status, 200);
  }
  close_all(busy);
}

// Scrapes have workers of their own: JSON queries that take seconds, and a
// queue of them, do not delay /metrics; past the queue's bound they get 503.
TEST(HttpServerSecurityTest, SlowQueriesNeitherDelayScrapesNorQueueWithoutBound) {
  auto server = start_with([](HttpServer::Limits& l) { l.api_workers = 1; l.max_queued_requests = 2; });
  ASSERT_TRUE(server);
  server->handle_json("/api/v1/slow", [](const std::string&) {
    usleep(1500 * 1000);
    return std::string("{}");
  });
  std::vector<int> fds;
  for (int i = 0; i < 5; ++i) {
    fds.push_back(connect_to(server->port()));
    send_all(fds.back(), "GET /api/v1/slow HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
    usleep(20 * 1000);
  }
  const auto t0 = std::chrono::steady_clock::now();
  EXPECT_EQ(request(server->port(), "GET", "/metrics").status, 200);
  EXPECT_EQ(request(server->port(), "GET", "/healthz").status, 200);
  EXPECT_LT(seconds_since(t0), 0.2);
  int busy = 0, ok = 0;
  for (int fd : fds) {
    const std::string reply = read_until_close(fd);
    busy += reply.rfind("HTTP/1.1 503 ", 0) == 0;
    ok += reply.rfind("HTTP/1.1 200 ", 0) == 0;
  }
  close_all(fds);
  EXPECT_EQ(busy, 2);  // one running, two queued, two turned away
  EXPECT_EQ(ok, 3);
  EXPECT_EQ(server->rejected(HttpServer::kBusy), 2u);
}

// A reply that waited in the queue asks the response budget for room when
// it is ready, as a new request does: with a 16 MiB answer still unread by
// its client, the next ones (queued before it was sent) get 503.
TEST(HttpServerSecurityTest, QueuedRepliesCountAgainstTheResponseBudget) {
  auto server = start_with([](HttpServer::Limits& l) {
    l.api_workers = 1;
    l.max_pending_output_bytes = size_t(24) << 20;
  });
  ASSERT_TRUE(server);
  server->handle_json("/api/v1/big", [](const std::string& query) {
    usleep(200 * 1000);
    return "\"" + query + std::string(16 << 20, 'x') + "\"";
  });
  std::vector<int> fds;
  for (int i = 0; i < 4; ++i) {
    fds.push_back(connect_to(server->port(), 4096));
    send_all(fds.back(), "GET /api/v1/big?n=" + std::to_string(i) + " HTTP/1.1\r\nHost: x\r\n\r\n");
  }
  std::vector<std::string> status;
  for (size_t i = 0; i < fds.size(); ++i) {
    char line[13] = {};
    EXPECT_EQ(recv(fds[i], line, 12, MSG_WAITALL), 12) << i;
    status.push_back(line);
  }
  close_all(fds);
  EXPECT_EQ(status[0], "HTTP/1.1 200");
  for (size_t i = 1; i < status.size(); ++i) EXPECT_EQ(status[i], "HTTP/1.1 503") << i;
  EXPECT_EQ(server->rejected(HttpServer::kBusy), 3u);
}

// The budget holds what is in memory: a body ten connections share is one
// string and counts once, each connection's head for itself; the body's
// bytes leave with its last holder.
TEST(ResponseBudgetTest, ASharedBodyCountsOnceUntilItsLastHolderLetsGo) {
  ResponseBudget budget(10000);
  const auto shared = std::make_shared<const std::string>(4000, 'x');
  const auto other = std::make_shared<const std::string>(3000, 'y');
  const auto third = std::make_shared<const std::string>(3000, 'z');
  budget.hold(shared, 100);
  EXPECT_EQ(budget.used(), 4100u);
  for (int i = 0; i < 9; ++i) budget.hold(shared, 100);
  EXPECT_EQ(budget.used(), 4000u + 10 * 100);
  EXPECT_TRUE(budget.fits(other));  // 5000 + 3000 of 10000
  budget.hold(other, 100);
  EXPECT_EQ(budget.used(), 8100u);
  EXPECT_FALSE(budget.fits(third));  // 8100 + 3000: a body not held yet costs its size
  EXPECT_TRUE(budget.fits(shared));  // one held already costs nothing more
  for (int i = 0; i < 9; ++i) budget.release(shared, 100);
  EXPECT_EQ(budget.used(), 4000u + 100 + 3100) << "one holder left keeps the body counted";
  budget.release(shared, 100);
  EXPECT_EQ(budget.used(), 3100u);
  budget.release(other, 100);
  EXPECT_EQ(budget.used(), 0u);
  // With nothing held, any answer fits, even one bigger than the budget;
  // while it is held, the budget is exhausted for new requests.
  const auto huge = std::make_shared<const std::string>(20000, 'h');
  EXPECT_TRUE(budget.fits(huge));
  budget.hold(huge, 100);
  EXPECT_TRUE(budget.exhausted());
  budget.release(huge, 100);
  EXPECT_FALSE(budget.exhausted());
  EXPECT_EQ(budget.used(), 0u);
}

// 64 clients ask /metrics together and never read. The page (8 MiB) is
// more than a socket's send buffer takes (tcp_wmem's 4 MiB), so the answers
// wait in the server. They share one answer (two: the first request may be
// answered alone), and the response budget counts each once, not 64 times:
// 64 copies would pass the 128 MiB budget and the real scrape that follows
// would get 503. When the clients go, so do the bytes.
TEST(HttpServerSecurityTest, NonReadingClientsOfOneSharedAnswerLeaveRoomForTheScrape) {
  auto server = start_with([](HttpServer::Limits& l) { l.max_connections_per_peer = 128; });
  ASSERT_TRUE(server);
  auto registry = std::make_shared<prometheus::Registry>();
  auto& padding = prometheus::BuildGauge().Name("padding").Help("makes the page big").Register(*registry);
  for (int i = 0; i < 120000; ++i) padding.Add({{"i", std::to_string(i) + std::string(50, 'p')}});
  server->serve_metrics(registry);
  constexpr int kClients = 64;
  std::vector<int> fds;
  for (int i = 0; i < kClients; ++i) {
    fds.push_back(connect_to(server->port(), 4096));
    send_all(fds.back(), "GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n");
  }
  for (size_t i = 0; i < fds.size(); ++i) {  // each has begun to take its answer, and stops there
    char line[13] = {};
    EXPECT_EQ(recv(fds[i], line, 12, MSG_WAITALL), 12) << i;
    EXPECT_STREQ(line, "HTTP/1.1 200") << i;
  }
  const size_t held = server->response_bytes_held();
  const auto t0 = std::chrono::steady_clock::now();
  const Response scrape = request(server->port(), "GET", "/metrics");
  const double took = seconds_since(t0);
  const size_t page = scrape.body.size();
  std::printf("%d non-reading clients of a %.2f MiB page: %.2f MiB held in the budget (one copy each: %.1f MiB "
              "of %zu MiB); the scrape beside them took %.0f ms\n",
              kClients, page / 1048576.0, held / 1048576.0, kClients * page / 1048576.0,
              server->limits().max_pending_output_bytes >> 20, took * 1000);
  EXPECT_EQ(scrape.status, 200);
  EXPECT_GT(kClients * page, server->limits().max_pending_output_bytes) << "the page is too small to matter";
  EXPECT_GE(held, page);
  EXPECT_LE(held, 2 * page + kClients * 512) << "two bodies and 64 heads at most";
  EXPECT_LT(took, 2.0);
  EXPECT_EQ(server->rejected(HttpServer::kBusy), 0u);
  close_all(fds);
  for (int i = 0; i < 100 && server->response_bytes_held() > 0; ++i) usleep(20 * 1000);
  EXPECT_EQ(server->response_bytes_held(), 0u) << "the last holder went, the body with it";
}

// /metrics ignores its query, and so does the sharing of its answers:
// scrapes queued behind a serialisation get one answer between them,
// whatever their query says. A gauge that changes all the time tells one
// serialisation from another.
TEST(HttpServerSecurityTest, MetricsRequestsShareOneAnswerWhateverTheirQuery) {
  auto server = start_ephemeral();
  ASSERT_TRUE(server);
  auto registry = std::make_shared<prometheus::Registry>();
  auto& padding = prometheus::BuildGauge().Name("padding").Help("makes a serialisation take a while").Register(*registry);
  for (int i = 0; i < 100000; ++i) padding.Add({{"i", std::to_string(i)}});
  auto& moving = prometheus::BuildGauge().Name("moving").Help("changes all the time").Register(*registry).Add({});
  server->serve_metrics(registry);
  std::atomic<bool> stop{false};
  std::thread mover([&] {
    while (!stop) moving.Increment();
  });
  int first = connect_to(server->port());
  send_all(first, "GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n");
  std::vector<int> fds;
  for (int i = 0; i < 20; ++i) {
    fds.push_back(connect_to(server->port()));
    send_all(fds.back(), "GET /metrics?n=" + std::to_string(i) + " HTTP/1.1\r\nHost: x\r\n\r\n");
  }
  std::string pending;
  const Response r = read_response(first, &pending);
  std::set<std::string> answers;
  for (int fd : fds) {
    pending.clear();
    answers.insert(read_response(fd, &pending).body);
  }
  stop = true;
  mover.join();
  close(first);
  close_all(fds);
  EXPECT_EQ(r.status, 200);
  EXPECT_LE(answers.size(), 2u) << "20 scrapes queued behind one serialisation";
}

// Runs `body` on a thread of its own in a network namespace of its own
// (unshare moves only the calling thread), whose lo is up and also holds
// 198.18.0.1-5 and fd00::1-5: addresses of this host that are not loopback
// ones. The namespace goes with the thread and its sockets. Returns "", or
// why the namespace could not be made or `body` threw.
std::string in_private_netns(const std::function<void()>& body) {
  std::string failure;
  std::thread t([&] {
    if (unshare(CLONE_NEWNET) != 0) {
      failure = std::string("unshare(CLONE_NEWNET): ") + strerror(errno);
      return;
    }
    const int s4 = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    const int s6 = socket(AF_INET6, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    ifreq lo{};
    std::strcpy(lo.ifr_name, "lo");
    lo.ifr_flags = IFF_UP;
    if (s4 < 0 || s6 < 0 || ioctl(s4, SIOCSIFFLAGS, &lo) != 0) failure = std::string("lo up: ") + strerror(errno);
    for (uint32_t i = 1; i <= 5 && failure.empty(); ++i) {
      ifreq a{};
      std::snprintf(a.ifr_name, sizeof(a.ifr_name), "lo:%u", i);
      auto& sin = reinterpret_cast<sockaddr_in&>(a.ifr_addr);
      sin.sin_family = AF_INET;
      sin.sin_addr.s_addr = htonl(0xc6120000 + i);  // 198.18.0.i
      in6_ifreq a6{};
      inet_pton(AF_INET6, ("fd00::" + std::to_string(i)).c_str(), &a6.ifr6_addr);
      a6.ifr6_prefixlen = 128;
      a6.ifr6_ifindex = static_cast<int>(if_nametoindex("lo"));
      if (ioctl(s4, SIOCSIFADDR, &a) != 0 || ioctl(s6, SIOCSIFADDR, &a6) != 0)
        failure = std::string("address on lo: ") + strerror(errno);
    }
    if (s4 >= 0) close(s4);
    if (s6 >= 0) close(s6);
    if (!failure.empty()) return;
    try {
      body();
    } catch (const std::exception& e) {
      failure = e.what();
    }
  });
  t.join();
  return failure;
}

// How many of five connections, each from the next of `sources` to a
// server on `listen` with a per-peer cap of 4, the cap replaced: 1 when
// they are one peer (the fifth takes the place of the first), 0 when they
// are five.
uint64_t replaced_at_a_cap_of_four(const std::string& listen, const std::vector<std::string>& sources) {
  HttpServer::Limits limits = test_limits();
  limits.max_connections_per_peer = 4;
  std::string error;
  auto server = HttpServer::start(listen, HttpConfig{}, limits, &error);
  EXPECT_TRUE(server) << error;
  if (!server) return 0;
  server->set_health([] { return std::make_pair(true, std::string()); });
  const bool v6 = listen[0] == '[';
  sockaddr_storage to{};
  socklen_t to_len = 0;
  if (v6) {
    auto& a = reinterpret_cast<sockaddr_in6&>(to);
    a.sin6_family = AF_INET6;
    a.sin6_port = htons(static_cast<uint16_t>(server->port()));
    a.sin6_addr = in6addr_loopback;
    to_len = sizeof(a);
  } else {
    auto& a = reinterpret_cast<sockaddr_in&>(to);
    a.sin_family = AF_INET;
    a.sin_port = htons(static_cast<uint16_t>(server->port()));
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    to_len = sizeof(a);
  }
  std::vector<int> fds;
  for (const std::string& source : sources) {
    const int fd = socket(to.ss_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) throw std::runtime_error(std::string("socket: ") + strerror(errno));
    fds.push_back(fd);
    timeval tv{5, 0};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    sockaddr_storage from{};
    if (v6) {
      from.ss_family = AF_INET6;
      inet_pton(AF_INET6, source.c_str(), &reinterpret_cast<sockaddr_in6&>(from).sin6_addr);
    } else {
      from.ss_family = AF_INET;
      inet_pton(AF_INET, source.c_str(), &reinterpret_cast<sockaddr_in&>(from).sin_addr);
    }
    EXPECT_EQ(bind(fd, reinterpret_cast<sockaddr*>(&from), to_len), 0) << source << ": " << strerror(errno);
    EXPECT_EQ(connect(fd, reinterpret_cast<sockaddr*>(&to), to_len), 0) << source << ": " << strerror(errno);
    // Answered, and kept alive idle: accepted (and any connection it
    // replaced closed) before the next one connects.
    send_all(fd, "GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n");
    std::string pending;
    EXPECT_EQ(read_response(fd, &pending).status, 200) << source;
  }
  const uint64_t replaced = server->rejected(HttpServer::kConnectionLimit);
  char c;
  if (replaced == 1) {
    EXPECT_EQ(recv(fds[0], &c, 1, MSG_DONTWAIT), 0) << "the first one closed";
  }
  close_all(fds);
  return replaced;
}

// This host is one peer for the per-peer cap, whatever source address its
// clients take: every client of a loopback listener (any address of this
// host can reach it, and only this host can), and on any listener one
// from 127.0.0.0/8. Other addresses are peers of their own.
TEST(HttpServerSecurityTest, ThisHostIsOnePeerWhateverItsSourceAddress) {
  const std::vector<std::string> loopback = {"127.0.0.2", "127.0.0.3", "127.0.0.4", "127.0.0.5", "127.0.0.6"};
  const std::vector<std::string> host = {"198.18.0.1", "198.18.0.2", "198.18.0.3", "198.18.0.4", "198.18.0.5"};
  const std::vector<std::string> host6 = {"fd00::1", "fd00::2", "fd00::3", "fd00::4", "fd00::5"};
  const std::string failure = in_private_netns([&] {
    EXPECT_EQ(replaced_at_a_cap_of_four("127.0.0.1:0", loopback), 1u);
    EXPECT_EQ(replaced_at_a_cap_of_four("127.0.0.1:0", host), 1u);
    EXPECT_EQ(replaced_at_a_cap_of_four("[::1]:0", host6), 1u);
    EXPECT_EQ(replaced_at_a_cap_of_four("0.0.0.0:0", loopback), 1u);
    EXPECT_EQ(replaced_at_a_cap_of_four("0.0.0.0:0", host), 0u);
  });
  if (failure.rfind("unshare", 0) == 0 && geteuid() != 0) GTEST_SKIP() << failure << " (needs root)";
  EXPECT_EQ(failure, "");
}

// A client that does not take its response is closed at the response
// deadline, whatever trickle of progress it allows.
TEST(HttpServerSecurityTest, SlowReaderIsClosedAtTheResponseDeadline) {
  auto server = start_with([](HttpServer::Limits& l) { l.response_deadline_ms = 500; });
  ASSERT_TRUE(server);
  server->handle_json("/api/v1/big", [](const std::string&) { return "\"" + std::string(16 << 20, 'x') + "\""; });
  int fd = connect_to(server->port(), 4096);
  send_all(fd, "GET /api/v1/big HTTP/1.1\r\nHost: x\r\n\r\n");
  const auto t0 = std::chrono::steady_clock::now();
  size_t got = 0;
  char buf[1024];
  for (int i = 0; i < 100; ++i) {  // 1 KiB every 20 ms: progress, but far too slow
    const ssize_t n = recv(fd, buf, sizeof(buf), 0);
    if (n <= 0) break;
    got += static_cast<size_t>(n);
    usleep(20 * 1000);
  }
  close(fd);
  EXPECT_LT(got, size_t(16) << 20);
  EXPECT_LT(seconds_since(t0), 1.9);
  EXPECT_EQ(server->rejected(HttpServer::kResponseTimeout), 1u);
}

TEST(HttpServerTest, KeepAliveEndsAfterTheRequestCap) {
  auto server = start_with([](HttpServer::Limits& l) { l.max_requests_per_connection = 3; });
  ASSERT_TRUE(server);
  int fd = connect_to(server->port());
  std::string pending;
  for (int i = 1; i <= 3; ++i) {
    send_all(fd, "GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n");
    Response r = read_response(fd, &pending);
    EXPECT_EQ(r.status, 200);
    EXPECT_EQ(r.headers.count("connection"), i == 3 ? 1u : 0u) << i;
  }
  EXPECT_EQ(read_until_close(fd), "");
  close(fd);
}

// The server's own counters come with /metrics.
TEST(HttpServerTest, MetricsCarryTheRejectionCounters) {
  auto server = start_with();
  ASSERT_TRUE(server);
  int fd = connect_to(server->port());
  send_all(fd, "GARBAGE\r\n\r\n");
  read_until_close(fd);
  close(fd);
  const std::string body = request(server->port(), "GET", "/metrics").body;
  EXPECT_NE(body.find("tcpscope_http_rejected_total{reason=\"malformed\"} 1\n"), std::string::npos) << body;
  EXPECT_NE(body.find("tcpscope_http_rejected_total{reason=\"auth_failed\"} 0\n"), std::string::npos) << body;
}

}  // namespace
}  // namespace tcpscope
