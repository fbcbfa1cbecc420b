#include "export/output_sinks.h"

namespace tcpscope {

namespace {
constexpr size_t kFlowLogQueueBytes = 64u << 20;
// Under sustained overload one drain can last long: the writer gets
// bounded batches instead of one that grows without limit.
constexpr size_t kMaxBatchBytes = 4u << 20;
}  // namespace

void OutputSink::tick(Clock::time_point now) {
  for (const auto& line : status_.update(last_error(), lost(), now)) log_(line);
}

std::unique_ptr<FlowLogSink> FlowLogSink::open(const Config& config, DaemonHealth& self, LogLine log,
                                               std::string* error) {
  auto file = FlowLog::open(config.flow_log, kFlowLogQueueBytes, error);
  if (!file) return nullptr;
  return std::unique_ptr<FlowLogSink>(
      new FlowLogSink(std::move(file), config.flow_log_transfers, self, std::move(log)));
}

FlowLogSink::FlowLogSink(std::unique_ptr<FlowLog> log, bool transfers, DaemonHealth& self, LogLine log_line)
    : OutputSink("flow log", std::move(log_line)), log_(std::move(log)), transfers_(transfers), self_(self) {}

void FlowLogSink::append(std::string_view line) {
  batch_.append(line);
  ++batch_records_;
  if (batch_.size() >= kMaxBatchBytes) hand_on();
}

void FlowLogSink::hand_on() {
  if (!batch_records_) return;
  log_->submit(std::move(batch_), batch_records_);
  batch_.clear();
  batch_records_ = 0;
}

void FlowLogSink::tick(Clock::time_point now) {
  self_.set_flow_log_dropped(log_->dropped_records());
  OutputSink::tick(now);
}

void FlowLogSink::close(std::chrono::milliseconds timeout) {
  hand_on();
  log_->close(static_cast<int>(timeout.count()));
}

std::unique_ptr<KafkaSink> KafkaSink::open(const KafkaConfig& config,
                                           const std::shared_ptr<prometheus::Registry>& registry, LogLine log,
                                           std::string* error) {
  auto kafka = KafkaExport::open(config, registry, error);
  if (!kafka) return nullptr;
  return std::unique_ptr<KafkaSink>(new KafkaSink(std::move(kafka), std::move(log)));
}

KafkaSink::KafkaSink(std::unique_ptr<KafkaExport> kafka, LogLine log)
    : OutputSink("kafka export", std::move(log)), kafka_(std::move(kafka)) {}

void KafkaSink::add(const RoutedFlow& flow) { kafka_->produce(flow); }

void KafkaSink::add(const RoutedTransfer& transfer) { kafka_->produce(transfer); }

void KafkaSink::tick(Clock::time_point now) {
  kafka_->update_metrics();
  OutputSink::tick(now);
}

void KafkaSink::close(std::chrono::milliseconds timeout) {
  kafka_->send();
  kafka_->close(static_cast<int>(timeout.count()));
}

}  // namespace tcpscope
