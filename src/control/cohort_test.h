// The controller's statistics: one interval's test of a cohort's evidence
// (cc_controller.h, "Statistics"), and the numbers a decision is explained
// with (the arms' medians, the test's change, interval and e-value). The
// state machine acts on a test's outcome; this file alone decides what the
// evidence says, so the status, the log and a decision's record show the
// same numbers.
#pragma once

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "config/config.h"
#include "control/arm_evidence.h"
#include "control/sequential_test.h"

namespace tcpscope::controller {

// One test of a cohort: its hypothesis' e-value and what a decision on it
// would rest on.
struct CohortTest {
  bool testable = false;
  double e = 1;
  int winner = -1;
  int other = -1;  // the arm the weakest pair was against
  Objective objective = Objective::kFct;
  SequentialResult pair;  // winner vs other, diff from other to winner
  bool guards_ok = true;
  std::string guard_note;  // the guard that failed, for the log
  bool reversal_alarm = false;  // decided: the batch detector saw the winner turn worse
};

// Exploring: is one arm better than every other on an objective?
CohortTest test_exploring(const std::vector<ArmEvidence>& ev, const ControllerSpec& spec);

// Decided: is the winner now worse than an arm of the control slice on the
// objective it won, or beyond a guard's bound? `batch` and `reversal_e` are
// the cohort's reversal detector (cohort_test.cc), updated here.
CohortTest test_decided(const std::vector<ArmEvidence>& ev, int winner, Objective o, const ControllerSpec& spec,
                        std::vector<ArmEvidence>* batch, double* reversal_e);

// One arm's evidence as the status and a decision show it.
nlohmann::json arm_json(const ArmEvidence& a);

// A testable test's numbers as the status shows them (objective, arms,
// change, interval, e-value, guards).
nlohmann::json test_json(const CohortTest& t, const std::vector<std::string>& arm_names);

// The log's account of a test: "fct A vs B +12.0% [..], counts, e (e-BH ...)".
std::string test_summary(const CohortTest& t, const std::vector<std::string>& arm_names,
                         const std::vector<ArmEvidence>& ev, size_t tested_cohorts, double fdr);

// The log's account of a reversal alarm: the detector's statistic against its threshold.
std::string reversal_note(double reversal_e);

}  // namespace tcpscope::controller
