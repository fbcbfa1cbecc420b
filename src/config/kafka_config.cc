// `export:` records to the fleet's Kafka (docs/fleet.md "Fleet").
#include "config/config_sections.h"

namespace tcpscope {

namespace {

// Kafka's own rule for topic names.
bool valid_kafka_topic(const std::string& t) {
  return !t.empty() && t.size() <= 249 && t != "." && t != ".." &&
         t.find_first_not_of("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._-") == std::string::npos;
}

// HOST:PORT or [IPV6]:PORT, port 1..65535.
bool valid_broker(const std::string& b) {
  const size_t colon = b.rfind(':');
  if (colon == std::string::npos || colon == 0 || colon + 1 == b.size()) return false;
  const std::string host = b.substr(0, colon), port = b.substr(colon + 1);
  if (port.size() > 5 || port.find_first_not_of("0123456789") != std::string::npos) return false;
  const unsigned long p = std::stoul(port);
  if (p < 1 || p > 65535) return false;
  if (host.front() == '[') return host.back() == ']' && host.size() > 2;
  return host.find_first_of(" ,/[]") == std::string::npos;
}

std::string topic_problem(const std::string& t) {
  if (valid_kafka_topic(t)) return "";
  return " " + config_quoted(t) + " is not a Kafka topic name (1-249 of [a-zA-Z0-9._-])";
}

std::string absolute_path_problem(const std::string& path) {
  if (!path.empty() && path[0] == '/') return "";
  return " must be an absolute path, got " + config_quoted(path);
}

std::vector<std::pair<std::string, std::string>> same_names(std::vector<std::string> names) {
  std::vector<std::pair<std::string, std::string>> out;
  for (auto& n : names) out.emplace_back(n, n);
  return out;
}

const ConfigSection<KafkaConfig>& tls_section() {
  static const ConfigSection<KafkaConfig> kSection{{
      string_key("ca_file", &KafkaConfig::tls_ca_file, "CA certificates the brokers' certificates must chain to",
                 absolute_path_problem),
      string_key("cert_file", &KafkaConfig::tls_cert_file, "client certificate; with key_file",
                 absolute_path_problem),
      string_key("key_file", &KafkaConfig::tls_key_file, "the client certificate's key", absolute_path_problem),
  }};
  return kSection;
}

const ConfigSection<KafkaConfig>& sasl_section() {
  static const ConfigSection<KafkaConfig> kSection{{
      choice_key("mechanism", &KafkaConfig::sasl_mechanism,
                 same_names({"PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"}), "SASL mechanism"),
      string_key("username", &KafkaConfig::sasl_username, "SASL user name"),
      string_key("password_file", &KafkaConfig::sasl_password_file,
                 "a file only root can read that holds the password", absolute_path_problem),
      refused_key<KafkaConfig>("password",
                               "a password is never written in the config; give password_file, a file only root "
                               "can read that holds it",
                               "not accepted: give password_file"),
  }};
  return kSection;
}

const ConfigSection<KafkaConfig>& kafka_section() {
  static const ConfigSection<KafkaConfig> kSection{
      {
          member_key<KafkaConfig, std::vector<std::string>>(
              "brokers", &KafkaConfig::brokers, "list of HOST:PORT", "[]",
              "bootstrap brokers; the export is on when there is one; required in export.kafka",
              [](ConfigReader& r, const ConfigEntry& f, const std::string& path, std::vector<std::string>* out) {
                r.each_item(f, path, [&](const YAML::Node& n, int line, const std::string& item) {
                  if (n.IsScalar() && valid_broker(n.Scalar())) return out->push_back(n.Scalar());
                  r.error(line, item + " must be HOST:PORT (e.g. kafka-1:9092), got " + ConfigReader::type_name(n));
                });
              }),
          string_key("topic_flows", &KafkaConfig::topic_flows, "topic of the flow records", topic_problem),
          string_key("topic_transfers", &KafkaConfig::topic_transfers,
                     "topic of the transfer records; \"\" sends flows only",
                     [](const std::string& t) { return t.empty() ? std::string() : topic_problem(t); }),
          choice_key("compression", &KafkaConfig::compression,
                     same_names({"none", "gzip", "snappy", "lz4", "zstd"}), "compression of message batches"),
          choice_key("format", &KafkaConfig::format, same_names({"json", "protobuf"}),
                     "json: the flow log's line; protobuf: packaging/clickhouse/tcpscope.proto's message"),
          // librdkafka counts its queue in KiB, at most 2^31-1 of them.
          integer_key("queue_bytes", &KafkaConfig::queue_bytes, 1 << 20, 2047ull << 30,
                      "records waiting for the brokers; beyond it they are dropped and counted"),
          integer_key("linger_ms", &KafkaConfig::linger_ms, 0, 60000, "how long the producer gathers a batch"),
          string_key("client_id", &KafkaConfig::client_id, "the producer's client.id; \"\" = tcpscope@HOSTNAME"),
          choice_key("security_protocol", &KafkaConfig::security_protocol,
                     same_names({"plaintext", "ssl", "sasl_plaintext", "sasl_ssl"}), "how to reach the brokers"),
          inline_section_key("tls", tls_section(), "files for ssl and sasl_ssl"),
          inline_section_key("sasl", sasl_section(), "credentials for sasl_plaintext and sasl_ssl"),
      },
      [](ConfigReader& r, const std::map<std::string, int>& given, int line, const std::string& path, KafkaConfig* k) {
        const int sasl_line = given.count("sasl") ? given.at("sasl") : 0;
        const int tls_line = given.count("tls") ? given.at("tls") : 0;
        if (!given.count("brokers")) r.error(line, path + " needs brokers (a list of HOST:PORT)");
        const bool sasl_protocol = k->security_protocol.rfind("sasl_", 0) == 0;
        const bool tls_protocol = k->security_protocol == "ssl" || k->security_protocol == "sasl_ssl";
        if (sasl_protocol && (k->sasl_mechanism.empty() || k->sasl_username.empty() || k->sasl_password_file.empty()))
          r.error(sasl_line ? sasl_line : line, path + ".security_protocol " + k->security_protocol +
                                                    " needs sasl.mechanism, sasl.username and sasl.password_file");
        if (!sasl_protocol && sasl_line)
          r.error(sasl_line, path + ".sasl is used only with security_protocol sasl_plaintext or sasl_ssl");
        if (!tls_protocol && tls_line)
          r.error(tls_line, path + ".tls is used only with security_protocol ssl or sasl_ssl");
        if (k->tls_cert_file.empty() != k->tls_key_file.empty())
          r.error(tls_line, path + ".tls.cert_file and key_file come together (a client certificate and its key)");
      }};
  return kSection;
}

}  // namespace

const ConfigSection<ExportConfig>& export_section() {
  static const ConfigSection<ExportConfig> kSection{{
      section_key("kafka", &ExportConfig::kafka, kafka_section(), ConfigReload::kInherit,
                  "every flow and transfer record to the fleet's Kafka; off while absent"),
  }};
  return kSection;
}

}  // namespace tcpscope
