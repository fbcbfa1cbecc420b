// How text becomes a JSON string, for every JSON tcpscope writes: the flow
// log and Kafka lines, /api/v1/*, compare --json, policy show, the
// controller's state file. JSON text is UTF-8 (RFC 8259), and so are many
// process and AS names (Telefónica, 中国电信), so:
//   - a valid UTF-8 sequence is written as itself;
//   - each byte of an invalid sequence becomes U+FFFD (a comm is 15 raw
//     bytes and can end mid-character), as Go's encoding/json does;
//   - control characters (U+0000-U+001F, U+007F) are escaped.
#pragma once

#include <cstddef>
#include <cstring>
#include <string>
#include <string_view>

#include <nlohmann/json_fwd.hpp>

namespace tcpscope {

// The most bytes put_json_string() writes for `s`: 6 per byte (a control
// as \u00XX; an invalid byte's U+FFFD takes 3, a valid sequence its own
// length), plus the two quotes.
inline size_t json_string_bound(std::string_view s) { return 6 * s.size() + 2; }

namespace json_text_detail {

// Bytes written as they are without looking further: printable ASCII but
// the quote and the backslash.
struct PlainBytes {
  bool plain[256] = {};
  constexpr PlainBytes() {
    for (int c = 0x20; c < 0x7f; ++c) plain[c] = c != '"' && c != '\\';
  }
};
inline constexpr PlainBytes kPlain{};

// Writes what s[*i] starts (an escape, a UTF-8 sequence, or U+FFFD for one
// invalid byte) and advances *i past it.
char* put_special(char* p, std::string_view s, size_t* i);

}  // namespace json_text_detail

// Writes `s` as a quoted JSON string at `p` (room: json_string_bound(s));
// returns the end. The record writers call it for every string of every
// record: printable ASCII stays a tight loop, the rest goes out of line.
inline char* put_json_string(char* p, std::string_view s) {
  *p++ = '"';
  size_t i = 0;
  while (i < s.size()) {
    const unsigned char c = static_cast<unsigned char>(s[i]);
    if (json_text_detail::kPlain.plain[c]) {
      *p++ = static_cast<char>(c);
      ++i;
    } else {
      p = json_text_detail::put_special(p, s, &i);
    }
  }
  *p++ = '"';
  return p;
}

// Appends `s` as a quoted JSON string.
void append_json_string(std::string_view s, std::string* out);

// `v` as JSON text, laid out as v.dump(indent) lays it out (compact when
// indent < 0), with every string (keys too) written by the rule above.
// nlohmann's own dump() throws on invalid UTF-8 and leaves U+007F raw.
std::string json_text(const nlohmann::json& v, int indent = -1);
std::string json_text(const nlohmann::ordered_json& v, int indent = -1);

}  // namespace tcpscope
