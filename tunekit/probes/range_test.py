"""The LR range test: sweep the LR up over N updates of the shared step, read the curve.

``tunekit.lr_find(task)`` tests a fresh model of a task.
``tunekit.lr_find(model, train_data, loss_fn, optimizer)`` tests objects in hand
and puts them back exactly as they were afterwards (see :mod:`tunekit.training.state`).
"""

from __future__ import annotations

import dataclasses
import math
import time
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np
import torch
from torch import nn

from tunekit.inputs.data import BatchStream, Data, batch_size_of, batches_per_epoch, dataset_size, hold_out
from tunekit.defaults import DIVERGE_THRESHOLD, MIN_LR_RATIO, REFINE_SHARE, RUN_EPOCHS_IN_HAND, RUN_STEPS, SCHEDULE, SWEEP_STEPS, WARMUP
from tunekit.errors import CLIP_HINT, UsageError, check_int, check_number, renamed_keywords
from tunekit.option_fields import grouped_keywords
from tunekit.results import LRFindResult
from tunekit.results.lr_find import Doubt, LRFindSettings, Refinement, RefineStage, ScoredOn
from tunekit.training.schedule import lr_schedule, sweep_lrs
from tunekit.progress import bar
from tunekit.training.state import preserved, seed_everything_for
from tunekit.training.step import TrainStep, Updates, make_scaler
from tunekit.probes.lr_rules import (DEFAULT_RULE, NOISE_MARGIN, NOISE_POINTS, RULES, assess, blowup, bracket_minimum,
                                     bracket_next, bracket_polish, prepare, start_noise)
from tunekit.probes.refine_plan import (DEFAULT_RUN_STEPS, SHORT_CAP, SHORT_SHIFT, RefinePlan,
                                        from_short_runs, from_two_lengths, plan_refinement)
from tunekit.entry_options import Refine, StepSettings, Sweep
from tunekit.probes.resolve import TASK_DEFAULT, resolve_inputs, step_settings
from tunekit.precision import Precision
from tunekit.inputs.task import ComputeLoss, LossFn, Task
from tunekit.training.loop import evaluate
from tunekit.integrations.task_spec import takes_their_objects

__all__ = ["lr_find", "LRFindResult", "TASK_DEFAULT", "optimizer_family", "SWEEP_STEPS"]



_ADAPTIVE = (torch.optim.Adam, torch.optim.AdamW, torch.optim.RMSprop, torch.optim.Adagrad, torch.optim.Adadelta,
             torch.optim.Adamax, torch.optim.NAdam, torch.optim.RAdam)


# Second-moment optimizers of other packages, by class name (tunekit imports neither): Hugging Face's
# Adafactor (optim="adafactor") and bitsandbytes' 8-bit and paged Adams (optim="adamw_bnb_8bit", ...).
_ADAPTIVE_NAMES = frozenset({"Adafactor", "Adam8bit", "AdamW8bit", "Adam32bit", "AdamW32bit", "PagedAdam",
                             "PagedAdamW", "PagedAdam8bit", "PagedAdamW8bit", "PagedAdamW32bit", "LAMB", "LAMB8bit"})


def optimizer_family(optimizer: torch.optim.Optimizer) -> str:
    """"sgd" (plain, momentum or Nesterov), "adaptive" (per-parameter second-moment scaling: Adam, AdamW,
    RMSprop, Adagrad, Adafactor...) or "other". The rules read it: the two families sit differently
    against the curve."""
    if isinstance(optimizer, torch.optim.SGD):
        return "sgd"
    if isinstance(optimizer, _ADAPTIVE) or type(optimizer).__name__ in _ADAPTIVE_NAMES or (
            hasattr(torch.optim, "Adafactor") and isinstance(optimizer, torch.optim.Adafactor)):
        return "adaptive"
    return "other"


def _check_args(min_lr: float, max_lr: float, sweep_steps: int, mode: str, repeats: int, diverge_threshold: float,
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
    check_int("repeats", repeats, hint="pass e.g. repeats=3")
    check_number("diverge_threshold", diverge_threshold, above=1, hint="a multiple of the best loss: pass e.g. diverge_threshold=4")


@renamed_keywords(steps="sweep_steps")
@grouped_keywords(sweep=Sweep, refine=Refine, step=StepSettings)
@takes_their_objects
def lr_find(
    model: nn.Module | Task, train_data: Data | None = None, loss_fn: LossFn | None = None, optimizer: Any = None,
    *, compute_loss: ComputeLoss | None = None, val_data: Data | None = None,
    sweep: Sweep = Sweep(), refine: Refine = Refine(), step: StepSettings = StepSettings(),
    run_steps: int | None = None, seed: int = 0, progress: bool | None = None,
) -> LRFindResult:
    """Run an LR range test and suggest a peak LR for a warmup + cosine run of ``run_steps`` updates.

    The LR rises over ``sweep_steps`` optimizer updates of the step training runs (its clipping,
    accumulation and precision: the task's recipe, else :mod:`tunekit.defaults`); then, with ``refine``,
    short real runs around the curve's suggestion check it, costing at most ``Refine.share`` of the
    planned run, or one range test's updates where that share buys no useful run (the curve alone can
    be off by 25x: benchmarks/lr_rules.py). A model in hand, its
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
        refine: short runs of the planned schedule at half decades around the curve's suggestion,
            up to 7 LRs, until a worse run lies on each side of the best (its parabola's vertex): at two lengths,
            H and 2H, where the share buys H >= 15 updates, carried by how the best moved
            (:func:`~tunekit.probes.refine_plan.from_two_lengths`); else 33-update runs within one range
            test's updates, carried as calibrated on the corpus (:func:`~tunekit.probes.refine_plan.from_short_runs`;
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
    # What is tested: a Task's fresh model, or the user's objects (put back as they were at the end).
    sub = resolve_inputs("lr_find", model, train_data, loss_fn, optimizer, compute_loss=compute_loss,
                          val_data=val_data, batch_size=batch_size, precision=precision, device=device, seed=seed)
    _check_loss_on(loss_on, sub.val_data)
    run_steps, run_from = planned_run(model, run_steps, sub.data, sub.batch_size, accumulation_steps)
    plan = (plan_refinement(run_steps, refine_share, REFINE_RUNS, refine_steps, refine_seeds, sweep_steps)
            if refine.enabled else None)
    if plan is not None and plan.calibrated and sub.val_data is None and not hold_out_share:
        plan = without_scoring_data(plan)
    setup = _Setup(model, sub.model, sub.optimizer, sub.compute, sub.data, sub.val_data, sub.device, sub.precision,
                   sub.batch_size, accumulation_steps, clip_grad_norm,
                   scaler if scaler is not None else make_scaler(sub.precision, sub.device), seed, diverge_threshold)
    settings = _settings(setup, sub.task.name, min_lr=min_lr, max_lr=max_lr, sweep_steps=sweep_steps, mode=mode, repeats=repeats,
                         loss_on=loss_on, plan=plan)
    _say_family(settings)
    settings.run_steps, settings.run_steps_from, settings.refine_share = run_steps, run_from, refine_share
    settings.refine_plan, settings.run_schedule = plan.why if plan is not None else None, _schedule_words(model)

    result = _test_and_refine(setup, settings, sweep_lrs(min_lr, max_lr, sweep_steps, mode), repeats,
                              val_batches if loss_on == "val" else None, plan, hold_out_share, progress)
    result.seconds = time.perf_counter() - start
    return result


def _test_and_refine(setup: _Setup, settings: LRFindSettings, lrs: np.ndarray, repeats: int, val_batches: int | None,
                     plan: RefinePlan | None, hold_out_share: float | None, progress: bool | None) -> LRFindResult:
    """The sweeps, their curve's suggestion, then the short runs the plan buys, all from the user's objects
    as they were (put back at the end, also on an exception)."""
    total = len(lrs) * repeats + (plan.most_updates if plan is not None and plan.refines else 0)
    with bar(total, "lr-find", "step", progress) as steps_bar, \
            preserved(setup.user_model, setup.optimizer, setup.scaler, setup.data) as initial:
        # The range test: ``repeats`` sweeps of the LR, each from the same weights and optimizer state.
        runs = _sweeps(setup, initial, lrs, repeats, val_batches, steps_bar)
        setup.noise = runs[0]["noise"]
        result = _result(runs, settings, 0.0)
        # Then short real runs around the curve's suggestion: the curve alone can be off by 25x.
        if plan is not None and plan.refines:
            short_run, scored_on = _short_runner(setup, initial, plan.steps, plan.seeds, steps_bar, hold_out_share)
            if plan.calibrated and scored_on[0] is ScoredOn.TRAIN:  # hold_out_share could not split this data
                steps_bar.update(plan.most_updates)
                plan = without_scoring_data(plan)
        if plan is not None and plan.refines:
            result.settings.refine_scored_on = scored_on[1]
            longer_run = (_short_runner(setup, initial, plan.long_steps, plan.seeds, steps_bar, hold_out_share)[0]
                          if plan.long_steps else None)
            _refine(result, short_run, longer_run, scored_on[0], most=plan.runs, calibrated=plan.calibrated)
            _carry_to_run(result, plan, int(settings.run_steps or 0), _samples_per_update(setup, runs))
        elif plan is not None:
            result.settings.not_refined = plan.why
    result.settings.run_samples = int(round(_samples_per_update(setup, runs) * int(settings.run_steps or 0)))
    return result


@dataclass
class _Setup:
    """What the sweeps and the short runs of one ``lr_find`` share: the objects and the step's settings."""

    model: Any  # what the user passed, a Task or a model: the short runs take the Task's schedule
    user_model: nn.Module
    optimizer: torch.optim.Optimizer
    compute: Any
    data: Data
    val_data: Data | None
    device: torch.device
    precision: Any
    batch_size: int | None
    accumulation_steps: int
    clip_grad_norm: float | None
    scaler: Any
    seed: int
    threshold: float  # diverge_threshold
    noise: float = 0.0  # the loss's noise at the first sweep's start (lr_rules.start_noise): no short run stops on it

    def make_step(self) -> TrainStep:
        """A step over the user's objects, as training runs it, the model in train mode."""
        self.user_model.train()
        return TrainStep(self.user_model, self.optimizer, self.compute, device=self.device, precision=self.precision,
                         accumulation_steps=self.accumulation_steps, clip_grad_norm=self.clip_grad_norm,
                         scaler=self.scaler)

    def mean_loss(self, data: Data, max_batches: int) -> float:
        """The model's mean loss on the first ``max_batches`` batches of ``data``: a fixed subset."""
        return evaluate(self.user_model, data, self.compute, device=self.device, precision=self.precision,
                        batch_size=self.batch_size, max_batches=max_batches)["loss"]


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


def _settings(setup: _Setup, task: str, *, min_lr: float, max_lr: float, sweep_steps: int, mode: str, repeats: int,
              loss_on: str, plan: RefinePlan | None) -> LRFindSettings:
    """The settings the result records, as resolved (the task's defaults and the device filled in)."""
    return LRFindSettings(min_lr=min_lr, max_lr=max_lr, sweep_steps=sweep_steps, mode=mode, batch_size=setup.batch_size,
                accumulation_steps=setup.accumulation_steps, precision=setup.precision,
                clip_grad_norm=setup.clip_grad_norm, device=str(setup.device), seed=setup.seed, repeats=repeats,
                diverge_threshold=setup.threshold, loss_on=loss_on, task=task,
                optimizer=type(setup.optimizer).__name__, family=optimizer_family(setup.optimizer), refine=plan is not None,
                refine_steps=plan.steps if plan is not None and plan.refines else None,
                refine_lengths=list(plan.lengths) if plan is not None else None,
                refine_seeds=plan.seeds if plan is not None and plan.refines else None)


def _sweeps(setup: _Setup, initial: Any, lrs: np.ndarray, repeats: int, val_batches: int | None,
            steps_bar: Any) -> list[dict[str, Any]]:
    """``repeats`` sweeps over ``lrs`` (data orders seed, seed + 1, ...); each point the training loss,
    or with ``val_batches`` the loss on that many validation batches."""
    runs = []
    for r in range(repeats):
        if r > 0:  # each repeat starts from the same weights and optimizer state
            initial.restore()
        seed_everything_for(setup.seed + r, setup.device)
        batches = BatchStream(setup.data, setup.batch_size, seed=setup.seed + r)
        val_loss = (lambda: setup.mean_loss(setup.val_data, val_batches)) if val_batches is not None else None
        runs.append(_sweep(setup.make_step(), batches, lrs, setup.threshold, steps_bar, val_loss))
    return runs


# The short runs of the refinement: the first bracket, at most three more past its ends, and one
# a quarter decade from the best (four to seven runs).
REFINE_OFFSETS = (-0.5, 0.0, 0.5)  # decades around the starting point
REFINE_EXTENSIONS = 3
REFINE_RUNS = len(REFINE_OFFSETS) + REFINE_EXTENSIONS + 1
REFINE_EVAL_SAMPLES = 2048  # each run's score: its loss on at most this many samples


def without_scoring_data(plan: RefinePlan) -> RefinePlan:
    """No short runs for the one-length carry without data to score them on: it was calibrated on runs scored
    on validation data, and runs scored on what they train on reward memorising (benchmarks/lr_small_data.py:
    mean regret 38% against the curve's 35%; the corpus's small-data family 315% against 172%)."""
    return dataclasses.replace(plan, steps=0, why="no val_data: short runs scored on the data they train on reward "
                               "memorising, so the curve's suggestion stands alone (pass val_data, or "
                               "hold_out_share=0.2, to check it with short runs)")


def _schedule_of(model: Any) -> tuple[Any, str, float]:
    """(warmup, decay, min_lr_ratio) of the runs the suggestion is for: the task's, else train's defaults."""
    defaults = model.defaults if isinstance(model, Task) else {}
    return (defaults.get("warmup", WARMUP), defaults.get("schedule", SCHEDULE),
            defaults.get("min_lr_ratio", MIN_LR_RATIO))


def _say_family(settings: LRFindSettings) -> None:
    """An optimizer the rules do not know (they know SGD-like and Adam-like ones): said, not guessed silently."""
    if settings.family == "other":
        warnings.warn(f"the optimizer {settings.optimizer} is neither SGD-like nor Adam-like to the LR rules: the "
                      "curve's suggestion is the middle of their two; the short runs (refine=True) check it", stacklevel=3)


def _schedule_words(model: Any) -> str:
    """The planned run's schedule as the result says it: "warmup + cosine", "linear-decay", ..."""
    warmup, decay, _ = _schedule_of(model)
    words = {"cosine": "cosine", "linear": "linear-decay", "constant": "constant-LR",
             "wsd": "stable-then-decay"}.get(decay, decay)
    return f"warmup + {words}" if warmup else words


def _scoring_split(setup: _Setup, seed: int, share: float | None) -> tuple[Data, Data, ScoredOn, str]:
    """(what a short run of data order ``seed`` trains on, what scores it, said in words): the validation
    data; else, with ``share``, a slice of the training data drawn by ``seed`` that the run never trains on
    (each seed holds out another, so the runs' mean is scored on more than one slice holds); else the
    training data itself. Scored on what it trains on, a run is rewarded for memorising it; but on
    benchmarks/lr_small_data.py a held-out fifth raised the mean regret from 8% to 14% (its slices are
    small and noisy, and the runs train on less), so holding out is the caller's choice."""
    if setup.val_data is not None:
        return setup.data, setup.val_data, ScoredOn.VAL, "the validation data"
    split = hold_out(setup.data, share, REFINE_EVAL_SAMPLES, seed) if share else None
    if split is None:  # not asked for; or an iterable dataset, a single batch: nothing fixed to hold out
        return setup.data, setup.data, ScoredOn.TRAIN, "the training data it trains on (no val_data given)"
    held = dataset_size(split[1])
    return split[0], split[1], ScoredOn.HELD_OUT, (f"{held} held-out training samples" if held is not None
                                                   else f"{len(split[1])} held-out training batches")


def _short_runner(setup: _Setup, initial: Any, refine_steps: int, seeds: int, steps_bar: Any,
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
    schedule = _schedule_of(setup.model)

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


def _blown_up(losses: list[float], best: float, threshold: float, noise: float = 0.0) -> tuple[bool, float]:
    """(whether the run has blown up, the best recent loss so far): divergence on a robust, lag-free
    signal, the median of the last three losses against the best such median so far, above ``threshold``
    times it and by more than ``NOISE_MARGIN`` times the start's ``noise`` (lr_rules.start_noise): a
    heavy-tailed loss's spikes are not divergence.
    (sorted() on three floats: np.median costs ~60 us a call, 8% of a small model's sweep.)"""
    last = sorted(losses[-3:])
    recent = float(last[len(last) // 2]) if len(last) % 2 else (last[0] + last[1]) / 2
    best = min(best, recent)
    return len(losses) >= 5 and recent > threshold * best and recent - best > NOISE_MARGIN * noise, best


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
        blown, best = _blown_up(losses, best, threshold, noise)
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


def _refine(result: LRFindResult, short_run: Callable[[float], tuple[float, int]],
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
    # unbracketed best carried as well as a bracketed one (median error 0.29 decades against 0.28).
    if not ref.bracketed and not calibrated:
        result.doubt(Doubt.AT_EDGE, "the short runs' best is at the edge of the LRs they tried: the suggestion may "
                     "lie beyond it (widen the sweep)")


def _samples_per_update(setup: _Setup, runs: list[dict[str, Any]]) -> float:
    """Training samples one update draws: the batch times accumulation, else as the first sweep drew them."""
    if setup.batch_size:
        return float(setup.batch_size * setup.accumulation_steps)
    return runs[0]["samples"] / max(1, len(runs[0]["lrs"]))


def _carry_to_run(result: LRFindResult, plan: RefinePlan, run_steps: int, per_update: float) -> None:
    """The two lengths' bests carried to the planned run's length (one length's best is kept as it is);
    the refinement records the lengths and its cost (updates, samples, share) beside the planned run's."""
    ref = result.refinement
    if ref is None:
        return
    stages = ref.stages
    ref.updates = sum(len(st.lrs) * n for st, n in zip(stages, plan.lengths)) * plan.seeds  # as planned
    ref.at_steps, ref.seeds, ref.run_steps = plan.lengths[len(stages) - 1], plan.seeds, run_steps
    ref.run_samples, ref.share = int(round(per_update * run_steps)), ref.samples / (per_update * run_steps)
    if len(stages) > 1 and stages[0].best_lr is not None and ref.best_lr is not None:  # the second ran from the first's best
        result.suggestion = from_two_lengths(stages[0].best_lr, ref.best_lr, plan.steps, run_steps)
    elif plan.calibrated and ref.best_lr is not None:
        # Where the sweep went non-finite before its smoothed loss rose, the LR it stopped at stands in.
        up = blowup(prepare(result.lrs, result.losses)) or result.diverged_at_lr
        result.suggestion = from_short_runs(ref.best_lr, up)
        ref.carried = f"{10 ** SHORT_SHIFT:.2g}x their best, as calibrated on the benchmarks' corpus"
        ref.capped = result.suggestion < ref.best_lr * 10 ** SHORT_SHIFT * (1 - 1e-9)
        if ref.capped:
            ref.carried = (f"capped at the sweep's blow-up ({up:.3g}) / {10 ** SHORT_CAP:.2g}: where the curve and the "
                           "short runs disagree, the suggestion leans below")
        if not ref.bracketed:
            ref.carried += f"; their best at an edge of the {len(ref.stages[0].lrs)} LRs the budget bought"


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


def _sweep(step: TrainStep, batches: BatchStream, lrs: np.ndarray, threshold: float, steps_bar: Any,
           val_loss: Callable[[], float] | None) -> dict[str, Any]:
    """One sweep through the shared step; stops on divergence."""
    rec_lrs: list[float] = []
    rec_losses: list[float] = []
    samples = 0
    best, noise = math.inf, 0.0
    diverged_at: float | None = None
    loop = Updates(step, batches, lrs.tolist())
    for _, lr, out in loop:
        samples += int(out.samples)
        loss = val_loss() if val_loss is not None else out.loss
        rec_lrs.append(lr)
        rec_losses.append(loss)
        steps_bar.update(1)
        if not math.isfinite(loss):
            diverged_at = lr
            break
        if len(rec_losses) <= NOISE_POINTS:  # the loss's noise, measured while the LR is too low to move it
            noise = start_noise(rec_losses)
        blown, best = _blown_up(rec_losses, best, threshold, noise)
        if blown:
            diverged_at = lr
            break
    if loop.diverged_at is not None:
        diverged_at = float(lrs[loop.diverged_at])
        rec_lrs.append(diverged_at)
        rec_losses.append(math.nan)
    if len(rec_lrs) < len(lrs):  # a sweep stopped early: its steps count as done
        steps_bar.update(len(lrs) - len(rec_lrs))
    return {"lrs": rec_lrs, "losses": rec_losses, "diverged_at_lr": diverged_at, "skipped": loop.skipped, "samples": samples,
            "noise": noise}


def _suggest(lrs: list[float], losses: list[float], family: str | None = None,
             noise: float | None = None) -> tuple[dict[str, float | None], Any, Any]:
    curve = prepare(lrs, losses, family=family)
    suggestions = {name: (rule(curve) if len(curve.lrs) >= 3 else None) for name, rule in RULES.items()}
    return suggestions, curve, assess(curve, batch_noise=noise)


def _result(runs: list[dict[str, Any]], settings: LRFindSettings, seconds: float) -> LRFindResult:
    """The curve's result: the first sweep's curve, each rule's suggestion (the median over repeats), and
    how far to trust it (the curve's assessment; a spread over a decade between repeats is a doubt)."""
    per_run = []
    for run in runs:
        sugg, curve, a = _suggest(run["lrs"], run["losses"], settings.family, run.get("noise"))
        per_run.append((run, sugg, curve, a))
    run0, sugg0, curve0, a0 = per_run[0]
    suggestions = dict(sugg0)
    reasons = list(a0.reasons)
    doubts = [Doubt.CURVE] * len(reasons)
    confidence, confident = a0.confidence, a0.confident
    lr_range = None
    suggestion = suggestions.get(DEFAULT_RULE)
    if len(runs) > 1:
        # Robust aggregate: the median in log LR of each rule over the repeats.
        for name in RULES:
            vals = [s[name] for _, s, _, _ in per_run if s[name] is not None]
            suggestions[name] = float(10 ** np.median(np.log10(vals))) if vals else None
        defaults = [s[DEFAULT_RULE] for _, s, _, _ in per_run if s[DEFAULT_RULE] is not None]
        suggestion = suggestions[DEFAULT_RULE]
        if defaults:
            lr_range = (float(min(defaults)), float(max(defaults)))
            spread = math.log10(lr_range[1] / lr_range[0])
            if spread > 1.0:
                doubts.append(Doubt.SPREAD)
                reasons.append(f"the suggestion spans {spread:.1f} decades over {len(runs)} repeats")
        confidence = float(np.median([a.confidence for *_, a in per_run]))
        confident = sum(a.confident for *_, a in per_run) > len(runs) / 2 and Doubt.SPREAD not in doubts
    if suggestion is None:
        confident = False
        if not reasons:
            doubts.append(Doubt.NO_SUGGESTION)
            reasons.append("no descending stretch in the curve")
    return LRFindResult(
        lrs=list(run0["lrs"]),
        losses=list(run0["losses"]),
        smoothed=curve0.smooth.tolist(),
        suggestions=suggestions,
        default_rule=DEFAULT_RULE,
        suggestion=suggestion,
        confidence=float(confidence),
        confident=bool(confident),
        reasons=reasons,
        diverged=run0["diverged_at_lr"] is not None,
        diverged_at_lr=run0["diverged_at_lr"],
        noise=run0.get("noise"),
        seconds=seconds,
        settings=settings,
        skipped_steps=int(sum(run["skipped"] for run in runs)),
        samples=int(sum(run["samples"] for run in runs)),
        repeats=[{"lrs": c.lrs.tolist(), "smoothed": c.smooth.tolist(), "suggestions": s, "skipped": run["skipped"]}
                 for run, s, c, _ in per_run] if len(runs) > 1 else [],
        lr_range=lr_range,
        doubts=doubts,
    )

