"""The confirmation of a search's best trials: each run again at fresh seeds, the configuration chosen by its mean.

A study's best single value is the least of many noisy runs, partly a good configuration and partly a
lucky seed. With ``Confirm(top=3, seeds=2)`` the 3 best complete trials each run twice more with the same
params at other seeds; :func:`choose` picks the configuration whose runs have the best mean, and says how
much the best single value overstated it. Pure: it reads runs, not a study.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass, field
from typing import Optional

from tunekit.objective import Objective
from tunekit.results.base import Record

__all__ = ["Run", "ConfirmedConfig", "Confirmation", "choose", "shortfall"]


@dataclass(frozen=True)
class Run:
    """One finished run of a confirmed configuration: the original trial or one of its repeats."""

    number: int  # the trial
    of: int  # the original trial whose params it runs (itself for the original)
    value: Optional[float]  # None unless it completed
    diverged: bool = False
    weights: Optional[str] = None  # its kept weights file, where it has one


@dataclass
class ConfirmedConfig(Record):
    """A configuration the search ran again: its original trial, all its runs' trial numbers and values."""

    trial: int  # the original trial
    runs: list[int] = field(default_factory=list)  # the original first, then its repeats that completed
    values: list[float] = field(default_factory=list)  # their values, in the same order
    mean: Optional[float] = None  # the mean of ``values`` (None: none completed)
    diverged: int = 0  # repeats that diverged: such a configuration is chosen only if every one has some


@dataclass
class Confirmation(Record):
    """What confirmation found: the configuration chosen by its mean, each confirmed one's values, and how much
    the best single value overstated the chosen configuration's mean (in the objective's units, better-ward)."""

    chosen: int  # the original trial of the chosen configuration (its params and config are the answer)
    mean: float  # the chosen configuration's mean value over its runs: the search's best_value
    best_single: float  # the study's best single trial's value
    best_single_trial: int
    overstated: float  # how much better best_single is than mean (0 when the best trial was confirmed as well)
    configurations: list[ConfirmedConfig] = field(default_factory=list)
    done: bool = True  # False: some repeats had not run when the result was taken (interrupted, time limit)
    kept: Optional[int] = None  # the run of the chosen configuration whose weights are kept, where one is

    def __post_init__(self) -> None:  # a dict given (from search.json) becomes its record
        self.configurations = [ConfirmedConfig.of(c) for c in self.configurations]  # type: ignore[misc]

    def lines(self, name: str) -> list[str]:
        """What the table says of it: each confirmed configuration's values and mean, the one chosen, and by
        how much the best single value overstated it."""
        out = []
        for c in self.configurations:
            values = ", ".join(f"{v:.4f}" for v in c.values) or "-"
            mean = "-" if c.mean is None else f"{c.mean:.4f}"
            mark = "  <- chosen" if c.trial == self.chosen else ""
            bad = f" ({c.diverged} diverged)" if c.diverged else ""
            out.append(f"confirmed trial {c.trial}: {name} {values} over runs {', '.join(map(str, c.runs))}; "
                       f"mean {mean}{bad}{mark}")
        pending = "" if self.done else " (not every repeat ran: the search stopped first)"
        out.append(f"chosen by its mean: trial {self.chosen}'s configuration, {name} {self.mean:.4f}; the best single "
                   f"trial ({self.best_single_trial}, {self.best_single:.4f}) overstated it by {self.overstated:.4f}"
                   f"{pending}")
        return out


def choose(runs: list[Run], objective: Objective, best_single: Optional[tuple[int, float]],
           done: bool = True) -> Optional[Confirmation]:
    """The configuration with the best mean over its complete runs (a configuration with a diverged repeat only
    when all have one; ties: the lower trial number); None without a repeat among ``runs``. ``best_single``:
    the study's best complete trial, as (number, value)."""
    groups: dict[int, list[Run]] = {}
    for r in sorted(runs, key=lambda r: (r.of, r.number != r.of, r.number)):
        groups.setdefault(r.of, []).append(r)
    if not any(r.number != r.of for r in runs) or best_single is None:
        return None
    configs = []
    for of, rs in sorted(groups.items()):
        done_runs = [r for r in rs if r.value is not None]
        values = [float(r.value) for r in done_runs]  # type: ignore[arg-type]
        configs.append(ConfirmedConfig(of, [r.number for r in done_runs], values,
                                       statistics.fmean(values) if values else None, sum(r.diverged for r in rs)))
    # Those that ran again (a search stopped before a configuration's repeats leaves it its single value).
    ranked = [c for c in configs if c.mean is not None and len(c.runs) > 1] or [c for c in configs if c.mean is not None]
    if not ranked:
        return None
    steady = [c for c in ranked if not c.diverged] or ranked
    chosen = min(steady, key=lambda c: (objective.sign * c.mean, c.trial))  # type: ignore[operator]
    number, value = best_single
    kept = [r for r in groups[chosen.trial] if r.value is not None and r.weights]
    keep = min(kept, key=lambda r: (objective.sign * r.value, r.number)) if kept else None  # type: ignore[operator]
    assert chosen.mean is not None
    return Confirmation(chosen.trial, chosen.mean, float(value), int(number),
                        max(0.0, objective.sign * (chosen.mean - float(value))), configs, done,
                        keep.number if keep is not None else None)


def shortfall(top: int, seeds: int, confirmed: Optional[int], ran: int, limit_reached: bool) -> Optional[str]:
    """What a result says where confirmation was asked for and fewer of its runs ran than asked (None: all
    ran, or none was asked). ``confirmed``: the trials chosen to run again (None: the search stopped before
    choosing them); ``ran``: the confirmation runs that finished; ``limit_reached``: the study's time limit
    stopped it (the runs are the study's trials, paid from its time limit like any)."""
    if top <= 0:
        return None
    asked = (top if confirmed is None else confirmed) * seeds
    if ran >= asked:
        return None
    why = "the study's time limit was reached first" if limit_reached else "the search stopped first"
    if ran == 0:
        return (f"confirmation (top={top}, seeds={seeds}): none of its {asked} runs ran ({why}): the answer is the "
                "best single trial, unconfirmed")
    return (f"confirmation (top={top}, seeds={seeds}): {ran} of its {asked} runs ran ({why}): the answer is chosen "
            "among the configurations that ran again")
