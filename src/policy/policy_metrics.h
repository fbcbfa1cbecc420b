// The congestion-control policy's counters in Prometheus. The kernel keeps
// running totals; these setters turn each total into counter increments.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>

namespace prometheus {
class Counter;
template <typename T>
class Family;
class Registry;
}  // namespace prometheus

namespace tcpscope {

class PolicyMetrics {
 public:
  explicit PolicyMetrics(std::shared_ptr<prometheus::Registry> registry);

  // tcpscope_cc_assignments_total{rule, experiment, arm, cc}. `slot` names the
  // kernel counter the total comes from; forget_slots() after it was reset.
  void set_assignments(const std::string& slot, const std::string& rule, const std::string& experiment,
                       const std::string& arm, const std::string& cc, uint64_t total);
  // tcpscope_cc_assignments_revoked_total{rule, experiment, arm, cc}: of
  // those, the ones an application replaced afterwards (app_override: respect).
  void set_revoked(const std::string& slot, const std::string& rule, const std::string& experiment,
                   const std::string& arm, const std::string& cc, uint64_t total);
  void forget_slots(const std::string& prefix);
  // tcpscope_app_cc_setsockopt_total{cc, action}
  void set_app_cc(const std::string& cc, const std::string& action, uint64_t total);
  // tcpscope_sysctl_writes_total{name, action}
  // netns: "host" (the initial network namespace) or "other".
  void set_sysctl_writes(const std::string& name, const std::string& action, const std::string& netns,
                         uint64_t total);

 private:
  struct Tracked {
    prometheus::Counter* counter = nullptr;
    uint64_t last = 0;
  };
  void advance(Tracked* t, uint64_t total);

  std::shared_ptr<prometheus::Registry> registry_;
  prometheus::Family<prometheus::Counter>* assignments_;
  prometheus::Family<prometheus::Counter>* revoked_;
  prometheus::Family<prometheus::Counter>* app_cc_;
  prometheus::Family<prometheus::Counter>* sysctl_;
  std::map<std::string, Tracked> tracked_;
};

}  // namespace tcpscope
