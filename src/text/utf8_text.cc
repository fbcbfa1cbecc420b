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

namespace {

// Markus Kuhn's wcwidth() ranges of double-width characters, with the emoji
// blocks terminals draw two columns wide.
bool wide(uint32_t cp) {
  return cp >= 0x1100 &&
         (cp <= 0x115F || cp == 0x2329 || cp == 0x232A || (cp >= 0x2E80 && cp <= 0xA4CF && cp != 0x303F) ||
          (cp >= 0xAC00 && cp <= 0xD7A3) || (cp >= 0xF900 && cp <= 0xFAFF) || (cp >= 0xFE10 && cp <= 0xFE19) ||
          (cp >= 0xFE30 && cp <= 0xFE6F) || (cp >= 0xFF00 && cp <= 0xFF60) || (cp >= 0xFFE0 && cp <= 0xFFE6) ||
          (cp >= 0x1F300 && cp <= 0x1F64F) || (cp >= 0x1F900 && cp <= 0x1F9FF) ||
          (cp >= 0x20000 && cp <= 0x2FFFD) || (cp >= 0x30000 && cp <= 0x3FFFD));
}

// Columns of the character (or stray byte) at s[i]; its bytes in *len.
size_t width_at(std::string_view s, size_t i, size_t* len) {
  uint32_t cp;
  const size_t n = utf8_sequence_at(s, i, &cp);
  *len = n ? n : 1;
  return n && wide(cp) ? 2 : 1;
}

}  // namespace

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

std::string_view display_prefix(std::string_view s, size_t columns) {
  size_t used = 0;
  for (size_t i = 0, len; i < s.size(); i += len) {
    used += width_at(s, i, &len);
    if (used > columns) return s.substr(0, i);
  }
  return s;
}

size_t display_width(std::string_view s) {
  size_t width = 0;
  for (size_t i = 0, len; i < s.size(); i += len) width += width_at(s, i, &len);
  return width;
}

std::string clipped(const std::string& s) { return s.size() <= 40 ? s : s.substr(0, 40) + "..."; }

}  // namespace tcpscope
