#include "text/json_text.h"

#include <cstdint>

#include <nlohmann/json.hpp>

#include "text/utf8_text.h"

namespace tcpscope {

namespace json_text_detail {

char* put_special(char* p, std::string_view s, size_t* i) {
  static const char kHex[] = "0123456789abcdef";
  uint32_t cp;
  const size_t n = utf8_sequence_at(s, *i, &cp);
  if (!n) {
    ++*i;
    std::memcpy(p, "\xEF\xBF\xBD", 3);  // U+FFFD
    return p + 3;
  }
  *i += n;
  if (n > 1) {
    std::memcpy(p, s.data() + *i - n, n);
    return p + n;
  }
  *p++ = '\\';
  switch (cp) {
    case '"': *p++ = '"'; break;
    case '\\': *p++ = '\\'; break;
    case '\b': *p++ = 'b'; break;
    case '\f': *p++ = 'f'; break;
    case '\n': *p++ = 'n'; break;
    case '\r': *p++ = 'r'; break;
    case '\t': *p++ = 't'; break;
    default:  // the other controls and U+007F
      std::memcpy(p, "u00", 3);
      p += 3;
      *p++ = kHex[cp >> 4];
      *p++ = kHex[cp & 15];
  }
  return p;
}

}  // namespace json_text_detail

void append_json_string(std::string_view s, std::string* out) {
  const size_t old = out->size();
  out->resize(old + json_string_bound(s));
  char* const begin = out->data() + old;
  out->resize(old + static_cast<size_t>(put_json_string(begin, s) - begin));
}

namespace {

template <class Json>
void append_json_text(const Json& v, int indent, int depth, std::string* out) {
  const bool pretty = indent >= 0;
  auto newline = [&](int level) {
    if (!pretty) return;
    *out += '\n';
    out->append(static_cast<size_t>(indent) * static_cast<size_t>(level), ' ');
  };
  const bool object = v.is_object();
  if (object || v.is_array()) {
    if (v.empty()) {
      *out += object ? "{}" : "[]";
      return;
    }
    *out += object ? '{' : '[';
    for (auto it = v.begin(); it != v.end(); ++it) {
      if (it != v.begin()) *out += ',';
      newline(depth + 1);
      if (object) {
        append_json_string(it.key(), out);
        *out += pretty ? ": " : ":";
      }
      append_json_text(it.value(), indent, depth + 1, out);
    }
    newline(depth);
    *out += object ? '}' : ']';
  } else if (v.is_string()) {
    append_json_string(v.template get_ref<const typename Json::string_t&>(), out);
  } else {  // numbers, booleans, null: nlohmann's own text for them
    *out += v.dump();
  }
}

template <class Json>
std::string json_text_of(const Json& v, int indent) {
  std::string out;
  append_json_text(v, indent, 0, &out);
  return out;
}

}  // namespace

std::string json_text(const nlohmann::json& v, int indent) { return json_text_of(v, indent); }
std::string json_text(const nlohmann::ordered_json& v, int indent) { return json_text_of(v, indent); }

}  // namespace tcpscope
