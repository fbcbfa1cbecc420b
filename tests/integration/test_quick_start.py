"""The README's quick start as a new root user on a fresh Debian 12 machine
meets it: exactly two commands, neither behind a `sudo` that such a machine
does not have, and a non-root user told how to get root on this machine."""
import os
import re
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

import pytest

from conftest import ROOT

README = ROOT / "README.md"
DEV_SH = ROOT / "scripts" / "dev.sh"


def quick_start_commands():
    text = README.read_text()
    m = re.search(r"^## Quick start.*?\n(.*?)(?=^## )", text, re.S | re.M)
    assert m, "README has no '## Quick start' section"
    return [line.strip() for line in m.group(1).splitlines() if line.startswith("    ") and line.strip()]


def test_quick_start_is_two_root_commands_without_sudo():
    commands = quick_start_commands()
    assert len(commands) == 2, commands
    run, test = commands
    assert run.split()[:2] == ["scripts/dev.sh", "run"], run
    assert test.split() == ["scripts/dev.sh", "test"], test
    for c in commands:
        assert "sudo" not in c.split(), c
    # Each names a subcommand dev.sh has.
    script = DEV_SH.read_text()
    for c in commands:
        assert re.search(rf"^\s+{c.split()[1]}\)$", script, re.M), c


@pytest.mark.parametrize("sub", ["run", "test"])
def test_dev_sh_tells_a_non_root_user_how_to_run_it(sub):
    if os.geteuid() != 0:
        pytest.skip("needs root to run a command as another account")
    # The test's tree may sit where `nobody` cannot read; a copy of the script
    # in a world-readable directory is what it runs.
    with tempfile.TemporaryDirectory(prefix="tcpscope-quickstart-") as d:
        os.chmod(d, 0o755)
        (Path(d) / "scripts").mkdir()
        script = Path(d) / "scripts" / "dev.sh"
        shutil.copy(DEV_SH, script)
        os.chmod(script, 0o755)
        (Path(d) / "scripts").chmod(0o755)
        r = subprocess.run(["setpriv", "--reuid=nobody", "--regid=nogroup", "--clear-groups",
                            str(script), sub], capture_output=True, text=True, timeout=30, cwd=d)
    assert r.returncode != 0
    assert "needs root" in r.stderr and "as nobody" in r.stderr, r.stderr
    assert "installing" not in r.stdout + r.stderr, "it went on to install packages"
    if shutil.which("sudo"):
        assert f"sudo {script} {sub}" in r.stderr, r.stderr
    else:
        assert f"su -c '{script} {sub}'" in r.stderr and "no sudo" in r.stderr, r.stderr


def test_the_first_command_builds_the_daemon_alone(tmp_path):
    """`scripts/dev.sh run` on a new build directory builds `tcpscope` and
    nothing else (no tests, no benchmarks), then runs it with the flags given:
    an unknown one here, so the daemon exits at once with its usage."""
    if os.geteuid() != 0:
        pytest.skip("dev.sh needs root")
    build = tmp_path / "build"
    t0 = time.monotonic()
    r = subprocess.run([str(DEV_SH), "run", "--no-such-flag"], capture_output=True, text=True, timeout=1200,
                       cwd=ROOT, env={**os.environ, "TCPSCOPE_BUILD": str(build)})
    took = time.monotonic() - t0
    assert r.returncode == 2, r.stdout[-2000:] + r.stderr[-2000:]
    assert "unknown or incomplete option '--no-such-flag'" in r.stderr, r.stderr[-2000:]
    executables = sorted(p.name for p in build.iterdir() if p.is_file() and os.access(p, os.X_OK))
    assert executables == ["tcpscope"], executables
    steps = subprocess.run(["ninja", "-C", str(build), "-t", "commands", "tcpscope"], capture_output=True,
                           text=True, check=True).stdout.count("\n")
    print(f"dev.sh run on a new build directory: {steps} build commands, {took:.0f} s to the daemon's usage")
