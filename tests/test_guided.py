"""The sampler after the design: the LR near the best trial early, TPE later, the same trials twice."""

from __future__ import annotations

import math

import optuna
import pytest

from tunekit.hpsearch.guided import BRACKET, LR_PRIOR_SD, GuidedSampler, bracket_step, incumbent, prior_share
from tunekit.hpsearch.seeding import make_sampler

optuna.logging.set_verbosity(optuna.logging.WARNING)

DESIGN = ({"lr": 1e-2, "wd": 1e-3}, {"lr": 3e-3, "wd": 1e-3}, {"lr": 3e-2, "wd": 1e-3})


def run(sampler: optuna.samplers.BaseSampler, trials: int = 12) -> list[float]:
    """A study whose design is queued first; the loss is lowest at lr = 0.03 (above the seed trial's)."""
    study = optuna.create_study(sampler=sampler)
    for params in DESIGN:
        study.enqueue_trial(params)

    def objective(trial: optuna.Trial) -> float:
        lr = trial.suggest_float("lr", 1e-6, 10.0, log=True)
        wd = trial.suggest_float("wd", 1e-5, 1e-1, log=True)
        return (math.log10(lr) - math.log10(0.03)) ** 2 + 0.01 * abs(math.log10(wd) + 3)

    study.optimize(objective, n_trials=trials)
    return [t.params["lr"] for t in study.trials]


def test_prior_share_falls_from_one_to_zero() -> None:
    assert prior_share(0, 10) == 1.0
    assert prior_share(5, 10) == pytest.approx(0.5)
    assert prior_share(10, 10) == 0.0 and prior_share(15, 10) == 0.0
    assert prior_share(0, 0) == 1.0  # no horizon: no division by zero


def test_first_trials_after_the_design_draw_near_the_best_so_far() -> None:
    near = {"guided": 0, "tpe": 0}
    for seed in range(5):
        guided = run(make_sampler("tpe", seed, len(DESIGN), False, lr_param="lr", horizon=9))
        tpe = run(make_sampler("tpe", seed, len(DESIGN), False))
        # Share 1 for the first: always from the prior, around the design's best (0.03).
        assert abs(math.log10(guided[len(DESIGN)]) - math.log10(0.03)) < 4 * LR_PRIOR_SD
        for name, lrs in (("guided", guided), ("tpe", tpe)):
            near[name] += sum(abs(math.log10(x) - math.log10(0.03)) < 1 for x in lrs[len(DESIGN):len(DESIGN) + 4])
    # TPE alone, its prior still flat over seven decades, sends most early trials far away.
    assert near["guided"] >= 15 > near["tpe"] + 5, near


def test_same_seed_same_trials_and_other_seed_other_trials() -> None:
    def sampler(seed: int) -> optuna.samplers.BaseSampler:
        return make_sampler("tpe", seed=seed, startup=len(DESIGN), parallel=False, lr_param="lr", horizon=9)

    assert run(sampler(5)) == run(sampler(5))
    assert run(sampler(5)) != run(sampler(6))


def test_without_a_seeded_lr_it_is_tpe_alone() -> None:
    assert isinstance(make_sampler("tpe", 0, 3, False), optuna.samplers.TPESampler)
    assert isinstance(make_sampler("tpe", 0, 3, False, lr_param="lr", horizon=9), GuidedSampler)
    assert isinstance(make_sampler("random", 0, 3, False, lr_param="lr", horizon=9), optuna.samplers.RandomSampler)


def test_other_parameters_and_a_categorical_lr_are_tpe_s() -> None:
    study = optuna.create_study(sampler=GuidedSampler(optuna.samplers.TPESampler(seed=0), "lr", 0, 5, seed=0))
    study.optimize(lambda t: float(t.suggest_categorical("lr", [0.1, 0.01])) + t.suggest_float("wd", 0, 1),
                   n_trials=4)
    assert {t.params["lr"] for t in study.trials} <= {0.1, 0.01}


def test_an_unbracketed_best_is_walked_to_by_design_steps() -> None:
    """The design's best at its highest LR, nothing tried above: the next trials step 3x up while the
    best stays at the top, then the draws take over."""
    study = optuna.create_study(sampler=make_sampler("tpe", 0, len(DESIGN), False, lr_param="lr", horizon=9))
    for params in DESIGN:
        study.enqueue_trial(params)
    study.optimize(lambda t: (math.log10(t.suggest_float("lr", 1e-6, 10.0, log=True)) - math.log10(0.3)) ** 2
                   + 0 * t.suggest_float("wd", 1e-5, 1e-1, log=True), n_trials=len(DESIGN) + 4)
    lrs = [t.params["lr"] for t in study.trials][len(DESIGN):]
    assert lrs[:3] == pytest.approx([0.09, 0.27, 0.81])  # 0.81 is worse than 0.27: bracketed, no more steps
    assert lrs[3] != pytest.approx(2.43)


def test_a_best_at_the_low_end_steps_down() -> None:
    study = optuna.create_study(sampler=GuidedSampler(optuna.samplers.TPESampler(seed=0), "lr", 2, 5, seed=0))
    for lr in (1e-2, 3e-2):
        study.enqueue_trial({"lr": lr})
    study.optimize(lambda t: math.log10(t.suggest_float("lr", 1e-6, 10.0, log=True)), n_trials=3)
    assert study.trials[-1].params["lr"] == pytest.approx(1e-2 / BRACKET)


def test_the_incumbent_follows_the_study_direction() -> None:
    """A maximised objective: the best finished trial is the highest value, and a best at the top steps up."""
    assert incumbent(None, "lr", [0.01, 0.03]) == 0.01 and incumbent(None, "lr", []) is None  # before any finished: the seed's
    assert bracket_step(0.03, [(0.01, -1.0), (0.03, -2.0)], [0.01, 0.03]) == pytest.approx(0.09)
    study = optuna.create_study(direction="maximize",
                                sampler=GuidedSampler(optuna.samplers.TPESampler(seed=0), "lr", 2, 5, seed=0))
    for lr in (1e-2, 3e-2):
        study.enqueue_trial({"lr": lr})
    study.optimize(lambda t: math.log10(t.suggest_float("lr", 1e-6, 10.0, log=True)), n_trials=3)
    assert study.trials[-1].params["lr"] == pytest.approx(3e-2 * BRACKET)
