"""Confirmation's settings, each read from one study run with the most of them, and the default chosen held out.

A study run with ``Confirm(top=3, seeds=2)`` holds what every smaller setting would have run: its confirmed
trials are its 3 best of distinct params in value order (so top=k confirms the first k of them), and a
configuration's repeat r trains at ``study seed + 1000 (r + 1)`` whatever ``top`` is (tunekit/hpsearch/confirm.py),
so seeds=1 is repeat 0 alone. :func:`choice` replays tunekit's own rule (``results.confirmation.choose``) on
that subset; top=0 is the search's best trial, its confirmation runs unpaid. Each setting's answer is then
trained again at fresh seeds (harness/retrain.py), and :func:`held_out` picks the default leave-one-family-out:
the setting that reaches the target in expectation most often on the other families (ties: less cost).
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass
from typing import Any, Optional

from tunekit.objective import Objective
from tunekit.results.confirmation import Run as ConfirmRun, choose

Run = dict[str, Any]
COSTS = ("samples", "updates", "seconds")
MOST = (3, 2)  # the setting the study runs: every other is read from it


@dataclass(frozen=True)
class Setting:
    """``Confirm(top, seeds)``; top=0 is off."""

    top: int
    seeds: int

    @property
    def name(self) -> str:
        return "off" if self.top == 0 else f"top{self.top}x{self.seeds}"


SETTINGS = (Setting(0, 0), *(Setting(t, s) for t in range(1, MOST[0] + 1) for s in range(1, MOST[1] + 1)))


@dataclass(frozen=True)
class Choice:
    """What one setting answers in one study: the chosen configuration's original trial, and what the study
    spent for it (probes, search trials and this setting's confirmation runs), in each cost."""

    trial: dict[str, Any]
    cost: dict[str, float]
    confirm_runs: int


def _done(t: dict[str, Any]) -> bool:
    return t["state"] == "COMPLETE" and t["value"] is not None


def _spent(run: Run, trials: list[dict[str, Any]]) -> dict[str, float]:
    return {c: float(run.get(f"probe_{c}", 0) or 0) + sum(float(t.get(c) or 0) for t in trials) for c in COSTS}


def choice(run: Run, setting: Setting) -> Optional[Choice]:
    """``setting``'s answer in ``run`` (a study run with :data:`MOST`); None where no search trial completed."""
    search = [t for t in run["trials"] if t.get("confirm_of") is None]
    repeats = [t for t in run["trials"] if t.get("confirm_of") is not None]
    done = sorted((t for t in search if _done(t)), key=lambda t: (t["value"], t.get("number") or 0))
    if not done:
        return None
    by_number = {t["number"]: t for t in search}
    confirmed = sorted({int(t["confirm_of"]) for t in repeats},
                       key=lambda n: (by_number[n]["value"], n))[:setting.top]
    paid = [t for t in repeats if int(t["confirm_of"]) in confirmed and int(t.get("repeat") or 0) < setting.seeds]
    cost = _spent(run, search + paid)
    if not paid:
        return Choice(done[0], cost, 0)
    runs = [ConfirmRun(n, n, by_number[n]["value"]) for n in confirmed]
    runs += [ConfirmRun(int(t["number"]), int(t["confirm_of"]), t["value"] if _done(t) else None,
                        bool(t.get("diverged")) or not _done(t)) for t in paid]
    picked = choose(runs, Objective("loss"), (int(done[0]["number"]), float(done[0]["value"])))
    return Choice(by_number[picked.chosen] if picked is not None else done[0], cost, len(paid))


def whole(run: Run) -> Optional[Choice]:
    """A study without confirmation (a peer's, an LR-free run): its best trial, and everything it spent."""
    done = sorted((t for t in run["trials"] if _done(t)), key=lambda t: (t["value"], t.get("number") or 0))
    return Choice(done[0], _spent(run, run["trials"]), 0) if done else None


@dataclass(frozen=True)
class Outcome:
    """One setting on one task over its studies: how many answers reach the target in expectation, and the
    median cost to it (a study whose answer misses costs inf)."""

    reached: int
    n: int
    cost: dict[str, float]  # in FTE for samples; updates and device seconds as they are
    spent: dict[str, float]  # the median spend, reached or not (FTE for samples)

    @property
    def share(self) -> float:
        return self.reached / self.n if self.n else math.nan


def outcome(medians: list[Optional[float]], choices: list[Optional[Choice]], target: float, fte: int) -> Outcome:
    """``medians[i]``: study i's answer trained again at fresh seeds (its median); ``choices[i]``: its answer."""
    hits = [m is not None and m <= target for m in medians]
    scale = {"samples": fte, "updates": 1, "seconds": 1}
    cost, spent = {}, {}
    for c in COSTS:
        paid = [ch.cost[c] / scale[c] if ch is not None else math.inf for ch in choices]
        cost[c] = statistics.median([p if h else math.inf for p, h in zip(paid, hits)]) if paid else math.nan
        spent[c] = statistics.median(paid) if paid else math.nan
    return Outcome(sum(hits), len(hits), cost, spent)


@dataclass(frozen=True)
class HeldOutChoice:
    """One family's held-out result: the setting chosen on the other families, and how it did on this one."""

    family: str
    setting: str
    outcome: Outcome


def held_out(outcomes: dict[str, dict[str, Outcome]], family_of: dict[str, str]) -> dict[str, HeldOutChoice]:
    """For each family, the setting with the most reached-in-expectation studies over the other families'
    tasks (ties: the lower mean cost in samples, then the one listed first), scored on the family's own task.
    ``outcomes[setting][task]``."""
    out = {}
    names = list(outcomes)
    for task, fam in family_of.items():
        others = [t for t, f in family_of.items() if f != fam]

        def key(s: str) -> tuple[float, float, int]:
            rows = [outcomes[s][t] for t in others if t in outcomes[s]]
            return (-sum(r.reached for r in rows), statistics.fmean([r.spent["samples"] for r in rows] or [math.inf]),
                    names.index(s))

        best = min(names, key=key)
        if task in outcomes[best]:
            out[fam] = HeldOutChoice(fam, best, outcomes[best][task])
    return out


def chosen_everywhere(outcomes: dict[str, dict[str, Outcome]], family_of: dict[str, str]) -> str:
    """The setting chosen on every family (the default to ship), by the same rule as :func:`held_out`."""
    names = list(outcomes)

    def key(s: str) -> tuple[float, float, int]:
        rows = [outcomes[s][t] for t in family_of if t in outcomes[s]]
        return (-sum(r.reached for r in rows), statistics.fmean([r.spent["samples"] for r in rows] or [math.inf]),
                names.index(s))

    return min(names, key=key)
