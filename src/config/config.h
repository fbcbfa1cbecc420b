// The daemon's configuration (SPEC.md "Config file"), parsed from YAML by
// config.cc. Plain data: every other module receives the part it needs.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "net/ip_addr.h"

namespace tcpscope {

struct AsnConfig {
  std::string mmdb;         // MaxMind DB file (GeoLite2-ASN, DB-IP ASN, IPinfo ASN); "" = none
  std::string prefix_file;  // CAIDA pfx2as or iptoasn TSV; "" = none
  uint32_t top_n = 50;      // ASNs outside the top-N by bytes are labelled "other"
};

struct PeerClassSpec {
  std::string name;
  std::vector<Prefix> prefixes;
  std::vector<uint32_t> asns;
  int line = 0;  // where it was defined, for messages
};

struct CcMatch {
  std::optional<std::string> peer_class;
  std::vector<uint32_t> asns;
  std::vector<Prefix> prefixes;
  std::vector<uint16_t> lports;
  std::vector<std::string> services;  // services' names (enrich/service_names.h) that own the local socket
};

struct ExperimentSpec {
  std::string name;
  // arm name (= congestion control algorithm) -> weight in percent; weights sum to 100.
  std::vector<std::pair<std::string, uint32_t>> arms;
  // The kernel follows every transfer of the experiment's flows (its
  // evidence), not only those of the sampled flows; false where the
  // experiment is judged on flow records.
  bool follow_transfers = true;
};

// A closed loop on a rule (docs/policy.md "Closed loop"): learns per cohort which arm
// serves its transfers best and gives that arm most of the cohort's new flows.
enum class CohortKind { kAsn, kPeerClass };
// The experiment name records of a controller rule's flows carry (SPEC);
// reserved, so no configured experiment can be mistaken for one.
inline constexpr const char* kControllerExperiment = "controller";
inline constexpr size_t kMaxControllerArms = 8;  // TCPSCOPE_MAX_ARMS
struct ControllerSpec {
  std::vector<std::string> arms;  // congestion controls; one may repeat (an A/A run)
  CohortKind cohort = CohortKind::kAsn;
  uint32_t control_percent = 10;  // of each cohort's flows, randomized between all arms forever
  uint64_t min_transfers = 500;   // per arm and cohort (and objective) before any decision
  // ... from at least this many connections: the kernel draws the arm per
  // connection, so the connections are the units of evidence, and too few
  // of them cannot tell the arm from the clients that drew it.
  uint64_t min_connections = 4;
  // The evidence is re-tested this often. 30 s: a cohort with a 10x effect
  // keeps 0.82 of the oracle's throughput over its first five minutes, 0.76
  // at 60 s (tests/unit/control/loop_simulation_test.cc); the sequential
  // test stays valid however often it looks.
  uint32_t interval_s = 30;
  double fdr = 0.05;              // false discovery rate held across all cohorts' decisions
  uint32_t ramp_step_percent = 25;  // the winner's weight moves at most this much per interval
  uint32_t max_cohorts = 50;      // ASN cohorts per rule (peer classes always have one)
  // The network namespaces whose sockets count as evidence: "self" (the
  // daemon's own), a name of /run/netns, or a path of a namespace's nsfs
  // file. sock_ops steers every namespace, any local user's own among them,
  // so only the service's may decide.
  std::vector<std::string> evidence_netns = {"self"};
  // The user whose sockets are the service's (a uid; the config names a
  // user or a uid, resolved when it is read): a port is a number, and
  // another user may listen on it too (on [::] beside an IPv4 listener, on
  // another address). None: the sockets of root, or any on a privileged port.
  std::optional<uint32_t> evidence_user;
  double retrans_share_increase = 0.2;   // guard: the winner's retransmit share may exceed the other arm's by this much (absolute)
  double rtt_inflation_increase = 0.5;   // guard: its srtt/min_rtt may exceed the other arm's by this factor - 1

  bool operator==(const ControllerSpec& o) const;
};

struct CcRule {
  std::string name;
  CcMatch match;
  std::optional<std::string> cc;              // exactly one of cc / experiment / controller
  std::optional<ExperimentSpec> experiment;
  std::optional<ControllerSpec> controller;
  int line = 0;
};

enum class AppOverride { kRespect, kEnforce };
enum class SysctlGuard { kObserve, kDeny };

struct CcPolicy {
  AppOverride app_override = AppOverride::kRespect;
  SysctlGuard sysctl_guard = SysctlGuard::kObserve;
  std::vector<CcRule> rules;
};

// `http:` the endpoint's basic authentication (docs/security.md "Security"), off by
// default: the default listen address is loopback. TLS is a proxy's job.
struct HttpConfig {
  // Basic authentication for /metrics and /api/*; /healthz stays open.
  // "" = none. The password is given only as its SHA-256 (64 hex digits).
  std::string basic_auth_user;
  std::string basic_auth_password_sha256;
  bool basic_auth() const { return !basic_auth_user.empty(); }
};

// `export.kafka`: every flow and transfer record to the fleet's Kafka
// (docs/fleet.md "Fleet"), one message each. Off while brokers is empty.
struct KafkaConfig {
  std::vector<std::string> brokers;                    // HOST:PORT each
  std::string topic_flows = "tcpscope.flows";
  std::string topic_transfers = "tcpscope.transfers";  // "" = flows only
  std::string compression = "zstd";                    // none, gzip, snappy, lz4, zstd
  // json: the flow log's line; protobuf: packaging/clickhouse/tcpscope.proto's
  // message, length-delimited (export/kafka_protobuf.h).
  std::string format = "json";
  uint64_t queue_bytes = 128ull << 20;  // records waiting for the brokers; beyond it they are dropped and counted
  uint32_t linger_ms = 100;             // how long the producer gathers a batch
  std::string client_id;                // "" = tcpscope@HOSTNAME
  std::string security_protocol = "plaintext";  // plaintext, ssl, sasl_plaintext, sasl_ssl
  std::string tls_ca_file, tls_cert_file, tls_key_file;
  std::string sasl_mechanism;  // PLAIN, SCRAM-SHA-256, SCRAM-SHA-512
  std::string sasl_username;
  std::string sasl_password_file;  // the password is never in the config file
  bool enabled() const { return !brokers.empty(); }
  bool operator==(const KafkaConfig& o) const;
  bool operator!=(const KafkaConfig& o) const { return !(*this == o); }
};

struct ExportConfig {
  KafkaConfig kafka;
  bool operator==(const ExportConfig& o) const { return kafka == o.kafka; }
};

// `services:` how a socket's owner is named from its cgroup
// (enrich/service_names.h) and how many names the metrics keep.
struct ServiceNameRule {
  std::string path;  // an ECMAScript regular expression the whole cgroup path must match
  std::string name;  // the service's name: $1 ... $9 are the expression's groups
  int line = 0;
  bool operator==(const ServiceNameRule& o) const { return path == o.path && name == o.name; }
};

struct ServicesConfig {
  // Services with a label of their own in the metrics, by bytes; the rest are "other".
  uint32_t top_n = 20;
  // A removed cgroup keeps its name this long for the records of its sockets
  // still closing, and a service gone this long loses its series.
  uint32_t grace_seconds = 600;
  std::vector<ServiceNameRule> names;  // tried in order before the built-in layouts
  bool operator==(const ServicesConfig& o) const {
    return top_n == o.top_n && grace_seconds == o.grace_seconds && names == o.names;
  }
};

struct Config {
  std::string listen = "127.0.0.1:9810";
  std::string flow_log;  // "" = none, "-" = stdout
  std::string cgroup;    // cgroup v2 directory for sockops; "" = root of the unified hierarchy
  AsnConfig asn;
  std::vector<PeerClassSpec> peer_classes;
  std::string default_peer_class = "client";
  std::vector<uint64_t> size_classes_bytes{100000, 1000000, 3000000};
  uint64_t throughput_min_bytes = 3000000;
  // Transfer lines in the flow log beside the flow lines; the transfer
  // metrics count transfers either way.
  bool flow_log_transfers = true;
  // The kernel follows the transfers of one flow in this many (0: none), and
  // of every flow a rule follows (record/transfer_sampling.h); every flow has
  // its record.
  uint32_t transfer_sampling_rate = 16;
  static constexpr uint32_t kMaxTransferSamplingRate = 1u << 16;
  CcPolicy cc_policy;
  ServicesConfig services;
  HttpConfig http;
  ExportConfig export_;  // `export:` (a C++ keyword)
  uint64_t ring_buffer_bytes = 16u << 20;  // power of two, page multiple
  uint32_t snapshot_interval_s = 10;       // open-flow snapshots (0 = off)
  // Network namespaces whose sockets are left alone: no record, no metric
  // (self, a name of /run/netns or an nsfs path, as evidence_netns).
  std::vector<std::string> ignore_netns;
  std::string source;                      // file it came from, "<embedded>" for the default
};

struct ConfigError {
  std::string file;
  int line = 0;  // 1-based; 0 when the problem has no line
  std::string message;
  std::string to_string() const;  // "FILE:LINE: message"
};

// The keys a config file may have at its top level (each a Config member).
const std::vector<std::string>& config_top_level_keys();

// One key of the config reference (docs/configuration.md "Config reference"), from the
// tables the parser reads the file with: a key inside a section is
// "section.key", one inside a list's items "list[].key".
struct ConfigKeyDoc {
  std::string key;
  std::string type;          // with the accepted range or values
  std::string default_text;  // "" where there is none (a section, a required key)
  std::string reload;        // on SIGHUP: "applied", "next start", "each key says", "refused"
  std::string doc;
};
// Every key, in the order of the tables.
const std::vector<ConfigKeyDoc>& config_reference();
// The reference as docs/configuration.md's Markdown table.
std::string config_reference_markdown();


// Parse YAML text. `available_cc` is the set a CC name must belong to.
// Every problem found is appended to `errors`; the Config is only meaningful when none are.
Config parse_config(const std::string& yaml_text, const std::string& file_name,
                    const std::vector<std::string>& available_cc,
                    std::vector<ConfigError>* errors);
Config load_config_file(const std::string& path, const std::vector<std::string>& available_cc,
                        std::vector<ConfigError>* errors);
// The embedded default (the same text as packaging/tcpscope.yaml).
const std::string& default_config_text();

// Command-line flags of `tcpscope run` that override the file (SPEC.md:
// "Flags override the config file"). Unset ones leave the file's value.
struct ConfigOverrides {
  std::optional<std::string> listen;    // --listen
  std::optional<std::string> flow_log;  // --flow-log
  std::optional<std::string> cgroup;    // --cgroup
  std::optional<std::string> transfer_sampling_rate;  // --transfer-sampling-rate
};

// Whether the kernel follows any flow's transfers under `config`: a
// sampling rate, or a rule whose flows' transfers are its evidence (a
// controller; an experiment with follow_transfers). Without, the per-call
// hooks are not attached.
bool transfers_followed(const Config& config);

// Replaces each value the flags set. A --listen that is not HOST:PORT with an
// IP literal is an error (file "--listen", line 0), as it would be in the file.
void apply_overrides(const ConfigOverrides& overrides, Config* config, std::vector<ConfigError>* errors);

// The config the daemon runs with, at start and at every SIGHUP: the file
// (or the embedded default when `path` is ""), then the flags on top, so a
// reload re-reads the file but never loses a flag.
Config load_effective_config(const std::string& path, const ConfigOverrides& overrides,
                             const std::vector<std::string>& available_cc, std::vector<ConfigError>* errors);

// The `listen` value: "127.0.0.1:9810" or "[::1]:9810" (an IP literal, no host
// names; port min_port..65535). For `--listen` overrides, which must obey the
// same rule, and for the HTTP server, which also takes port 0 (any free one).
struct ListenAddress {
  IpAddr addr;
  uint16_t port = 0;
};
std::optional<ListenAddress> parse_listen_address(const std::string& text, std::string* why, int min_port = 1);

// Every congestion control the policy can assign (rule cc and experiment arms),
// each once, in order of first use. A BPF program cannot make the kernel load a
// CC module (bpf_setsockopt never calls request_module), so the daemon must
// load these before attaching the policy.
std::vector<std::string> referenced_congestion_controls(const Config& config);

}  // namespace tcpscope
