"""Leave-one-family-out: a rule chosen on the other families, scored only on the family left out.

``scores[rule][task]`` is any per-task figure where lower is better (regret, cost to target). For each
family F, the rule with the lowest mean over the tasks of every *other* family is chosen, and its
scores on F's tasks are F's held-out figures. A rule never sees the family it is scored on.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class HeldOut:
    """One family's held-out result: the rule chosen without it, and that rule's scores on it."""

    family: str
    rule: str
    scores: dict[str, float]  # task -> score of the chosen rule

    @property
    def mean(self) -> float:
        return float(np.mean(list(self.scores.values()))) if self.scores else math.nan

    @property
    def worst(self) -> float:
        return float(max(self.scores.values())) if self.scores else math.nan


def select(scores: dict[str, dict[str, float]], family_of: dict[str, str]) -> dict[str, HeldOut]:
    """For each family, the rule with the lowest mean score over the other families' tasks (ties: the
    rule listed first), scored on the family's own tasks."""
    out: dict[str, HeldOut] = {}
    for fam in dict.fromkeys(family_of.values()):
        train = [t for t, f in family_of.items() if f != fam]
        test = [t for t, f in family_of.items() if f == fam]

        def train_mean(rule: str) -> float:
            vals = [scores[rule][t] for t in train if t in scores[rule]]
            return float(np.mean(vals)) if vals else math.inf

        best = min(scores, key=train_mean)
        out[fam] = HeldOut(fam, best, {t: scores[best][t] for t in test if t in scores[best]})
    return out
