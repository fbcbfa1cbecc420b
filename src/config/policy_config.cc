// `cc_policy:` which congestion control new connections get (docs/policy.md
// "Congestion-control policy"): rules with a fixed cc, an experiment or a
// closed-loop controller ("Closed loop").
#include <pwd.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cstring>
#include <vector>

#include "config/config_sections.h"

namespace tcpscope {

namespace {

using R = ConfigReader;

// A uid as given, or a user name's from the user database.
std::optional<uint32_t> user_id(const std::string& name, std::string* error) {
  uint32_t uid = 0;
  const auto [end, ec] = std::from_chars(name.data(), name.data() + name.size(), uid);
  if (ec == std::errc() && end == name.data() + name.size()) {
    if (uid != UINT32_MAX) return uid;  // (uid_t)-1 is no user
    *error = "is not a uid (0..4294967294)";
    return std::nullopt;
  }
  std::vector<char> buf(16384);
  passwd pw{};
  passwd* found = nullptr;
  const int err = getpwnam_r(name.c_str(), &pw, buf.data(), buf.size(), &found);
  if (found) return static_cast<uint32_t>(found->pw_uid);
  *error = err ? std::string("looking the user up failed: ") + std::strerror(err) + " (errno " +
                     std::to_string(err) + ")"
               : "no such user on this host";
  return std::nullopt;
}

const ConfigSection<CcMatch>& match_section() {
  static const ConfigSection<CcMatch> kSection{{
      member_key<CcMatch, std::optional<std::string>>(
          "peer_class", &CcMatch::peer_class, "string", "", "a configured peer class or default_peer_class",
          [](R& r, const ConfigEntry& f, const std::string& path, std::optional<std::string>* out) {
            if (auto s = r.string_value(f, path)) {
              *out = *s;
              r.peer_class_refs.push_back(R::PeerClassRef{*s, R::line_of(f.value, f.line), path});
            }
          }),
      member_key<CcMatch, std::vector<uint32_t>>(
          "asns", &CcMatch::asns, "list of integers 1..4294967295", "[]", "remote AS numbers",
          [](R& r, const ConfigEntry& f, const std::string& path, std::vector<uint32_t>* out) {
            *out = r.asn_list(f, path, nullptr);
          }),
      member_key<CcMatch, std::vector<Prefix>>(
          "prefixes", &CcMatch::prefixes, "list of prefixes", "[]", "remote prefixes",
          [](R& r, const ConfigEntry& f, const std::string& path, std::vector<Prefix>* out) {
            *out = r.prefix_list(f, path, nullptr);
          }),
      member_key<CcMatch, std::vector<uint16_t>>(
          "lports", &CcMatch::lports, "list of integers 1..65535", "[]", "local ports",
          [](R& r, const ConfigEntry& f, const std::string& path, std::vector<uint16_t>* out) {
            r.each_item(f, path, [&](const YAML::Node& p, int line, const std::string& item) {
              if (auto v = r.integer_value(p, line, item, 1, 65535)) out->push_back(static_cast<uint16_t>(*v));
            });
          }),
      member_key<CcMatch, std::vector<std::string>>(
          "services", &CcMatch::services, "list of 1 to 64 strings of 1 to 512 bytes", "[]",
          "services owning the local socket, by the names records carry in `service` (a systemd unit, a "
          "container, namespace/pod): a socket is a service's when its cgroup (an accepted socket's: its "
          "listener's) or one of the 15 cgroups above it is",
          [](R& r, const ConfigEntry& f, const std::string& path, std::vector<std::string>* out) {
            // Bounded so that a rule's names stay a list to read, and each
            // as long as a unit name (255) or namespace/pod (63 + 1 + 253).
            constexpr size_t kMaxServices = 64, kMaxNameBytes = 512;
            const auto count = r.each_item(f, path, [&](const YAML::Node& n, int line, const std::string& item) {
              if (!n.IsScalar()) return r.error(line, item + " must be a service's name, got " + R::type_name(n));
              const std::string& name = n.Scalar();
              if (name.empty() || name.size() > kMaxNameBytes)
                return r.error(line, item + " must be 1 to " + std::to_string(kMaxNameBytes) + " bytes, has " +
                                         std::to_string(name.size()));
              if (std::find(out->begin(), out->end(), name) != out->end())
                return r.error(line, item + " " + config_quoted(name) + " is listed twice");
              out->push_back(name);
            });
            if (count && (*count == 0 || *count > kMaxServices))
              r.error(R::line_of(f.value, f.line), path + " needs 1 to " + std::to_string(kMaxServices) +
                                                       " services, has " + std::to_string(*count));
          }),
  }};
  return kSection;
}

void read_arms(R& r, const ConfigEntry& f, const std::string& path,
               std::vector<std::pair<std::string, uint32_t>>* out) {
  const int arms_line = R::line_of(f.value, f.line);
  if (!f.value.IsMap()) {
    r.error(arms_line, path + " must be a mapping of congestion control to weight, e.g. { bbr: 50, cubic: 50 }, got " +
                           R::type_name(f.value));
    return;
  }
  // Any key is allowed (each is a CC name); entries() still rejects
  // duplicates, which leaves fewer arms than written.
  const size_t arms_written = f.value.size();
  const std::vector<ConfigEntry> arms = r.entries(f.value, arms_line, path, nullptr);
  bool weights_ok = arms.size() == arms_written;
  uint64_t sum = 0;
  for (const ConfigEntry& arm : arms) {
    const std::string arm_where = path + "." + arm.key;
    const bool cc_ok = r.check_cc(arm.key, arm.line, arm_where);
    auto w = r.integer_value(arm.value, arm.line, arm_where + " weight", 0, 100);
    if (w) sum += *w;
    weights_ok = weights_ok && w;
    if (cc_ok && w) out->emplace_back(arm.key, static_cast<uint32_t>(*w));
  }
  if (arms_written < 2)
    r.error(arms_line, path + " needs at least 2 arms, has " + std::to_string(arms_written));
  else if (weights_ok && sum != 100)
    r.error(arms_line, path + " weights sum to " + std::to_string(sum) + ", must sum to 100");
}

const ConfigSection<ExperimentSpec>& experiment_section() {
  static const ConfigSection<ExperimentSpec> kSection{
      {
          member_key<ExperimentSpec, std::string>(
              "name", &ExperimentSpec::name, "string", "", "the name flows of this experiment carry in their records; required",
              [](R& r, const ConfigEntry& f, const std::string& path, std::string* out) {
                auto s = r.name_value(f, path);
                if (!s) return;
                // Records name it for the flows a controller assigned.
                if (*s == kControllerExperiment)
                  r.error(f.line, path + " \"" + *s + "\" is reserved for controller rules");
                *out = *s;
              }),
          member_key<ExperimentSpec, std::vector<std::pair<std::string, uint32_t>>>(
              "arms", &ExperimentSpec::arms, "mapping of cc to weight 0..100", "",
              "at least 2 congestion controls, weights in percent summing to 100; required", read_arms),
          bool_key("follow_transfers", &ExperimentSpec::follow_transfers,
                   "true: the kernel follows the transfers of every flow of the experiment, its evidence; "
                   "false: only those of the flows transfer_sampling_rate samples, for an experiment judged "
                   "on flow records"),
      },
      [](R& r, const std::map<std::string, int>& given, int line, const std::string& path, ExperimentSpec*) {
        if (!given.count("name")) r.error(line, path + " has no name");
        if (!given.count("arms")) r.error(line, path + " has no arms (e.g. arms: { bbr: 50, cubic: 50 })");
      }};
  return kSection;
}

const ConfigSection<ControllerSpec>& guards_section() {
  static const ConfigSection<ControllerSpec> kSection{{
      number_key("retrans_share_increase", &ControllerSpec::retrans_share_increase, 0, 1,
                 "the winner's retransmit share may exceed the other arm's by this much (absolute)"),
      number_key("rtt_inflation_increase", &ControllerSpec::rtt_inflation_increase, 0, 100,
                 "the winner's srtt/min_rtt may exceed the other arm's by this factor - 1"),
  }};
  return kSection;
}

const ConfigSection<ControllerSpec>& controller_section() {
  static const ConfigSection<ControllerSpec> kSection{
      {
          member_key<ControllerSpec, std::vector<std::string>>(
              "arms", &ControllerSpec::arms, "list of 2 to 8 congestion controls", "",
              "the arms; one may repeat (an A/A run); required",
              [](R& r, const ConfigEntry& f, const std::string& path, std::vector<std::string>* out) {
                const auto count = r.each_item(f, path, [&](const YAML::Node& a, int line, const std::string& item) {
                  if (!a.IsScalar())
                    return r.error(line, item + " must be a congestion control name, got " + R::type_name(a));
                  if (r.check_cc(a.Scalar(), line, item)) out->push_back(a.Scalar());
                });
                if (count && (*count < 2 || *count > kMaxControllerArms))
                  r.error(R::line_of(f.value, f.line), path + " needs 2 to " + std::to_string(kMaxControllerArms) +
                                                           " arms, has " + std::to_string(*count));
              }),
          choice_key<ControllerSpec, CohortKind>(
              "cohort", &ControllerSpec::cohort, {{"asn", CohortKind::kAsn}, {"peer_class", CohortKind::kPeerClass}},
              "what a cohort is: the remote ASN or the peer class"),
          integer_key("control_percent", &ControllerSpec::control_percent, 1, 100,
                      "share of each cohort's flows that stays randomized between all arms"),
          integer_key("min_transfers", &ControllerSpec::min_transfers, 2, 100000000,
                      "transfers per arm and cohort (and objective) before any decision"),
          integer_key("min_connections", &ControllerSpec::min_connections, 2, 1000000,
                      "connections those transfers come from, per arm and cohort (and objective), before any "
                      "decision: the kernel draws the arm per connection"),
          member_key<ControllerSpec, std::vector<std::string>>(
              "evidence_netns", &ControllerSpec::evidence_netns, "list of network namespaces", "[self]",
              "whose sockets count as evidence: self (the daemon's own), a name of /run/netns, or an nsfs path",
              [](R& r, const ConfigEntry& f, const std::string& path, std::vector<std::string>* out) {
                const auto count = read_netns_list(r, f, path, out);
                if (count && *count == 0) r.error(f.line, path + " names no namespace: no record could count");
              }),
          member_key<ControllerSpec, std::optional<uint32_t>>(
              "evidence_user", &ControllerSpec::evidence_user, "user name or uid", "",
              "whose sockets count as evidence: the user the service accepts connections as (sk_uid); unset: "
              "root's, or any on a privileged port",
              [](R& r, const ConfigEntry& f, const std::string& path, std::optional<uint32_t>* out) {
                const auto name = r.string_value(f, path);
                if (!name) return;
                std::string error;
                if (const auto uid = user_id(*name, &error))
                  *out = *uid;
                else
                  r.error(R::line_of(f.value, f.line), path + " " + *name + ": " + error);
              }),
          integer_key("interval_s", &ControllerSpec::interval_s, 1, 86400, "seconds between tests of the evidence"),
          number_key("fdr", &ControllerSpec::fdr, 1e-6, 0.5,
                     "false discovery rate held across all cohorts' decisions"),
          integer_key("ramp_step_percent", &ControllerSpec::ramp_step_percent, 1, 100,
                      "the winner's weight moves at most this much per interval"),
          integer_key("max_cohorts", &ControllerSpec::max_cohorts, 0, 1000,
                      "ASN cohorts per rule (peer classes always have one)"),
          inline_section_key("guards", guards_section(), "how much worse than the other arm a winner may be"),
      },
      [](R& r, const std::map<std::string, int>& given, int line, const std::string& path, ControllerSpec*) {
        if (!given.count("arms")) r.error(line, path + " has no arms (e.g. arms: [bbr, cubic])");
      }};
  return kSection;
}

// An experiment or a controller: a mapping, kept only when nothing in it was wrong.
template <class S>
void read_optional(R& r, const ConfigEntry& e, const std::string& path, const ConfigSection<S>& section,
                   const char* example, std::optional<S>* out) {
  if (!e.value.IsMap()) {
    r.error(R::line_of(e.value, e.line), path + " must be a mapping " + example + ", got " + R::type_name(e.value));
    return;
  }
  const size_t errors_before = r.error_count();
  S spec;
  read_section(r, e.value, e.line, path, section, &spec);
  if (r.error_count() == errors_before) *out = std::move(spec);
}

template <class S>
ConfigKey<CcRule> optional_section_key(std::string name, std::optional<S> CcRule::*member,
                                       const ConfigSection<S>& section, const char* example, std::string doc) {
  ConfigKey<CcRule> k = member_key<CcRule, std::optional<S>>(
      std::move(name), member, "mapping", "", std::move(doc),
      [&section, example](R& r, const ConfigEntry& e, const std::string& path, std::optional<S>* out) {
        read_optional(r, e, path, section, example, out);
      });
  k.describe_keys = [&section](const std::string& path, ConfigReload reload, std::vector<ConfigKeyDoc>* out) {
    describe_section(section, path, reload, out);
  };
  return k;
}

const ConfigSection<CcRule>& rule_section() {
  static const ConfigSection<CcRule> kSection{
      {
          member_key<CcRule, std::string>("name", &CcRule::name, "string", "",
                                          "the rule's name in metrics and records; required, unique",
                                          [](R& r, const ConfigEntry& f, const std::string& path, std::string* out) {
                                            if (auto s = r.name_value(f, path)) *out = *s;
                                          }),
          section_key("match", &CcRule::match, match_section(), ConfigReload::kInherit,
                      "conditions that must all hold; none: every flow"),
          member_key<CcRule, std::optional<std::string>>(
              "cc", &CcRule::cc, "string", "", "a congestion control the kernel offers",
              [](R& r, const ConfigEntry& f, const std::string& path, std::optional<std::string>* out) {
                if (auto s = r.string_value(f, path))
                  if (r.check_cc(*s, R::line_of(f.value, f.line), path)) *out = *s;
              }),
          optional_section_key("experiment", &CcRule::experiment, experiment_section(),
                               "{ name: ..., arms: { cc: weight, ... } }",
                               "split matching flows between arms by weight"),
          optional_section_key("controller", &CcRule::controller, controller_section(),
                               "{ arms: [bbr, cubic], cohort: asn, ... }",
                               "learn the best arm per cohort and give it most flows (docs/policy.md \"Closed "
                               "loop: a controller per rule\")"),
      },
      [](R& r, const std::map<std::string, int>& given, int line, const std::string& path, CcRule*) {
        if (!given.count("name")) r.error(line, path + " has no name");
        const size_t chosen = given.count("cc") + given.count("experiment") + given.count("controller");
        if (chosen > 1)
          r.error(line, path + " has more than one of cc, experiment and controller; give exactly one");
        else if (chosen == 0)
          r.error(line, path + " has none of cc, experiment and controller; give exactly one");
      }};
  return kSection;
}

void read_rules(R& r, const ConfigEntry& f, const std::string& path, std::vector<CcRule>* rules) {
  std::map<std::string, int> names;
  r.each_mapping(f, path, "name, match and cc, experiment or controller", [&](const YAML::Node& n, int line,
                                                                                const std::string& where) {
    CcRule rule;
    rule.line = line;
    const auto given = read_section(r, n, line, where, rule_section(), &rule);
    if (!rule.name.empty()) {
      const int name_line = given.at("name");
      auto [it, inserted] = names.emplace(rule.name, name_line);
      if (!inserted)
        r.error(name_line, "duplicate rule name " + config_quoted(rule.name) + " (first defined at line " +
                               std::to_string(it->second) + ")");
    }
    rules->push_back(std::move(rule));
  });
}

}  // namespace

std::optional<size_t> read_netns_list(ConfigReader& r, const ConfigEntry& f, const std::string& path,
                                      std::vector<std::string>* out) {
  out->clear();
  return r.each_item(f, path, [&](const YAML::Node& n, int line, const std::string& item) {
    const std::string v = n.IsScalar() ? n.Scalar() : "";
    const bool name = !v.empty() && v.size() <= 255 && v != "." && v != ".." &&
                      v.find_first_not_of("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"
                                          "0123456789._-") == std::string::npos;
    const bool path_ok = v.size() > 1 && v[0] == '/' && v.size() <= 4096;
    if (!name && !path_ok) return r.error(line, item + " must be self, a network namespace's name or an absolute path");
    out->push_back(v);
  });
}

const ConfigSection<CcPolicy>& cc_policy_section() {
  static const ConfigSection<CcPolicy> kSection{{
      choice_key<CcPolicy, AppOverride>("app_override", &CcPolicy::app_override,
                                        {{"respect", AppOverride::kRespect}, {"enforce", AppOverride::kEnforce}},
                                        "an application that sets TCP_CONGESTION itself: respect keeps its choice "
                                        "(and counts it), enforce applies the rules anyway"),
      choice_key<CcPolicy, SysctlGuard>("sysctl_guard", &CcPolicy::sysctl_guard,
                                        {{"observe", SysctlGuard::kObserve}, {"deny", SysctlGuard::kDeny}},
                                        "writes to net.ipv4.tcp_congestion_control: observe counts them, deny "
                                        "blocks them"),
      [] {
        ConfigKey<CcPolicy> k = member_key<CcPolicy, std::vector<CcRule>>(
            "rules", &CcPolicy::rules, "list of mappings", "[]",
            "first match wins; each has a name, a match and one of cc, experiment, controller", read_rules);
        k.describe_keys = [](const std::string& path, ConfigReload reload, std::vector<ConfigKeyDoc>* out) {
          describe_section(rule_section(), path + "[]", reload, out);
        };
        return k;
      }(),
  }};
  return kSection;
}

}  // namespace tcpscope
