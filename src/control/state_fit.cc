#include "control/state_fit.h"

#include <algorithm>
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
  struct Candidate {
    uint64_t transfers;
    std::string rule, asn;
  };
  std::vector<Candidate> candidates;
  // 1. The candidates' sketches.
  for (auto& [name, rule] : rules.items())
    for (auto& [asn, arms] : rule["candidates"].items()) {
      size -= drop_sketches(arms);
      candidates.push_back({transfers_of(arms), name, asn});
    }
  out.trimmed = "the candidate ASNs' medians";
  // 2. The candidates, smallest first: each a member "ASN":[...] and a comma.
  std::sort(candidates.begin(), candidates.end(),
            [](const Candidate& a, const Candidate& b) { return a.transfers < b.transfers; });
  size_t dropped = 0;
  for (; dropped < candidates.size() && size > max_bytes; ++dropped) {
    nlohmann::json& list = rules[candidates[dropped].rule]["candidates"];
    size -= size_of(list[candidates[dropped].asn]) + candidates[dropped].asn.size() + 4;
    list.erase(candidates[dropped].asn);
  }
  if (dropped)
    out.trimmed += " and " + std::to_string(dropped) + " of " + std::to_string(candidates.size()) +
                   " candidate ASNs (the smallest)";
  // 3. The cohorts' sketches.
  if (size > max_bytes) {
    for (auto& [_, rule] : rules.items())
      for (auto& cohort : rule["cohorts"]) drop_sketches(cohort["evidence"]);
    out.trimmed = "every median and all " + std::to_string(candidates.size()) + " candidate ASNs";
  }
  out.text = json_text(doc) + "\n";
  out.fits = out.text.size() <= max_bytes;
  return out;
}

}  // namespace tcpscope
