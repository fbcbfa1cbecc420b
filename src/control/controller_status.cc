// What the controller shows of itself: GET /api/v1/controller (SPEC.md),
// each rule's settings, cohorts, weights and the evidence behind them, and
// the same state as Prometheus series (controller_metrics.h). Both read the
// state the state machine (cc_controller.cc) keeps; neither changes it.
#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "control/cohort_test.h"
#include "control/controller_metrics.h"
#include "control/controller_rules.h"
#include "text/json_text.h"

namespace tcpscope {

const char* cohort_state_name(CohortState s) {
  switch (s) {
    case CohortState::kExploring: return "exploring";
    case CohortState::kDecided: return "decided";
    case CohortState::kReverted: return "reverted";
  }
  return "exploring";
}

namespace {

template <class Cohort>
nlohmann::json cohort_status(const std::vector<std::string>& arm_names, const Cohort& c) {
  nlohmann::json j;
  j["cohort"] = c.label;
  j["kind"] = c.is_asn ? "asn" : "peer_class";
  j["state"] = cohort_state_name(c.state);
  j["winner"] = c.winner >= 0 ? nlohmann::json(arm_names[c.winner]) : nlohmann::json(nullptr);
  j["weights"] = nlohmann::json::object();
  for (size_t a = 0; a < arm_names.size(); ++a) j["weights"][arm_names[a]] = c.weights[a];
  j["decided_at_s"] = c.decided_at_s ? nlohmann::json(*c.decided_at_s) : nlohmann::json(nullptr);
  nlohmann::json ev;
  ev["since_s"] = c.epoch_start_s;
  ev["arms"] = nlohmann::json::object();
  for (size_t a = 0; a < arm_names.size(); ++a) ev["arms"][arm_names[a]] = controller::arm_json(c.evidence[a]);
  ev["test"] = c.last_test;
  if (!c.decision.is_null()) ev["last_decision"] = c.decision;
  j["evidence"] = std::move(ev);
  return j;
}

}  // namespace

std::string CcController::status_json() const {
  std::lock_guard<std::mutex> lock(mu_);
  nlohmann::json doc;
  if (!send_transfers_) doc["note"] = controller::kNoSendTransfers;
  doc["rules"] = nlohmann::json::array();
  for (const auto& r : rules_) {
    nlohmann::json rj;
    rj["rule"] = r->name;
    rj["arms"] = r->arm_names;
    rj["cohort"] = r->spec.cohort == CohortKind::kAsn ? "asn" : "peer_class";
    rj["control_percent"] = r->spec.control_percent;
    rj["min_transfers"] = r->spec.min_transfers;
    rj["min_connections"] = r->spec.min_connections;
    rj["interval_s"] = r->spec.interval_s;
    rj["fdr"] = r->spec.fdr;
    rj["decisions"] = r->decisions;
    rj["reverts"] = r->reverts;
    rj["pooled_asns"] = r->candidates.size();
    rj["open_connections"] = r->connections.size();
    rj["connections_closed_unseen"] = r->closed_unseen;
    rj["records_refused"] = nlohmann::json::object();
    for (int v = 1; v < kEvidenceVerdicts; ++v)
      rj["records_refused"][to_string(static_cast<EvidenceVerdict>(v))] = r->refused[v];
    rj["cohorts"] = nlohmann::json::array();
    for (const auto& [_, c] : r->pools) rj["cohorts"].push_back(cohort_status(r->arm_names, c));
    for (const auto& [_, c] : r->asns) rj["cohorts"].push_back(cohort_status(r->arm_names, c));
    doc["rules"].push_back(std::move(rj));
  }
  return json_text(doc, 2) + "\n";
}

void CcController::update_metrics() {
  std::vector<ControllerMetrics::CohortWeightsSample> weights;
  std::map<std::pair<std::string, std::string>, uint64_t> states;
  for (const auto& r : rules_) {
    for (CohortState s : {CohortState::kExploring, CohortState::kDecided, CohortState::kReverted})
      states[{r->name, cohort_state_name(s)}] = 0;
    auto add = [&](const Cohort& c) {
      ++states[{r->name, cohort_state_name(c.state)}];
      for (size_t a = 0; a < r->arm_names.size(); ++a)
        weights.push_back({r->name, c.label, r->arm_names[a], c.weights[a]});
    };
    for (const auto& [_, c] : r->pools) add(c);
    for (const auto& [_, c] : r->asns) add(c);
    for (int v = 1; v < kEvidenceVerdicts; ++v)
      metrics_->set_refused(r->name, to_string(static_cast<EvidenceVerdict>(v)), r->refused[v]);
  }
  metrics_->set(weights, states);
}

}  // namespace tcpscope
