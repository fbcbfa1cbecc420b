// Folds finished flows and their transfers into the Prometheus series of
// SPEC.md ("Prometheus metrics"): per (peer_class, asn, service, cc) counters, FCT /
// throughput / RTT histograms, transfer counts, times and throughput, and
// the active-flow gauges.
//
// Label cardinality. ASNs are folded so that the series count stays bounded:
// each flow comes with its ASN label from the ranking (asn_ranking.h: the
// top-N by bytes keep their number, ASN 0 is "0", every other ASN "other").
// An ASN that leaves the top-N keeps its (frozen) series for
// stale_asn_seconds (1 h), and at most max_stale_asns (= top_n) ASNs are kept
// that way, so at most A = 2 * top_n + 2 asn values are live.
// Services are folded the same way by their own ranking (service_ranking.h:
// the top services.top_n by bytes keep their name, the unknown service is
// "", every other "other"), with max_stale_services (= services.top_n) kept
// stale; a service with no record for services.grace_seconds loses its
// series at once. So at most V = 2 * services.top_n + 2 service values.
// tcpscope_active_flows has no asn or service: the open-flow snapshot
// (open_flows_view.h) counts sockets by (peer_class, cc) only.
// Counted as Prometheus counts them (every histogram bucket including +Inf,
// _sum and _count is a series), each base label set (peer_class, asn,
// service, cc) holds at most
//   4   bytes_acked, bytes_received, segments_out, retransmitted_segments
//   10  flows_total (2 dir x 5 outcome)
//   5   congestion_state_seconds_total (5 states)
//   27 S flow_completion_seconds (S size classes x (24 buckets + Inf + 2))
//   22  flow_throughput_bytes_per_second (19 + Inf + 2)
//   54  srtt_seconds, min_rtt_seconds (2 x (24 + Inf + 2))
//   2   transfers_total (2 direction)
//   54 S transfer_seconds (2 direction x as flow_completion_seconds)
//   22  transfer_throughput_bytes_per_second (as flow_throughput_...)
//   1   transfer_throughput_excluded_total (reason rwnd_limited)
// i.e. P = 120 + 81 S series, and the families hold at most
//   C * A * V * K * P + C * K (tcpscope_active_flows)
// with C peer classes (configured + default), K congestion controls in use.
// For stale_asn_seconds after a reload that changes the size classes, the
// FCT and transfer-time histograms of the replaced classes stay too (S_old +
// S_new instead of S).
// docs/metrics.md "Series budget" has the default's figure; aggregator_test.cc
// (SeriesCountMatchesTheBudget) counts a registry against this formula.
//
// Threading: add(), retire_series(), retire_service_series(),
// set_active_flows() and update_options() may be called from any thread (one mutex, uncontended in
// the daemon where the ring reader is the only caller of add()). Rendering
// (Registry::Collect on the HTTP threads) only touches prometheus-cpp
// objects, which are thread-safe.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "pipeline/asn_ranking.h"
#include "pipeline/service_ranking.h"
#include "aggregate/label_ids.h"
#include "aggregate/packed_key.h"
#include "measure/measure.h"
#include "record/flow_record.h"
#include "record/transfer_record.h"

namespace prometheus {
class Counter;
class Gauge;
class Histogram;
template <typename T>
class Family;
class Registry;
}  // namespace prometheus

namespace tcpscope {

struct Config;

struct AggregatorOptions {
  std::vector<uint64_t> size_classes_bytes{100000, 1000000, 3000000};
  uint64_t throughput_min_bytes = 3000000;
  // Series of an ASN that has left the top-N stop receiving flows (those go
  // to "other"); after this long they are removed from the registry.
  double stale_asn_seconds = 3600;
  // At most this many such stale ASNs keep their series; beyond it the ones
  // out of the top-N longest are removed at once. from_config: top_n.
  size_t max_stale_asns = 50;
  // The same bound for services out of the top-N (they retire after
  // stale_asn_seconds too). from_config: services.top_n.
  size_t max_stale_services = 20;

  static AggregatorOptions from_config(const Config& config);
  // The part the metrics' populations read (measure/measure.h).
  MetricOptions metric_options() const { return {size_classes_bytes, throughput_min_bytes}; }
};

// Histogram bucket upper bounds (seconds, bytes/s), documented in aggregator.cc.
const std::vector<double>& fct_buckets_seconds();
const std::vector<double>& throughput_buckets_bytes_per_second();
const std::vector<double>& rtt_buckets_seconds();

// The most series (Prometheus samples: each histogram bucket, _sum and
// _count counted) the aggregator's families can hold with these options,
// rankings of `top_n` ASNs and `service_top_n` services, `peer_classes` peer
// class values and `congestion_controls` CCs in use (the formula above; size
// classes as configured, i.e. not during the grace period after a
// size-class reload).
uint64_t series_budget(const AggregatorOptions& options, uint32_t top_n, uint32_t service_top_n,
                       uint64_t peer_classes, uint64_t congestion_controls);

class Aggregator {
 public:
  using ActiveFlows = std::map<std::pair<std::string, std::string>, int64_t>;  // (peer_class, cc) -> flows

  Aggregator(std::shared_ptr<prometheus::Registry> registry, AggregatorOptions options);
  ~Aggregator();
  Aggregator(const Aggregator&) = delete;
  Aggregator& operator=(const Aggregator&) = delete;

  // Counts one finished flow (peer_class, asn, cc already enriched) under
  // its ASN's label (AsnRanking::add) and its owner's (ServiceRanking::count;
  // {} is the unknown service, ""). Outside a batch the metrics move at
  // once.
  void add(const FlowRecord& flow, AsnLabel asn, const RankedService& service = {});
  // Counts one transfer under its ASN's and service's labels as the rankings
  // have them now (AsnRanking::label, ServiceRanking::ranked: a transfer's
  // bytes are its flow's, which ranks them when it finishes).
  void add(const TransferRecord& transfer, AsnLabel asn, const RankedService& service = {});
  // The same with the record's metrics worked out already (the fanout's,
  // for all sinks at once).
  void add(const FlowRecord& flow, const MetricValues& values, AsnLabel asn, const RankedService& service);
  void add(const TransferRecord& transfer, const MetricValues& values, AsnLabel asn, const RankedService& service);

  // Between these, add() only accumulates per series; end_batch() publishes
  // to the registry. prometheus-cpp takes a compare-and-swap per counter and
  // a mutex per histogram observation; a drain's records fall into a few
  // series, so the daemon publishes once per drain (bench/README.md, item 6).
  void begin_batch();
  void end_batch();

  // After a new ranking: series of ASNs out of its top-N stop moving and
  // are removed once stale (stale_asn_seconds, max_stale_asns), as are FCT
  // and transfer-time histograms of size classes a reload replaced.
  void retire_series(const AsnRanking& ranking);
  // The same for services; a service the ranking forgot (no record for
  // services.grace_seconds) loses its series at once.
  void retire_service_series(const ServiceRanking& ranking);

  // Sets tcpscope_active_flows from a snapshot of open flows; series missing
  // from the snapshot drop to 0.
  void set_active_flows(const ActiveFlows& active);

  // Config reload: new size classes / top_n / throughput threshold apply to
  // flows and transfers added from now on. Existing series keep their
  // values; FCT and transfer-time histograms of size classes no longer
  // configured stop moving and are removed stale_asn_seconds later (at a
  // retire_series()).
  void update_options(AggregatorOptions options);

  // The size_class label for a flow that moved this many payload bytes.
  std::string size_class_label(uint64_t bytes) const;
  // (peer_class, asn, service, cc) label sets with live series; for tests and /api.
  size_t label_sets() const;

 private:
  struct Series;
  // ids: (class id, cc id, the "other" flags, asn); service: its key, 0 when "other" or unknown.
  using SeriesKey = PackedKey;
  using Clock = std::chrono::steady_clock;
  // Where a ranked value stands in its ranking now.
  enum class Rank { kTop, kOut, kGone };

  // The series of a record's label set, made on first use, listed for the
  // next publish: its caller adds to its pending values.
  template <class Record>
  Series* series_for(const Record& r, AsnLabel asn_label, const RankedService& service);
  // Makes it, with the counters every label set has, under `key`.
  template <class Record>
  Series* new_series(const SeriesKey& key, const Record& r, uint32_t asn, bool asn_other,
                     const RankedService& service);
  // retire_series() for the ranked label `dimension` (ASN or service).
  void retire_locked(size_t dimension, size_t max_stale, const std::function<Rank(uint64_t)>& rank);
  void publish_locked();
  void remove_series(Series* s);

  std::shared_ptr<prometheus::Registry> registry_;
  AggregatorOptions options_;
  MetricOptions metric_options_;  // options_.metric_options()
  std::vector<std::string> size_class_names_;

  prometheus::Family<prometheus::Counter>* flows_total_;
  prometheus::Family<prometheus::Counter>* bytes_acked_;
  prometheus::Family<prometheus::Counter>* bytes_received_;
  prometheus::Family<prometheus::Counter>* segments_out_;
  prometheus::Family<prometheus::Counter>* retrans_segments_;
  prometheus::Family<prometheus::Counter>* ca_state_seconds_;
  prometheus::Family<prometheus::Histogram>* fct_;
  prometheus::Family<prometheus::Histogram>* throughput_;
  prometheus::Family<prometheus::Histogram>* srtt_;
  prometheus::Family<prometheus::Histogram>* min_rtt_;
  prometheus::Family<prometheus::Counter>* transfers_total_;
  prometheus::Family<prometheus::Histogram>* transfer_seconds_;
  prometheus::Family<prometheus::Histogram>* transfer_throughput_;
  prometheus::Family<prometheus::Counter>* transfer_throughput_excluded_;
  prometheus::Family<prometheus::Gauge>* active_flows_;

  mutable std::mutex mu_;
  // Label values by id; ids go into the series key.
  LabelIds class_ids_;
  LabelIds cc_ids_;
  // The packed label set -> its series.
  std::unordered_map<SeriesKey, std::unique_ptr<Series>, PackedKeyHash> series_;
  std::map<std::pair<std::string, std::string>, prometheus::Gauge*> active_gauges_;

  // Series with unpublished flows, and whether add() leaves them so.
  std::vector<Series*> dirty_;
  bool batching_ = false;
};

}  // namespace tcpscope
