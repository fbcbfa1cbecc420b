// A small blocking HTTP/1.1 GET client for the CLI commands that talk to a
// running daemon (`tcpscope flows`, `tcpscope compare --server`). Plain HTTP
// only (the daemon serves nothing else), one request per connection.
#pragma once

#include <string>
#include <string_view>

namespace tcpscope {

struct HttpResponse {
  int status = 0;
  std::string content_type;
  std::string body;
};

struct HttpUrl {
  std::string host;  // without brackets for IPv6
  std::string port = "80";
  std::string target = "/";  // path and query
  std::string userinfo;      // "user:password" (percent-decoded) for Basic auth, "" = none
};
// "http://[USER:PASSWORD@]HOST[:PORT][/PATH][?QUERY]"; HOST is a name, an
// IPv4 address or [IPv6]. A missing scheme means http. On error: false and *why.
bool parse_http_url(const std::string& url, HttpUrl* out, std::string* why);

// The URL with any USER:PASSWORD@ replaced by "***@", for messages.
std::string redact_url(const std::string& url);

// GETs `url`. The whole exchange (resolve, connect, send, read) must finish
// within timeout_ms. Credentials (the daemon's http.basic_auth_*) come from
// the URL's userinfo or, when it has none, from the environment variable
// TCPSCOPE_BASIC_AUTH="user:password" (which, unlike a URL, does not show in
// `ps`); they are sent as HTTP Basic authentication and never appear in
// messages. False and *error ("GET URL: connect 127.0.0.1:9810:
// Connection refused") on any failure; an HTTP error status is not a
// failure (see status). Bodies larger than max_body_bytes are refused.
// EnvCredentials::kIgnore: the URL's credentials only, for servers other than
// the daemon (TCPSCOPE_BASIC_AUTH is the daemon's password: it must not reach them).
enum class EnvCredentials { kUse, kIgnore };
bool http_get(const std::string& url, int timeout_ms, HttpResponse* out, std::string* error,
              size_t max_body_bytes = 256u << 20, EnvCredentials env_credentials = EnvCredentials::kUse);

// "http://127.0.0.1:9810" + "/api/v1/flows" -> "http://127.0.0.1:9810/api/v1/flows"
// (one slash between them whatever the base ends with).
std::string join_url(const std::string& base, const std::string& path);

// Standard base64 (RFC 4648) with padding.
std::string base64_encode(std::string_view s);

}  // namespace tcpscope
