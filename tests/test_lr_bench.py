"""The LR benchmark's helpers (benchmarks/lr_tasks.py, lr_grid.py, lr_rules.py): adapters, frozen heads, the grid
curve, the regret of a rule and the leave-one-task-out choice of one."""

import math

import numpy as np
import torch
from torch import nn

from benchmarks.lr_grid import curve, loss_at, lr_of, summary
from benchmarks.lr_rules import candidates, loto_select, regrets_of
from benchmarks.lr_tasks import FrozenFeatures, add_lora


def test_lora_starts_at_the_base_model_and_trains_only_adapters() -> None:
    torch.manual_seed(0)
    base = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 4))
    x = torch.randn(5, 8)
    before = base(x)
    lora = add_lora(base, rank=2, alpha=4.0, skip=())
    assert torch.allclose(lora(x), before)  # B is zero
    trainable = {n for n, p in lora.named_parameters() if p.requires_grad}
    assert trainable == {"0.A", "0.B", "2.A", "2.B"}


def test_frozen_features_keep_batchnorm_statistics() -> None:
    feats = nn.Sequential(nn.Linear(4, 6), nn.BatchNorm1d(6))
    m = FrozenFeatures(feats, nn.Linear(6, 2)).train()
    stats = feats[1].running_mean.clone()
    m(torch.randn(16, 4) + 3)
    assert not feats.training and torch.equal(feats[1].running_mean, stats)
    assert [n for n, p in m.named_parameters() if p.requires_grad] == ["head.weight", "head.bias"]


def test_grid_curve_caps_diverged_runs_at_the_untrained_loss() -> None:
    runs = [{"k": k, "seed": s, "final_loss": v, "diverged": v is None, "seconds": 0.1}
            for k, vals in {-3: (2.0, 2.2), -2: (1.0, 1.2), -1: (1.5, 1.7), 0: (None, 9.0)}.items()
            for s, v in enumerate(vals)]
    entry = {"untrained_loss": 2.5, "seeds": 2, "runs": runs}
    ks, log_lrs, mean = curve(entry)
    assert ks.tolist() == [-3, -2, -1, 0] and np.allclose(mean, [2.1, 1.1, 1.6, 2.5])
    s = summary(entry)
    assert s["best_lr"] == lr_of(-2) and s["interior"] and s["top_diverged"]
    assert math.isclose(loss_at(10 ** -0.5, log_lrs, mean, 2.5), 1.35)
    assert loss_at(None, log_lrs, mean, 2.5) == 2.5 and loss_at(1e-9, log_lrs, mean, 2.5) == 2.1


def _regret_table(best: dict[str, str], default: float = 0.5) -> dict[str, dict[str, float]]:
    """regret[rule][task] over every candidate rule: ``default``, but 0.01 where ``best`` names the rule for the task."""
    return {r: {t: 0.01 if best.get(t) == r else default for t in best} for r in candidates()}


def test_leave_one_task_out_picks_the_rule_that_wins_on_the_other_tasks() -> None:
    tests = {t: [{"family": "adaptive"}] for t in ("t1", "t2", "t3", "t4")}
    regret = _regret_table({t: "min/2" for t in tests})
    assert loto_select(list(tests), regret, tests, "t1") == ("min", "min/2", None)
    # A rule that wins only through the held-out task is not chosen for it, and is for the others.
    regret["min/2"] = {t: 0.10 for t in tests}
    regret["bottom/3"] = {"t1": 0.0, "t2": 0.12, "t3": 0.12, "t4": 0.12}
    assert loto_select(list(tests), regret, tests, "t1")[1] == "min/2"
    assert loto_select(list(tests), regret, tests, "t2")[1] == "bottom/3"


def test_leave_one_task_out_picks_one_divisor_per_family_where_the_families_differ() -> None:
    tests = {t: [{"family": fam}] for t, fam in (("s1", "sgd"), ("s2", "sgd"), ("s3", "sgd"),
                                                  ("a1", "adaptive"), ("a2", "adaptive"), ("a3", "adaptive"))}
    regret = _regret_table({"s1": "min/1", "s2": "min/1", "s3": "min/1", "a1": "min/5", "a2": "min/5", "a3": "min/5"})
    assert loto_select(list(tests), regret, tests, "s1") == ("min", None, {"sgd": 1, "adaptive": 5})


def test_regret_is_the_loss_lost_at_the_suggested_lr_on_the_grid_curve() -> None:
    # Grid: LRs 1e-2, 1e-1, 1 (k = -6, -3, 0), one seed each; the best is 1.0 at 0.1, untrained 2.5.
    runs = [{"k": k, "seed": 0, "final_loss": v, "diverged": False, "seconds": 0.1}
            for k, v in ((-6, 1.5), (-3, 1.0), (0, 2.0))]
    grid = {"tasks": {"t": {"untrained_loss": 2.5, "seeds": 1, "runs": runs}}}
    lrs = np.geomspace(1e-4, 1.0, 20)
    tests = {"t": [{"lrs": lrs.tolist(), "losses": (2.0 - 0.1 * np.arange(20)).tolist(), "family": "adaptive"}]}
    rules = {"at_best": lambda c: 0.1, "halfway": lambda c: 10 ** -1.5, "nothing": lambda c: None}
    regret, picks = regrets_of(rules, ["t"], grid, tests)
    assert picks["at_best"]["t"] == [0.1] and picks["nothing"]["t"] == [None]
    assert regret["at_best"]["t"] == 0.0
    assert math.isclose(regret["halfway"]["t"], 0.25)  # 1.25 interpolated in log LR, over L* = 1
    assert math.isclose(regret["nothing"]["t"], 1.5)  # no suggestion costs the untrained loss
    normalized, _ = regrets_of(rules, ["t"], grid, tests, normalized=True)
    assert math.isclose(normalized["nothing"]["t"], 1.0) and math.isclose(normalized["halfway"]["t"], 0.25 / 1.5)
