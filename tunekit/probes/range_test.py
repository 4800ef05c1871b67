"""The LR range test: sweep the LR up over N updates of the shared step, read the curve.

``tunekit.lr_find(task)`` tests a fresh model of a task.
``tunekit.lr_find(model, train_data, loss_fn, optimizer)`` tests objects in hand
and puts them back exactly as they were afterwards (see :mod:`tunekit.training.state`).
"""

from __future__ import annotations

import math
import time
import warnings
from typing import Any

import numpy as np
import torch
from torch import nn

from tunekit.defaults import RUN_EPOCHS_IN_HAND, RUN_STEPS, SWEEP_STEPS
from tunekit.entry_options import Refine, StepSettings, Sweep
from tunekit.errors import CLIP_HINT, UsageError, check_int, check_number
from tunekit.inputs.data import Data, batches_per_epoch, dataset_size
from tunekit.inputs.task import ComputeLoss, LossFn, Task
from tunekit.integrations.task_spec import takes_their_objects
from tunekit.option_fields import grouped_keywords
from tunekit.probes.refine import (REFINE_RUNS, carry_curve_to_run, carry_to_run, refine_suggestion, schedule_of,
                                   short_runner, without_scoring_data)
from tunekit.probes.short_runs import DEFAULT_RUN_STEPS, SHORT_SHIFT, ShortRuns, short_runs_for
from tunekit.probes.lr_rules import interval, prepare
from tunekit.probes.resolve import resolve_inputs, step_settings
from tunekit.probes.sweep import LRSetup, curve_result, sweeps
from tunekit.progress import bar
from tunekit.results import LRFindResult
from tunekit.results.lr_find import LRFindSettings, ScoredOn
from tunekit.training.optimizers import optimizer_family
from tunekit.training.schedule import sweep_lrs
from tunekit.training.state import preserved
from tunekit.training.step import make_scaler

__all__ = ["lr_find"]


def _check_args(min_lr: float, max_lr: float, sweep_steps: int, mode: str, repeats: int | None, diverge_threshold: float,
                batch_size: int | None, accumulation_steps: int, clip_grad_norm: float | None) -> None:
    if batch_size is not None:
        check_int("batch_size", batch_size, hint="pass e.g. batch_size=32")
    check_int("accumulation_steps", accumulation_steps, hint="pass e.g. accumulation_steps=2")
    if clip_grad_norm is not None:
        check_number("clip_grad_norm", clip_grad_norm, positive=True, hint=CLIP_HINT)
    check_number("min_lr", min_lr, positive=True, hint="pass e.g. min_lr=1e-6")
    check_number("max_lr", max_lr, positive=True, hint="pass e.g. max_lr=10")
    if min_lr >= max_lr:
        raise UsageError(f"min_lr {min_lr:g} must be below max_lr {max_lr:g}: pass e.g. min_lr=1e-7 max_lr=10")
    check_int("sweep_steps", sweep_steps, 10, hint=f"the curve needs points: pass e.g. sweep_steps={SWEEP_STEPS}")
    if mode not in ("exp", "linear"):
        raise UsageError(f"mode {mode!r} is unknown: use exp (the default) or linear")
    if repeats is not None:
        check_int("repeats", repeats, hint="pass e.g. repeats=3")
    check_number("diverge_threshold", diverge_threshold, above=1, hint="a multiple of the best loss: pass e.g. diverge_threshold=4")


@grouped_keywords(sweep=Sweep, refine=Refine, step=StepSettings)
@takes_their_objects
def lr_find(
    model: nn.Module | Task, train_data: Data | None = None, loss_fn: LossFn | None = None, optimizer: Any = None,
    *, compute_loss: ComputeLoss | None = None, val_data: Data | None = None,
    sweep: Sweep = Sweep(), refine: Refine = Refine(), step: StepSettings = StepSettings(),
    run_steps: int | None = None, seed: int = 0, progress: bool | None = None,
) -> LRFindResult:
    """Run an LR range test and suggest a peak LR for a run of ``run_steps`` updates on its schedule.

    The LR rises over ``sweep_steps`` optimizer updates of the step training runs (its clipping,
    accumulation and precision: the task's recipe, else :mod:`tunekit.defaults`); then, with ``refine``,
    short real runs around the curve's suggestion check it, costing at most ``Refine.share`` of the
    planned run, or up to ``SHORT_RUNS`` short runs where that share buys no useful run (the curve alone can
    be far off: benchmarks/data/constants_history.md). A model in hand, its
    optimizer, the scaler and the RNG states are restored bitwise when the test ends, also on an
    exception or Ctrl-C. ``samples`` counts every training sample drawn.

    Args:
        sweep, refine, step: the settings, one object each (:mod:`tunekit.entry_options`); 0.1's flat
            keywords (``min_lr=``, ``refine_share=``, ``device=``, ...) still work for a release.
        model: a :class:`Task` (a fresh model is built) or a model in hand with ``train_data``, ``loss_fn``
            (or ``compute_loss``) and ``optimizer`` (an instance, whose state is kept, or a factory; AdamW by default).
        sweep: ``min_lr``, ``max_lr``, ``sweep_steps``, ``mode``: the sweep, exponential (or ``"linear"``) over ``sweep_steps`` updates
            (0.1.0's ``steps=``); a step the fp16 scaler skips is not counted.
        sweep.diverge_threshold: the sweep stops when the loss is non-finite, or exceeds this many times its best and
            by more than :data:`~tunekit.probes.lr_rules.NOISE_MARGIN` times its noise at the sweep's start
            (``noise`` in the result): a heavy-tailed loss's spikes are not divergence.
        step.clip_grad_norm: None disables clipping (a model in hand is clipped at the default unless told):
            an unclipped sweep "diverges" well below what a clipped run takes.
        sweep.loss_on, sweep.val_batches: with ``"val"``, each point is the loss on the first ``val_batches`` batches of ``val_data``.
        run_steps: the planned run's updates (default: a Task's ``defaults["max_steps"]``, else ``train``'s;
            a model in hand :data:`tunekit.defaults.RUN_EPOCHS_IN_HAND` epochs of its data, said in the result).
        refine.schedule: the planned run's decay after its warmup, one of :data:`tunekit.defaults.DECAYS` (default:
            a Task's ``defaults["schedule"]``, as a Trainer's ``lr_scheduler_type`` sets it, else cosine): the short
            runs train on it, so the suggestion is for it (a constant LR's best peak is lower than a decay's).
        refine: short runs of the planned schedule at half decades around the curve's suggestion,
            up to 7 LRs, until a worse run lies on each side of the best (its parabola's vertex): at two lengths,
            H and 2H, where the share buys H >= 15 updates, carried by how the best moved
            (:func:`~tunekit.probes.short_runs.from_two_lengths`); else up to ``SHORT_RUNS`` runs of
            ``SHORT_STEPS`` updates, carried as calibrated on the corpus
            (:func:`~tunekit.probes.short_runs.from_short_runs`;
            none without ``val_data`` or ``hold_out_share``); else the curve alone, and the result says why.
        refine.steps, refine.seeds: one length and seeds per LR instead, whatever it costs.
        refine.hold_out_share: without ``val_data``, score each run on this share of the training data held out of it
            (else on at most 2048 training samples it trained on).
    """
    start = time.perf_counter()  # the call's time, the model's and data's making included
    min_lr, max_lr, sweep_steps, mode = sweep.min_lr, sweep.max_lr, sweep.sweep_steps, sweep.mode
    repeats, diverge_threshold, loss_on, val_batches = sweep.repeats, sweep.diverge_threshold, sweep.loss_on, sweep.val_batches
    refine_share, refine_steps, refine_seeds, hold_out_share = refine.share, refine.steps, refine.seeds, refine.hold_out_share
    batch_size, device, scaler = step.batch_size, step.device, step.scaler
    # The step's settings resolved as train resolves them, and every value checked before any work.
    clip_grad_norm, accumulation_steps, precision = step_settings(model, step.clip_grad_norm, step.accumulation_steps,
                                                                  step.precision)
    _check_args(min_lr, max_lr, sweep_steps, mode, repeats, diverge_threshold, batch_size, accumulation_steps, clip_grad_norm)
    _check_refine(run_steps, refine_share, refine_steps, refine_seeds, hold_out_share)
    schedule = refine.schedule
    # What is tested: a Task's fresh model, or the user's objects (put back as they were at the end).
    sub = resolve_inputs("lr_find", model, train_data, loss_fn, optimizer, compute_loss=compute_loss,
                          val_data=val_data, batch_size=batch_size, precision=precision, device=device, seed=seed)
    _check_loss_on(loss_on, sub.val_data)
    run_steps, run_from = planned_run(model, run_steps, sub.data, sub.batch_size, accumulation_steps)
    short, repeats = _short_runs_and_sweeps(refine, run_steps, sub.val_data is not None, repeats)
    setup = LRSetup(model, sub.model, sub.optimizer, sub.compute, sub.data, sub.val_data, sub.device, sub.precision,
                   sub.batch_size, accumulation_steps, clip_grad_norm,
                   scaler if scaler is not None else make_scaler(sub.precision, sub.device), seed, diverge_threshold,
                   schedule=schedule)
    settings = _settings(setup, sub.task.name, min_lr=min_lr, max_lr=max_lr, sweep_steps=sweep_steps, mode=mode, repeats=repeats,
                         loss_on=loss_on, short=short)
    _say_family(settings)
    settings.run_steps, settings.run_steps_from, settings.refine_share = run_steps, run_from, refine_share
    settings.refine_reason, settings.run_schedule = short.why if short is not None else None, _schedule_words(model, schedule)

    result = _test_and_refine(setup, settings, sweep_lrs(min_lr, max_lr, sweep_steps, mode), repeats,
                              val_batches if loss_on == "val" else None, short, hold_out_share, progress)
    ref = result.refinement
    reach = ref.best_lr * 10 ** SHORT_SHIFT / ref.passes_divisor if ref is not None and ref.capped else None
    result.interval = interval(result.suggestion, curve=prepare(result.lrs, result.losses, family=settings.family),
                               confident=result.confident and result.checked, reach=reach)
    result.seconds = time.perf_counter() - start
    return result


def _short_runs_and_sweeps(refine: Refine, run_steps: int, scored: bool, repeats: int | None) -> tuple[ShortRuns | None, int]:
    """(the short runs the planned run buys, if any; how many sweeps): one sweep unless the caller says, two where
    the short runs have no data to be scored on (``scored``: validation data; or a held-out share)."""
    short = (short_runs_for(run_steps, refine.share, REFINE_RUNS, refine.steps, refine.seeds)
             if refine.enabled else None)
    if short is not None and short.calibrated and not scored and not refine.hold_out_share:
        short = without_scoring_data(short)
        # What the short runs would have cost buys a second sweep: the median of two cut the suggestion's
        # seed-to-seed spread on the corpus's small-data family from 0.28 to 0.18 decades
        # (benchmarks/data/constants_history.md).
        repeats = 2 if repeats is None else repeats
    return short, 1 if repeats is None else repeats


def _test_and_refine(setup: LRSetup, settings: LRFindSettings, lrs: np.ndarray, repeats: int, val_batches: int | None,
                     short: ShortRuns | None, hold_out_share: float | None, progress: bool | None) -> LRFindResult:
    """The sweeps, their curve's suggestion, then the short runs it buys, all from the user's objects
    as they were (put back at the end, also on an exception)."""
    total = len(lrs) * repeats + (short.most_updates if short is not None and short.refines else 0)
    with bar(total, "lr-find", "step", progress) as steps_bar, \
            preserved(setup.user_model, setup.optimizer, setup.scaler, setup.data) as initial:
        # The range test: ``repeats`` sweeps of the LR, each from the same weights and optimizer state.
        runs = sweeps(setup, initial, lrs, repeats, val_batches, steps_bar)
        setup.noise = runs[0]["noise"]
        result = curve_result(runs, settings, 0.0)
        result.settings.run_samples = int(round(_samples_per_update(setup, runs) * int(settings.run_steps or 0)))
        size = dataset_size(setup.data)
        result.settings.run_passes = result.settings.run_samples / size if size else None
        # Then short real runs around the curve's suggestion: the curve alone can be off by 25x.
        if short is not None and short.refines:
            short_run, scored_on = short_runner(setup, initial, short.steps, short.seeds, steps_bar, hold_out_share)
            if short.calibrated and scored_on[0] is ScoredOn.TRAIN:  # hold_out_share could not split this data
                steps_bar.update(short.most_updates)
                short = without_scoring_data(short)
        if short is not None and short.refines:
            result.settings.refine_scored_on = scored_on[1]
            longer_run = (short_runner(setup, initial, short.long_steps, short.seeds, steps_bar, hold_out_share)[0]
                          if short.long_steps else None)
            refine_suggestion(result, short_run, longer_run, scored_on[0], most=short.runs, calibrated=short.calibrated)
            carry_to_run(result, short, int(settings.run_steps or 0), _samples_per_update(setup, runs),
                         result.settings.run_passes)
        elif short is not None:
            result.settings.not_refined = short.why
    if short is not None and not short.refines:  # the curve's number is the answer for the planned run
        carry_curve_to_run(result)
    return result


def _check_refine(run_steps: int | None, share: float, refine_steps: int | None, refine_seeds: int | None,
                  hold_out_share: float | None) -> None:
    if run_steps is not None:
        check_int("run_steps", run_steps, hint="the updates of the run you plan: pass e.g. run_steps=10000")
    check_number("refine_share", share, positive=True, hint="a share of the planned run: pass e.g. refine_share=0.05")
    if refine_steps is not None:
        check_int("refine_steps", refine_steps, 10, hint="a short run needs updates: pass e.g. refine_steps=100")
    if refine_seeds is not None:
        check_int("refine_seeds", refine_seeds, hint="pass e.g. refine_seeds=2")
    if hold_out_share is not None:
        check_number("hold_out_share", hold_out_share, above=0, below=1, hint="a fraction: pass e.g. hold_out_share=0.2")


def planned_run(model: Any, run_steps: int | None, data: Data | None = None, batch_size: int | None = None,
                accumulation: int = 1) -> tuple[int, str]:
    """(the planned run's updates, where that number came from): as given; else a Task's recipe
    (its ``max_steps``, else ``train``'s default); else, for a model in hand, ``RUN_EPOCHS_IN_HAND``
    epochs of its ``data`` at its batch, or ``DEFAULT_RUN_STEPS`` for data of no known length."""
    if run_steps is not None:
        return int(run_steps), "given"
    if isinstance(model, Task):
        steps = model.defaults.get("max_steps")
        return (int(steps), "the task's recipe") if steps else (RUN_STEPS, "train's default")
    per = batches_per_epoch(data, batch_size) if data is not None else None
    if per is None:
        return DEFAULT_RUN_STEPS, "the default for a model in hand whose data has no length; pass run_steps="
    return (max(1, math.ceil(RUN_EPOCHS_IN_HAND * per / max(1, accumulation))),
            f"{RUN_EPOCHS_IN_HAND} epochs of the data, the default for a model in hand; pass run_steps= for yours")


def _check_loss_on(loss_on: str, val_data: Data | None) -> None:
    if loss_on not in ("train", "val"):
        raise UsageError(f"loss_on must be 'train' or 'val', got {loss_on!r}")
    if loss_on == "val" and val_data is None:
        raise UsageError("loss_on='val' needs validation data: pass val_data=... (or give the task val_data)")


def _settings(setup: LRSetup, task: str, *, min_lr: float, max_lr: float, sweep_steps: int, mode: str, repeats: int,
              loss_on: str, short: ShortRuns | None) -> LRFindSettings:
    """The settings the result records, as resolved (the task's defaults and the device filled in)."""
    return LRFindSettings(min_lr=min_lr, max_lr=max_lr, sweep_steps=sweep_steps, mode=mode, batch_size=setup.batch_size,
                accumulation_steps=setup.accumulation_steps, precision=setup.precision,
                clip_grad_norm=setup.clip_grad_norm, device=str(setup.device), seed=setup.seed, repeats=repeats,
                diverge_threshold=setup.threshold, loss_on=loss_on, task=task,
                optimizer=type(setup.optimizer).__name__, family=optimizer_family(setup.optimizer), refine=short is not None,
                refine_steps=short.steps if short is not None and short.refines else None,
                refine_lengths=list(short.lengths) if short is not None else None,
                refine_seeds=short.seeds if short is not None and short.refines else None)


def _say_family(settings: LRFindSettings) -> None:
    """An optimizer the rules do not know (they know SGD-like and Adam-like ones): said, not guessed silently."""
    if settings.family == "other":
        warnings.warn(f"the optimizer {settings.optimizer} is neither SGD-like nor Adam-like to the LR rules: the "
                      "curve's suggestion is the middle of their two; the short runs (refine=True) check it", stacklevel=3)


def _schedule_words(model: Any, schedule: str | None) -> str:
    """The planned run's schedule as the result says it: "warmup + cosine", "linear-decay", ..."""
    warmup, decay, _ = schedule_of(model, schedule)
    words = {"cosine": "cosine", "linear": "linear-decay", "constant": "constant-LR",
             "wsd": "stable-then-decay"}.get(decay, decay)
    return f"warmup + {words}" if warmup else words


def _samples_per_update(setup: LRSetup, runs: list[dict[str, Any]]) -> float:
    """Training samples one update draws: the batch times accumulation, else as the first sweep drew them."""
    if setup.batch_size:
        return float(setup.batch_size * setup.accumulation_steps)
    return runs[0]["samples"] / max(1, len(runs[0]["lrs"]))


