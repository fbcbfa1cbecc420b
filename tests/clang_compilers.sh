# Sourced by the sanitizer builds (tests/sanitized_build.sh,
# tests/tsan_daemon_build.sh): sets CC_BIN and CXX_BIN to Debian's clang, or
# stops with the package to install. $1: the build's name, for the message.
CC_BIN=$(command -v clang-14 || command -v clang || true)
CXX_BIN=$(command -v clang++-14 || command -v clang++ || true)
[[ -n $CXX_BIN ]] || { echo "$1: clang++ not found (apt-get install clang libclang-rt-14-dev)" >&2; exit 1; }
