#!/usr/bin/env python3
"""tcpscope's real-kernel tests on a kernel users run, booted: a profile
hides hooks from the loader, but only the real kernel has its verifier,
helpers, BTF and attach rules.

    tests/real_kernels/run.py NAME [--tcg] [PYTEST_ARG...]
    tests/real_kernels/run.py host [PYTEST_ARG...]

NAME is a kernel of src/kernel/booted_kernels.tsv (debian12-6.1,
debian12-6.12): its current build is fetched by name (`apt-get download` of
the meta-package's dependency, -unsigned; cached in
$TCPSCOPE_BUILD/real_kernels/) and booted in QEMU by virtme-ng over this
machine's own root filesystem, read-only. `host` runs the same tests on this
machine's kernel, without a VM. Either way it runs:
  * tcpscope_kernel_tests: the real programs on loopback, a refusal's
    verifier log kept whole, a restart's takeover of the maps and links;
  * pytest -m real_kernel tests/integration: the integration tests that need
    no timing precision (flow records of both ends, IPv4 and IPv6, with
    exact bytes; a transfer per response on a kept-alive connection; an
    upload; cc_policy's arms through sock_ops and the setsockopt and sysctl
    guards; open-flow snapshots; SIGHUP reload; nothing left after SIGTERM;
    a refused program, required or left out; a start with no kernel config
    to read, the tick measured).
Every line it prints starts with the kernel release it ran on. KVM is used
where it boots (its first line within KVM_BOOT_S); otherwise QEMU emulates
the CPU (TCG), and the tests' waits are TIME_SCALE times longer and their
timing checks skipped (tests/testlib.py). Exits 0 when everything passed.

Needs root, a build (scripts/dev.sh build), and Debian's qemu-system-x86,
busybox-static, kmod and file (scripts/dev.sh installs them); virtme-ng is
installed from PyPI into $TCPSCOPE_BUILD/virtme-ng on first use."""
import os
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
BUILD = Path(os.environ.get("TCPSCOPE_BUILD", ROOT / "build")).resolve()
KERNELS_TSV = ROOT / "src/kernel/booted_kernels.tsv"
sys.path.insert(0, str(ROOT / "tests/kernel_profiles"))
import derive  # noqa: E402  (the package fetch, shared with the profiles)

VIRTME_NG_VERSION = "1.42"
KVM_BOOT_S = 20          # KVM's boot gets this long to reach the guest script
VM_TIMEOUT_S = 900       # one kernel's whole run, boot to power-off
TIME_SCALE = 6           # an emulated CPU's waits (TCG runs this machine's code ~5-10x slower)
VM_MEMORY = "2G"
# One vCPU: the CI runs the kernels side by side on a 2-core machine, and an
# emulated vCPU preempted while it holds a guest lock leaves the other
# spinning. Measured here, 6.1 and 6.12 side by side: two vCPUs each took
# 13.6 min (25 min of CPU); one each, 4.6 min (7.8 min of CPU); one after
# the other with two vCPUs, about 9 min.
VM_CPUS = 1


def booted_kernels():
    """{name: (meta-package, release pattern, about)} from the TSV, in its order."""
    out = {}
    for line in KERNELS_TSV.read_text().splitlines():
        if not line.strip() or line.startswith("#"):
            continue
        name, meta, pattern, about = line.split("\t")
        out[name] = (meta, pattern, about)
    return out


# VMs may run side by side (test_real_kernels.py): one text's lines stay together.
say_lock = threading.Lock()


def say(release, text):
    with say_lock:
        for line in text.rstrip("\n").splitlines():
            print(f"[{release}] {line}", flush=True)


def python_with_pytest():
    for py in (sys.executable, "/usr/bin/python3"):
        if subprocess.run([py, "-c", "import pytest"], capture_output=True).returncode == 0:
            return py
    raise SystemExit("no python3 with pytest (apt-get install python3-pytest)")


def virtme_ng():
    """The vng command and the environment it runs in (virtme-ng from PyPI, pinned)."""
    target = BUILD / "virtme-ng"
    env = dict(os.environ, PYTHONPATH=str(target), PATH=f"{target / 'bin'}:{os.environ['PATH']}")
    probe = [sys.executable, "-c", f"import virtme_ng.version as v, sys; sys.exit(v.PKG_VERSION != '{VIRTME_NG_VERSION}')"]
    if subprocess.run(probe, env=env, capture_output=True).returncode != 0:
        print(f"installing virtme-ng=={VIRTME_NG_VERSION} into {target}", flush=True)
        shutil.rmtree(target, ignore_errors=True)
        subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "--disable-pip-version-check",
                        "--root-user-action=ignore", "--target", str(target), f"virtme-ng=={VIRTME_NG_VERSION}"],
                       check=True, timeout=600)
    for tool in ("qemu-system-x86_64", "busybox", "depmod", "file"):
        if not shutil.which(tool):
            raise SystemExit(f"{tool} not found: apt-get install qemu-system-x86 busybox-static kmod file "
                             "(scripts/dev.sh installs them)")
    return [sys.executable, str(target / "bin/vng")], env


def fetch(name):
    """(kernel image, its package's directory, release) of NAME's current build, unpacked."""
    meta, pattern, _ = booted_kernels()[name]
    signed, version = derive.image_package(meta)
    pkg = signed + "-unsigned"
    release = signed[len("linux-image-"):]
    if not re.fullmatch(pattern, release):
        raise SystemExit(f"{meta} now depends on {signed}: release {release} is not {name}'s ({pattern}); "
                         f"update {KERNELS_TSV.relative_to(ROOT)}")
    cache = BUILD / "real_kernels"
    cache.mkdir(parents=True, exist_ok=True)
    unpacked = cache / f"{pkg}_{version}"
    image = unpacked / "boot" / f"vmlinuz-{release}"
    if not image.exists():
        deb = derive.download(pkg, version, cache)
        for old in cache.glob(f"{pkg}_*"):
            if old.is_dir():
                shutil.rmtree(old)
        partial = cache / f".{pkg}.partial"
        shutil.rmtree(partial, ignore_errors=True)
        derive.run("dpkg-deb", "-x", str(deb), str(partial))
        partial.rename(unpacked)  # virtme-ng finds the modules beside boot/: lib/modules/RELEASE
        deb.unlink()
    return image, unpacked, release


# Why KVM did not boot here, once seen: the next kernel goes to TCG at once.
kvm_failed = None


def kvm_usable():
    if kvm_failed:
        return False, kvm_failed
    try:
        os.close(os.open("/dev/kvm", os.O_RDWR))
        return True, ""
    except OSError as e:
        return False, f"/dev/kvm: {e.strerror}"


def boot(vng, env, image, outdir, guest_cmd, accel):
    """Boots `image` and runs guest_cmd in it; returns (exit status, console).
    With accel "kvm", returns None if the guest did not start within KVM_BOOT_S."""
    cmd = [*vng, "--run", str(image), "--verbose", "--cpus", str(VM_CPUS), "--memory", VM_MEMORY,
           "--rwdir", str(outdir), *(["--disable-kvm"] if accel == "tcg" else []), "--", guest_cmd]
    console = outdir / f"console-{accel}.log"
    with open(console, "w") as log:
        p = subprocess.Popen(cmd, env=env, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                             start_new_session=True)
        try:
            if accel == "kvm":
                deadline = time.monotonic() + KVM_BOOT_S
                while not (outdir / "booted").exists() and p.poll() is None and time.monotonic() < deadline:
                    time.sleep(0.2)
                if not (outdir / "booted").exists():
                    return None
            p.wait(timeout=VM_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            pass
        finally:
            if p.poll() is None:
                os.killpg(p.pid, signal.SIGKILL)
                p.wait()
    return p.returncode, console.read_text(errors="replace")


def run_in_vm(name, pytest_args, force_tcg=False):
    global kvm_failed
    vng, env = virtme_ng()
    image, unpacked, release = fetch(name)
    _, _, about = booted_kernels()[name]
    outdir = BUILD / "real_kernels" / f"run-{name}-{os.getpid()}"
    shutil.rmtree(outdir, ignore_errors=True)
    outdir.mkdir(parents=True)
    guest_env = {
        "TCPSCOPE_BUILD": str(BUILD), "TCPSCOPE_GUEST_PYTHON": python_with_pytest(),
        "TCPSCOPE_GUEST_CONFIG": str(unpacked / "boot" / f"config-{release}"),
        "TCPSCOPE_GUEST_PYTEST_ARGS": " ".join(pytest_args)}
    guest_cmd = " ".join(f"{k}='{v}'" for k, v in guest_env.items()) + f" sh {HERE / 'guest.sh'} {outdir}"
    ok, why = (False, "--tcg") if force_tcg else kvm_usable()
    result = boot(vng, env, image, outdir, guest_cmd, "kvm") if ok else None
    if result is None:
        if ok:
            why = kvm_failed = f"KVM did not reach the guest in {KVM_BOOT_S} s"
        accel = f"TCG, an emulated CPU ({why}): waits x{TIME_SCALE}, timing checks skipped"
        (outdir / "booted").unlink(missing_ok=True)
        (outdir / "emulated").write_text(str(TIME_SCALE))
        t0 = time.monotonic()
        result = boot(vng, env, image, outdir, guest_cmd, "tcg")
    else:
        accel, t0 = "KVM", time.monotonic()
    status, console = result
    say(release, f"{name}: {about}, {image.parent.parent.name}, booted with virtme-ng {VIRTME_NG_VERSION} on {accel}")
    for part in ("kernel_tests", "pytest"):
        log = outdir / f"{part}.log"
        if log.exists():
            say(release, log.read_text(errors="replace"))
    codes = {part: (outdir / f"{part}.rc").read_text().strip() if (outdir / f"{part}.rc").exists() else None
             for part in ("kernel_tests", "pytest")}
    passed = all(c == "0" for c in codes.values())
    if not passed:
        say(release, f"VM exit status {status}; console (last 60 lines):\n" +
            "\n".join(console.splitlines()[-60:]))
    say(release, f"{name}: {'passed' if passed else 'FAILED'} ({', '.join(f'{k} exit {v}' for k, v in codes.items())}) "
                 f"in {time.monotonic() - t0:.0f} s")
    if passed:
        shutil.rmtree(outdir, ignore_errors=True)
    return passed


def run_on_host(pytest_args):
    release = os.uname().release
    ok = True
    for cmd in ([str(BUILD / "tcpscope_kernel_tests")],
                [python_with_pytest(), "-m", "pytest", "-m", "real_kernel", str(ROOT / "tests/integration"),
                 "-v", "-p", "no:cacheprovider", *pytest_args]):
        p = subprocess.run(cmd, capture_output=True, text=True, env=dict(os.environ, TCPSCOPE_BUILD=str(BUILD)))
        say(release, p.stdout + p.stderr)
        ok &= p.returncode == 0
    say(release, f"host: {'passed' if ok else 'FAILED'}")
    return ok


def main(argv):
    names = list(booted_kernels())
    if not argv or argv[0] not in names + ["host"]:
        raise SystemExit(f"usage: {sys.argv[0]} {{{'|'.join(names)}|host}} [--tcg] [PYTEST_ARG...]")
    if os.geteuid() != 0:
        raise SystemExit("needs root: it boots kernels and loads BPF programs")
    if not (BUILD / "tcpscope").exists():
        raise SystemExit(f"{BUILD / 'tcpscope'} missing: build first (scripts/dev.sh build)")
    args = argv[1:]
    if argv[0] == "host":
        return run_on_host(args)
    force_tcg = "--tcg" in args
    return run_in_vm(argv[0], [a for a in args if a != "--tcg"], force_tcg)


if __name__ == "__main__":
    sys.exit(0 if main(sys.argv[1:]) else 1)
