import math

import numpy as np
import pytest

from tunekit import UsageError, lr_at, lr_schedule
from tunekit.training.schedule import warmup_steps


def test_warmup_is_linear_and_never_zero() -> None:
    # 10 warmup updates of a 100-update run: peak/10, 2*peak/10, ..., peak.
    lrs = lr_schedule(100, 1.0, warmup=10, decay="cosine", min_lr_ratio=0.0)
    np.testing.assert_allclose(lrs[:10], np.arange(1, 11) / 10)
    assert lrs[0] > 0


def test_cosine_reaches_peak_midpoint_and_floor() -> None:
    total, warm = 110, 10
    lrs = lr_schedule(total, 2.0, warmup=warm, decay="cosine", min_lr_ratio=0.1)
    assert lrs[warm] == pytest.approx(2.0)  # first decay step is the peak
    assert lrs[-1] == pytest.approx(0.2)  # floor = min_lr_ratio * peak
    # Halfway through the decay, cosine is halfway between peak and floor.
    mid = warm + (total - warm - 1) // 2
    assert lrs[mid] == pytest.approx(0.2 + 1.8 * 0.5 * (1 + math.cos(math.pi * (mid - warm) / (total - warm - 1))))
    assert lrs[mid] == pytest.approx(1.1, abs=0.05)
    assert np.all(np.diff(lrs[warm:]) <= 1e-12)  # monotone decay


def test_linear_and_constant() -> None:
    lin = lr_schedule(11, 1.0, warmup=0, decay="linear", min_lr_ratio=0.0)
    np.testing.assert_allclose(lin, np.linspace(1.0, 0.0, 11))
    const = lr_schedule(20, 0.5, warmup=5, decay="constant")
    np.testing.assert_allclose(const[5:], 0.5)


def test_warmup_fraction_and_steps() -> None:
    assert warmup_steps(0.1, 200) == 20
    assert warmup_steps(20, 200) == 20
    assert warmup_steps(20.0, 200) == 20  # a whole float from the CLI is a step count
    assert warmup_steps(0, 200) == 0
    assert lr_at(0, 200, 1.0, warmup=0.1) == pytest.approx(1 / 20)


@pytest.mark.parametrize("bad", [-1, 1.5, float("nan"), "ten"])
def test_bad_warmup_names_the_value(bad: object) -> None:
    with pytest.raises(UsageError, match="warmup"):
        warmup_steps(bad, 100)  # type: ignore[arg-type]


def test_unknown_schedule() -> None:
    with pytest.raises(UsageError, match="'step'.*cosine, linear, constant"):
        lr_at(0, 10, 1.0, decay="step")  # type: ignore[arg-type]


def test_lr_at_defaults_are_trainings() -> None:
    """A schedule drawn with lr_at's defaults is the one train runs with TrainConfig's."""
    from tunekit.training.loop import TrainConfig

    cfg = TrainConfig()
    assert list(lr_schedule(cfg.max_steps, 1.0)) == pytest.approx(
        list(lr_schedule(cfg.max_steps, 1.0, cfg.warmup, cfg.schedule, cfg.min_lr_ratio)))  # type: ignore[arg-type]
    assert lr_at(cfg.max_steps - 1, cfg.max_steps, 1.0) == pytest.approx(cfg.min_lr_ratio)


def test_warmup_stable_decay_holds_the_peak_then_decays_over_the_last_share() -> None:
    """"wsd": warmup, the peak until the last WSD_DECAY of the run, then a cosine to the floor."""
    from tunekit.defaults import WSD_DECAY

    total = 100
    lrs = lr_schedule(total, 1.0, warmup=0.1, decay="wsd", min_lr_ratio=0.1)
    start = total - int(round(WSD_DECAY * total))
    assert lrs[0] == pytest.approx(0.1) and lrs[9] == pytest.approx(1.0)  # warmup
    assert np.all(lrs[10:start] == 1.0)  # stable
    assert np.all(np.diff(lrs[start:]) < 0) and lrs[-1] == pytest.approx(0.1)  # decay to the floor
    # A warmup longer than the stable part: the decay starts after warmup, never before.
    short = lr_schedule(10, 1.0, warmup=0.9, decay="wsd", min_lr_ratio=0.0)
    assert short[8] == pytest.approx(1.0) and np.all(short[:9] > 0)


def test_wsd_reaches_the_floor_on_tiny_runs_and_the_schedule_names_agree() -> None:
    import typing

    from tunekit.defaults import DECAYS
    from tunekit.training.schedule import Decay

    for total in (2, 5, 7):
        assert lr_schedule(total, 1.0, warmup=0, decay="wsd", min_lr_ratio=0.1)[-1] == pytest.approx(0.1)
    assert typing.get_args(Decay) == DECAYS
