// Config keys as tables: each section (a file of its own, listed in
// config_sections.h) declares its keys once, with name, type and range,
// default, check, what a SIGHUP does with it and its doc. The same table
// reads the file (unknown keys, wrong types and failed checks reported with
// the file and line), names the reload rules (config_reload.cc) and writes
// docs/configuration.md's config reference (config_reference()).
//
// A key's default is its struct member's initial value (config.h), so the
// reference cannot disagree with what the daemon does.
#pragma once

#include <algorithm>
#include <functional>
#include <map>
#include <sstream>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "config/config.h"
#include "config/config_reader.h"
#include "config/config_reload.h"

namespace tcpscope {

// What a SIGHUP does with a key.
enum class ConfigReload {
  kInherit,    // as the key that holds it (a key inside a section)
  kApplied,    // the running daemon takes the new value
  kNextStart,  // what was bound, mapped or attached at start: kept until a restart
  kEachKey,    // a section whose keys differ: each says
  kRefused,    // a key known only to say why it is not accepted
};

template <class T>
struct ConfigKey {
  std::string name;
  std::string type;  // with the accepted range or values
  std::string default_text;
  std::string doc;
  ConfigReload reload = ConfigReload::kInherit;
  // Reads a non-null value into *out; `path` names the key in messages.
  std::function<void(ConfigReader&, const ConfigEntry&, const std::string& path, T* out)> read;
  // Copies the key's value; null for a refused key.
  std::function<void(T& running, const T& fresh)> apply;
  // Null where the value's type has no ==, which a kNextStart key must have.
  std::function<bool(const T& running, const T& fresh)> differs;
  // The reference rows of the keys inside it (a section, a list of sections).
  std::function<void(const std::string& path, ConfigReload reload, std::vector<ConfigKeyDoc>*)> describe_keys;
  // kEachKey: the reload rule of each key inside it.
  std::function<std::vector<ConfigReloadRule<T>>(const std::string& path)> key_rules;
};

template <class T>
struct ConfigSection {
  std::vector<ConfigKey<T>> keys;
  // Checks across keys, once a mapping has been read: `given` has the line of
  // each key that had a value, `line` is the section's own.
  std::function<void(ConfigReader&, const std::map<std::string, int>& given, int line, const std::string& path, T*)>
      finish;

  std::vector<std::string> names() const {
    std::vector<std::string> out;
    for (const auto& k : keys) out.push_back(k.name);
    return out;
  }
};

// Reads a mapping with `section`'s keys into *out. `path` is the mapping's
// name in messages ("" at the top level). Returns the line of each key given.
template <class T>
std::map<std::string, int> read_section(ConfigReader& r, const YAML::Node& map, int line, const std::string& path,
                                        const ConfigSection<T>& section, T* out) {
  const std::vector<std::string> names = section.names();
  std::map<std::string, int> given;
  for (const ConfigEntry& e : r.entries(map, line, path.empty() ? "the top level" : path, &names)) {
    if (e.value.IsNull()) continue;  // not given: keep the default
    given[e.key] = e.line;
    const auto& key = *std::find_if(section.keys.begin(), section.keys.end(),
                                    [&](const ConfigKey<T>& k) { return k.name == e.key; });
    key.read(r, e, path.empty() ? e.key : path + "." + e.key, out);
  }
  if (section.finish && map.IsMap()) section.finish(r, given, line, path, out);
  return given;
}

inline const char* config_reload_name(ConfigReload reload) {
  switch (reload) {
    case ConfigReload::kApplied: return "applied";
    case ConfigReload::kNextStart: return "next start";
    case ConfigReload::kEachKey: return "each key says";
    case ConfigReload::kRefused: return "refused";
    default: return "";
  }
}

template <class T>
void describe_section(const ConfigSection<T>& section, const std::string& path, ConfigReload reload,
                      std::vector<ConfigKeyDoc>* out) {
  for (const auto& k : section.keys) {
    const std::string key_path = path.empty() ? k.name : path + "." + k.name;
    const ConfigReload own = k.reload == ConfigReload::kInherit ? reload : k.reload;
    out->push_back(ConfigKeyDoc{key_path, k.type, k.default_text, config_reload_name(own), k.doc});
    if (k.describe_keys) k.describe_keys(key_path, own, out);
  }
}

namespace config_table_detail {

template <class M, class = void>
struct Comparable : std::false_type {};
template <class M>
struct Comparable<M, std::void_t<decltype(std::declval<const M&>() == std::declval<const M&>())>> : std::true_type {};
// std::vector declares == for every element type; it compiles only for some.
template <class M>
struct EqualityComparable : Comparable<M> {};
template <class E, class A>
struct EqualityComparable<std::vector<E, A>> : EqualityComparable<E> {};

inline std::string number_text(double d) {
  std::ostringstream out;
  out << d;
  return out.str();
}

}  // namespace config_table_detail

// A key stored in `member`, read by `read`.
template <class T, class M>
ConfigKey<T> member_key(std::string name, M T::*member, std::string type, std::string default_text, std::string doc,
                        std::function<void(ConfigReader&, const ConfigEntry&, const std::string&, M*)> read) {
  ConfigKey<T> k;
  k.name = std::move(name);
  k.type = std::move(type);
  k.default_text = std::move(default_text);
  k.doc = std::move(doc);
  k.read = [member, read](ConfigReader& r, const ConfigEntry& e, const std::string& path, T* out) {
    read(r, e, path, &(out->*member));
  };
  k.apply = [member](T& running, const T& fresh) { running.*member = fresh.*member; };
  if constexpr (config_table_detail::EqualityComparable<M>::value)
    k.differs = [member](const T& running, const T& fresh) { return !(running.*member == fresh.*member); };
  return k;
}

// A check returns "" for a good value, else the message's tail after the
// key's path (" must not be empty", ": why").
template <class V>
using ConfigCheck = std::function<std::string(const V&)>;

template <class T>
ConfigKey<T> string_key(std::string name, std::string T::*member, std::string doc,
                        ConfigCheck<std::string> check = nullptr) {
  const std::string initial = T{}.*member;
  return member_key<T, std::string>(
      std::move(name), member, "string", initial.empty() ? "\"\"" : initial, std::move(doc),
      [check](ConfigReader& r, const ConfigEntry& e, const std::string& path, std::string* out) {
        auto s = r.string_value(e, path);
        if (!s) return;
        if (check) {
          if (const std::string problem = check(*s); !problem.empty())
            return r.error(ConfigReader::line_of(e.value, e.line), path + problem);
        }
        *out = *s;
      });
}

template <class T, class M>
ConfigKey<T> integer_key(std::string name, M T::*member, uint64_t min, uint64_t max, std::string doc,
                         ConfigCheck<uint64_t> check = nullptr) {
  return member_key<T, M>(
      std::move(name), member, "integer " + std::to_string(min) + ".." + std::to_string(max),
      std::to_string(T{}.*member), std::move(doc),
      [min, max, check](ConfigReader& r, const ConfigEntry& e, const std::string& path, M* out) {
        auto v = r.integer_value(e.value, e.line, path, min, max);
        if (!v) return;
        if (check) {
          if (const std::string problem = check(*v); !problem.empty())
            return r.error(ConfigReader::line_of(e.value, e.line), path + problem);
        }
        *out = static_cast<M>(*v);
      });
}

template <class T>
ConfigKey<T> number_key(std::string name, double T::*member, double min, double max, std::string doc) {
  using config_table_detail::number_text;
  return member_key<T, double>(std::move(name), member, "number " + number_text(min) + ".." + number_text(max),
                               number_text(T{}.*member), std::move(doc),
                               [min, max](ConfigReader& r, const ConfigEntry& e, const std::string& path,
                                          double* out) {
                                 if (auto v = r.number_value(e.value, e.line, path, min, max)) *out = *v;
                               });
}

template <class T>
ConfigKey<T> bool_key(std::string name, bool T::*member, std::string doc) {
  return member_key<T, bool>(std::move(name), member, "true or false", T{}.*member ? "true" : "false",
                             std::move(doc),
                             [](ConfigReader& r, const ConfigEntry& e, const std::string& path, bool* out) {
                               if (auto v = r.bool_value(e, path)) *out = *v;
                             });
}

// A string that must be one of `choices` (name, value).
template <class T, class M>
ConfigKey<T> choice_key(std::string name, M T::*member, std::vector<std::pair<std::string, M>> choices,
                        std::string doc) {
  std::vector<std::string> names;
  std::vector<M> values;
  std::string initial;
  for (const auto& [n, v] : choices) {
    names.push_back(n);
    values.push_back(v);
    if (v == T{}.*member) initial = n;
  }
  return member_key<T, M>(std::move(name), member, "one of " + config_join(names, ", "), initial, std::move(doc),
                          [names, values](ConfigReader& r, const ConfigEntry& e, const std::string& path, M* out) {
                            if (auto i = r.choice_value(e, path, names)) *out = values[*i];
                          });
}

// A mapping read with its own table into `member`.
template <class T, class S>
ConfigKey<T> section_key(std::string name, S T::*member, const ConfigSection<S>& section, ConfigReload reload,
                         std::string doc) {
  ConfigKey<T> k = member_key<T, S>(std::move(name), member, "mapping", "", std::move(doc),
                                    [&section](ConfigReader& r, const ConfigEntry& e, const std::string& path,
                                               S* out) { read_section(r, e.value, e.line, path, section, out); });
  k.reload = reload;
  k.describe_keys = [&section](const std::string& path, ConfigReload inherited, std::vector<ConfigKeyDoc>* out) {
    describe_section(section, path, inherited, out);
  };
  if (reload == ConfigReload::kEachKey) {
    k.key_rules = [member, &section](const std::string& path) {
      std::vector<ConfigReloadRule<T>> rules;
      for (const auto& inner : section.keys) {
        if (inner.reload != ConfigReload::kApplied && inner.reload != ConfigReload::kNextStart) continue;
        ConfigReloadRule<T> rule{path + "." + inner.name, nullptr, nullptr};
        if (inner.reload == ConfigReload::kApplied)
          rule.apply = [member, apply = inner.apply](T& running, const T& fresh) {
            apply(running.*member, fresh.*member);
          };
        else if (inner.differs)
          rule.differs = [member, differs = inner.differs](const T& running, const T& fresh) {
            return differs(running.*member, fresh.*member);
          };
        rules.push_back(std::move(rule));
      }
      return rules;
    };
  }
  return k;
}

// A mapping whose keys are members of the enclosing struct itself
// (export.kafka.tls: its files are KafkaConfig's).
template <class T>
ConfigKey<T> inline_section_key(std::string name, const ConfigSection<T>& section, std::string doc) {
  ConfigKey<T> k;
  k.name = std::move(name);
  k.type = "mapping";
  k.doc = std::move(doc);
  k.read = [&section](ConfigReader& r, const ConfigEntry& e, const std::string& path, T* out) {
    read_section(r, e.value, e.line, path, section, out);
  };
  k.describe_keys = [&section](const std::string& path, ConfigReload inherited, std::vector<ConfigKeyDoc>* out) {
    describe_section(section, path, inherited, out);
  };
  return k;
}

// A key the parser knows only to say why it is not accepted.
template <class T>
ConfigKey<T> refused_key(std::string name, std::string why, std::string doc) {
  ConfigKey<T> k;
  k.name = std::move(name);
  k.type = "refused";
  k.doc = std::move(doc);
  k.reload = ConfigReload::kRefused;
  k.read = [why](ConfigReader& r, const ConfigEntry& e, const std::string& path, T*) {
    r.error(e.line, path + ": " + why);
  };
  return k;
}

template <class T>
ConfigKey<T> with_reload(ConfigKey<T> k, ConfigReload reload) {
  k.reload = reload;
  return k;
}

}  // namespace tcpscope
