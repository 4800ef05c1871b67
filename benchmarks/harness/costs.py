"""What a method spent, and what it had found for it.

A method's run is a dict: ``trials`` (each with ``state``, ``value``, ``samples``, ``updates``,
``seconds``, ``finished``) and its probes' costs (``probe_samples``, ``probe_updates``,
``probe_seconds``), counted first. Costs: ``samples`` (training samples drawn), ``updates``
(optimizer updates) and ``seconds`` (busy device seconds: each trial's and probe's measured time).

Two targets for a task: ``expected`` (:class:`Target`) = L* + 2% of the learnable loss (L_untrained - L*),
with L* the median final loss over 10 seeds at the grid's best LR and L_untrained the untrained model's
median loss over the same seeds (a configuration as good as the best LR at the task's own recipe, in
expectation; a raw 1.02 x L* forgives 0.6% of the learnable loss on one task and 14% on another), and
``best_known`` = 1.01 x the best final loss any method found, frozen the first time it is computed
(``freeze``), so later runs cannot move it.
"""

from __future__ import annotations

import json
import math
import statistics
from dataclasses import dataclass
from pathlib import Path
from typing import Any

Run = dict[str, Any]
COSTS = ("samples", "updates", "seconds")
EXPECTED_SHARE = 0.02  # the expected target's margin: this share of the learnable loss above L*
BEST_KNOWN_MARGIN = 1.01
ANYTIME = (2, 4, 8, 16)  # full-trial equivalents


def completion_order(trials: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return sorted(trials, key=lambda t: (t.get("finished") is None, t.get("finished") or 0.0, t.get("number") or 0))


def to_target(run: Run, target: float, cost: str = "samples") -> float:
    """``cost`` spent, probes first, until the first completed trial at or below ``target``; inf if none;
    nan where a run predates the cost."""
    if any(cost not in t for t in run["trials"]):
        return math.nan
    spent = float(run.get(f"probe_{cost}", 0) or 0)
    for t in completion_order(run["trials"]):
        spent += t[cost]
        if t["state"] == "COMPLETE" and t["value"] is not None and t["value"] <= target:
            return float(spent)
    return math.inf


def spent(run: Run, cost: str = "samples") -> float:
    if any(cost not in t for t in run["trials"]):
        return math.nan
    return float(run.get(f"probe_{cost}", 0) or 0) + sum(t[cost] for t in run["trials"])


def best_value(run: Run) -> float:
    return min((t["value"] for t in run["trials"] if t["state"] == "COMPLETE" and t["value"] is not None),
               default=math.inf)


def best_after(run: Run, samples: float) -> float:
    """The best completed trial's value once ``samples`` have been spent (probes first); inf if none yet."""
    used = float(run.get("probe_samples", 0) or 0)
    best = math.inf
    for t in completion_order(run["trials"]):
        used += t["samples"]
        if used > samples:
            break
        if t["state"] == "COMPLETE" and t["value"] is not None:
            best = min(best, t["value"])
    return best


def anytime(runs: list[Run], fte: int, points: tuple[int, ...] = ANYTIME) -> dict[int, float]:
    """Median over runs of the best final loss after k full-trial equivalents of samples."""
    return {k: median([best_after(r, k * fte) for r in runs]) for k in points}


def median(xs: list[float]) -> float:
    """The median; inf where most values are inf (a method that missed in most seeds)."""
    return statistics.median(xs) if xs else math.nan


def freeze(path: Path, name: str, value: float) -> float:
    """The value stored under ``name`` in ``path``, or ``value`` stored there now (once: a frozen target)."""
    data = json.loads(path.read_text()) if path.exists() else {}
    if name not in data:
        data[name] = value
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(data, indent=1, sort_keys=True) + "\n")
    return float(data[name])


@dataclass(frozen=True)
class Target:
    """The expected target of one task, and whether one run's seed noise is larger than its margin."""

    l_star: float  # the median final loss over the seeds at the grid's best LR
    untrained: float  # the untrained model's median validation loss over the same seeds
    seed_iqr: float  # the interquartile range of those seeds' final losses at the best LR
    seed_sd: float  # their standard deviation

    @classmethod
    def of(cls, at_best: tuple[float, ...], untrained_at: tuple[float, ...]) -> "Target":
        """From a grid window's seeds at its best LR and its untrained losses at the same seeds."""
        if not at_best or not untrained_at:
            raise ValueError("a target needs the seeds' final losses at the best LR and their untrained losses: "
                             "run benchmarks.harness.grid.window again")
        q = statistics.quantiles(at_best, n=4, method="inclusive") if len(at_best) > 1 else [at_best[0]] * 3
        return cls(statistics.median(at_best), statistics.median(untrained_at), q[2] - q[0],
                   statistics.stdev(at_best) if len(at_best) > 1 else math.nan)

    @property
    def margin(self) -> float:
        """How far above L* the target sits: EXPECTED_SHARE of the learnable loss."""
        return EXPECTED_SHARE * (self.untrained - self.l_star)

    @property
    def value(self) -> float:
        return self.l_star + self.margin

    @property
    def noisy(self) -> bool:
        """One run's seed noise (the seeds' interquartile range at the best LR) exceeds the margin: a single
        run says little of whether a configuration reaches the target."""
        return self.seed_iqr > self.margin
