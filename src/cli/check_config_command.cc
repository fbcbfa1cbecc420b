#include "cli/check_config_command.h"

#include "config/config.h"
#include "export/kafka_export.h"
#include "os/congestion_controls.h"
#include "policy/cc_policy.h"

namespace tcpscope {

namespace {

std::string count_of(size_t n, const char* singular, const char* plural) {
  return std::to_string(n) + " " + (n == 1 ? singular : plural);
}

}  // namespace

int check_config_command(const std::string& path, std::ostream& out, std::ostream& err) {
  return check_config_command(path, kernel_congestion_controls(), loaded_congestion_controls(), out, err);
}

int check_config_command(const std::string& path, const std::vector<std::string>& available_cc,
                         std::ostream& out, std::ostream& err) {
  return check_config_command(path, available_cc, available_cc, out, err);
}

int check_config_command(const std::string& path, const std::vector<std::string>& available_cc,
                         const std::vector<std::string>& loaded_cc, std::ostream& out, std::ostream& err) {
  std::vector<ConfigError> errors;
  const Config config = load_config_file(path, available_cc, &errors);
  if (!errors.empty()) {
    for (const auto& e : errors) err << e.to_string() << "\n";
    err.flush();
    return 2;
  }
  if (policy_matches_asns(config) && config.asn.mmdb.empty() && config.asn.prefix_file.empty()) {
    err << path << ": " << kPolicyNeedsAsnData << "\n";
    err.flush();
    return 2;
  }
  // librdkafka checks the producer's settings (and the SASL password file)
  // without connecting: a broker that is down now is no config error.
  std::string kafka_error;
  if (config.export_.kafka.enabled() && !check_kafka_config(config.export_.kafka, &kafka_error)) {
    err << path << ": " << kafka_error << "\n";
    err.flush();
    return 2;
  }
  size_t experiments = 0, controllers = 0;
  for (const auto& rule : config.cc_policy.rules) {
    experiments += rule.experiment ? 1 : 0;
    controllers += rule.controller ? 1 : 0;
  }
  out << path << ": ok\n"
      << count_of(config.peer_classes.size(), "peer class", "peer classes") << ", "
      << count_of(config.cc_policy.rules.size(), "rule", "rules") << " ("
      << count_of(experiments, "experiment", "experiments") << ", "
      << count_of(controllers, "controller", "controllers") << ")\n";
  if (const KafkaConfig& k = config.export_.kafka; k.enabled())
    out << "records to Kafka " << kafka_broker_list(k) << " as " << k.format << ": flows to " << k.topic_flows << ", "
        << (k.topic_transfers.empty() ? std::string("transfers not exported") : "transfers to " + k.topic_transfers)
        << "\n";
  // Valid here, but not under the packaged unit: see README, Congestion-control policy.
  for (const auto& [cc, rule] : unloaded_module_congestion_controls(config, loaded_cc))
    err << path << ": warning: congestion control \"" << cc << "\" (rule '" << rule
        << "') is not loaded, only available as module tcp_" << cc
        << ": the daemon loads it at start, but not under the packaged systemd unit "
           "(ProtectKernelModules=yes hides /lib/modules, so the daemon refuses this config); "
           "load it at boot (echo tcp_" << cc << " > /etc/modules-load.d/tcpscope.conf) or now (modprobe tcp_" << cc
        << ")\n";
  return 0;
}

}  // namespace tcpscope
