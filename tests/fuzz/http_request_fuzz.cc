// libFuzzer target: the HTTP request path of the daemon's endpoint. Each
// input is sent as raw bytes over a real TCP connection to an HttpServer in
// this process (http_request.cc parses the request; the server routes it,
// checks basic auth, refuses bodies and other methods), then the write side
// is shut and the answer read. The first input byte picks the server: even =
// plain, odd = with basic auth. Failures: a sanitizer report on any thread,
// an answer that is not HTTP, a connection the server neither answers nor
// closes within kReplyTimeoutS, or a server that stops answering /healthz.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include <prometheus/counter.h>
#include <prometheus/registry.h>

#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <stdexcept>
#include <string>

#include "http/http_auth.h"
#include "http/http_server.h"

namespace {

constexpr int kReplyTimeoutS = 8;  // > the server's request timeout
constexpr unsigned kHealthEvery = 16;

[[noreturn]] void fail(const std::string& why) {
  std::fprintf(stderr, "http_request_fuzz: %s\n", why.c_str());
  std::abort();
}

tcpscope::HttpServer* make_server(bool auth) {
  tcpscope::HttpConfig security;
  if (auth) {
    security.basic_auth_user = "prometheus";
    security.basic_auth_password_sha256 = tcpscope::to_hex(tcpscope::sha256("s3cret"));
  }
  std::string error;
  auto server = tcpscope::HttpServer::start("127.0.0.1:0", security, &error);
  if (!server) fail("cannot start the server: " + error);
  auto registry = std::make_shared<prometheus::Registry>();
  prometheus::BuildCounter().Name("fuzz_requests_total").Help("h").Register(*registry).Add({{"k", "v"}}).Increment();
  server->serve_metrics(registry);
  server->set_health([] { return std::make_pair(true, std::string()); });
  server->handle_json("/api/v1/flows", [](const std::string& query) {
    if (query.find("bad") != std::string::npos) throw std::invalid_argument("bad query " + query);
    if (query.find("boom") != std::string::npos) throw std::runtime_error("internal");
    return std::string("[]");
  });
  // Lives until the process ends: civetweb's threads serve every input.
  return server.release();
}

struct Servers {
  tcpscope::HttpServer* plain = make_server(false);
  tcpscope::HttpServer* auth = make_server(true);
};

Servers& servers() {
  static Servers s;
  return s;
}

int connect_to(int port) {
  const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) fail(std::string("socket: ") + std::strerror(errno));
  timeval tv{kReplyTimeoutS, 0};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
  sockaddr_in sa{};
  sa.sin_family = AF_INET;
  sa.sin_port = htons(static_cast<uint16_t>(port));
  sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (connect(fd, reinterpret_cast<sockaddr*>(&sa), sizeof sa) == 0) return fd;
  // libFuzzer's timeout timer (SIGALRM) can interrupt a connect() that waits
  // for room in the accept queue; the handshake goes on: wait for its end.
  if (errno != EINTR && errno != EINPROGRESS) fail(std::string("connect: ") + std::strerror(errno));
  pollfd pfd{fd, POLLOUT, 0};
  int ready;
  do {
    ready = poll(&pfd, 1, kReplyTimeoutS * 1000);
  } while (ready < 0 && errno == EINTR);
  if (ready == 0) fail("connect: no accept within " + std::to_string(kReplyTimeoutS) + " s");
  int err = 0;
  socklen_t len = sizeof err;
  if (ready < 0 || getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len) != 0) fail(std::string("connect: ") + std::strerror(errno));
  if (err != 0) fail(std::string("connect: ") + std::strerror(err));
  return fd;
}

// Sends `request`, shuts the write side, reads until the server closes.
std::string exchange(int port, const uint8_t* data, size_t size) {
  const int fd = connect_to(port);
  size_t off = 0;
  while (off < size) {
    const ssize_t n = send(fd, data + off, size - off, MSG_NOSIGNAL);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;  // the server may close early (e.g. an oversized request)
    off += static_cast<size_t>(n);
  }
  shutdown(fd, SHUT_WR);
  std::string reply;
  char buf[16384];
  for (;;) {
    const ssize_t n = read(fd, buf, sizeof buf);
    if (n > 0) {
      reply.append(buf, static_cast<size_t>(n));
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
      fail("no answer and no close within " + std::to_string(kReplyTimeoutS) + " s");
    break;  // EOF or reset
  }
  close(fd);
  return reply;
}

void check_healthy(int port) {
  static const char kHealth[] = "GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n";
  const std::string reply = exchange(port, reinterpret_cast<const uint8_t*>(kHealth), sizeof kHealth - 1);
  if (reply.rfind("HTTP/1.1 200 ", 0) != 0) fail("/healthz stopped answering 200: " + reply.substr(0, 80));
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static unsigned count = 0;
  if (size == 0) return 0;
  tcpscope::HttpServer* server = (data[0] & 1) ? servers().auth : servers().plain;
  const std::string reply = exchange(server->port(), data + 1, size - 1);
  // The server answers whatever it could parse; it may also just close (e.g.
  // half a request, then the end of the stream). What comes back must be HTTP.
  if (!reply.empty() && reply.rfind("HTTP/", 0) != 0) fail("answer is not HTTP: " + reply.substr(0, 80));
  if (++count % kHealthEvery == 0) {
    check_healthy(servers().plain->port());
    check_healthy(servers().auth->port());
  }
  return 0;
}
