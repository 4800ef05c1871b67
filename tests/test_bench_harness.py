"""The benchmark harness (benchmarks/harness): leave-one-family-out selection, costs to a target, anytime
curves, frozen targets, the ground truth's regret, Lightning's suggestion rule, the corpus's shape, and
a study's best trial trained again."""

import json
import math

import numpy as np
import pytest

from benchmarks.corpus import CORPUS, FAMILIES, families
from benchmarks.corpus_lr import lightning_rule
from benchmarks.harness import confirm_choice, costs, grid, lofo, retrain


def test_lofo_never_scores_a_rule_on_the_family_it_was_chosen_on() -> None:
    # Rule "a" is perfect on family X and bad elsewhere; "b" is the reverse. Left out, X must get "b"'s
    # scores (chosen on Y), and Y must get "a"'s (chosen on X): the held-out figure is the honest, bad one.
    family_of = {"x1": "X", "x2": "X", "y1": "Y"}
    scores = {"a": {"x1": 0.0, "x2": 0.0, "y1": 0.5}, "b": {"x1": 0.4, "x2": 0.6, "y1": 0.0}}
    held = lofo.select(scores, family_of)
    assert held["X"].rule == "b" and held["X"].scores == {"x1": 0.4, "x2": 0.6}
    assert held["X"].mean == pytest.approx(0.5) and held["X"].worst == pytest.approx(0.6)
    assert held["Y"].rule == "a" and held["Y"].mean == pytest.approx(0.5)


def _run(*trials: tuple[str, float | None, int], probe: int = 0) -> dict:
    return {"probe_samples": probe, "probe_updates": 0, "probe_seconds": 0.0,
            "trials": [{"number": i, "state": s, "value": v, "samples": n, "updates": n // 10, "seconds": n / 100,
                        "finished": float(i)} for i, (s, v, n) in enumerate(trials)]}


def test_cost_to_target_counts_probes_and_every_trial_until_the_first_hit() -> None:
    run = _run(("PRUNED", None, 50), ("COMPLETE", 1.5, 100), ("COMPLETE", 0.9, 100), ("COMPLETE", 0.5, 100), probe=30)
    assert costs.to_target(run, 1.0) == 30 + 50 + 100 + 100
    assert costs.to_target(run, 1.0, "updates") == 5 + 10 + 10
    assert costs.to_target(run, 0.1) == math.inf
    assert costs.spent(run) == 380


def test_anytime_is_the_best_completed_value_within_the_samples_spent() -> None:
    run = _run(("COMPLETE", 2.0, 100), ("COMPLETE", 1.0, 100), ("COMPLETE", 3.0, 100))
    assert costs.best_after(run, 99) == math.inf
    assert costs.best_after(run, 100) == 2.0
    assert costs.best_after(run, 250) == 1.0
    assert costs.anytime([run, run], 100, (1, 2, 3)) == {1: 2.0, 2: 1.0, 3: 1.0}


def test_a_frozen_target_does_not_move(tmp_path) -> None:
    path = tmp_path / "targets.json"
    assert costs.freeze(path, "t", 1.5) == 1.5
    assert costs.freeze(path, "t", 0.5) == 1.5  # a better find later does not move it
    assert json.loads(path.read_text()) == {"t": 1.5}


def test_grid_truth_interpolates_over_log_lr_and_caps_divergence() -> None:
    runs = [{"k": k, "seed": s, "final_loss": v, "diverged": v is None}
            for k, vals in {-6: (2.0, 2.0), -3: (1.0, 1.2), 0: (None, None)}.items() for s, v in enumerate(vals)]
    t = grid.Truth.of({"runs": runs, "seeds": 2, "untrained_loss": 3.0})
    assert t.best_lr == pytest.approx(0.1) and t.best == pytest.approx(1.1)
    assert t.loss_at(1.0) == pytest.approx(3.0)  # diverged: the untrained loss
    assert t.loss_at(10 ** -0.5) == pytest.approx((1.1 + 3.0) / 2)  # halfway in log LR
    assert t.loss_at(1e-4) == pytest.approx(2.0)  # beyond the grid: the edge's value
    assert t.regret(0.1) == 0 and t.regret(None) == pytest.approx((3.0 - 1.1) / 1.1)
    assert t.top_diverged and t.interior


def _runs(by_k: dict[int, list[float]]) -> list[dict]:
    return [{"k": k, "seed": s, "final_loss": v, "diverged": False} for k, vals in by_k.items() for s, v in enumerate(vals)]


def test_the_best_lrs_odds_split_between_neighbours_the_seeds_cannot_tell_apart() -> None:
    rng = np.random.default_rng(0)
    noise = rng.normal(0, 0.01, 10)  # one draw a seed, shared by every LR (the same init and batch order)
    clear = {"runs": _runs({-3: list(1.0 + noise), 0: list(0.5 + noise), 3: list(0.9 + noise)}), "seeds": 10,
             "untrained_loss": 2.0}
    assert grid.best_odds(clear) == {-3: 0.0, 0: 1.0, 3: 0.0}
    tied = {"runs": _runs({-3: list(0.5 + rng.normal(0, 0.01, 10)), 0: list(0.5 + rng.normal(0, 0.01, 10)),
                           3: list(0.9 + noise)}), "seeds": 10, "untrained_loss": 2.0}
    odds = grid.best_odds(tied)
    assert 0.1 < odds[-3] < 0.9 and odds[-3] + odds[0] == pytest.approx(1.0) and odds[3] == 0.0
    assert grid.best_odds(tied) == odds  # the same draws every time


def test_a_merged_truth_takes_the_windows_ten_seeds_where_it_has_them_and_the_grid_elsewhere() -> None:
    base = {"runs": _runs({-6: [2.0, 2.2], -3: [0.9, 0.7], 0: [1.0, 1.0], 3: [1.5, 1.7]}), "seeds": 2, "untrained_loss": 3.0}
    window = {"runs": _runs({-3: [1.2] * 9 + [0.1], 0: [1.0] * 10}), "seeds": 10, "untrained_losses": [3.0] * 10}
    t = grid.Truth.of(grid.merged(base, window), np.median)
    assert t.best_lr == pytest.approx(1.0) and t.best == pytest.approx(1.0)  # the 2-seed 0.8 at k=-3 was a draw
    assert len(t.at_best) == 10 and t.loss_at(0.1) == pytest.approx(1.2) and t.loss_at(1e-2) == pytest.approx(2.1)
    assert grid.merged(base, None) is base


def test_lightning_rule_is_the_steepest_point_of_its_smoothed_curve() -> None:
    lrs = list(np.logspace(-5, 0, 60))
    losses = [2.0] * 20 + list(np.linspace(2.0, 0.5, 20)) + [0.5] * 20
    lr = lightning_rule(lrs, losses)
    assert lr is not None and lrs[20] <= lr <= lrs[45]  # in the fall (the EMA lags it a little)
    assert lightning_rule(lrs[:5], losses[:5]) is None  # too short once 10 + 1 points are skipped


def test_the_corpus_has_its_families_real_data_and_metadata() -> None:
    assert len(CORPUS) >= 30 and len(FAMILIES) >= 8
    assert sum(not e.real for e in CORPUS.values()) <= len(CORPUS) / 3
    fams = families()
    for fam in ("tabular", "cnn", "lm", "regression", "small-data", "long-horizon", "finetune", "dict-batch", "constant-lr"):
        assert fams.get(fam), fam
    assert all(e.run_steps >= 1000 for e in fams["long-horizon"])
    assert all(e.schedule == "constant" for e in fams["constant-lr"])
    assert not any(e.finder_val for e in fams["small-data"])
    optimizers = {e.optimizer for e in CORPUS.values()}
    assert {"adamw", "adam-l2", "sgd-momentum", "sgd-nesterov"} <= optimizers and optimizers & {"rmsprop", "adagrad"}


def test_retraining_a_best_trial_reproduces_it_at_its_own_seed_and_caches_by_config(tmp_path) -> None:
    import tunekit

    task = CORPUS["mlp_bce_adam"].make()
    made = []

    def make():
        made.append(1)
        return task

    a = tunekit.train(task, lr=3e-3, run_steps=8, seed=7, device="cpu", progress=False, eval_batches=2)
    b = tunekit.train(task, lr=1e-1, run_steps=8, seed=7, device="cpu", progress=False, eval_batches=2)
    trial = lambda n, r: {"number": n, "state": "COMPLETE", "value": r.final_loss,  # noqa: E731
                          "config": {k: v for k, v in r.config.items() if k not in ("device", "precision")}}
    run = {"trials": [trial(0, a), trial(1, b), {"number": 2, "state": "PRUNED", "value": 0.0}]}
    best = retrain.best_trial(run)
    assert best is not None and best["number"] == int(b.final_loss < a.final_loss)  # the pruned 0.0 is not it
    seeds = (7, 8)
    mid = retrain.retrained(tmp_path, "tunekit", "t", 0, make, run, 0, 8, 64, seeds)
    saved = json.loads((tmp_path / "t" / f"tunekit_seed0_{retrain.key_of(best)}.json").read_text())
    assert saved["7"] == pytest.approx(best["value"], rel=1e-6)  # its own seed: the trial's own run
    assert saved["8"] != saved["7"] and mid == pytest.approx((saved["7"] + saved["8"]) / 2)
    assert retrain.retrained(tmp_path, "tunekit", "t", 0, make, run, 0, 8, 64, seeds) == mid and len(made) == 1
    best["config"]["lr"] /= 10  # another configuration: its losses are trained, not read back
    assert retrain.retrained(tmp_path, "tunekit", "t", 0, make, run, 0, 8, 64, seeds) != mid and len(made) == 2
    with pytest.raises(ValueError, match="carries no config"):
        retrain.final_loss("tunekit", task, {"number": 3, "params": {}}, 0, 0, 8, 64)


def test_confirming_the_best_trials_chooses_by_their_mean_not_one_lucky_value(tmp_path) -> None:
    import tunekit

    task = CORPUS["mlp_bce_adam"].make()
    runs = {lr: tunekit.train(task, lr=lr, run_steps=8, seed=7, device="cpu", progress=False, eval_batches=2)
            for lr in (3e-3, 1e-7)}
    cfg = lambda r: {k: v for k, v in r.config.items() if k not in ("device", "precision")}  # noqa: E731
    good, bad = runs[3e-3], runs[1e-7]
    assert good.final_loss < bad.final_loss - 0.05
    # The barely-trained configuration had one lucky run: the least value, so the best trial.
    run = {"trials": [{"number": 0, "state": "COMPLETE", "value": good.final_loss, "samples": 100, "config": cfg(good)},
                      {"number": 1, "state": "COMPLETE", "value": good.final_loss - 0.01, "samples": 100, "config": cfg(bad)}]}
    assert retrain.best_trial(run)["number"] == 1
    median, cost = retrain.confirmed(tmp_path, "tunekit", "t", 0, lambda: task, run, 0, 8, 64, top=2, extra=(7, 8))
    again = [tunekit.train(task, cfg(good), seed=s, device="cpu", progress=False).final_loss for s in retrain.SEEDS]
    assert median == pytest.approx(float(np.median(again)))  # the good configuration, chosen by its mean
    assert cost == 2 * 2 * 100  # two trials confirmed, two seeds each


def _confirm_study() -> dict:
    """A study with Confirm(3, 2): search trials 0-4 (best first: 1, 3, 0), then each of the three run again twice.
    Trial 1 was lucky (its repeats are poor), trial 3 is steady, trial 0 good at its first repeat only."""
    search = [(0, 0.30), (1, 0.10), (2, 0.90), (3, 0.20), (4, 0.50)]
    repeats = [(5, 1, 0, 0.60), (6, 1, 1, 0.60), (7, 3, 0, 0.21), (8, 3, 1, 0.22), (9, 0, 0, 0.15), (10, 0, 1, 0.90)]
    row = {"state": "COMPLETE", "samples": 100, "updates": 10, "seconds": 1.0}
    return {"probe_samples": 50, "probe_updates": 5, "probe_seconds": 0.5,
            "trials": [{**row, "number": n, "value": v} for n, v in search]
            + [{**row, "number": n, "value": v, "confirm_of": of, "repeat": r} for n, of, r, v in repeats]}


@pytest.mark.parametrize("top, seeds, chosen, runs", [
    (0, 0, 1, 0),  # off: the least single value, the lucky one; none of the confirmation runs paid for
    (1, 1, 1, 1),  # only the best confirmed: it is the answer whatever its repeat says
    (1, 2, 1, 2),
    (2, 1, 3, 2),  # trials 1 and 3 at their first repeat: 3's mean 0.205 beats 1's 0.35
    (2, 2, 3, 4),
    (3, 1, 3, 3),  # trial 0's lucky first repeat gives it (0.30 + 0.15) / 2 = 0.225: still 3's 0.205
    (3, 2, 3, 6),
])
def test_each_confirmation_setting_is_read_from_the_largest_studys_subset(top, seeds, chosen, runs) -> None:
    """top=k confirms the k best search trials, seeds=m their first m repeats; the rule is tunekit's own."""
    ch = confirm_choice.choice(_confirm_study(), confirm_choice.Setting(top, seeds))
    assert ch is not None and ch.trial["number"] == chosen and ch.confirm_runs == runs
    assert ch.cost["samples"] == 50 + 5 * 100 + runs * 100  # probes, the search, this setting's runs alone
    assert ch.cost["updates"] == 5 + 5 * 10 + runs * 10


def test_a_repeat_seed_does_not_depend_on_how_many_trials_are_confirmed() -> None:
    """What makes one Confirm(3, 2) study hold every smaller setting: a repeat's seed is the study's and the repeat's."""
    from tunekit.hpsearch.confirm import repeat_seed

    assert [repeat_seed(4, r) for r in (0, 1)] == [1004, 2004]
    assert not {repeat_seed(s, r) for s in range(10) for r in range(2)} & set(retrain.SEEDS)


def test_the_expected_target_is_a_share_of_the_learnable_loss_and_says_when_one_run_is_noisier() -> None:
    t = costs.Target.of((0.9, 1.0, 1.0, 1.1, 1.2), (3.0, 3.0, 3.1))
    assert t.l_star == 1.0 and t.untrained == 3.0
    assert t.margin == pytest.approx(0.04) and t.value == pytest.approx(1.04)
    assert t.seed_iqr == pytest.approx(0.1) and t.noisy  # the quartiles 1.0 and 1.1 span more than the margin
    assert not costs.Target.of((1.0, 1.0, 1.01, 1.0), (3.0,)).noisy


def test_the_held_out_confirmation_setting_is_chosen_without_the_family_it_is_scored_on() -> None:
    def o(reached: int, fte: float) -> confirm_choice.Outcome:
        return confirm_choice.Outcome(reached, 5, {"samples": fte, "updates": 0, "seconds": 0},
                                      {"samples": fte, "updates": 0, "seconds": 0})

    family_of = {"x": "X", "y": "Y", "z": "Z"}
    outcomes = {"off": {"x": o(5, 10), "y": o(2, 10), "z": o(2, 10)},
                "top3x2": {"x": o(0, 16), "y": o(4, 16), "z": o(4, 16)},
                "top1x1": {"x": o(0, 11), "y": o(4, 11), "z": o(4, 11)}}  # as good as top3x2 elsewhere, cheaper
    held = confirm_choice.held_out(outcomes, family_of)
    # Without X, confirming reaches 8 of 10 against off's 4: the cheaper of the two ties, scored on X: 0/5.
    assert held["X"].setting == "top1x1" and held["X"].outcome.reached == 0  # the honest, bad figure
    assert held["Y"].setting == held["Z"].setting == "off"  # with X: off 7, confirming 4
    assert confirm_choice.chosen_everywhere(outcomes, family_of) == "off"  # 9 against 8


def test_no_benchmark_imports_the_test_suite() -> None:
    """The benchmarks run from a checkout without tests/ on the path: what they need lives in benchmarks/."""
    import ast
    from pathlib import Path

    root = Path(__file__).resolve().parent.parent / "benchmarks"
    found = []
    for path in sorted(root.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            names = ([a.name for a in node.names] if isinstance(node, ast.Import)
                     else [node.module or ""] if isinstance(node, ast.ImportFrom) and not node.level else [])
            found += [f"{path.relative_to(root.parent)}:{node.lineno}" for n in names if n.split(".")[0] == "tests"]
    assert not found, "move what they need into benchmarks/: " + ", ".join(found)
