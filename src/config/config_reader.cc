#include "config/config_reader.h"

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <sstream>

#include "text/utf8_text.h"

namespace tcpscope {

namespace {

constexpr uint64_t kMaxAsn = 4294967295ULL;
constexpr size_t kMaxListedItems = 13;  // the longest fixed key list (top level)

size_t edit_distance(const std::string& a, const std::string& b) {
  std::vector<size_t> row(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    size_t diag = row[0];
    row[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      size_t up = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diag + (a[i - 1] == b[j - 1] ? 0 : 1)});
      diag = up;
    }
  }
  return row[b.size()];
}

}  // namespace

std::string config_quoted(const std::string& s) { return "\"" + clipped(s) + "\""; }

std::string config_join(const std::vector<std::string>& items, const char* sep) {
  std::string out;
  const size_t shown = std::min(items.size(), kMaxListedItems);
  for (size_t i = 0; i < shown; ++i) out += (i ? sep : "") + clipped(items[i]);
  if (items.size() > shown) out += std::string(sep) + "and " + std::to_string(items.size() - shown) + " more";
  return out;
}

ConfigReader::ConfigReader(std::string file, const std::vector<std::string>& available_cc,
                           std::vector<ConfigError>* errors)
    : file_(std::move(file)), available_cc_(available_cc), errors_(errors), first_error_(errors->size()) {}

int ConfigReader::line_of(const YAML::Node& n, int fallback) {
  if (!n.IsDefined() || n.IsNull() || n.Mark().line < 0) return fallback;
  return n.Mark().line + 1;
}

std::string ConfigReader::type_name(const YAML::Node& n) {
  switch (n.Type()) {
    case YAML::NodeType::Scalar: return "a scalar " + config_quoted(n.Scalar());
    case YAML::NodeType::Sequence: return "a list";
    case YAML::NodeType::Map: return "a mapping";
    default: return "nothing";
  }
}

// A file of a million bad entries (or of aliases to them) gets a page of
// errors, not a million log lines on a SIGHUP.
constexpr size_t kMaxErrors = 50;

void ConfigReader::error(int line, std::string message) {
  if (errors_->size() - first_error_ < kMaxErrors)
    errors_->push_back(ConfigError{file_, line, std::move(message)});
  else
    ++unlisted_errors_;
}

std::vector<ConfigEntry> ConfigReader::entries(const YAML::Node& map, int line, const std::string& where,
                                         const std::vector<std::string>* known) {
  std::vector<ConfigEntry> out;
  if (map.IsNull()) return out;
  if (!map.IsMap()) {
    error(line_of(map, line), where + " must be a mapping (key: value), got " + type_name(map));
    return out;
  }
  std::map<std::string, int> seen;
  for (auto it = map.begin(); it != map.end(); ++it) {
    const YAML::Node key = it->first;
    const int key_line = line_of(key, line);
    if (!key.IsScalar()) {
      error(key_line, "a key in " + where + " must be a plain string, got " + type_name(key));
      continue;
    }
    const std::string name = key.Scalar();
    if (auto first = seen.find(name); first != seen.end()) {
      error(key_line, "duplicate key " + config_quoted(name) + " in " + where + " (first at line " +
                          std::to_string(first->second) + ")");
      continue;
    }
    seen.emplace(name, key_line);
    if (known && std::find(known->begin(), known->end(), name) == known->end()) {
      std::string msg = "unknown key " + config_quoted(name) + " in " + where;
      const std::string* closest = nullptr;
      size_t best = 3;  // suggest only near misses
      for (const auto& k : *known) {
        size_t d = edit_distance(name, k);
        if (d < best) best = d, closest = &k;
      }
      if (closest) {
        msg += "; did you mean \"" + *closest + "\"?";
      } else {
        msg += " (known keys: " + config_join(*known, ", ") + ")";
      }
      error(key_line, msg);
      continue;
    }
    out.push_back(ConfigEntry{name, it->second, key_line});
  }
  return out;
}

std::optional<std::string> ConfigReader::string_value(const ConfigEntry& e, const std::string& what) {
  if (!e.value.IsScalar()) {
    error(line_of(e.value, e.line), what + " must be a string, got " + type_name(e.value));
    return std::nullopt;
  }
  const std::string& s = e.value.Scalar();
  for (unsigned char ch : s) {
    if (ch < 0x20 || ch == 0x7f) {
      error(line_of(e.value, e.line), what + " contains a control character");
      return std::nullopt;
    }
  }
  return s;
}

std::optional<std::string> ConfigReader::name_value(const ConfigEntry& e, const std::string& what) {
  auto s = string_value(e, what);
  if (s && s->empty()) {
    error(e.line, what + " must not be empty");
    return std::nullopt;
  }
  return s;
}

std::optional<uint64_t> ConfigReader::integer_value(const YAML::Node& v, int line,
                                                    const std::string& what, uint64_t min,
                                                    uint64_t max) {
  line = line_of(v, line);
  const std::string range = std::to_string(min) + ".." + std::to_string(max);
  if (!v.IsScalar()) {
    error(line, what + " must be an integer in " + range + ", got " + type_name(v));
    return std::nullopt;
  }
  const std::string& s = v.Scalar();
  const bool negative = !s.empty() && s[0] == '-';
  const std::string digits = negative ? s.substr(1) : s;
  if (digits.empty() || !std::all_of(digits.begin(), digits.end(),
                                     [](char c) { return c >= '0' && c <= '9'; })) {
    error(line, what + " must be an integer in " + range + ", got " + type_name(v));
    return std::nullopt;
  }
  uint64_t value = 0;
  bool overflow = false;
  for (char c : digits) {
    const uint64_t d = static_cast<uint64_t>(c - '0');
    if (value > (UINT64_MAX - d) / 10) {
      overflow = true;
      break;
    }
    value = value * 10 + d;
  }
  if (negative || overflow || value < min || value > max) {
    error(line, what + " " + clipped(s) + " is out of range " + range);
    return std::nullopt;
  }
  return value;
}

std::optional<bool> ConfigReader::bool_value(const ConfigEntry& e, const std::string& what) {
  if (e.value.IsScalar() && e.value.Scalar() == "true") return true;
  if (e.value.IsScalar() && e.value.Scalar() == "false") return false;
  error(line_of(e.value, e.line), what + " must be true or false, got " + type_name(e.value));
  return std::nullopt;
}

bool ConfigReader::check_cc(const std::string& name, int line, const std::string& what) {
  if (std::find(available_cc_.begin(), available_cc_.end(), name) != available_cc_.end()) {
    return true;
  }
  error(line, what + ": congestion control " + config_quoted(name) +
                  " is not available in this kernel (available: " +
                  (available_cc_.empty() ? "none found" : config_join(available_cc_, " ")) + ")");
  return false;
}

std::optional<double> ConfigReader::number_value(const YAML::Node& v, int line, const std::string& what,
                                                 double min, double max) {
  line = line_of(v, line);
  std::ostringstream range;
  range << min << ".." << max;
  if (v.IsScalar()) {
    const std::string& s = v.Scalar();
    char* end = nullptr;
    errno = 0;
    const double d = s.empty() ? 0 : std::strtod(s.c_str(), &end);
    if (!s.empty() && end == s.c_str() + s.size() && errno == 0 && std::isfinite(d) && d >= min && d <= max)
      return d;
  }
  error(line, what + " must be a number in " + range.str() + ", got " +
                  (v.IsScalar() ? config_quoted(v.Scalar()) : type_name(v)));
  return std::nullopt;
}

std::optional<size_t> ConfigReader::choice_value(const ConfigEntry& e, const std::string& what,
                                                 const std::vector<std::string>& names) {
  auto s = string_value(e, what);
  if (!s) return std::nullopt;
  for (size_t i = 0; i < names.size(); ++i)
    if (*s == names[i]) return i;
  const std::string alternatives = names.size() == 2 ? names[0] + " or " + names[1] : "one of " + config_join(names, ", ");
  error(line_of(e.value, e.line), what + " must be " + alternatives + ", got " + config_quoted(*s));
  return std::nullopt;
}

std::optional<size_t> ConfigReader::each_item(
    const ConfigEntry& e, const std::string& what,
    const std::function<void(const YAML::Node& item, int line, const std::string& item_what)>& each) {
  if (e.value.IsNull()) return 0;  // an empty list
  const int list_line = line_of(e.value, e.line);
  if (!e.value.IsSequence()) {
    error(list_line, what + " must be a list, got " + type_name(e.value));
    return std::nullopt;
  }
  size_t i = 0;
  for (auto it = e.value.begin(); it != e.value.end(); ++it, ++i)
    each(*it, line_of(*it, list_line), what + "[" + std::to_string(i) + "]");
  return i;
}

void ConfigReader::each_mapping(
    const ConfigEntry& e, const std::string& what, const std::string& shape,
    const std::function<void(const YAML::Node& item, int line, const std::string& item_what)>& each) {
  each_item(e, what, [&](const YAML::Node& n, int line, const std::string& item) {
    if (!n.IsMap()) return error(line, item + " must be a mapping with " + shape + ", got " + type_name(n));
    each(n, line, item);
  });
}

std::vector<Prefix> ConfigReader::prefix_list(const ConfigEntry& e, const std::string& what,
                                              std::vector<int>* lines) {
  std::vector<Prefix> out;
  each_item(e, what, [&](const YAML::Node& n, int line, const std::string& item) {
    if (!n.IsScalar()) return error(line, item + " must be a prefix such as 10.0.0.0/8, got " + type_name(n));
    std::string why;
    if (auto p = parse_prefix(n.Scalar(), &why)) {
      out.push_back(*p);
      if (lines) lines->push_back(line);
    } else {
      error(line, item + ": malformed prefix " + config_quoted(n.Scalar()) + ": " + why);
    }
  });
  return out;
}

std::vector<uint32_t> ConfigReader::asn_list(const ConfigEntry& e, const std::string& what,
                                             std::vector<int>* lines) {
  std::vector<uint32_t> out;
  each_item(e, what, [&](const YAML::Node& n, int line, const std::string& item) {
    // AS 0 is reserved and means "unknown" in flow records, so it cannot be matched on.
    if (auto v = integer_value(n, line, item, 1, kMaxAsn)) {
      out.push_back(static_cast<uint32_t>(*v));
      if (lines) lines->push_back(line);
    }
  });
  return out;
}

}  // namespace tcpscope
