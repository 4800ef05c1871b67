"""A trial's budget in the unit users plan in: samples, tokens, epochs or updates.

Every trial of a search draws the same number of training samples, whatever its
batch: a trial at effective batch B runs ``samples // B`` optimizer updates, and
its warmup and decay span exactly those. (A budget in optimizer updates would
give a batch-256 trial 8 times the data of a batch-32 one, and the search would
drift to large batches because they saw more data, not because they are better.)
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Any, Optional

from tunekit.errors import UsageError

__all__ = ["Budget", "parse_budget", "UNITS"]

UNITS = ("samples", "tokens", "epochs", "updates")
_ALIASES = {"sample": "samples", "samples": "samples", "token": "tokens", "tokens": "tokens",
            "epoch": "epochs", "epochs": "epochs", "update": "updates", "updates": "updates",
            "step": "updates", "steps": "updates"}
_SPEC = re.compile(r"^\s*([0-9]*\.?[0-9]+(?:[eE][+-]?[0-9]+)?)\s*([A-Za-z]*)\s*$")


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
    def samples(self) -> int:
        """Training samples of one full trial."""
        return max(1, int(round(self.amount / self.per_sample)))

    def of(self, samples: float) -> float:
        """``samples`` in this budget's unit."""
        return float(samples) * self.per_sample

    def to_dict(self) -> dict[str, Any]:
        return {"amount": self.amount, "unit": self.unit, "per_sample": self.per_sample, "samples": self.samples}


def parse_budget(spec: Any) -> Optional[tuple[float, str]]:
    """``4000samples``, ``"4000 samples"``, ``2epochs``, ``1e6tokens``, ``200updates`` or a bare number
    (samples) -> (amount, unit); None stays None."""
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
        unit = _ALIASES.get(m.group(2).lower() if m and m.group(2) else "samples") if m else None
        if m is None or unit is None:
            raise UsageError(f"budget {spec!r} is not an amount with a unit ({', '.join(UNITS)}): "
                             "pass e.g. budget=4000samples, 2epochs or 1e6tokens")
        amount = float(m.group(1))
    if not (amount > 0 and math.isfinite(amount)):
        raise UsageError(f"budget must be positive, got {spec!r}: pass e.g. budget=4000samples")
    return amount, unit


def resolve_budget(spec: Any, *, task_batch: int, default_updates: int, dataset_size: Optional[int],
                   tokens_per_sample: Optional[int]) -> Budget:
    """The study's budget for one task: ``spec`` (see :func:`parse_budget`), or one full run of the task's
    default recipe (``default_updates`` updates at its batch) when None."""
    parsed = parse_budget(spec)
    if parsed is None:
        return Budget(float(default_updates * task_batch), "samples")
    amount, unit = parsed
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
