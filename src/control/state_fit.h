// The controller's saved state within the size loading accepts: a state
// larger than that would be written and then refused at every start
// (controller_store.h). When it does not fit, what goes, in this order:
//   1. open connections, the longest idle first, each with its sums in
//      every evidence (a connection idle that long has most likely closed
//      unseen; one that has not starts a new cluster at its next transfer);
//   2. the candidate ASNs' sketches (medians of ASNs not yet a cohort);
//   3. the candidate ASNs themselves, smallest first (they are followed
//      again from their next transfers);
//   4. every cohort's sketches (the medians shown start again).
// The cohorts' own sums, which the tests rest on, are never dropped: at the
// largest config (max_cohorts 1000, 8 arms) they fit with room to spare
// (tests/unit/control/state_fit_test.cc).
#pragma once

#include <cstddef>
#include <string>

#include <nlohmann/json.hpp>

namespace tcpscope {

struct FittedState {
  std::string text;     // the state as written, with its newline
  std::string trimmed;  // what was dropped to fit, with counts; "" when nothing was
  bool fits = false;    // false: over max_bytes even with all of the above dropped
};

FittedState fit_state(nlohmann::json doc, size_t max_bytes);

}  // namespace tcpscope
