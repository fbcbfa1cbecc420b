// What every config section's parser shares: the walk over YAML mappings,
// the value readers and the list of errors. The rules they follow are in
// config.cc's header comment; the keys themselves are tables
// (config_table.h), one file per section.
#pragma once

#include <yaml-cpp/yaml.h>

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "config/config.h"

namespace tcpscope {

// One key/value pair of a YAML mapping, with the key's line.
struct ConfigEntry {
  std::string key;
  YAML::Node value;
  int line = 0;
};

// A string in a message: quoted and clipped.
std::string config_quoted(const std::string& s);
// A list echoed in a message (known keys, available CCs, defined classes):
// each item clipped and at most 13 of them, so a config with a hundred
// long class names still gives a one-line message.
std::string config_join(const std::vector<std::string>& items, const char* sep);

class ConfigReader {
 public:
  ConfigReader(std::string file, const std::vector<std::string>& available_cc, std::vector<ConfigError>* errors);

  // Where a node is, 1-based. A null node's mark points at the next token
  // (often the next line), so callers pass the key's line as the fallback.
  static int line_of(const YAML::Node& n, int fallback);
  static std::string type_name(const YAML::Node& n);

  void error(int line, std::string message);
  // Reported so far, listed or not: a reader compares it before and after a
  // part to know whether that part had a problem.
  size_t error_count() const { return errors_->size() - first_error_ + unlisted_errors_; }
  size_t unlisted_errors() const { return unlisted_errors_; }

  // The entries of a mapping in document order. Reports a value that is not a
  // mapping, non-string keys, duplicate keys and (when `known` is given) unknown
  // keys; such entries are left out.
  std::vector<ConfigEntry> entries(const YAML::Node& map, int line, const std::string& where,
                                   const std::vector<std::string>* known);

  std::optional<std::string> string_value(const ConfigEntry& e, const std::string& what);
  // A string that names something (a class, a rule, an experiment): not empty.
  std::optional<std::string> name_value(const ConfigEntry& e, const std::string& what);
  std::optional<uint64_t> integer_value(const YAML::Node& v, int line, const std::string& what, uint64_t min,
                                        uint64_t max);
  std::optional<double> number_value(const YAML::Node& v, int line, const std::string& what, double min, double max);
  // `true` or `false`, nothing else: a "yes" or "1" that YAML 1.1 would
  // read as true is an error rather than a guess.
  std::optional<bool> bool_value(const ConfigEntry& e, const std::string& what);
  // The index in `names` of a string that must be one of them.
  std::optional<size_t> choice_value(const ConfigEntry& e, const std::string& what,
                                     const std::vector<std::string>& names);
  // Calls `each` with every element of a list, its line and its name in
  // messages (`what[i]`). The number of elements (a null value is an empty
  // list); nullopt when not a list.
  std::optional<size_t> each_item(
      const ConfigEntry& e, const std::string& what,
      const std::function<void(const YAML::Node& item, int line, const std::string& item_what)>& each);
  // each_item() for a list of mappings; an element that is not one is
  // reported ("must be a mapping with `shape`") and skipped.
  void each_mapping(const ConfigEntry& e, const std::string& what, const std::string& shape,
                    const std::function<void(const YAML::Node& item, int line, const std::string& item_what)>& each);

  // `lines` (if given) gets the line of each element kept.
  std::vector<Prefix> prefix_list(const ConfigEntry& e, const std::string& what, std::vector<int>* lines);
  std::vector<uint32_t> asn_list(const ConfigEntry& e, const std::string& what, std::vector<int>* lines);
  // A congestion control name the kernel must offer.
  bool check_cc(const std::string& name, int line, const std::string& what);

  // Peer classes are defined in one section and named in another, in either
  // order: filled while parsing, checked once the whole file is read
  // (peer_class_config.cc).
  struct PeerClassRef {
    std::string name;
    int line;
    std::string where;
  };
  std::vector<PeerClassRef> peer_class_refs;
  std::map<std::string, int> peer_class_name_lines;
  std::vector<std::vector<int>> peer_class_prefix_lines;  // per class, per prefix
  std::vector<std::vector<int>> peer_class_asn_lines;

 private:
  std::string file_;
  const std::vector<std::string>& available_cc_;
  std::vector<ConfigError>* errors_;
  size_t first_error_;
  size_t unlisted_errors_ = 0;
};

}  // namespace tcpscope
