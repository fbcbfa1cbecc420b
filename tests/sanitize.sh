#!/usr/bin/env bash
# Builds the unit tests with AddressSanitizer and UndefinedBehaviorSanitizer
# (any UB report is fatal) in the sanitized build (tests/sanitized_build.sh,
# shared with the fuzz targets) and runs them. Only the unit-test target is
# built: no BPF skeleton, no daemon, no benchmarks.
#
#   tests/sanitize.sh [gtest flags, e.g. --gtest_filter=Config*]
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=$(tests/sanitized_build.sh)
cmake --build "$BUILD" -j "$(nproc)" --target tcpscope_unit_tests

export ASAN_OPTIONS="detect_leaks=1:detect_stack_use_after_return=1:strict_string_checks=1:check_initialization_order=1"
export UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1"
# Leaks inside Debian libraries that are not tcpscope's (documented there).
export LSAN_OPTIONS="suppressions=$(pwd)/tests/fuzz/lsan.supp:print_suppressions=0"
# Without arguments, all but the tests whose work is size, not new code
# paths (the plain unit tests run them): the largest config's controller
# state, fitted and loaded (210 s under the sanitizers on CI's 2-core
# machine), the loop's three longest simulations (about 100 s; their short
# ones, through the same code, stay) and 10,000 cgroups made and removed.
SIZE_ONLY=StateFit.TheLargestConfigsStateIsTrimmedToWhatLoadingAccepts
SIZE_ONLY+=:LoopSimulation.DecisionTimeOfATenPercentEffectOnShortAndOnLongLivedConnections
SIZE_ONLY+=:LoopSimulation.AReversalIsSeenWithinFifteenMinutesDownToAFivePercentControlShare
SIZE_ONLY+=:LoopSimulation.ADecidedCohortWhoseArmsBecomeEqualIsRarelyReverted
SIZE_ONLY+=:ServiceNamesTest.TenThousandShortLivedCgroupsLeaveNothingBehind
(($#)) || set -- --gtest_filter=-$SIZE_ONLY
"$BUILD/tcpscope_unit_tests" "$@"
