// `peer_classes:` names for parts of the Internet, by remote prefix or ASN
// (docs/configuration.md "Peer classes and ASNs"), and the checks that need the whole file.
#include <algorithm>

#include "config/config_sections.h"

namespace tcpscope {

namespace {

// The line lists are the reader's, per class, for the overlap messages.
const ConfigSection<PeerClassSpec>& peer_class_section() {
  static const ConfigSection<PeerClassSpec> kSection{{
      member_key<PeerClassSpec, std::string>(
          "name", &PeerClassSpec::name, "string", "", "the label value; required, unique",
          [](ConfigReader& r, const ConfigEntry& f, const std::string& path, std::string* name) {
            auto s = r.name_value(f, path);
            if (!s) return;
            *name = *s;
            const int line = ConfigReader::line_of(f.value, f.line);
            auto [it, inserted] = r.peer_class_name_lines.emplace(*s, line);
            if (!inserted)
              r.error(line, "duplicate peer class name " + config_quoted(*s) + " (first defined at line " +
                                std::to_string(it->second) + ")");
          }),
      member_key<PeerClassSpec, std::vector<Prefix>>(
          "prefixes", &PeerClassSpec::prefixes, "list of prefixes", "[]",
          "remote prefixes (quote IPv6 ones); the longest matching prefix of all classes wins",
          [](ConfigReader& r, const ConfigEntry& f, const std::string& path, std::vector<Prefix>* out) {
            *out = r.prefix_list(f, path, &r.peer_class_prefix_lines.back());
          }),
      member_key<PeerClassSpec, std::vector<uint32_t>>(
          "asns", &PeerClassSpec::asns, "list of integers 1..4294967295", "[]",
          "remote AS numbers, for addresses no prefix of any class matches",
          [](ConfigReader& r, const ConfigEntry& f, const std::string& path, std::vector<uint32_t>* out) {
            *out = r.asn_list(f, path, &r.peer_class_asn_lines.back());
          }),
  }};
  return kSection;
}

void read_peer_classes(ConfigReader& r, const ConfigEntry& e, const std::string& path,
                       std::vector<PeerClassSpec>* classes) {
  r.each_mapping(e, path, "name and prefixes and/or asns", [&](const YAML::Node& n, int line,
                                                                 const std::string& where) {
    PeerClassSpec spec;
    spec.line = line;
    r.peer_class_prefix_lines.emplace_back();
    r.peer_class_asn_lines.emplace_back();
    const size_t errors_before = r.error_count();
    const auto given = read_section(r, n, spec.line, where, peer_class_section(), &spec);
    if (!given.count("name")) r.error(spec.line, where + " has no name");
    // Only when nothing was wrong inside it: a class whose one prefix was
    // malformed has already been reported.
    if (spec.prefixes.empty() && spec.asns.empty() && r.error_count() == errors_before)
      r.error(spec.line, where + " has neither prefixes nor asns, so no flow can match it");
    classes->push_back(std::move(spec));
  });
}

}  // namespace

ConfigKey<Config> peer_classes_key() {
  ConfigKey<Config> k = member_key<Config, std::vector<PeerClassSpec>>(
      "peer_classes", &Config::peer_classes, "list of mappings", "[]",
      "classes of remote addresses, each a name with prefixes and/or asns", read_peer_classes);
  k.reload = ConfigReload::kApplied;
  k.describe_keys = [](const std::string& path, ConfigReload reload, std::vector<ConfigKeyDoc>* out) {
    describe_section(peer_class_section(), path + "[]", reload, out);
  };
  return k;
}

void check_peer_classes(ConfigReader& r, const Config& c) {
  // With the same prefix or ASN in two classes, which class a flow gets would
  // depend on file order, not on "longest prefix wins".
  std::map<std::string, std::pair<std::string, int>> prefix_owner;
  std::map<uint32_t, std::pair<std::string, int>> asn_owner;
  for (size_t i = 0; i < c.peer_classes.size(); ++i) {
    const PeerClassSpec& pc = c.peer_classes[i];
    // A class without a valid name (reported already) is named by position.
    const std::string label = pc.name.empty() ? "peer_classes[" + std::to_string(i) + "]"
                                              : "peer class " + config_quoted(pc.name);
    for (size_t j = 0; j < pc.prefixes.size(); ++j) {
      const int line = r.peer_class_prefix_lines[i][j];
      const std::string text = pc.prefixes[j].to_string();
      auto [it, inserted] = prefix_owner.emplace(text, std::make_pair(label, line));
      if (!inserted) {
        r.error(line, "prefix " + text + " of " + label + " is already in " + it->second.first + " (line " +
                          std::to_string(it->second.second) + ")");
      }
    }
    for (size_t j = 0; j < pc.asns.size(); ++j) {
      const int line = r.peer_class_asn_lines[i][j];
      auto [it, inserted] = asn_owner.emplace(pc.asns[j], std::make_pair(label, line));
      if (!inserted) {
        r.error(line, "ASN " + std::to_string(pc.asns[j]) + " of " + label + " is already in " + it->second.first +
                          " (line " + std::to_string(it->second.second) + ")");
      }
    }
  }

  std::vector<std::string> known;
  for (const auto& pc : c.peer_classes) known.push_back(pc.name);
  known.push_back(c.default_peer_class);
  for (const auto& ref : r.peer_class_refs) {
    if (std::find(known.begin(), known.end(), ref.name) == known.end()) {
      r.error(ref.line, ref.where + " " + config_quoted(ref.name) + " is not a peer class (defined: " +
                            config_join(known, ", ") + ")");
    }
  }
}

}  // namespace tcpscope
