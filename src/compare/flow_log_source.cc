#include "compare/flow_log_source.h"

#include <errno.h>
#include <string.h>
#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <charconv>
#include <cstdint>
#include <limits>
#include <optional>
#include <string_view>
#include <type_traits>

#include <nlohmann/json.hpp>

#include "measure/size_class.h"
#include "record/flow_record.h"
#include "record/record_fields.h"
#include "record/transfer_record.h"
#include "record/transfer_sampling.h"

namespace tcpscope {

namespace {

// ---------------------------------------------------------------------------
// Two ways to read a record's fields: a fast scanner for the flat objects
// the daemon writes (no DOM, no allocation per field), and nlohmann for
// anything else. Both answer the same questions the same way.

// Text of a JSON value as selections compare it: strings as they are,
// numbers in their JSON spelling, true/false, null.
std::string field_text(const nlohmann::json& v) {
  switch (v.type()) {
    case nlohmann::json::value_t::string: return v.get<std::string>();
    case nlohmann::json::value_t::number_integer: return std::to_string(v.get<int64_t>());
    case nlohmann::json::value_t::number_unsigned: return std::to_string(v.get<uint64_t>());
    case nlohmann::json::value_t::boolean: return v.get<bool>() ? "true" : "false";
    case nlohmann::json::value_t::null: return "null";
    default: return v.dump();
  }
}

// A number as the metrics read it: integers exactly, non-negative clamp.
uint64_t to_uint(const nlohmann::json& v) {
  if (v.is_number_unsigned()) return v.get<uint64_t>();
  if (v.is_number_integer()) return v.get<int64_t>() > 0 ? static_cast<uint64_t>(v.get<int64_t>()) : 0;
  if (v.is_number_float()) return v.get<double>() > 0 ? static_cast<uint64_t>(v.get<double>()) : 0;
  return 0;
}

int64_t to_int(const nlohmann::json& v) {
  if (v.is_number_unsigned())
    return v.get<uint64_t>() > static_cast<uint64_t>(INT64_MAX) ? INT64_MAX : static_cast<int64_t>(v.get<uint64_t>());
  if (v.is_number_integer()) return v.get<int64_t>();
  if (v.is_number_float()) return static_cast<int64_t>(v.get<double>());
  return 0;
}

class JsonAccess {
 public:
  explicit JsonAccess(const nlohmann::json& rec) : rec_(rec) {}
  std::optional<std::string> text(const std::string& key) const {
    auto it = rec_.find(key);
    if (it == rec_.end()) return std::nullopt;
    return field_text(*it);
  }
  bool string_is(const char* key, const char* value) const {
    auto it = rec_.find(key);
    return it != rec_.end() && it->is_string() && it->get_ref<const std::string&>() == value;
  }
  bool is_true(const char* key) const {
    auto it = rec_.find(key);
    return it != rec_.end() && it->is_boolean() && it->get<bool>();
  }
  uint64_t uint(const char* key) const {
    auto it = rec_.find(key);
    return it == rec_.end() ? 0 : to_uint(*it);
  }
  int64_t int64(const char* key) const {
    auto it = rec_.find(key);
    return it == rec_.end() ? 0 : to_int(*it);
  }

 private:
  const nlohmann::json& rec_;
};

}  // namespace

// One flat JSON object as (key, raw value) slices into the line.
class FlatRecord {
 public:
  enum class Kind { kString, kNumber, kTrue, kFalse, kNull };
  struct Value {
    Kind kind;
    std::string_view raw;  // strings: between the quotes, escapes not decoded
    bool escaped = false;
  };

  // False when the line is not one flat object of plain keys (nesting,
  // escaped keys, bad syntax): the caller then uses the full parser.
  bool parse(std::string_view s) {
    fields_.clear();
    size_t i = skip_ws(s, 0);
    if (i >= s.size() || s[i] != '{') return false;
    i = skip_ws(s, i + 1);
    if (i < s.size() && s[i] == '}') return skip_ws(s, i + 1) == s.size();
    while (true) {
      if (i >= s.size() || s[i] != '"') return false;
      const size_t kend = s.find('"', i + 1);
      if (kend == std::string_view::npos) return false;
      const std::string_view key = s.substr(i + 1, kend - i - 1);
      if (key.find('\\') != std::string_view::npos) return false;
      i = skip_ws(s, kend + 1);
      if (i >= s.size() || s[i] != ':') return false;
      i = skip_ws(s, i + 1);
      if (i >= s.size()) return false;
      Value v{Kind::kNull, {}, false};
      const char c = s[i];
      if (c == '"') {
        size_t j = i + 1;
        while (j < s.size() && s[j] != '"') {
          if (static_cast<unsigned char>(s[j]) < 0x20) return false;
          if (s[j] == '\\') {
            v.escaped = true;
            ++j;
          }
          ++j;
        }
        if (j >= s.size()) return false;
        v.kind = Kind::kString;
        v.raw = s.substr(i + 1, j - i - 1);
        i = j + 1;
      } else if (c == '-' || (c >= '0' && c <= '9')) {
        size_t j = i;
        while (j < s.size() && (std::isdigit(static_cast<unsigned char>(s[j])) || s[j] == '-' || s[j] == '+' ||
                                s[j] == '.' || s[j] == 'e' || s[j] == 'E'))
          ++j;
        v.kind = Kind::kNumber;
        v.raw = s.substr(i, j - i);
        if (!valid_number(v.raw)) return false;
        i = j;
      } else if (s.compare(i, 4, "true") == 0) {
        v.kind = Kind::kTrue;
        i += 4;
      } else if (s.compare(i, 5, "false") == 0) {
        v.kind = Kind::kFalse;
        i += 5;
      } else if (s.compare(i, 4, "null") == 0) {
        v.kind = Kind::kNull;
        i += 4;
      } else {
        return false;  // nested object or array, or garbage
      }
      // A repeated key: nlohmann keeps the last one, and so does find().
      fields_.emplace_back(key, v);
      i = skip_ws(s, i);
      if (i < s.size() && s[i] == ',') {
        i = skip_ws(s, i + 1);
        continue;
      }
      if (i < s.size() && s[i] == '}') return skip_ws(s, i + 1) == s.size();
      return false;
    }
  }

  const Value* find(std::string_view key) const {
    for (size_t k = fields_.size(); k-- > 0;)
      if (fields_[k].first == key) return &fields_[k].second;
    return nullptr;
  }

  std::optional<std::string> text(const std::string& key) const {
    const Value* v = find(key);
    if (!v) return std::nullopt;
    switch (v->kind) {
      case Kind::kString: return v->escaped ? decode(v->raw) : std::string(v->raw);
      case Kind::kNumber:
        if (plain_integer(v->raw)) return std::string(v->raw);
        return field_text(nlohmann::json::parse(v->raw));
      case Kind::kTrue: return "true";
      case Kind::kFalse: return "false";
      case Kind::kNull: return "null";
    }
    return std::nullopt;
  }
  bool string_is(const char* key, const char* value) const {
    const Value* v = find(key);
    if (!v || v->kind != Kind::kString) return false;
    return v->escaped ? decode(v->raw) == value : v->raw == value;
  }
  bool is_true(const char* key) const {
    const Value* v = find(key);
    return v && v->kind == Kind::kTrue;
  }
  uint64_t uint(const char* key) const {
    const Value* v = find(key);
    if (!v || v->kind != Kind::kNumber) return 0;
    if (plain_integer(v->raw) && v->raw[0] != '-') {
      uint64_t out = 0;
      auto res = std::from_chars(v->raw.data(), v->raw.data() + v->raw.size(), out);
      if (res.ec == std::errc()) return out;
    }
    return to_uint(nlohmann::json::parse(v->raw));
  }
  int64_t int64(const char* key) const {
    const Value* v = find(key);
    if (!v || v->kind != Kind::kNumber) return 0;
    if (plain_integer(v->raw)) {
      int64_t out = 0;
      auto res = std::from_chars(v->raw.data(), v->raw.data() + v->raw.size(), out);
      if (res.ec == std::errc()) return out;
    }
    return to_int(nlohmann::json::parse(v->raw));
  }

 private:
  static size_t skip_ws(std::string_view s, size_t i) {
    while (i < s.size() && (s[i] == ' ' || s[i] == '\t' || s[i] == '\r' || s[i] == '\n')) ++i;
    return i;
  }
  // -?(0|[1-9][0-9]*)(.[0-9]+)?([eE][+-]?[0-9]+)?
  static bool valid_number(std::string_view r) {
    size_t i = 0;
    if (i < r.size() && r[i] == '-') ++i;
    if (i >= r.size() || !std::isdigit(static_cast<unsigned char>(r[i]))) return false;
    if (r[i] == '0') {
      ++i;
    } else {
      while (i < r.size() && std::isdigit(static_cast<unsigned char>(r[i]))) ++i;
    }
    if (i < r.size() && r[i] == '.') {
      ++i;
      if (i >= r.size() || !std::isdigit(static_cast<unsigned char>(r[i]))) return false;
      while (i < r.size() && std::isdigit(static_cast<unsigned char>(r[i]))) ++i;
    }
    if (i < r.size() && (r[i] == 'e' || r[i] == 'E')) {
      ++i;
      if (i < r.size() && (r[i] == '+' || r[i] == '-')) ++i;
      if (i >= r.size() || !std::isdigit(static_cast<unsigned char>(r[i]))) return false;
      while (i < r.size() && std::isdigit(static_cast<unsigned char>(r[i]))) ++i;
    }
    return i == r.size();
  }
  // An integer nlohmann would print back unchanged ("-0" prints as 0; more
  // than 19 digits may not fit 64 bits).
  static bool plain_integer(std::string_view r) {
    return r.find_first_of(".eE") == std::string_view::npos && r != "-0" && r.size() <= 19;
  }
  static std::string decode(std::string_view raw) {
    const nlohmann::json j = nlohmann::json::parse("\"" + std::string(raw) + "\"", nullptr, false);
    return j.is_string() ? j.get<std::string>() : std::string(raw);
  }

  std::vector<std::pair<std::string_view, Value>> fields_;
};

FlowLogCollector::FlowLogCollector(const CompareOptions& options, const Selection& a, const Selection& b)
    : options_(options),
      a_(a),
      b_(b),
      size_class_names_(size_class_names(options.metric_options.size_classes_bytes)),
      flat_(std::make_unique<FlatRecord>()) {}

FlowLogCollector::~FlowLogCollector() = default;

namespace {

// Which unit a line is a record of: "kind": "transfer", or a flow ("kind":
// "flow", or no kind: logs written before transfers existed). nullopt for a
// kind this version does not know.
template <class Access>
std::optional<SampleUnit> record_unit(const Access& rec) {
  if (rec.string_is(record_key::kind, "transfer")) return SampleUnit::kTransfer;
  if (rec.string_is(record_key::kind, "flow") || !rec.text(record_key::kind)) return SampleUnit::kFlow;
  return std::nullopt;
}

uint32_t to_u32(uint64_t v) { return static_cast<uint32_t>(std::min<uint64_t>(v, UINT32_MAX)); }

// A line's numeric field and the record member of the same meaning.
template <class Record, class T>
struct LineField {
  const char* name;
  T Record::*member;
};
template <class Record, class T>
LineField<Record, T> field(const char* name, T Record::*member) {
  return {name, member};
}

// Each field of the line into its member, clamped to the member's width (a
// 32-bit count in the record may be written wider in a line).
template <class Access, class Record, class... T>
void read_fields(const Access& rec, Record* r, LineField<Record, T>... fields) {
  const auto read = [&](auto f) {
    using Member = std::remove_reference_t<decltype(r->*f.member)>;
    if constexpr (std::is_same_v<Member, int64_t>)
      r->*f.member = rec.int64(f.name);
    else
      r->*f.member = static_cast<Member>(std::min<uint64_t>(rec.uint(f.name), std::numeric_limits<Member>::max()));
  };
  (read(fields), ...);
}

// Through the records the daemon has, so that what counts for a metric
// (measure/measure.h) is decided from the same fields as there: a line's
// fields into the record's, and nothing more.
template <class Access>
MetricInputs flow_inputs(const Access& rec) {
  FlowRecord f;
  // Any other outcome is not one that did its job.
  namespace key = record_key::flow;
  f.outcome = rec.string_is(key::outcome, "ok") ? Outcome::kOk : Outcome::kError;
  f.partial = rec.is_true(key::partial);
  read_fields(rec, &f, field(key::bytes_acked, &FlowRecord::bytes_acked),
              field(key::bytes_received, &FlowRecord::bytes_received), field(key::fct_us, &FlowRecord::fct_us),
              field(key::srtt_us, &FlowRecord::srtt_us), field(key::retrans_segs, &FlowRecord::retrans_segs),
              field(key::segs_out, &FlowRecord::segs_out));
  return metric_inputs(f);
}

template <class Access>
MetricInputs transfer_inputs(const Access& rec) {
  TransferRecord t;
  // Anything but "send" is not data this host sent: no throughput sample.
  namespace key = record_key::transfer;
  t.direction = rec.string_is(key::direction, "send") ? TransferDirection::kSend : TransferDirection::kRecv;
  read_fields(rec, &t, field(key::xfer_us, &TransferRecord::xfer_us), field(key::bytes, &TransferRecord::bytes),
              field(key::srtt_us, &TransferRecord::srtt_us), field(key::retrans_segs, &TransferRecord::retrans_segs),
              field(key::rwnd_limited_us, &TransferRecord::rwnd_limited_us));
  return metric_inputs(t);
}

}  // namespace

template <class Access>
void FlowLogCollector::add_record(const Access& rec) {
  const std::optional<SampleUnit> unit = record_unit(rec);
  if (unit != options_.unit) {
    ++(unit ? scan_.other_unit : scan_.unknown_kind);
    return;
  }
  ++scan_.records;
  const MetricInputs in = *unit == SampleUnit::kTransfer ? transfer_inputs(rec) : flow_inputs(rec);
  const std::optional<double> value = metric_value(options_.metric, in, options_.metric_options);
  if (!value) return;
  const uint32_t sc = size_class_index(in.bytes, options_.metric_options.size_classes_bytes);
  const std::string& sc_name = sc < size_class_names_.size() ? size_class_names_[sc] : unknown_;
  auto get = [&](const std::string& field) -> std::optional<std::string> {
    if (field == "size_class") return sc_name;
    return rec.text(field);
  };
  const bool in_a = a_.matches(get);
  const bool in_b = b_.matches(get);
  if (!in_a && !in_b) return;
  std::string group = "all";
  if (options_.by != "all") group = get(options_.by).value_or("(none)");
  Arms& arms = slots_[{group, split_by_size_class(options_.metric) ? sc : 0}];
  const bool transfer = *unit == SampleUnit::kTransfer;
  uint8_t level = 0;
  if (transfer) {
    const uint32_t rate = to_u32(std::max<uint64_t>(rec.uint(record_key::transfer::sampling_rate), 1));
    scan_.min_sampling_rate = scan_.min_sampling_rate ? std::min(scan_.min_sampling_rate, rate) : rate;
    scan_.max_sampling_rate = std::max(scan_.max_sampling_rate, rate);
    level = static_cast<uint8_t>(sampling_level(static_cast<uint16_t>(rec.uint(record_key::transfer::lport)),
                                                 static_cast<uint16_t>(rec.uint(record_key::transfer::rport))));
  }
  if (in_a) {
    arms.a.push_back(*value);
    if (transfer) arms.a_level.push_back(level);
    ++scan_.matched_a;
  }
  if (in_b) {
    arms.b.push_back(*value);
    if (transfer) arms.b_level.push_back(level);
    ++scan_.matched_b;
  }
  if (in_a && in_b) ++scan_.matched_both;
}

void FlowLogCollector::add_line(std::string_view line) {
  if (line.find_first_not_of(" \t\r") == std::string_view::npos) return;
  ++scan_.lines;
  if (flat_->parse(line)) {
    add_record(*flat_);
    return;
  }
  const nlohmann::json rec = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
  if (!rec.is_object()) {
    ++scan_.malformed;
    return;
  }
  add_record(JsonAccess(rec));
}

namespace {

// Keeps the values whose flow the sampling rate 2^min_level keeps.
uint64_t keep_level(int min_level, std::vector<double>* values, const std::vector<uint8_t>& levels) {
  size_t kept = 0;
  for (size_t i = 0; i < values->size(); ++i)
    if (levels[i] >= min_level) (*values)[kept++] = (*values)[i];
  const uint64_t dropped = values->size() - kept;
  values->resize(kept);
  return dropped;
}

}  // namespace

FlowLogScan FlowLogCollector::finish() {
  FlowLogScan out = std::move(scan_);
  scan_ = FlowLogScan{};
  const bool sized = split_by_size_class(options_.metric);
  if (out.max_sampling_rate > out.min_sampling_rate) {
    const int level = 31 - __builtin_clz(out.max_sampling_rate);
    for (auto& [key, arms] : slots_) {
      const uint64_t a = keep_level(level, &arms.a, arms.a_level), b = keep_level(level, &arms.b, arms.b_level);
      out.matched_a -= a;
      out.matched_b -= b;
      out.thinned += a + b;
    }
  }
  for (auto& [key, arms] : slots_) {
    if (arms.a.empty() && arms.b.empty()) continue;  // every value thinned out
    GroupSamples g;
    g.group = key.first;
    if (sized) {
      g.size_class = key.second < size_class_names_.size() ? size_class_names_[key.second] : "?";
      g.size_class_order = key.second;
    }
    g.a = ArmDistribution::exact(std::move(arms.a));
    g.b = ArmDistribution::exact(std::move(arms.b));
    out.groups.push_back(std::move(g));
  }
  slots_.clear();
  return out;
}

bool scan_flow_log(const std::string& path, const CompareOptions& options, const Selection& a,
                   const Selection& b, FlowLogScan* out, std::string* error) {
  // zlib reads gzip and plain files alike.
  gzFile gz;
  errno = 0;
  if (path == "-") {
    int fd = dup(STDIN_FILENO);
    gz = fd < 0 ? nullptr : gzdopen(fd, "rb");
  } else {
    gz = gzopen(path.c_str(), "rb");
  }
  if (!gz) {
    *error = path + ": " + (errno ? strerror(errno) : "cannot open");
    return false;
  }
  gzbuffer(gz, 1 << 17);
  FlowLogCollector collector(options, a, b);
  std::string pending;
  char buf[1 << 16];
  while (true) {
    const int n = gzread(gz, buf, sizeof(buf));
    if (n < 0) {
      int errnum = 0;
      const char* msg = gzerror(gz, &errnum);
      *error = path + ": " + (errnum == Z_ERRNO ? strerror(errno) : msg);
      gzclose(gz);
      return false;
    }
    if (n == 0) break;
    pending.append(buf, static_cast<size_t>(n));
    size_t start = 0;
    for (size_t nl; (nl = pending.find('\n', start)) != std::string::npos; start = nl + 1)
      collector.add_line(std::string_view(pending).substr(start, nl - start));
    pending.erase(0, start);
  }
  // A truncated gzip stream (a log being compressed right now) ends early
  // without an error from gzread; gzclose says so with Z_BUF_ERROR, and the
  // lines read so far are still good.
  const int rc = gzclose(gz);
  if (!pending.empty()) collector.add_line(pending);
  if (rc != Z_OK && rc != Z_BUF_ERROR) {
    *error = path + ": read error (zlib " + std::to_string(rc) + ")";
    return false;
  }
  *out = collector.finish();
  out->truncated = rc == Z_BUF_ERROR;
  return true;
}

namespace {

bool collect_from_flow_log(const std::string& path, const MetricOptions& metric_options,
                           const CompareOptions& options, const Selection& a, const Selection& b,
                           CompareSamples* out, std::string* error) {
  CompareOptions o = options;
  o.metric_options = metric_options;
  FlowLogScan scan;
  if (!scan_flow_log(path, o, a, b, &scan, error)) return false;
  CompareSamples s;
  s.groups = std::move(scan.groups);
  s.metric_options = metric_options;
  s.size_classes = size_class_names(metric_options.size_classes_bytes);
  const std::string unit = to_string(o.unit), units = unit_plural(o.unit);
  s.notes.push_back("flow log: " + std::to_string(scan.lines) + " lines read, " + std::to_string(scan.records) + " " +
                    unit + " records among them; " + std::to_string(scan.matched_a) + " " + units + " in A and " +
                    std::to_string(scan.matched_b) + " in B have a value for " + to_string(o.metric) + ".");
  if (scan.records == 0 && scan.other_unit > 0)
    s.notes.push_back(o.unit == SampleUnit::kTransfer
                          ? "warning: the log has flow records but no transfer records (written with "
                            "flow_log_transfers: false, or before tcpscope recorded transfers): compare its flows "
                            "with --unit flow."
                          : "warning: the log has transfer records but no flow records: compare its transfers "
                            "with --unit transfer.");
  if (scan.max_sampling_rate > 1)
    s.notes.push_back(
        scan.max_sampling_rate == scan.min_sampling_rate
            ? "transfer lines of one flow in " + std::to_string(scan.max_sampling_rate) +
                  " (sampling_rate): the quantiles stand for every transfer, the counts are the sample's."
            : "transfer lines of sampling rates " + std::to_string(scan.min_sampling_rate) + " to " +
                  std::to_string(scan.max_sampling_rate) + ": only the flows rate " +
                  std::to_string(scan.max_sampling_rate) + " keeps count, " + std::to_string(scan.thinned) +
                  " values of the others left out, so every flow weighs the same.");
  if (scan.unknown_kind)
    s.notes.push_back(std::to_string(scan.unknown_kind) + " lines of a kind other than flow or transfer skipped.");
  if (scan.malformed)
    s.notes.push_back(std::to_string(scan.malformed) + " malformed lines skipped (not a JSON object).");
  if (scan.truncated)
    s.notes.push_back("warning: " + path + " ends in the middle of its gzip stream; the records before "
                      "that point were used.");
  if (scan.matched_both)
    s.notes.push_back("warning: " + std::to_string(scan.matched_both) + " " + units +
                      " match both A and B and count in both arms.");
  *out = std::move(s);
  return true;
}

}  // namespace

FlowLogSource::FlowLogSource(const std::string& path, const MetricOptions& metric_options)
    : FunctionSource("flows " + path, [path, metric_options](const CompareOptions& options, const Selection& a,
                                                             const Selection& b, CompareSamples* out,
                                                             std::string* error) {
        return collect_from_flow_log(path, metric_options, options, a, b, out, error);
      }) {}

}  // namespace tcpscope
