"""A trial's budget in the unit users plan in: samples, tokens, epochs, updates or device time.

Every trial of a search draws the same number of training samples, whatever its
batch: a trial at effective batch B runs ``samples // B`` optimizer updates, and
its warmup and decay span exactly those. (A budget in optimizer updates would
give a batch-256 trial 8 times the data of a batch-32 one, and the search would
drift to large batches because they saw more data, not because they are better.)

A budget in device time (``10min``) is what a GPU user pays: a trial at batch B runs as many
updates as the probe's step-time curve says fit in that time at B (see
:mod:`tunekit.results.step_time`), so a batch that wastes the device's parallelism buys fewer
samples. Its ``per_sample`` is the seconds one sample costs at the task's own batch, set once
the probe has timed it.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Any, Optional

from tunekit.hpsearch.plan import MIN_UPDATES
from tunekit.errors import HintedWarning, UsageError

__all__ = ["Budget", "BudgetWarning", "parse_budget", "parse_duration", "resolve_budget", "price_budget", "UNITS"]

UNITS = ("samples", "tokens", "epochs", "updates", "seconds")
_ALIASES = {"sample": "samples", "samples": "samples", "token": "tokens", "tokens": "tokens",
            "epoch": "epochs", "epochs": "epochs", "update": "updates", "updates": "updates",
            "step": "updates", "steps": "updates"}
# Device time, in seconds: 90s, 10min, 1.5h.
_TIME = {**dict.fromkeys(("s", "sec", "secs", "second", "seconds"), 1.0),
         **dict.fromkeys(("m", "min", "mins", "minute", "minutes"), 60.0),
         **dict.fromkeys(("h", "hr", "hrs", "hour", "hours"), 3600.0)}
_SPEC = re.compile(r"^\s*([0-9]*\.?[0-9]+(?:[eE][+-]?[0-9]+)?)\s*([A-Za-z]*)\s*$")


class BudgetWarning(HintedWarning):
    """A budget too small for what a search spends on it (its probes, a trial's schedule), said before it runs."""


@dataclass(frozen=True)
class Budget:
    """``amount`` of ``unit`` per full trial, and what that is in samples for one task.

    ``per_sample`` is how many units one training sample is worth: 1 for
    samples, the tokens in a sample for tokens, 1/N for epochs of N samples,
    1/B for updates at the task's own effective batch B (so "200 updates" is
    200 updates at the task's batch, and a trial at another batch runs as many
    samples as that).
    """

    amount: float
    unit: str = "samples"
    per_sample: float = 1.0

    @property
    def priced(self) -> bool:
        """False for a budget in device time before the probe has timed the task's step."""
        return self.per_sample > 0

    @property
    def seconds(self) -> Optional[float]:
        """One full trial's device time, for a budget in device time (None otherwise)."""
        return self.amount if self.unit == "seconds" else None

    @property
    def samples(self) -> int:
        """Training samples of one full trial (at the task's own batch, for a budget in device time)."""
        if not self.priced:
            raise ValueError("a budget in device time has no samples until the probe has timed a step")
        return max(1, int(round(self.amount / self.per_sample)))

    def of(self, samples: float) -> float:
        """``samples`` in this budget's unit."""
        return float(samples) * self.per_sample

    def to_dict(self) -> dict[str, Any]:
        out = {"amount": self.amount, "unit": self.unit, "per_sample": self.per_sample}
        return out | {"samples": self.samples} if self.priced else out


def parse_budget(spec: Any) -> Optional[tuple[float, str]]:
    """``4000samples``, ``"4000 samples"``, ``2epochs``, ``1e6tokens``, ``200updates``, ``10min`` (device
    time: s, min or h) or a bare number (samples) -> (amount, unit), time in seconds; None stays None."""
    if spec is None:
        return None
    if isinstance(spec, Budget):
        return spec.amount, spec.unit
    if isinstance(spec, bool):
        raise UsageError(f"budget must be an amount with a unit, got {spec!r}: pass e.g. budget=4000samples")
    if isinstance(spec, (int, float)):
        amount, unit = float(spec), "samples"
    else:
        m = _SPEC.match(str(spec))
        word = (m.group(2).lower() or "samples") if m else ""
        unit = "seconds" if word in _TIME else _ALIASES.get(word)
        if m is None or unit is None:
            raise UsageError(f"budget {spec!r} is not an amount with a unit ({', '.join(UNITS)}; time as s, min "
                             "or h): pass e.g. budget=4000samples, 2epochs, 1e6tokens or 10min")
        amount = float(m.group(1)) * _TIME.get(word, 1.0)
    if not (amount > 0 and math.isfinite(amount)):
        raise UsageError(f"budget must be positive, got {spec!r}: pass e.g. budget=4000samples")
    return amount, unit


def parse_duration(spec: Any, name: str) -> Optional[float]:
    """A device time (``90s``, ``10min``, ``2h``; a bare number is seconds) -> seconds; None stays None."""
    if spec is None:
        return None
    if isinstance(spec, (int, float)) and not isinstance(spec, bool):
        spec = f"{spec}s"
    try:
        parsed = parse_budget(spec)
    except UsageError:
        parsed = None
    if parsed is None or parsed[1] != "seconds":
        raise UsageError(f"{name} must be a device time, got {spec!r}: pass e.g. {name}=2h, 30min or 90s")
    return parsed[0]


def resolve_budget(spec: Any, *, task_batch: int, default_updates: int, dataset_size: Optional[int],
                   tokens_per_sample: Optional[int]) -> Budget:
    """The study's budget for one task: ``spec`` (see :func:`parse_budget`), or one full run of the task's
    default recipe (``default_updates`` updates at its batch) when None. A budget in device time comes
    back unpriced (:func:`price_budget` prices it once the probe has timed a step)."""
    parsed = parse_budget(spec)
    if parsed is None:
        return Budget(float(default_updates * task_batch), "samples")
    amount, unit = parsed
    if unit == "seconds":
        return Budget(amount, unit, 0.0)
    if unit == "samples":
        return Budget(amount, unit)
    if unit == "updates":
        return Budget(amount, unit, 1.0 / task_batch)
    if unit == "epochs":
        if not dataset_size:
            raise UsageError("a budget in epochs needs a training set of known size: give the budget in samples")
        return Budget(amount, unit, 1.0 / dataset_size)
    if not tokens_per_sample:
        raise UsageError("a budget in tokens needs batches of token ids, shape (batch, sequence): "
                         "give the budget in samples")
    return Budget(amount, unit, float(tokens_per_sample))


def price_budget(budget: Budget, seconds_per_update: Optional[float], task_batch: int,
                 steps_seconds: Optional[float] = None) -> Budget:
    """A budget in device time with its price per sample at the task's effective batch ``task_batch``,
    from the seconds one update takes there and ``steps_seconds``, what a trial's updates may spend of it
    (default all: :func:`~tunekit.hpsearch.plan.steps_seconds` takes its evaluations off): a full trial's
    samples are what its updates buy; other budgets as they are."""
    if budget.unit != "seconds":
        return budget
    if not seconds_per_update or not (seconds_per_update > 0 and math.isfinite(seconds_per_update)):
        raise UsageError(f"budget {budget.amount:g}s is device time, and the probe timed no step to price it: "
                         "give the budget in samples, or a probe result that has throughput points")
    steps = budget.amount if steps_seconds is None else steps_seconds
    if steps < seconds_per_update:
        off = budget.amount - steps
        raise UsageError(f"budget {budget.amount:g}s is device time, and a trial's evaluations take about {off:.3g}s "
                         f"of it (the probe's timed validation batch), leaving no update: give a budget of at least "
                         f"{off + MIN_UPDATES * seconds_per_update:.3g}s, or fewer evaluations a trial (the pruner's "
                         "evals): pass e.g. evals=4")
    return Budget(budget.amount, "seconds", budget.amount / (steps / seconds_per_update * task_batch))
