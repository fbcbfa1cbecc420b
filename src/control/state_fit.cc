#include "control/state_fit.h"

#include <algorithm>
#include <cstdint>
#include <map>
#include <set>
#include <tuple>
#include <utility>
#include <vector>

#include "text/json_text.h"

namespace tcpscope {

namespace {

// Compact JSON: a value's text is the same alone as inside the document.
size_t size_of(const nlohmann::json& j) { return json_text(j).size(); }

// Empties every sketch of the evidence array `arms` (one per arm); returns
// the bytes saved.
size_t drop_sketches(nlohmann::json& arms) {
  const size_t before = size_of(arms);
  for (auto& arm : arms)
    for (const char* k : {"fct_sketch", "throughput_sketch"})
      if (arm.contains(k)) {
        nlohmann::json& s = arm[k];
        s["counts"] = nlohmann::json::array();
        s["count"] = 0;
        s["zero_count"] = 0;
        s["min"] = 0;
        s["max"] = 0;
        s["collapsed"] = false;
        s["clamped"] = 0;
      }
  return before - size_of(arms);
}

uint64_t transfers_of(const nlohmann::json& arms) {
  uint64_t n = 0;
  for (const auto& arm : arms) n += arm.value("transfers", uint64_t{0});
  return n;
}

// Calls f on each list of open connections of a rule: one per arm of each
// cohort's and each candidate's evidence.
template <class F>
void for_each_open_list(nlohmann::json& rule, F f) {
  auto of_arms = [&](nlohmann::json& arms) {
    for (auto& arm : arms)
      if (arm.contains("open")) f(arm["open"]);
  };
  if (rule.contains("cohorts"))
    for (auto& cohort : rule["cohorts"])
      if (cohort.contains("evidence")) of_arms(cohort["evidence"]);
  if (rule.contains("candidates"))
    for (auto& [_, arms] : rule["candidates"].items()) of_arms(arms);
}

// An open connection as saved (controller_saved_state.cc): [key, six sums,
// last seen s, netns], in each evidence it adds to.
uint64_t key_of(const nlohmann::json& open) { return open.at(0).get<uint64_t>(); }
double last_seen_of(const nlohmann::json& open) { return open.at(7).get<double>(); }

// Drops open connections, the longest idle first, each from every evidence
// it is in, until `excess` bytes are saved or none is left. Returns the
// bytes saved (commas not counted: never more than the text loses), and
// how many connections went of how many.
size_t drop_open_connections(nlohmann::json& rules, size_t excess, size_t* dropped, size_t* total) {
  using Id = std::pair<size_t, uint64_t>;  // the rule's place in `rules`, the key: one rule's connection
  struct Connection {
    double last_seen_s = 0;
    size_t bytes = 0;
  };
  std::map<Id, Connection> connections;
  size_t rule_index = 0;
  for (auto& [_, rule] : rules.items()) {
    for_each_open_list(rule, [&](nlohmann::json& list) {
      for (const auto& open : list) {
        Connection& c = connections[{rule_index, key_of(open)}];
        c.last_seen_s = last_seen_of(open);
        c.bytes += size_of(open);
      }
    });
    ++rule_index;
  }
  std::vector<std::pair<Id, Connection>> idlest(connections.begin(), connections.end());
  std::sort(idlest.begin(), idlest.end(), [](const auto& a, const auto& b) {
    return std::tie(a.second.last_seen_s, a.first) < std::tie(b.second.last_seen_s, b.first);
  });
  std::set<Id> gone;
  size_t saved = 0;
  for (const auto& [id, c] : idlest) {
    if (saved >= excess) break;
    gone.insert(id);
    saved += c.bytes;
  }
  *dropped = gone.size();
  *total = connections.size();
  if (gone.empty()) return 0;
  rule_index = 0;
  for (auto& [_, rule] : rules.items()) {
    for_each_open_list(rule, [&](nlohmann::json& list) {
      nlohmann::json kept = nlohmann::json::array();
      for (auto& open : list)
        if (!gone.count({rule_index, key_of(open)})) kept.push_back(std::move(open));
      list = std::move(kept);
    });
    ++rule_index;
  }
  return saved;
}

}  // namespace

FittedState fit_state(nlohmann::json doc, size_t max_bytes) {
  FittedState out;
  out.text = json_text(doc) + "\n";
  size_t size = out.text.size();
  if (size <= max_bytes) {
    out.fits = true;
    return out;
  }
  nlohmann::json& rules = doc["rules"];
  std::vector<std::string> trimmed;
  // 1. Open connections, the longest idle first.
  size_t dropped = 0, total = 0;
  size -= drop_open_connections(rules, size - max_bytes, &dropped, &total);
  if (dropped)
    trimmed.push_back(std::to_string(dropped) + " of " + std::to_string(total) +
                      " open connections (the longest idle)");
  // 2. The candidates' sketches.
  if (size > max_bytes) {
    struct Candidate {
      uint64_t transfers;
      std::string rule, asn;
    };
    std::vector<Candidate> candidates;
    for (auto& [name, rule] : rules.items())
      for (auto& [asn, arms] : rule["candidates"].items()) {
        size -= drop_sketches(arms);
        candidates.push_back({transfers_of(arms), name, asn});
      }
    if (!candidates.empty())
      trimmed.push_back("the medians of all " + std::to_string(candidates.size()) + " candidate ASNs");
    // 3. The candidates, smallest first: each a member "ASN":[...] and a comma.
    std::sort(candidates.begin(), candidates.end(),
              [](const Candidate& a, const Candidate& b) { return a.transfers < b.transfers; });
    dropped = 0;
    for (; dropped < candidates.size() && size > max_bytes; ++dropped) {
      nlohmann::json& list = rules[candidates[dropped].rule]["candidates"];
      size -= size_of(list[candidates[dropped].asn]) + candidates[dropped].asn.size() + 4;
      list.erase(candidates[dropped].asn);
    }
    if (dropped)
      trimmed.push_back(std::to_string(dropped) + " of " + std::to_string(candidates.size()) +
                        " candidate ASNs (the smallest)");
  }
  // 4. The cohorts' sketches.
  if (size > max_bytes) {
    size_t cohorts = 0;
    for (auto& [_, rule] : rules.items())
      for (auto& cohort : rule["cohorts"]) {
        drop_sketches(cohort["evidence"]);
        ++cohorts;
      }
    if (cohorts) trimmed.push_back("the medians of all " + std::to_string(cohorts) + " cohorts");
  }
  for (const auto& t : trimmed) out.trimmed += (out.trimmed.empty() ? "" : ", ") + t;
  out.text = json_text(doc) + "\n";
  out.fits = out.text.size() <= max_bytes;
  return out;
}

}  // namespace tcpscope
