"""Learning-rate schedules as pure functions of the optimizer-update index.

The schedule counts optimizer updates, never micro-batches: with gradient
accumulation over K micro-batches, step ``t`` is the t-th call to
``optimizer.step()``. Every function here takes a step (an int or a numpy array
of them) and returns the LR, so a schedule can be plotted or tested without
training anything.
"""

from __future__ import annotations

import math
from typing import Literal, Union

import numpy as np

from tunekit.defaults import DECAYS, MIN_LR_RATIO, SCHEDULE, WARMUP, WSD_DECAY
from tunekit.errors import UsageError, check_number

__all__ = ["DECAYS", "warmup_steps", "lr_at", "lr_schedule", "sweep_lrs"]

Decay = Literal["cosine", "linear", "constant", "wsd"]
Warmup = Union[int, float]


def warmup_steps(warmup: Warmup, total_steps: int) -> int:
    """Resolve ``warmup`` to a number of updates.

    A float in [0, 1) is a fraction of ``total_steps``; an int (or a whole float
    >= 1, as the CLI parses it) is a number of updates.
    """
    check_number("warmup", warmup, minimum=0, hint="give a step count like 20 or a fraction like 0.05")
    if isinstance(warmup, float) and warmup < 1:
        return int(round(warmup * total_steps))
    if isinstance(warmup, float) and not warmup.is_integer():
        raise UsageError(f"warmup {warmup!r} is neither a fraction in [0, 1) nor a whole number of steps")
    return min(int(warmup), total_steps)


def lr_at(
    step: int | np.ndarray,
    total_steps: int,
    peak_lr: float,
    warmup: Warmup = WARMUP,
    decay: Decay = SCHEDULE,  # type: ignore[assignment]
    min_lr_ratio: float = MIN_LR_RATIO,
) -> float | np.ndarray:
    """LR at optimizer update ``step`` (0-based) of a run of ``total_steps`` updates.

    Linear warmup from ``peak_lr / n_warmup`` to ``peak_lr`` over the first
    ``n_warmup`` updates (so the first update never runs at LR 0), then decay from
    ``peak_lr`` to ``min_lr_ratio * peak_lr`` at the last update ("wsd": the peak until the last
    :data:`~tunekit.defaults.WSD_DECAY` of the run, then a cosine to the floor). The defaults are
    training's (:mod:`tunekit.defaults`), so a schedule drawn here is the one ``train`` runs.
    """
    if decay not in DECAYS:
        raise UsageError(f"schedule {decay!r} is unknown: use one of {', '.join(DECAYS)}")
    n_warm = warmup_steps(warmup, total_steps)
    t = np.asarray(step, dtype=np.float64)
    floor = min_lr_ratio * peak_lr

    warm = peak_lr * (t + 1) / max(n_warm, 1)
    # Progress through the decay phase: 0 at the first post-warmup update, 1 at the last.
    span = max(total_steps - n_warm - 1, 1)
    progress = np.clip((t - n_warm) / span, 0.0, 1.0)
    if decay == "cosine":
        decayed = floor + (peak_lr - floor) * 0.5 * (1.0 + np.cos(math.pi * progress))
    elif decay == "linear":
        decayed = floor + (peak_lr - floor) * (1.0 - progress)
    elif decay == "wsd":
        start = max(n_warm, total_steps - max(1, int(round(WSD_DECAY * total_steps))))
        late = np.clip((t - start + 1) / max(total_steps - start, 1), 0.0, 1.0)  # the floor at the last update
        decayed = floor + (peak_lr - floor) * 0.5 * (1.0 + np.cos(math.pi * late))
    else:
        decayed = np.full_like(t, peak_lr)
    out = np.where(t < n_warm, warm, decayed)
    return float(out) if out.ndim == 0 else out


def lr_schedule(
    total_steps: int,
    peak_lr: float,
    warmup: Warmup = WARMUP,
    decay: Decay = SCHEDULE,  # type: ignore[assignment]
    min_lr_ratio: float = MIN_LR_RATIO,
) -> np.ndarray:
    """The LR of every update of a run, as an array of length ``total_steps``."""
    return np.asarray(lr_at(np.arange(total_steps), total_steps, peak_lr, warmup, decay, min_lr_ratio))


def sweep_lrs(min_lr: float, max_lr: float, steps: int, mode: str = "exp") -> np.ndarray:
    """The LRs of a range test: ``steps`` values from ``min_lr`` to ``max_lr``, geometric or linear."""
    if mode == "exp":
        return np.geomspace(min_lr, max_lr, steps)
    if mode == "linear":
        return np.linspace(min_lr, max_lr, steps)
    raise UsageError(f"mode {mode!r} is unknown: use exp or linear")
