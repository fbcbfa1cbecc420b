#!/usr/bin/env bash
# Builds the unit tests with AddressSanitizer and UndefinedBehaviorSanitizer
# (any UB report is fatal) in build-asan/ and runs them. Only the unit-test
# target is built: no BPF skeleton, no daemon, no benchmarks.
#
#   tests/sanitize.sh [gtest flags, e.g. --gtest_filter=Config*]
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${TCPSCOPE_ASAN_BUILD:-build-asan}
FLAGS="-O1 -g -fsanitize=address,undefined -fno-sanitize-recover=undefined -fno-omit-frame-pointer"

CC_BIN=$(command -v clang-14 || command -v clang || command -v cc)
CXX_BIN=$(command -v clang++-14 || command -v clang++ || command -v c++)
cmake -S . -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Debug -DCMAKE_C_COMPILER="$CC_BIN" -DCMAKE_CXX_COMPILER="$CXX_BIN" \
  -DCMAKE_C_FLAGS="$FLAGS" -DCMAKE_CXX_FLAGS="$FLAGS" \
  -DCMAKE_EXE_LINKER_FLAGS="-fsanitize=address,undefined" \
  -DTCPSCOPE_TESTS=ON -DTCPSCOPE_BENCH=OFF >/dev/null
cmake --build "$BUILD" -j "$(nproc)" --target tcpscope_unit_tests

export ASAN_OPTIONS="detect_leaks=1:detect_stack_use_after_return=1:strict_string_checks=1:check_initialization_order=1"
export UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1"
# Leaks inside Debian libraries that are not tcpscope's (documented there).
export LSAN_OPTIONS="suppressions=$(pwd)/tests/fuzz/lsan.supp:print_suppressions=0"
"$BUILD/tcpscope_unit_tests" "$@"
