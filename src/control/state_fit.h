// The controller's saved state within the size loading accepts: a state
// larger than that would be written and then refused at every start
// (controller_store.h). When it does not fit, what goes first is what no
// decision rests on:
//   1. the candidate ASNs' sketches (medians of ASNs not yet a cohort);
//   2. the candidate ASNs themselves, smallest first (they are followed
//      again from their next transfers);
//   3. every cohort's sketches (the medians shown start again).
// The sums the tests rest on, and each open connection's, are never
// dropped: at the largest config (max_cohorts 1000, 8 arms, a full table of
// open connections) they fit (tests/unit/control/state_fit_test.cc).
#pragma once

#include <cstddef>
#include <string>

#include <nlohmann/json.hpp>

namespace tcpscope {

struct FittedState {
  std::string text;     // the state as written, with its newline
  std::string trimmed;  // what was dropped to fit, "" when nothing was
  bool fits = false;    // false: even the sums alone are over max_bytes
};

FittedState fit_state(nlohmann::json doc, size_t max_bytes);

}  // namespace tcpscope
