// Parsing of one HTTP/1.x request head (request line and headers) for the
// daemon's read-only endpoint. Strict where leniency lets a request mean two
// things to two parsers (a proxy in front and this one): whitespace before a
// header's colon, folded header lines, repeated Content-Length or
// Authorization, both Content-Length and Transfer-Encoding are refused.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

namespace tcpscope {

struct HttpRequest {
  std::string method;         // "GET", ...
  std::string path;           // percent-decoded; starts with '/'
  std::string query;          // as sent, after '?' ("" when none)
  bool keep_alive = false;    // HTTP/1.1 unless "Connection: close"; HTTP/1.0 only with "keep-alive"
  bool has_body = false;      // Content-Length > 0 or any Transfer-Encoding
  std::string authorization;  // the Authorization header's value, "" when absent
};

struct HttpParse {
  enum Status { kIncomplete, kComplete, kBad } status = kIncomplete;
  size_t consumed = 0;  // kComplete: bytes of the head, blank line included
  int error = 0;        // kBad: the status to answer (400, 414, 431, 505)
};

// Parses the head at the start of `buf`. A head longer than max_head_bytes
// is kBad (431, or 414 when the request line alone is that long) as soon as
// that many bytes have come without its end.
HttpParse parse_http_request(std::string_view buf, size_t max_head_bytes, HttpRequest* out);

}  // namespace tcpscope
