"""The baseline learner of bench/controller_lab.py (bench/bpftune_learner.py):
its published rule (cost at close, EWMA, epsilon-greedy on one key), the
experiment rule it writes being one the daemon accepts; and the stored
study's and candidates' runs being what their figures give."""
import importlib.util
import json
import subprocess
import sys

import pytest

from labfixtures import HERE, need_root_and_build  # noqa: F401

BENCH = HERE.parent.parent / "bench"
sys.path.insert(0, str(BENCH))
from bpftune_learner import BpftuneStyleLearner  # noqa: E402


def test_a_cold_start_splits_evenly_until_every_arm_has_a_cost():
    lr = BpftuneStyleLearner(["bbr", "cubic"])
    assert lr.weights() == {"bbr": 50, "cubic": 50}
    lr.observe("bbr", 20_000, 100e6)
    assert lr.weights() == {"bbr": 50, "cubic": 50}
    lr.observe("cubic", 20_000, 50e6)
    assert lr.weights() == {"bbr": 95, "cubic": 5}


def test_the_cost_is_relative_to_the_best_min_rtt_and_delivery_rate_seen():
    lr = BpftuneStyleLearner(["bbr", "cubic"])
    lr.observe("bbr", 10_000, 100e6)              # the bests: cost 0
    assert lr.cost["bbr"] == 0
    lr.observe("cubic", 15_000, 25e6)             # 0.5 + 0.75
    assert lr.cost["cubic"] == pytest.approx(1.25)
    lr.observe("cubic", 10_000, 100e6)            # cost 0: EWMA 1/4 of it
    assert lr.cost["cubic"] == pytest.approx(0.75 * 1.25)
    # A better connection moves the bests; earlier costs stay as they were.
    lr.observe("bbr", 5_000, 200e6)
    assert (lr.best_min_rtt_us, lr.best_rate_bps) == (5_000, 200e6)
    assert lr.cost["bbr"] == 0


def test_one_key_follows_the_majority_of_connections_whatever_the_cohorts_prefer():
    """Two kinds of client on one gateway key: the arm that serves the more
    frequent kind better wins for both."""
    lr = BpftuneStyleLearner(["bbr", "cubic"])
    for i in range(200):
        # 4 in 5 connections come from a lossy path where BBR delivers 10x;
        # the fifth from a short path where CUBIC does better.
        if i % 5:
            lr.observe("bbr", 50_000, 30e6)
            lr.observe("cubic", 50_000, 3e6)
        else:
            lr.observe("bbr", 15_000, 200e6)
            lr.observe("cubic", 12_000, 220e6)
    assert lr.greedy() == "bbr"
    assert lr.weights() == {"bbr": 95, "cubic": 5}


def test_connections_without_samples_carry_no_cost():
    lr = BpftuneStyleLearner(["bbr", "cubic"])
    lr.observe("bbr", 0, 100e6)
    lr.observe("cubic", 10_000, 0)
    lr.observe("reno", 10_000, 1e6)
    assert lr.closed == {"bbr": 0, "cubic": 0} and lr.best_min_rtt_us is None


def test_three_arms_share_epsilon():
    lr = BpftuneStyleLearner(["bbr", "cubic", "reno"], epsilon_percent=6)
    assert sum(lr.weights().values()) == 100
    for cc, rate in (("cubic", 30e6), ("bbr", 10e6), ("reno", 20e6)):
        lr.observe(cc, 10_000, rate)
    assert lr.weights() == {"bbr": 3, "cubic": 94, "reno": 3}


def controller_lab():
    spec = importlib.util.spec_from_file_location("controller_lab", BENCH / "controller_lab.py")
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    return bench


def test_the_candidates_verdicts_are_the_stored_runs_figures():
    """bench/README.md's candidates table: each stored run's verdicts are
    what its figures give, and the markdown has every path of every run."""
    bench = controller_lab()
    runs = sorted((BENCH / "results").glob("controller_candidates-run*.json"))
    assert len(runs) == 4
    reports = [json.loads(r.read_text()) for r in runs]
    for rep in reports:
        name_of = {v["asn"]: n for n, v in rep["paths"].items()}
        figs = {cc: {int(a): f for a, f in rep["figures"][cc].items()} for cc in ("cubic", "bbr")}
        assert bench.uniform_verdicts(figs, name_of) == rep["verdicts"]
    table = bench.candidates_markdown(reports).splitlines()
    assert len(table) == 2 + sum(len(rep["verdicts"]) for rep in reports)
    in_table = [row.split(" | ")[0].lstrip("| ") for row in table[2:]]
    assert list(dict.fromkeys(in_table)) == [p[0] for p in bench.CANDIDATE_PATHS]


def test_the_studys_oracle_and_scores_are_the_stored_runs_figures():
    """The "Does the loop pay?" tables (docs/policy.md, bench/README.md): in the
    stored study the oracle's arms are what its uniform runs give, the
    cohorts disagree (the lossy client on BBR, intra-pop on CUBIC), and every
    score and aggregate is what its figures give."""
    bench = controller_lab()
    rep = json.loads((BENCH / "results" / "controller_study.json").read_text())
    name_of = {v["asn"]: n for n, v in rep["paths"].items()}
    figs = {pol: {int(a): f for a, f in by_asn.items()} for pol, by_asn in rep["figures"].items()}
    verdicts = bench.uniform_verdicts({"cubic": figs["all-cubic"], "bbr": figs["all-bbr"]}, name_of)
    assert {n: v["better"] for n, v in verdicts.items()} == rep["oracle_arms"]
    assert (rep["oracle_arms"]["c2"], rep["oracle_arms"]["i1"]) == ("bbr", "cubic")
    for pol, by_asn in figs.items():
        for stat in ("p50", "mean"):
            scores = {str(a): bench.ratio_to_oracle(f, figs["oracle"][a], stat) for a, f in by_asn.items()}
            assert rep["scores"][pol][stat] == scores
            assert rep["scores"][pol][f"aggregate_{stat}"] == pytest.approx(
                sum(scores.values()) / len(scores))


def test_its_experiment_rule_is_a_config_the_daemon_accepts(tmp_path):
    """The study applies the learner's weights as an experiment rule; the
    daemon's own validator checks the text it writes."""
    need_root_and_build()
    bench = controller_lab()

    class FakeLab:  # only what learner_config reads: addresses, no namespaces
        ipv6 = True
        endpoints = {"c2": type("Ep", (), {"class_v4": "198.19.3.128/25", "class_v6": "fd00:1ab:3:8000::/65",
                                           "path": type("P", (), {"peer_class": "client", "asn": 64602})})}

        def tcpscope_config(self, path, extra=""):
            path.write_text(extra)
            return path

    cfg = bench.learner_config(FakeLab(), tmp_path / "learner.yaml", {"bbr": 95, "cubic": 5})
    r = subprocess.run([str(bench.TCPSCOPE), "check-config", str(cfg)], capture_output=True, text=True, timeout=30)
    assert r.returncode == 0, r.stdout + r.stderr + cfg.read_text()
