#include "http/http_request.h"

#include <cctype>
#include <cstdint>

#include "text/url_query.h"
#include "text/utf8_text.h"

namespace tcpscope {

namespace {

bool is_token_char(unsigned char c) {
  if (std::isalnum(c)) return true;
  switch (c) {
    case '!': case '#': case '$': case '%': case '&': case '\'': case '*': case '+':
    case '-': case '.': case '^': case '_': case '`': case '|': case '~':
      return true;
    default:
      return false;
  }
}

bool is_token(std::string_view s) {
  if (s.empty()) return false;
  for (unsigned char c : s)
    if (!is_token_char(c)) return false;
  return true;
}

bool iequals(std::string_view a, std::string_view b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i)
    if (std::tolower(static_cast<unsigned char>(a[i])) != std::tolower(static_cast<unsigned char>(b[i]))) return false;
  return true;
}

// Without the optional whitespace (spaces, tabs) around a header value or a list item.
std::string_view trim_ows(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  return s;
}

// A query's escapes must decode to text: the handlers put its values in JSON.
bool query_is_valid_text(std::string_view query) {
  std::string decoded;
  if (!percent_decode_strict(query, &decoded)) return false;
  return valid_utf8(decoded);
}

HttpParse bad(int status) {
  HttpParse p;
  p.status = HttpParse::kBad;
  p.error = status;
  return p;
}

}  // namespace

HttpParse parse_http_request(std::string_view buf, size_t max_head_bytes, HttpRequest* out) {
  // Empty lines before a request line are allowed (RFC 9112 2.2).
  size_t start = 0;
  while (start + 1 < buf.size() && buf[start] == '\r' && buf[start + 1] == '\n') start += 2;
  const size_t end = buf.find("\r\n\r\n", start);
  const size_t line_end = buf.find("\r\n", start);
  if (end == std::string_view::npos) {
    if (buf.size() < max_head_bytes) return HttpParse{};
    return bad(line_end == std::string_view::npos ? 414 : 431);
  }
  if (end + 4 > max_head_bytes) return bad(line_end >= max_head_bytes ? 414 : 431);

  // Request line: METHOD SP origin-form SP HTTP/1.x
  const std::string_view line = buf.substr(start, line_end - start);
  const size_t sp1 = line.find(' ');
  const size_t sp2 = sp1 == std::string_view::npos ? sp1 : line.find(' ', sp1 + 1);
  if (sp2 == std::string_view::npos || line.find(' ', sp2 + 1) != std::string_view::npos) return bad(400);
  const std::string_view method = line.substr(0, sp1);
  const std::string_view target = line.substr(sp1 + 1, sp2 - sp1 - 1);
  const std::string_view version = line.substr(sp2 + 1);
  if (!is_token(method)) return bad(400);
  if (version.size() != 8 || version.substr(0, 7) != "HTTP/1.") return version.rfind("HTTP/", 0) == 0 ? bad(505) : bad(400);
  if (version[7] != '0' && version[7] != '1') return bad(505);
  if (target.empty() || target[0] != '/') return bad(400);
  for (unsigned char c : target)
    if (c <= 0x20 || c >= 0x7f) return bad(400);

  HttpRequest r;
  r.method = std::string(method);
  const size_t q = target.find('?');
  if (!percent_decode_strict(target.substr(0, q), &r.path)) return bad(400);
  if (q != std::string_view::npos) {
    r.query = std::string(target.substr(q + 1));
    if (!query_is_valid_text(r.query)) return bad(400);
  }
  const bool http11 = version[7] == '1';
  r.keep_alive = http11;

  bool seen_length = false, seen_encoding = false, seen_authorization = false;
  size_t pos = line_end + 2;
  while (pos < end + 2) {
    const size_t eol = buf.find("\r\n", pos);
    const std::string_view h = buf.substr(pos, eol - pos);
    pos = eol + 2;
    const size_t colon = h.find(':');
    if (colon == std::string_view::npos || !is_token(h.substr(0, colon))) return bad(400);  // also folded lines
    const std::string_view name = h.substr(0, colon);
    for (unsigned char c : h.substr(colon + 1))
      if ((c < 0x20 && c != '\t') || c == 0x7f) return bad(400);
    const std::string_view value = trim_ows(h.substr(colon + 1));
    if (iequals(name, "Content-Length")) {
      if (seen_length || value.empty() || value.size() > 18) return bad(400);
      for (char c : value)
        if (c < '0' || c > '9') return bad(400);
      seen_length = true;
      if (value.find_first_not_of('0') != std::string_view::npos) r.has_body = true;
    } else if (iequals(name, "Transfer-Encoding")) {
      seen_encoding = true;
      r.has_body = true;
    } else if (iequals(name, "Authorization")) {
      if (seen_authorization) return bad(400);
      seen_authorization = true;
      r.authorization = std::string(value);
    } else if (iequals(name, "Connection")) {
      // A comma-separated token list.
      size_t i = 0;
      while (i <= value.size()) {
        size_t comma = value.find(',', i);
        if (comma == std::string_view::npos) comma = value.size();
        const std::string_view token = trim_ows(value.substr(i, comma - i));
        if (iequals(token, "close")) r.keep_alive = false;
        if (iequals(token, "keep-alive") && !http11) r.keep_alive = true;
        i = comma + 1;
      }
    }
  }
  if (seen_length && seen_encoding) return bad(400);
  *out = std::move(r);
  HttpParse p;
  p.status = HttpParse::kComplete;
  p.consumed = end + 4;
  return p;
}

}  // namespace tcpscope
