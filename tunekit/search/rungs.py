"""Early stopping's rungs, in training samples: asynchronous successive halving (ASHA).

A trial reports its validation loss at fixed fractions of its own budget, in
samples seen; at a rung it goes on only if it is in the best 1/rf of the trials
that reached that rung (Optuna's ``SuccessiveHalvingPruner``, on both backends).
Trials at different batches reach a rung after the same amount of data, and at
the same point of their own warmup + decay schedule.
"""

from __future__ import annotations

import math
from typing import Any, Optional

from ..errors import UsageError

__all__ = ["ladder", "make_pruner", "default_rungs"]


def default_rungs(trials: int, reduction_factor: int) -> int:
    """As many rungs as leave at least one trial expected to finish: floor(log_rf(trials)), at least 1.

    Chosen on benchmarks/search_efficiency.py (see the README); with 24 trials
    and rf 3 that is two rungs, at 1/9 and 1/3 of the budget.
    """
    return max(1, int(math.log(max(trials, 1)) / math.log(reduction_factor) + 1e-9))


def ladder(budget_samples: int, trials: int, reduction_factor: int = 3, evals: int = 8,
           rungs: Optional[int] = None, first_rung: Optional[float] = None) -> list[int]:
    """The rungs, in samples: ``budget / rf**k, ..., budget / rf`` (``k`` = ``rungs``), or from ``first_rung``
    (a fraction of the budget) up by factors of rf. No rung comes before the first evaluation.

    Each rung is a multiple of the budget's share per evaluation (``budget // evals``), the
    points trials report at, so every trial meets a rung at the same samples."""
    if first_rung is not None and not 0 < first_rung < 1:
        raise UsageError(f"first_rung must be a fraction of the budget in (0, 1), got {first_rung!r}: pass e.g. 0.1")
    k = rungs if rungs is not None else default_rungs(trials, reduction_factor)
    start = first_rung if first_rung is not None else reduction_factor ** -k
    unit = budget_samples // evals
    first = max(1, int(math.ceil(start * evals - 1e-9)))  # in evaluations
    out: list[int] = []
    at = first
    while at < evals:
        out.append(at * unit)
        at *= reduction_factor
    return out


def make_pruner(rungs: list[int], reduction_factor: int, prune: bool) -> Any:
    import optuna

    if not prune or not rungs:
        return optuna.pruners.NopPruner()
    return optuna.pruners.SuccessiveHalvingPruner(min_resource=rungs[0], reduction_factor=reduction_factor)
