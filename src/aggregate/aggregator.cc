#include "aggregate/aggregator.h"

#include <prometheus/counter.h>
#include <prometheus/family.h>
#include <prometheus/gauge.h>
#include <prometheus/histogram.h>
#include <prometheus/registry.h>

#include <algorithm>
#include <cmath>
#include <optional>
#include <set>

#include "config/config.h"
#include "measure/size_class.h"
#include "prometheus_helpers/metric_family.h"

namespace tcpscope {

namespace {

constexpr size_t kDirs = 2;
constexpr size_t kOutcomes = 5;
constexpr size_t kTransferDirections = 2;  // send, recv
constexpr size_t kCaStates = TCPSCOPE_CA_STATES;
// Order of FlowRecord::ca_state_us (the kernel's TCP_CA_* order).
constexpr const char* kCaStateNames[kCaStates] = {"open", "disorder", "cwr", "recovery", "loss"};

constexpr size_t kAsn = 0, kService = 1;  // Series::ranked

// The series key packs (class id, cc id, asn is "other", asn) into one word
// and the key of the service's label into the other, so the steady state
// hashes two integers instead of a label map.
PackedKey series_key(uint8_t class_id, uint8_t cc_id, uint32_t asn, bool asn_other, const RankedService& service) {
  return {(uint64_t{class_id} << 56) | (uint64_t{cc_id} << 48) | (uint64_t{asn_other} << 32) | asn,
          service.label_key()};
}

double us_to_seconds(uint64_t us) { return static_cast<double>(us) / 1e6; }

// Observations of one histogram not yet published. Observe takes the
// histogram's mutex and moves one bucket and the sum (a compare-and-swap
// each); ObserveMultiple takes the mutex once and moves every bucket and the
// sum (26 for the FCT histogram). So up to 8 observations are replayed one
// by one, and more are published as bucket counts, kept as
// prometheus::Histogram keeps them (a value goes to the first bound >= it,
// the last slot is +Inf).
struct PendingHistogram {
  static constexpr size_t kReplayMax = 8;  // 8 replays: 8 mutexes and 16 CAS
  double values[kReplayMax];
  size_t n = 0;
  std::vector<double> buckets;  // used once n > kReplayMax
  double sum = 0;

  void add(const std::vector<double>& bounds, double value) {
    if (n < kReplayMax) {
      values[n++] = value;
      return;
    }
    if (n == kReplayMax) {
      buckets.assign(bounds.size() + 1, 0.0);
      for (double v : values) count(bounds, v);
    }
    ++n;
    count(bounds, value);
  }
  void count(const std::vector<double>& bounds, double value) {
    buckets[static_cast<size_t>(std::lower_bound(bounds.begin(), bounds.end(), value) - bounds.begin())] += 1;
    sum += value;
  }
  void publish(prometheus::Histogram* h) {
    if (n <= kReplayMax) {
      for (size_t i = 0; i < n; ++i) h->Observe(values[i]);
    } else {
      h->ObserveMultiple(buckets, sum);
      sum = 0;
    }
    n = 0;
  }
};

void publish(prometheus::Counter* c, double* pending) {
  if (*pending > 0) c->Increment(*pending);
  *pending = 0;
}

// A histogram family split by size class, for one (peer_class, asn, cc)
// label set: a histogram per configured class, created on first use, and
// those of classes a reload replaced, which stop moving and are removed
// stale_asn_seconds after the reload (or with the label set).
class SizeClassHistograms {
 public:
  using Clock = std::chrono::steady_clock;

  SizeClassHistograms(prometheus::Family<prometheus::Histogram>* family, const std::vector<double>& bounds,
                      size_t classes)
      : family_(family), bounds_(&bounds), live_(classes, nullptr), pending_(classes) {}

  // Observes `value` in size class `sc`, named `name`; `labels()` makes the
  // label set's labels, called only when the series is made (a label map
  // costs allocations the per-record path should not pay).
  template <class MakeLabels>
  void add(size_t sc, const std::string& name, MakeLabels labels, double value) {
    if (!live_[sc]) {
      auto l = labels();
      l.emplace("size_class", name);
      live_[sc] = &family_->Add(l, *bounds_);
    }
    pending_[sc].add(*bounds_, value);
  }
  void publish() {
    for (size_t i = 0; i < live_.size(); ++i)
      if (live_[i]) pending_[i].publish(live_[i]);
  }
  // New size classes (names in order): a class whose name is in force again
  // keeps or gets back its histogram (the registry holds one series per
  // label set), the others retire as of `now`. Publish first: pending
  // observations are per old class.
  void reclass(const std::vector<std::string>& old_names, const std::vector<std::string>& new_names,
               Clock::time_point now) {
    std::vector<Retired> pool = std::move(retired_);
    retired_.clear();
    for (size_t i = 0; i < live_.size(); ++i)
      if (live_[i]) pool.push_back({old_names[i], live_[i], now});
    std::vector<prometheus::Histogram*> kept(new_names.size(), nullptr);
    for (auto& r : pool) {
      auto j = std::find(new_names.begin(), new_names.end(), r.size_class);
      if (j != new_names.end())
        kept[static_cast<size_t>(j - new_names.begin())] = r.histogram;
      else
        retired_.push_back(std::move(r));
    }
    live_ = std::move(kept);
    pending_.assign(new_names.size(), PendingHistogram{});
  }
  // Removes the retired histograms `expired(since)` says are past their grace period.
  template <class Expired>
  void remove_expired(Expired expired) {
    for (size_t i = 0; i < retired_.size();) {
      if (expired(retired_[i].since)) {
        family_->Remove(retired_[i].histogram);
        retired_[i] = retired_.back();
        retired_.pop_back();
      } else {
        ++i;
      }
    }
  }
  void remove_all() {
    for (auto* h : live_)
      if (h) family_->Remove(h);
    for (const auto& r : retired_) family_->Remove(r.histogram);
  }

 private:
  struct Retired {
    std::string size_class;
    prometheus::Histogram* histogram;
    Clock::time_point since;
  };
  prometheus::Family<prometheus::Histogram>* family_;
  const std::vector<double>* bounds_;
  std::vector<prometheus::Histogram*> live_;   // per size class
  std::vector<PendingHistogram> pending_;      // as live_
  std::vector<Retired> retired_;
};

}  // namespace

// Flow completion time, seconds: 100 us .. 60 s in 1-2-3-5 steps per decade
// (24 buckets). Small objects finish in a few RTTs, so the low end needs the
// same relative resolution as the high end; 1-2-3-5 keeps every step within
// a factor of 2 and the bounds readable in dashboards.
const std::vector<double>& fct_buckets_seconds() {
  static const std::vector<double> b{
      0.0001, 0.0002, 0.0003, 0.0005,  //
      0.001,  0.002,  0.003,  0.005,   //
      0.01,   0.02,   0.03,   0.05,    //
      0.1,    0.2,    0.3,    0.5,     //
      1,      2,      3,      5,       //
      10,     20,     30,     60};
  return b;
}

// Throughput, bytes/s (Prometheus' base unit): 10 kB/s .. 10 GB/s in 1-2-5
// steps (19 buckets), i.e. 80 kbit/s .. 80 Gbit/s.
const std::vector<double>& throughput_buckets_bytes_per_second() {
  static const std::vector<double> b{
      1e4, 2e4, 5e4, 1e5, 2e5, 5e5, 1e6, 2e6, 5e6, 1e7,
      2e7, 5e7, 1e8, 2e8, 5e8, 1e9, 2e9, 5e9, 1e10};
  return b;
}

// RTT, seconds: 50 us .. 10 s (24 buckets), denser between 1 ms and 300 ms
// where Internet paths are and where A/B differences of 20-50 % must show.
const std::vector<double>& rtt_buckets_seconds() {
  static const std::vector<double> b{
      0.00005, 0.0001, 0.0002, 0.0005,                  //
      0.001,   0.002,  0.003,  0.005,  0.0075,          //
      0.01,    0.015,  0.02,   0.03,   0.05,   0.075,   //
      0.1,     0.15,   0.2,    0.3,    0.5,             //
      1,       2,      5,      10};
  return b;
}

uint64_t series_budget(const AggregatorOptions& o, uint32_t top_n, uint32_t service_top_n, uint64_t peer_classes,
                       uint64_t congestion_controls) {
  // A histogram with b bounds is b + 1 buckets (+Inf), _sum and _count.
  auto histogram = [](const std::vector<double>& bounds) { return uint64_t{bounds.size()} + 3; };
  const uint64_t size_classes = o.size_classes_bytes.size() + 1;
  const uint64_t per_label_set = 4                                       // bytes, segments, retransmits
                                 + kDirs * kOutcomes                     // flows_total
                                 + kCaStates                             // congestion_state_seconds_total
                                 + size_classes * histogram(fct_buckets_seconds())
                                 + histogram(throughput_buckets_bytes_per_second())  //
                                 + 2 * histogram(rtt_buckets_seconds())
                                 + kTransferDirections                   // transfers_total
                                 + kTransferDirections * size_classes * histogram(fct_buckets_seconds())  // transfer_seconds
                                 + histogram(throughput_buckets_bytes_per_second())  // transfer_throughput
                                 + 1;                                    // transfer_throughput_excluded_total
  const uint64_t asn_values = uint64_t{top_n} + o.max_stale_asns + 2;  // + "0" and "other"
  const uint64_t service_values = uint64_t{service_top_n} + o.max_stale_services + 2;  // + "" and "other"
  return peer_classes * congestion_controls * (asn_values * service_values * per_label_set + 1);
}

AggregatorOptions AggregatorOptions::from_config(const Config& config) {
  AggregatorOptions o;
  o.size_classes_bytes = config.size_classes_bytes;
  o.throughput_min_bytes = config.throughput_min_bytes;
  o.max_stale_asns = config.asn.top_n;
  o.max_stale_services = config.services.top_n;
  return o;
}

// Pointers into the registry's families for one (peer_class, asn, service,
// cc) label set. Series that only some flows feed are created on first use
// so that, e.g., a label set that only ever sees refused connections has no
// histograms.
struct Aggregator::Series {
  std::string peer_class, cc, asn, service;  // label values
  // Per ranked label (kAsn, kService): the ASN number or the service key,
  // and whether it is a value of the top-N (not unknown / "other").
  struct Ranked {
    uint64_t key = 0;
    bool specific = false;
    Clock::time_point last_in_top;
  } ranked[2];

  prometheus::Counter* bytes_acked = nullptr;
  prometheus::Counter* bytes_received = nullptr;
  prometheus::Counter* segments_out = nullptr;
  prometheus::Counter* retrans_segments = nullptr;
  prometheus::Counter* ca_state[kCaStates] = {};
  prometheus::Counter* flows[kDirs][kOutcomes] = {};
  prometheus::Histogram* srtt = nullptr;
  prometheus::Histogram* min_rtt = nullptr;
  prometheus::Histogram* throughput = nullptr;
  std::optional<SizeClassHistograms> fct;
  prometheus::Counter* transfers[kTransferDirections] = {};
  std::optional<SizeClassHistograms> transfer_seconds[kTransferDirections];  // by direction
  prometheus::Histogram* transfer_throughput = nullptr;
  prometheus::Counter* transfer_throughput_excluded = nullptr;  // reason="rwnd_limited"

  // What flows added since the last publish_locked() put into the metrics
  // above; only `pending.dirty` series are visited when publishing.
  struct Pending {
    double flows[kDirs][kOutcomes] = {};
    double bytes_acked = 0, bytes_received = 0, segments_out = 0, retrans_segments = 0;
    double ca_state[kCaStates] = {};
    PendingHistogram throughput, srtt, min_rtt;
    double transfers[kTransferDirections] = {};
    double transfer_throughput_excluded = 0;
    PendingHistogram transfer_throughput;
    bool dirty = false;
  } pending;

  prometheus::Labels base() const {
    return {{"peer_class", peer_class}, {"asn", asn}, {"service", service}, {"cc", cc}};
  }
  prometheus::Labels with(const char* name, const std::string& value) const {
    auto l = base();
    l.emplace(name, value);
    return l;
  }
};

Aggregator::Aggregator(std::shared_ptr<prometheus::Registry> registry, AggregatorOptions options)
    : registry_(std::move(registry)), options_(std::move(options)), metric_options_(options_.metric_options()) {
  auto& r = *registry_;
  flows_total_ = counter_family(r, "tcpscope_flows_total",
      "Finished TCP flows by peer class, ASN, congestion control, direction and outcome.");
  bytes_acked_ = counter_family(r, "tcpscope_bytes_acked_total",
      "Payload bytes sent and acknowledged by the peer (tcpi_bytes_acked), finished flows.");
  bytes_received_ = counter_family(r, "tcpscope_bytes_received_total",
      "Payload bytes received (tcpi_bytes_received), finished flows.");
  segments_out_ = counter_family(r, "tcpscope_segments_out_total", "Segments sent (tcpi_segs_out), finished flows.");
  retrans_segments_ = counter_family(r, "tcpscope_retransmitted_segments_total",
      "Segments retransmitted (tcpi_total_retrans), finished flows.");
  ca_state_seconds_ = counter_family(r, "tcpscope_congestion_state_seconds_total",
      "Time finished flows spent in each congestion-avoidance state.");
  fct_ = histogram_family(r, metric_histogram(Measure::kFct, SampleUnit::kFlow)->name,
      "Flow completion time (first SYN to last byte acknowledged) of completed flows that moved data.");
  throughput_ = histogram_family(r, metric_histogram(Measure::kThroughput, SampleUnit::kFlow)->name,
      "Payload bytes / flow completion time, completed flows of at least throughput_min_bytes.");
  srtt_ = histogram_family(r, metric_histogram(Measure::kRtt, SampleUnit::kFlow)->name,
      "Smoothed RTT at close of completed flows that moved data.");
  min_rtt_ = histogram_family(r, "tcpscope_min_rtt_seconds", "Minimum RTT of completed flows that moved data.");
  transfers_total_ = counter_family(r, "tcpscope_transfers_total",
      "Transfers (runs of data in one direction of a flow) by peer class, ASN, congestion control and "
      "direction (send, recv): an estimate of every flow's, each record of a followed flow counting as its "
      "sampling_rate.");
  transfer_seconds_ = histogram_family(r, metric_histogram(Measure::kFct, SampleUnit::kTransfer)->name,
      "Transfer time (xfer_us: send, first byte handed to TCP to last byte acknowledged; recv, first byte "
      "to last byte arrived) by direction; size class by the transfer's bytes. A sample: the transfers of "
      "the flows the kernel follows (transfer_sampling_rate), each counted once.");
  transfer_throughput_ = histogram_family(r, metric_histogram(Measure::kThroughput, SampleUnit::kTransfer)->name,
      "Payload bytes / transfer time of sent transfers of at least throughput_min_bytes that the receiver's"
      " window did not limit for most of their time. A sample: the flows the kernel follows, each transfer "
      "counted once.");
  transfer_throughput_excluded_ = counter_family(r, "tcpscope_transfer_throughput_excluded_total",
      "Sent transfers of at least throughput_min_bytes left out of "
      "tcpscope_transfer_throughput_bytes_per_second, by reason (rwnd_limited: the receiver's window "
      "limited them for most of their time).");
  active_flows_ = gauge_family(r, "tcpscope_active_flows",
      "Open TCP flows at the last snapshot, by peer class and congestion control.");
  size_class_names_ = size_class_names(options_.size_classes_bytes);
}

Aggregator::~Aggregator() = default;

template <class Record>
Aggregator::Series* Aggregator::series_for(const Record& r, AsnLabel asn_label, const RankedService& service) {
  const bool asn_other = asn_label == AsnLabel::kOther;
  const uint32_t asn = asn_other ? 0 : r.enrichment.asn;
  const uint8_t class_id = class_ids_.id(r.enrichment.peer_class);
  const SeriesKey key = series_key(class_id, cc_ids_.id(r.cc), asn, asn_other, service);
  auto it = series_.find(key);
  Series* s = it != series_.end() ? it->second.get() : new_series(key, r, asn, asn_other, service);
  if (!s->pending.dirty) {
    s->pending.dirty = true;
    dirty_.push_back(s);
  }
  return s;
}

template <class Record>
Aggregator::Series* Aggregator::new_series(const SeriesKey& key, const Record& r, uint32_t asn, bool asn_other,
                                           const RankedService& service) {
  auto s = std::make_unique<Series>();
  s->peer_class = class_ids_.value(static_cast<uint8_t>(key.ids >> 56));
  s->cc = cc_ids_.value(static_cast<uint8_t>(key.ids >> 48));
  s->asn = asn_other ? kOtherAsnLabel : std::to_string(asn);
  s->service = service_label_text(service.label, r.enrichment.owner());
  const Clock::time_point now = Clock::now();
  s->ranked[kAsn] = {asn, !asn_other && asn != 0, now};
  s->ranked[kService] = {service.key, service.label == RankedLabel::kOwn && service.key != 0, now};
  const auto labels = s->base();
  s->bytes_acked = &bytes_acked_->Add(labels);
  s->bytes_received = &bytes_received_->Add(labels);
  s->segments_out = &segments_out_->Add(labels);
  s->retrans_segments = &retrans_segments_->Add(labels);
  s->fct.emplace(fct_, fct_buckets_seconds(), size_class_names_.size());
  for (auto& h : s->transfer_seconds) h.emplace(transfer_seconds_, fct_buckets_seconds(), size_class_names_.size());
  Series* raw = s.get();
  series_.emplace(key, std::move(s));
  return raw;
}

void Aggregator::add(const FlowRecord& f, AsnLabel asn, const RankedService& service) {
  add(f, metric_values(metric_inputs(f), metric_options_), asn, service);
}

void Aggregator::add(const FlowRecord& f, const MetricValues& v, AsnLabel asn, const RankedService& service) {
  std::lock_guard<std::mutex> lock(mu_);
  const uint64_t bytes = f.bytes_acked + f.bytes_received;
  Series* s = series_for(f, asn, service);

  const size_t d = f.dir == Direction::kPassive ? 1 : 0;
  const size_t o = std::min<size_t>(static_cast<size_t>(f.outcome), kOutcomes - 1);
  if (!s->flows[d][o]) {
    auto l = s->base();
    l.emplace("dir", to_string(f.dir));
    l.emplace("outcome", to_string(f.outcome));
    s->flows[d][o] = &flows_total_->Add(l);
  }
  auto& p = s->pending;
  p.flows[d][o] += 1;
  p.bytes_acked += static_cast<double>(f.bytes_acked);
  p.bytes_received += static_cast<double>(f.bytes_received);
  p.segments_out += static_cast<double>(f.segs_out);
  p.retrans_segments += static_cast<double>(f.retrans_segs);
  for (size_t i = 0; i < kCaStates; ++i) {
    if (!f.ca_state_us[i]) continue;
    if (!s->ca_state[i]) s->ca_state[i] = &ca_state_seconds_->Add(s->with("state", kCaStateNames[i]));
    p.ca_state[i] += us_to_seconds(f.ca_state_us[i]);
  }

  // Distributions only describe flows that did their job: a refused or reset
  // flow has no meaningful completion time, and a partial flow (opened before
  // the daemon attached) has an unknown start.
  if (v.completed) {
    // Every completed flow, by size class: fct's population is the small
    // ones, the histogram is of all (the large ones' throughput is below).
    const uint32_t sc = size_class_index(bytes, options_.size_classes_bytes);
    s->fct->add(sc, size_class_names_[sc], [s] { return s->base(); },
                to_bucket_unit(Measure::kFct, std::max(0.0, v.time)));

    if (const auto& throughput = v.value[static_cast<int>(Measure::kThroughput)]) {
      if (!s->throughput) s->throughput = &throughput_->Add(s->base(), throughput_buckets_bytes_per_second());
      p.throughput.add(throughput_buckets_bytes_per_second(), to_bucket_unit(Measure::kThroughput, *throughput));
    }
    if (const auto& srtt = v.value[static_cast<int>(Measure::kRtt)]) {
      if (!s->srtt) s->srtt = &srtt_->Add(s->base(), rtt_buckets_seconds());
      p.srtt.add(rtt_buckets_seconds(), to_bucket_unit(Measure::kRtt, *srtt));
    }
    // The kernel's "no min_rtt yet" is ~0U.
    if (f.min_rtt_us && f.min_rtt_us != UINT32_MAX) {
      if (!s->min_rtt) s->min_rtt = &min_rtt_->Add(s->base(), rtt_buckets_seconds());
      p.min_rtt.add(rtt_buckets_seconds(), us_to_seconds(f.min_rtt_us));
    }
  }
  if (!batching_) publish_locked();
}

void Aggregator::add(const TransferRecord& t, AsnLabel asn, const RankedService& service) {
  add(t, metric_values(metric_inputs(t), metric_options_), asn, service);
}

void Aggregator::add(const TransferRecord& t, const MetricValues& v, AsnLabel asn, const RankedService& service) {
  std::lock_guard<std::mutex> lock(mu_);
  Series* s = series_for(t, asn, service);

  const size_t d = t.direction == TransferDirection::kRecv ? 1 : 0;
  const auto direction_labels = [s, &t] { return s->with("direction", to_string(t.direction)); };
  if (!s->transfers[d]) s->transfers[d] = &transfers_total_->Add(direction_labels());
  auto& p = s->pending;
  p.transfers[d] += t.sampling_rate;  // an estimate of every flow's transfers
  const uint32_t sc = size_class_index(t.bytes, options_.size_classes_bytes);
  s->transfer_seconds[d]->add(sc, size_class_names_[sc], direction_labels,
                              to_bucket_unit(Measure::kFct, std::max(0.0, v.time)));

  // What the path carried: throughput's population per transfer
  // (measure/measure.h). The transfers only the receiver's window kept out
  // of it are counted, so the histogram's share of them shows.
  if (const auto& throughput = v.value[static_cast<int>(Measure::kThroughput)]) {
    if (!s->transfer_throughput)
      s->transfer_throughput = &transfer_throughput_->Add(s->base(), throughput_buckets_bytes_per_second());
    p.transfer_throughput.add(throughput_buckets_bytes_per_second(), to_bucket_unit(Measure::kThroughput, *throughput));
  } else if (v.throughput_held_by_window) {
    if (!s->transfer_throughput_excluded)
      s->transfer_throughput_excluded = &transfer_throughput_excluded_->Add(s->with("reason", "rwnd_limited"));
    p.transfer_throughput_excluded += 1;
  }
  if (!batching_) publish_locked();
}

void Aggregator::begin_batch() {
  std::lock_guard<std::mutex> lock(mu_);
  batching_ = true;
}

void Aggregator::end_batch() {
  std::lock_guard<std::mutex> lock(mu_);
  batching_ = false;
  publish_locked();
}

void Aggregator::publish_locked() {
  for (Series* s : dirty_) {
    auto& p = s->pending;
    for (size_t d = 0; d < kDirs; ++d)
      for (size_t o = 0; o < kOutcomes; ++o)
        if (s->flows[d][o]) publish(s->flows[d][o], &p.flows[d][o]);
    publish(s->bytes_acked, &p.bytes_acked);
    publish(s->bytes_received, &p.bytes_received);
    publish(s->segments_out, &p.segments_out);
    publish(s->retrans_segments, &p.retrans_segments);
    for (size_t i = 0; i < kCaStates; ++i)
      if (s->ca_state[i]) publish(s->ca_state[i], &p.ca_state[i]);
    s->fct->publish();
    if (s->throughput) p.throughput.publish(s->throughput);
    if (s->srtt) p.srtt.publish(s->srtt);
    if (s->min_rtt) p.min_rtt.publish(s->min_rtt);
    for (size_t d = 0; d < kTransferDirections; ++d)
      if (s->transfers[d]) publish(s->transfers[d], &p.transfers[d]);
    for (auto& h : s->transfer_seconds) h->publish();
    if (s->transfer_throughput) p.transfer_throughput.publish(s->transfer_throughput);
    if (s->transfer_throughput_excluded) publish(s->transfer_throughput_excluded, &p.transfer_throughput_excluded);
    p.dirty = false;
  }
  dirty_.clear();
}

void Aggregator::retire_series(const AsnRanking& ranking) {
  std::lock_guard<std::mutex> lock(mu_);
  retire_locked(kAsn, options_.max_stale_asns, [&ranking](uint64_t asn) {
    return ranking.label(static_cast<uint32_t>(asn)) == AsnLabel::kOwn ? Rank::kTop : Rank::kOut;
  });
}

void Aggregator::retire_service_series(const ServiceRanking& ranking) {
  std::lock_guard<std::mutex> lock(mu_);
  retire_locked(kService, options_.max_stale_services, [&ranking](uint64_t key) {
    if (!ranking.tracked(key)) return Rank::kGone;  // no record for the grace period
    return ranking.label(key) == RankedLabel::kOwn ? Rank::kTop : Rank::kOut;
  });
}

void Aggregator::retire_locked(size_t dimension, size_t max_stale, const std::function<Rank(uint64_t)>& rank) {
  publish_locked();  // series may be removed below
  const Clock::time_point now = Clock::now();

  // Series of values that left the top-N no longer move; drop them after a
  // grace period so that churn does not grow the series count forever.
  auto expired = [&](Clock::time_point since) {
    return std::chrono::duration<double>(now - since).count() >= options_.stale_asn_seconds;
  };
  std::unordered_map<uint64_t, Clock::time_point> stale;  // key -> last time in the top-N
  for (auto it = series_.begin(); it != series_.end();) {
    Series* s = it->second.get();
    // Histograms of replaced size classes go after the same grace period.
    s->fct->remove_expired(expired);
    for (auto& h : s->transfer_seconds) h->remove_expired(expired);
    Series::Ranked& r = s->ranked[dimension];
    if (r.specific) {
      const Rank now_rank = rank(r.key);
      if (now_rank == Rank::kTop) {
        r.last_in_top = now;
      } else if (now_rank == Rank::kGone || expired(r.last_in_top)) {
        remove_series(s);
        it = series_.erase(it);
        continue;
      } else {
        auto& t = stale[r.key];
        t = std::max(t, r.last_in_top);
      }
    }
    ++it;
  }

  // At most max_stale values keep stale series: churn faster than the grace
  // period (the whole top-N replaced at every ranking) would otherwise
  // multiply the series count. The values out of the top-N longest go first.
  if (stale.size() > max_stale) {
    std::vector<std::pair<Clock::time_point, uint64_t>> oldest;
    oldest.reserve(stale.size());
    for (const auto& [key, t] : stale) oldest.emplace_back(t, key);
    const size_t drop = stale.size() - max_stale;
    std::partial_sort(oldest.begin(), oldest.begin() + static_cast<std::ptrdiff_t>(drop), oldest.end());
    std::set<uint64_t> gone;
    for (size_t i = 0; i < drop; ++i) gone.insert(oldest[i].second);
    for (auto it = series_.begin(); it != series_.end();) {
      Series* s = it->second.get();
      const Series::Ranked& r = s->ranked[dimension];
      if (r.specific && gone.count(r.key)) {
        remove_series(s);
        it = series_.erase(it);
      } else {
        ++it;
      }
    }
  }
}

void Aggregator::remove_series(Series* s) {
  bytes_acked_->Remove(s->bytes_acked);
  bytes_received_->Remove(s->bytes_received);
  segments_out_->Remove(s->segments_out);
  retrans_segments_->Remove(s->retrans_segments);
  for (auto* c : s->ca_state)
    if (c) ca_state_seconds_->Remove(c);
  for (auto& per_dir : s->flows)
    for (auto* c : per_dir)
      if (c) flows_total_->Remove(c);
  if (s->srtt) srtt_->Remove(s->srtt);
  if (s->min_rtt) min_rtt_->Remove(s->min_rtt);
  if (s->throughput) throughput_->Remove(s->throughput);
  s->fct->remove_all();
  for (auto* c : s->transfers)
    if (c) transfers_total_->Remove(c);
  for (auto& h : s->transfer_seconds) h->remove_all();
  if (s->transfer_throughput) transfer_throughput_->Remove(s->transfer_throughput);
  if (s->transfer_throughput_excluded) transfer_throughput_excluded_->Remove(s->transfer_throughput_excluded);
}

void Aggregator::set_active_flows(const ActiveFlows& active) {
  std::lock_guard<std::mutex> lock(mu_);
  for (auto& [key, gauge] : active_gauges_)
    if (!active.count(key)) gauge->Set(0);
  for (const auto& [key, n] : active) {
    auto it = active_gauges_.find(key);
    if (it == active_gauges_.end())
      it = active_gauges_.emplace(key, &active_flows_->Add({{"peer_class", key.first}, {"cc", key.second}})).first;
    it->second->Set(static_cast<double>(n));
  }
}

void Aggregator::update_options(AggregatorOptions options) {
  std::lock_guard<std::mutex> lock(mu_);
  publish_locked();  // pending FCT and transfer-time observations are per size class of the old options
  const bool classes_changed = options.size_classes_bytes != options_.size_classes_bytes;
  options_ = std::move(options);
  metric_options_ = options_.metric_options();
  if (classes_changed) {
    // Histograms of the old size classes keep their values under their old
    // labels for stale_asn_seconds (a scrape sees no counter vanish at the
    // reload), then retire_series() removes them; new flows go to the new
    // classes. A class whose name (hence range) is in force again keeps or
    // gets back its histogram: the registry holds one series per label set.
    const auto old_names = std::move(size_class_names_);
    size_class_names_ = size_class_names(options_.size_classes_bytes);
    const Clock::time_point now = Clock::now();
    for (auto& [key, s] : series_) {
      s->fct->reclass(old_names, size_class_names_, now);
      for (auto& h : s->transfer_seconds) h->reclass(old_names, size_class_names_, now);
    }
  }
}

std::string Aggregator::size_class_label(uint64_t bytes) const {
  std::lock_guard<std::mutex> lock(mu_);
  return size_class_names_[size_class_index(bytes, options_.size_classes_bytes)];
}

size_t Aggregator::label_sets() const {
  std::lock_guard<std::mutex> lock(mu_);
  return series_.size();
}

}  // namespace tcpscope
