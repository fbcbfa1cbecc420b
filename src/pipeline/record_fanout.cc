#include "pipeline/record_fanout.h"

#include "config/config.h"

namespace tcpscope {

namespace {
constexpr auto kRankingEvery = std::chrono::seconds(60);
}  // namespace

namespace {
MetricOptions metric_options_of(const Config& config) {
  return {config.size_classes_bytes, config.throughput_min_bytes};
}
}  // namespace

RecordFanout::RecordFanout(FlowPipeline& pipeline, const Config& config)
    : pipeline_(pipeline),
      ranking_(AsnRankingOptions::from_config(config)),
      services_(ServiceRanking::options_from_config(config)),
      metric_options_(metric_options_of(config)) {}

void RecordFanout::begin_drain(Clock::time_point now) {
  for (RecordSink* s : sinks_) s->begin_drain(now);
}

void RecordFanout::end_drain() {
  for (RecordSink* s : sinks_) s->end_drain();
}

void RecordFanout::on_close(const tcpscope_close_event& ev) {
  const FlowRecord flow = pipeline_.record_of(ev.flow);
  for (uint32_t i = 0; i < ev.n_transfers; ++i) route(pipeline_.record_of(ev.transfers[i], flow));
  route(flow);
}

void RecordFanout::route(const FlowRecord& flow) {
  const uint64_t bytes = flow.bytes_acked + flow.bytes_received;
  const AsnRanking::Counted asn = ranking_.add(flow.enrichment.asn, bytes);
  const ServiceRanking::Counted service = services_.count(flow.enrichment, bytes);
  const MetricValues values = metric_values(metric_inputs(flow), metric_options_);
  const RoutedFlow routed(flow, values, asn.label, &json_, service.service);
  for (RecordSink* s : sinks_) s->add(routed);
  if (asn.reranked) ranking_changed();
  if (service.reranked) service_ranking_changed();
}

// A transfer's bytes are its flow's: it takes its ASN's and service's labels
// without being counted in the rankings.
void RecordFanout::route(const TransferRecord& transfer) {
  const MetricValues values = metric_values(metric_inputs(transfer), metric_options_);
  const RoutedTransfer routed(transfer, values, ranking_.label(transfer.enrichment.asn), &json_,
                              services_.ranked(transfer.enrichment));
  for (RecordSink* s : sinks_) s->add(routed);
}

void RecordFanout::ranking_changed() {
  for (RecordSink* s : sinks_) s->asn_ranking_changed(ranking_);
}

void RecordFanout::service_ranking_changed() {
  for (RecordSink* s : sinks_) s->service_ranking_changed(services_);
}

void RecordFanout::tick(Clock::time_point now) {
  if (now - last_ranking_ >= kRankingEvery) {
    ranking_.recompute();
    ranking_changed();
    services_.recompute();
    service_ranking_changed();
    last_ranking_ = now;
  }
  for (RecordSink* s : sinks_) s->tick(now);
}

void RecordFanout::apply_config(const Config& config) {
  metric_options_ = metric_options_of(config);
  for (RecordSink* s : sinks_) s->apply_config(config);
  if (ranking_.update_options(AsnRankingOptions::from_config(config))) ranking_changed();
  if (services_.update_options(ServiceRanking::options_from_config(config))) service_ranking_changed();
}

std::string RecordFanout::failures() const {
  std::string all;
  for (const RecordSink* s : sinks_) {
    const std::string f = s->failure();
    if (!f.empty()) all += (all.empty() ? "" : "; ") + f;
  }
  return all;
}

void RecordFanout::close(std::chrono::milliseconds timeout) {
  for (RecordSink* s : sinks_) s->close(timeout);
}

}  // namespace tcpscope
