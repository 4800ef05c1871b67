"""What the refinement of a range test may spend, and how its answer carries to the planned run.

Pure functions: the refinement's short runs are sized from the run the user plans (its length in
optimizer updates) and the share of that run they may cost; their best LR, found at the short
runs' length, is carried to the planned length by a power law in the run's length.

The constants are chosen by ``benchmarks/lr_horizon.py`` (leave one task out): see its report.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Optional

__all__ = ["RefinePlan", "plan_refinement", "at_horizon", "DEFAULT_RUN_STEPS", "REFINE_SHARE", "MIN_REFINE_STEPS",
           "HORIZON_EXPONENT"]

# A model in hand comes with no recipe: its planned run, when the caller does not say, is one of
# a typical real length (a Task's recipe, or train's default, gives a Task's).
DEFAULT_RUN_STEPS = 10_000
# The refinement's cost as a share of the planned run's updates (the range test's sweep aside).
REFINE_SHARE = 0.05
# Below this many updates a short warmup + cosine run says little about a long one: no refinement.
MIN_REFINE_STEPS = 30
# Two seeds per LR once each run can be this long: a longer run first, then less noise.
TWO_SEEDS_FROM = 50
# The best peak LR falls with the run's length as (N / H) ** -HORIZON_EXPONENT.
HORIZON_EXPONENT = 0.0


@dataclass(frozen=True)
class RefinePlan:
    """The refinement's short runs: ``steps`` updates each, ``seeds`` per LR, at most ``runs`` LRs;
    ``steps == 0`` when the budget buys no useful run (the curve's suggestion alone). ``why`` says so."""

    steps: int
    seeds: int
    runs: int
    budget: int  # updates the refinement may spend: share x run_steps
    why: str

    @property
    def refines(self) -> bool:
        return self.steps > 0

    @property
    def most_updates(self) -> int:
        """The refinement's cost in updates when it runs all of its LRs."""
        return self.steps * self.seeds * self.runs


def plan_refinement(run_steps: int, share: float, runs: int, steps: Optional[int] = None,
                    seeds: Optional[int] = None) -> RefinePlan:
    """The short runs a refinement of at most ``runs`` LRs can buy with ``share`` of a ``run_steps``-update
    run: as long as the budget allows (never longer than the run itself), a second seed per LR once runs
    reach ``TWO_SEEDS_FROM`` updates; none when a run would be shorter than ``MIN_REFINE_STEPS``.
    ``steps`` / ``seeds``, when given, are the caller's choice and are taken as they are."""
    budget = int(share * run_steps)
    if steps is not None:
        return RefinePlan(steps, seeds or 2, runs, budget, "the short runs' length as given")
    if seeds is None:
        seeds = 2 if budget // (2 * runs) >= TWO_SEEDS_FROM else 1
    length = min(budget // (seeds * runs), run_steps)
    if length < MIN_REFINE_STEPS:
        return RefinePlan(0, seeds, runs, budget,
                          f"{_pct(share)} of a {run_steps:,}-update run ({budget:,} updates) cannot buy {runs} short "
                          f"runs of {MIN_REFINE_STEPS} updates: the curve's suggestion alone (refine_share= buys more)")
    return RefinePlan(length, seeds, runs, budget, f"{_pct(share)} of a {run_steps:,}-update run")


def at_horizon(lr: float, steps: int, run_steps: int, exponent: float = HORIZON_EXPONENT) -> float:
    """The peak LR for a ``run_steps``-update run, from the best one for ``steps``-update runs:
    ``lr * (run_steps / steps) ** -exponent`` (no change for a run no longer than the short ones)."""
    if run_steps <= steps or exponent == 0:
        return lr
    return float(lr * math.exp(-exponent * math.log(run_steps / steps)))


def _pct(share: float) -> str:
    return f"{100 * share:g}%"
