"""One answer per question: the best trial by direction (Objective.best) and whether a process runs (alive)."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import optuna
import pytest

from tunekit.objective import Objective
from tunekit.processes import alive


def _dicts() -> list[dict[str, object]]:
    return [{"number": 0, "state": "PRUNED", "value": 0.1}, {"number": 1, "state": "COMPLETE", "value": 0.5},
            {"number": 2, "state": "COMPLETE", "value": 0.3}, {"number": 3, "state": "COMPLETE", "value": 0.3},
            {"number": 4, "state": "FAIL", "value": None}, {"number": 5, "state": "COMPLETE", "value": 0.9}]


def test_the_best_trial_follows_the_direction_and_takes_the_first_of_equals() -> None:
    """Lowest complete value when minimised, highest when maximised; a pruned trial's lower value never wins."""
    assert Objective("loss").best(_dicts())["number"] == 2  # type: ignore[index]
    assert Objective("accuracy").best(_dicts())["number"] == 5  # type: ignore[index]
    assert Objective.of_direction("maximize").best(_dicts())["number"] == 5  # type: ignore[index]
    assert Objective("loss").best([t for t in _dicts() if t["state"] != "COMPLETE"]) is None
    assert Objective("loss").best([]) is None


def test_the_best_trial_of_an_optuna_study_is_optunas_best() -> None:
    """Optuna's trials and search.json's dicts get the same answer, and it is the study's best_trial."""
    optuna.logging.set_verbosity(optuna.logging.ERROR)
    for direction in ("minimize", "maximize"):
        study = optuna.create_study(direction=direction)
        for v in (0.4, 0.2, 0.7):
            study.add_trial(optuna.trial.create_trial(params={}, distributions={}, value=v))
        best = Objective.of_direction(study.direction).best(study.get_trials(deepcopy=False))
        assert best is not None and best.number == study.best_trial.number


def test_a_zombie_process_is_not_alive() -> None:
    """A child that exited but is not yet waited for (a zombie) will never write again: not alive."""
    assert alive(os.getpid())
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    try:
        deadline = time.monotonic() + 30
        while alive(child.pid) and time.monotonic() < deadline:
            time.sleep(0.05)
        if sys.platform.startswith("linux"):
            with open(f"/proc/{child.pid}/stat") as f:  # not reaped yet: the kernel still lists it
                assert f.read().rpartition(")")[2].split()[0] == "Z"
        assert not alive(child.pid)
    finally:
        child.wait()
    assert not alive(child.pid)


@pytest.mark.parametrize("pid", [1])
def test_another_users_process_is_alive(pid: int) -> None:
    """init runs as root: os.kill may refuse us, and it is alive all the same."""
    assert alive(pid)


def test_a_trial_keeps_its_weights_under_best_only_when_it_beats_the_studys_best(tmp_path: object) -> None:
    """Keeper.wants ranks by Objective.best: lower beats a minimised study's best, higher a maximised one's."""
    from tunekit.hpsearch.keep import Keeper

    optuna.logging.set_verbosity(optuna.logging.ERROR)
    for direction, better, worse in (("minimize", 0.1, 0.5), ("maximize", 0.9, 0.5)):
        study = optuna.create_study(direction=direction)
        assert Keeper("best", str(tmp_path), direction).wants(worse, study)  # nothing to beat yet
        for v in (0.3, 0.7):
            study.add_trial(optuna.trial.create_trial(params={}, distributions={}, value=v))
        keeper = Keeper("best", str(tmp_path), direction)
        assert keeper.wants(better, study) and not keeper.wants(worse, study)
        assert not keeper.wants(float("nan"), study) and Keeper("all", str(tmp_path), direction).wants(worse, study)
