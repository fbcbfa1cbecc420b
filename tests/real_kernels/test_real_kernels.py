"""The kernels users run, booted in CI: tests/real_kernels/run.py NAME for
each kernel of src/kernel/booted_kernels.tsv. This machine's own kernel runs
the same tests in the integration suite (tests marked real_kernel)."""
import os
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
import run  # noqa: E402

KERNELS = list(run.booted_kernels())


@pytest.fixture(scope="module")
def booted(request):
    """{name: passed} of every kernel's run, the VMs booted side by side: an
    emulated CPU keeps about one host core busy (a 6.12 run here: 371 s of
    CPU in 421 s), so two VMs take this 2-core machine about as long as one.
    Their lines, each naming its kernel, go to CI's log as they come."""
    if os.geteuid() != 0:
        pytest.skip("needs root to boot kernels and load BPF programs")
    capture = request.config.pluginmanager.getplugin("capturemanager")
    with capture.global_and_fixture_disabled():
        print()
        run.virtme_ng()  # installed once, before the VMs share it
        for name in KERNELS:
            run.fetch(name)
        with ThreadPoolExecutor(len(KERNELS)) as pool:
            runs = {name: pool.submit(run.run_in_vm, name, []) for name in KERNELS}
        return {name: f.result() for name, f in runs.items()}


@pytest.mark.parametrize("name", KERNELS)
def test_real_kernel_tests_pass_on_the_booted_kernel(name, booted):
    assert booted[name], f"{name}: real-kernel tests failed (lines above, prefixed with its release)"
