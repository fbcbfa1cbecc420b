#include "export/kafka_export.h"

#include <gtest/gtest.h>
#include <prometheus/registry.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>

#include "export/kafka_protobuf.h"
#include "record/flow_json.h"
#include "record/transfer_json.h"
#include "record/transfer_sampling.h"

namespace tcpscope {
namespace {

// What these outputs never read: a record's metrics.
const MetricValues kNoMetrics;

KafkaConfig broker_at(const std::string& address) {
  KafkaConfig k;
  k.brokers = {address};
  k.linger_ms = 0;
  k.queue_bytes = 1 << 20;
  return k;
}

std::string temp_file(const std::string& content, mode_t mode) {
  char path[] = "/tmp/tcpscope-kafka-test-XXXXXX";
  const int fd = mkstemp(path);
  EXPECT_GE(fd, 0);
  EXPECT_EQ(write(fd, content.data(), content.size()), static_cast<ssize_t>(content.size()));
  fchmod(fd, mode);
  close(fd);
  return path;
}

// A flow's records share a bucket; flows, sampled or not, spread over all.
TEST(KafkaBucket, AFlowKeepsItsBucketAndFlowsSpreadOverAll) {
  EXPECT_EQ(kafka_bucket(1'764'000'000'123'456'789), kafka_bucket(1'764'000'000'123'456'789));
  uint32_t all[kKafkaBuckets] = {}, sampled[kKafkaBuckets] = {};
  const int n = 64000;
  int n_sampled = 0;
  for (int i = 0; i < n; ++i) {
    const int64_t start = 1'764'000'000'000'000'000 + 1'234'567 * int64_t(i);
    const uint32_t b = kafka_bucket(start);
    ASSERT_LT(b, kKafkaBuckets);
    ++all[b];
    if (transfer_sampled(443, static_cast<uint16_t>(1024 + i % 64000), 16)) ++sampled[b], ++n_sampled;
  }
  for (uint32_t b = 0; b < kKafkaBuckets; ++b) {
    EXPECT_NEAR(all[b], n / kKafkaBuckets, n / kKafkaBuckets / 10) << b;
    EXPECT_NEAR(sampled[b], n_sampled / kKafkaBuckets, n_sampled / kKafkaBuckets / 3) << b;
  }
  EXPECT_EQ(kafka_bucket_key("tcpscope@edge-1", 7), "tcpscope@edge-1/7");
}

TEST(KafkaProperties, IdempotentNoDeliveryTimeoutAndTheQueueBound) {
  KafkaConfig k = broker_at("kafka-1:9092");
  k.brokers.push_back("kafka-2:9092");
  k.queue_bytes = 64 << 20;
  KafkaProperties p;
  std::string error;
  ASSERT_TRUE(kafka_properties(k, &p, &error)) << error;
  auto get = [&](const std::string& name) {
    for (const auto& [n, v] : p)
      if (n == name) return v;
    return std::string("(unset)");
  };
  EXPECT_EQ(get("bootstrap.servers"), "kafka-1:9092,kafka-2:9092");
  EXPECT_EQ(get("enable.idempotence"), "true");
  EXPECT_EQ(get("message.timeout.ms"), "0");
  // Above queue_bytes: the export keeps that bound itself, exactly.
  EXPECT_GT(std::stoul(get("queue.buffering.max.kbytes")), 65536u);
  EXPECT_EQ(get("compression.codec"), "zstd");
  EXPECT_EQ(get("sasl.password"), "(unset)");
}

TEST(KafkaProperties, SaslPasswordComesFromAPrivateFile) {
  KafkaConfig k = broker_at("kafka-1:9092");
  k.security_protocol = "sasl_plaintext";
  k.sasl_mechanism = "SCRAM-SHA-256";
  k.sasl_username = "edge";
  KafkaProperties p;
  std::string error;
  k.sasl_password_file = temp_file("s3cret\n", 0600);
  ASSERT_TRUE(kafka_properties(k, &p, &error)) << error;
  bool found = false;
  for (const auto& [n, v] : p) found = found || (n == "sasl.password" && v == "s3cret");
  EXPECT_TRUE(found);
  std::remove(k.sasl_password_file.c_str());

  k.sasl_password_file = temp_file("s3cret\n", 0644);
  EXPECT_FALSE(kafka_properties(k, &p, &error));
  EXPECT_NE(error.find("readable or writable by group or others"), std::string::npos) << error;
  std::remove(k.sasl_password_file.c_str());

  k.sasl_password_file = "/nonexistent/kafka.pw";
  EXPECT_FALSE(kafka_properties(k, &p, &error));
  EXPECT_NE(error.find("/nonexistent/kafka.pw: No such file or directory"), std::string::npos) << error;
}

TEST(CheckKafkaConfig, LibrdkafkaJudgesTheSettings) {
  std::string error;
  EXPECT_TRUE(check_kafka_config(broker_at("127.0.0.1:9"), &error)) << error;
  KafkaConfig k = broker_at("127.0.0.1:9");
  k.security_protocol = "ssl";
  k.tls_ca_file = "/nonexistent/ca.pem";
  EXPECT_FALSE(check_kafka_config(k, &error));
  EXPECT_NE(error.find("export.kafka"), std::string::npos) << error;
}

// No broker listens: every record stays queued until the queue is full, the
// rest are dropped and counted, and at close the queued ones fail; each
// record is counted exactly once as dropped or failed.
TEST(KafkaExport, WithoutBrokersTheQueueBoundsWhatIsKeptAndEveryRecordIsCounted) {
  auto registry = std::make_shared<prometheus::Registry>();
  std::string error;
  auto x = KafkaExport::open(broker_at("127.0.0.1:9"), registry, &error);  // discard port: refused
  ASSERT_TRUE(x) << error;
  const std::string record(1000, 'x');
  const int n = 3000;  // 3 MB into a 1 MiB queue
  for (int i = 0; i < n; ++i) {
    x->produce(KafkaRecordKind::kFlow, i % kKafkaBuckets, record);
    if (i % 100 == 99) x->send();
  }
  x->update_metrics();
  const uint64_t dropped_before_close = x->lost();
  EXPECT_GE(dropped_before_close, 3000u - 1049u);
  EXPECT_LT(dropped_before_close, 3000u);
  x->close(100);
  EXPECT_EQ(x->lost(), 3000u);
}

double queue_bytes(prometheus::Registry& registry) {
  for (const auto& family : registry.Collect())
    if (family.name == "tcpscope_kafka_queue_bytes") return family.metric.at(0).gauge.value;
  ADD_FAILURE() << "no tcpscope_kafka_queue_bytes";
  return -1;
}

// What the export queues for a record: with json the caller's line as it
// is, or the record's JSON when the caller has none; with protobuf the
// message of kafka_protobuf.h, whatever line the caller has. No broker
// listens, so the queue keeps every message.
TEST(KafkaExport, QueuesEachRecordInTheConfiguredFormat) {
  FlowRecord flow;
  flow.laddr = *IpAddr::parse("198.18.0.1");
  flow.raddr = *IpAddr::parse("198.18.0.2");
  flow.cc = "bbr";
  TransferRecord transfer;
  transfer.cc = "cubic";
  std::string flow_json, transfer_json, flow_protobuf, transfer_protobuf;
  append_json(flow, &flow_json);
  append_json(transfer, &transfer_json);
  append_protobuf(flow, &flow_protobuf);
  append_protobuf(transfer, &transfer_protobuf);
  ASSERT_NE(flow_json.size(), flow_protobuf.size());

  for (const std::string format : {"json", "protobuf"}) {
    auto registry = std::make_shared<prometheus::Registry>();
    KafkaConfig k = broker_at("127.0.0.1:9");
    k.format = format;
    std::string error;
    auto x = KafkaExport::open(k, registry, &error);
    ASSERT_TRUE(x) << error;
    const bool json = format == "json";
    double want = 0;
    std::string line;
    x->produce(RoutedFlow(flow, kNoMetrics, AsnLabel::kOwn, &line));
    want += json ? flow_json.size() : flow_protobuf.size();
    x->update_metrics();
    EXPECT_EQ(queue_bytes(*registry), want) << format << ": a flow";
    // The line another output made already is the one sent.
    RoutedFlow written(flow, kNoMetrics, AsnLabel::kOwn, &line);
    EXPECT_EQ(written.json(), flow_json);
    line = "a flow log line\n";
    x->produce(written);
    want += json ? 16 : flow_protobuf.size();
    x->produce(RoutedTransfer(transfer, kNoMetrics, AsnLabel::kOwn, &line));
    want += json ? transfer_json.size() : transfer_protobuf.size();
    x->update_metrics();
    EXPECT_EQ(queue_bytes(*registry), want) << format;
    // Handed to librdkafka, as one message per bucket: still queued.
    x->send();
    x->update_metrics();
    EXPECT_EQ(queue_bytes(*registry), want) << format << ": sent";
    x->close(0);
    EXPECT_EQ(x->lost(), 3u) << format << ": each record counted once as failed at close";
  }

  // A kind without a topic is not exported.
  auto registry = std::make_shared<prometheus::Registry>();
  KafkaConfig k = broker_at("127.0.0.1:9");
  k.topic_transfers = "";
  std::string error;
  auto x = KafkaExport::open(k, registry, &error);
  ASSERT_TRUE(x) << error;
  std::string line;
  x->produce(RoutedTransfer(transfer, kNoMetrics, AsnLabel::kOwn, &line));
  x->update_metrics();
  EXPECT_EQ(queue_bytes(*registry), 0);
  x->close(0);
}

}  // namespace
}  // namespace tcpscope
