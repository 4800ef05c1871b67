"""What a method spent, and what it had found for it.

A method's run is a dict: ``trials`` (each with ``state``, ``value``, ``samples``, ``updates``,
``seconds``, ``finished``) and its probes' costs (``probe_samples``, ``probe_updates``,
``probe_seconds``), counted first. Costs: ``samples`` (training samples drawn), ``updates``
(optimizer updates) and ``seconds`` (busy device seconds: each trial's and probe's measured time).

Two targets for a task: ``expected`` = 1.02 x the grid's best seed-mean final loss (a configuration as
good as the best LR at the task's own recipe, on average), and ``best_known`` = 1.01 x the best final
loss any method found, frozen the first time it is computed (``freeze``), so later runs cannot move it.
"""

from __future__ import annotations

import json
import math
import statistics
from pathlib import Path
from typing import Any

Run = dict[str, Any]
COSTS = ("samples", "updates", "seconds")
EXPECTED_MARGIN = 1.02
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
