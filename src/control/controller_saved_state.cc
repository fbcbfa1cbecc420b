// The controller's state across restarts: save() writes every rule's
// cohorts, decisions and evidence (with each open connection's sums) as one
// JSON document, and restore() reads one back, checking every value and
// that the values agree with each other, before it applies anything, and
// applying a rule's part only if the rule's settings are those it was saved
// under. Anything wrong refuses the whole document: a part restored beside
// a part dropped would be evidence no run of the controller could have
// gathered. Where the document is kept is controller_store.h's; when it is
// written, state_writer.h's.
#include <cmath>
#include <cstdint>
#include <map>
#include <set>
#include <stdexcept>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "control/controller_rules.h"
#include "tcpscope/policy.h"

namespace tcpscope {

namespace {

// Version 4: the evidence as ratios over connections (sequential_test.h),
// with each open connection's sums. Versions 1 to 3 counted transfers as
// independent units, which cannot be turned into connections: their
// cohorts' states and weights are kept, their evidence starts afresh.
constexpr int kStateVersion = 4;

}  // namespace

nlohmann::json controller::settings_of(const ControllerSpec& s, const CcMatch& m,
                                       const std::vector<std::string>& class_names, uint64_t throughput_min_bytes) {
  nlohmann::json prefixes = nlohmann::json::array();
  for (const auto& p : m.prefixes) prefixes.push_back(p.to_string());
  nlohmann::json match = {
      {"peer_class", m.peer_class.value_or("")}, {"asns", m.asns}, {"prefixes", prefixes}, {"lports", m.lports}};
  // Only when given: a state saved before rules could name services keeps
  // its evidence for the same rule.
  if (!m.services.empty()) match["services"] = m.services;
  return {{"arms", s.arms},
          {"cohort", s.cohort == CohortKind::kAsn ? "asn" : "peer_class"},
          {"control_percent", s.control_percent},
          {"min_transfers", s.min_transfers},
          {"min_connections", s.min_connections},
          {"fdr", s.fdr},
          {"max_cohorts", s.max_cohorts},
          {"guards", {s.retrans_share_increase, s.rtt_inflation_increase}},
          {"match", match},
          {"peer_classes", class_names},
          {"throughput_min_bytes", throughput_min_bytes}};
}

namespace {

// The open connections' sums of each evidence (by its id), as saved: one
// array per connection, [key, fct y, fct x, throughput y, throughput x,
// inflation y, inflation x, last seen s, netns inode]. A state saved before
// the namespace was kept has 8 (the namespace unknown).
using OpenSums = std::map<uint64_t, nlohmann::json>;

OpenSums open_sums(const ConnectionTable& table) {
  OpenSums out;
  table.for_each_slot([&](uint64_t key, const ConnectionSums& s, const ConnectionTable::Entry& e) {
    auto& list = out[s.evidence];
    if (list.is_null()) list = nlohmann::json::array();
    list.push_back({key, s.objective[0].y, s.objective[0].x, s.objective[1].y, s.objective[1].x, s.inflation.y,
                    s.inflation.x, e.last_seen_s, e.netns});
  });
  return out;
}

nlohmann::json evidence_json(const std::vector<ArmEvidence>& ev, const OpenSums& open) {
  nlohmann::json j = nlohmann::json::array();
  for (const auto& a : ev) {
    nlohmann::json aj = a.to_json();
    auto it = open.find(a.id());
    aj["open"] = it == open.end() ? nlohmann::json::array() : it->second;
    j.push_back(std::move(aj));
  }
  return j;
}

template <class Cohort>
nlohmann::json cohort_state(const Cohort& c, const OpenSums& open) {
  nlohmann::json j = {{"label", c.label},
                      {"is_asn", c.is_asn},
                      {"kernel_key", c.kernel_key},
                      {"state", cohort_state_name(c.state)},
                      {"winner", c.winner},
                      {"objective", objective_name(c.objective)},
                      {"weights", c.weights},
                      {"epoch_start_s", c.epoch_start_s},
                      {"max_e", c.max_e},
                      {"decision", c.decision},
                      {"last_test", c.last_test}};
  if (c.decided_at_s) j["decided_at_s"] = *c.decided_at_s;
  j["evidence"] = evidence_json(c.evidence, open);
  return j;
}

// Checked reads of a saved state: a value of the wrong type or out of
// range is an error, never a silent conversion.
bool non_negative_integer(const nlohmann::json& v) {
  return v.is_number_unsigned() || (v.is_number_integer() && v.get<int64_t>() >= 0);
}
uint64_t u64_at(const nlohmann::json& j, const char* key) {
  const auto& v = j.at(key);
  if (!non_negative_integer(v)) throw std::invalid_argument(std::string(key) + " is not an unsigned integer");
  return v.get<uint64_t>();
}
uint32_t u32_at(const nlohmann::json& j, const char* key) {
  const uint64_t v = u64_at(j, key);
  if (v > UINT32_MAX) throw std::invalid_argument(std::string(key) + " " + std::to_string(v) + " is out of range");
  return static_cast<uint32_t>(v);
}
double finite_at(const nlohmann::json& j, const char* key) {
  const auto& v = j.at(key);
  if (!v.is_number() || !std::isfinite(v.get<double>())) throw std::invalid_argument(std::string(key) + " is not a number");
  return v.get<double>();
}
// An ASN written as decimal text, as save() writes it (no leading zero, so
// that one ASN has one name): 1 to 2^32 - 1.
uint32_t asn_of(const std::string& text) {
  const bool digits = !text.empty() && text.size() <= 10 && text[0] != '0' &&
                      text.find_first_not_of("0123456789") == std::string::npos;
  if (!digits || std::stoull(text) > UINT32_MAX)
    throw std::invalid_argument("ASN \"" + text + "\" is not a decimal number from 1 to 4294967295");
  return static_cast<uint32_t>(std::stoull(text));
}

// One connection's saved sums, checked: x values are counts of transfers.
struct SavedSums {
  uint64_t key;
  ConnectionSums sums;
  double last_seen_s;
  uint32_t netns;
  size_t arm;  // of the evidence they are in
};
SavedSums saved_sums(const nlohmann::json& j) {
  if (!j.is_array() || (j.size() != 8 && j.size() != 9) || !non_negative_integer(j[0]))
    throw std::invalid_argument("an open connection's sums are malformed");
  if (j.size() == 9 && (!non_negative_integer(j[8]) || j[8].get<uint64_t>() > UINT32_MAX))
    throw std::invalid_argument("an open connection's network namespace is not an inode number");
  double v[7];
  for (int i = 0; i < 7; ++i) {
    if (!j[i + 1].is_number() || !std::isfinite(j[i + 1].get<double>()))
      throw std::invalid_argument("an open connection's sums are not numbers");
    v[i] = j[i + 1].get<double>();
  }
  for (int i : {1, 3, 5})
    if (v[i] < 0 || v[i] > 1e15) throw std::invalid_argument("an open connection's count is out of range");
  if (v[6] < 0) throw std::invalid_argument("an open connection's last seen time is negative");
  SavedSums s{j[0].get<uint64_t>(), {}, v[6], j.size() == 9 ? j[8].get<uint32_t>() : 0, 0};
  s.sums.objective[0] = {v[0], v[1]};
  s.sums.objective[1] = {v[2], v[3]};
  s.sums.inflation = {v[4], v[5]};
  return s;
}

// The evidence of k arms with their open connections' sums (each given its
// new evidence id). Throws on anything malformed.
std::vector<ArmEvidence> evidence_from(const nlohmann::json& j, size_t k, std::vector<SavedSums>* open) {
  if (!j.is_array() || j.size() != k) throw std::invalid_argument("evidence is not one per arm");
  std::vector<ArmEvidence> ev(k);
  for (size_t a = 0; a < k; ++a) {
    if (!ArmEvidence::from_json(j[a], &ev[a])) throw std::invalid_argument("malformed evidence");
    const auto& list = j[a].at("open");
    if (!list.is_array() || list.size() > ConnectionTable::kMaxConnections)
      throw std::invalid_argument("open connections malformed");
    for (const auto& oj : list) {
      SavedSums s = saved_sums(oj);
      s.sums.evidence = ev[a].id();
      s.arm = a;
      open->push_back(s);
    }
  }
  return ev;
}

// A rule's open connections as its table can hold them
// (connection_table.h): each connection in at most kSlots evidences, in
// each once (twice, its next transfer would find no slot for the evidence
// it adds to), all of one arm (the kernel draws the arm per connection),
// seen last at one time and in one network namespace, and at most
// kMaxConnections of them.
void check_open_connections(const std::vector<SavedSums>& open) {
  struct Seen {
    size_t arm;
    double last_seen_s;
    uint32_t netns;
    std::set<uint64_t> evidences;
  };
  std::map<uint64_t, Seen> by_key;
  for (const SavedSums& s : open) {
    auto [it, added] = by_key.try_emplace(s.key, Seen{s.arm, s.last_seen_s, s.netns, {}});
    Seen& seen = it->second;
    const std::string which = "open connection " + std::to_string(s.key);
    if (!seen.evidences.insert(s.sums.evidence).second)
      throw std::invalid_argument(which + " is twice in one arm's evidence");
    if (seen.evidences.size() > ConnectionTable::kSlots)
      throw std::invalid_argument(which + " is in more than " + std::to_string(ConnectionTable::kSlots) +
                                  " evidences");
    if (seen.arm != s.arm) throw std::invalid_argument(which + " is of two arms");
    if (seen.last_seen_s != s.last_seen_s) throw std::invalid_argument(which + " was last seen at two times");
    if (seen.netns != s.netns) throw std::invalid_argument(which + " is in two network namespaces");
  }
  if (by_key.size() > ConnectionTable::kMaxConnections)
    throw std::invalid_argument(std::to_string(by_key.size()) + " open connections, more than a rule keeps (" +
                                std::to_string(ConnectionTable::kMaxConnections) + ")");
}

// A cohort's decision and latest test agree with its state: the evidence of
// the last decision or revert as test_rule() writes it, of the action that
// made the state (an exploring cohort has made none; a state written by
// hand may leave it null), and the test as it shows it.
void check_decision(const nlohmann::json& cj, const std::string& label, const std::string& state) {
  const nlohmann::json& d = cj.at("decision");
  if (!d.is_null()) {
    if (!d.is_object() || !d.contains("action") || d.at("action") != state)
      throw std::invalid_argument("cohort " + label + ": " + state + " by a decision of another state");
    if (!d.contains("at_s") || !d.at("at_s").is_number() || !std::isfinite(d.at("at_s").get<double>()))
      throw std::invalid_argument("cohort " + label + ": a decision at no time");
  }
  if (cj.contains("decided_at_s") != (state == "decided"))
    throw std::invalid_argument("cohort " + label + ": decided_at_s " +
                                (state == "decided" ? "missing" : "in a cohort not decided"));
  const nlohmann::json& t = cj.value("last_test", nlohmann::json());
  if (!t.is_null() && !(t.is_object() && t.contains("hypothesis") && t.at("hypothesis").is_string()))
    throw std::invalid_argument("cohort " + label + ": last_test is not a test");
}

}  // namespace

nlohmann::json CcController::save() const {
  std::lock_guard<std::mutex> lock(mu_);
  nlohmann::json doc = {{"version", kStateVersion}, {"rules", nlohmann::json::object()}};
  for (const auto& r : rules_) {
    const OpenSums open = open_sums(r->connections);
    nlohmann::json rj;
    rj["settings"] = controller::settings_of(r->spec, r->match, r->class_names, r->throughput_min_bytes);
    rj["decisions"] = r->decisions;
    rj["reverts"] = r->reverts;
    rj["cohorts"] = nlohmann::json::array();
    for (const auto& [_, c] : r->pools) rj["cohorts"].push_back(cohort_state(c, open));
    for (const auto& [_, c] : r->asns) rj["cohorts"].push_back(cohort_state(c, open));
    rj["candidates"] = nlohmann::json::object();
    for (const auto& [asn, ev] : r->candidates) rj["candidates"][std::to_string(asn)] = evidence_json(ev, open);
    doc["rules"][r->name] = std::move(rj);
  }
  return doc;
}

bool CcController::restore(const nlohmann::json& doc, std::string* error) {
  std::lock_guard<std::mutex> lock(mu_);
  // Everything is parsed and checked before anything is applied.
  struct Parsed {
    Rule* rule;
    std::map<std::string, Cohort> pools;
    std::map<uint32_t, Cohort> asns;
    std::map<uint32_t, std::vector<ArmEvidence>> candidates;
    std::vector<SavedSums> open;
    uint64_t decisions, reverts;
  };
  std::vector<Parsed> parsed;
  int version = 0;
  try {
    if (!doc.is_object() || !doc.at("version").is_number_integer() || doc.at("version") < 1 ||
        doc.at("version") > kStateVersion) {
      *error = "not a version 1 to " + std::to_string(kStateVersion) + " controller state";
      return false;
    }
    version = doc.at("version").get<int>();
    // Before version 4 the evidence counted transfers as independent units:
    // the cohorts' states and weights are kept, their evidence is not.
    const bool with_evidence = version >= 4;
    if (!doc.at("rules").is_object()) throw std::invalid_argument("rules is not an object");
    for (const auto& [name, rj] : doc.at("rules").items()) {
      auto it = by_name_.find(name);
      if (it == by_name_.end()) continue;  // no longer a controller rule
      Rule& r = *it->second;
      const size_t k = r.arm_names.size();
      if (rj.at("settings") != controller::settings_of(r.spec, r.match, r.class_names, r.throughput_min_bytes))
        continue;  // the rule changed: it starts afresh
      Parsed p{&r, {}, {}, {}, {}, u64_at(rj, "decisions"), u64_at(rj, "reverts")};
      if (!rj.at("cohorts").is_array() || rj.at("cohorts").size() > r.class_names.size() + r.spec.max_cohorts)
        throw std::invalid_argument("more cohorts than the rule can have");
      for (const auto& cj : rj.at("cohorts")) {
        Cohort c;
        c.label = cj.at("label").get<std::string>();
        c.is_asn = cj.at("is_asn").get<bool>();
        c.kernel_key = u32_at(cj, "kernel_key");
        const std::string state = cj.at("state").get<std::string>();
        if (state == "decided") {
          c.state = CohortState::kDecided;
        } else if (state == "reverted") {
          c.state = CohortState::kReverted;
        } else if (state != "exploring") {
          *error = "cohort " + c.label + ": unknown state \"" + state + "\"";
          return false;
        }
        if (!cj.at("winner").is_number_integer() || cj.at("winner") < -1 || cj.at("winner") >= static_cast<int>(k))
          throw std::invalid_argument("cohort " + c.label + ": winner out of range");
        c.winner = cj.at("winner").get<int>();
        const std::string objective = cj.at("objective").get<std::string>();
        if (objective != "fct" && objective != "throughput")
          throw std::invalid_argument("cohort " + c.label + ": unknown objective \"" + objective + "\"");
        c.objective = objective == "throughput" ? Objective::kThroughput : Objective::kFct;
        if (!cj.at("weights").is_array() || cj.at("weights").size() != k)
          throw std::invalid_argument("cohort " + c.label + ": weights do not fit the rule's arms");
        uint64_t sum = 0;  // in 64 bits: no wrap-around passes for 100
        for (const auto& w : cj.at("weights")) {
          if (!non_negative_integer(w) || w.get<uint64_t>() > 100)
            throw std::invalid_argument("cohort " + c.label + ": a weight is not a percentage");
          sum += w.get<uint64_t>();
          c.weights.push_back(w.get<uint32_t>());
        }
        const bool winner_ok = c.state == CohortState::kDecided ? c.winner >= 0 : c.winner == -1;
        if (!winner_ok || sum != 100) {
          *error = "cohort " + c.label + ": winner or weights do not fit the rule's " + std::to_string(k) + " arms";
          return false;
        }
        c.epoch_start_s = finite_at(cj, "epoch_start_s");
        c.max_e = finite_at(cj, "max_e");
        if (c.max_e < 1) throw std::invalid_argument("cohort " + c.label + ": max_e below 1");
        check_decision(cj, c.label, state);
        c.decision = cj.at("decision");
        c.last_test = cj.value("last_test", nlohmann::json());
        if (cj.contains("decided_at_s")) c.decided_at_s = finite_at(cj, "decided_at_s");
        if (with_evidence) {
          c.evidence = evidence_from(cj.at("evidence"), k, &p.open);
        } else {
          c.evidence.assign(k, ArmEvidence());
          c.epoch_start_s = 0;  // the next test starts the epoch
          c.max_e = 1;
        }
        if (c.is_asn) {
          if (r.spec.cohort != CohortKind::kAsn || c.kernel_key != asn_of(c.label)) {
            *error = "cohort " + c.label + ": not an ASN cohort of this rule";
            return false;
          }
          const std::string label = c.label;
          if (!p.asns.emplace(c.kernel_key, std::move(c)).second)
            throw std::invalid_argument("cohort " + label + " is there twice");
        } else {
          // The peer classes are among the settings: under the same ones,
          // a pool of no class is no state this rule could have saved.
          if (c.kernel_key != TCPSCOPE_COHORT_CLASS_KEY(r.class_id(c.label)) ||
              std::find(r.class_names.begin(), r.class_names.end(), c.label) == r.class_names.end())
            throw std::invalid_argument("cohort " + c.label + ": not a peer class of this rule");
          const std::string label = c.label;
          if (!p.pools.emplace(label, std::move(c)).second)
            throw std::invalid_argument("cohort " + label + " is there twice");
        }
      }
      if (p.asns.size() > r.spec.max_cohorts) throw std::invalid_argument("more ASN cohorts than max_cohorts");
      if (with_evidence) {
        if (!rj.at("candidates").is_object() || rj.at("candidates").size() > controller::candidate_cap(r.spec))
          throw std::invalid_argument("more candidate ASNs than the rule follows");
        for (const auto& [asn, ej] : rj.at("candidates").items()) {
          const uint32_t n = asn_of(asn);
          if (p.asns.count(n)) throw std::invalid_argument("ASN " + asn + " is both a cohort and a candidate");
          if (p.candidates.count(n)) throw std::invalid_argument("candidate ASN " + asn + " is there twice");
          p.candidates.emplace(n, evidence_from(ej, k, &p.open));
        }
      }
      check_open_connections(p.open);
      parsed.push_back(std::move(p));
    }
  } catch (const std::exception& e) {
    *error = e.what();
    return false;
  }
  if (version < 4 && log_ && !parsed.empty())
    log_("tcpscope: controller: saved state version " + std::to_string(version) + " counted transfers as "
         "independent units, not connections: the cohorts' states and weights are kept, their evidence starts "
         "afresh");
  for (auto& p : parsed) {
    Rule& r = *p.rule;
    r.pools = std::move(p.pools);
    r.asns = std::move(p.asns);
    r.candidates = std::move(p.candidates);
    r.decisions = p.decisions;
    r.reverts = p.reverts;
    r.connections.clear();
    for (const auto& s : p.open) r.connections.restore(s.key, s.netns, s.sums, s.last_seen_s);
  }
  update_metrics();
  return true;
}

}  // namespace tcpscope
