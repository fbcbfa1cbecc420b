#include "control/controller_metrics.h"

#include <prometheus/counter.h>
#include <prometheus/family.h>
#include <prometheus/gauge.h>
#include <prometheus/registry.h>

#include "prometheus_helpers/metric_family.h"

namespace tcpscope {

namespace {

// Sets every wanted series, removes the others (a cohort or rule gone).
void replace_series(prometheus::Family<prometheus::Gauge>* family, std::map<std::string, prometheus::Gauge*>* series,
                    const std::map<std::string, std::pair<std::map<std::string, std::string>, double>>& wanted) {
  for (auto it = series->begin(); it != series->end();) {
    if (wanted.count(it->first)) {
      ++it;
    } else {
      family->Remove(it->second);
      it = series->erase(it);
    }
  }
  for (const auto& [key, labels_value] : wanted) {
    auto it = series->find(key);
    if (it == series->end()) it = series->emplace(key, &family->Add(labels_value.first)).first;
    it->second->Set(labels_value.second);
  }
}

}  // namespace

ControllerMetrics::ControllerMetrics(std::shared_ptr<prometheus::Registry> registry)
    : registry_(std::move(registry)),
      weights_(gauge_family(*registry_, "tcpscope_controller_weight_percent",
                            "Share of a cohort's new flows each arm of a controller rule gets, in percent.")),
      cohorts_(gauge_family(*registry_, "tcpscope_controller_cohorts",
                            "Cohorts of a controller rule by state: exploring, decided, reverted.")),
      decisions_(counter_family(*registry_, "tcpscope_controller_decisions_total",
                                "Decisions of a controller rule: decided (a winner), reverted (taken back).")),
      refused_(counter_family(*registry_, "tcpscope_controller_records_refused_total",
                              "Records of a controller rule's sockets not taken as evidence: outgoing, port (not "
                              "the rule's or a privileged one), local_peer (a client on this host).")) {}

void ControllerMetrics::set(const std::vector<CohortWeightsSample>& weights,
                            const std::map<std::pair<std::string, std::string>, uint64_t>& cohorts_by_rule_and_state) {
  std::map<std::string, std::pair<std::map<std::string, std::string>, double>> w, c;
  for (const auto& s : weights)
    w[s.rule + '\0' + s.cohort + '\0' + s.arm] = {{{"rule", s.rule}, {"cohort", s.cohort}, {"arm", s.arm}},
                                                   static_cast<double>(s.percent)};
  for (const auto& [rule_state, n] : cohorts_by_rule_and_state)
    c[rule_state.first + '\0' + rule_state.second] = {{{"rule", rule_state.first}, {"state", rule_state.second}},
                                                      static_cast<double>(n)};
  replace_series(weights_, &weight_series_, w);
  replace_series(cohorts_, &cohort_series_, c);
}

void ControllerMetrics::set_refused(const std::string& rule, const std::string& reason, uint64_t total) {
  auto it = refused_series_.find({rule, reason});
  if (it == refused_series_.end())
    it = refused_series_.emplace(std::make_pair(rule, reason), TotalCounter(&refused_->Add({{"rule", rule}, {"reason", reason}})))
             .first;
  it->second.set(total);
}

void ControllerMetrics::count_decision(const std::string& rule, const std::string& decision) {
  decisions_->Add({{"rule", rule}, {"decision", decision}}).Increment();
}

}  // namespace tcpscope
