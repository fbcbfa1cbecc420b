// The Prometheus series and the distributions as record sinks
// (pipeline/record_sink.h): each takes every record under its ASN's and
// service's labels, a drain at a time.
#pragma once

#include "aggregate/aggregator.h"
#include "aggregate/flow_distributions.h"
#include "pipeline/record_sink.h"

namespace tcpscope {

class AggregatorSink final : public RecordSink {
 public:
  AggregatorSink(std::shared_ptr<prometheus::Registry> registry, AggregatorOptions options)
      : aggregator_(std::move(registry), std::move(options)) {}
  Aggregator& aggregator() { return aggregator_; }

  // A drain's records reach the registry together (Aggregator::begin_batch).
  void begin_drain(Clock::time_point) override { aggregator_.begin_batch(); }
  void add(const RoutedFlow& flow) override {
    aggregator_.add(flow.record, flow.values, flow.asn_label, flow.service);
  }
  void add(const RoutedTransfer& transfer) override {
    aggregator_.add(transfer.record, transfer.values, transfer.asn_label, transfer.service);
  }
  void end_drain() override { aggregator_.end_batch(); }
  void asn_ranking_changed(const AsnRanking& ranking) override { aggregator_.retire_series(ranking); }
  void service_ranking_changed(const ServiceRanking& ranking) override {
    aggregator_.retire_service_series(ranking);
  }
  void apply_config(const Config& config) override;

 private:
  Aggregator aggregator_;
};

class DistributionsSink final : public RecordSink {
 public:
  DistributionsSink(FlowDistributionsOptions options, LogLine log)
      : distributions_(std::move(options)), log_(std::move(log)) {}
  // For /api/v1/distributions (its queries lock it; any thread).
  FlowDistributions& distributions() { return distributions_; }

  void begin_drain(Clock::time_point now) override { drain_time_ = now; }
  // Keyed by the raw ASN and service (as the flow log); the ASN's label
  // only decides whether a new key may still be added when the table is full.
  void add(const RoutedFlow& flow) override {
    distributions_.add_at(flow.record, flow.values, flow.asn_label, drain_time_, flow.service);
  }
  void add(const RoutedTransfer& transfer) override {
    distributions_.add_at(transfer.record, transfer.values, transfer.asn_label, drain_time_, transfer.service);
  }
  void apply_config(const Config& config) override;

 private:
  FlowDistributions distributions_;
  LogLine log_;
  Clock::time_point drain_time_ = Clock::now();
};

}  // namespace tcpscope
