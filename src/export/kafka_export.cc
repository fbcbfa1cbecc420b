#include "export/kafka_export.h"

#include <fcntl.h>
#include <librdkafka/rdkafka.h>
#include <prometheus/counter.h>
#include <prometheus/family.h>
#include <prometheus/gauge.h>
#include <prometheus/registry.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>

#include "export/kafka_protobuf.h"
#include "record/transfer_sampling.h"

namespace tcpscope {

namespace {

constexpr const char* kKindNames[kKafkaRecordKinds] = {"flow", "transfer"};
constexpr size_t kMaxPasswordBytes = 4096;
// librdkafka's own limit on queued messages; the byte bound is the one that
// matters (a record is ~0.5-1 KB), so this is set out of its way.
constexpr const char* kMaxQueuedMessages = "10000000";

// A secret file: a regular file owned by this process's user that no one
// else may read, not a symlink. Its content without trailing newlines.
bool read_secret_file(const std::string& path, std::string* out, std::string* error) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK);
  if (fd < 0) {
    *error = path + ": " + std::strerror(errno);
    return false;
  }
  struct stat st {};
  std::string why;
  if (fstat(fd, &st) != 0) {
    why = std::strerror(errno);
  } else if (!S_ISREG(st.st_mode)) {
    why = "not a regular file";
  } else if (st.st_uid != geteuid()) {
    why = "owned by uid " + std::to_string(st.st_uid) + ", not by this process's user";
  } else if (st.st_mode & 077) {
    why = "readable or writable by group or others (chmod 600 it)";
  } else if (st.st_size > static_cast<off_t>(kMaxPasswordBytes)) {
    why = "larger than " + std::to_string(kMaxPasswordBytes) + " bytes";
  }
  std::string text;
  if (why.empty()) {
    text.resize(kMaxPasswordBytes);
    const ssize_t n = ::read(fd, text.data(), text.size());
    if (n < 0) why = std::strerror(errno);
    else text.resize(static_cast<size_t>(n));
  }
  ::close(fd);
  if (!why.empty()) {
    *error = path + ": " + why;
    return false;
  }
  while (!text.empty() && (text.back() == '\n' || text.back() == '\r')) text.pop_back();
  if (text.empty()) {
    *error = path + ": empty";
    return false;
  }
  *out = std::move(text);
  return true;
}

std::string client_id(const KafkaConfig& c) {
  if (!c.client_id.empty()) return c.client_id;
  char host[256] = {};
  if (gethostname(host, sizeof host - 1) != 0 || !host[0]) return "tcpscope";
  return std::string("tcpscope@") + host;
}

// A message's opaque: its kind and how many records it carries.
void* message_opaque(int kind, uint32_t records) {
  return reinterpret_cast<void*>(static_cast<uintptr_t>(records) << 1 | static_cast<uintptr_t>(kind));
}

struct ConfDeleter {
  void operator()(rd_kafka_conf_t* c) const { rd_kafka_conf_destroy(c); }
};
using ConfPtr = std::unique_ptr<rd_kafka_conf_t, ConfDeleter>;

// A librdkafka configuration with every property set, or nullptr and *error.
ConfPtr make_conf(const KafkaConfig& config, std::string* error) {
  KafkaProperties props;
  if (!kafka_properties(config, &props, error)) return nullptr;
  ConfPtr conf(rd_kafka_conf_new());
  // Connection failures reach the error callback (and the OutputStatus log
  // lines); librdkafka's own log would repeat each one on stderr every retry.
  rd_kafka_conf_set_log_cb(conf.get(), nullptr);
  char errstr[512];
  for (const auto& [name, value] : props) {
    if (rd_kafka_conf_set(conf.get(), name.c_str(), value.c_str(), errstr, sizeof errstr) != RD_KAFKA_CONF_OK) {
      *error = "export.kafka: librdkafka " + name + ": " + errstr;
      return nullptr;
    }
  }
  return conf;
}

}  // namespace

std::string kafka_broker_list(const KafkaConfig& c) {
  std::string out;
  for (const auto& b : c.brokers) out += (out.empty() ? "" : ",") + b;
  return out;
}

bool kafka_properties(const KafkaConfig& c, KafkaProperties* out, std::string* error) {
  KafkaProperties p = {
      {"bootstrap.servers", kafka_broker_list(c)},
      {"client.id", client_id(c)},
      {"compression.codec", c.compression},
      {"linger.ms", std::to_string(c.linger_ms)},
      // Out of the way of queue_bytes, which the export keeps exactly
      // (librdkafka counts whole KiB and not what a bucket holds yet).
      {"queue.buffering.max.kbytes", std::to_string(c.queue_bytes / 1024 + 1 + kKafkaMaxMessageBytes / 1024)},
      {"queue.buffering.max.messages", kMaxQueuedMessages},
      // Exactly once per partition across retries and reconnects.
      {"enable.idempotence", "true"},
      // A record waits for the brokers as long as they are away: the queue's
      // bound, not a clock, decides what an outage costs.
      {"message.timeout.ms", "0"},
      {"security.protocol", c.security_protocol},
      // The Java client's partitioner: a key lands in the same partition
      // whichever producer wrote it.
      {"partitioner", "murmur2_random"},
  };
  if (!c.tls_ca_file.empty()) p.emplace_back("ssl.ca.location", c.tls_ca_file);
  if (!c.tls_cert_file.empty()) p.emplace_back("ssl.certificate.location", c.tls_cert_file);
  if (!c.tls_key_file.empty()) p.emplace_back("ssl.key.location", c.tls_key_file);
  if (!c.sasl_mechanism.empty()) {
    std::string password;
    if (!read_secret_file(c.sasl_password_file, &password, error)) {
      *error = "export.kafka.sasl.password_file " + *error;
      return false;
    }
    p.emplace_back("sasl.mechanisms", c.sasl_mechanism);
    p.emplace_back("sasl.username", c.sasl_username);
    p.emplace_back("sasl.password", password);
  }
  *out = std::move(p);
  return true;
}

bool check_kafka_config(const KafkaConfig& config, std::string* error) {
  ConfPtr conf = make_conf(config, error);
  if (!conf) return false;
  char errstr[512];
  rd_kafka_t* rk = rd_kafka_new(RD_KAFKA_PRODUCER, conf.get(), errstr, sizeof errstr);
  if (!rk) {
    *error = std::string("export.kafka: ") + errstr;
    return false;
  }
  conf.release();  // rd_kafka_new owns it now
  rd_kafka_destroy(rk);
  return true;
}

uint32_t kafka_bucket(int64_t flow_start_ns) {
  return static_cast<uint32_t>(int_hash64(static_cast<uint64_t>(flow_start_ns)) >> (64 - kKafkaBucketBits));
}

namespace {
int64_t flow_start_ns(const FlowRecord& r) { return r.start_ns; }
int64_t flow_start_ns(const TransferRecord& r) { return r.flow_start_ns; }
}  // namespace

std::string kafka_bucket_key(const std::string& client_id, uint32_t bucket) {
  return client_id + "/" + std::to_string(bucket);
}

KafkaExport::KafkaExport(const KafkaConfig& config, const std::shared_ptr<prometheus::Registry>& registry)
    : queue_bytes_(config.queue_bytes), protobuf_(config.format == "protobuf") {
  for (uint32_t b = 0; b < kKafkaBuckets; ++b) keys_[b] = kafka_bucket_key(client_id(config), b);
  auto& records = prometheus::BuildCounter()
                      .Name("tcpscope_kafka_records_total")
                      .Help("Records for Kafka by kind and result: queued for the brokers, then delivered or failed "
                            "(refused for good, or still queued at exit); dropped: the queue was full.")
                      .Register(*registry);
  for (int k = 0; k < kKafkaRecordKinds; ++k) {
    auto counter = [&](const char* result) {
      return TotalCounter(&records.Add({{"kind", kKindNames[k]}, {"result", result}}));
    };
    queued_[k] = counter("queued");
    delivered_[k] = counter("delivered");
    failed_[k] = counter("failed");
    dropped_[k] = counter("dropped");
  }
  queue_bytes_gauge_ = &prometheus::BuildGauge()
                            .Name("tcpscope_kafka_queue_bytes")
                            .Help("Bytes of records queued for the Kafka brokers.")
                            .Register(*registry)
                            .Add({});
  queue_fill_ = &prometheus::BuildGauge()
                     .Name("tcpscope_kafka_queue_fill_ratio")
                     .Help("Fill of the Kafka queue (0..1, export.kafka.queue_bytes); at 1 records are dropped.")
                     .Register(*registry)
                     .Add({});
}

std::unique_ptr<KafkaExport> KafkaExport::open(const KafkaConfig& config,
                                               const std::shared_ptr<prometheus::Registry>& registry,
                                               std::string* error) {
  ConfPtr conf = make_conf(config, error);
  if (!conf) return nullptr;
  std::unique_ptr<KafkaExport> x(new KafkaExport(config, registry));
  rd_kafka_conf_set_opaque(conf.get(), x.get());
  rd_kafka_conf_set_dr_msg_cb(conf.get(), [](rd_kafka_t*, const rd_kafka_message_t* m, void* opaque) {
    const auto o = reinterpret_cast<uintptr_t>(m->_private);
    static_cast<KafkaExport*>(opaque)->on_delivery(static_cast<int>(o & 1), static_cast<uint32_t>(o >> 1), m->len,
                                                   m->err == RD_KAFKA_RESP_ERR_NO_ERROR,
                                                   m->err ? rd_kafka_err2str(m->err) : nullptr);
  });
  rd_kafka_conf_set_error_cb(conf.get(), [](rd_kafka_t*, int err, const char* reason, void* opaque) {
    static_cast<KafkaExport*>(opaque)->set_error(std::string(rd_kafka_err2name(static_cast<rd_kafka_resp_err_t>(err))) +
                                                 ": " + reason);
  });
  char errstr[512];
  x->rk_ = rd_kafka_new(RD_KAFKA_PRODUCER, conf.get(), errstr, sizeof errstr);
  if (!x->rk_) {
    *error = std::string("export.kafka: ") + errstr;
    return nullptr;
  }
  conf.release();
  const std::string* names[kKafkaRecordKinds] = {&config.topic_flows, &config.topic_transfers};
  for (int k = 0; k < kKafkaRecordKinds; ++k) {
    if (names[k]->empty()) continue;
    x->topics_[k] = rd_kafka_topic_new(x->rk_, names[k]->c_str(), nullptr);
    if (!x->topics_[k]) {
      *error = "export.kafka: topic " + *names[k] + ": " + rd_kafka_err2str(rd_kafka_last_error());
      return nullptr;
    }
  }
  x->poller_ = std::thread([p = x.get()] { p->poll_loop(); });
  return x;
}

KafkaExport::~KafkaExport() {
  stop_ = true;
  if (poller_.joinable()) poller_.join();
  for (auto* t : topics_)
    if (t) rd_kafka_topic_destroy(t);
  if (rk_) rd_kafka_destroy(rk_);
}

void KafkaExport::poll_loop() {
  while (!stop_) rd_kafka_poll(rk_, 200);
}

template <class Record>
void KafkaExport::produce_record(KafkaRecordKind kind, const Routed<Record>& routed) {
  if (!exports(kind)) return;
  // JSON goes with its newline: ClickHouse 18.16's Kafka engine reads a
  // message without a row delimiter at its end over and over.
  std::string_view message;
  if (protobuf_) {
    protobuf_scratch_.clear();
    append_protobuf(routed.record, &protobuf_scratch_);
    message = protobuf_scratch_;
  } else {
    message = routed.json();
  }
  produce(kind, kafka_bucket(flow_start_ns(routed.record)), message);
}

void KafkaExport::produce(const RoutedFlow& flow) { produce_record(KafkaRecordKind::kFlow, flow); }

void KafkaExport::produce(const RoutedTransfer& transfer) { produce_record(KafkaRecordKind::kTransfer, transfer); }

void KafkaExport::produce(KafkaRecordKind kind, uint32_t bucket, std::string_view record) {
  const int k = static_cast<int>(kind);
  if (in_queue_bytes_.load(std::memory_order_relaxed) + record.size() > queue_bytes_) {
    counts_[k].dropped.fetch_add(1, std::memory_order_relaxed);
    return;
  }
  Pending& p = pending_[k][bucket % kKafkaBuckets];
  p.bytes.append(record);
  ++p.records;
  in_queue_bytes_.fetch_add(record.size(), std::memory_order_relaxed);
  counts_[k].queued.fetch_add(1, std::memory_order_relaxed);
  if (p.bytes.size() >= kKafkaMaxMessageBytes) send(k, bucket % kKafkaBuckets);
}

void KafkaExport::send() {
  for (int k = 0; k < kKafkaRecordKinds; ++k)
    for (uint32_t b = 0; b < kKafkaBuckets; ++b)
      if (pending_[k][b].records) send(k, b);
}

void KafkaExport::send(int kind, uint32_t bucket) {
  Pending& p = pending_[kind][bucket];
  const std::string& key = keys_[bucket];
  if (rd_kafka_produce(topics_[kind], RD_KAFKA_PARTITION_UA, RD_KAFKA_MSG_F_COPY, p.bytes.data(), p.bytes.size(),
                       key.data(), key.size(), message_opaque(kind, p.records)) != 0) {
    // Not for want of room (the export bounds the queue below librdkafka's
    // own bound): the records were queued, and are lost for good.
    on_delivery(kind, p.records, p.bytes.size(), false, rd_kafka_err2str(rd_kafka_last_error()));
  }
  p.bytes.clear();
  p.records = 0;
}

void KafkaExport::on_delivery(int kind, uint32_t records, size_t bytes, bool ok, const char* error) {
  if (kind < 0 || kind >= kKafkaRecordKinds) return;
  in_queue_bytes_.fetch_sub(bytes, std::memory_order_relaxed);
  if (ok) {
    counts_[kind].delivered.fetch_add(records, std::memory_order_relaxed);
    if (has_error_.load(std::memory_order_relaxed)) {
      std::lock_guard<std::mutex> lock(error_mu_);
      last_error_.clear();
      has_error_ = false;
    }
  } else {
    counts_[kind].failed.fetch_add(records, std::memory_order_relaxed);
    set_error(std::string("delivery failed: ") + error);
  }
}

void KafkaExport::set_error(std::string error) {
  std::lock_guard<std::mutex> lock(error_mu_);
  last_error_ = std::move(error);
  has_error_ = true;
}

std::string KafkaExport::last_error() const {
  std::lock_guard<std::mutex> lock(error_mu_);
  return last_error_;
}

uint64_t KafkaExport::lost() const {
  uint64_t n = 0;
  for (const auto& c : counts_) n += c.dropped.load() + c.failed.load();
  return n;
}

void KafkaExport::update_metrics() {
  for (int k = 0; k < kKafkaRecordKinds; ++k) {
    queued_[k].set(counts_[k].queued.load());
    delivered_[k].set(counts_[k].delivered.load());
    failed_[k].set(counts_[k].failed.load());
    dropped_[k].set(counts_[k].dropped.load());
  }
  const double bytes = static_cast<double>(in_queue_bytes_.load());
  queue_bytes_gauge_->Set(bytes);
  queue_fill_->Set(std::min(1.0, bytes / static_cast<double>(queue_bytes_)));
}

void KafkaExport::close(int timeout_ms) {
  if (!rk_ || stop_) return;
  send();
  rd_kafka_flush(rk_, timeout_ms);
  // What the brokers did not take in time fails with a purge error through
  // the poll thread, so every record ends counted.
  rd_kafka_purge(rk_, RD_KAFKA_PURGE_F_QUEUE | RD_KAFKA_PURGE_F_INFLIGHT);
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(1);
  while (rd_kafka_outq_len(rk_) > 0 && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  stop_ = true;
  if (poller_.joinable()) poller_.join();
  rd_kafka_poll(rk_, 0);
  update_metrics();
}

}  // namespace tcpscope
