#!/usr/bin/env bash
# Builds the daemon, BPF skeleton included, with ThreadSanitizer and prints
# the binary's path: tests/integration/test_sanitized_stop.py runs it under
# requests while it starts and stops. Only the `tcpscope` target is built
# (no tests, no benchmarks), at -O1 with line tables only, to keep the
# build short.
# libbpf, prometheus-cpp, yaml-cpp and librdkafka stay uninstrumented
# system libraries: TSan sees their locks (pthread is intercepted) but not
# their memory accesses.
#   tests/tsan_daemon_build.sh     (TCPSCOPE_TSAN_BUILD: the directory, build-tsan/ by default)
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
BUILD=${TCPSCOPE_TSAN_BUILD:-$ROOT/build-tsan}
# shellcheck source=tests/clang_compilers.sh
source "$ROOT/tests/clang_compilers.sh" "TSan build"
LAUNCHER=()
if command -v ccache >/dev/null; then
  LAUNCHER=(-DCMAKE_C_COMPILER_LAUNCHER=ccache -DCMAKE_CXX_COMPILER_LAUNCHER=ccache)
fi
FLAGS="-fsanitize=thread -O1 -gline-tables-only -fno-omit-frame-pointer"
cmake -S "$ROOT" -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=TSan \
  -DCMAKE_C_COMPILER="$CC_BIN" -DCMAKE_CXX_COMPILER="$CXX_BIN" "${LAUNCHER[@]}" \
  -DCMAKE_C_FLAGS_TSAN="$FLAGS" -DCMAKE_CXX_FLAGS_TSAN="$FLAGS" \
  -DCMAKE_EXE_LINKER_FLAGS_TSAN=-fsanitize=thread \
  -DTCPSCOPE_TESTS=OFF -DTCPSCOPE_BENCH=OFF >&2
cmake --build "$BUILD" --target tcpscope >&2
echo "$BUILD/tcpscope"
