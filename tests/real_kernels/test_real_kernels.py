"""The kernels users run, booted in CI: tests/real_kernels/run.py NAME for
each kernel of src/kernel/booted_kernels.tsv. This machine's own kernel runs
the same tests in the integration suite (tests marked real_kernel)."""
import os
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
import run  # noqa: E402


@pytest.mark.parametrize("name", list(run.booted_kernels()))
def test_real_kernel_tests_pass_on_the_booted_kernel(name, capsys):
    if os.geteuid() != 0:
        pytest.skip("needs root to boot kernels and load BPF programs")
    with capsys.disabled():  # the inner tests' lines, each naming its kernel, go to CI's log as they are
        print()
        passed = run.run_in_vm(name, [])
    assert passed, f"{name}: real-kernel tests failed (lines above, prefixed with its release)"
