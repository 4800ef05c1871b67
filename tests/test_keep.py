"""The best trial's weights kept: loaded back, they score the best trial's value; a kill during their write
loses nothing; a resume keeps or improves them; and trials leave no memory behind."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import torch
from torch import nn

from tunekit import Halving, Local, NoPruning, RandomSampler, Study, Task, UsageError, search
from tunekit.integrations.weights import load_weights
from tunekit.integrations.task_spec import load_task
from tunekit.training.loop import evaluate

from .tasks import ROOT, SMALL, regression_data, write_space

SPEC = "tests.tasks:regression_task"


def score(model: nn.Module, task: Task, config: dict[str, Any]) -> float:
    """The validation loss as a trial's final evaluation computes it."""
    metrics = evaluate(model, task.val_data, task.loss_computer(), device=torch.device("cpu"),
                       batch_size=config.get("eval_batch_size") or task.batch_size or config["batch_size"],
                       max_batches=config.get("eval_batches"))
    return metrics["loss"]


def kept_files(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.glob("trial-*.pt"))


@pytest.mark.slow  # a 5-trial search
def test_best_model_scores_the_best_trials_value_and_one_copy_is_kept(tmp_path: Path) -> None:
    r = search(SPEC, str(write_space(tmp_path, SMALL)), trials=5, seed=3, out=tmp_path / "out", progress=False,
               backend=Local(device="cpu"), budget="20updates")
    best = r.trial()
    assert r.best_weights == str((tmp_path / "out" / "weights" / f"trial-{best['number']}.pt").resolve())
    assert kept_files(tmp_path / "out" / "weights") == [f"trial-{best['number']}.pt"]  # one copy, the best's
    model = r.best_model()
    assert not model.training
    # The same device and precision as the trial's evaluation: the same value, to float rounding.
    assert score(model, load_task(SPEC), r.best_config) == pytest.approx(r.best_value, rel=1e-6, abs=1e-9)
    # From the report alone, in another process's terms: the spec and the file.
    again = type(r).from_json(tmp_path / "out" / "search.json")
    assert again.best_weights == r.best_weights and again.made_from is None
    assert score(again.best_model(), load_task(SPEC), r.best_config) == pytest.approx(r.best_value, rel=1e-6)
    # Only the best trial shows a file; the others' were removed as the best improved.
    assert [t["number"] for t in r.trials if t.get("weights")] == [best["number"]]
    assert "the best trial's weights: " + r.best_weights in r.summary(tmp_path / "out")
    Path(r.best_weights).unlink()  # gone: the way back is the exact re-run
    with pytest.raises(UsageError, match="the best trial's weights are not on disk.*tunekit train --config"):
        r.best_model()


@pytest.mark.slow  # two searches
def test_keep_all_keeps_every_finished_trial_and_none_keeps_nothing(tmp_path: Path) -> None:
    space = str(write_space(tmp_path, SMALL))
    r = search(SPEC, space, trials=3, seed=1, out=tmp_path / "all", progress=False, keep="all", pruner=NoPruning(),
               backend=Local(device="cpu"), budget="20updates")
    assert kept_files(tmp_path / "all" / "weights") == [f"trial-{t['number']}.pt" for t in r.trials]
    task = load_task(SPEC)
    for t in r.trials:  # each file holds its own trial's trained state
        saved = r.weights_of(t["number"])
        assert saved["trial"] == t["number"] and saved["value"] == t["value"]
        model = r.best_model(trial=t["number"])
        assert score(model, task, t["config"]) == pytest.approx(t["value"], rel=1e-6)
    none = search(SPEC, space, trials=2, seed=1, out=tmp_path / "none", progress=False, keep="none",
                  backend=Local(device="cpu"), budget="20updates")
    assert not (tmp_path / "none" / "weights").exists() and none.best_weights is None
    with pytest.raises(UsageError, match="keep='none'"):
        none.best_model()


def test_a_pruned_trials_weights_are_refused_for_being_pruned_not_for_keep(tmp_path: Path) -> None:
    """Under keep='all' a pruned trial has no file: the refusal says so, not 'pass keep=all'."""
    from tunekit.results import SearchResult

    kept = tmp_path / "trial-0.pt"
    kept.write_bytes(b"")
    rows = [{"number": 0, "state": "COMPLETE", "value": 0.5, "params": {}, "config": {}, "weights": str(kept)},
            {"number": 1, "state": "PRUNED", "value": None, "params": {}, "config": {}},
            {"number": 2, "state": "COMPLETE", "value": 0.7, "params": {}, "config": {},
             "weights": str(tmp_path / "trial-2.pt")}]
    r = SearchResult(study_name="s", storage="x", space="sp", direction="minimize", best_value=0.5, best_params={},
                     best_config={}, trials=rows, seed_params={}, distributions={}, keep="all")
    with pytest.raises(UsageError) as pruned:
        r.weights_of(1)
    assert str(pruned.value).startswith("trial 1 was pruned, and a pruned trial keeps no weights")
    assert "pass keep='all'" not in str(pruned.value) and "--trial 1" in str(pruned.value)
    with pytest.raises(UsageError, match=r"^trial 2's weights are not on disk \(no file at .*trial-2.pt\)"):
        r.weights_of(2)  # kept under 'all', then removed: not 'pass keep=all' either
    r.keep = "best"
    with pytest.raises(UsageError, match="^trial 1 was pruned"):
        r.weights_of(1)  # pass keep='all' would not keep it either


def test_load_best_into_a_model_in_hand_and_a_task_object(tmp_path: Path) -> None:
    task = load_task(SPEC)
    r = search(task, str(write_space(tmp_path, SMALL)), trials=3, progress=False, backend=Local(device="cpu"),
               budget="20updates")
    assert r.best_weights is not None and r.best_weights.startswith(os.path.realpath(__import__("tempfile").gettempdir()))
    built = r.best_model()  # the Task object given, in this process
    mine = task.make_model(0)
    r.load_best_into(mine)
    for a, b in zip(built.state_dict().values(), mine.state_dict().values()):
        assert torch.equal(a, b)
    with pytest.raises(UsageError, match="load_best_into takes"):
        r.load_best_into("not a model")


KILLER = """
import os, signal, sys
import torch
real_save = torch.save
writes = []

def dying_save(obj, f, *args, **kwargs):
    # The second trial's weights: half a file, then the process is killed, as by the kernel.
    if getattr(f, "name", "").rsplit("/", 1)[-1].startswith(".trial-"):
        writes.append(f.name)
        if len(writes) == 2:
            f.write(b"half a file" * 1000)
            f.flush()
            os.kill(os.getpid(), signal.SIGKILL)
    return real_save(obj, f, *args, **kwargs)

torch.save = dying_save
import tunekit
tunekit.search("tests.tasks:regression_task", sys.argv[1], trials=4, max_steps=20, out=sys.argv[2], device="cpu",
               progress=False, prune=False, keep="all")
"""


@pytest.mark.slow  # a subprocess killed, then a resume
def test_a_kill_during_the_write_leaves_a_loadable_best_and_a_resume_improves_on_it(tmp_path: Path) -> None:
    script = tmp_path / "killer.py"
    script.write_text(KILLER)
    space, out = write_space(tmp_path, SMALL), tmp_path / "out"
    env = dict(os.environ, PYTHONPATH=str(ROOT), OMP_NUM_THREADS="1", MPLBACKEND="Agg")
    p = subprocess.run([sys.executable, str(script), str(space), str(out)], env=env, cwd=tmp_path, timeout=300)
    assert p.returncode == -9
    weights = out / "weights"
    assert kept_files(weights) == ["trial-0.pt"]  # the first trial's, whole; the second's never replaced it
    assert load_weights(weights / "trial-0.pt")["trial"] == 0
    assert list(weights.glob(".trial-1.pt.*.tmp"))  # the half-written file, under its temporary name
    # A resume runs the killed trial again, keeps the best (as keep=best: one file) and clears the half file.
    r = search(SPEC, str(space), trials=4, out=out, progress=False, pruner=NoPruning(), backend=Local(device="cpu"),
               study=Study(resume=True), budget="20updates")
    best = r.trial()
    assert kept_files(weights) == [f"trial-{best['number']}.pt"] and not list(weights.glob(".*.tmp"))
    assert score(r.best_model(), load_task(SPEC), r.best_config) == pytest.approx(r.best_value, rel=1e-6)


@pytest.mark.slow  # a search and its resume
def test_a_resume_that_finds_no_better_trial_keeps_the_best_it_had(tmp_path: Path) -> None:
    space, out = str(write_space(tmp_path, SMALL)), tmp_path / "out"
    first = search(SPEC, space, trials=2, out=out, progress=False, backend=Local(device="cpu"), budget="20updates")
    before = load_weights(first.best_weights)["state_dict"]
    r = search(SPEC, space, trials=4, out=out, progress=False, backend=Local(device="cpu"), study=Study(resume=True),
               budget="20updates")
    assert kept_files(out / "weights") == [Path(r.best_weights).name]
    if r.best_value >= first.best_value:  # no better trial: the same file, untouched
        assert r.best_weights == first.best_weights
        after = load_weights(r.best_weights)["state_dict"]
        assert all(torch.equal(before[k], after[k]) for k in before)
    else:  # a better one replaced it
        assert r.trial()["number"] >= 2 and not Path(first.best_weights).exists()


# --- memory between trials ----------------------------------------------------------------------

BUFFER = 16 * 2**20  # floats: 64 MiB a model, well above anything else a trial holds


class Heavy(nn.Module):
    """An MLP of 4.2M parameters carrying a large buffer, as an embedding table or a cache would."""

    def __init__(self) -> None:
        super().__init__()
        self.net = nn.Sequential(nn.Linear(8, 2048), nn.ReLU(), nn.Linear(2048, 2048), nn.ReLU(), nn.Linear(2048, 1))
        self.register_buffer("table", torch.ones(BUFFER))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x) + 0 * self.table[:1]


def _rss() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


@pytest.mark.slow  # a 24-trial search
@pytest.mark.skipif(not Path("/proc/self/statm").exists(), reason="RSS read from /proc")
def test_memory_returns_between_trials_of_a_12_trial_search(tmp_path: Path) -> None:
    import gc

    at_start: list[int] = []  # RSS as each trial builds its model: what the trials before it left
    frozen: list[int] = []  # objects set aside as it does: the collection after a trial walks only what it made

    def make() -> nn.Module:
        at_start.append(_rss())
        frozen.append(gc.get_freeze_count())
        return Heavy()

    task = Task(model=make, train_data=regression_data(128), val_data=regression_data(32, seed=1), loss=nn.MSELoss(),
                batch_size=16, name="heavy")
    # 12 trials: a trial's leak of what it built (a model, its optimizer state) shows from the second on.
    search(task, str(write_space(tmp_path, SMALL)), trials=12, out=tmp_path / "out", progress=False,
           sampler=RandomSampler(design=0, seed_trial=False), pruner=Halving(evals=2), backend=Local(device="cpu"),
           budget="4updates")
    trials = at_start[-12:]  # the probes' models came first
    first = trials[1]  # after the first trial
    assert max(trials[1:]) <= 1.05 * first, [round(x / 2**20) for x in trials]
    assert min(frozen[-12:]) > 0 and gc.get_freeze_count() == 0


def test_a_trials_collection_walks_what_the_trial_made_and_the_rest_is_handed_back() -> None:
    """Inside ``collecting_young`` what existed before is frozen (a collection does not walk it), a cycle
    made inside is collected by ``free_memory``, and at the end the freeze is undone: a cycle made
    before the block is collected afterwards. Someone else's freeze is left as it was."""
    import gc
    import weakref

    from tunekit.training.memory import collecting_young, free_memory

    class Node:
        pass

    def cycle() -> weakref.ref:
        a, b = Node(), Node()
        a.other, b.other = b, a
        return weakref.ref(a)

    gc.collect()
    assert gc.get_freeze_count() == 0
    before = cycle()
    with collecting_young():
        assert gc.get_freeze_count() > 0
        inside = cycle()
        free_memory()
        assert inside() is None  # made inside: collected inside
        assert before() is not None  # made before: set aside for the while
    assert gc.get_freeze_count() == 0
    gc.collect()
    assert before() is None
    gc.freeze()  # frozen by someone else: the block changes nothing
    try:
        frozen = gc.get_freeze_count()
        with collecting_young():
            assert gc.get_freeze_count() == frozen
        assert gc.get_freeze_count() == frozen
    finally:
        gc.unfreeze()


@pytest.mark.slow  # a search and its report
def test_keep_flag_on_the_cli(tmp_path: Path, run_main, assert_usage_error) -> None:  # type: ignore[no-untyped-def]
    assert_usage_error(["search", "--keep", "everything", "--out", str(tmp_path / "o")], "--keep")
    assert_usage_error(["worker", "--storage", str(tmp_path / "j.log"), "--study", "s", "--keep", "some"],
                       "invalid choice: 'some'")
    out = tmp_path / "out"
    code, said, err = run_main("search", "--task", SPEC, "--space", str(write_space(tmp_path, SMALL)), "--trials", "2",
                               "--max-steps", "10", "--keep", "all", "--device", "cpu", "--quiet", "--out", str(out))
    assert code == 0, err[-2000:]
    assert len(kept_files(out / "weights")) == 2
    best = json.loads((out / "search.json").read_text())["best_weights"]
    assert f"the best trial's weights: {best}" in said
    code, said, _ = run_main("report", str(out))
    assert code == 0 and f"the best trial's weights: {best}" in said


def test_a_kept_lightning_checkpoint_holds_the_trials_settings_under_the_modules_names(tmp_path: Path) -> None:
    """A LightningModule's checkpoint is loaded by ``load_from_checkpoint``, which builds the module from its
    hyper_parameters: they hold the LR the trial trained at (under the module's name for it), not the one
    the module was built with; names the module does not have are not added (its __init__ takes none)."""
    from tunekit.hpsearch.keep import Keeper
    from tunekit.hpsearch.plan import TrialConfig
    from tunekit.hpsearch.trial import Outcome, keep_weights

    keeper = Keeper("all", str(tmp_path))
    hparams = {"learning_rate": 1e-3, "hidden": 32, "warmup_steps": 50}
    snapshot = {"state_dict": {"w": torch.zeros(1)}, "hyper_parameters": hparams}
    cfg = TrialConfig({"lr": 0.0168, "weight_decay": 0.01, "warmup": 0.05, "max_steps": 200, "batch_size": 8,
                       "accumulation_steps": 1}, {})
    outcome = Outcome("COMPLETE", 0.5)
    keep_weights(keeper, snapshot, outcome, 3, cfg)
    kept = load_weights(outcome.weights)["hyper_parameters"]
    assert kept == {"learning_rate": 0.0168, "hidden": 32, "warmup_steps": 10}  # its warmup in its units: updates
    assert snapshot["hyper_parameters"]["learning_rate"] == 1e-3  # the snapshot in hand is left as it was
