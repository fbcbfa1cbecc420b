#!/usr/bin/env bash
# Runs every benchmark of bench/README.md and writes bench/results/*.json.
#
#   bench/run_all.sh            full runs (about 50 minutes on 2 cores)
#   bench/run_all.sh --smoke    seconds-long runs: does everything still work?
#
# Uses the build in $TCPSCOPE_BUILD (default build/). Other load on the machine
# skews every ratio: run it on an idle machine and read the load average it
# prints (and records in each JSON).
set -euo pipefail
cd "$(dirname "$0")/.."

BUILD=$(realpath "${TCPSCOPE_BUILD:-build}")
OUT=${TCPSCOPE_BENCH_RESULTS:-bench/results}
export TCPSCOPE_BUILD=$BUILD
smoke=0
[[ ${1:-} == --smoke ]] && smoke=1

[[ $EUID -eq 0 ]] || { echo "run_all.sh: run as root (network namespaces, BPF)" >&2; exit 1; }
[[ -x $BUILD/tcpscope && -x $BUILD/tcpscope_bench && -x $BUILD/tcpscope-bench-floor ]] || {
  echo "run_all.sh: $BUILD/tcpscope, tcpscope_bench or tcpscope-bench-floor missing: build first (scripts/dev.sh build)" >&2; exit 1; }
mkdir -p "$OUT"
echo "== load average before: $(cut -d' ' -f1-3 /proc/loadavg), $(nproc) CPUs, kernel $(uname -r)"

if ((smoke)); then
  micro_args=(--benchmark_min_time=0.01)
  lookup_args=()
  profile_args=(--seconds 8 --prefixes 20000)
  churn_args=(--seconds 3 --prefixes 20000)
  bulk_args=(--seconds 2 --reps 1 --prefixes 20000)
  cost_args=(--seconds 2 --prefixes 20000)
  scale_args=(--connections 4000 --prefixes 20000)
  floor_args=(--seconds 2 --reps 1 --prefixes 20000)
  keepalive_args=(--seconds 1 --rounds 1 --sizes 1000)
  edge_args=(--seconds 1 --rounds 1)
  breakdown_args=(--seconds 1 --rounds 1)
  controller_args=(--smoke)
  kafka_args=(--seconds 2 --repeat 1 --prefixes 20000 --compressions zstd)
else
  micro_args=()
  lookup_args=(--benchmark_repetitions=3)
  profile_args=(--seconds 25)
  churn_args=(--seconds 60)
  bulk_args=(--seconds 10 --reps 6)
  cost_args=(--seconds 20)
  scale_args=(--connections 100000)
  floor_args=(--seconds 20 --reps 3)
  keepalive_args=(--seconds 15 --rounds 3 --profiles this,linux-6.12,debian12-6.1)
  edge_args=(--seconds 8 --rounds 5)
  breakdown_args=(--seconds 6 --rounds 3)
  controller_args=(--duration 120 --json "$OUT/controller_lab.json")
  kafka_args=(--seconds 12 --repeat 2 --compressions zstd,lz4,none)
fi

echo "== daemon pipeline micro-benchmarks (one core)"
"$BUILD/tcpscope_bench" --benchmark_filter='Pipeline|RenderFullCap|AsnLookup$' "${micro_args[@]}" \
  --benchmark_out="$OUT/micro.json" --benchmark_out_format=json
echo "== lookup micro-benchmarks: prefix trie, peer classes, ASN database (one core)"
"$BUILD/tcpscope_bench" --benchmark_filter='TrieLookup|PeerClassify|Asn' "${micro_args[@]}" "${lookup_args[@]}" \
  --benchmark_out="$OUT/lookup.json" --benchmark_out_format=json
echo "== connection churn"
python3 bench/churn.py "${churn_args[@]}" --out "$OUT/churn.json"
echo "== connection churn, HTTP: nginx + wrk"
python3 bench/churn.py --load nginx "${churn_args[@]}" --out "$OUT/churn_nginx.json"
echo "== kept-alive requests: every request and response a transfer (nginx + wrk)"
python3 bench/keepalive.py "${keepalive_args[@]}" --out "$OUT/keepalive.json"
echo "== an edge server's short connections and kept-alive requests (nginx + wrk): tcpscope beside the floors"
python3 bench/edge.py "${edge_args[@]}" --out "$OUT/edge.json"
echo "== where a new connection's cost goes (perf, the whole machine)"
if command -v perf >/dev/null; then
  python3 bench/breakdown.py "${breakdown_args[@]}" --out "$OUT/breakdown.json"
else
  echo "perf not installed (Debian: linux-perf): skipped"
fi
echo "== the closed loop in the lab: uniform CUBIC and BBR, the controller from equal shares, A/A, a loss change, a restart"
python3 bench/controller_lab.py "${controller_args[@]}"
echo "== export.kafka: daemon CPU per record and bytes per record with a real Kafka broker"
python3 bench/kafka_export.py "${kafka_args[@]}" --out "$OUT/kafka_export.json"
echo "== the floor: the least any tracker of every flow costs (state-change tracepoint, SK_STORAGE, ring)"
python3 bench/floor.py "${floor_args[@]}" --out "$OUT/floor.json"
echo "== bulk throughput"
python3 bench/bulk.py "${bulk_args[@]}" --out "$OUT/bulk.json"
echo "== BPF program cost (bpf_stats)"
python3 bench/bpf_cost.py "${cost_args[@]}" --out "$OUT/bpf_cost.json"
echo "== where the CPU goes per connection (perf)"
if command -v perf >/dev/null; then
  python3 bench/profile.py "${profile_args[@]}" --out "$OUT/profile.json"
else
  echo "perf not installed (Debian: linux-perf): skipped"
fi
echo "== memory at scale"
python3 bench/scale.py "${scale_args[@]}" --out "$OUT/scale.json"
echo "== load average after: $(cut -d' ' -f1-3 /proc/loadavg); results in $OUT"
python3 bench/report.py "$OUT" > "$OUT/report.md"
echo "== Markdown tables for bench/README.md: $OUT/report.md"
