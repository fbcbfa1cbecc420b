// Config file parsing and validation (SPEC.md "Config file").
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
#include "text/utf8_text.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>
#include <yaml-cpp/eventhandler.h>
#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <map>
#include <regex>
#include <sstream>

namespace tcpscope {

namespace {

// Powers of two nest (record/transfer_sampling.h): records written at two
// rates can be brought to the larger. "" for a valid rate.
std::string transfer_sampling_rate_problem(uint64_t rate) {
  if (rate >= 1 && rate <= Config::kMaxTransferSamplingRate && (rate & (rate - 1)) == 0) return "";
  return "transfer_sampling_rate " + std::to_string(rate) + " is not a power of two (1, 2, 4, ... " +
         std::to_string(Config::kMaxTransferSamplingRate) + ")";
}

}  // namespace

const std::vector<std::string>& config_top_level_keys() {
  static const std::vector<std::string> kKeys = {
      "listen",         "flow_log",    "cgroup",           "asn",
      "peer_classes",   "default_peer_class",              "size_classes_bytes",
      "throughput_min_bytes",          "flow_log_transfers", "transfer_sampling_rate", "cc_policy",
      "ring_buffer_bytes",             "snapshot_interval_s", "http",
      "export"};
  return kKeys;
}


// Generated at build time from src/default_config.yaml (see CMakeLists.txt).
extern const char kDefaultConfigYaml[];

namespace {

constexpr uint64_t kMaxBytes = 1000000000000ULL;  // 1e12: no flow size boundary is larger
constexpr uint64_t kMinRingBuffer = 64ULL << 10;
constexpr uint64_t kMaxRingBuffer = 1ULL << 30;
constexpr uint32_t kMaxSnapshotInterval = 3600;
constexpr uint32_t kMaxTopN = 10000;
constexpr uint64_t kMaxAsn = 4294967295ULL;
constexpr size_t kMaxConfigFileBytes = 16 << 20;
std::string quoted(const std::string& s) { return "\"" + clipped(s) + "\""; }

std::string type_name(const YAML::Node& n) {
  switch (n.Type()) {
    case YAML::NodeType::Scalar: return "a scalar " + quoted(n.Scalar());
    case YAML::NodeType::Sequence: return "a list";
    case YAML::NodeType::Map: return "a mapping";
    default: return "nothing";
  }
}

// A list echoed in a message (known keys, available CCs, defined classes):
// each item clipped and at most kMaxListedItems of them, so a config with a
// hundred long class names still gives a one-line message.
constexpr size_t kMaxListedItems = 13;  // the longest fixed key list (top level)
std::string join(const std::vector<std::string>& items, const char* sep) {
  std::string out;
  const size_t shown = std::min(items.size(), kMaxListedItems);
  for (size_t i = 0; i < shown; ++i) out += (i ? sep : "") + clipped(items[i]);
  if (items.size() > shown) out += std::string(sep) + "and " + std::to_string(items.size() - shown) + " more";
  return out;
}

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

// One key/value pair of a YAML mapping, with the key's line.
struct Entry {
  std::string key;
  YAML::Node value;
  int line = 0;
};

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

class ConfigParser {
 public:
  ConfigParser(std::string file, const std::vector<std::string>& available_cc,
               std::vector<ConfigError>* errors)
      : file_(std::move(file)), available_cc_(available_cc), errors_(errors), first_error_(errors->size()) {}

  Config parse(const std::string& text);
  size_t unlisted_errors() const { return unlisted_errors_; }

 private:
  // Where a node is, 1-based. A null node's mark points at the next token
  // (often the next line), so callers pass the key's line as the fallback.
  static int line_of(const YAML::Node& n, int fallback) {
    if (!n.IsDefined() || n.IsNull() || n.Mark().line < 0) return fallback;
    return n.Mark().line + 1;
  }

  // A file of a million bad entries (or of aliases to them) gets a page of
  // errors, not a million log lines on a SIGHUP.
  static constexpr size_t kMaxErrors = 50;
  void error(int line, std::string message) {
    if (errors_->size() - first_error_ < kMaxErrors)
      errors_->push_back(ConfigError{file_, line, std::move(message)});
    else
      ++unlisted_errors_;
  }

  // The entries of a mapping in document order. Reports a value that is not a
  // mapping, non-string keys, duplicate keys and (when `known` is given) unknown
  // keys; such entries are left out.
  std::vector<Entry> entries(const YAML::Node& map, int line, const std::string& where,
                             const std::vector<std::string>* known);

  std::optional<std::string> string_value(const Entry& e, const std::string& what);
  // A string that must be one of `choices` (name -> value) into *out;
  // otherwise an error naming them all ("must be a or b, got ...").
  template <class T>
  void choice_value(const Entry& e, const std::string& what,
                    std::initializer_list<std::pair<const char*, T>> choices, T* out) {
    auto s = string_value(e, what);
    if (!s) return;
    std::string names;
    size_t i = 0;
    for (const auto& [name, value] : choices) {
      if (*s == name) {
        *out = value;
        return;
      }
      names += std::string(i == 0 ? "" : i + 1 == choices.size() ? " or " : ", ") + name;
      ++i;
    }
    error(line_of(e.value, e.line), what + " must be " + names + ", got " + quoted(*s));
  }
  std::optional<uint64_t> integer_value(const YAML::Node& v, int line, const std::string& what,
                                        uint64_t min, uint64_t max);
  // `true` or `false`, nothing else: a "yes" or "1" that YAML 1.1 would
  // read as true is an error rather than a guess.
  std::optional<bool> bool_value(const Entry& e, const std::string& what);
  // Elements of a list; a null value is an empty list. nullopt when not a list.
  std::optional<std::vector<YAML::Node>> list_value(const Entry& e, const std::string& what);

  void parse_top(const YAML::Node& root, Config* c);
  void parse_asn(const Entry& e, AsnConfig* asn);
  void parse_peer_classes(const Entry& e, std::vector<PeerClassSpec>* classes);
  void parse_size_classes(const Entry& e, std::vector<uint64_t>* bounds);
  void parse_cc_policy(const Entry& e, CcPolicy* policy);
  void parse_http(const Entry& e, HttpConfig* http);
  void parse_export(const Entry& e, ExportConfig* out);
  void parse_kafka(const Entry& e, KafkaConfig* kafka);
  // *name_line: where the name is, for duplicate-name messages.
  std::optional<CcRule> parse_rule(const YAML::Node& n, int line, const std::string& where,
                                   int* name_line);
  void parse_match(const Entry& e, const std::string& where, CcMatch* match);
  std::optional<ExperimentSpec> parse_experiment(const Entry& e, const std::string& where);
  std::optional<ControllerSpec> parse_controller(const Entry& e, const std::string& where);
  std::optional<double> number_value(const YAML::Node& v, int line, const std::string& what, double min,
                                     double max);

  std::vector<Prefix> prefix_list(const Entry& e, const std::string& what,
                                  std::vector<int>* lines);
  std::vector<uint32_t> asn_list(const Entry& e, const std::string& what, std::vector<int>* lines);
  // A congestion control name the kernel must offer.
  bool check_cc(const std::string& name, int line, const std::string& what);

  void check_peer_class_overlaps(const Config& c);
  void check_peer_class_references(const Config& c);

  std::string file_;
  const std::vector<std::string>& available_cc_;
  std::vector<ConfigError>* errors_;
  size_t first_error_;
  size_t unlisted_errors_ = 0;

  // Filled while parsing, checked at the end.
  struct PeerClassRef {
    std::string name;
    int line;
    std::string where;
  };
  std::vector<PeerClassRef> peer_class_refs_;
  std::map<std::string, int> peer_class_name_lines_;
  std::vector<std::vector<int>> peer_class_prefix_lines_;  // per class, per prefix
  std::vector<std::vector<int>> peer_class_asn_lines_;
};

std::vector<Entry> ConfigParser::entries(const YAML::Node& map, int line, const std::string& where,
                                         const std::vector<std::string>* known) {
  std::vector<Entry> out;
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
      error(key_line, "duplicate key " + quoted(name) + " in " + where + " (first at line " +
                          std::to_string(first->second) + ")");
      continue;
    }
    seen.emplace(name, key_line);
    if (known && std::find(known->begin(), known->end(), name) == known->end()) {
      std::string msg = "unknown key " + quoted(name) + " in " + where;
      const std::string* closest = nullptr;
      size_t best = 3;  // suggest only near misses
      for (const auto& k : *known) {
        size_t d = edit_distance(name, k);
        if (d < best) best = d, closest = &k;
      }
      if (closest) {
        msg += "; did you mean \"" + *closest + "\"?";
      } else {
        msg += " (known keys: " + join(*known, ", ") + ")";
      }
      error(key_line, msg);
      continue;
    }
    out.push_back(Entry{name, it->second, key_line});
  }
  return out;
}

std::optional<std::string> ConfigParser::string_value(const Entry& e, const std::string& what) {
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

std::optional<uint64_t> ConfigParser::integer_value(const YAML::Node& v, int line,
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

std::optional<bool> ConfigParser::bool_value(const Entry& e, const std::string& what) {
  if (e.value.IsScalar() && e.value.Scalar() == "true") return true;
  if (e.value.IsScalar() && e.value.Scalar() == "false") return false;
  error(line_of(e.value, e.line), what + " must be true or false, got " + type_name(e.value));
  return std::nullopt;
}

std::optional<std::vector<YAML::Node>> ConfigParser::list_value(const Entry& e,
                                                                const std::string& what) {
  std::vector<YAML::Node> out;
  if (e.value.IsNull()) return out;
  if (!e.value.IsSequence()) {
    error(line_of(e.value, e.line), what + " must be a list, got " + type_name(e.value));
    return std::nullopt;
  }
  for (auto it = e.value.begin(); it != e.value.end(); ++it) out.push_back(*it);
  return out;
}

bool ConfigParser::check_cc(const std::string& name, int line, const std::string& what) {
  if (std::find(available_cc_.begin(), available_cc_.end(), name) != available_cc_.end()) {
    return true;
  }
  error(line, what + ": congestion control " + quoted(name) +
                  " is not available in this kernel (available: " +
                  (available_cc_.empty() ? "none found" : join(available_cc_, " ")) + ")");
  return false;
}

// ---------------------------------------------------------------------------

Config ConfigParser::parse(const std::string& text) {
  Config c;
  c.source = file_;
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
    error(e.mark.line >= 0 ? e.mark.line + 1 : 0, msg);
    return c;
  }
  if (!doc.IsDefined() || doc.IsNull()) return c;  // empty file: all defaults
  if (second_document_line) {
    error(second_document_line, "a config file holds one YAML document; found a second one");
  }
  if (!doc.IsMap()) {
    error(line_of(doc, 1), "the top level must be a mapping (key: value), got " + type_name(doc));
    return c;
  }
  parse_top(doc, &c);
  check_peer_class_overlaps(c);
  check_peer_class_references(c);
  return c;
}

void ConfigParser::parse_top(const YAML::Node& root, Config* c) {
  const std::vector<std::string>& kKeys = config_top_level_keys();
  for (const Entry& e : entries(root, 1, "the top level", &kKeys)) {
    if (e.value.IsNull()) continue;  // not given: keep the default
    const int vline = line_of(e.value, e.line);
    if (e.key == "listen") {
      if (auto s = string_value(e, "listen")) {
        std::string why;
        if (parse_listen_address(*s, &why)) {
          c->listen = *s;
        } else {
          error(vline, "listen: " + why);
        }
      }
    } else if (e.key == "flow_log") {
      if (auto s = string_value(e, "flow_log")) c->flow_log = *s;
    } else if (e.key == "cgroup") {
      if (auto s = string_value(e, "cgroup")) {
        if (!s->empty() && (*s)[0] != '/') {
          error(vline, "cgroup must be an absolute path to a cgroup v2 directory, got " +
                           quoted(*s));
        } else {
          c->cgroup = *s;
        }
      }
    } else if (e.key == "asn") {
      parse_asn(e, &c->asn);
    } else if (e.key == "peer_classes") {
      parse_peer_classes(e, &c->peer_classes);
    } else if (e.key == "default_peer_class") {
      if (auto s = string_value(e, "default_peer_class")) {
        if (s->empty()) {
          error(vline, "default_peer_class must not be empty");
        } else {
          c->default_peer_class = *s;
        }
      }
    } else if (e.key == "size_classes_bytes") {
      parse_size_classes(e, &c->size_classes_bytes);
    } else if (e.key == "throughput_min_bytes") {
      if (auto v = integer_value(e.value, e.line, "throughput_min_bytes", 1, kMaxBytes)) {
        c->throughput_min_bytes = *v;
      }
    } else if (e.key == "flow_log_transfers") {
      if (auto v = bool_value(e, "flow_log_transfers")) c->flow_log_transfers = *v;
    } else if (e.key == "transfer_sampling_rate") {
      if (auto v = integer_value(e.value, e.line, "transfer_sampling_rate", 1, Config::kMaxTransferSamplingRate)) {
        if (const std::string problem = transfer_sampling_rate_problem(*v); !problem.empty())
          error(vline, problem);
        else
          c->transfer_sampling_rate = static_cast<uint32_t>(*v);
      }
    } else if (e.key == "cc_policy") {
      parse_cc_policy(e, &c->cc_policy);
    } else if (e.key == "ring_buffer_bytes") {
      if (auto v = integer_value(e.value, e.line, "ring_buffer_bytes", kMinRingBuffer,
                                 kMaxRingBuffer)) {
        // The BPF ring buffer size must be a power of two (and a page multiple,
        // which every power of two >= 64 KiB is).
        if ((*v & (*v - 1)) != 0) {
          error(vline, "ring_buffer_bytes " + std::to_string(*v) +
                           " is not a power of two (e.g. 16777216 = 16 MiB)");
        } else {
          c->ring_buffer_bytes = *v;
        }
      }
    } else if (e.key == "http") {
      parse_http(e, &c->http);
    } else if (e.key == "export") {
      parse_export(e, &c->export_);
    } else if (e.key == "snapshot_interval_s") {
      if (auto v = integer_value(e.value, e.line, "snapshot_interval_s", 0,
                                 kMaxSnapshotInterval)) {
        c->snapshot_interval_s = static_cast<uint32_t>(*v);
      }
    }
  }
}

void ConfigParser::parse_asn(const Entry& e, AsnConfig* asn) {
  static const std::vector<std::string> kKeys = {"mmdb", "prefix_file", "top_n"};
  for (const Entry& f : entries(e.value, e.line, "asn", &kKeys)) {
    if (f.value.IsNull()) continue;
    if (f.key == "mmdb") {
      if (auto s = string_value(f, "asn.mmdb")) asn->mmdb = *s;
    } else if (f.key == "prefix_file") {
      if (auto s = string_value(f, "asn.prefix_file")) asn->prefix_file = *s;
    } else if (f.key == "top_n") {
      if (auto v = integer_value(f.value, f.line, "asn.top_n", 1, kMaxTopN)) {
        asn->top_n = static_cast<uint32_t>(*v);
      }
    }
  }
}

void ConfigParser::parse_http(const Entry& e, HttpConfig* http) {
  // basic_auth_password and tls_certificate are known only to say why they are refused.
  static const std::vector<std::string> kKeys = {"tls_certificate", "basic_auth_user",
                                                 "basic_auth_password_sha256", "basic_auth_password"};
  int user_line = 0, digest_line = 0;
  for (const Entry& f : entries(e.value, e.line, "http", &kKeys)) {
    if (f.value.IsNull()) continue;
    const int vline = line_of(f.value, f.line);
    if (f.key == "tls_certificate") {
      error(f.line, "http.tls_certificate: tcpscope serves plain HTTP only; keep listen on a loopback address "
                    "and put a TLS proxy in front (README \"Security\")");
    } else if (f.key == "basic_auth_user") {
      user_line = f.line;
      if (auto s = string_value(f, "http.basic_auth_user")) {
        if (s->empty()) {
          error(vline, "http.basic_auth_user must not be empty");
        } else if (s->find(':') != std::string::npos) {
          error(vline, "http.basic_auth_user must not contain ':' (RFC 7617)");
        } else {
          http->basic_auth_user = *s;
        }
      }
    } else if (f.key == "basic_auth_password_sha256") {
      digest_line = f.line;
      if (auto s = string_value(f, "http.basic_auth_password_sha256")) {
        const bool hex = s->size() == 64 && s->find_first_not_of("0123456789abcdefABCDEF") == std::string::npos;
        if (!hex) {
          error(vline, "http.basic_auth_password_sha256 must be 64 hex digits, the SHA-256 of the "
                       "password (printf %s 'PASSWORD' | sha256sum), got " + std::to_string(s->size()) +
                       " characters");
        } else {
          http->basic_auth_password_sha256 = *s;
        }
      }
    } else if (f.key == "basic_auth_password") {
      error(f.line, "http.basic_auth_password: a password is never written in the config; give "
                    "basic_auth_password_sha256, its SHA-256 in hex (printf %s 'PASSWORD' | sha256sum)");
    }
  }
  // Each needs the other; reported once, where the one given is.
  if (user_line && !digest_line) {
    error(user_line, "http.basic_auth_user needs http.basic_auth_password_sha256");
  } else if (digest_line && !user_line) {
    error(digest_line, "http.basic_auth_password_sha256 needs http.basic_auth_user");
  }
}

void ConfigParser::parse_export(const Entry& e, ExportConfig* out) {
  static const std::vector<std::string> kKeys = {"kafka"};
  for (const Entry& f : entries(e.value, e.line, "export", &kKeys)) {
    if (f.value.IsNull()) continue;
    if (f.key == "kafka") parse_kafka(f, &out->kafka);
  }
}

namespace {

// Kafka's own rule for topic names.
bool valid_kafka_topic(const std::string& t) {
  return !t.empty() && t.size() <= 249 && t != "." && t != ".." &&
         t.find_first_not_of("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._-") == std::string::npos;
}

// HOST:PORT or [IPV6]:PORT, port 1..65535.
bool valid_broker(const std::string& b) {
  const size_t colon = b.rfind(':');
  if (colon == std::string::npos || colon == 0 || colon + 1 == b.size()) return false;
  const std::string host = b.substr(0, colon), port = b.substr(colon + 1);
  if (port.size() > 5 || port.find_first_not_of("0123456789") != std::string::npos) return false;
  const unsigned long p = std::stoul(port);
  if (p < 1 || p > 65535) return false;
  if (host.front() == '[') return host.back() == ']' && host.size() > 2;
  return host.find_first_of(" ,/[]") == std::string::npos;
}

}  // namespace

void ConfigParser::parse_kafka(const Entry& e, KafkaConfig* k) {
  static const std::vector<std::string> kKeys = {
      "brokers", "topic_flows", "topic_transfers", "compression", "format", "queue_bytes", "linger_ms",
      "client_id", "security_protocol", "tls", "sasl"};
  static const std::vector<std::string> kCompression = {"none", "gzip", "snappy", "lz4", "zstd"};
  static const std::vector<std::string> kFormats = {"json", "protobuf"};
  static const std::vector<std::string> kProtocols = {"plaintext", "ssl", "sasl_plaintext", "sasl_ssl"};
  static const std::vector<std::string> kMechanisms = {"PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"};
  auto one_of = [this](const Entry& f, const std::string& what, const std::vector<std::string>& allowed,
                       std::string* out) {
    auto s = string_value(f, what);
    if (!s) return;
    if (std::find(allowed.begin(), allowed.end(), *s) == allowed.end()) {
      error(line_of(f.value, f.line), what + " must be one of " + join(allowed, ", ") + ", got " + quoted(*s));
      return;
    }
    *out = *s;
  };
  int sasl_line = 0, tls_line = 0;
  bool brokers_given = false;
  for (const Entry& f : entries(e.value, e.line, "export.kafka", &kKeys)) {
    if (f.value.IsNull()) continue;
    const int vline = line_of(f.value, f.line);
    if (f.key == "brokers") {
      brokers_given = true;
      auto items = list_value(f, "export.kafka.brokers");
      if (!items) continue;
      for (size_t i = 0; i < items->size(); ++i) {
        const YAML::Node& n = (*items)[i];
        const std::string what = "export.kafka.brokers[" + std::to_string(i) + "]";
        if (!n.IsScalar() || !valid_broker(n.Scalar())) {
          error(line_of(n, vline), what + " must be HOST:PORT (e.g. kafka-1:9092), got " + type_name(n));
          continue;
        }
        k->brokers.push_back(n.Scalar());
      }
    } else if (f.key == "topic_flows" || f.key == "topic_transfers") {
      const std::string what = "export.kafka." + f.key;
      auto s = string_value(f, what);
      if (!s) continue;
      if (!(f.key == "topic_transfers" && s->empty()) && !valid_kafka_topic(*s)) {
        error(vline, what + " " + quoted(*s) + " is not a Kafka topic name (1-249 of [a-zA-Z0-9._-])");
        continue;
      }
      (f.key == "topic_flows" ? k->topic_flows : k->topic_transfers) = *s;
    } else if (f.key == "compression") {
      one_of(f, "export.kafka.compression", kCompression, &k->compression);
    } else if (f.key == "format") {
      one_of(f, "export.kafka.format", kFormats, &k->format);
    } else if (f.key == "queue_bytes") {
      // librdkafka counts its queue in KiB, at most 2^31-1 of them.
      if (auto v = integer_value(f.value, f.line, "export.kafka.queue_bytes", 1 << 20, 2047ull << 30))
        k->queue_bytes = *v;
    } else if (f.key == "linger_ms") {
      if (auto v = integer_value(f.value, f.line, "export.kafka.linger_ms", 0, 60000))
        k->linger_ms = static_cast<uint32_t>(*v);
    } else if (f.key == "client_id") {
      if (auto s = string_value(f, "export.kafka.client_id")) k->client_id = *s;
    } else if (f.key == "security_protocol") {
      one_of(f, "export.kafka.security_protocol", kProtocols, &k->security_protocol);
    } else if (f.key == "tls") {
      tls_line = f.line;
      static const std::vector<std::string> kTlsKeys = {"ca_file", "cert_file", "key_file"};
      for (const Entry& t : entries(f.value, f.line, "export.kafka.tls", &kTlsKeys)) {
        if (t.value.IsNull()) continue;
        auto s = string_value(t, "export.kafka.tls." + t.key);
        if (!s) continue;
        if (s->empty() || (*s)[0] != '/') {
          error(line_of(t.value, t.line), "export.kafka.tls." + t.key + " must be an absolute path, got " + quoted(*s));
          continue;
        }
        (t.key == "ca_file" ? k->tls_ca_file : t.key == "cert_file" ? k->tls_cert_file : k->tls_key_file) = *s;
      }
    } else if (f.key == "sasl") {
      sasl_line = f.line;
      static const std::vector<std::string> kSaslKeys = {"mechanism", "username", "password_file", "password"};
      for (const Entry& t : entries(f.value, f.line, "export.kafka.sasl", &kSaslKeys)) {
        if (t.value.IsNull()) continue;
        const int tline = line_of(t.value, t.line);
        if (t.key == "mechanism") {
          one_of(t, "export.kafka.sasl.mechanism", kMechanisms, &k->sasl_mechanism);
        } else if (t.key == "username") {
          if (auto s = string_value(t, "export.kafka.sasl.username")) k->sasl_username = *s;
        } else if (t.key == "password_file") {
          auto s = string_value(t, "export.kafka.sasl.password_file");
          if (s && (s->empty() || (*s)[0] != '/'))
            error(tline, "export.kafka.sasl.password_file must be an absolute path, got " + quoted(*s));
          else if (s)
            k->sasl_password_file = *s;
        } else {
          error(t.line, "export.kafka.sasl.password: a password is never written in the config; give "
                        "password_file, a file only root can read that holds it");
        }
      }
    }
  }
  if (!brokers_given && e.value.IsMap()) error(e.line, "export.kafka needs brokers (a list of HOST:PORT)");
  const bool sasl_protocol = k->security_protocol.rfind("sasl_", 0) == 0;
  const bool tls_protocol = k->security_protocol == "ssl" || k->security_protocol == "sasl_ssl";
  if (sasl_protocol && (k->sasl_mechanism.empty() || k->sasl_username.empty() || k->sasl_password_file.empty()))
    error(sasl_line ? sasl_line : e.line, "export.kafka.security_protocol " + k->security_protocol +
                                              " needs sasl.mechanism, sasl.username and sasl.password_file");
  if (!sasl_protocol && sasl_line)
    error(sasl_line, "export.kafka.sasl is used only with security_protocol sasl_plaintext or sasl_ssl");
  if (!tls_protocol && tls_line)
    error(tls_line, "export.kafka.tls is used only with security_protocol ssl or sasl_ssl");
  if (k->tls_cert_file.empty() != k->tls_key_file.empty())
    error(tls_line, "export.kafka.tls.cert_file and key_file come together (a client certificate and its key)");
}


std::vector<Prefix> ConfigParser::prefix_list(const Entry& e, const std::string& what,
                                              std::vector<int>* lines) {
  std::vector<Prefix> out;
  auto items = list_value(e, what);
  if (!items) return out;
  for (size_t i = 0; i < items->size(); ++i) {
    const YAML::Node& n = (*items)[i];
    const std::string item = what + "[" + std::to_string(i) + "]";
    const int line = line_of(n, line_of(e.value, e.line));
    if (!n.IsScalar()) {
      error(line, item + " must be a prefix such as 10.0.0.0/8, got " + type_name(n));
      continue;
    }
    std::string why;
    if (auto p = parse_prefix(n.Scalar(), &why)) {
      out.push_back(*p);
      if (lines) lines->push_back(line);
    } else {
      error(line, item + ": malformed prefix " + quoted(n.Scalar()) + ": " + why);
    }
  }
  return out;
}

std::vector<uint32_t> ConfigParser::asn_list(const Entry& e, const std::string& what,
                                             std::vector<int>* lines) {
  std::vector<uint32_t> out;
  auto items = list_value(e, what);
  if (!items) return out;
  for (size_t i = 0; i < items->size(); ++i) {
    const YAML::Node& n = (*items)[i];
    const int line = line_of(n, line_of(e.value, e.line));
    // AS 0 is reserved and means "unknown" in flow records, so it cannot be matched on.
    if (auto v = integer_value(n, line, what + "[" + std::to_string(i) + "]", 1, kMaxAsn)) {
      out.push_back(static_cast<uint32_t>(*v));
      if (lines) lines->push_back(line);
    }
  }
  return out;
}

void ConfigParser::parse_peer_classes(const Entry& e, std::vector<PeerClassSpec>* classes) {
  static const std::vector<std::string> kKeys = {"name", "prefixes", "asns"};
  auto items = list_value(e, "peer_classes");
  if (!items) return;
  for (size_t i = 0; i < items->size(); ++i) {
    const YAML::Node& n = (*items)[i];
    const std::string where = "peer_classes[" + std::to_string(i) + "]";
    PeerClassSpec spec;
    spec.line = line_of(n, line_of(e.value, e.line));
    if (!n.IsMap()) {
      error(spec.line, where + " must be a mapping with name and prefixes and/or asns, got " +
                           type_name(n));
      continue;
    }
    std::vector<int> prefix_lines, asn_lines;
    bool has_name = false;
    const size_t errors_before = errors_->size();
    for (const Entry& f : entries(n, spec.line, where, &kKeys)) {
      if (f.value.IsNull()) continue;
      if (f.key == "name") {
        has_name = true;
        auto s = string_value(f, where + ".name");
        if (!s) continue;
        if (s->empty()) {
          error(f.line, where + ".name must not be empty");
          continue;
        }
        spec.name = *s;
        auto [it, inserted] = peer_class_name_lines_.emplace(*s, line_of(f.value, f.line));
        if (!inserted) {
          error(line_of(f.value, f.line), "duplicate peer class name " + quoted(*s) +
                                              " (first defined at line " +
                                              std::to_string(it->second) + ")");
        }
      } else if (f.key == "prefixes") {
        spec.prefixes = prefix_list(f, where + ".prefixes", &prefix_lines);
      } else if (f.key == "asns") {
        spec.asns = asn_list(f, where + ".asns", &asn_lines);
      }
    }
    if (!has_name) error(spec.line, where + " has no name");
    // Only when nothing was wrong inside it: a class whose one prefix was
    // malformed has already been reported.
    if (spec.prefixes.empty() && spec.asns.empty() && errors_->size() == errors_before) {
      error(spec.line, where + " has neither prefixes nor asns, so no flow can match it");
    }
    classes->push_back(std::move(spec));
    peer_class_prefix_lines_.push_back(std::move(prefix_lines));
    peer_class_asn_lines_.push_back(std::move(asn_lines));
  }
}

void ConfigParser::parse_size_classes(const Entry& e, std::vector<uint64_t>* bounds) {
  auto items = list_value(e, "size_classes_bytes");
  if (!items) return;
  if (items->empty()) {
    error(line_of(e.value, e.line),
          "size_classes_bytes must list at least one boundary (e.g. [100000, 1000000, 3000000])");
    return;
  }
  std::vector<uint64_t> out;
  bool ok = true;
  for (size_t i = 0; i < items->size(); ++i) {
    const YAML::Node& n = (*items)[i];
    const int line = line_of(n, line_of(e.value, e.line));
    auto v = integer_value(n, line, "size_classes_bytes[" + std::to_string(i) + "]", 1, kMaxBytes);
    if (!v) {
      ok = false;
      continue;
    }
    if (!out.empty() && *v <= out.back()) {
      error(line, "size_classes_bytes must be strictly increasing: " + std::to_string(*v) +
                      " follows " + std::to_string(out.back()));
      ok = false;
    }
    out.push_back(*v);
  }
  if (ok) *bounds = std::move(out);
}

void ConfigParser::parse_cc_policy(const Entry& e, CcPolicy* policy) {
  static const std::vector<std::string> kKeys = {"app_override", "sysctl_guard", "rules"};
  for (const Entry& f : entries(e.value, e.line, "cc_policy", &kKeys)) {
    if (f.value.IsNull()) continue;
    const int vline = line_of(f.value, f.line);
    if (f.key == "app_override") {
      choice_value(f, "cc_policy.app_override",
                   {{"respect", AppOverride::kRespect}, {"enforce", AppOverride::kEnforce}}, &policy->app_override);
    } else if (f.key == "sysctl_guard") {
      choice_value(f, "cc_policy.sysctl_guard",
                   {{"observe", SysctlGuard::kObserve}, {"deny", SysctlGuard::kDeny}}, &policy->sysctl_guard);
    } else if (f.key == "rules") {
      auto items = list_value(f, "cc_policy.rules");
      if (!items) continue;
      std::map<std::string, int> names;
      for (size_t i = 0; i < items->size(); ++i) {
        const std::string where = "cc_policy.rules[" + std::to_string(i) + "]";
        const int line = line_of((*items)[i], vline);
        int name_line = line;
        auto rule = parse_rule((*items)[i], line, where, &name_line);
        if (!rule) continue;
        if (!rule->name.empty()) {
          auto [it, inserted] = names.emplace(rule->name, name_line);
          if (!inserted) {
            error(name_line, "duplicate rule name " + quoted(rule->name) +
                                  " (first defined at line " + std::to_string(it->second) + ")");
          }
        }
        policy->rules.push_back(std::move(*rule));
      }
    }
  }
}

std::optional<CcRule> ConfigParser::parse_rule(const YAML::Node& n, int line,
                                               const std::string& where, int* name_line) {
  static const std::vector<std::string> kKeys = {"name", "match", "cc", "experiment", "controller"};
  if (!n.IsMap()) {
    error(line, where + " must be a mapping with name, match and cc, experiment or controller, got " +
                    type_name(n));
    return std::nullopt;
  }
  CcRule rule;
  rule.line = line;
  bool has_name = false, has_cc = false, has_experiment = false, has_controller = false;
  for (const Entry& f : entries(n, line, where, &kKeys)) {
    if (f.value.IsNull()) continue;
    if (f.key == "name") {
      has_name = true;
      *name_line = line_of(f.value, f.line);
      if (auto s = string_value(f, where + ".name")) {
        if (s->empty()) {
          error(f.line, where + ".name must not be empty");
        } else {
          rule.name = *s;
        }
      }
    } else if (f.key == "match") {
      parse_match(f, where + ".match", &rule.match);
    } else if (f.key == "cc") {
      has_cc = true;
      if (auto s = string_value(f, where + ".cc")) {
        if (check_cc(*s, line_of(f.value, f.line), where + ".cc")) rule.cc = *s;
      }
    } else if (f.key == "experiment") {
      has_experiment = true;
      rule.experiment = parse_experiment(f, where + ".experiment");
    } else if (f.key == "controller") {
      has_controller = true;
      rule.controller = parse_controller(f, where + ".controller");
    }
  }
  if (!has_name) error(line, where + " has no name");
  const int given = int{has_cc} + int{has_experiment} + int{has_controller};
  if (given > 1) {
    error(line, where + " has more than one of cc, experiment and controller; give exactly one");
  } else if (given == 0) {
    error(line, where + " has none of cc, experiment and controller; give exactly one");
  }
  return rule;
}

void ConfigParser::parse_match(const Entry& e, const std::string& where, CcMatch* match) {
  static const std::vector<std::string> kKeys = {"peer_class", "asns", "prefixes", "lports"};
  for (const Entry& f : entries(e.value, e.line, where, &kKeys)) {
    if (f.value.IsNull()) continue;
    if (f.key == "peer_class") {
      if (auto s = string_value(f, where + ".peer_class")) {
        match->peer_class = *s;
        peer_class_refs_.push_back(
            PeerClassRef{*s, line_of(f.value, f.line), where + ".peer_class"});
      }
    } else if (f.key == "asns") {
      match->asns = asn_list(f, where + ".asns", nullptr);
    } else if (f.key == "prefixes") {
      match->prefixes = prefix_list(f, where + ".prefixes", nullptr);
    } else if (f.key == "lports") {
      auto items = list_value(f, where + ".lports");
      if (!items) continue;
      for (size_t i = 0; i < items->size(); ++i) {
        const YAML::Node& p = (*items)[i];
        if (auto v = integer_value(p, line_of(p, line_of(f.value, f.line)),
                                   where + ".lports[" + std::to_string(i) + "]", 1, 65535)) {
          match->lports.push_back(static_cast<uint16_t>(*v));
        }
      }
    }
  }
}

std::optional<ExperimentSpec> ConfigParser::parse_experiment(const Entry& e,
                                                             const std::string& where) {
  static const std::vector<std::string> kKeys = {"name", "arms"};
  ExperimentSpec spec;
  const int line = line_of(e.value, e.line);
  bool ok = true, has_name = false, has_arms = false;
  if (!e.value.IsMap()) {
    error(line, where + " must be a mapping { name: ..., arms: { cc: weight, ... } }, got " +
                    type_name(e.value));
    return std::nullopt;
  }
  for (const Entry& f : entries(e.value, line, where, &kKeys)) {
    if (f.value.IsNull()) continue;
    if (f.key == "name") {
      has_name = true;
      if (auto s = string_value(f, where + ".name")) {
        if (s->empty()) {
          error(f.line, where + ".name must not be empty");
          ok = false;
        } else if (*s == kControllerExperiment) {
          // Records name it for the flows a controller assigned.
          error(f.line, where + ".name \"" + *s + "\" is reserved for controller rules");
          ok = false;
        }
        spec.name = *s;
      } else {
        ok = false;
      }
    } else if (f.key == "arms") {
      has_arms = true;
      const int arms_line = line_of(f.value, f.line);
      const std::string arms_where = where + ".arms";
      if (!f.value.IsMap()) {
        error(arms_line, arms_where + " must be a mapping of congestion control to weight, "
                                      "e.g. { bbr: 50, cubic: 50 }, got " + type_name(f.value));
        ok = false;
        continue;
      }
      // Any key is allowed (each is a CC name); entries() still rejects
      // duplicates, which leaves fewer arms than written.
      const size_t arms_written = f.value.size();
      const std::vector<Entry> arms = entries(f.value, arms_line, arms_where, nullptr);
      bool weights_ok = arms.size() == arms_written;
      uint64_t sum = 0;
      for (const Entry& arm : arms) {
        const std::string arm_where = arms_where + "." + arm.key;
        const bool cc_ok = check_cc(arm.key, arm.line, arm_where);
        auto w = integer_value(arm.value, arm.line, arm_where + " weight", 0, 100);
        if (w) sum += *w;
        weights_ok = weights_ok && w;
        ok = ok && cc_ok && w;
        if (cc_ok && w) spec.arms.emplace_back(arm.key, static_cast<uint32_t>(*w));
      }
      if (!weights_ok) ok = false;
      if (arms_written < 2) {
        error(arms_line, arms_where + " needs at least 2 arms, has " +
                             std::to_string(arms_written));
        ok = false;
      } else if (weights_ok && sum != 100) {
        error(arms_line, arms_where + " weights sum to " + std::to_string(sum) +
                             ", must sum to 100");
        ok = false;
      }
    }
  }
  if (!has_name) {
    error(e.line, where + " has no name");
    ok = false;
  }
  if (!has_arms) {
    error(e.line, where + " has no arms (e.g. arms: { bbr: 50, cubic: 50 })");
    ok = false;
  }
  if (!ok) return std::nullopt;
  return spec;
}

std::optional<double> ConfigParser::number_value(const YAML::Node& v, int line, const std::string& what,
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
                  (v.IsScalar() ? quoted(v.Scalar()) : type_name(v)));
  return std::nullopt;
}

std::optional<ControllerSpec> ConfigParser::parse_controller(const Entry& e, const std::string& where) {
  static const std::vector<std::string> kKeys = {
      "arms", "cohort", "control_percent", "min_transfers", "interval_s", "fdr", "ramp_step_percent",
      "max_cohorts", "guards"};
  static const std::vector<std::string> kGuardKeys = {"retrans_share_increase", "rtt_inflation_increase"};
  ControllerSpec spec;
  const int line = line_of(e.value, e.line);
  if (!e.value.IsMap()) {
    error(line, where + " must be a mapping { arms: [bbr, cubic], cohort: asn, ... }, got " + type_name(e.value));
    return std::nullopt;
  }
  const size_t errors_before = errors_->size() + unlisted_errors_;
  bool has_arms = false;
  for (const Entry& f : entries(e.value, line, where, &kKeys)) {
    if (f.value.IsNull()) continue;
    const std::string what = where + "." + f.key;
    if (f.key == "arms") {
      has_arms = true;
      auto items = list_value(f, what);
      if (!items) continue;
      for (size_t i = 0; i < items->size(); ++i) {
        const YAML::Node& a = (*items)[i];
        const int a_line = line_of(a, line_of(f.value, f.line));
        const std::string a_where = what + "[" + std::to_string(i) + "]";
        if (!a.IsScalar()) {
          error(a_line, a_where + " must be a congestion control name, got " + type_name(a));
          continue;
        }
        if (check_cc(a.Scalar(), a_line, a_where)) spec.arms.push_back(a.Scalar());
      }
      if (items->size() < 2 || items->size() > kMaxControllerArms)
        error(line_of(f.value, f.line), what + " needs 2 to " + std::to_string(kMaxControllerArms) + " arms, has " +
                                            std::to_string(items->size()));
    } else if (f.key == "cohort") {
      if (auto s = string_value(f, what)) {
        if (*s == "asn") {
          spec.cohort = CohortKind::kAsn;
        } else if (*s == "peer_class") {
          spec.cohort = CohortKind::kPeerClass;
        } else {
          error(f.line, what + " must be asn or peer_class, got " + quoted(*s));
        }
      }
    } else if (f.key == "control_percent") {
      if (auto v = integer_value(f.value, f.line, what, 1, 100)) spec.control_percent = static_cast<uint32_t>(*v);
    } else if (f.key == "min_transfers") {
      if (auto v = integer_value(f.value, f.line, what, 2, 100000000)) spec.min_transfers = *v;
    } else if (f.key == "interval_s") {
      if (auto v = integer_value(f.value, f.line, what, 1, 86400)) spec.interval_s = static_cast<uint32_t>(*v);
    } else if (f.key == "fdr") {
      if (auto v = number_value(f.value, f.line, what, 1e-6, 0.5)) spec.fdr = *v;
    } else if (f.key == "ramp_step_percent") {
      if (auto v = integer_value(f.value, f.line, what, 1, 100)) spec.ramp_step_percent = static_cast<uint32_t>(*v);
    } else if (f.key == "max_cohorts") {
      if (auto v = integer_value(f.value, f.line, what, 0, 1000)) spec.max_cohorts = static_cast<uint32_t>(*v);
    } else if (f.key == "guards") {
      for (const Entry& g : entries(f.value, line_of(f.value, f.line), what, &kGuardKeys)) {
        if (g.value.IsNull()) continue;
        if (g.key == "retrans_share_increase") {
          if (auto v = number_value(g.value, g.line, what + "." + g.key, 0, 1)) spec.retrans_share_increase = *v;
        } else if (auto v = number_value(g.value, g.line, what + "." + g.key, 0, 100)) {
          spec.rtt_inflation_increase = *v;
        }
      }
    }
  }
  if (!has_arms) error(line, where + " has no arms (e.g. arms: [bbr, cubic])");
  if (errors_->size() + unlisted_errors_ != errors_before) return std::nullopt;
  return spec;
}

void ConfigParser::check_peer_class_overlaps(const Config& c) {
  // With the same prefix or ASN in two classes, which class a flow gets would
  // depend on file order, not on "longest prefix wins".
  std::map<std::string, std::pair<std::string, int>> prefix_owner;
  std::map<uint32_t, std::pair<std::string, int>> asn_owner;
  for (size_t i = 0; i < c.peer_classes.size(); ++i) {
    const PeerClassSpec& pc = c.peer_classes[i];
    // A class without a valid name (reported already) is named by position.
    const std::string label = pc.name.empty() ? "peer_classes[" + std::to_string(i) + "]"
                                              : "peer class " + quoted(pc.name);
    for (size_t j = 0; j < pc.prefixes.size(); ++j) {
      const int line = peer_class_prefix_lines_[i][j];
      const std::string text = pc.prefixes[j].to_string();
      auto [it, inserted] = prefix_owner.emplace(text, std::make_pair(label, line));
      if (!inserted) {
        error(line, "prefix " + text + " of " + label + " is already in " + it->second.first +
                        " (line " + std::to_string(it->second.second) + ")");
      }
    }
    for (size_t j = 0; j < pc.asns.size(); ++j) {
      const int line = peer_class_asn_lines_[i][j];
      auto [it, inserted] = asn_owner.emplace(pc.asns[j], std::make_pair(label, line));
      if (!inserted) {
        error(line, "ASN " + std::to_string(pc.asns[j]) + " of " + label + " is already in " +
                        it->second.first + " (line " + std::to_string(it->second.second) + ")");
      }
    }
  }
}

void ConfigParser::check_peer_class_references(const Config& c) {
  std::vector<std::string> known;
  for (const auto& pc : c.peer_classes) known.push_back(pc.name);
  known.push_back(c.default_peer_class);
  for (const auto& ref : peer_class_refs_) {
    if (std::find(known.begin(), known.end(), ref.name) == known.end()) {
      error(ref.line, ref.where + " " + quoted(ref.name) +
                          " is not a peer class (defined: " + join(known, ", ") + ")");
    }
  }
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
         min_transfers == o.min_transfers && interval_s == o.interval_s && fdr == o.fdr &&
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
      return fail(quoted(text) + " is not [IPV6]:PORT, e.g. [::1]:9810");
    }
    host = text.substr(1, close - 1);
    port = text.substr(close + 2);
    auto addr = IpAddr::parse(host);
    if (!addr || addr->family != 6) {
      return fail(quoted(host) + " in brackets is not an IPv6 address");
    }
  } else {
    const size_t colon = text.rfind(':');
    if (colon == std::string::npos) {
      return fail(quoted(text) + " is not HOST:PORT, e.g. 127.0.0.1:9810 or [::1]:9810");
    }
    host = text.substr(0, colon);
    port = text.substr(colon + 1);
    if (host.find(':') != std::string::npos) {
      return fail("IPv6 address " + quoted(host) + " must be in brackets, e.g. [::1]:9810");
    }
    auto addr = IpAddr::parse(host);
    if (!addr) {
      return fail("host " + quoted(host) +
                  " is not an IP address (host names are not resolved; use e.g. 127.0.0.1)");
    }
  }
  ListenAddress out;
  out.addr = *IpAddr::parse(host);
  if (port.empty() || port.size() > 5 ||
      !std::all_of(port.begin(), port.end(), [](char c) { return c >= '0' && c <= '9'; })) {
    return fail("port " + quoted(port) + " is not a number in " + std::to_string(min_port) + "..65535");
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
  ConfigParser parser(file_name, available_cc, errors);
  Config c = parser.parse(yaml_text);
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
                                    ? "transfer_sampling_rate \"" + v + "\" is not a number"
                                    : transfer_sampling_rate_problem(rate);
    if (!problem.empty())
      errors->push_back(ConfigError{"--transfer-sampling-rate", 0, problem});
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
