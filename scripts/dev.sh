#!/usr/bin/env bash
# One entry point for a fresh Debian 12 machine:
#   scripts/dev.sh run [tcpscope run flags]   install what the daemon needs, build it alone, run it
#   scripts/dev.sh test                       install what is missing, build, run every test
#   scripts/dev.sh build                      install what is missing, build
#   scripts/dev.sh package                    install what the .deb needs, build the daemon and the .deb, print its path
# Needs root: it installs Debian packages, and the daemon and the tests load BPF programs.
set -euo pipefail
cd "$(dirname "$0")/.."

BUILD_DIR=${TCPSCOPE_BUILD:-build}
# What building and running the daemon needs.
BUILD_PACKAGES=(
  build-essential cmake ninja-build pkg-config
  clang llvm libbpf-dev bpftool libelf-dev zlib1g-dev
  prometheus-cpp-dev libyaml-cpp-dev libmaxminddb-dev nlohmann-json3-dev librdkafka-dev
)
# What the deb target needs besides: dpkg-shlibdeps (CPack computes Depends
# with it; without it CMake makes no deb target).
PACKAGE_PACKAGES=(dpkg-dev)
# What the tests and the benchmarks need besides.
TEST_PACKAGES=(
  libgtest-dev libbenchmark-dev
  libclang-rt-14-dev  # clang's sanitizer and libFuzzer runtimes (tests/sanitize.sh, tests/fuzz/run.sh)
  iproute2 nftables procps curl python3 python3-pytest python3-pip
  tcpdump  # tests/lab: when each SYN reached the server (ground truth for passive starts)
  lz4 zstd  # tests/kernel_profiles/derive.py: the kernel images' compressions (Debian's 6.1, 6.12)
  qemu-system-x86 busybox-static kmod file  # tests/real_kernels/run.py: Debian's kernels booted by virtme-ng
  libmaxmind-db-writer-perl prometheus
  dpkg-dev lintian man-db systemd systemd-container strace adduser logrotate
  nginx-light wrk iperf3 libbpf-tools linux-perf  # wrk: bench/churn.py --load nginx
  nghttp2-client  # h2load: tests/lab/test_lab_transfers.py (HTTP/2 streams on one connection)
  librsvg2-bin  # compare --plot png (rsvg-convert)
  jq  # tests/integration/test_utf8_text.py: the flow log read back by another JSON reader
  protobuf-compiler  # tests/unit/export/kafka_protobuf_test.cc: protoc --decode against packaging/clickhouse/tcpscope.proto
  clickhouse-server clickhouse-client openjdk-17-jre-headless maven  # tests/fleet: ClickHouse 18.16, Kafka 4 (jars via mvn)
)

die() { echo "dev.sh: $*" >&2; exit 1; }

# install_missing PACKAGE...
install_missing() {
  local missing=()
  for p in "$@"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
  done
  if ((${#missing[@]})); then
    echo "dev.sh: installing ${missing[*]}"
    apt-get update -q
    DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "${missing[@]}"
  fi
}

# Everything: the daemon, the tests' binaries and the benchmarks.
build_all() {
  cmake -S . -B "$BUILD_DIR" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DTCPSCOPE_TESTS=ON -DTCPSCOPE_BENCH=ON
  cmake --build "$BUILD_DIR" -j "$(nproc)"
}

# The daemon alone. A build directory configured already keeps its options
# (a later `test` reuses what this one built); a new one is configured
# without the tests and benchmarks, whose packages `run` does not install.
build_daemon() {
  if [[ ! -f $BUILD_DIR/CMakeCache.txt ]]; then
    cmake -S . -B "$BUILD_DIR" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DTCPSCOPE_TESTS=OFF -DTCPSCOPE_BENCH=OFF
  fi
  cmake --build "$BUILD_DIR" -j "$(nproc)" --target tcpscope
}

# The Debian package from the daemon alone: a build directory configured
# already keeps its options, a new one is configured as for `run`. CMake runs
# again either way, so that a build directory configured before dpkg-dev was
# installed gets its deb target. Prints the package's path last.
build_package() {
  if [[ -f $BUILD_DIR/CMakeCache.txt ]]; then
    cmake -S . -B "$BUILD_DIR" >/dev/null
  else
    cmake -S . -B "$BUILD_DIR" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DTCPSCOPE_TESTS=OFF -DTCPSCOPE_BENCH=OFF
  fi
  cmake --build "$BUILD_DIR" -j "$(nproc)" --target deb
  local version arch deb
  version=$(sed -n 's/^CMAKE_PROJECT_VERSION:STATIC=//p' "$BUILD_DIR/CMakeCache.txt")
  arch=$(dpkg --print-architecture)
  deb=$(cd "$BUILD_DIR" && pwd)/tcpscope_${version}_${arch}.deb
  [[ -f $deb ]] || die "the deb target did not write $deb"
  echo "$deb"
}

# Debian's pytest; a python3 earlier on PATH (pyenv, venv) may lack it.
python_with_pytest() {
  if python3 -c 'import pytest' 2>/dev/null; then echo python3; else echo /usr/bin/python3; fi
}

# chdb-core: ClickHouse's current engine in-process, for the tests of the shipped SQL and
# compare --clickhouse on it (tests/fleet/chdb_front.py); Debian's own server is 18.16. pip puts it
# with --target into the build dir, where the tests look: Debian's python3 is externally managed and
# the test interpreter may be either python3, and both read its abi3 wheel from one dir.
# --no-deps: its pandas and pyarrow serve only DataFrame and Arrow results, which the tests never ask.
CHDB_CORE_VERSION=26.9.0
install_python_test_deps() {
  local py=$1 dir=$BUILD_DIR/python
  PYTHONPATH=$dir "$py" -c "import chdb, sys; sys.exit(chdb.__version__ != '$CHDB_CORE_VERSION')" 2>/dev/null && return
  echo "dev.sh: installing chdb-core==$CHDB_CORE_VERSION into $dir"
  "$py" -m pip install --quiet --disable-pip-version-check --root-user-action=ignore --no-deps --upgrade \
    --target "$dir" "chdb-core==$CHDB_CORE_VERSION"
}

# A fresh Debian machine has no sudo: name the way in that this machine has.
if [[ $EUID -ne 0 ]]; then
  if command -v sudo >/dev/null 2>&1; then how="sudo $0 $*"; else how="su -c '$0 $*' (this machine has no sudo)"; fi
  die "needs root: it installs Debian packages and loads BPF programs; as $(id -un): $how"
fi
cmd=${1:-}
shift || true
case "$cmd" in
  build)
    install_missing "${BUILD_PACKAGES[@]}" "${TEST_PACKAGES[@]}"
    build_all
    ;;
  package)
    install_missing "${BUILD_PACKAGES[@]}" "${PACKAGE_PACKAGES[@]}"
    build_package
    ;;
  run)
    install_missing "${BUILD_PACKAGES[@]}"
    build_daemon
    exec "$BUILD_DIR/tcpscope" run "$@"
    ;;
  test)
    install_missing "${BUILD_PACKAGES[@]}" "${TEST_PACKAGES[@]}"
    build_all
    echo "== unit tests"
    (cd "$BUILD_DIR" && ctest --output-on-failure)
    echo "== unit tests under AddressSanitizer + UndefinedBehaviorSanitizer (build-fuzz/)"
    tests/sanitize.sh
    echo "== fuzz targets, a short bounded run each (build-fuzz/)"
    tests/fuzz/run.sh
    echo "== integration tests (real BPF programs, real traffic in network namespaces)"
    install_python_test_deps "$(python_with_pytest)"
    TCPSCOPE_BUILD="$(pwd)/$BUILD_DIR" "$(python_with_pytest)" -m pytest tests/integration tests/fleet tests/package tests/lab \
      tests/real_kernels -v --durations=30 -p no:cacheprovider "$@"
    ;;
  *)
    die "usage: $0 run|test|build|package"
    ;;
esac
