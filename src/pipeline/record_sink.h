// Where records go after the pipeline. The Prometheus series, the
// distributions, the controller, the flow log and Kafka each take every
// record through this one interface (envoy's stats sink is the model) and
// serialise what they send themselves; the daemon only wires them, and
// RecordFanout (record_fanout.h) hands each record to every sink in turn.
//
// Every call comes from the daemon's loop thread.
#pragma once

#include <chrono>
#include <functional>
#include <string>
#include <string_view>

#include "measure/measure.h"
#include "pipeline/asn_ranking.h"
#include "pipeline/service_ranking.h"
#include "record/flow_json.h"
#include "record/flow_record.h"
#include "record/transfer_json.h"
#include "record/transfer_record.h"

namespace tcpscope {

struct Config;

// One line for the daemon's log (stderr, journald).
using LogLine = std::function<void(const std::string&)>;

// A record with what was worked out once for all sinks.
template <class Record>
class Routed {
 public:
  Routed(const Record& record, const MetricValues& values, AsnLabel asn_label, std::string* json_scratch,
         RankedService service = {})
      : record(record), values(values), asn_label(asn_label), service(service), json_(json_scratch) {}

  const Record& record;
  // Its metrics (measure/measure.h), by the config in force.
  const MetricValues& values;
  // By the ASN ranking in force before this record.
  const AsnLabel asn_label;
  // Its owner's key and label by the service ranking, as asn_label.
  const RankedService service;

  // The record's JSON line (record/flow_json.h), serialised by the first
  // sink that asks, so the flow log and a JSON Kafka export pay for one.
  std::string_view json() const {
    if (!serialised_) {
      json_->clear();
      append_json(record, json_);
      serialised_ = true;
    }
    return *json_;
  }

 private:
  std::string* json_;
  mutable bool serialised_ = false;
};
using RoutedFlow = Routed<FlowRecord>;
using RoutedTransfer = Routed<TransferRecord>;

class RecordSink {
 public:
  using Clock = std::chrono::steady_clock;

  virtual ~RecordSink() = default;

  // A drain of the ring buffer starts: its records arrive together, and
  // `now` stands for all of them (one clock read per drain, which lasts
  // milliseconds, against windows of minutes).
  virtual void begin_drain(Clock::time_point now) { (void)now; }
  virtual void add(const RoutedFlow& flow) = 0;
  virtual void add(const RoutedTransfer& transfer) = 0;
  // The drain's records are all in: publish them, hand them on, send them.
  virtual void end_drain() {}

  // The ranking now gives other ASNs a label of their own.
  virtual void asn_ranking_changed(const AsnRanking& ranking) { (void)ranking; }
  // The same for services; also after it forgot services gone quiet.
  virtual void service_ranking_changed(const ServiceRanking& ranking) { (void)ranking; }
  // SIGHUP: the config in force from now on (already checked and merged).
  virtual void apply_config(const Config& config) { (void)config; }
  // The loop's tick: counters into metrics, periodic work.
  virtual void tick(Clock::time_point now) { (void)now; }
  // What /healthz says of this sink while it fails (its name and the error),
  // "" while it works. Up to date after tick().
  virtual std::string failure() const { return {}; }
  // The daemon stops: what the sink still holds leaves within `timeout`.
  virtual void close(std::chrono::milliseconds timeout) { (void)timeout; }
};

}  // namespace tcpscope
