"""A cooldown branch: where a run would be if its LR decayed now, measured and then undone.

A run whose LR has not decayed yet has a loss that lags the run it will become (a high LR more so),
so ranking trials by their raw loss part-way favours low LRs (short-horizon bias, Wu et al. 2018).
A constant LR followed by a short linear cooldown matches a cosine run at the same point (Hägele et
al. 2024), so the loss after a cooldown is a value comparable across LRs and schedules.

The branch trains through the run's own :class:`~tunekit.training.step.TrainStep` (nothing else
trains): ``fraction`` x the updates made so far, the LR falling linearly from the last update's LR
towards 0, on batches of its own stream (seeded from the run's seed and the update, so a branch is
the same each time). Everything it touches (weights, gradients, optimizer, GradScaler, every RNG and
the training data's generators) is put back exactly afterwards: the run goes on as if no branch ran.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Optional

from tunekit.errors import check_number
from tunekit.inputs.data import BatchStream
from tunekit.training.state import preserved
from tunekit.training.step import Updates

__all__ = ["Cooldown", "BranchResult", "cooldown_lrs", "run_cooldown", "branch_seed", "PREFIX"]

# The prefix of a branch's metrics among an evaluation's (``cooldown_loss`` beside ``loss``).
PREFIX = "cooldown_"


@dataclass(frozen=True)
class Cooldown:
    """A cooldown branch at the evaluations after the updates in ``at``: ``fraction`` of the updates so far."""

    fraction: float
    at: frozenset[int] = frozenset()

    def __post_init__(self) -> None:
        check_number("cooldown fraction", self.fraction, positive=True, maximum=1, hint="pass e.g. 0.1")

    def updates(self, so_far: int) -> int:
        """The branch's updates after ``so_far`` updates of the run: at least one."""
        return max(1, int(round(self.fraction * so_far)))


@dataclass
class BranchResult:
    """What a branch measured and what it cost (its updates and samples, beyond the run's)."""

    metrics: dict[str, float]
    updates: int
    samples: int

    def prefixed(self) -> dict[str, float]:
        """Its metrics, with its cost, under :data:`PREFIX` (to travel beside the run's own metrics)."""
        out = {PREFIX + k: float(v) for k, v in self.metrics.items()}
        out[PREFIX + "updates"], out[PREFIX + "samples"] = float(self.updates), float(self.samples)
        return out


def cooldown_lrs(lr: float, updates: int) -> list[float]:
    """``updates`` LRs falling linearly from ``lr`` towards 0 (the last is ``lr / updates``, never 0)."""
    return [lr * (1.0 - i / updates) for i in range(updates)]


def run_cooldown(step: Any, data: Any, batch_size: Optional[int], seed: int, lr: float, updates: int,
                 measure: Callable[[], dict[str, float]]) -> BranchResult:
    """Train ``updates`` cooldown updates from ``lr`` through ``step``, ``measure()`` the model, then put back
    everything the branch touched. A branch that diverges measures ``inf`` (a loss no trial is kept for)."""
    with preserved(step.model, step.optimizer, step.scaler, data=data):
        loop = Updates(step, BatchStream(data, batch_size, seed=seed), cooldown_lrs(lr, updates))
        done = samples = 0
        for _, _, out in loop:
            done += 1
            samples += out.samples
        metrics = {"loss": math.inf} if loop.diverged_at is not None else measure()
    return BranchResult(metrics, done, samples)


def branch_seed(seed: int, update: int) -> int:
    """The branch's data order: from the run's seed and where it branches, never the run's own stream."""
    return (seed * 1_000_003 + update + 1) % (2**63)
