#include "net/http_client.h"

#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <poll.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <optional>

#include "text/url_query.h"

namespace tcpscope {

namespace {

using Clock = std::chrono::steady_clock;

int remaining_ms(Clock::time_point deadline) {
  auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
  return left > 0 ? static_cast<int>(left) : 0;
}

// Waits for `events` on fd until the deadline; false on timeout or error (errno set).
bool wait_fd(int fd, short events, Clock::time_point deadline) {
  while (true) {
    pollfd p{fd, events, 0};
    int n = poll(&p, 1, remaining_ms(deadline));
    if (n > 0) return true;
    if (n == 0) {
      errno = ETIMEDOUT;
      return false;
    }
    if (errno != EINTR) return false;
  }
}

std::string lower(std::string s) {
  std::transform(s.begin(), s.end(), s.begin(), [](unsigned char c) { return std::tolower(c); });
  return s;
}

// Connects to host:port (every address getaddrinfo returns, in order).
int connect_to(const HttpUrl& u, Clock::time_point deadline, std::string* error) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* res = nullptr;
  int rc = getaddrinfo(u.host.c_str(), u.port.c_str(), &hints, &res);
  if (rc != 0) {
    *error = "resolve " + u.host + ": " + gai_strerror(rc);
    return -1;
  }
  std::string last = "no address";
  int fd = -1;
  for (addrinfo* ai = res; ai; ai = ai->ai_next) {
    fd = socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC | SOCK_NONBLOCK, ai->ai_protocol);
    if (fd < 0) {
      last = strerror(errno);
      continue;
    }
    if (connect(fd, ai->ai_addr, ai->ai_addrlen) == 0) break;
    if (errno == EINPROGRESS && wait_fd(fd, POLLOUT, deadline)) {
      int err = 0;
      socklen_t len = sizeof(err);
      getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len);
      if (err == 0) break;
      errno = err;
    }
    last = strerror(errno);
    close(fd);
    fd = -1;
  }
  freeaddrinfo(res);
  if (fd < 0) *error = "connect " + u.host + ":" + u.port + ": " + last;
  return fd;
}

bool send_all(int fd, const std::string& data, Clock::time_point deadline, std::string* error) {
  size_t off = 0;
  while (off < data.size()) {
    ssize_t n = send(fd, data.data() + off, data.size() - off, MSG_NOSIGNAL);
    if (n > 0) {
      off += static_cast<size_t>(n);
      continue;
    }
    if (n < 0 && (errno == EAGAIN || errno == EINTR)) {
      if (!wait_fd(fd, POLLOUT, deadline)) {
        *error = std::string("send: ") + strerror(errno);
        return false;
      }
      continue;
    }
    *error = std::string("send: ") + strerror(errno);
    return false;
  }
  return true;
}

// Undoes Transfer-Encoding: chunked; false if the body is malformed or cut.
bool dechunk(const std::string& in, std::string* out) {
  size_t pos = 0;
  out->clear();
  while (true) {
    size_t eol = in.find("\r\n", pos);
    if (eol == std::string::npos) return false;
    size_t size = 0;
    try {
      size = std::stoul(in.substr(pos, eol - pos), nullptr, 16);
    } catch (...) {
      return false;
    }
    pos = eol + 2;
    if (size == 0) return true;
    if (pos + size > in.size()) return false;
    out->append(in, pos, size);
    pos += size + 2;
  }
}

}  // namespace

bool parse_http_url(const std::string& url, HttpUrl* out, std::string* why) {
  std::string rest = url;
  const size_t scheme = rest.find("://");
  if (scheme != std::string::npos) {
    if (lower(rest.substr(0, scheme)) != "http") {
      *why = "only http:// URLs are supported (the daemon serves plain HTTP)";
      return false;
    }
    rest = rest.substr(scheme + 3);
  }
  HttpUrl u;
  const size_t slash = rest.find_first_of("/?");
  std::string authority = rest.substr(0, slash);
  const size_t at = authority.rfind('@');
  if (at != std::string::npos) {
    u.userinfo = url_decode(authority.substr(0, at));
    authority = authority.substr(at + 1);
  }
  if (slash != std::string::npos) u.target = rest[slash] == '/' ? rest.substr(slash) : "/" + rest.substr(slash);
  if (authority.empty()) {
    *why = "no host in \"" + redact_url(url) + "\"";
    return false;
  }
  if (authority.front() == '[') {
    const size_t close = authority.find(']');
    if (close == std::string::npos) {
      *why = "unterminated [IPv6] host in \"" + redact_url(url) + "\"";
      return false;
    }
    u.host = authority.substr(1, close - 1);
    if (close + 1 < authority.size()) {
      if (authority[close + 1] != ':') {
        *why = "expected :PORT after ] in \"" + redact_url(url) + "\"";
        return false;
      }
      u.port = authority.substr(close + 2);
    }
  } else {
    const size_t colon = authority.rfind(':');
    u.host = authority.substr(0, colon);
    if (colon != std::string::npos) u.port = authority.substr(colon + 1);
  }
  if (u.host.empty() || u.port.empty() || u.port.find_first_not_of("0123456789") != std::string::npos ||
      u.port.size() > 5 || std::stoul(u.port) == 0 || std::stoul(u.port) > 65535) {
    *why = "bad host or port in \"" + redact_url(url) + "\"";
    return false;
  }
  *out = std::move(u);
  return true;
}

bool http_get(const std::string& url, int timeout_ms, HttpResponse* out, std::string* error, size_t max_body_bytes,
              EnvCredentials env_credentials) {
  const std::string what = "GET " + redact_url(url) + ": ";
  HttpUrl u;
  std::string why;
  if (!parse_http_url(url, &u, &why)) {
    *error = what + why;
    return false;
  }
  const auto deadline = Clock::now() + std::chrono::milliseconds(timeout_ms);
  int fd = connect_to(u, deadline, &why);
  if (fd < 0) {
    *error = what + why;
    return false;
  }
  const std::string host_header = u.host.find(':') != std::string::npos ? "[" + u.host + "]" : u.host;
  std::string credentials = u.userinfo;
  if (credentials.empty() && env_credentials == EnvCredentials::kUse) {
    const char* env = std::getenv("TCPSCOPE_BASIC_AUTH");
    if (env) credentials = env;
  }
  const std::string authorization =
      credentials.empty() ? "" : "Authorization: Basic " + base64_encode(credentials) + "\r\n";
  const std::string request = "GET " + u.target + " HTTP/1.1\r\nHost: " + host_header + ":" + u.port +
                              "\r\nUser-Agent: tcpscope\r\nAccept: application/json, text/plain\r\n" +
                              authorization + "Connection: close\r\n\r\n";
  if (!send_all(fd, request, deadline, &why)) {
    close(fd);
    *error = what + why;
    return false;
  }
  std::string raw;
  char buf[65536];
  while (true) {
    ssize_t n = recv(fd, buf, sizeof(buf), 0);
    if (n > 0) {
      raw.append(buf, static_cast<size_t>(n));
      if (raw.size() > max_body_bytes + 65536) {
        close(fd);
        *error = what + "response larger than " + std::to_string(max_body_bytes) + " bytes";
        return false;
      }
      continue;
    }
    if (n == 0) break;
    if (errno == EINTR) continue;
    if (errno == EAGAIN && wait_fd(fd, POLLIN, deadline)) continue;
    const int e = errno;
    close(fd);
    *error = what + (e == ETIMEDOUT || e == EAGAIN ? "timed out after " + std::to_string(timeout_ms) + " ms"
                                                    : std::string("recv: ") + strerror(e));
    return false;
  }
  close(fd);

  const size_t head_end = raw.find("\r\n\r\n");
  if (raw.compare(0, 5, "HTTP/") != 0 || head_end == std::string::npos) {
    *error = what + "not an HTTP response";
    return false;
  }
  HttpResponse r;
  const size_t sp = raw.find(' ');
  try {
    r.status = std::stoi(raw.substr(sp + 1, 3));
  } catch (...) {
    *error = what + "malformed status line";
    return false;
  }
  bool chunked = false;
  std::optional<size_t> length;
  size_t pos = raw.find("\r\n") + 2;
  while (pos < head_end) {
    size_t eol = raw.find("\r\n", pos);
    const std::string line = raw.substr(pos, eol - pos);
    pos = eol + 2;
    const size_t colon = line.find(':');
    if (colon == std::string::npos) continue;
    const std::string name = lower(line.substr(0, colon));
    std::string value = line.substr(colon + 1);
    value.erase(0, value.find_first_not_of(" \t"));
    if (name == "content-type") r.content_type = value;
    if (name == "transfer-encoding" && lower(value).find("chunked") != std::string::npos) chunked = true;
    if (name == "content-length") {
      try {
        length = std::stoull(value);
      } catch (...) {
        *error = what + "malformed Content-Length";
        return false;
      }
    }
  }
  std::string body = raw.substr(head_end + 4);
  if (chunked) {
    if (!dechunk(body, &r.body)) {
      *error = what + "malformed or truncated chunked body";
      return false;
    }
  } else if (length) {
    if (body.size() < *length) {
      *error = what + "body cut short (" + std::to_string(body.size()) + " of " + std::to_string(*length) + " bytes)";
      return false;
    }
    body.resize(*length);
    r.body = std::move(body);
  } else {
    r.body = std::move(body);
  }
  *out = std::move(r);
  return true;
}

std::string join_url(const std::string& base, const std::string& path) {
  std::string b = base;
  while (!b.empty() && b.back() == '/') b.pop_back();
  return b + (path.empty() || path.front() == '/' ? path : "/" + path);
}

std::string redact_url(const std::string& url) {
  const size_t scheme = url.find("://");
  const size_t start = scheme == std::string::npos ? 0 : scheme + 3;
  const size_t end = url.find_first_of("/?", start);
  const size_t at = url.rfind('@', end == std::string::npos ? std::string::npos : end);
  if (at == std::string::npos || at < start) return url;
  return url.substr(0, start) + "***" + url.substr(at);
}

std::string base64_encode(std::string_view s) {
  static const char kAlphabet[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  std::string out;
  size_t i = 0;
  for (; i + 2 < s.size(); i += 3) {
    const uint32_t v = (uint32_t{static_cast<unsigned char>(s[i])} << 16) |
                       (uint32_t{static_cast<unsigned char>(s[i + 1])} << 8) | static_cast<unsigned char>(s[i + 2]);
    for (int k = 18; k >= 0; k -= 6) out.push_back(kAlphabet[(v >> k) & 63]);
  }
  if (i < s.size()) {
    uint32_t v = uint32_t{static_cast<unsigned char>(s[i])} << 16;
    if (i + 1 < s.size()) v |= uint32_t{static_cast<unsigned char>(s[i + 1])} << 8;
    out.push_back(kAlphabet[(v >> 18) & 63]);
    out.push_back(kAlphabet[(v >> 12) & 63]);
    out.push_back(i + 1 < s.size() ? kAlphabet[(v >> 6) & 63] : '=');
    out.push_back('=');
  }
  return out;
}

}  // namespace tcpscope
