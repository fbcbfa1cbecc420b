// The closed loop (docs/policy.md "Closed loop"): for every cc_policy rule with a
// `controller:`, learns per cohort which arm serves the cohort's transfers
// best, gives that arm most of the cohort's new flows, and keeps a control
// slice randomized between all arms forever, so the decision is checked
// against live evidence and taken back when it stops holding.
//
// Cohorts. `cohort: peer_class`: one per peer class. `cohort: asn`: one per
// ASN once the ASN alone has min_transfers per arm (at most max_cohorts of
// them, largest first); until then its flows are pooled into its peer
// class's cohort. The kernel finds a flow's weights by its ASN, else by its
// class (bpf/policy.bpf.c), so the daemon names both the same way here.
//
// States: exploring (every arm an equal share) -> decided (the winner ramps
// up, ramp_step_percent per interval, to 100 - control_percent plus its share
// of the control slice) -> reverted (back to equal shares at once) when the
// control slice shows the winner worse on its objective, or breaking a
// guard; a reverted cohort may decide again, for either arm.
//
// Statistics (control/cohort_test.h, on control/sequential_test.h). A
// connection is the unit of evidence: the kernel draws the arm per
// connection, so an arm's values are
// ratios of sums over its connections with a variance that counts each
// connection once, and a test waits for min_connections connections as well
// as min_transfers transfers per arm. Every interval every cohort's evidence
// is re-tested, so each test is sequential: the mixture SPRT's e-value,
// under Student's t for the connections' own spread, valid however often it
// is looked at. An exploring cohort's
// hypothesis: "the best-looking arm of an objective is better than each
// other arm" (e = the smallest of those pairs' e-values; with both
// objectives testable, the larger divided by 2). A decided cohort's: "the
// winner is worse than an arm of the control slice" on the objective it won.
// The e-values of every cohort of a rule tested this interval go through
// e-BH at the rule's `fdr`, which holds the false discovery rate across
// cohorts. A winner must also keep its guards: its retransmit share at most
// retrans_share_increase above each other arm's, its RTT inflation at most
// (1 + rtt_inflation_increase) times theirs (point estimates), and not be
// significantly worse on the other objective. A decided cohort whose
// winner's guard is beyond its bound by a confidence sequence is reverted.
// Each decision starts a new epoch of evidence: a decision is never re-made
// from the evidence that made it (hysteresis), and a revert needs
// min_transfers per arm of evidence gathered under the decision.
//
// Thread safety: observe() and step() on the daemon's thread, status_json()
// on HTTP threads; one mutex.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <unordered_set>
#include <vector>

#include <nlohmann/json.hpp>

#include "config/config.h"
#include "control/arm_evidence.h"
#include "control/evidence_gate.h"
#include "pipeline/record_sink.h"
#include "policy/cc_policy.h"
#include "record/enrichment.h"

namespace prometheus {
class Registry;
}

namespace tcpscope {

class ControllerMetrics;
struct FlowRecord;
struct SocketPass;
struct TransferRecord;

enum class CohortState { kExploring, kDecided, kReverted };
const char* cohort_state_name(CohortState s);

class CcController {
 public:
  // `log` takes every decision, as one line (without the trailing newline).
  CcController(std::shared_ptr<prometheus::Registry> registry, LogLine log);
  ~CcController();

  // Takes the controller rules of `config`. A rule whose name, match and
  // controller settings are unchanged keeps its cohorts; any other starts
  // afresh (its flows go back to equal shares at once), and rules no longer
  // there are forgotten.
  void configure(const Config& config);
  // Undoes the last configure(): `previous`, the config before it, with its
  // rules as they were, cohorts and evidence included (a reload the kernel
  // refused). Moves, where a saved state would copy the whole evidence.
  void revert(const Config& previous);
  // The last configure() holds: what revert() would put back goes.
  void confirm();
  bool empty() const;

  // The network namespaces the rules' evidence_netns name, resolved (name
  // -> inode; a name missing here counts nothing), and each one's local
  // addresses (evidence_gate.h). The closed loop reads them and calls this
  // after configure() and whenever the addresses change; until then no
  // record counts.
  void set_namespaces(std::map<std::string, uint32_t> netns_by_name, std::shared_ptr<const LocalAddresses> local);

  // Whether this kernel makes send transfers, the controller's evidence
  // (kernel/record_coverage.h); without them no cohort can ever be tested,
  // and the status says why instead of waiting for them.
  void set_send_transfers(bool available);

  // A finished transfer or flow; only those a controller rule assigned count.
  void observe(const TransferRecord& t);
  void observe(const FlowRecord& f);
  // A pass of the socket iterator: the open connections it did not find,
  // in the namespaces it saw whole, closed with their close record lost,
  // and leave the rules' connection tables (ConnectionTable::drop_absent()).
  void forget_closed(const SocketPass& pass);

  // Re-tests each rule whose interval has passed (now: unix seconds).
  struct StepResult {
    bool tested = false;   // some rule was re-tested: its evidence is worth saving
    bool changed = false;  // some cohort's weights, or the set of ASN cohorts, changed
  };
  StepResult step(double now_s);

  // What the kernel needs (policy/cc_policy.h): the ASNs with a cohort of
  // their own, sorted, and the weights of every cohort.
  std::vector<uint32_t> cohort_asns() const;
  std::vector<CohortWeights> cohort_weights() const;

  // GET /api/v1/controller (SPEC.md).
  std::string status_json() const;

  // Persistence: the decisions and their evidence. restore() applies only
  // to rules configure() has taken with the same settings; false + `error`
  // on a malformed document (nothing is applied then).
  nlohmann::json save() const;
  bool restore(const nlohmann::json& doc, std::string* error);

 private:
  struct Cohort;
  struct Rule;
  Cohort* cohort_of(Rule& r, uint32_t asn, const std::string& peer_class, bool* pooled);
  struct Target {
    Rule* rule;
    uint32_t arm;
    Cohort* cohort;
    std::vector<ArmEvidence>* candidate;  // its pooled ASN's own evidence, if followed
  };
  template <class Record>
  std::optional<Target> target_of(const Record& record);
  // The controller rules of `config`, each taken from `pool` where one there
  // has its name and settings; what is left in `pool` was not taken. mu_ held.
  void adopt(const Config& config, std::vector<std::unique_ptr<Rule>>* pool);
  void test_rule(Rule& r, double now_s, bool* changed);
  void promote_asns(Rule& r, double now_s, bool* changed);
  void ramp(Rule& r, bool* changed);
  void update_metrics();

  mutable std::mutex mu_;
  std::vector<std::unique_ptr<Rule>> rules_;
  std::vector<std::unique_ptr<Rule>> replaced_;  // by the last configure(), for revert()
  std::map<std::string, Rule*> by_name_;
  std::unique_ptr<ControllerMetrics> metrics_;
  LogLine log_;
  bool send_transfers_ = true;
  std::map<std::string, uint32_t> netns_by_name_;
  std::shared_ptr<const LocalAddresses> local_addresses_;
};

}  // namespace tcpscope
