// The ring buffer's records, through the pipeline, to every sink: each
// record is decoded and enriched once (FlowPipeline), labelled by the ASN
// and service rankings once, and then handed to the sinks
// in the order they were added. A closed flow's transfers go first, as the
// kernel ended them before the flow.
//
// The daemon's loop thread is its only caller.
#pragma once

#include <chrono>
#include <string>
#include <vector>

#include "pipeline/asn_ranking.h"
#include "pipeline/flow_pipeline.h"
#include "pipeline/record_sink.h"
#include "pipeline/service_ranking.h"
#include "tcpscope/flow_event.h"

namespace tcpscope {

class RecordFanout {
 public:
  using Clock = std::chrono::steady_clock;

  // `pipeline` must outlive the fanout.
  RecordFanout(FlowPipeline& pipeline, const Config& config);

  // The sinks see records in the order they were added; each must outlive
  // the fanout.
  void add_sink(RecordSink* sink) { sinks_.push_back(sink); }

  void begin_drain(Clock::time_point now);
  void on_flow(const tcpscope_flow_event& ev) { route(pipeline_.record_of(ev)); }
  void on_transfer(const tcpscope_transfer_event& ev) { route(pipeline_.record_of(ev)); }
  // The transfers first, enriched once, with their flow.
  void on_close(const tcpscope_close_event& ev);
  void end_drain();

  // The sinks' ticks; new ASN and service rankings once a minute.
  void tick(Clock::time_point now);
  void apply_config(const Config& config);
  // Every failing sink's failure, "; "-separated; "" while all work.
  std::string failures() const;
  void close(std::chrono::milliseconds timeout);

 private:
  void route(const FlowRecord& flow);
  // Only the kernel's followed flows have transfer records (transfer_sampling.h).
  void route(const TransferRecord& transfer);
  void ranking_changed();
  void service_ranking_changed();

  FlowPipeline& pipeline_;
  AsnRanking ranking_;
  ServiceRanking services_;
  std::vector<RecordSink*> sinks_;
  MetricOptions metric_options_;  // what the records' metrics read (MetricValues)
  std::string json_;  // the current record's JSON line, when a sink asks for it
  Clock::time_point last_ranking_ = Clock::now();
};

}  // namespace tcpscope
