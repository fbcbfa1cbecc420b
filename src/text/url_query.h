// URL query strings, as the CLI writes them and the daemon's handlers read
// them: one encoding for both sides of /api/v1.
#pragma once

#include <map>
#include <string>
#include <string_view>

namespace tcpscope {

// Percent-encoding of a query value: RFC 3986 unreserved characters stay.
std::string url_encode(std::string_view s);
// %XX and '+' (space) decoding; malformed escapes are kept as they are.
std::string url_decode(std::string_view s);
// "a=1&b=x%3Dy" -> {a: "1", b: "x=y"}; a repeated key keeps the last value.
std::map<std::string, std::string> parse_query_string(std::string_view query);
// Strict percent-decoding (no '+'): false on a malformed escape or a decoded
// NUL. For request paths, where a lenient reading could differ from a proxy's.
bool percent_decode_strict(std::string_view in, std::string* out);

}  // namespace tcpscope
