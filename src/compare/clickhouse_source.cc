#include "compare/clickhouse_source.h"

#include <algorithm>
#include <cstdio>
#include <map>
#include <utility>

#include <nlohmann/json.hpp>

#include "measure/flow_sketch.h"
#include "measure/size_class.h"
#include "net/http_client.h"
#include "record/record_fields.h"
#include "text/url_query.h"

namespace tcpscope {

namespace {

// Flow-log fields written as JSON true/false; ClickHouse before Bool keeps
// them as UInt8, and a selection names them as text "true"/"false".
bool is_boolean_field(const std::string& name) {
  const auto boolean_in = [&name](const auto& table) {
    for (const RecordField& f : table)
      if (f.key == name) return f.proto_type == "bool";
    return false;
  };
  return boolean_in(kFlowFields) || boolean_in(kTransferFields);
}

std::string sql_string(const std::string& s) {
  std::string out = "'";
  for (char c : s) {
    if (c == '\'' || c == '\\') out += '\\';
    out += c;
  }
  return out + "'";
}

std::string sql_double(double v) {
  char buf[40];
  std::snprintf(buf, sizeof buf, "%.17g", v);
  return buf;
}

std::string identifier(const std::string& name) { return "`" + name + "`"; }

const ClickHouseColumn* find_column(const std::vector<ClickHouseColumn>& columns, const std::string& name) {
  for (const auto& c : columns)
    if (c.name == name) return &c;
  return nullptr;
}

// A MetricInput as the shipped tables (packaging/clickhouse/*.sql) hold it:
// an expression (parenthesized when it is not one term) and the columns it
// reads. None: the unit's records fix the input (metric_inputs(): a
// transfer is a finished run, a flow is neither sent nor received).
struct InputColumns {
  std::string expr;
  std::vector<std::string> columns;
};

// A column's name quoted for SQL.
std::string col(std::string_view key) { return "`" + std::string(key) + "`"; }

// The one column of that key.
InputColumns column(const char* key) { return InputColumns{col(key), {key}}; }

std::optional<InputColumns> input_columns(MetricInput i, SampleUnit u) {
  namespace flow = record_key::flow;
  namespace transfer = record_key::transfer;
  const bool is_transfer = u == SampleUnit::kTransfer;
  switch (i) {
    case MetricInput::kOk:
      if (is_transfer) return std::nullopt;
      return InputColumns{"(" + col(flow::outcome) + " = 'ok')", {flow::outcome}};
    case MetricInput::kPartial:
      if (is_transfer) return std::nullopt;
      return column(flow::partial);
    case MetricInput::kRecv:
      if (!is_transfer) return std::nullopt;
      // As the flow-log reader: anything but "send" is not data this host sent.
      return InputColumns{"(" + col(transfer::direction) + " != 'send')", {transfer::direction}};
    case MetricInput::kBytes:
      if (is_transfer) return column(transfer::bytes);
      return InputColumns{"(" + col(flow::bytes_acked) + " + " + col(flow::bytes_received) + ")",
                          {flow::bytes_acked, flow::bytes_received}};
    case MetricInput::kTime:
      return column(is_transfer ? transfer::xfer_us : flow::fct_us);
    case MetricInput::kSrtt: return column(is_transfer ? transfer::srtt_us : flow::srtt_us);
    case MetricInput::kRetransSegs: return column(is_transfer ? transfer::retrans_segs : flow::retrans_segs);
    case MetricInput::kSegsOut:
      if (is_transfer) return std::nullopt;
      return column(flow::segs_out);
    case MetricInput::kRwndLimited:
      if (!is_transfer) return std::nullopt;
      // TransferRecord::rwnd_limited(): held back for more than half its time.
      return InputColumns{"(" + col(transfer::xfer_us) + " > 0 AND 2 * toInt64(" + col(transfer::rwnd_limited_us) +
                              ") > " + col(transfer::xfer_us) + ")",
                          {transfer::xfer_us, transfer::rwnd_limited_us}};
  }
  return std::nullopt;
}

// The inputs every record of the unit has, whatever its fields.
MetricInputs fixed_inputs(SampleUnit u) {
  MetricInputs in;
  in.unit = u;
  in.ok = u == SampleUnit::kTransfer;
  return in;
}

// One term of a population (measure/measure.h) as SQL; "" when the unit's
// records always meet it.
std::string term_sql(const PopulationTerm& t, SampleUnit u, uint64_t throughput_min_bytes) {
  const std::optional<InputColumns> in = input_columns(t.input, u);
  if (!in) return term_holds(t, fixed_inputs(u), MetricOptions{{}, throughput_min_bytes}) ? "" : "0";
  const std::string tmin = std::to_string(throughput_min_bytes);
  switch (t.test) {
    case MetricTest::kTrue: return in->expr;
    case MetricTest::kFalse: return in->expr + " = 0";
    case MetricTest::kPositive: return in->expr + " > 0";
    case MetricTest::kBelowThroughputMin: return in->expr + " < " + tmin;
    case MetricTest::kAtLeastThroughputMin: return in->expr + " >= " + tmin;
  }
  return "0";
}

std::string input_value_sql(MetricInput i, SampleUnit u) {
  const std::optional<InputColumns> in = input_columns(i, u);
  return in ? "toFloat64(" + in->expr + ")" : sql_double(input_value(i, fixed_inputs(u)));
}

// What the query computes per record: metric_population() and
// metric_formula() written as SQL.
struct PopulationSql {
  std::string bytes;      // payload bytes (the size class is taken from it)
  std::string condition;  // the record counts for the metric
  std::string value;      // the metric's value, Float64
};

PopulationSql population_of(const CompareOptions& o, uint64_t throughput_min_bytes) {
  PopulationSql p;
  p.bytes = input_columns(MetricInput::kBytes, o.unit)->expr;
  for (const PopulationTerm& t : metric_population(o.metric)) {
    const std::string term = term_sql(t, o.unit, throughput_min_bytes);
    if (!term.empty()) p.condition += (p.condition.empty() ? "" : " AND ") + term;
  }
  if (p.condition.empty()) p.condition = "1";
  const MetricFormula& f = metric_formula(o.metric);
  p.value = input_value_sql(f.numerator, o.unit);
  if (f.scale != 1) p.value = sql_double(f.scale) + " * " + p.value;
  if (f.denominator) {
    std::string denominator = input_value_sql(*f.denominator, o.unit);
    if (f.denominator_scale != 1) denominator = "(" + denominator + " / " + sql_double(f.denominator_scale) + ")";
    p.value += " / " + denominator;
  }
  return p;
}

// Which of what the query needs the table lacks ("" when it has all): the
// columns of every metric the unit compares, so a table is a tcpscope table
// or not whichever metric is asked.
std::string missing_columns(const std::vector<ClickHouseColumn>& columns, const CompareOptions& o) {
  std::vector<std::string> need = {"end_ns"};
  for (int i = 0; i < kMetricInputCount; ++i) {
    const auto input = static_cast<MetricInput>(i);
    bool read = false;
    for (int m = 0; m < kMeasureCount; ++m) {
      const auto metric = static_cast<Measure>(m);
      if (!unit_supported(metric, o.unit)) continue;
      const Population& p = metric_population(metric);
      const MetricFormula& f = metric_formula(metric);
      read = read || f.numerator == input || f.denominator == input ||
             std::any_of(p.begin(), p.end(), [&](const PopulationTerm& t) { return t.input == input; });
    }
    if (!read) continue;
    if (const auto in = input_columns(input, o.unit))
      for (const auto& c : in->columns)
        if (std::find(need.begin(), need.end(), c) == need.end()) need.push_back(c);
  }
  std::string missing;
  for (const auto& n : need)
    if (!find_column(columns, n)) missing += (missing.empty() ? "" : ", ") + n;
  return missing;
}

// The expressions a selection term and --by read.
class FieldText {
 public:
  FieldText(const std::vector<ClickHouseColumn>& columns, std::string size_class)
      : columns_(columns), size_class_(std::move(size_class)) {}

  // A field as the flow log's text of it (numbers in decimal, null as
  // "null", booleans true/false); nullopt when the table has no such column.
  std::optional<std::string> of(const std::string& field) const {
    if (field == "size_class") return size_class_;
    const ClickHouseColumn* c = find_column(columns_, field);
    if (!c) return std::nullopt;
    const std::string col = identifier(field);
    if (c->type == "Bool" || (is_boolean_field(field) && c->type == "UInt8"))
      return "if(" + col + ", 'true', 'false')";
    if (c->type.rfind("Nullable(", 0) == 0) return "ifNull(toString(" + col + "), 'null')";
    return "toString(" + col + ")";
  }

  // Every term must hold; a record without the field matches only "!=" terms.
  std::string condition(const Selection& s) const {
    std::string out;
    for (const auto& term : s.terms()) {
      std::string cond;
      if (const auto expr = of(term.field)) {
        std::string values;
        for (const auto& v : term.values) values += (values.empty() ? "" : ", ") + sql_string(v);
        cond = *expr + " IN (" + values + ")";
        if (term.negate) cond = "NOT (" + cond + ")";
      } else {
        cond = term.negate ? "1" : "0";
      }
      out += (out.empty() ? "" : " AND ") + cond;
    }
    return out.empty() ? "1" : "(" + out + ")";
  }

 private:
  const std::vector<ClickHouseColumn>& columns_;
  std::string size_class_;
};

uint64_t json_uint(const nlohmann::json& v) {
  if (v.is_string()) return std::stoull(v.get<std::string>());
  return v.get<uint64_t>();
}

int64_t json_int(const nlohmann::json& v) {
  if (v.is_string()) return std::stoll(v.get<std::string>());
  return v.get<int64_t>();
}

double json_double(const nlohmann::json& v) {
  if (v.is_string()) return std::stod(v.get<std::string>());
  return v.get<double>();
}

// ClickHouse's error text starts "Code: N. DB::Exception: ..." and goes on
// with a stack trace: the first line says it.
std::string first_line(std::string s) {
  const size_t nl = s.find('\n');
  if (nl != std::string::npos) s.resize(nl);
  while (!s.empty() && (s.back() == '\r' || s.back() == ' ')) s.pop_back();
  if (s.size() > 300) s = s.substr(0, 300) + "...";
  return s;
}

}  // namespace

namespace {

// One arm's records: which rows (where), and their group and size class.
struct ArmRows {
  PopulationSql population;
  std::string size_class, group, where;
};

ArmRows arm_rows(const ClickHouseQuery& q, const std::vector<ClickHouseColumn>& columns,
                 const CompareOptions& options, const Selection& arm) {
  const MetricOptions& mo = options.metric_options;
  ArmRows r;
  r.population = population_of(options, mo.throughput_min_bytes);
  r.size_class = "0";
  for (uint64_t b : mo.size_classes_bytes)
    r.size_class += " + (" + r.population.bytes + " >= " + std::to_string(b) + ")";
  std::string names;
  for (const auto& n : size_class_names(mo.size_classes_bytes)) names += (names.empty() ? "" : ", ") + sql_string(n);
  // Arrays count from 1.
  const FieldText text(columns, "[" + names + "][" + r.size_class + " + 1]");
  r.group = "'all'";
  if (options.by != "all") r.group = text.of(options.by).value_or("'(none)'");
  r.where = r.population.condition + " AND " + text.condition(arm);
  if (q.where) r.where += " AND " + text.condition(*q.where);
  if (q.since_ns) r.where += " AND " + col(record_key::flow::end_ns) + " >= " + std::to_string(q.since_ns);
  if (q.until_ns) r.where += " AND " + col(record_key::flow::end_ns) + " < " + std::to_string(q.until_ns);
  return r;
}

}  // namespace

std::string clickhouse_sampling_sql(const ClickHouseQuery& q, const std::string& table,
                                    const std::vector<ClickHouseColumn>& columns, const CompareOptions& options,
                                    const Selection& a, const Selection& b) {
  return "SELECT min(" + col(record_key::transfer::sampling_rate) + "), max(" + col(record_key::transfer::sampling_rate) + ") FROM " + identifier(q.database) + "." +
         identifier(table) + " WHERE (" + arm_rows(q, columns, options, a).where + ") OR (" +
         arm_rows(q, columns, options, b).where + ") FORMAT JSONCompact";
}

std::string clickhouse_arm_sql(const ClickHouseQuery& q, const std::string& table,
                               const std::vector<ClickHouseColumn>& columns, const CompareOptions& options,
                               const Selection& arm, double inv_log_gamma, uint32_t keep_rate) {
  const ArmRows r = arm_rows(q, columns, options, arm);
  std::string where = r.where;
  // The flows that rate keeps (record/transfer_sampling.h: the same hash).
  if (keep_rate > 1)
    where += " AND bitAnd(intHash64(bitOr(bitShiftLeft(toUInt64(least(" + col(record_key::transfer::lport) + ", " +
             col(record_key::transfer::rport) + ")), 16), toUInt64(greatest(" + col(record_key::transfer::lport) + ", " +
             col(record_key::transfer::rport) + ")))), " + std::to_string(keep_rate - 1) + ") = 0";
  // The sketch's bucket (FlowSketch::bucket_index), zeros apart.
  const std::string bucket = "if(_v < " + sql_double(FlowSketch::kMinPositive) + ", " +
                             std::to_string(FlowSketch::kZeroBucket) + ", toInt64(ceil(log(_v) * " +
                             sql_double(inv_log_gamma) + ")))";
  return "SELECT _g, _sc, _b, count(), min(_v), max(_v) FROM (SELECT " + r.group + " AS _g, " +
         (split_by_size_class(options.metric) ? r.size_class : std::string("0")) + " AS _sc, " +
         r.population.value + " AS _v, " + bucket + " AS _b FROM " + identifier(q.database) + "." +
         identifier(table) + " WHERE " + where + ") GROUP BY _g, _sc, _b FORMAT JSONCompact";
}

ClickHouseSource::ClickHouseSource(ClickHouseQuery query, MetricOptions metric_options)
    : query_(std::move(query)), metric_options_(std::move(metric_options)) {}

std::string ClickHouseSource::table_for(SampleUnit unit) const {
  if (!query_.table.empty()) return query_.table;
  return unit == SampleUnit::kTransfer ? "transfers" : "flows";
}

std::string ClickHouseSource::description() const {
  return "clickhouse " + redact_url(query_.url) + " " + query_.database + "." +
         (query_.table.empty() ? std::string("flows|transfers") : query_.table);
}

bool ClickHouseSource::run(const std::string& sql, nlohmann::json* rows, std::string* error) const {
  // A GET is a read-only query for ClickHouse: this command can change nothing.
  const std::string url = join_url(query_.url, "/?query=" + url_encode(sql));
  const std::string shown = redact_url(query_.url);
  HttpResponse resp;
  std::string why;
  // Only the URL's credentials: TCPSCOPE_BASIC_AUTH is the daemon's password.
  if (!http_get(url, query_.timeout_ms, &resp, &why, 256u << 20, EnvCredentials::kIgnore)) {
    // http_get names the full URL, query and all; the server's is enough.
    const size_t colon = why.find(": ", why.find(' ') + 1);
    *error = "clickhouse " + shown + ": " + (colon == std::string::npos ? why : why.substr(colon + 2));
    return false;
  }
  if (resp.status != 200) {
    *error = "clickhouse " + shown + ": HTTP " + std::to_string(resp.status) + ": " + first_line(resp.body);
    return false;
  }
  const nlohmann::json j = nlohmann::json::parse(resp.body, nullptr, /*allow_exceptions=*/false);
  if (!j.is_object() || !j.contains("data") || !j["data"].is_array()) {
    *error = "clickhouse " + shown + ": malformed answer (not ClickHouse's JSONCompact): " + first_line(resp.body);
    return false;
  }
  *rows = j["data"];
  return true;
}

bool ClickHouseSource::collect(const CompareOptions& options_in, const Selection& a, const Selection& b,
                               CompareSamples* out, std::string* error) {
  CompareOptions options = options_in;
  options.metric_options = metric_options_;
  const std::string table = table_for(options.unit);
  const std::string qualified = query_.database + "." + table;
  nlohmann::json rows;
  if (!run("DESCRIBE TABLE " + identifier(query_.database) + "." + identifier(table) + " FORMAT JSONCompact", &rows,
           error))
    return false;
  std::vector<ClickHouseColumn> columns;
  try {
    for (const auto& r : rows) columns.push_back({r.at(0).get<std::string>(), r.at(1).get<std::string>()});
  } catch (const nlohmann::json::exception& e) {
    *error = "clickhouse " + redact_url(query_.url) + ": malformed DESCRIBE answer: " + e.what();
    return false;
  }
  if (const std::string missing = missing_columns(columns, options); !missing.empty()) {
    *error = "clickhouse " + redact_url(query_.url) + ": table " + qualified + " has no column " + missing +
             ": not a tcpscope " + unit_plural(options.unit) + " table (packaging/clickhouse/*.sql)?";
    return false;
  }
  // Transfers of one flow in sampling_rate: of records of several rates only
  // the flows the largest rate keeps count, so that every flow weighs the same.
  uint32_t min_rate = 1, max_rate = 1;
  if (options.unit == SampleUnit::kTransfer && find_column(columns, record_key::transfer::sampling_rate)) {
    if (!run(clickhouse_sampling_sql(query_, table, columns, options, a, b), &rows, error)) return false;
    try {
      if (!rows.empty() && !rows.at(0).at(0).is_null()) {
        min_rate = static_cast<uint32_t>(std::clamp<uint64_t>(json_uint(rows.at(0).at(0)), 1, UINT32_MAX));
        max_rate = static_cast<uint32_t>(std::clamp<uint64_t>(json_uint(rows.at(0).at(1)), 1, UINT32_MAX));
      }
    } catch (const std::exception& e) {
      *error = "clickhouse " + redact_url(query_.url) + ": malformed answer row: " + e.what();
      return false;
    }
  }
  const uint32_t keep_rate = max_rate > min_rate ? max_rate : 1;
  const MetricSpan span = metric_sketch_span(options.metric);
  const FlowSketch prototype(FlowSketch::kDefaultRelativeAccuracy, 0, span.lo, span.hi);
  const std::vector<std::string> sc_names = size_class_names(metric_options_.size_classes_bytes);
  // (group, size class) -> the two arms' sketches.
  std::map<std::pair<std::string, uint32_t>, std::pair<FlowSketch, FlowSketch>> slots;
  uint64_t counted[2] = {0, 0};
  const Selection* arms[2] = {&a, &b};
  for (int arm = 0; arm < 2; ++arm) {
    if (!run(clickhouse_arm_sql(query_, table, columns, options, *arms[arm], prototype.inv_log_gamma(), keep_rate),
             &rows, error))
      return false;
    try {
      for (const auto& r : rows) {
        const auto key = std::make_pair(r.at(0).get<std::string>(), static_cast<uint32_t>(json_uint(r.at(1))));
        auto it = slots.try_emplace(key, prototype, prototype).first;
        FlowSketch& sketch = arm == 0 ? it->second.first : it->second.second;
        const uint64_t n = json_uint(r.at(3));
        const int64_t bucket = json_int(r.at(2));
        sketch.add_bucket(bucket == FlowSketch::kZeroBucket
                              ? FlowSketch::kZeroBucket
                              : static_cast<int32_t>(std::clamp<int64_t>(bucket, -(1 << 30), 1 << 30)),
                          n, json_double(r.at(4)), json_double(r.at(5)));
        counted[arm] += n;
      }
    } catch (const std::exception& e) {
      *error = "clickhouse " + redact_url(query_.url) + ": malformed answer row: " + e.what();
      return false;
    }
  }
  CompareSamples s;
  s.metric_options = metric_options_;
  s.size_classes = sc_names;
  for (auto& [key, sketches] : slots) {
    GroupSamples g;
    g.group = key.first;
    if (split_by_size_class(options.metric)) {
      g.size_class = key.second < sc_names.size() ? sc_names[key.second] : "?";
      g.size_class_order = key.second;
    }
    g.a = ArmDistribution::from_sketch(sketches.first);
    g.b = ArmDistribution::from_sketch(sketches.second);
    s.groups.push_back(std::move(g));
  }
  const std::string units = unit_plural(options.unit);
  std::string range;
  if (query_.since_ns || query_.until_ns)
    range = " written in [" + (query_.since_ns ? std::to_string(query_.since_ns) : std::string("-inf")) + ", " +
            (query_.until_ns ? std::to_string(query_.until_ns) : std::string("now")) + ") (end_ns)";
  s.notes.push_back("clickhouse: " + std::to_string(counted[0]) + " " + units + " in A, " +
                    std::to_string(counted[1]) + " in B from " + qualified + range +
                    (query_.where ? ", where " + query_.where->text() : std::string()) +
                    "; ClickHouse grouped them into the daemon's 1 % buckets, so quantiles are within 1 % of the "
                    "exact order statistics and the rank test treats values in one bucket as ties.");
  if (max_rate > 1)
    s.notes.push_back(max_rate == min_rate
                          ? "transfers of one flow in " + std::to_string(max_rate) +
                                " (sampling_rate): the quantiles stand for every transfer, the counts are the sample's."
                          : "transfers of sampling rates " + std::to_string(min_rate) + " to " +
                                std::to_string(max_rate) + ": only the flows rate " + std::to_string(max_rate) +
                                " keeps count, so every flow weighs the same.");
  *out = std::move(s);
  return true;
}

}  // namespace tcpscope
