// Escaping text for the languages compare writes into (PromQL strings in its
// queries, XML in its SVG plots): each byte stays as it is, becomes its named
// escape, or, for a control character the language cannot hold as it is,
// its numeric escape or nothing.
#pragma once

#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace tcpscope {

struct CharEscapes {
  // Bytes written otherwise, e.g. {'&', "&amp;"}; a control character named
  // here is written as named (XML keeps '\t' as "\t").
  std::vector<std::pair<char, const char*>> named;
  // The other control characters (below 0x20, and 0x7f when
  // del_is_control): printf format of their byte value ("\\x%02x"), or
  // nullptr to leave them out.
  const char* control_format = nullptr;
  bool del_is_control = false;
};

std::string escape_chars(std::string_view text, const CharEscapes& escapes);

}  // namespace tcpscope
