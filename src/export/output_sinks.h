// The outputs that send records somewhere that can fail, as record sinks
// (pipeline/record_sink.h): the flow log (a disk) and the Kafka export
// (brokers). Each serialises what it sends (every transfer record: the
// kernel hands over only those of the flows it follows) and says through
// OutputStatus when it fails.
#pragma once

#include <memory>
#include <string>

#include "config/config.h"
#include "export/daemon_health.h"
#include "export/flow_log.h"
#include "export/kafka_export.h"
#include "export/output_status.h"
#include "pipeline/record_sink.h"

namespace tcpscope {

// What the two share: an output's health, logged and shown on /healthz.
class OutputSink : public RecordSink {
 public:
  void tick(Clock::time_point now) override;
  std::string failure() const override { return status_.health(); }

 protected:
  OutputSink(std::string name, LogLine log) : status_(std::move(name)), log_(std::move(log)) {}
  // The output's last error ("" once it works again) and its cumulative
  // lost records, sampled every tick.
  virtual std::string last_error() const = 0;
  virtual uint64_t lost() const = 0;

 private:
  OutputStatus status_;
  LogLine log_;
};

// NDJSON lines, a drain's worth at a time, to the flow log's writer thread.
class FlowLogSink final : public OutputSink {
 public:
  // nullptr and *error when the path cannot be opened (owned_file.h).
  static std::unique_ptr<FlowLogSink> open(const Config& config, DaemonHealth& self, LogLine log,
                                           std::string* error);

  void add(const RoutedFlow& flow) override { append(flow.json()); }
  void add(const RoutedTransfer& transfer) override {
    if (transfers_) append(transfer.json());
  }
  void end_drain() override { hand_on(); }
  void apply_config(const Config& config) override { transfers_ = config.flow_log_transfers; }
  void tick(Clock::time_point now) override;
  void close(std::chrono::milliseconds timeout) override;

  // logrotate moved the file: reopen its path. Any thread.
  bool reopen(std::string* error) { return log_->reopen(error); }

 private:
  FlowLogSink(std::unique_ptr<FlowLog> log, bool transfers, DaemonHealth& self, LogLine log_line);
  std::string last_error() const override { return log_->last_error(); }
  uint64_t lost() const override { return log_->dropped_records(); }
  void append(std::string_view line);
  void hand_on();

  std::unique_ptr<FlowLog> log_;
  bool transfers_;
  DaemonHealth& self_;
  std::string batch_;  // whole lines not yet handed to the writer
  uint64_t batch_records_ = 0;
};

// Records in export.kafka.format to their topics, a message per bucket per drain.
class KafkaSink final : public OutputSink {
 public:
  // nullptr and *error when librdkafka refuses the configuration.
  static std::unique_ptr<KafkaSink> open(const KafkaConfig& config,
                                         const std::shared_ptr<prometheus::Registry>& registry, LogLine log,
                                         std::string* error);

  void add(const RoutedFlow& flow) override;
  void add(const RoutedTransfer& transfer) override;
  void end_drain() override { kafka_->send(); }
  void tick(Clock::time_point now) override;
  void close(std::chrono::milliseconds timeout) override;

 private:
  KafkaSink(std::unique_ptr<KafkaExport> kafka, LogLine log);
  std::string last_error() const override { return kafka_->last_error(); }
  uint64_t lost() const override { return kafka_->lost(); }

  std::unique_ptr<KafkaExport> kafka_;
};

}  // namespace tcpscope
