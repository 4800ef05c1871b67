"""Rungs that compare a cooldown branch's value (issue 50): the branch leaves the run as it was, costs what it
trains, and is what the pruner reads."""

import contextlib
from pathlib import Path

import optuna
import pytest
import torch
from torch import nn

import tunekit
from tunekit import Halving, Local, Task, UsageError, search
from tunekit.training.branch import Cooldown

from .tasks import MLP, classification_data, fingerprint, regression_task, write_space

SPACE = """
[lr]
type = "float"
log = true
low = 1e-5
high = 1.0

[warmup]
type = "fixed"
value = 0.1
"""


def _dropout_task() -> Task:
    """Dropout (the global RNG) and Adam (optimizer state): what a branch must put back."""
    return Task(model=lambda: MLP(8, 16, 4, dropout=0.3), train_data=classification_data(256),
                val_data=classification_data(64, seed=1), loss=nn.CrossEntropyLoss(), batch_size=16,
                optimizer=lambda p: torch.optim.Adam(p, lr=1e-3), name="dropout")


def _final_weights(cooldown: Cooldown | None) -> tuple[dict[str, torch.Tensor], list[float], list[dict[str, float]]]:
    kept: dict[str, torch.Tensor] = {}
    r = tunekit.train(_dropout_task(), run_steps=40, eval_every=10, progress=False, cooldown=cooldown, device="cpu",
                      on_trained=lambda m: kept.update({k: v.clone() for k, v in m.state_dict().items()}))
    return kept, r.losses, r.evals


def test_a_cooldown_branch_leaves_the_run_bit_identical() -> None:
    plain, losses, evals = _final_weights(None)
    branched, losses_b, evals_b = _final_weights(Cooldown(0.2, frozenset({10, 30})))
    assert all(torch.equal(plain[k], branched[k]) for k in plain)
    assert losses == losses_b
    assert [e["loss"] for e in evals] == [e["loss"] for e in evals_b]  # the run's own values, unchanged
    assert [("cooldown_loss" in e, e.get("cooldown_updates")) for e in evals_b] == [(True, 2.0), (False, None),
                                                                                  (True, 6.0), (False, None)]
    assert evals_b[0]["cooldown_samples"] == 2 * 16


def test_without_putting_back_the_run_would_change(monkeypatch: pytest.MonkeyPatch) -> None:
    """The test above can fail: a branch that does not restore what it touched changes the run after it."""
    plain, _, _ = _final_weights(None)
    monkeypatch.setattr("tunekit.training.branch.preserved", lambda *a, **k: contextlib.nullcontext())
    branched, _, _ = _final_weights(Cooldown(0.2, frozenset({10})))
    assert not all(torch.equal(plain[k], branched[k]) for k in plain)


def _search(tmp_path: Path, name: str, **halving: object) -> tunekit.SearchResult:
    return search(regression_task(), str(write_space(tmp_path, SPACE)), trials=9, seed=1, out=tmp_path / name,
                  pruner=Halving(evals=4, rung_value="cooldown", **halving), backend=Local(device="cpu"),
                  budget="40updates")


@pytest.mark.slow  # a search
def test_the_pruner_reads_the_branch_value_and_the_branch_is_paid_for(tmp_path: Path) -> None:
    r = _search(tmp_path, "a", rung_cooldown=0.1)
    study = optuna.load_study(study_name=None, storage=f"sqlite:///{tmp_path / 'a' / 'study.db'}")
    rung = 2 * 10 * 16  # 9 trials at rf 3: one rung, at evaluation 2 of 4 (update 20, 16 a batch)
    assert any(t["state"] == "PRUNED" for t in r.trials)
    for t, ot in zip(r.trials, study.trials):
        assert [p[0] for p in t["rung_values"]] == [rung]
        branch = t["rung_values"][0][1]
        assert ot.intermediate_values[rung] == branch  # what the pruner compared
        assert dict(map(tuple, t["curve"]))[rung] != branch  # the curve keeps the evaluation's own value
        assert t["branch_samples"] == 2 * 16  # 0.1 x 20 updates
        main = 40 if t["state"] == "COMPLETE" else 20
        assert (t["samples"], t["updates"]) == (main * 16 + 32, main + 2)


@pytest.mark.slow  # a search
def test_same_seed_same_trials_with_cooldown_rungs(tmp_path: Path) -> None:
    assert fingerprint(_search(tmp_path, "a")) == fingerprint(_search(tmp_path, "b"))


@pytest.mark.slow  # a search
def test_raw_rungs_run_no_branch(tmp_path: Path) -> None:
    r = search(regression_task(), str(write_space(tmp_path, SPACE)), trials=9, seed=1, out=tmp_path / "raw",
               pruner=Halving(evals=4, rung_value="raw"), backend=Local(device="cpu"), budget="40updates")
    assert all("rung_values" not in t for t in r.trials)
    assert all(t["samples"] == t["updates"] * 16 for t in r.trials)


@pytest.mark.parametrize("kw,words", [({"rung_value": "ema"}, "raw, cooldown"), ({"rung_cooldown": 0.0}, "rung_cooldown"),
                                      ({"rung_cooldown": 2}, "rung_cooldown")])
def test_a_bad_rung_value_is_one_line(kw: dict[str, object], words: str) -> None:
    with pytest.raises(UsageError, match=words):
        Halving(**kw)  # type: ignore[arg-type]
