"""The closed loop end to end, short (bench/controller_lab.py --smoke): the
real daemon with a controller rule over a lossy client path (50 ms, 1 %
loss) and a pop-to-pop path, kept-alive traffic, the controller polled every
2 s, then a restart on the same STATE_DIRECTORY. The full study (uniform
runs, settling, A/A, a loss change) is the benchmark's; figures in
bench/README.md."""
import importlib.util

import pytest

from labfixtures import (HERE, KERNEL_PROFILES, delayline_checked, kernel_profiles, lab_suite,  # noqa: F401
                         lab_test, need_root_and_build)

BENCH = HERE.parent.parent / "bench" / "controller_lab.py"
_spec = importlib.util.spec_from_file_location("controller_lab", BENCH)
bench = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(bench)


@pytest.mark.parametrize("profile", KERNEL_PROFILES, ids=lambda p: p or "this-kernel")
def test_the_loop_decides_for_bbr_on_the_lossy_path_and_keeps_it_across_a_restart(tmp_path, delayline_checked,
                                                                                   monkeypatch, profile):
    """On this kernel and as on each profile's (the controller's evidence is
    send transfers, from the ACKs before 6.16): the daemons the benchmark
    starts inherit the environment that hides the profile's tracepoints."""
    need_root_and_build()
    for key, value in kernel_profiles.daemon_env(profile).items():
        monkeypatch.setenv(key, value)
    if profile is None:
        monkeypatch.delenv("TCPSCOPE_TEST_MISSING_TRACEPOINTS", raising=False)
    report = bench.smoke(workdir=tmp_path)
    loop = report["loop"]
    # Every server flow of the lab went through the rule, with the arm the kernel drew.
    flows = loop["server_flows"]
    assert len(flows) >= 20, len(flows)
    for f in flows:
        assert (f["cc_rule"], f["experiment"]) == ("auto", "controller"), f
        assert f["arm"] in ("bbr", "cubic") and f["cc"] == f["arm"], f
    final = loop["final"]
    assert "64602" in final and "64611" in final, f"both ASNs have cohorts of their own: {final}"
    lossy = final["64602"]
    assert (lossy["state"], lossy["winner"]) == ("decided", "bbr"), loop["decisions"].get("64602")
    for label, c in final.items():
        assert sum(c["weights"].values()) == 100, c
        if c["state"] == "decided":
            # Ramped 25 points per interval toward 100 - 10 + 10/2.
            assert 50 <= c["weights"][c["winner"]] <= 95, c
    restart = loop["restart"]
    assert restart["restored"], "the restarted daemon read the saved state"
    assert restart["same"], restart
