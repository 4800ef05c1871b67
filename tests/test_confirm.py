"""Confirmation (issue 50 item 1): the best trials run again at fresh seeds, the answer chosen by its mean."""

from __future__ import annotations

import json
import os
import signal
from pathlib import Path
from typing import Any

import optuna
import pytest
import torch

from tunekit import Confirm, Halving, Local, RandomSampler, Study, UsageError, search
from tunekit.hpsearch import search_own
from tunekit.hpsearch.confirm import repeat_seed
from tunekit.hpsearch.confirm_runs import goal, queue_confirmations
from tunekit.hpsearch.rungs import make_pruner
from tunekit.hpsearch.shared.workers import claim
from tunekit.hpsearch.study import excluded, make_storage
from tunekit.objective import Objective
from tunekit.results import SearchResult
from tunekit.results.confirmation import Run, choose, shortfall

from .tasks import ROOT, run_cli, write_space

# A float LR, nothing probed: trials draw distinct LRs, and the search needs no range test.
FLOAT_LR = '[lr]\ntype = "float"\nlog = true\nlow = 1e-3\nhigh = 1e-1\n\n[warmup]\ntype = "fixed"\nvalue = 0.1\n'


@pytest.mark.parametrize("kw, needle", [({"top": -1}, "Confirm(top=...) must be an integer >= 0, got -1"),
                                        ({"top": True}, "Confirm(top=...)"), ({"seeds": 0}, "Confirm(seeds=...)"),
                                        ({"top": 2.5}, "Confirm(top=...)")])
def test_bad_confirm_values_are_one_line_naming_the_value_and_the_fix(kw: dict[str, Any], needle: str) -> None:
    with pytest.raises(UsageError) as exc:
        Confirm(**kw)
    assert needle in str(exc.value) and "pass e.g." in str(exc.value) and "\n" not in str(exc.value)


def test_confirm_is_off_by_default() -> None:
    assert Confirm() == Confirm(top=0, seeds=2)


def test_the_mean_chooses_not_the_luckiest_single_run() -> None:
    """Trial 0 was lucky (1.0, then 3.0 and 3.0); trial 1 is steady (1.5, 1.6, 1.7): trial 1 is chosen, and the best
    single value overstated the chosen mean by 0.1 (1.6 - 1.5 is how much the chosen one's own run did; 1.0 is best)."""
    runs = [Run(0, 0, 1.0), Run(1, 1, 1.5), Run(3, 0, 3.0), Run(4, 0, 3.0), Run(5, 1, 1.6, weights="w5"),
            Run(6, 1, 1.7, weights="w6")]
    c = choose(runs, Objective("loss"), (0, 1.0))
    assert c is not None and c.chosen == 1 and c.mean == pytest.approx(1.6) and c.overstated == pytest.approx(0.6)
    partial = choose(runs[:2] + runs[4:], Objective("loss"), (0, 1.0), done=False)  # trial 0's repeats never ran
    assert partial is not None and partial.chosen == 1 and not partial.done
    assert [(x.trial, x.runs, x.values) for x in c.configurations] == [(0, [0, 3, 4], [1.0, 3.0, 3.0]),
                                                                      (1, [1, 5, 6], [1.5, 1.6, 1.7])]
    assert c.kept == 5  # the chosen configuration's best run that has weights
    maximised = choose([Run(0, 0, 0.9), Run(1, 1, 0.8), Run(2, 0, 0.5), Run(3, 1, 0.8)], Objective("accuracy"), (0, 0.9))
    assert maximised is not None and maximised.chosen == 1 and maximised.overstated == pytest.approx(0.1)
    diverged = [Run(0, 0, 1.0), Run(1, 1, 1.5), Run(2, 0, None, diverged=True), Run(3, 1, 1.6)]
    assert choose(diverged, Objective("loss"), (0, 1.0)).chosen == 1  # type: ignore[union-attr]
    assert choose([Run(0, 0, 1.0)], Objective("loss"), (0, 1.0)) is None  # no repeat: nothing confirmed


def _lucky_loop(seen: dict[float, int], interrupt: dict[str, Any]) -> Any:
    """The user's loop for a 3-trial search whose trial 0 is lucky at the study's seed (1.0; 3.0 at every other),
    trial 1 steady (1.5, then 1.6 and 1.7), trial 2 poor (5.0). Evaluations before the last report 1.0, except a
    confirmation run's, which report 100: halving would stop them, were they not exempt."""
    def run(trial: Any) -> None:
        seed, lr, steps, every = int(trial.config["seed"]), trial.params["lr"], int(trial.config["max_steps"]), trial.eval_every
        if seed == 0:
            seen[lr] = trial.number
        origin = seen[lr]
        if interrupt.get("at") == (origin, seed):
            del interrupt["at"]
            raise KeyboardInterrupt
        repeat = (seed // 1000) - 1
        final = [1.0, 1.5, 5.0][origin] if seed == 0 else ([3.0, 1.6 + 0.1 * repeat, 5.0][origin])
        for u in range(every, steps + 1, every):
            if trial.report(u, final if u == steps else (1.0 if seed == 0 else 100.0), model=torch.nn.Linear(2, 1)):
                return
    return run


def _own(tmp_path: Path, run: Any, **kw: Any) -> SearchResult:
    space = write_space(tmp_path, FLOAT_LR)
    return search_own("tests.tasks:regression_task", str(space), run=run, trials=3, seed=0, budget="320samples",
                      sampler=RandomSampler(seed_trial=False), pruner=Halving(evals=4, reduction_factor=2, rungs=1),
                      backend=Local(device="cpu"), confirm=Confirm(top=2, seeds=2), out=tmp_path / "run",
                      progress=False, **kw)


def test_confirmation_runs_at_fresh_seeds_unpruned_counted_and_the_mean_chooses(tmp_path: Path) -> None:
    r = _own(tmp_path, _lucky_loop({}, {}))
    repeats = [t for t in r.trials if t.get("confirm_of") is not None]
    assert sorted((t["confirm_of"], t["repeat"]) for t in repeats) == [(0, 0), (0, 1), (1, 0), (1, 1)]
    assert {t["config"]["seed"] for t in repeats} == {repeat_seed(0, 0), repeat_seed(0, 1)} == {1000, 2000}
    assert all(t["state"] == "COMPLETE" for t in repeats)  # reported 100 at the rung, never pruned
    assert all(t["params"] == r.trials[t["confirm_of"]]["params"] for t in repeats)
    # Counted: the study's compute and its trials hold them (3 trials and 4 confirmation runs, 320 samples each).
    assert len(r.trials) == 7 and r.compute == 7 * 320
    c = r.confirmation
    assert c is not None and c.chosen == 1 and c.best_single_trial == 0 and c.done
    assert r.best_params == r.trials[1]["params"] and r.best_config == r.trials[1]["config"]
    assert r.best_value == pytest.approx(1.6) and c.overstated == pytest.approx(0.6) and r.trial()["number"] == 1
    table = r.table()
    assert "chosen by its mean: trial 1's configuration, loss 1.6000" in table and "overstated it by 0.6000" in table
    assert "(confirms 0, seed 1000)" in table
    # The kept weights: a run of the chosen configuration (its better repeat: its original was not the best when it
    # ended, so it kept none), the only file left.
    kept = next(t["number"] for t in repeats if (t["confirm_of"], t["repeat"]) == (1, 0))
    assert c.kept == kept and r.best_weights == str(tmp_path / "run" / "weights" / f"trial-{kept}.pt")
    assert [p.name for p in (tmp_path / "run" / "weights").glob("*.pt")] == [f"trial-{kept}.pt"]
    assert f"the chosen configuration's weights (trial {kept}'s run)" in r.summary()
    assert r.weights_of()["config"]["seed"] == 1000
    again = SearchResult.from_json(tmp_path / "run" / "search.json")  # the report round-trips
    assert again.confirmation == c and again.best_value == r.best_value
    old = json.loads((tmp_path / "run" / "search.json").read_text())
    old.pop("confirmation")  # a search.json of an earlier tunekit still loads
    assert SearchResult.from_json(json.dumps(old)).confirmation is None


def test_what_a_time_limit_left_of_the_confirmation_runs_is_said() -> None:
    assert shortfall(0, 2, None, 0, True) is None and shortfall(2, 2, 2, 4, True) is None  # none asked; all ran
    assert shortfall(3, 2, None, 0, True) == ("confirmation (top=3, seeds=2): none of its 6 runs ran (the study's time "
                                              "limit was reached first): the answer is the best single trial, unconfirmed")
    assert shortfall(3, 2, 2, 1, False) == ("confirmation (top=3, seeds=2): 1 of its 4 runs ran (the search stopped "
                                            "first): the answer is chosen among the configurations that ran again")


def test_a_search_whose_time_limit_left_no_confirmation_run_says_so(tmp_path: Path) -> None:
    """The runs are the study's trials, paid from its time limit: where it is spent, the answer is the best single
    trial, and the result says none of the confirmation runs ran and why."""
    r = _own(tmp_path, _lucky_loop({}, {}), study=Study(time_limit="0.001s"))
    assert r.confirmation is None and not any(t.get("confirm_of") is not None for t in r.trials)
    assert r.confirm_note is not None and "none of its 4 runs ran (the study's time limit was reached first)" in r.table()
    assert SearchResult.from_json(tmp_path / "run" / "search.json").confirm_note == r.confirm_note


def test_a_resume_goes_on_with_the_confirmation_runs_and_queues_none_twice(tmp_path: Path) -> None:
    seen: dict[float, int] = {}
    stop = {"at": (1, 2000)}  # Ctrl-C in trial 1's second repeat
    with pytest.raises(KeyboardInterrupt):
        _own(tmp_path, _lucky_loop(seen, stop))
    r = _own(tmp_path, _lucky_loop(seen, {}), study=Study(resume=True))
    study = optuna.load_study(study_name=r.study_name, storage=f"sqlite:///{tmp_path / 'run' / 'study.db'}")
    skip = excluded(study)
    keys = [(t.user_attrs["tunekit_confirm_of"], t.user_attrs["tunekit_repeat"]) for t in study.trials
            if "tunekit_confirm_of" in t.user_attrs and t.number not in skip]
    assert sorted(keys) == [(0, 0), (0, 1), (1, 0), (1, 1)]  # each once, the interrupted one re-run
    killed = [t for t in study.trials if t.number in skip]
    assert len(killed) == 1 and killed[0].user_attrs["tunekit_confirm_of"] == 1
    rerun = [t for t in study.trials if t.user_attrs.get("tunekit_retry_of") == killed[0].number]
    assert len(rerun) == 1 and rerun[0].user_attrs["config"]["seed"] == 2000 and rerun[0].state.name == "COMPLETE"
    assert r.confirmation is not None and r.confirmation.chosen == 1 and r.best_value == pytest.approx(1.6)
    assert not [t for t in study.trials if t.state.name == "WAITING"]


def test_a_confirmation_run_is_never_pruned() -> None:
    pruner = make_pruner(10, 4, [1], 2, prune=True, adaptive=False)
    study = optuna.create_study(pruner=pruner)
    dist = {"x": optuna.distributions.FloatDistribution(0, 1)}
    for v in (1.0, 1.1):
        study.add_trial(optuna.trial.create_trial(params={"x": 0.5}, distributions=dist, value=v,
                                                  intermediate_values={10: v}))
    for attrs, pruned in (({}, True), ({"tunekit_confirm_of": 0, "tunekit_repeat": 0}, False)):
        t = study.ask(dist)
        for k, v in attrs.items():
            t.set_user_attr(k, v)
        t.report(100.0, 10)
        assert t.should_prune() is pruned


def test_queued_once_and_a_second_workers_copies_are_surplus() -> None:
    """Two workers that both saw the search done: the second's copies are not counted, and no claim runs them."""
    study = optuna.create_study()
    dist = {"x": optuna.distributions.FloatDistribution(0, 1)}
    for x, v in ((0.1, 3.0), (0.2, 1.0), (0.3, 2.0), (0.2, 1.0)):  # 0.2 drawn twice: one configuration
        study.add_trial(optuna.trial.create_trial(params={"x": x}, distributions=dist, value=v))
    confirm = Confirm(top=2, seeds=2)
    queue_confirmations(study, confirm, trials=5)  # not yet: 4 of 5 finished
    assert len(study.trials) == 4 and goal(study, 5) == 5
    queue_confirmations(study, confirm, trials=4)
    queue_confirmations(study, confirm, trials=4)  # again (a resume): nothing more
    waiting = [t for t in study.trials if t.state.name == "WAITING"]
    assert sorted((t.user_attrs["tunekit_confirm_of"], t.user_attrs["tunekit_enqueued"]["x"]) for t in waiting) == [
        (1, 0.2), (1, 0.2), (2, 0.3), (2, 0.3)]
    assert goal(study, 4) == 8
    for t in waiting:  # another worker, racing, queued the same runs again
        study.enqueue_trial(t.params, user_attrs=dict(t.user_attrs), skip_if_exists=False)
    dupes = [t.number for t in study.trials if t.number > max(w.number for w in waiting)]
    assert set(dupes) <= excluded(study) and goal(study, 4) == 8
    assert [claim(study, n, 8) for n in (waiting[0].number, dupes[0])] == [True, False]


def test_the_cli_flags_reach_the_search_and_bad_ones_exit_2_in_one_line(tmp_path: Path, run_main,  # type: ignore[no-untyped-def]
                                                                         assert_usage_error) -> None:
    space = write_space(tmp_path, FLOAT_LR)
    code, said, err = run_main("search", "--task", "tests.tasks:regression_task", "--space", str(space), "--trials", "2",
                               "--budget", "320samples", "--no-prune", "--device", "cpu", "--sampler", "random",
                               "--no-seed-trial", "--confirm-top", "1", "--confirm-seeds", "1", "--out",
                               str(tmp_path / "run"), "--quiet")
    assert code == 0, err[-2000:]
    saved = json.loads((tmp_path / "run" / "search.json").read_text())
    assert [t["config"]["seed"] for t in saved["trials"] if t.get("confirm_of") is not None] == [1000]
    assert saved["confirmation"]["configurations"][0]["runs"][0] == saved["confirmation"]["chosen"]
    assert "chosen by its mean" in said
    assert_usage_error(["search", "--confirm-top", "-1"], "--confirm-top")
    assert_usage_error(["search", "--confirm-seeds", "0", "--task", "tests.tasks:regression_task"], "seeds")


@pytest.mark.slow  # three processes on a journal file, one killed during a confirmation run
def test_a_shared_studys_confirmation_runs_survive_a_killed_worker(tmp_path: Path) -> None:
    import subprocess
    import sys
    import time

    space, journal = write_space(tmp_path, FLOAT_LR), str(tmp_path / "study.log")
    slow = ["--task", "tests.tasks:slow_regression_task", "--max-steps", "40", "--no-prune", "--device", "cpu", "--quiet"]
    created = run_cli("study", "create", "--space", str(space), "--trials", "3", "--storage", journal, "--study", "j",
                      "--sampler", "random", "--no-seed-trial", "--confirm-top", "1", "--confirm-seeds", "2",
                      "--out", str(tmp_path / "c"), *slow)
    assert created.returncode == 0, created.stderr[-2000:]
    env = dict(os.environ, OMP_NUM_THREADS="1", MPLBACKEND="Agg", PYTHONPATH=str(ROOT))
    procs = [subprocess.Popen([sys.executable, "-m", "tunekit", "worker", "--storage", journal, "--study", "j", "--quiet"],
                              cwd=tmp_path, env=env, text=True, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              start_new_session=True) for _ in range(2)]
    store, deadline, victim = make_storage(journal, None), time.time() + 300, None
    while victim is None:  # a worker training a confirmation run
        assert time.time() < deadline, "no confirmation run started"
        running = [t for t in optuna.load_study(study_name="j", storage=store).trials if t.state.name == "RUNNING"
                   and t.params and "tunekit_confirm_of" in t.user_attrs]
        victim = next((p for p in procs for t in running if t.user_attrs.get("worker", {}).get("pid") == p.pid), None)
        time.sleep(0.2)
    os.killpg(victim.pid, signal.SIGKILL)
    victim.wait()
    survivor = next(p for p in procs if p is not victim)
    _, err = survivor.communicate(timeout=300)
    assert survivor.returncode == 0, err[-2000:]
    study = optuna.load_study(study_name="j", storage=make_storage(journal, None))
    skip = excluded(study)
    usable = [t for t in study.trials if t.state.is_finished() and t.number not in skip]
    keys = sorted((t.user_attrs["tunekit_confirm_of"], t.user_attrs["tunekit_repeat"]) for t in usable
                  if "tunekit_confirm_of" in t.user_attrs)
    assert len(usable) == 5 and len(keys) == 2 and {k[1] for k in keys} == {0, 1}, [(t.number, t.state.name) for t in
                                                                                   study.trials]
    stopped = [t for t in study.trials if t.number in skip and "tunekit_confirm_of" in t.user_attrs]
    assert len(stopped) == 1  # the killed run, re-run once at its own seed
    rerun = [t for t in usable if t.user_attrs.get("tunekit_retry_of") == stopped[0].number]
    assert len(rerun) == 1 and rerun[0].user_attrs["tunekit_repeat"] == stopped[0].user_attrs["tunekit_repeat"]
    assert rerun[0].user_attrs["config"]["seed"] == repeat_seed(0, rerun[0].user_attrs["tunekit_repeat"])
    assert not [t for t in study.trials if t.state.name in ("RUNNING", "WAITING")]
    refused = run_cli("worker", "--storage", journal, "--study", "j", "--confirm-top", "2", "--quiet", cwd=tmp_path)
    assert refused.returncode == 2 and "created with --confirm-top = 1, this run has 2" in refused.stderr


@pytest.mark.slow  # a search SIGKILLed during a confirmation run, then resumed
def test_a_search_killed_during_a_confirmation_run_resumes_it_once(tmp_path: Path) -> None:
    import subprocess
    import sys
    import time

    space, out = write_space(tmp_path, FLOAT_LR), tmp_path / "run"
    args = ["search", "--task", "tests.tasks:slow_regression_task", "--space", str(space), "--trials", "3",
            "--max-steps", "30", "--no-prune", "--device", "cpu", "--sampler", "random", "--no-seed-trial",
            "--confirm-top", "2", "--confirm-seeds", "1", "--out", str(out), "--quiet"]
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONPATH=str(ROOT))
    proc = subprocess.Popen([sys.executable, "-m", "tunekit", *args], cwd=tmp_path, env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    storage, name, deadline = f"sqlite:///{out / 'study.db'}", "tunekit-regression-space", time.time() + 300
    while True:  # until a confirmation run trains
        assert proc.poll() is None and time.time() < deadline, "the search ended before a confirmation run"
        if (out / "study.db").exists():
            try:
                trials = optuna.load_study(study_name=name, storage=storage).trials
            except KeyError:  # the study is not created yet
                trials = []
            if any(t.state.name == "RUNNING" and t.params and "tunekit_confirm_of" in t.user_attrs for t in trials):
                break
        time.sleep(0.1)
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    before = {t.number: t.value for t in optuna.load_study(study_name=name, storage=storage).trials
              if t.state.name == "COMPLETE"}
    r = run_cli(*args, "--resume", cwd=tmp_path)
    assert r.returncode == 0, r.stderr[-2000:]
    study = optuna.load_study(study_name=name, storage=storage)
    assert all(study.trials[n].value == v for n, v in before.items())  # nothing finished is run again
    skip = excluded(study)
    usable = [t for t in study.trials if t.state.is_finished() and t.number not in skip]
    keys = sorted(t.user_attrs["tunekit_confirm_of"] for t in usable if "tunekit_confirm_of" in t.user_attrs)
    assert len(usable) == 5 and len(keys) == 2 and len(set(keys)) == 2
    killed = [t for t in study.trials if t.number in skip]
    assert len(killed) == 1 and "tunekit_confirm_of" in killed[0].user_attrs
    rerun = [t for t in usable if t.user_attrs.get("tunekit_retry_of") == killed[0].number]
    assert len(rerun) == 1 and rerun[0].user_attrs["config"]["seed"] == 1000
    assert not [t for t in study.trials if t.state.name in ("RUNNING", "WAITING")]
    assert json.loads((out / "search.json").read_text())["confirmation"]["done"] is True
