// Config file parsing and validation (SPEC.md "Config file"): the top-level
// keys' table, and the public API. Each section's keys are a table in a file
// of its own (config_sections.h).
//
// The parser walks the YAML tree once and reports every problem it finds with
// the 1-based line it is on, so one `check-config` run shows them all. Rules
// every section follows:
//   - a key that is not known is an error (typos must not silently fall back
//     to a default), and so is a key given twice in one mapping;
//   - a null value (`key:` or `key: ~`) means "not given": the default stays;
//   - integers are plain decimal; anything else (floats, 0x.., 1e6, 30-digit
//     numbers) is an error that names the accepted range;
//   - cross references (rule -> peer class) are checked after the whole file
//     is read, because sections may come in any order.
#include "config/config.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>
#include <yaml-cpp/eventhandler.h>
#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <regex>
#include <sstream>

#include "config/config_sections.h"

namespace tcpscope {

namespace {

constexpr uint64_t kMaxBytes = 1000000000000ULL;  // 1e12: no flow size boundary is larger
constexpr uint64_t kMinRingBuffer = 64ULL << 10;
constexpr uint64_t kMaxRingBuffer = 1ULL << 30;
constexpr uint32_t kMaxSnapshotInterval = 3600;
constexpr size_t kMaxConfigFileBytes = 16 << 20;

// Powers of two nest (record/transfer_sampling.h): records written at two
// rates can be brought to the larger. 0: none. "" for a valid rate, else what
// follows the key's name in the message.
std::string transfer_sampling_rate_problem(uint64_t rate) {
  if (rate <= Config::kMaxTransferSamplingRate && (rate & (rate - 1)) == 0) return "";
  return " " + std::to_string(rate) + " is neither 0 nor a power of two (1, 2, 4, ... " +
         std::to_string(Config::kMaxTransferSamplingRate) + ")";
}

void read_size_classes(ConfigReader& r, const ConfigEntry& e, const std::string& path, std::vector<uint64_t>* bounds) {
  std::vector<uint64_t> out;
  bool ok = true;
  const auto count = r.each_item(e, path, [&](const YAML::Node& n, int line, const std::string& item) {
    auto v = r.integer_value(n, line, item, 1, kMaxBytes);
    if (!v) {
      ok = false;
      return;
    }
    if (!out.empty() && *v <= out.back()) {
      r.error(line, path + " must be strictly increasing: " + std::to_string(*v) + " follows " +
                        std::to_string(out.back()));
      ok = false;
    }
    out.push_back(*v);
  });
  if (count == size_t{0}) {
    r.error(ConfigReader::line_of(e.value, e.line),
            path + " must list at least one boundary (e.g. [100000, 1000000, 3000000])");
    return;
  }
  if (count && ok) *bounds = std::move(out);
}

std::string size_classes_text(const std::vector<uint64_t>& bounds) {
  std::string out = "[";
  for (size_t i = 0; i < bounds.size(); ++i) out += (i ? ", " : "") + std::to_string(bounds[i]);
  return out + "]";
}

}  // namespace

const ConfigSection<Config>& top_level_section() {
  using Reload = ConfigReload;
  static const ConfigSection<Config> kSection{{
      with_reload(string_key("listen", &Config::listen,
                             "where /metrics, /healthz and /api/v1 are served: HOST:PORT with an IP address "
                             "(IPv6 in brackets, quoted)",
                             [](const std::string& s) {
                               std::string why;
                               return parse_listen_address(s, &why) ? std::string() : ": " + why;
                             }),
                  Reload::kNextStart),  // the socket is bound
      // A SIGHUP reopens the same path (logrotate).
      with_reload(string_key("flow_log", &Config::flow_log,
                             "one JSON line per finished flow (NDJSON); \"-\" = stdout, \"\" = none"),
                  Reload::kNextStart),
      // The policy programs are attached there.
      with_reload(string_key("cgroup", &Config::cgroup,
                             "cgroup v2 directory the policy programs attach to; \"\" = the root of the unified "
                             "hierarchy",
                             [](const std::string& s) {
                               return s.empty() || s[0] == '/'
                                          ? std::string()
                                          : " must be an absolute path to a cgroup v2 directory, got " +
                                                config_quoted(s);
                             }),
                  Reload::kNextStart),
      section_key("asn", &Config::asn, asn_section(), Reload::kApplied, "ASN enrichment; none: every asn is 0"),
      peer_classes_key(),
      with_reload(string_key("default_peer_class", &Config::default_peer_class,
                             "the peer class of an address no class matches",
                             [](const std::string& s) { return s.empty() ? " must not be empty" : ""; }),
                  Reload::kApplied),
      with_reload(member_key<Config, std::vector<uint64_t>>(
                      "size_classes_bytes", &Config::size_classes_bytes, "list of integers 1..1000000000000",
                      size_classes_text(Config{}.size_classes_bytes),
                      "strictly increasing boundaries (bytes) of the size_class label", read_size_classes),
                  Reload::kApplied),
      with_reload(integer_key("throughput_min_bytes", &Config::throughput_min_bytes, 1, kMaxBytes,
                              "flows and sent transfers this large feed the throughput histograms"),
                  Reload::kApplied),
      // Read for every transfer.
      with_reload(bool_key("flow_log_transfers", &Config::flow_log_transfers,
                           "transfer lines in the flow log beside the flow lines"),
                  Reload::kApplied),
      with_reload(integer_key("transfer_sampling_rate", &Config::transfer_sampling_rate, 0,
                              Config::kMaxTransferSamplingRate,
                              "a power of two: the kernel follows the transfers of one flow in this many (and of "
                              "every flow an experiment or controller assigns); every flow has its record. 0: "
                              "none but those a rule follows; with no such rule the per-call hooks are not "
                              "attached",
                              transfer_sampling_rate_problem),
                  Reload::kApplied),
      section_key("cc_policy", &Config::cc_policy, cc_policy_section(), Reload::kApplied,
                  "congestion control policy"),
      section_key("services", &Config::services, services_section(), Reload::kApplied,
                  "how the service that owns a socket is named from its cgroup (docs/services.md)"),
      // The map is sized at load.
      with_reload(integer_key("ring_buffer_bytes", &Config::ring_buffer_bytes, kMinRingBuffer, kMaxRingBuffer,
                              "kernel-to-daemon ring buffer, a power of two",
                              // The BPF ring buffer size must be a power of two (and a page
                              // multiple, which every power of two >= 64 KiB is).
                              [](uint64_t v) {
                                return (v & (v - 1)) == 0 ? std::string()
                                                          : " " + std::to_string(v) +
                                                                " is not a power of two (e.g. 16777216 = 16 MiB)";
                              }),
                  Reload::kNextStart),
      with_reload(integer_key("snapshot_interval_s", &Config::snapshot_interval_s, 0, kMaxSnapshotInterval,
                              "seconds between snapshots of open flows; 0 = off"),
                  Reload::kApplied),
      with_reload(member_key<Config, std::vector<std::string>>(
                      "ignore_netns", &Config::ignore_netns, "list of network namespaces", "[]",
                      "whose sockets tcpscope leaves alone, no record and no metric: a name of /run/netns or an "
                      "nsfs path (a load generator's, a test's)",
                      [](ConfigReader& r, const ConfigEntry& f, const std::string& path, std::vector<std::string>* out) {
                        read_netns_list(r, f, path, out);
                        if (std::find(out->begin(), out->end(), "self") != out->end())
                          r.error(f.line, path + " names self: tcpscope would leave its own namespace's sockets alone");
                      }),
                  Reload::kApplied),
      section_key("http", &Config::http, http_section(), Reload::kEachKey, "the HTTP endpoint's authentication"),
      // The producer keeps its queue across a reload.
      section_key("export", &Config::export_, export_section(), Reload::kNextStart, "records to other systems"),
  }};
  return kSection;
}

const std::vector<std::string>& config_top_level_keys() {
  static const std::vector<std::string> kKeys = top_level_section().names();
  return kKeys;
}

const std::vector<ConfigKeyDoc>& config_reference() {
  static const std::vector<ConfigKeyDoc> kRows = [] {
    std::vector<ConfigKeyDoc> rows;
    describe_section(top_level_section(), "", ConfigReload::kInherit, &rows);
    return rows;
  }();
  return kRows;
}

std::string config_reference_markdown() {
  auto cell = [](const std::string& s) {
    std::string out;
    for (char c : s) out += c == '|' ? std::string("\\|") : std::string(1, c);
    return out;
  };
  std::string out = "| key | type | default | SIGHUP | meaning |\n|---|---|---|---|---|\n";
  for (const auto& row : config_reference()) {
    out += "| `" + row.key + "` | " + cell(row.type) + " | " +
           (row.default_text.empty() ? "" : "`" + cell(row.default_text) + "`") + " | " + row.reload + " | " +
           cell(row.doc) + " |\n";
  }
  return out;
}

// Generated at build time from src/default_config.yaml (see CMakeLists.txt).
extern const char kDefaultConfigYaml[];

namespace {

// Where each document of a YAML stream starts (its first node), for at most
// two documents.
class DocumentStarts : public YAML::EventHandler {
 public:
  std::vector<YAML::Mark> document_marks;  // OnDocumentStart
  std::vector<YAML::Mark> node_marks;      // first node of each document
  void OnDocumentStart(const YAML::Mark& mark) override { document_marks.push_back(mark); }
  void OnDocumentEnd() override {}
  void OnNull(const YAML::Mark& mark, YAML::anchor_t) override { node(mark); }
  void OnAlias(const YAML::Mark& mark, YAML::anchor_t) override { node(mark); }
  void OnScalar(const YAML::Mark& mark, const std::string&, YAML::anchor_t, const std::string&) override {
    node(mark);
  }
  void OnSequenceStart(const YAML::Mark& mark, const std::string&, YAML::anchor_t,
                       YAML::EmitterStyle::value) override {
    node(mark);
  }
  void OnSequenceEnd() override {}
  void OnMapStart(const YAML::Mark& mark, const std::string&, YAML::anchor_t, YAML::EmitterStyle::value) override {
    node(mark);
  }
  void OnMapEnd() override {}

 private:
  void node(const YAML::Mark& mark) {
    if (node_marks.size() < document_marks.size()) node_marks.push_back(mark);
  }
};

// The first document of `text`, and the line (1-based, 0 if none) where a
// second one starts. yaml-cpp 0.7's YAML::LoadAll never returns for some
// broken input (a lone ","): the parser reports an empty document without
// consuming the offending token, again and again, allocating each time
// (jbeder/yaml-cpp#1040, fixed in 0.8.0). So documents are counted here, two
// at most, and one that starts where the previous one did is a syntax error.
// Throws YAML::Exception for syntax errors, like YAML::LoadAll.
YAML::Node load_first_document(const std::string& text, int* second_document_line) {
  *second_document_line = 0;
  std::istringstream in(text);
  YAML::Parser parser(in);
  DocumentStarts starts;
  while (starts.document_marks.size() < 2 && parser.HandleNextDocument(starts)) {
    const auto& marks = starts.document_marks;
    if (marks.size() == 2 && marks[1].pos == marks[0].pos) {
      throw YAML::ParserException(marks[1], "unexpected character here (e.g. a stray ',')");
    }
  }
  if (starts.document_marks.size() == 2) {
    const YAML::Mark& m =
        starts.node_marks.size() == 2 ? starts.node_marks[1] : starts.document_marks[1];
    *second_document_line = m.line >= 0 ? m.line + 1 : 0;
  }
  return YAML::Load(text);
}

Config parse_document(ConfigReader& r, const std::string& file, const std::string& text) {
  Config c;
  c.source = file;
  YAML::Node doc;
  int second_document_line = 0;
  try {
    doc = load_first_document(text, &second_document_line);
  } catch (const YAML::Exception& e) {
    std::string msg = "YAML syntax error: " + e.msg;
    // An unquoted IPv6 listen address is read as a flow list: say so.
    std::istringstream lines(text);
    std::string l;
    for (int i = 0; i <= e.mark.line && std::getline(lines, l); ++i) {
    }
    static const std::regex kBareIpv6Listen(R"(^\s*listen\s*:\s*\[)");
    if (std::regex_search(l, kBareIpv6Listen)) {
      msg += " (quote IPv6 listen addresses: listen: \"[::1]:9810\")";
    }
    r.error(e.mark.line >= 0 ? e.mark.line + 1 : 0, msg);
    return c;
  }
  if (!doc.IsDefined() || doc.IsNull()) return c;  // empty file: all defaults
  if (second_document_line) {
    r.error(second_document_line, "a config file holds one YAML document; found a second one");
  }
  if (!doc.IsMap()) {
    r.error(ConfigReader::line_of(doc, 1), "the top level must be a mapping (key: value), got " + ConfigReader::type_name(doc));
    return c;
  }
  read_section(r, doc, 1, "", top_level_section(), &c);
  check_peer_classes(r, c);
  return c;
}

bool read_whole_file(const std::string& path, std::string* text, std::string* why) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    *why = std::strerror(errno);
    return false;
  }
  bool ok = true;
  struct stat st;
  if (::fstat(fd, &st) != 0) {
    *why = std::strerror(errno);
    ok = false;
  } else if (S_ISDIR(st.st_mode)) {
    *why = std::strerror(EISDIR);
    ok = false;
  }
  char buf[65536];
  while (ok) {
    const ssize_t n = ::read(fd, buf, sizeof buf);
    if (n < 0) {
      if (errno == EINTR) continue;
      *why = std::strerror(errno);
      ok = false;
    } else if (n == 0) {
      break;
    } else if (text->size() + static_cast<size_t>(n) > kMaxConfigFileBytes) {
      *why = "larger than " + std::to_string(kMaxConfigFileBytes >> 20) +
             " MiB, not a config file";
      ok = false;
    } else {
      text->append(buf, static_cast<size_t>(n));
    }
  }
  ::close(fd);
  return ok;
}

}  // namespace

// ---------------------------------------------------------------------------
// Public API

bool KafkaConfig::operator==(const KafkaConfig& o) const {
  return brokers == o.brokers && topic_flows == o.topic_flows && topic_transfers == o.topic_transfers &&
         compression == o.compression && format == o.format && queue_bytes == o.queue_bytes && linger_ms == o.linger_ms &&
         client_id == o.client_id && security_protocol == o.security_protocol && tls_ca_file == o.tls_ca_file &&
         tls_cert_file == o.tls_cert_file && tls_key_file == o.tls_key_file && sasl_mechanism == o.sasl_mechanism &&
         sasl_username == o.sasl_username && sasl_password_file == o.sasl_password_file;
}

bool ControllerSpec::operator==(const ControllerSpec& o) const {
  return arms == o.arms && cohort == o.cohort && control_percent == o.control_percent &&
         min_transfers == o.min_transfers && min_connections == o.min_connections &&
         evidence_netns == o.evidence_netns && evidence_user == o.evidence_user && interval_s == o.interval_s && fdr == o.fdr &&
         ramp_step_percent == o.ramp_step_percent && max_cohorts == o.max_cohorts &&
         retrans_share_increase == o.retrans_share_increase && rtt_inflation_increase == o.rtt_inflation_increase;
}

std::string ConfigError::to_string() const {
  return file + (line > 0 ? ":" + std::to_string(line) : "") + ": " + message;
}

std::optional<ListenAddress> parse_listen_address(const std::string& text, std::string* why, int min_port) {
  auto fail = [&](const std::string& reason) -> std::optional<ListenAddress> {
    if (why) *why = reason;
    return std::nullopt;
  };
  std::string host, port;
  if (!text.empty() && text[0] == '[') {
    const size_t close = text.find("]:");
    if (close == std::string::npos) {
      return fail(config_quoted(text) + " is not [IPV6]:PORT, e.g. [::1]:9810");
    }
    host = text.substr(1, close - 1);
    port = text.substr(close + 2);
    auto addr = IpAddr::parse(host);
    if (!addr || addr->family != 6) {
      return fail(config_quoted(host) + " in brackets is not an IPv6 address");
    }
  } else {
    const size_t colon = text.rfind(':');
    if (colon == std::string::npos) {
      return fail(config_quoted(text) + " is not HOST:PORT, e.g. 127.0.0.1:9810 or [::1]:9810");
    }
    host = text.substr(0, colon);
    port = text.substr(colon + 1);
    if (host.find(':') != std::string::npos) {
      return fail("IPv6 address " + config_quoted(host) + " must be in brackets, e.g. [::1]:9810");
    }
    auto addr = IpAddr::parse(host);
    if (!addr) {
      return fail("host " + config_quoted(host) +
                  " is not an IP address (host names are not resolved; use e.g. 127.0.0.1)");
    }
  }
  ListenAddress out;
  out.addr = *IpAddr::parse(host);
  if (port.empty() || port.size() > 5 ||
      !std::all_of(port.begin(), port.end(), [](char c) { return c >= '0' && c <= '9'; })) {
    return fail("port " + config_quoted(port) + " is not a number in " + std::to_string(min_port) + "..65535");
  }
  const int p = std::stoi(port);
  if (p < min_port || p > 65535) return fail("port " + port + " is out of range " + std::to_string(min_port) + "..65535");
  out.port = static_cast<uint16_t>(p);
  return out;
}

Config parse_config(const std::string& yaml_text, const std::string& file_name,
                    const std::vector<std::string>& available_cc,
                    std::vector<ConfigError>* errors) {
  const size_t first_new = errors->size();
  ConfigReader parser(file_name, available_cc, errors);
  Config c = parse_document(parser, file_name, yaml_text);
  // Found section by section; reported top to bottom.
  std::stable_sort(errors->begin() + first_new, errors->end(),
                   [](const ConfigError& a, const ConfigError& b) { return a.line < b.line; });
  if (parser.unlisted_errors())
    errors->push_back(ConfigError{file_name, 0, "and " + std::to_string(parser.unlisted_errors()) +
                                                    " more errors, not listed"});
  return c;
}

Config load_config_file(const std::string& path, const std::vector<std::string>& available_cc,
                        std::vector<ConfigError>* errors) {
  std::string text, why;
  if (!read_whole_file(path, &text, &why)) {
    errors->push_back(ConfigError{path, 0, "cannot read config file: " + why});
    Config c;
    c.source = path;
    return c;
  }
  return parse_config(text, path, available_cc, errors);
}

bool transfers_followed(const Config& config) {
  if (config.transfer_sampling_rate) return true;
  return std::any_of(config.cc_policy.rules.begin(), config.cc_policy.rules.end(), [](const CcRule& r) {
    return r.controller || (r.experiment && r.experiment->follow_transfers);
  });
}

void apply_overrides(const ConfigOverrides& overrides, Config* config, std::vector<ConfigError>* errors) {
  if (overrides.listen) {
    std::string why;
    if (!parse_listen_address(*overrides.listen, &why))
      errors->push_back(ConfigError{"--listen", 0, *overrides.listen + ": " + why});
    config->listen = *overrides.listen;
  }
  if (overrides.flow_log) config->flow_log = *overrides.flow_log;
  if (overrides.cgroup) config->cgroup = *overrides.cgroup;
  if (overrides.transfer_sampling_rate) {
    const std::string& v = *overrides.transfer_sampling_rate;
    char* end = nullptr;
    errno = 0;
    const unsigned long long rate = std::strtoull(v.c_str(), &end, 10);
    const std::string problem = v.empty() || *end || errno || v[0] == '-'
                                    ? " \"" + v + "\" is not a number"
                                    : transfer_sampling_rate_problem(rate);
    if (!problem.empty())
      errors->push_back(ConfigError{"--transfer-sampling-rate", 0, "transfer_sampling_rate" + problem});
    else
      config->transfer_sampling_rate = static_cast<uint32_t>(rate);
  }
}

Config load_effective_config(const std::string& path, const ConfigOverrides& overrides,
                             const std::vector<std::string>& available_cc, std::vector<ConfigError>* errors) {
  Config c = path.empty() ? parse_config(default_config_text(), "<embedded>", available_cc, errors)
                          : load_config_file(path, available_cc, errors);
  apply_overrides(overrides, &c, errors);
  return c;
}

const std::string& default_config_text() {
  static const std::string text(kDefaultConfigYaml);
  return text;
}

std::vector<std::string> referenced_congestion_controls(const Config& config) {
  std::vector<std::string> out;
  auto add = [&](const std::string& name) {
    if (std::find(out.begin(), out.end(), name) == out.end()) out.push_back(name);
  };
  for (const auto& rule : config.cc_policy.rules) {
    if (rule.cc) add(*rule.cc);
    if (rule.experiment) {
      for (const auto& arm : rule.experiment->arms) add(arm.first);
    }
    if (rule.controller) {
      for (const auto& arm : rule.controller->arms) add(arm);
    }
  }
  return out;
}


}  // namespace tcpscope
