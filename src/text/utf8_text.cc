#include "text/utf8_text.h"

#include <cstdint>

namespace tcpscope {

size_t utf8_sequence_at(std::string_view s, size_t i, uint32_t* cp) {
  const unsigned char c = static_cast<unsigned char>(s[i]);
  size_t n;
  if (c < 0x80) {
    *cp = c;
    return 1;
  } else if ((c & 0xE0) == 0xC0) {
    n = 1;
    *cp = c & 0x1F;
  } else if ((c & 0xF0) == 0xE0) {
    n = 2;
    *cp = c & 0x0F;
  } else if ((c & 0xF8) == 0xF0) {
    n = 3;
    *cp = c & 0x07;
  } else {
    return 0;
  }
  if (i + n >= s.size()) return 0;
  for (size_t k = 1; k <= n; ++k) {
    const unsigned char d = static_cast<unsigned char>(s[i + k]);
    if ((d & 0xC0) != 0x80) return 0;
    *cp = (*cp << 6) | (d & 0x3F);
  }
  static const uint32_t kMin[] = {0, 0x80, 0x800, 0x10000};
  if (*cp < kMin[n] || *cp > 0x10FFFF || (*cp >= 0xD800 && *cp <= 0xDFFF)) return 0;
  return n + 1;
}

bool valid_utf8(std::string_view s) {
  uint32_t cp;
  for (size_t i = 0; i < s.size();) {
    const size_t n = utf8_sequence_at(s, i, &cp);
    if (!n) return false;
    i += n;
  }
  return true;
}

std::string printable_text(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  uint32_t cp;
  for (size_t i = 0; i < s.size();) {
    const size_t n = utf8_sequence_at(s, i, &cp);
    if (!n || cp < 0x20 || (cp >= 0x7f && cp <= 0x9f)) {
      out += '?';
      i += n ? n : 1;
      continue;
    }
    out.append(s.substr(i, n));
    i += n;
  }
  return out;
}

std::string clipped(const std::string& s) { return s.size() <= 40 ? s : s.substr(0, 40) + "..."; }

}  // namespace tcpscope
