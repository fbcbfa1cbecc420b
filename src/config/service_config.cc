// `services:` how the owner of a socket is named from its cgroup
// (docs/services.md "Services") and how many names the metrics keep.
#include <regex>

#include "config/config_sections.h"

namespace tcpscope {

namespace {

constexpr uint32_t kMaxTopN = 10000;
constexpr uint32_t kMaxGraceSeconds = 86400;

// "" for a rule the namer can use, else why not: the expression must
// compile, and the name may use only groups it has.
std::string name_rule_problem(const ServiceNameRule& rule) {
  size_t groups = 0;
  try {
    groups = std::regex(rule.path, std::regex::ECMAScript).mark_count();
  } catch (const std::regex_error& e) {
    return "path " + config_quoted(rule.path) + " is not a regular expression: " + e.what();
  }
  for (size_t i = 0; i + 1 < rule.name.size(); ++i) {
    const char c = rule.name[i + 1];
    if (rule.name[i] == '$' && c >= '1' && c <= '9' && static_cast<size_t>(c - '0') > groups)
      return "name " + config_quoted(rule.name) + " uses $" + c + " but path has " + std::to_string(groups) +
             " group(s)";
  }
  return "";
}

const ConfigSection<ServiceNameRule>& name_rule_section() {
  static const ConfigSection<ServiceNameRule> kSection{{
      member_key<ServiceNameRule, std::string>(
          "path", &ServiceNameRule::path, "string", "",
          "an ECMAScript regular expression the whole cgroup path must match (below the cgroup2 mount, "
          "\"/system.slice/nginx.service\"); required",
          [](ConfigReader& r, const ConfigEntry& f, const std::string& path, std::string* out) {
            if (auto s = r.name_value(f, path)) *out = *s;
          }),
      member_key<ServiceNameRule, std::string>(
          "name", &ServiceNameRule::name, "string", "",
          "the service's name; $1 ... $9 are the expression's groups; required",
          [](ConfigReader& r, const ConfigEntry& f, const std::string& path, std::string* out) {
            if (auto s = r.name_value(f, path)) *out = *s;
          }),
  }};
  return kSection;
}

void read_name_rules(ConfigReader& r, const ConfigEntry& e, const std::string& path,
                     std::vector<ServiceNameRule>* rules) {
  std::vector<ServiceNameRule> out;
  r.each_mapping(e, path, "path and name", [&](const YAML::Node& n, int line, const std::string& where) {
    ServiceNameRule rule;
    rule.line = line;
    const size_t errors_before = r.error_count();
    const auto given = read_section(r, n, line, where, name_rule_section(), &rule);
    for (const char* key : {"path", "name"})
      if (!given.count(key)) r.error(line, where + " has no " + key);
    if (r.error_count() != errors_before) return;
    if (const std::string problem = name_rule_problem(rule); !problem.empty())
      return r.error(line, where + ": " + problem);
    out.push_back(std::move(rule));
  });
  *rules = std::move(out);
}

ConfigKey<ServicesConfig> name_rules_key() {
  ConfigKey<ServicesConfig> k = member_key<ServicesConfig, std::vector<ServiceNameRule>>(
      "names", &ServicesConfig::names, "list of mappings", "[]",
      "rules tried in order before the built-in layouts, each a path and a name; the first that matches names "
      "the cgroup",
      read_name_rules);
  k.describe_keys = [](const std::string& path, ConfigReload reload, std::vector<ConfigKeyDoc>* out) {
    describe_section(name_rule_section(), path + "[]", reload, out);
  };
  return k;
}

}  // namespace

const ConfigSection<ServicesConfig>& services_section() {
  static const ConfigSection<ServicesConfig> kSection{{
      integer_key("top_n", &ServicesConfig::top_n, 1, kMaxTopN,
                  "the N services with the most bytes get their own label value, the rest are \"other\" "
                  "(bounds the Prometheus series and the `compare --server` sketches)"),
      integer_key("grace_seconds", &ServicesConfig::grace_seconds, 0, kMaxGraceSeconds,
                  "a removed cgroup keeps its name this long, for the records of its sockets still closing; a "
                  "service with no record this long loses its series (docs/metrics.md)"),
      name_rules_key(),
  }};
  return kSection;
}

}  // namespace tcpscope
