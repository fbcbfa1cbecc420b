#include "aggregate/flow_distributions.h"

#include <algorithm>
#include <map>
#include <stdexcept>

#include <nlohmann/json.hpp>

#include "config/config.h"
#include "measure/size_class.h"
#include "record/flow_record.h"
#include "record/transfer_record.h"
#include "text/json_text.h"
#include "text/url_query.h"

namespace tcpscope {

namespace {

constexpr uint32_t kMaxSizeClass = 127;  // 7 bits in the key

// (peer_class, cc, arm, size_class, asn is "other", asn) packed into 64 bits.
uint64_t pack_key(uint8_t cls, uint8_t cc, uint8_t arm, uint32_t sc, bool other, uint32_t asn) {
  return (uint64_t{cls} << 56) | (uint64_t{cc} << 48) | (uint64_t{arm} << 40) | (uint64_t{sc & 0x7f} << 33) |
         (uint64_t{other} << 32) | asn;
}
uint8_t key_class(uint64_t k) { return static_cast<uint8_t>(k >> 56); }
uint8_t key_cc(uint64_t k) { return static_cast<uint8_t>(k >> 48); }
uint8_t key_arm(uint64_t k) { return static_cast<uint8_t>(k >> 40); }
uint32_t key_size_class(uint64_t k) { return static_cast<uint32_t>(k >> 33) & 0x7f; }
bool key_other(uint64_t k) { return (k >> 32) & 1; }
uint32_t key_asn(uint64_t k) { return static_cast<uint32_t>(k); }

}  // namespace

const std::vector<std::string>& distribution_key_fields() {
  static const std::vector<std::string> fields{"peer_class", "asn", "service", "cc", "arm", "size_class"};
  return fields;
}

FlowDistributionsOptions FlowDistributionsOptions::from_config(const Config& config) {
  FlowDistributionsOptions o;
  o.size_classes_bytes = config.size_classes_bytes;
  o.throughput_min_bytes = config.throughput_min_bytes;
  return o;
}

struct FlowDistributions::Entry {
  std::unique_ptr<FlowSketch> sketch[kSampleUnitCount][kMeasureCount];
};

struct FlowDistributions::Generation {
  Generation(Clock::time_point t, uint64_t n) : start(t), serial(n) {}
  Clock::time_point start;
  uint64_t serial;
  std::unordered_map<Key, Entry, PackedKeyHash> entries;
  uint64_t records[kSampleUnitCount] = {};  // flows, transfers
  uint64_t folded[kSampleUnitCount] = {};   // counted under asn "other": key table full
};

FlowDistributions::FlowDistributions(FlowDistributionsOptions options)
    : options_(std::move(options)),
      metric_options_{options_.size_classes_bytes, options_.throughput_min_bytes},
      current_(std::make_unique<Generation>(Clock::now(), ++generations_made_)) {
  names_.size_classes = size_class_names(options_.size_classes_bytes);
  // Fail at start, not at the first flow, on an impossible accuracy.
  FlowSketch probe(options_.relative_accuracy, options_.max_buckets);
}

FlowDistributions::~FlowDistributions() = default;

void FlowDistributions::rotate_if_due(Clock::time_point now) {
  const auto window = std::chrono::duration<double>(options_.window_s);
  if (options_.window_s <= 0 || now - current_->start < window) return;
  previous_ = std::move(current_);
  current_ = std::make_unique<Generation>(now, ++generations_made_);
  // The names of services only the dropped generation had go with it.
  std::unordered_map<uint64_t, std::string> kept;
  for (const auto& [key, entry] : previous_->entries) {
    auto it = names_.services.find(key.service);
    if (it != names_.services.end()) kept.emplace(it->first, it->second);
  }
  names_.services = std::move(kept);
}

FlowDistributions::Entry* FlowDistributions::entry_for(const Key& key, const Key& folded_key, bool top_asn,
                                                       SampleUnit unit) {
  auto& entries = current_->entries;
  auto it = entries.find(key);
  if (it != entries.end()) return &it->second;
  if (entries.size() < options_.max_keys) return &entries[key];
  // Full. The reserve above max_keys takes only the keys that matter most:
  // the ASNs the Prometheus series label by number (top-N) and the
  // per-(class, cc, arm, size class) "other" keys the rest fold into.
  const size_t hard_limit = options_.max_keys + reserve_keys();
  if (top_asn && entries.size() < hard_limit) return &entries[key];
  it = entries.find(folded_key);
  if (it == entries.end()) {
    if (entries.size() >= hard_limit) return nullptr;
    it = entries.emplace(folded_key, Entry{}).first;
  }
  ++current_->folded[static_cast<int>(unit)];
  return &it->second;
}

size_t FlowDistributions::reserve_keys() const { return std::max<size_t>(options_.max_keys / 4, 16); }

void FlowDistributions::add(const FlowRecord& flow, AsnLabel asn_label, const RankedService& service) {
  add_at(flow, asn_label, Clock::now(), service);
}

void FlowDistributions::add(const TransferRecord& transfer, AsnLabel asn_label, const RankedService& service) {
  add_at(transfer, asn_label, Clock::now(), service);
}

void FlowDistributions::add_at(const FlowRecord& flow, AsnLabel asn_label, Clock::time_point now,
                               const RankedService& service) {
  add_record(flow, metric_values(metric_inputs(flow), metric_options_), SampleUnit::kFlow, asn_label, service, now);
}

void FlowDistributions::add_at(const TransferRecord& transfer, AsnLabel asn_label, Clock::time_point now,
                               const RankedService& service) {
  add_record(transfer, metric_values(metric_inputs(transfer), metric_options_), SampleUnit::kTransfer, asn_label,
             service, now);
}

void FlowDistributions::add_at(const FlowRecord& flow, const MetricValues& values, AsnLabel asn_label,
                               Clock::time_point now, const RankedService& service) {
  add_record(flow, values, SampleUnit::kFlow, asn_label, service, now);
}

void FlowDistributions::add_at(const TransferRecord& transfer, const MetricValues& values, AsnLabel asn_label,
                               Clock::time_point now, const RankedService& service) {
  add_record(transfer, values, SampleUnit::kTransfer, asn_label, service, now);
}

template <class Record>
void FlowDistributions::add_record(const Record& r, const MetricValues& values, SampleUnit unit_of,
                                   AsnLabel asn_label, const RankedService& service, Clock::time_point now) {
  if (!values.completed) return;  // no metric counts such a record
  // Keyed by the raw ASN, as the flow log has it, so that --server groups
  // and selections by asn mean what --flows means. The label only says
  // whether the ASN is one of the dashboards' top-N (a claim on the reserve).
  const bool top_asn = asn_label == AsnLabel::kOwn;
  // Services by their label, as the series: the top-N by name, the rest
  // folded into one "other", so that the state a record reaches stays as
  // small (and warm) with 1,000 services as with one.
  const uint64_t service_key = service.label_key();
  const int unit = static_cast<int>(unit_of);

  std::lock_guard<std::mutex> lock(mu_);  // options_ may change on reload
  const uint32_t sc = std::min(size_class_index(values.bytes, options_.size_classes_bytes), kMaxSizeClass);
  rotate_if_due(now);
  const uint8_t cls = names_.classes.id(r.enrichment.peer_class);
  const uint8_t cc = names_.ccs.id(r.cc);
  const uint8_t arm = r.enrichment.arm ? names_.arms.id(*r.enrichment.arm) : 0;
  const size_t keys_before = current_->entries.size();
  Entry* e = entry_for(Key{pack_key(cls, cc, arm, sc, false, r.enrichment.asn), service_key},
                       Key{pack_key(cls, cc, arm, sc, true, 0), service_key}, top_asn, unit_of);
  if (!e) {
    ++dropped_[unit];
    return;
  }
  // A service's name is looked up only when one of its keys is new in the
  // generation, not per record.
  if (service_key != 0 && current_->entries.size() != keys_before)
    names_.services.try_emplace(service_key, service_label_text(service.label, r.enrichment.owner()));
  for (int m = 0; m < kMeasureCount; ++m) {
    if (!values.value[m]) continue;
    auto& s = e->sketch[unit][m];
    if (!s) s = std::make_unique<FlowSketch>(new_sketch(static_cast<Measure>(m)));
    s->add(*values.value[m]);
  }
  ++current_->records[unit];
}

FlowSketch FlowDistributions::new_sketch(Measure m) const {
  const MetricSpan span = metric_sketch_span(m);
  return FlowSketch(options_.relative_accuracy, options_.max_buckets, span.lo, span.hi);
}

bool FlowDistributions::update_options(FlowDistributionsOptions options) {
  std::lock_guard<std::mutex> lock(mu_);
  const bool reset = options.size_classes_bytes != options_.size_classes_bytes ||
                     options.throughput_min_bytes != options_.throughput_min_bytes ||
                     options.relative_accuracy != options_.relative_accuracy ||
                     options.max_buckets != options_.max_buckets;
  options_ = std::move(options);
  metric_options_ = MetricOptions{options_.size_classes_bytes, options_.throughput_min_bytes};
  if (reset) {
    names_.size_classes = size_class_names(options_.size_classes_bytes);
    names_.services.clear();
    previous_.reset();
    current_ = std::make_unique<Generation>(Clock::now(), ++generations_made_);
  }
  return reset;
}

std::string FlowDistributions::KeyNames::field(const Key& key, const std::string& field) const {
  const uint64_t k = key.ids;
  if (field == "peer_class") return classes.value(key_class(k));
  if (field == "cc") return ccs.value(key_cc(k));
  if (field == "arm") return arms.value(key_arm(k));
  if (field == "asn") return key_other(k) ? kOtherAsnLabel : std::to_string(key_asn(k));
  if (field == "service") {
    auto it = services.find(key.service);
    return it != services.end() ? it->second : "";
  }
  if (field == "size_class") {
    const uint32_t sc = key_size_class(k);
    return sc < size_classes.size() ? size_classes[sc] : "?";
  }
  return "";
}

FlowDistributions::QueryResult FlowDistributions::query(Measure metric, SampleUnit unit,
                                                        const std::string& by, const Selection& a,
                                                        const Selection& b) {
  return query_at(metric, unit, by, a, b, Clock::now());
}

FlowDistributions::QueryResult FlowDistributions::query_at(Measure metric, SampleUnit unit,
                                                           const std::string& by, const Selection& a,
                                                           const Selection& b, Clock::time_point now) {
  if (const std::string why = unit_unsupported_reason(metric, unit); !why.empty())
    throw std::invalid_argument("unit " + std::string(to_string(unit)) + ": " + why);
  const auto& fields = distribution_key_fields();
  auto kept = [&](const std::string& f) { return std::find(fields.begin(), fields.end(), f) != fields.end(); };
  const std::string kept_list = "peer_class, asn, service, cc, arm, size_class";
  if (by != "all" && !kept(by))
    throw std::invalid_argument("cannot group by \"" + by + "\": the daemon keeps distributions by " + kept_list +
                                " only (use the flow log for other fields)");
  for (const Selection* sel : {&a, &b})
    for (const auto& t : sel->terms())
      if (!kept(t.field))
        throw std::invalid_argument("selection \"" + sel->text() + "\" uses \"" + t.field +
                                    "\": the daemon keeps distributions by " + kept_list +
                                    " only (use the flow log for other fields)");

  const int ui = static_cast<int>(unit), mi = static_cast<int>(metric);
  const bool sized = split_by_size_class(metric);
  QueryResult out;

  // Under the lock: the keys with a sketch of this metric, and their names.
  struct Item {
    uint64_t generation;
    Key key;
    bool in_a = false, in_b = false;
    std::map<std::pair<std::string, uint32_t>, Group>::iterator group;
  };
  std::vector<Item> items;
  KeyNames names;
  std::optional<FlowSketch> empty;  // as options_ (which a reload may change) make them
  {
    std::lock_guard<std::mutex> lock(mu_);
    empty = new_sketch(metric);
    rotate_if_due(now);
    const Generation* oldest = previous_ ? previous_.get() : current_.get();
    out.covers_s = std::chrono::duration<double>(now - oldest->start).count();
    names = names_;
    for (const Generation* gen : {previous_.get(), current_.get()}) {
      if (!gen) continue;
      out.folded += gen->folded[ui];
      for (const auto& [key, entry] : gen->entries)
        if (entry.sketch[ui][mi] && !entry.sketch[ui][mi]->empty()) items.push_back(Item{gen->serial, key});
    }
  }

  // Without it: which keys each selection takes, and their groups.
  std::map<std::pair<std::string, uint32_t>, Group> groups;
  size_t kept_items = 0;
  for (Item& item : items) {
    auto get = [&, k = item.key](const std::string& f) -> std::optional<std::string> { return names.field(k, f); };
    item.in_a = a.matches(get);
    item.in_b = b.matches(get);
    if (!item.in_a && !item.in_b) continue;
    const std::string group = by == "all" ? "all" : names.field(item.key, by);
    const uint32_t sc = sized ? key_size_class(item.key.ids) : 0;
    auto it = groups.find({group, sc});
    if (it == groups.end()) {
      Group g{group, std::nullopt, sc, *empty, *empty};
      if (sized) g.size_class = names.field(item.key, "size_class");
      it = groups.emplace(std::make_pair(group, sc), std::move(g)).first;
    }
    item.group = it;
    items[kept_items++] = item;
  }
  items.resize(kept_items);

  // Under the lock again, a few merges at a time: the sketches may have
  // grown since (they are merged as they are now), or gone with a rotation.
  for (size_t i = 0; i < items.size(); i += kMergesPerLock) {
    std::lock_guard<std::mutex> lock(mu_);
    for (size_t k = i; k < std::min(items.size(), i + kMergesPerLock); ++k) {
      const Item& item = items[k];
      const Generation* gen = current_->serial == item.generation ? current_.get()
                              : previous_ && previous_->serial == item.generation ? previous_.get()
                                                                                   : nullptr;
      if (!gen) continue;
      auto e = gen->entries.find(item.key);
      if (e == gen->entries.end()) continue;
      const FlowSketch* sketch = e->second.sketch[ui][mi].get();
      if (!sketch) continue;
      if (item.in_a) item.group->second.a.merge(*sketch);
      if (item.in_b) item.group->second.b.merge(*sketch);
    }
  }
  for (auto& [k, g] : groups) out.groups.push_back(std::move(g));
  return out;
}

std::string FlowDistributions::handle_query(const std::string& query_string) {
  const auto params = parse_query_string(query_string);
  for (const auto& [name, value] : params)
    if (name != "metric" && name != "unit" && name != "by" && name != "a" && name != "b")
      throw std::invalid_argument("unknown query parameter \"" + name + "\" (metric, unit, by, a, b)");
  auto param = [&](const char* name, const char* fallback) -> std::string {
    auto it = params.find(name);
    if (it != params.end() && !it->second.empty()) return it->second;
    if (fallback) return fallback;
    throw std::invalid_argument(std::string("missing query parameter \"") + name +
                                "\" (e.g. ?metric=fct&by=asn&a=cc%3Dcubic&b=cc%3Dbbr)");
  };
  const std::string metric_name = param("metric", "fct");
  const auto metric = parse_measure(metric_name);
  if (!metric) throw std::invalid_argument("unknown metric \"" + metric_name + "\" (fct, throughput, rtt, retrans)");
  const std::string unit_name = param("unit", "flow");
  const auto unit = parse_sample_unit(unit_name);
  if (!unit) throw std::invalid_argument("unknown unit \"" + unit_name + "\" (flow, transfer)");
  const std::string by = param("by", "peer_class");
  std::string why;
  const auto a = Selection::parse(param("a", nullptr), &why);
  if (!a) throw std::invalid_argument("selection a: " + why);
  const auto b = Selection::parse(param("b", nullptr), &why);
  if (!b) throw std::invalid_argument("selection b: " + why);
  for (const auto* sel : {&*a, &*b})
    if (sel->terms().size() > kMaxSelectionTerms)
      throw std::invalid_argument("selection \"" + sel->text().substr(0, 60) + "...\" has " +
                                  std::to_string(sel->terms().size()) + " terms; at most " +
                                  std::to_string(kMaxSelectionTerms));

  QueryResult res = query(*metric, *unit, by, *a, *b);
  const Stats st = stats();
  nlohmann::json groups = nlohmann::json::array();
  for (const auto& g : res.groups) {
    groups.push_back({{"group", g.group},
                      {"size_class", g.size_class ? nlohmann::json(*g.size_class) : nlohmann::json(nullptr)},
                      {"size_class_order", g.size_class_order},
                      {"a", g.a.to_json()},
                      {"b", g.b.to_json()}});
  }
  std::vector<std::string> size_classes;
  FlowDistributionsOptions o;
  uint32_t max_buckets = 0;
  {
    std::lock_guard<std::mutex> lock(mu_);  // a reload may change them
    size_classes = names_.size_classes;
    o = options_;
    max_buckets = new_sketch(*metric).max_buckets();
  }
  const MetricSpan span = metric_sketch_span(*metric);
  const std::string units = unit_plural(*unit);
  const bool transfers = *unit == SampleUnit::kTransfer;
  nlohmann::json out{{"format_version", kDistributionsFormatVersion},
                     {"metric", to_string(*metric)},
                     {"value_unit", metric_unit(*metric)},
                     {"unit", to_string(*unit)},
                     {"by", by},
                     {"a", a->text()},
                     {"b", b->text()},
                     {"relative_accuracy", o.relative_accuracy},
                     {"max_buckets", max_buckets},
                     {"span", {span.lo, span.hi}},
                     {"window_s", o.window_s},
                     {"covers_s", res.covers_s},
                     {"size_classes", size_classes},
                     {"size_classes_bytes", o.size_classes_bytes},
                     {"throughput_min_bytes", o.throughput_min_bytes},
                     {"keys", st.keys},
                     {"memory_bytes", st.memory_bytes},
                     {"dropped_" + units, transfers ? st.dropped_transfers : st.dropped_flows},
                     {"folded_" + units, res.folded},
                     {"groups", std::move(groups)}};
  return json_text(out) + "\n";
}

FlowDistributions::Stats FlowDistributions::stats() const {
  std::lock_guard<std::mutex> lock(mu_);
  Stats st;
  constexpr int kFlow = static_cast<int>(SampleUnit::kFlow), kTransfer = static_cast<int>(SampleUnit::kTransfer);
  st.dropped_flows = dropped_[kFlow];
  st.dropped_transfers = dropped_[kTransfer];
  for (const Generation* gen : {previous_.get(), current_.get()}) {
    if (!gen) continue;
    st.keys += gen->entries.size();
    st.flows += gen->records[kFlow];
    st.transfers += gen->records[kTransfer];
    st.folded_flows += gen->folded[kFlow];
    st.folded_transfers += gen->folded[kTransfer];
    // Hash node plus entry, roughly, and each sketch's object and counters.
    st.memory_bytes += gen->entries.size() * (sizeof(Entry) + sizeof(Key) + 2 * sizeof(void*));
    for (const auto& [key, e] : gen->entries) {
      for (const auto& per_unit : e.sketch) {
        for (const auto& s : per_unit) {
          if (!s) continue;
          ++st.sketches;
          st.memory_bytes += sizeof(FlowSketch) + s->memory_bytes();
        }
      }
    }
  }
  return st;
}

}  // namespace tcpscope
