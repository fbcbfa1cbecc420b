// Flow and transfer records to the fleet's Kafka (`export.kafka`, docs/fleet.md
// "Fleet"): each record in export.kafka.format, the flow log's JSON line
// (newline included) or the length-delimited Protobuf message of
// packaging/clickhouse/tcpscope.proto (kafka_protobuf.h), flows and
// transfers on their own topics. Both formats say where a record ends, so a
// Kafka message carries several: the records of one drain of the ring that
// fall in the same bucket (kKafkaBuckets, by the flow's hash) go out as one
// message, up to kKafkaMaxMessageBytes. librdkafka's cost is per message;
// at low rates a message is still one record, at request rates it is many.
//
// librdkafka does the batching, compression, retries and idempotence; its
// own queue is the bound: produce() copies the record into it and returns at
// once, and when the queue holds queue_bytes the record is dropped and
// counted instead of stalling the ring-buffer reader. A message waits in the
// queue for as long as the brokers are away (no delivery timeout), so an
// outage loses only what does not fit. Every record is counted once as
// queued and, later, once as delivered or failed (a broker refused it for
// good, or it was still queued when the daemon stopped); records that did
// not fit are counted as dropped and never as queued.
//
// A message's key is its bucket's (kafka_bucket_key), so a flow's record
// and its transfers' land in the same partition of their topics.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <thread>
#include <utility>
#include <vector>

#include "config/config.h"
#include "pipeline/record_sink.h"
#include "prometheus_helpers/total_counter.h"
#include "record/flow_record.h"
#include "record/transfer_record.h"

namespace prometheus {
class Gauge;
class Registry;
}  // namespace prometheus

struct rd_kafka_s;
struct rd_kafka_topic_s;

namespace tcpscope {

enum class KafkaRecordKind { kFlow, kTransfer };
constexpr int kKafkaRecordKinds = 2;

// "HOST:PORT,HOST:PORT": the brokers as librdkafka and log lines take them.
std::string kafka_broker_list(const KafkaConfig& config);

// The librdkafka properties of `config`, the SASL password read from its
// file (which only its owner may read). False and *error naming the file.
using KafkaProperties = std::vector<std::pair<std::string, std::string>>;
bool kafka_properties(const KafkaConfig& config, KafkaProperties* out, std::string* error);
// Whether librdkafka accepts the configuration (check-config): creates the
// producer without producing anything and destroys it. False and *error
// naming the setting.
bool check_kafka_config(const KafkaConfig& config, std::string* error);

// A flow's bucket: the top bits of the hash transfer sampling uses (whose
// low bits pick the sampled flows, so those spread over every bucket). The
// flow's record and its transfers share it, both knowing the flow's start.
constexpr int kKafkaBucketBits = 4;
constexpr uint32_t kKafkaBuckets = 1u << kKafkaBucketBits;
uint32_t kafka_bucket(int64_t flow_start_ns);
// A bucket's message key: "<client.id>/<bucket>". The client id in it
// spreads a fleet's servers over every partition, not just kKafkaBuckets.
std::string kafka_bucket_key(const std::string& client_id, uint32_t bucket);
// A bucket's message is sent once it holds this much, drain or not: well
// under the brokers' default message.max.bytes (1 MB) after compression.
constexpr size_t kKafkaMaxMessageBytes = 256 * 1024;

class KafkaExport {
 public:
  // Creates the producer (it connects in the background: brokers that are
  // down now are retried) and its metrics:
  //   tcpscope_kafka_records_total{kind="flow"|"transfer", result="queued"|"delivered"|"failed"|"dropped"}
  //   tcpscope_kafka_queue_bytes, tcpscope_kafka_queue_fill_ratio
  // nullptr and *error when the configuration is refused.
  static std::unique_ptr<KafkaExport> open(const KafkaConfig& config,
                                           const std::shared_ptr<prometheus::Registry>& registry,
                                           std::string* error);
  ~KafkaExport();
  KafkaExport(const KafkaExport&) = delete;
  KafkaExport& operator=(const KafkaExport&) = delete;

  bool exports(KafkaRecordKind kind) const { return topics_[static_cast<int>(kind)] != nullptr; }
  // Queues one record in export.kafka.format, if its kind is exported;
  // never blocks. json sends the record's line (the one the flow log writes
  // too, made once for both), protobuf its message. The daemon's loop thread
  // only, as are the two below.
  void produce(const RoutedFlow& flow);
  void produce(const RoutedTransfer& transfer);
  // Queues one record already in the configured format, in `bucket`.
  void produce(KafkaRecordKind kind, uint32_t bucket, std::string_view record);
  // Hands every bucket's records to librdkafka, a message per bucket (the
  // daemon, after each drain of the ring).
  void send();
  // Waits up to timeout_ms for the queue to drain; what is left is counted
  // as failed. The producer is unusable afterwards.
  void close(int timeout_ms);

  // The last error from the brokers or a delivery ("" once a delivery
  // succeeds after it), for OutputStatus.
  std::string last_error() const;
  uint64_t lost() const;  // dropped + failed, cumulative
  // Samples the counters into the metrics (the daemon's tick).
  void update_metrics();

 private:
  struct Counts {
    std::atomic<uint64_t> queued{0}, delivered{0}, failed{0}, dropped{0};
  };
  // A bucket's records not yet handed to librdkafka.
  struct Pending {
    std::string bytes;
    uint32_t records = 0;
  };
  KafkaExport(const KafkaConfig& config, const std::shared_ptr<prometheus::Registry>& registry);
  template <class Record>
  void produce_record(KafkaRecordKind kind, const Routed<Record>& routed);
  void send(int kind, uint32_t bucket);
  void on_delivery(int kind, uint32_t records, size_t bytes, bool ok, const char* error);
  void set_error(std::string error);
  void poll_loop();

  const uint64_t queue_bytes_;
  const bool protobuf_;
  std::string protobuf_scratch_;  // a record's message in protobuf
  rd_kafka_s* rk_ = nullptr;
  rd_kafka_topic_s* topics_[kKafkaRecordKinds] = {nullptr, nullptr};
  std::string keys_[kKafkaBuckets];
  Pending pending_[kKafkaRecordKinds][kKafkaBuckets];
  Counts counts_[kKafkaRecordKinds];
  // Pending and in librdkafka's queue: what queue_bytes bounds.
  std::atomic<uint64_t> in_queue_bytes_{0};
  mutable std::mutex error_mu_;
  std::string last_error_;
  std::atomic<bool> has_error_{false};
  std::atomic<bool> stop_{false};
  std::thread poller_;

  TotalCounter queued_[kKafkaRecordKinds], delivered_[kKafkaRecordKinds], failed_[kKafkaRecordKinds],
      dropped_[kKafkaRecordKinds];
  prometheus::Gauge* queue_bytes_gauge_ = nullptr;
  prometheus::Gauge* queue_fill_ = nullptr;
};

}  // namespace tcpscope
