"""The lab leaves nothing behind: not when the code using it fails, and not
when the process that built it is gone (`lab.py down`)."""
import os
import subprocess
import sys

import pytest

from labfixtures import HERE, labmod, need_root_and_build

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
