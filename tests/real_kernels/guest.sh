#!/bin/sh
# Runs inside the VM that tests/real_kernels/run.py boots, as root, over the
# host's root filesystem (read-only, /etc /tmp /var ... writable overlays that
# vanish with the VM): the real-kernel tests, each part's output and exit
# status into OUT, the one directory shared read-write with the host.
#   guest.sh OUT
# From the environment: TCPSCOPE_BUILD, TCPSCOPE_GUEST_PYTHON (one with
# pytest), TCPSCOPE_GUEST_CONFIG (the kernel's config from its package),
# TCPSCOPE_GUEST_PYTEST_ARGS. OUT/emulated, when the host wrote it, holds the
# factor for the tests' waits on an emulated CPU.
set -u
out=$1
root=$(cd "$(dirname "$0")/../.." && pwd)
uname -r > "$out/booted"
export PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin PYTHONDONTWRITEBYTECODE=1 HOME=/root
if [ -f "$out/emulated" ]; then
  export TCPSCOPE_TEST_EMULATED=1 TCPSCOPE_TEST_TIME_SCALE="$(cat "$out/emulated")"
fi
# The daemon reads the running kernel's config (CONFIG_HZ) from /boot, which
# here is the host's: the kernel package's own goes on a tmpfs over it. (One
# test, test_kernel_fallbacks.py's, hides it again to start without any.)
mount -t tmpfs tcpscope-boot /boot && cp "$TCPSCOPE_GUEST_CONFIG" "/boot/config-$(uname -r)"
# The service names read the cgroup v2 tree (tests/integration/test_services.py).
grep -q " cgroup2 " /proc/mounts || mount -t cgroup2 cgroup2 /sys/fs/cgroup
cd "$root"
"$TCPSCOPE_BUILD/tcpscope_kernel_tests" > "$out/kernel_tests.log" 2>&1
echo $? > "$out/kernel_tests.rc"
# shellcheck disable=SC2086  # the arguments are words
"$TCPSCOPE_GUEST_PYTHON" -m pytest -m real_kernel tests/integration -v -p no:cacheprovider \
  $TCPSCOPE_GUEST_PYTEST_ARGS > "$out/pytest.log" 2>&1
echo $? > "$out/pytest.rc"
