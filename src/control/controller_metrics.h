// The controllers' state in Prometheus: the weights of every cohort, how many
// cohorts are in each state, and the decisions made. Cohorts per rule are
// bounded by max_cohorts plus the peer classes, so the series are too
// (docs/metrics.md "Series budget").
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "prometheus_helpers/prometheus_fwd.h"
#include "prometheus_helpers/total_counter.h"

namespace tcpscope {

class ControllerMetrics {
 public:
  explicit ControllerMetrics(std::shared_ptr<prometheus::Registry> registry);

  struct CohortWeightsSample {
    std::string rule, cohort, arm;
    uint32_t percent;
  };
  // The whole current state: series not in it are removed.
  void set(const std::vector<CohortWeightsSample>& weights,
           const std::map<std::pair<std::string, std::string>, uint64_t>& cohorts_by_rule_and_state);
  void count_decision(const std::string& rule, const std::string& decision);
  // tcpscope_controller_records_refused_total{rule, reason}: records of a
  // rule's sockets its evidence gate kept out, from the rule's cumulative
  // count (a rule configured afresh starts again from 0).
  void set_refused(const std::string& rule, const std::string& reason, uint64_t total);

 private:
  std::shared_ptr<prometheus::Registry> registry_;
  prometheus::Family<prometheus::Gauge>* weights_;
  prometheus::Family<prometheus::Gauge>* cohorts_;
  prometheus::Family<prometheus::Counter>* decisions_;
  prometheus::Family<prometheus::Counter>* refused_ = nullptr;
  std::map<std::pair<std::string, std::string>, TotalCounter> refused_series_;
  std::map<std::string, prometheus::Gauge*> weight_series_, cohort_series_;
};

}  // namespace tcpscope
