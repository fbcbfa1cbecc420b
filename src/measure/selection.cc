#include "measure/selection.h"

#include <algorithm>

namespace tcpscope {

namespace {

std::vector<std::string> split(const std::string& s, char sep) {
  std::vector<std::string> out;
  size_t start = 0;
  while (true) {
    size_t p = s.find(sep, start);
    out.push_back(s.substr(start, p == std::string::npos ? std::string::npos : p - start));
    if (p == std::string::npos) return out;
    start = p + 1;
  }
}

std::string trim(const std::string& s) {
  size_t b = s.find_first_not_of(" \t");
  if (b == std::string::npos) return "";
  size_t e = s.find_last_not_of(" \t");
  return s.substr(b, e - b + 1);
}

}  // namespace

bool valid_field_name(const std::string& name) {
  return !name.empty() && std::all_of(name.begin(), name.end(), [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_';
  });
}

std::optional<Selection> Selection::parse(const std::string& text, std::string* why) {
  Selection sel;
  sel.text_ = text;
  if (trim(text).empty()) {
    *why = "empty selection (expected FIELD=VALUE, e.g. cc=bbr)";
    return std::nullopt;
  }
  for (const std::string& raw : split(text, ',')) {
    const std::string term_text = trim(raw);
    const size_t eq = term_text.find('=');
    if (eq == std::string::npos || eq == 0) {
      *why = "term \"" + term_text + "\" is not FIELD=VALUE or FIELD!=VALUE";
      return std::nullopt;
    }
    Term t;
    t.negate = term_text[eq - 1] == '!';
    t.field = trim(term_text.substr(0, t.negate ? eq - 1 : eq));
    if (!valid_field_name(t.field)) {
      *why = "term \"" + term_text + "\": field \"" + t.field + "\" is not a record field name ([a-z0-9_])";
      return std::nullopt;
    }
    for (const std::string& v : split(term_text.substr(eq + 1), '|')) {
      const std::string value = trim(v);
      if (value.empty()) {
        *why = "term \"" + term_text + "\" has an empty value";
        return std::nullopt;
      }
      t.values.push_back(value);
    }
    sel.terms_.push_back(std::move(t));
  }
  return sel;
}

bool Selection::matches(const FieldGetter& get) const {
  for (const Term& t : terms_) {
    const std::optional<std::string> v = get(t.field);
    const bool hit = v && std::find(t.values.begin(), t.values.end(), *v) != t.values.end();
    if (hit == t.negate) return false;
  }
  return true;
}

}  // namespace tcpscope
