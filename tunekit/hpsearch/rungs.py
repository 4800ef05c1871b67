"""Early stopping's rungs, in training samples: asynchronous successive halving (ASHA).

A trial reports its validation loss at the k-th of ``evals`` evaluations as
k x budget / evals samples, whatever its batch; at a rung it goes on only if it
is in the best 1 / rf of the trials that reached that rung (the rule of ASHA,
Li et al. 2020, and of Optuna's ``SuccessiveHalvingPruner``). The same pruner
decides on both backends (the Ray backend's scheduler asks it).

Where the first rung goes matters more than how many there are: a rung placed
before trials have started to learn ranks them by noise, or by how fast they
start rather than where they end (short-horizon bias, Wu et al. 2018). So by
default the first rung waits for the first completed trial's evidence: the
first evaluation at which that trial's validation loss had covered half of its
drop from its initial loss to its final one. Later rungs follow by factors of rf. With
``Halving(rung_value="cooldown")`` a trial reports a cooldown branch's value at the ladder's rungs (:func:`branch_plan`).
"""

from __future__ import annotations

# Imported where used, not at the top: optuna; importing this module does not pay for them.
import math
from collections.abc import Sequence
from typing import Any, Optional

from tunekit.errors import UsageError
from tunekit.hpsearch.keys import CONFIRM_OF, FINAL_STEP, INITIAL_LOSS
from tunekit.hpsearch.options import Halving, Pruner
from tunekit.objective import Objective

__all__ = ["ladder", "default_rungs", "make_pruner", "branch_plan", "Rungs", "learning_point", "LEARNED"]

# The share of its drop a trial has covered where it has "started to learn".
LEARNED = 0.5
# Values within this fraction of the cut at a rung are ties, and go on. One configuration's
# validation loss, trained from 4 seeds (init and data order), had a relative spread at each of
# its 8 evaluations of 0.5-1.2% on charlm and 1.8-26% on shapes and the tests' MLPs (train,
# 120 updates, CPU): a cut finer than 1% ranks trials by noise on every one of them.
TIE = 0.01


def default_rungs(trials: int, reduction_factor: int) -> int:
    """As many rungs as leave at least rf trials expected to finish (trials / rf**k >= rf): none
    below rf**2 trials (9 at rf 3), where a rung would leave fewer than rf to compare.

    On benchmarks/search_efficiency.py one rung (24 trials, rf 3) and two reached their targets
    as often and as fast (see the README); one leaves a search more complete trials to compare.
    """
    return max(0, int(math.log(max(trials, 1)) / math.log(reduction_factor) + 1e-9) - 1)


def ladder(budget_samples: int, trials: int, reduction_factor: int = 3, evals: int = 8,
           rungs: Optional[int] = None, first_rung: Optional[float] = None) -> list[int]:
    """The fixed ladder, in evaluations: ``budget / rf**k, ..., budget / rf`` (``k`` = ``rungs``), or from
    ``first_rung`` (a fraction of the budget) up by factors of rf. None before the first evaluation."""
    if first_rung is not None and not 0 < first_rung < 1:
        raise UsageError(f"first_rung must be a fraction of the budget in (0, 1), got {first_rung!r}: pass e.g. first_rung=0.1")
    k = rungs if rungs is not None else default_rungs(trials, reduction_factor)
    start = first_rung if first_rung is not None else reduction_factor ** -k
    at = max(1, int(math.ceil(start * evals - 1e-9)))
    out: list[int] = []
    while at < evals:
        out.append(at)
        at *= reduction_factor
    return out


def learning_point(curve: list[tuple[int, float]], initial: float, final: float, evals: int) -> Optional[int]:
    """The first evaluation (1-based) at which the loss had covered ``LEARNED`` of its drop from ``initial``
    to ``final``; None when it did not fall."""
    drop = initial - final
    if not (math.isfinite(drop) and drop > 0):
        return None
    for k, (_, value) in enumerate(curve[:evals], start=1):
        if math.isfinite(value) and initial - value >= LEARNED * drop:
            return k
    return None


class Rungs:
    """An Optuna pruner (``optuna.pruners.BasePruner``): successive halving at fixed points in samples.

    ``unit`` is the samples per evaluation, ``ladder`` the rungs in evaluations. With
    ``adaptive``, no trial is stopped before one has completed, and rungs before the
    completed trial's :func:`learning_point` are dropped (when all are, that point is
    the one rung). Each decision reads only the study's intermediate values, so it is
    the same on resume, on Ray, and for the same trials in the same order.
    """

    def __init__(self, unit: int, evals: int, ladder_evals: list[int], reduction_factor: int, adaptive: bool = True,
                 direction: str = "minimize") -> None:
        self.unit, self.evals, self.ladder, self.rf, self.adaptive = unit, evals, list(ladder_evals), reduction_factor, adaptive
        # Values are compared as sign * value, lower better, whichever way the objective goes.
        self.sign = Objective.of_direction(direction).sign

    def rungs(self, study: Any) -> list[int]:
        """The rungs in force, in evaluations."""
        if not self.adaptive:
            return self.ladder
        import optuna

        done = study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.COMPLETE,))
        if not done:
            return []
        first = min(done, key=lambda t: t.number)
        final = first.user_attrs.get(FINAL_STEP)  # the final value: not an evaluation along the way
        curve = sorted((s, self.sign * v) for s, v in first.intermediate_values.items() if s != final)
        initial = self.sign * float(first.user_attrs.get(INITIAL_LOSS, math.nan))  # recorded for the loss alone
        point = learning_point(curve, initial, self.sign * float(first.value), self.evals)
        if point is None:
            return self.ladder
        kept = [r for r in self.ladder if r >= point]
        return kept or ([point] if point < self.evals else [])

    def prune(self, study: Any, trial: Any) -> bool:
        """Whether ``trial`` stops at its latest report.

        It is judged at a rung once, at its first report at or after the rung: a trial that was past
        a rung before the rung existed (trials in flight while the first one completed, on Ray or
        in a shared study) is not judged there afterwards, and a trial at its last report, its
        budget spent, is never stopped: pruning it would save nothing and throw its run away. A confirmation
        run is never stopped: it is judged at the full budget, beside the trial it runs again."""
        step = trial.last_step
        if step is None or trial.user_attrs.get(CONFIRM_OF) is not None:
            return False
        if math.isnan(trial.intermediate_values[step]):
            return True
        if step >= self.unit * self.evals:
            return False
        others = study.get_trials(deepcopy=False)
        for rung in self.rungs(study):
            at = rung * self.unit
            if step < at:
                return False
            if min(s for s in trial.intermediate_values if s >= at) != step:
                continue  # judged at this rung already, or past it before the rung existed
            mine = _value_at(trial, at, self.sign)
            competing = [v for t in others if t.number != trial.number and (v := _value_at(t, at, self.sign)) is not None]
            if mine is not None and not _promotable(mine, competing + [mine], self.rf):
                return True
        return False


def _value_at(trial: Any, at: int, sign: float = 1.0) -> Optional[float]:
    """The trial's value at its first report at or after ``at`` samples, times ``sign`` (lower better)."""
    steps = [s for s in trial.intermediate_values if s >= at]
    if not steps:
        return None
    v = sign * trial.intermediate_values[min(steps)]
    return v if math.isfinite(v) else math.inf


def _promotable(value: float, competing: list[float], rf: int) -> bool:
    """In the best 1/rf of the competing values (itself included), or within :data:`TIE` of the
    cut; while fewer than rf have reached the rung, only the best goes on (Optuna's rule for
    asynchronous halving)."""
    k = max(0, len(competing) // rf - 1)
    cut = sorted(competing)[k]
    return value <= cut + TIE * abs(cut)


def halving(pruner: Pruner, trials: int, budget_samples: int, prune: bool, direction: str,
            kept: Optional[Sequence[int]] = None) -> tuple[list[int], Any]:
    """The rungs, in evaluations, and the pruner over them: successive halving on samples seen, adaptive
    unless the rungs were given. ``kept``: the rungs the study began with (a resume or a joining worker
    keeps them), else this run's ladder; without pruning the study still keeps the ladder halving would use."""
    h = pruner if isinstance(pruner, Halving) else Halving(evals=pruner.evals)
    rungs = list(kept) if kept is not None else ladder(budget_samples, trials, h.reduction_factor, h.evals, h.rungs,
                                                       h.first_rung)
    return rungs, make_pruner(budget_samples // h.evals, h.evals, rungs, h.reduction_factor, prune,
                              adaptive=h.rungs is None and h.first_rung is None, direction=direction)


def branch_plan(pruner: Pruner, trials: int, budget_samples: int, prune: bool) -> tuple[Optional[float], list[int]]:
    """(the cooldown share, the evaluations a trial branches at) where rungs compare cooldown values, else
    (None, []). A trial branches at every rung of the fixed ladder (the adaptive rungs are among them; where
    the adaptive rule falls back to a rung off the ladder, every trial reports its raw value there, so a rung
    still compares like with like), whatever the study holds when it runs: the value is the same on every backend."""
    if not prune or not isinstance(pruner, Halving) or pruner.rung_value != "cooldown":
        return None, []
    return float(pruner.rung_cooldown), ladder(budget_samples, trials, pruner.reduction_factor, pruner.evals,
                                               pruner.rungs, pruner.first_rung)


def make_pruner(unit: int, evals: int, ladder_evals: list[int], reduction_factor: int, prune: bool,
                adaptive: bool, direction: str = "minimize") -> Any:
    import optuna

    if not prune or not ladder_evals:
        return optuna.pruners.NopPruner()

    class _Pruner(Rungs, optuna.pruners.BasePruner):  # Optuna's public pruner interface
        pass

    return _Pruner(unit, evals, ladder_evals, reduction_factor, adaptive, direction)
