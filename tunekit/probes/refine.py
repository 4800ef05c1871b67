"""The refinement of lr_find's suggestion: short real runs of the planned schedule at half decades
around the curve's suggestion, bracketing the best, and that best carried to the planned run's length.

What the runs may cost and how their best carries are :mod:`.short_runs`'s; the runs go through
the same step as the sweep (:class:`~tunekit.probes.sweep.LRSetup`).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable
from typing import Any, Optional

import numpy as np

from tunekit.defaults import MIN_LR_RATIO, SCHEDULE, WARMUP
from tunekit.inputs.data import BatchStream, Data, batch_size_of, dataset_size, hold_out
from tunekit.inputs.task import Task
from tunekit.probes.lr_rules import blowup, bracket_minimum, bracket_next, bracket_polish, prepare
from tunekit.probes.short_runs import (SHORT_CAP, SHORT_LIFT_FROM, SHORT_SHIFT, ShortRuns, from_curve,
                                       from_short_runs, from_two_lengths, passes_divisor)
from tunekit.probes.sweep import LRSetup, blown_up
from tunekit.results import LRFindResult
from tunekit.results.lr_find import Doubt, Refinement, RefineStage, ScoredOn
from tunekit.training.schedule import lr_schedule
from tunekit.training.state import seed_everything_for
from tunekit.training.step import TrainStep, Updates

__all__ = ["short_runner", "refine_suggestion", "carry_to_run", "carry_curve_to_run", "refine_start", "without_scoring_data", "schedule_of",
           "REFINE_RUNS", "REFINE_OFFSETS", "REFINE_EXTENSIONS", "REFINE_EVAL_SAMPLES"]


# The short runs of the refinement: the first bracket, at most three more past its ends, and one
# a quarter decade from the best (four to seven runs).
REFINE_OFFSETS = (-0.5, 0.0, 0.5)  # decades around the starting point


REFINE_EXTENSIONS = 3


REFINE_RUNS = len(REFINE_OFFSETS) + REFINE_EXTENSIONS + 1


REFINE_EVAL_SAMPLES = 2048  # each run's score: its loss on at most this many samples


def without_scoring_data(short: ShortRuns) -> ShortRuns:
    """No short runs for the one-length carry without data to score them on: it was calibrated on runs scored
    on validation data, and runs scored on what they train on reward memorising, doing worse than the curve
    alone (the measurements: benchmarks/data/constants_history.md)."""
    return dataclasses.replace(short, steps=0, why="no val_data: short runs scored on the data they train on reward "
                               "memorising, so the curve's suggestion stands alone (pass val_data, or "
                               "hold_out_share=0.2, to check it with short runs)")


def schedule_of(model: Any, decay: Optional[str] = None) -> tuple[Any, str, float]:
    """(warmup, decay, min_lr_ratio) of the runs the suggestion is for: the task's, else train's defaults; ``decay``
    where the user named the planned run's (``Refine(schedule=...)``)."""
    defaults = model.defaults if isinstance(model, Task) else {}
    return (defaults.get("warmup", WARMUP), decay or defaults.get("schedule", SCHEDULE),
            defaults.get("min_lr_ratio", MIN_LR_RATIO))


def _scoring_split(setup: LRSetup, seed: int, share: float | None) -> tuple[Data, Data, ScoredOn, str]:
    """(what a short run of data order ``seed`` trains on, what scores it, said in words): the validation
    data; else, with ``share``, a slice of the training data drawn by ``seed`` that the run never trains on
    (each seed holds out another, so the runs' mean is scored on more than one slice holds); else the
    training data itself. Scored on what it trains on, a run is rewarded for memorising it; but a held-out
    slice is small and noisy, and the runs train on less (a held-out fifth did worse on small data:
    benchmarks/data/constants_history.md), so holding out is the caller's choice."""
    if setup.val_data is not None:
        return setup.data, setup.val_data, ScoredOn.VAL, "the validation data"
    split = hold_out(setup.data, share, REFINE_EVAL_SAMPLES, seed) if share else None
    if split is None:  # not asked for; or an iterable dataset, a single batch: nothing fixed to hold out
        return setup.data, setup.data, ScoredOn.TRAIN, "the training data it trains on (no val_data given)"
    held = dataset_size(split[1])
    return split[0], split[1], ScoredOn.HELD_OUT, (f"{held} held-out training samples" if held is not None
                                                   else f"{len(split[1])} held-out training batches")


def short_runner(setup: LRSetup, initial: Any, refine_steps: int, seeds: int, steps_bar: Any,
                  hold_out_share: float | None = None) -> tuple[Callable[[float], tuple[float, int]], tuple[ScoredOn, str]]:
    """(``short_run(lr)``, what scores it, and in words): ``seeds`` short runs from the user's objects as they were (data
    orders seed, seed + 1, ...: the same for every LR), their mean score on a fixed subset of the validation
    data (else of a held-out slice of the training data, one per seed: :func:`_scoring_split`): forward
    passes worth at most a quarter of a run's training samples (about 8% of its compute), 2048 at most."""
    batch_size = setup.batch_size
    splits = {s: _scoring_split(setup, s, hold_out_share) for s in range(setup.seed, setup.seed + seeds)}
    data = splits[setup.seed][0]
    per = batch_size or batch_size_of(BatchStream(data, batch_size, seed=setup.seed).take(1)[0]) or 1
    eval_batches = max(1, min(REFINE_EVAL_SAMPLES, refine_steps * setup.accumulation_steps * per // 4) // per)
    schedule = schedule_of(setup.model, setup.schedule)

    def one(lr: float, s: int) -> tuple[float, int]:
        initial.restore()  # every run starts where the user's objects were
        seed_everything_for(s, setup.device)
        train_on, score_on = splits[s][:2]
        return _short_run(setup.make_step(), BatchStream(train_on, batch_size, seed=s),
                          lr_schedule(refine_steps, lr, *schedule), setup.threshold, steps_bar,
                          lambda: setup.mean_loss(score_on, eval_batches), setup.noise)

    def short_run(lr: float) -> tuple[float, int]:
        runs = [one(lr, setup.seed + k) for k in range(seeds)]
        return float(np.mean([v for v, _ in runs])), sum(n for _, n in runs)

    kind, words = splits[setup.seed][2:]
    return short_run, (kind, words + (f" (another slice for each of the {seeds} seeds)"
                                      if seeds > 1 and kind is ScoredOn.HELD_OUT else ""))


def _short_run(step: TrainStep, batches: BatchStream, lrs: np.ndarray, threshold: float, steps_bar: Any,
               score: Callable[[], float], noise: float = 0.0) -> tuple[float, int]:
    """One warmup + cosine run through the shared step: (its score, samples drawn); inf if it diverged
    (beyond ``threshold`` and the sweep's start ``noise``, as the sweep stops)."""
    samples, losses, best = 0, [], math.inf
    loop = Updates(step, batches, lrs.tolist())
    for _, _, out in loop:
        samples += int(out.samples)
        steps_bar.update(1)
        losses.append(out.loss)
        blown, best = blown_up(losses, best, threshold, noise)
        if blown:  # no schedule recovers from this
            break
    steps_bar.update(len(lrs) - len(losses))
    if loop.diverged_at is not None or len(losses) < len(lrs):
        return math.inf, samples
    value = score()
    return (value if math.isfinite(value) else math.inf), samples


def _bracket(start: float, short_run: Callable[[float], tuple[float, int]], most: int = REFINE_RUNS) -> RefineStage:
    """Short runs at half decades around ``start``, extended until a worse run lies on each side of the
    best, then one a quarter decade from the best, ``most`` runs in all: their LRs, scores, samples,
    whether the best was bracketed, and ``best_lr``, the vertex of the parabola through the best and
    its neighbours (None when every run diverged)."""
    step = REFINE_OFFSETS[1] - REFINE_OFFSETS[0]
    scores: dict[float, float] = {}
    samples = 0

    def at(x: float) -> bool:
        """Run the short run at log10 LR ``x`` unless it has run; False when the budget is spent."""
        nonlocal samples
        x = round(x, 6)
        if x not in scores:
            if len(scores) >= most:
                return False
            scores[x], n = short_run(float(10 ** x))
            samples += n
        return True

    # On a fixed lattice of half decades: range tests with other seeds start a little apart and
    # still try the same LRs, so their answers differ by the runs' scores, not by where they began.
    centre = round(math.log10(start) / step) * step
    for off in REFINE_OFFSETS:
        at(centre + off)
    for _ in range(REFINE_EXTENSIONS):
        xs = sorted(scores)
        nxt = bracket_next(xs, [scores[x] for x in xs], step)
        if nxt is None or not at(nxt):
            break
    xs = sorted(scores)
    bracketed = bracket_next(xs, [scores[x] for x in xs], step) is None and math.isfinite(min(scores.values()))
    polish = bracket_polish(xs, [scores[x] for x in xs]) if bracketed else None
    if polish is not None:  # a quarter decade from the best, on its better side: the parabola's vertex is local
        at(polish)
    xs = sorted(scores)
    ys = [scores[x] for x in xs]
    best = float(10 ** bracket_minimum(xs, ys)) if math.isfinite(min(ys)) else None
    return RefineStage(lrs=[float(10 ** x) for x in xs], scores=ys, samples=samples, bracketed=bracketed, best_lr=best)


def refine_suggestion(result: LRFindResult, short_run: Callable[[float], tuple[float, int]],
            longer_run: Callable[[float], tuple[float, int]] | None = None, scored_on: ScoredOn | None = None,
            most: int = REFINE_RUNS, calibrated: bool = False) -> None:
    """Check the curve's suggestion with short real runs around it; the result takes their answer.
    With ``longer_run`` (runs twice as long), a second bracket around the first one's best: the
    refinement's ``lrs``/``scores`` are then the longer runs', ``stages`` holds both."""
    start = refine_start(result)
    if start is None:
        result.doubt(Doubt.NOT_REFINED, "no suggestion to refine: the curve has neither a minimum nor a blow-up")
        return
    stages = [_bracket(start, short_run, most)]
    if longer_run is not None and stages[0].best_lr is not None:
        stages.append(_bracket(stages[0].best_lr, longer_run, most))
    ref = result.refinement = Refinement(start=start, stages=stages, samples=sum(st.samples for st in stages),
                                         bracketed=all(st.bracketed for st in stages),
                                         curve_suggestion=result.suggestion, scored_on=scored_on)
    result.samples += ref.samples
    if ref.best_lr is None:
        result.doubt(Doubt.REFINE_DIVERGED, "every short run of the refinement diverged: the curve's suggestion is kept")
        return
    result.suggestion = ref.best_lr
    # The one-length carry was calibrated on runs at the budget's few LRs, bracketed or not: on the corpus an
    # unbracketed best carried as well as a bracketed one (benchmarks/data/constants_history.md).
    if not ref.bracketed and not calibrated:
        result.doubt(Doubt.AT_EDGE, "the short runs' best is at the edge of the LRs they tried: the suggestion may "
                     "lie beyond it (widen the sweep)")


def carry_to_run(result: LRFindResult, short: ShortRuns, run_steps: int, per_update: float,
                 passes: Optional[float] = None) -> None:
    """The two lengths' bests carried to the planned run's length (one length's best by the corpus's carry, then
    divided for the run's ``passes`` over its data: :func:`~tunekit.probes.short_runs.passes_divisor`);
    the refinement records the lengths and its cost (updates, samples, share) beside the planned run's."""
    ref = result.refinement
    if ref is None:
        return
    stages = ref.stages
    ref.updates = sum(len(st.lrs) * n for st, n in zip(stages, short.lengths)) * short.seeds  # as planned
    ref.at_steps, ref.seeds, ref.run_steps = short.lengths[len(stages) - 1], short.seeds, run_steps
    ref.run_samples, ref.share = int(round(per_update * run_steps)), ref.samples / (per_update * run_steps)
    if len(stages) > 1 and stages[0].best_lr is not None and ref.best_lr is not None:  # the second ran from the first's best
        result.suggestion = from_two_lengths(stages[0].best_lr, ref.best_lr, short.steps, run_steps)
    elif short.calibrated and ref.best_lr is not None:
        # Where the sweep went non-finite before its smoothed loss rose, the LR it stopped at stands in.
        up = blowup(prepare(result.lrs, result.losses)) or result.diverged_at_lr
        result.suggestion = from_short_runs(ref.best_lr, up)
        ref.carried = f"{10 ** SHORT_SHIFT:.2g}x their best, as calibrated on the benchmarks' corpus"
        ref.capped = result.suggestion < ref.best_lr * 10 ** SHORT_SHIFT * (1 - 1e-9)
        past = bool(up) and ref.best_lr > up * 10 ** SHORT_LIFT_FROM  # trained best past the blow-up: the sweep's
        if ref.capped:
            ref.carried = (f"capped at the sweep's blow-up ({up:.3g}) / {10 ** SHORT_CAP:.2g}"
                           f"{', raised as far as their best lay above it' if past else ''}: where the curve and the "
                           "short runs disagree, the suggestion leans below")
        elif past:
            ref.carried += f"; not capped by the sweep's blow-up ({up:.3g}): their best lay far above it"
        ref.passes_divisor = passes_divisor(passes)
        if ref.passes_divisor > 1:
            result.suggestion /= ref.passes_divisor
            ref.carried += f"; divided by {ref.passes_divisor:.2g} for {passes:.1f} passes over the data"
        if not ref.bracketed:
            ref.carried += f"; their best at an edge of the {len(ref.stages[0].lrs)} LRs the budget bought"


def carry_curve_to_run(result: LRFindResult) -> None:
    """The curve's number, where no short runs checked it, carried to the planned run's passes over its data
    (:func:`~tunekit.probes.short_runs.from_curve`); why there were no short runs then says by how much."""
    curve, passes = result.suggestion, result.settings.run_passes
    if curve is None:
        return
    result.suggestion = from_curve(curve, passes)
    if result.suggestion != curve:
        result.settings.not_refined = (f"{result.settings.not_refined}; the curve's {curve:.3g} divided by "
                                       f"{curve / result.suggestion:.2g} for a run of {passes:.1f} passes over its data")


def refine_start(result: LRFindResult) -> float | None:
    """Where the refinement starts: the curve's suggestion when it is confident, else half a decade
    below the point where the sweep came apart (a flat, noisy curve's minimum wanders over decades)."""
    if result.confident and result.suggestion is not None:
        return result.suggestion
    c = prepare(result.lrs, result.losses, family=result.settings.family)
    up = blowup(c)
    if up is not None:
        return float(up / 10 ** 0.5)
    return result.suggestion
