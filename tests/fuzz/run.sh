#!/usr/bin/env bash
# Builds the libFuzzer targets (tests/fuzz/*_fuzz.cc) with clang, ASan and
# UBSan in the sanitized build (tests/sanitized_build.sh: build-fuzz/), then
# runs each one for a bounded time on its seed corpus
# (tests/fuzz/corpus/<target>/; the config target also reads every
# file of tests/data/configs). Fails on any crash, hang, leak or sanitizer
# report; the input that caused it is kept in build-fuzz/artifacts/<target>/
# and printed in base64, to be added to the corpus once fixed.
#
#   tests/fuzz/run.sh                 all targets, FUZZ_SECONDS (20) each
#   FUZZ_SECONDS=300 tests/fuzz/run.sh http_request
#   FUZZ_SEED=0 FUZZ_SECONDS=600 tests/fuzz/run.sh   a random seed: explore
#
# The seed is fixed (1) by default so that CI does not go red on the day a
# random walk happens upon an old bug: a short CI run repeats the same walk,
# and exploring is a separate, longer run with FUZZ_SEED=0. (A config error
# message of 2 kB was found that way by CI, not by a local run.)
#
# New inputs found during a run go to a temporary directory, not into the
# checked-in corpus: keep it small and reviewed.
set -euo pipefail
cd "$(dirname "$0")/../.."
ROOT=$(pwd)
SECONDS_EACH=${FUZZ_SECONDS:-20}
SEED=${FUZZ_SEED:-1}
TARGETS=("$@")
((${#TARGETS[@]})) || TARGETS=(config prefix_file mmdb http_request json_text controller_state)

die() { echo "fuzz: $*" >&2; exit 1; }

BUILD=$("$ROOT/tests/sanitized_build.sh")  # shared with tests/sanitize.sh
cmake --build "$BUILD" -j "$(nproc)" --target "${TARGETS[@]/%/_fuzz}"

work=$(mktemp -d /tmp/tcpscope-fuzz.XXXXXX)
trap 'rm -rf "$work"' EXIT
# Leaks in Debian libraries that are not tcpscope's (see the file).
export LSAN_OPTIONS="suppressions=$ROOT/tests/fuzz/lsan.supp:print_suppressions=0"
export UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1"

failed=()
for t in "${TARGETS[@]}"; do
  bin="$BUILD/${t}_fuzz"
  seeds=("$ROOT/tests/fuzz/corpus/$t")
  [[ $t == config ]] && seeds+=("$ROOT/tests/data/configs")
  args=(-max_total_time="$SECONDS_EACH" -runs=50000000 -timeout=15 -rss_limit_mb=2048
        -print_final_stats=1 -seed="$SEED" -artifact_prefix="$BUILD/artifacts/$t/")
  # Requests past the server's 8 KiB head limit from the start, not after growing slowly.
  [[ $t == http_request ]] && args+=(-max_len=12000 -len_control=0)
  # Allocations inside libmaxminddb (no frame pointers) need the slow
  # unwinder for the suppression to see MMDB_open; elsewhere it costs 5x.
  asan="detect_stack_use_after_return=1"
  [[ $t == mmdb ]] && asan+=":fast_unwind_on_malloc=0"
  mkdir -p "$work/$t" "$BUILD/artifacts/$t"
  log="$BUILD/artifacts/$t.log"
  start=$(date +%s)
  # The watchdog: libFuzzer's own limits, plus a hard stop for a wedged run.
  if ASAN_OPTIONS=$asan timeout --signal=KILL $((SECONDS_EACH * 3 + 120)) "$bin" "${args[@]}" "$work/$t" "${seeds[@]}" >"$log" 2>&1; then
    runs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)
    echo "fuzz: $t: ok, ${runs:-?} inputs in $(( $(date +%s) - start )) s"
  else
    rc=$?
    echo "fuzz: $t: FAILED (exit $rc); log $log" >&2
    grep -E "ERROR|SUMMARY|_fuzz:|Test unit written|Base64" "$log" | head -20 >&2 || tail -20 "$log" >&2
    failed+=("$t")
  fi
done
((${#failed[@]} == 0)) || die "failed: ${failed[*]}"
