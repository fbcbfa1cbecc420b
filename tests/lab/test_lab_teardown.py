"""The lab leaves nothing behind: not when the code using it fails, not when
the test run is terminated (SIGTERM), not when the process that built it was
killed outright (the next run reaps it), and not when the process that built
it is gone on purpose (`lab.py down`). And the suite's time budget is
enforced, not just hoped for."""
import json
import os
import signal
import subprocess
import sys
import textwrap
import time

import pytest

from labfixtures import (HERE, lab_suite, lab_test, labmod,  # noqa: F401 (autouse)
                         need_root_and_build, wait_for)

Lab, Path = labmod.Lab, labmod.Path


def netns_names():
    return {l.split()[0] for l in labmod.sh("ip", "netns", "list").stdout.splitlines() if l}


def links_named(prefix):
    out = labmod.sh("ip", "-o", "link", "show").stdout
    return [l.split(":")[1].strip().split("@")[0] for l in out.splitlines()
            if l.split(":")[1].strip().startswith(prefix)]


def test_failure_inside_the_lab_still_tears_it_all_down(tmp_path):
    need_root_and_build()
    allowed_before = labmod.ALLOWED_CC.read_text()
    lab = Lab([Path.preset("client", name="c1"), Path.preset("intra-pop", name="i1")],
              workdir=tmp_path)
    with pytest.raises(RuntimeError, match="boom"):
        with lab:
            pids = [ep.delayline_pid for ep in lab.endpoints.values() if ep.delayline_pid]
            names = {lab.server_ns, *(ep.client_ns for ep in lab.endpoints.values())}
            assert names <= netns_names()
            assert pids and all(labmod._is_delayline(p) for p in pids)
            lab.set_cc("cubic" if "cubic" not in allowed_before.split() else "bbr")
            raise RuntimeError("boom")
    assert not names & netns_names(), "namespaces left behind"
    assert not any(labmod._is_delayline(p) for p in pids), "delay line still running"
    assert not links_named(f"{labmod.PREFIX}{lab.tag}"), "TAP/veth devices left behind"
    assert labmod.ALLOWED_CC.read_text() == allowed_before
    # The delay line wrote its counters when it was stopped.
    assert (tmp_path / "c1.stats.json").exists()


def test_cli_up_leaves_it_running_and_down_removes_it(tmp_path):
    need_root_and_build()
    tag = f"d{os.getpid() % 10000:04d}"
    env = dict(os.environ)
    cli = [sys.executable, str(HERE / "lab.py")]
    try:
        r = subprocess.run(cli + ["up", "--tag", tag, "--preset", "c1=client-lossy",
                                  "--preset", "p1=pop-to-pop", "--workdir", str(tmp_path),
                                  "--config",
                                  str(tmp_path / "cfg.yaml")],
                           capture_output=True, text=True, timeout=60, env=env)
        assert r.returncode == 0, r.stderr
        assert {f"tsl{tag}-srv", f"tsl{tag}-c1", f"tsl{tag}-p1"} <= netns_names()
        # Built by a process that has exited: the paths still carry traffic.
        ns = f"tsl{tag}-c1"
        addr = labmod.sh("ip", "netns", "exec", ns, "ip", "-4", "-o", "addr", "show").stdout
        assert "198.19." in addr
        assert "peer_classes" in (tmp_path / "cfg.yaml").read_text()
    finally:
        r = subprocess.run(cli + ["down", "--tag", tag], capture_output=True, text=True,
                           timeout=60)
    assert r.returncode == 0 and tag in r.stdout, r.stdout + r.stderr
    assert not {n for n in netns_names() if n.startswith(f"tsl{tag}")}
    assert not links_named(f"tsl{tag}")
    assert not (labmod.STATE_DIR / f"{tag}.json").exists()


def tag_for(prefix):
    return f"{prefix}{os.getpid() % 1000:03d}{int(time.monotonic() * 10) % 10}"


def lab_leftovers(tag, pids=()):
    """Everything of lab `tag` that still exists."""
    left = [f"namespace {n}" for n in netns_names() if n.startswith(f"tsl{tag}-")]
    left += [f"link {l}" for l in links_named(f"tsl{tag}")]
    left += [f"delay line {p}" for p in pids if labmod._is_delayline(p)]
    if (labmod.STATE_DIR / f"{tag}.json").exists():
        left.append("state file")
    return left


def alive(pid):
    """A process that exists and has not exited (zombies count as gone)."""
    return labmod._is_zombie(pid) is False


def inner_pytest(tmp_path, name, code, env=None, **kw):
    """A pytest run of one test module that uses the lab fixtures."""
    f = tmp_path / name
    f.write_text(textwrap.dedent(code))
    e = dict(os.environ, PYTHONPATH=str(HERE), **(env or {}))
    return subprocess.Popen([sys.executable, "-m", "pytest", str(f), "-q", "-s",
                             "-p", "no:cacheprovider", "--rootdir", str(tmp_path)],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            env=e, cwd=tmp_path, **kw)


HOLD_A_LAB = """
    import json, os, subprocess, time
    from pathlib import Path
    import pytest
    from labfixtures import lab_suite, lab_test, labmod  # noqa: F401

    @pytest.fixture(scope="module")
    def lab(tmp_path_factory):
        paths = [labmod.Path.preset("client", name="c1"),
                 labmod.Path.preset("intra-pop", name="i1")]
        with labmod.Lab(paths, tag=os.environ["LAB_TAG"],
                        workdir=tmp_path_factory.mktemp("lab")) as lab:
            yield lab

    def test_hold(lab):
        lab.popen(lab.server_ns, "sleep", "300")          # inside a namespace
        outside = subprocess.Popen(["sleep", "300"], stdout=subprocess.DEVNULL,
                                   stderr=subprocess.DEVNULL)     # outside, tracked
        lab.track(outside.pid)
        Path(os.environ["LAB_READY"]).write_text(json.dumps({
            "delaylines": [e.delayline_pid for e in lab.endpoints.values() if e.delayline_pid],
            "outside": outside.pid}))
        time.sleep(120)
"""


def test_sigterm_to_a_test_run_tears_its_lab_down(tmp_path):
    """pytest building a lab gets SIGTERM mid-test: labfixtures' handler
    unwinds it like Ctrl-C, so fixtures tear down: no namespace, device, delay
    line, tracked process or state file of that lab remains."""
    need_root_and_build()
    tag, ready = tag_for("t"), tmp_path / "ready.json"
    p = inner_pytest(tmp_path, "test_hold.py", HOLD_A_LAB,
                     env={"LAB_TAG": tag, "LAB_READY": str(ready)}, start_new_session=True)
    info = {}
    try:
        wait_for(lambda: ready.exists() or p.poll() is not None, 60, what="the inner lab")
        assert p.poll() is None, p.communicate()[0]
        info = json.loads(ready.read_text())
        assert len(info["delaylines"]) == 1 and all(map(labmod._is_delayline, info["delaylines"]))
        assert {f"tsl{tag}-srv", f"tsl{tag}-c1", f"tsl{tag}-i1"} <= netns_names()
        t0 = time.monotonic()
        p.send_signal(signal.SIGTERM)   # to pytest alone, as a CI runner or `timeout` would
        out, _ = p.communicate(timeout=60)
        print(f"\ninner pytest exited {p.returncode} {time.monotonic() - t0:.1f} s after SIGTERM")
        assert p.returncode != 0, out
        assert lab_leftovers(tag, info["delaylines"]) == [], out
        assert not alive(info["outside"]), "the lab's tracked process survived"
    finally:
        if p.poll() is None:
            os.killpg(p.pid, signal.SIGKILL)
            p.communicate()
        if info.get("outside") and alive(info["outside"]):
            os.kill(info["outside"], signal.SIGKILL)
        labmod.down_all(tag)


def test_a_killed_owners_lab_is_reaped_by_the_next_run(tmp_path):
    """SIGKILL leaves no chance to clean up: the delay lines (their own
    session) and namespaces outlive the process. The next test run's
    lab_suite fixture removes them, and the tracked process with them, but
    leaves alone a lab whose owner is alive (this process's)."""
    need_root_and_build()
    tag, mine_tag = tag_for("k"), tag_for("m")
    script = f"""
import json, subprocess, sys, time
sys.path.insert(0, {str(HERE)!r})
import lab as labmod
lab = labmod.Lab([labmod.Path.preset("client", name="c1")], tag={tag!r},
                 workdir={str(tmp_path / "k")!r})
lab.up()
outside = subprocess.Popen(["sleep", "300"], start_new_session=True)
lab.track(outside.pid)
print(json.dumps({{"delaylines": [lab.ep("c1").delayline_pid], "outside": outside.pid}}),
      flush=True)
time.sleep(300)
"""
    owner = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
    mine = labmod.Lab([labmod.Path.preset("intra-pop", name="i1")], tag=mine_tag,
                      workdir=tmp_path / "m")
    info = {}
    try:
        info = json.loads(owner.stdout.readline() or "{}")
        assert info, "the owner process did not build its lab"
        owner.kill()
        owner.wait(timeout=10)
        # Orphaned: everything is still there, and the state file says whose it was.
        assert all(map(labmod._is_delayline, info["delaylines"]))
        assert f"tsl{tag}-c1" in netns_names() and alive(info["outside"])
        state = json.loads((labmod.STATE_DIR / f"{tag}.json").read_text())
        assert state["owner"]["pid"] == owner.pid and labmod.owner_state(state) == "dead"
        mine.up()
        mine_state = json.loads((labmod.STATE_DIR / f"{mine_tag}.json").read_text())
        assert labmod.owner_state(mine_state) == "alive"

        run = inner_pytest(tmp_path, "test_next.py", """
            from labfixtures import lab_suite, lab_test  # noqa: F401
            def test_nothing():
                pass
        """)
        out, _ = run.communicate(timeout=120)
        assert run.returncode == 0, out
        assert tag in out, out   # "removed labs left by dead processes: ..."
        assert lab_leftovers(tag, info["delaylines"]) == []
        wait_for(lambda: not alive(info["outside"]), 5, what="the tracked process to go")
        # A live owner's lab is not an orphan.
        assert mine_tag not in out
        assert f"tsl{mine_tag}-i1" in netns_names()
        assert (labmod.STATE_DIR / f"{mine_tag}.json").exists()
    finally:
        if owner.poll() is None:
            owner.kill()
            owner.wait()
        if info.get("outside") and alive(info["outside"]):
            os.kill(info["outside"], signal.SIGKILL)
        mine.down()
        labmod.down_all(tag)
    assert lab_leftovers(mine_tag) == []


def test_the_suite_time_budget_is_enforced(tmp_path):
    """With a 3 s budget, a lab test that would run 60 s is interrupted when the
    budget runs out, the next lab test fails without running, and the
    session fails."""
    t0 = time.monotonic()
    run = inner_pytest(tmp_path, "test_budget.py", """
        import time
        from labfixtures import lab_suite, lab_test  # noqa: F401
        def test_slow():
            time.sleep(60)
        def test_after():
            pass
    """, env={"TCPSCOPE_LAB_BUDGET_S": "3"})
    try:
        out, _ = run.communicate(timeout=90)
    finally:
        if run.poll() is None:
            run.kill()
            run.communicate()
    took = time.monotonic() - t0
    print(f"\ninner run with a 3 s budget took {took:.1f} s")
    assert run.returncode == 1, out
    assert "ran past its 3 s budget" in out and "interrupted" in out, out
    assert "budget is spent" in out and "not run" in out, out
    assert "over its 3 s budget" in out, out
    assert "1 failed, 2 errors" in out, out
    assert took < 30, out
