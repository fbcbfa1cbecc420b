#!/usr/bin/env bash
# Configures the one clang build with AddressSanitizer and UndefinedBehaviorSanitizer
# (any UB report is fatal) that tests/sanitize.sh (the unit tests) and
# tests/fuzz/run.sh (the libFuzzer targets) build their targets in, and
# prints its directory: the stages are compiled once for both. No BPF
# skeleton, no daemon, no benchmarks are built there.
#   tests/sanitized_build.sh     (TCPSCOPE_SANITIZED_BUILD: the directory, build-fuzz/ by default)
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
BUILD=${TCPSCOPE_SANITIZED_BUILD:-$ROOT/build-fuzz}
# shellcheck source=tests/clang_compilers.sh
source "$ROOT/tests/clang_compilers.sh" "sanitized build"
cmake -S "$ROOT" -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DCMAKE_C_COMPILER="$CC_BIN" -DCMAKE_CXX_COMPILER="$CXX_BIN" \
  -DTCPSCOPE_FUZZ=ON -DTCPSCOPE_TESTS=ON -DTCPSCOPE_BENCH=OFF >/dev/null
echo "$BUILD"
