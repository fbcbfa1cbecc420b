#include "config/config_reload.h"

namespace tcpscope {

namespace {

#define APPLIED(key, field) \
  { key, [](Config& r, const Config& f) { r.field = f.field; }, nullptr }
#define NEXT_START(key, field) \
  { key, nullptr, [](const Config& r, const Config& f) { return r.field != f.field; } }

}  // namespace

const std::vector<ReloadRule>& reload_rules() {
  static const std::vector<ReloadRule> kRules = {
      NEXT_START("listen", listen),                        // the socket is bound
      NEXT_START("flow_log", flow_log),                    // a SIGHUP reopens the same path (logrotate)
      NEXT_START("cgroup", cgroup),                        // the policy programs are attached there
      NEXT_START("ring_buffer_bytes", ring_buffer_bytes),  // the map is sized at load
      NEXT_START("export", export_.kafka),                 // the producer keeps its queue across a reload
      APPLIED("http.basic_auth_user", http.basic_auth_user),
      APPLIED("http.basic_auth_password_sha256", http.basic_auth_password_sha256),
      APPLIED("asn", asn),
      APPLIED("peer_classes", peer_classes),
      APPLIED("default_peer_class", default_peer_class),
      APPLIED("size_classes_bytes", size_classes_bytes),
      APPLIED("throughput_min_bytes", throughput_min_bytes),
      APPLIED("flow_log_transfers", flow_log_transfers),     // read for every transfer
      APPLIED("transfer_sampling_rate", transfer_sampling_rate),
      APPLIED("cc_policy", cc_policy),
      APPLIED("snapshot_interval_s", snapshot_interval_s),
  };
  return kRules;
}

#undef APPLIED
#undef NEXT_START

Config merge_reload(const Config& running, const Config& fresh, std::vector<std::string>* next_start) {
  Config merged = running;
  for (const auto& rule : reload_rules()) {
    if (rule.apply)
      rule.apply(merged, fresh);
    else if (next_start && rule.differs(running, fresh))
      next_start->push_back(rule.key);
  }
  merged.source = fresh.source;
  return merged;
}

}  // namespace tcpscope
