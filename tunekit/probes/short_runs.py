"""What the refinement of a range test may spend, and how its answer carries to the planned run.

Pure functions: the refinement's short runs are sized from the run the user plans (its length in
optimizer updates) and the share of that run they may cost; their best LRs at two lengths, H and 2H,
are carried to the planned length by how the best moved between them.

The two lengths' constants were chosen leaving one task out; a planned run too short for two lengths
gets up to ``SHORT_RUNS`` short runs of one length, whose carry is chosen
leave-one-family-out on the corpus (``benchmarks/lr_carry.py``). The measurements behind the
constants: ``benchmarks/data/constants_history.md``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Optional

from tunekit.defaults import REFINE_SHARE, RUN_STEPS_IN_HAND

__all__ = ["ShortRuns", "short_runs_for", "from_two_lengths", "from_short_runs", "DEFAULT_RUN_STEPS", "REFINE_SHARE",
           "TWO_LENGTHS_FROM", "SATURATION", "MOST_CARRIED", "SHORT_STEPS", "SHORT_RUNS", "SHORT_SHIFT", "SHORT_CAP",
           "SHORT_LIFT", "SHORT_LIFT_FROM", "CURVE_PASSES", "from_curve", "SHORT_PASSES_FROM", "SHORT_PASSES",
           "SHORT_PASSES_MOST", "passes_divisor"]

# A model in hand whose data has no length, and no run_steps given: a run of this many updates
# (tunekit.defaults; data with a length: RUN_EPOCHS_IN_HAND epochs of it).
DEFAULT_RUN_STEPS = RUN_STEPS_IN_HAND
# Runs at two lengths, H and 2H, from this H: how the best LR moves from H to 2H says where it settles
# (a single length is biased by its length, either way).
TWO_LENGTHS_FROM = 15
# A second seed per LR only once runs are this long: a short run's bias outweighs its noise.
TWO_SEEDS_FROM = 200
# One length (the caller's refine_steps) is not carried: a power law in the run's length did worse.
# Two lengths: log10 of the best LR approaches its limit as (N / H) ** -SATURATION; 1 spread least over seeds
# among those near the lowest regret on the long-horizon tasks.
SATURATION = 1.0
# How far from the longer runs' best the limit may be put, in decades: two noisy bests can say anything
# (half a decade had the lowest held-out regret of the four tried).
MOST_CARRIED = 0.5
# A planned run too short for two lengths may spend up to SHORT_RUNS short runs of SHORT_STEPS updates more
# (3 or more of them: the bracket, one run past its better end, the polish; with the bracket's three alone, a
# best at its edge jumped half a decade from seed to seed), their best moved SHORT_SHIFT decades, never above the
# sweep's blow-up / 10**SHORT_CAP: the carry chosen on the corpus (benchmarks/lr_carry.py, held out family by
# family; why the shift stayed when five runs came: benchmarks/data/constants_history.md).
SHORT_STEPS = 33
SHORT_RUNS = 5
SHORT_SHIFT = -0.125
SHORT_CAP = 0.5
# Where the short runs' best lies over SHORT_LIFT_FROM decades above the blow-up, the cap rises SHORT_LIFT
# decades per decade beyond: those runs trained best where the rising sweep came apart, so the blow-up was the
# sweep's, not the run's (a long SGD run: the capped suggestion was 20-30x low). It starts beyond the short runs'
# lattice noise and rises continuously, so a best near the blow-up does not flip the suggestion from seed to
# seed (chosen in benchmarks/lr_carry.py; benchmarks/data/constants_history.md).
SHORT_LIFT_FROM = 0.25
SHORT_LIFT = 2.0
# Where no short runs check the curve's number, it is carried to a planned run of P passes over its data by
# dividing it by P**CURVE_PASSES: many passes favour a lower LR than a sweep over a few batches sees (chosen
# leave-one-family-out on the corpus's curve suggestions: 0.2 on 7 of 9 families; on the 10-seed truth since,
# small data left out chooses 0.1 and most others 0.3: benchmarks/data/constants_history.md).
CURVE_PASSES = 0.2
# Where short runs did check it, their carried number is divided by (P / SHORT_PASSES_FROM) ** SHORT_PASSES for a
# planned run of P > SHORT_PASSES_FROM passes over its data: 33-update runs see a pass or two, and a run that goes
# over small data many times trains best lower (the MLPs on small tables: 4-6x high at 10-12 passes). Never by more
# than 10**SHORT_PASSES_MOST, the most the corpus measured (12 passes): beyond it the rule is unmeasured (chosen
# leave-one-family-out, 7 of 9 families; benchmarks/corpus_lr.py's short-run passes table).
SHORT_PASSES_FROM = 2.0
SHORT_PASSES = 0.5
SHORT_PASSES_MOST = 0.4


@dataclass(frozen=True)
class ShortRuns:
    """The refinement's short runs: ``steps`` updates each (then ``long_steps``, twice as many, when the
    budget buys two lengths), ``seeds`` per LR, at most ``runs`` LRs at each length; ``steps == 0`` when
    the budget buys no useful run (the curve's suggestion alone). ``why`` says which, in words."""

    steps: int
    seeds: int
    runs: int
    budget: int  # updates the refinement may spend: share x run_steps (or SHORT_RUNS x SHORT_STEPS, calibrated)
    why: str
    long_steps: int = 0
    calibrated: bool = False  # one length, carried by from_short_runs

    @property
    def refines(self) -> bool:
        return self.steps > 0

    @property
    def lengths(self) -> tuple[int, ...]:
        return (self.steps, self.long_steps) if self.long_steps else (self.steps,) if self.steps else ()

    @property
    def most_updates(self) -> int:
        """The refinement's cost in updates when it runs all of its LRs."""
        return sum(self.lengths) * self.seeds * self.runs


def short_runs_for(run_steps: int, share: float, runs: int, steps: Optional[int] = None,
                   seeds: Optional[int] = None) -> ShortRuns:
    """The short runs ``share`` of a ``run_steps``-update run buys for a refinement of at most ``runs`` LRs
    per length: runs at two lengths, H and 2H, as long as the budget allows (never longer than the run
    itself); when H would be under ``TWO_LENGTHS_FROM``, up to ``SHORT_RUNS`` runs of ``SHORT_STEPS`` updates
    (more where the share buys more), carried by :func:`from_short_runs`;
    a second seed per LR from ``TWO_SEEDS_FROM`` updates. ``steps`` / ``seeds``, when given, are the
    caller's, taken as they are (one length, whatever it costs, not carried)."""
    budget = int(share * run_steps)
    if steps is not None:
        return ShortRuns(steps, seeds or 2, runs, budget, "the short runs' length as given")
    pick = seeds or (2 if budget // (6 * runs) >= TWO_SEEDS_FROM else 1)  # two seeds only for runs that long
    length = min(budget // (3 * pick * runs), run_steps // 2)
    how = f"{_pct(share)} of a {run_steps:,}-update run"
    if length >= TWO_LENGTHS_FROM:
        return ShortRuns(length, pick, runs, budget, how, long_steps=2 * length)
    spend = max(budget, min(SHORT_RUNS * SHORT_STEPS, run_steps))  # never more than the run's own updates
    n = min(runs, spend // SHORT_STEPS)
    if n >= 3 and run_steps >= 2 * SHORT_STEPS:
        return ShortRuns(SHORT_STEPS, 1, n, spend,
                         f"{how} cannot buy runs at two lengths: up to {n} short runs of {SHORT_STEPS} updates "
                         f"({spend:,} updates{'' if spend > budget else ', ' + how}), their best carried "
                         "to the planned run as calibrated on the benchmarks' corpus", calibrated=True)
    least = math.ceil(100 * 3 * runs * TWO_LENGTHS_FROM / run_steps) / 100
    # A share over 1 would spend more than the planned run itself on choosing its LR: not worth offering.
    buys = (f"refine_share={least:g} buys them" if least <= 1 else
            f"they would cost {least:.2g}x the planned run itself")
    return ShortRuns(0, pick, runs, budget,
                     f"{how} ({budget:,} updates) cannot buy {runs} short runs of {TWO_LENGTHS_FROM} and "
                     f"{2 * TWO_LENGTHS_FROM} updates: the curve's suggestion alone ({buys})")


def from_two_lengths(lr_short: float, lr_long: float, steps: int, run_steps: int,
                     saturation: float = SATURATION) -> float:
    """The peak LR for a ``run_steps``-update run from the best LRs of runs of ``steps`` and ``2 * steps``
    updates: log10 of the best LR moves towards a limit as (length) ** -saturation, so the move from
    ``steps`` to ``2 * steps`` says how much of the way is left (the limit at most ``MOST_CARRIED`` decades
    from ``lr_long``). Short runs favour LRs that learn fast, long runs the ones that end low: the move can go
    either way."""
    x1, x2 = math.log10(lr_short), math.log10(lr_long)
    limit = x1 - (x1 - x2) / (1 - 2 ** -saturation)
    limit = min(max(limit, x2 - MOST_CARRIED), x2 + MOST_CARRIED)
    if run_steps <= 2 * steps:
        return lr_long
    return float(10 ** (limit + (x2 - limit) * (2 * steps / run_steps) ** saturation))


def from_short_runs(best: float, blowup: Optional[float]) -> float:
    """The peak LR for the planned run from the best of ``SHORT_STEPS``-update runs: ``SHORT_SHIFT`` decades
    from it (short runs favour LRs that learn fast), and never above the sweep's ``blowup`` / 10**SHORT_CAP:
    where the two disagree, the suggestion leans below. A best over ``SHORT_LIFT_FROM`` decades above the blow-up
    raises the cap ``SHORT_LIFT`` decades per decade beyond: the short runs trained past it, so it was the sweep's."""
    lr = best * 10 ** SHORT_SHIFT
    if not blowup:
        return float(lr)
    over = max(1.0, best / (blowup * 10 ** SHORT_LIFT_FROM))
    return float(min(lr, blowup / 10 ** SHORT_CAP * over ** SHORT_LIFT))


def passes_divisor(passes: Optional[float], start: float = SHORT_PASSES_FROM, rate: float = SHORT_PASSES,
                   most: float = SHORT_PASSES_MOST) -> float:
    """What the short runs' carried number is divided by for a planned run of ``passes`` passes over its data:
    (passes / ``start``) ** ``rate``, at least 1 and at most 10 ** ``most``; 1 where ``passes`` is unknown."""
    if not passes or passes <= start:
        return 1.0
    return float(min((passes / start) ** rate, 10 ** most))


def from_curve(suggestion: float, passes: Optional[float]) -> float:
    """The curve's suggestion carried to a planned run of ``passes`` passes over its data (None, or one pass or
    less: as it is): divided by ``passes ** CURVE_PASSES``."""
    if not passes or passes <= 1:
        return float(suggestion)
    return float(suggestion / passes ** CURVE_PASSES)


def _pct(share: float) -> str:
    return f"{100 * share:g}%"
