#include "compare/char_escapes.h"

#include <algorithm>
#include <cstdio>

namespace tcpscope {

std::string escape_chars(std::string_view text, const CharEscapes& escapes) {
  std::string out;
  out.reserve(text.size());
  for (const char c : text) {
    const auto named = std::find_if(escapes.named.begin(), escapes.named.end(),
                                    [c](const std::pair<char, const char*>& e) { return e.first == c; });
    const auto byte = static_cast<unsigned char>(c);
    if (named != escapes.named.end()) {
      out += named->second;
    } else if (byte < 0x20 || (byte == 0x7f && escapes.del_is_control)) {
      if (!escapes.control_format) continue;
      char buf[16];
      std::snprintf(buf, sizeof(buf), escapes.control_format, byte);
      out += buf;
    } else {
      out += c;
    }
  }
  return out;
}

}  // namespace tcpscope
