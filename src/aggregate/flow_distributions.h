// What the daemon keeps so that `tcpscope compare --server URL` can answer
// without a flow log: one FlowSketch (1 % relative error) per unit, metric
// and key (peer_class, asn, service, cc, arm, size_class) of finished flows and
// of transfers, over a sliding window. Flows feed every metric; transfers
// the ones measure/measure.h defines per transfer (fct, throughput), keyed
// by the same fields (size_class by the transfer's bytes), so a key's flows
// and transfers share its entry. A compare query merges the sketches of the keys that match
// its A and B selections into one pair per group and returns them; the
// client runs the statistics (compare_stats.h) on those, so the daemon's
// HTTP threads only merge.
//
// What --server can and cannot answer. Selections and --by may use only the
// key fields: peer_class, asn, service, cc, arm, size_class (anything else
// needs the flow log). asn is the raw AS number, as in the flow log, so
// `--by asn` and `--a asn=N` mean the same in both modes whatever the
// Prometheus top-N are (the dashboards fold ASNs outside them into "other";
// these sketches fold ASNs only when the key table is full, below). service
// is labelled as in the series: the top services.top_n by name, "" when
// unknown, every other "other" (as the ranking stood when the record came),
// so that a record reaches the same few keys with 1,000 services as with
// one; a service out of the top-N is compared by name from the flow log or
// ClickHouse. A service's name is kept while a key of either generation
// holds it. Quantiles are within the
// sketch's relative accuracy over each metric's span (metric_sketch_span:
// 10 decades, no collapse inside it); the rank test sees values within 1 %
// of each other as ties (see compare_stats.h).
//
// Bounded memory. Interned names are capped at 255 values per field (the
// rest become "other"); at most max_keys keys per generation, plus a reserve
// of max_keys / 4 that only two kinds of keys may take once max_keys are in
// use: ASNs the Prometheus series label by number (the caller's asn_label is
// not "other"), and one "other" key per (peer_class, cc, arm, size_class)
// into which the flows of every other new ASN fold. Folded flows are counted
// (folded_flows, in every query answer, and `compare` warns): their ASN's
// group holds fewer flows than the flow log's. A flow finding even the
// reserve full is dropped and counted (dropped_flows).
// Each sketch holds at most max_buckets 4-byte counters (1153 at the
// default 1 % over 10 decades) and a key at most four sketches (flows: fct
// or throughput, rtt, retrans; transfers: fct or throughput), so the hard
// ceiling is 2 generations x 5120 keys x 4 x (1153 x 4 B + ~100 B) =
// 184 MiB, reached only if every key's values spread over all 10 decades of
// every metric. A sketch's array spans
// only the buckets between its smallest and largest value: edge-like keys
// use a few hundred buckets in all (BM_DistributionsAdd in
// bench/compare_bench.cc: 1,809 keys in 3.2 MiB, ~1.8 KiB a key, so ~18 MiB
// for two full generations). stats() reports the real figure.
//
// Window. Sketches live in two generations of window_s each: queries merge
// both, so they cover between window_s and 2 window_s of the most recent
// flows (the response says how much), and keys that stop receiving flows
// (an ASN that left the top-N) disappear after at most 2 window_s.
//
// Threading: add() (the ring reader) and the queries (HTTP threads) take
// one mutex. add() costs a few hundred ns (bench/compare_bench.cc). A query
// holds it only to copy the key list and then to merge matching sketches,
// kMergesPerLock at a time; matching keys against its selections (strings
// per key and term) runs outside it, so a query never stalls the drain for
// more than about a hundred sketch merges.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "pipeline/asn_ranking.h"
#include "pipeline/service_ranking.h"
#include "aggregate/label_ids.h"
#include "aggregate/packed_key.h"
#include "measure/flow_sketch.h"
#include "measure/measure.h"
#include "measure/selection.h"

namespace tcpscope {

struct Config;
struct FlowRecord;
struct TransferRecord;

struct FlowDistributionsOptions {
  std::vector<uint64_t> size_classes_bytes{100000, 1000000, 3000000};
  uint64_t throughput_min_bytes = 3000000;
  double relative_accuracy = FlowSketch::kDefaultRelativeAccuracy;
  uint32_t max_buckets = 0;  // 0: each metric's span (metric_sketch_span), no collapse inside it
  size_t max_keys = 4096;  // per generation
  double window_s = 3600;

  static FlowDistributionsOptions from_config(const Config& config);
};

// The fields --server selections and --by may name.
const std::vector<std::string>& distribution_key_fields();

class FlowDistributions {
 public:
  using Clock = std::chrono::steady_clock;

  explicit FlowDistributions(FlowDistributionsOptions options);
  ~FlowDistributions();
  FlowDistributions(const FlowDistributions&) = delete;
  FlowDistributions& operator=(const FlowDistributions&) = delete;

  // Counts one finished flow under its raw ASN and its owner's name.
  // `asn_label` is the flow's label in the ASN ranking (asn_ranking.h, the
  // one the Prometheus series use): it only decides whether the flow's key
  // may use the reserve once max_keys are in use (top-N ASNs may, "other"
  // may not). `service` is the owner's as the fanout ranked it (its key; {}:
  // unknown, ""); its label plays no part here.
  void add(const FlowRecord& flow, AsnLabel asn_label, const RankedService& service = {});
  // Counts one finished transfer, the same way (the label of its flow's ASN).
  void add(const TransferRecord& transfer, AsnLabel asn_label, const RankedService& service = {});
  // The same at the caller's time (the daemon's drain; tests).
  void add_at(const FlowRecord& flow, AsnLabel asn_label, Clock::time_point now, const RankedService& service = {});
  void add_at(const TransferRecord& transfer, AsnLabel asn_label, Clock::time_point now,
              const RankedService& service = {});
  // The same with the record's metrics worked out already (the fanout's).
  void add_at(const FlowRecord& flow, const MetricValues& values, AsnLabel asn_label, Clock::time_point now,
              const RankedService& service);
  void add_at(const TransferRecord& transfer, const MetricValues& values, AsnLabel asn_label, Clock::time_point now,
              const RankedService& service);

  // Config reload. New size classes or threshold: the sketches no longer
  // mean the same thing, so they are dropped (returns true).
  bool update_options(FlowDistributionsOptions options);

  struct Group {
    std::string group;
    std::optional<std::string> size_class;
    uint32_t size_class_order = 0;
    FlowSketch a, b;
  };
  struct QueryResult {
    std::vector<Group> groups;
    double covers_s = 0;  // age of the oldest generation merged
    uint64_t folded = 0;  // records of the unit in the generations merged counted under asn "other" (table full)
  };
  // Merges the sketches of `metric` per `unit` per group of `by` for the
  // keys matching a and b. Throws std::invalid_argument when `by` or a
  // selection names a field the distributions do not keep, or the metric is
  // not compared per that unit (unit_unsupported_reason).
  QueryResult query(Measure metric, SampleUnit unit, const std::string& by, const Selection& a,
                    const Selection& b);
  QueryResult query_at(Measure metric, SampleUnit unit, const std::string& by, const Selection& a,
                       const Selection& b, Clock::time_point now);
  // Terms a selection of a query may have (past it: 400).
  static constexpr size_t kMaxSelectionTerms = 32;
  static constexpr size_t kMergesPerLock = 128;

  // GET /api/v1/distributions?metric=fct&unit=transfer&by=asn&a=cc%3Dcubic&b=cc%3Dbbr
  // (a and b URL-encoded selections; metric defaults to fct, unit to flow
  // (what clients from before transfers mean), by to peer_class): the query
  // above as JSON, with "format_version" (kDistributionsFormatVersion),
  // "value_unit" (metric_unit(): throughput in bytes/s), "unit" and the
  // unit's "dropped_flows" / "folded_flows" or "dropped_transfers" /
  // "folded_transfers".
  // std::invalid_argument for a bad query (the HTTP server answers 400).
  std::string handle_query(const std::string& query_string);

  struct Stats {
    size_t keys = 0;            // both generations
    size_t sketches = 0;
    size_t memory_bytes = 0;    // sketch counters plus per-key overhead
    uint64_t flows = 0;         // counted into the current generations
    uint64_t dropped_flows = 0; // key table and its reserve full (since start)
    uint64_t folded_flows = 0;  // current generations: counted under asn "other"
    uint64_t transfers = 0, dropped_transfers = 0, folded_transfers = 0;  // the same for transfers
  };
  Stats stats() const;

 private:
  struct Entry;
  struct Generation;
  // ids: (peer_class, cc, arm, size_class, asn is "other", asn); service: its key.
  using Key = PackedKey;

  template <class Record>
  void add_record(const Record& r, const MetricValues& values, SampleUnit unit, AsnLabel asn_label,
                  const RankedService& service, Clock::time_point now);
  void rotate_if_due(Clock::time_point now);
  // The entry for `key`, or its "other" key's (counting a folded record of
  // `unit`), or null when the table is full.
  Entry* entry_for(const Key& key, const Key& folded_key, bool top_asn, SampleUnit unit);
  size_t reserve_keys() const;
  FlowSketch new_sketch(Measure m) const;
  // A key's fields as text. Queries copy them, and match keys against
  // selections, outside mu_.
  struct KeyNames {
    LabelIds classes, ccs;
    LabelIds arms{{"null"}};  // id 0: no arm (the flow log's null)
    std::vector<std::string> size_classes;
    std::unordered_map<uint64_t, std::string> services;  // service key -> name, of the keys in use
    std::string field(const Key& key, const std::string& field) const;
  };

  FlowDistributionsOptions options_;
  MetricOptions metric_options_;  // the part of options_ metric_value() reads

  mutable std::mutex mu_;
  KeyNames names_;
  uint64_t generations_made_ = 0;  // a generation's serial: a query finds its keys' again by it
  std::unique_ptr<Generation> current_, previous_;
  uint64_t dropped_[kSampleUnitCount] = {};
};

}  // namespace tcpscope
