"""``tunekit.doctor``: the pre-flight triage, in named stages, on a model that comes back bitwise."""

from __future__ import annotations

import dataclasses
import itertools
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Optional

import numpy as np
import torch
from torch import nn
from torch.utils.data import DataLoader, Dataset, IterableDataset, TensorDataset

from tunekit.bytesize import parse_bytes
from tunekit.checks.common import forward, outputs_of, raised, slice_batch
from tunekit.checks.datachecks import check_constant_label, check_input_scale, check_leakage, check_shuffled, own_order
from tunekit.checks.gradients import check_gradient_flow, take_ratios
from tunekit.checks.loss import check_loss_contract
from tunekit.checks.modes import check_modes
from tunekit.checks.nonfinite import check_data_finite, check_nonfinite, check_scaler_skips
from tunekit.checks.overfit import OverfitCurve, check_overfit, loss_floor, take_curve
from tunekit.checks.recipe import QUICK, check_lr, check_memory, check_warmup
from tunekit.defaults import CLIP_GRAD_NORM, SWEEP_STEPS
from tunekit.errors import UsageError, check_int, check_number
from tunekit.inputs.data import Batch, BatchStream, Data, rebatched_loader, batch_size_of, to_device
from tunekit.inputs.task import ComputeLoss, LossFn, Task, loss_problem
from tunekit.integrations.task_spec import takes_their_objects
from tunekit.option_fields import grouped_keywords
from tunekit.probes.probe_run import budget_bytes
from tunekit.entry_options import DoctorChecks, PlannedRun, Refine, StepSettings, Sweep
from tunekit.probes.range_test import lr_find
from tunekit.probes.resolve import ProbeInputs, check_saved, resolve_inputs, step_settings
from tunekit.progress import bar
from tunekit.results import DoctorResult, Finding, LRFindResult
from tunekit.results.doctor import DoctorSettings
from tunekit.training.loop import TrainConfig
from tunekit.training.schedule import Warmup, warmup_steps
from tunekit.training.state import Snapshot, preserved, seed_everything_for
from tunekit.training.step import TrainStep, make_scaler

__all__ = ["doctor", "DATA_BATCHES", "TINY_BATCH", "RECIPE_RANGE_STEPS"]

DATA_BATCHES = 8  # batches drawn across the data for its checks: enough samples for a feature's statistics
SHUFFLE_BATCHES = 16  # consecutive batches in the data's own order, for the shuffling check
TINY_BATCH = 4  # samples of the tiny-batch overfit ("2 to 8")
# The quick range test the intended LR is compared with: lr_find's own sweep (its steps, its clipping, its
# rule), without the short runs, so the doctor's number is lr_find's curve suggestion.
RECIPE_RANGE_STEPS = SWEEP_STEPS
MODES_BATCH = 8  # one forward per module at this batch: cheap, and enough samples for batch statistics
MEMORY_TRACE = 8  # largest batch traced for the memory model (and half of it)
STAGES = ("data", "model and loss", "gradients", "nonfinite", "modes", "overfit", "recipe")


@dataclass
class _Run:
    """What the stages share."""

    sub: ProbeInputs
    scaler: Any
    snap: Snapshot
    batch_size: int
    batches: list[Batch] = field(default_factory=list)  # drawn across the training data, on the device
    findings: list[Finding] = field(default_factory=list)
    floor: Optional[float] = None  # the lowest loss reachable, where the user knows it
    saved_lr_find: Any = None  # a saved lr_find result to compare the intended LR with, instead of a quick test
    clip: Optional[float] = CLIP_GRAD_NORM  # the run's clipping: the task's recipe's, else the default
    overfit: Optional[OverfitCurve] = None  # the tiny batch's curve, once the overfit check trained it
    given: Optional[Task] = None  # the Task as the caller gave it (a Trainer's too): lr_find's answer is for it

    def reset(self) -> None:
        """Each model check starts from the user's model as it was."""
        self.snap.restore()
        self.sub.model.train()


def _check_args(lr: Optional[float], warmup: Optional[Warmup], run_steps: Optional[int], accumulation_steps: int) -> None:
    if lr is not None:
        check_number("lr", lr, positive=True, hint="pass e.g. lr=3e-4")
    if run_steps is not None:
        check_int("run_steps", run_steps, hint="the updates of the run you plan: pass e.g. run_steps=1000")
    if warmup is not None:
        warmup_steps(warmup, run_steps or 1000)  # validates it, with its own one-line message
    check_int("accumulation_steps", accumulation_steps, hint="pass e.g. accumulation_steps=2")


def _recipe_defaults(task: Task, lr: Optional[float], warmup: Optional[Warmup], run_steps: Optional[int],
                     in_hand: bool) -> tuple[Optional[float], Optional[Warmup], Optional[int]]:
    """For a Task, what `tunekit train` would run where the user gave nothing; for a model in hand, only what was given."""
    if in_hand:
        return lr, warmup, run_steps

    cfg = TrainConfig.for_task(task)
    return (lr if lr is not None else task.defaults.get("lr"), cfg.warmup if warmup is None else warmup,
            cfg.max_steps if run_steps is None else run_steps)


def drawn_batches(data: Data, batch_size: Optional[int], seed: int, n: int = DATA_BATCHES) -> list[Batch]:
    """``n`` batches drawn across the data, not its first ones: a loader that does not shuffle
    would otherwise show one class only (the shuffling check's finding, not a constant label)."""
    if isinstance(data, DataLoader) and not isinstance(data.dataset, IterableDataset):
        size = batch_size or data.batch_size or 1
        drawn = list(itertools.islice(rebatched_loader(data, size, torch.Generator().manual_seed(seed)), n))
        if drawn:  # else fewer samples than a batch (drop_last): the stream says so, in one line
            return drawn
    if isinstance(data, Sequence) and not isinstance(data, Dataset) and len(data) > n:
        return [data[i] for i in np.linspace(0, len(data) - 1, n).astype(int).tolist()]
    return BatchStream(data, batch_size, seed=seed).take(n)


def stage_data(run: _Run, seed: int) -> None:
    """The data on its own: finite values, scale, shuffling, a constant label, leakage."""
    sub = run.sub
    run.batches = [to_device(b, sub.device) for b in drawn_batches(sub.data, sub.batch_size, seed)]
    whole = [tuple(sub.data.tensors)] if isinstance(sub.data, TensorDataset) else run.batches
    run.findings += check_data_finite(whole) or [Finding("nonfinite", "pass", "inputs and targets are finite")]
    run.findings += check_input_scale(run.batches)
    run.findings += check_shuffled(own_order(sub.data, SHUFFLE_BATCHES))
    run.findings += check_constant_label(run.batches)
    run.findings += check_leakage(sub.data, sub.val_data, sub.batch_size)


def _model_batch(run: _Run) -> Optional[Batch]:
    """The first drawn batch without a NaN (data at fault is the data check's finding)."""
    for b in run.batches:
        if not check_data_finite([b]):
            return b
    return None


def stage_model(run: _Run, batch: Batch) -> bool:
    """One forward, then the loss: a model or a loss that raises fails here, once, and the checks
    that need a loss are skipped (they would all fail the same way)."""
    sub = run.sub
    try:
        with torch.no_grad():
            outputs_of(sub.model, sub.compute, batch)
    except UsageError:
        raise
    except Exception as exc:
        run.findings.append(raised("model", exc, "the forward"))
        return False
    run.reset()
    # The loss contract first: it says why a loss raises (labels out of range, float labels).
    contract = check_loss_contract(sub.model, sub.compute, batch)
    run.findings += contract
    failed = any(f.status == "fail" for f in contract)
    try:
        with torch.no_grad():
            loss = forward(sub.model, sub.compute, batch).loss
    except Exception as exc:
        if failed:  # the contract has said why (a UsageError too: labels out of range)
            return False
        if isinstance(exc, UsageError):
            raise
        run.findings.append(raised("loss", exc, "the forward with the loss"))
        return False
    # A loss that is not one value fails every check that backpropagates: the contract's one finding says so.
    return loss_problem(loss, sub.compute) is None


def stage_overfit(run: _Run, batch: Batch, precision: str) -> None:
    sub = run.sub
    tiny = slice_batch(batch, min(TINY_BATCH, batch_size_of(batch)))
    with torch.no_grad():
        try:
            out, y = outputs_of(sub.model, sub.compute, tiny)
        except Exception:  # the model raised: the forward stage has reported it; the floor is then 0
            out, y = None, None
    floor = run.floor if run.floor is not None else loss_floor(sub.compute.loss, out, y)
    found = check_overfit(sub.model, sub.optimizer, sub.compute, tiny, device=sub.device, precision=precision,
                          scaler=run.scaler, floor=floor, clip_grad_norm=run.clip)
    run.findings += found
    curve = take_curve(found)
    if curve is not None:
        run.overfit = curve
        if precision == "fp16":
            run.findings += check_scaler_skips(curve.skipped, curve.steps)


def stage_recipe(run: _Run, batch: Batch, lr: Optional[float], warmup: Optional[Warmup], run_steps: Optional[int],
                 memory_budget: Any, accumulation_steps: int, seed: int) -> None:
    sub = run.sub
    suggestion, confident, source = None, False, QUICK
    answer: Optional[Callable[[], Optional[float]]] = None  # lr_find's own answer, asked for where the LR is far off
    if run.saved_lr_find is not None:  # the user's own lr_find: one LR across tools
        saved = run.saved_lr_find
        suggestion, confident, source = saved.suggestion, saved.confident, "the saved lr_find result's"
        answer = lambda: saved.suggestion  # noqa: E731
    elif lr is not None:
        res = lr_find(sub.model, sub.data, optimizer=sub.optimizer, compute_loss=lambda m, b: sub.compute(m, b)[0],
                      step=StepSettings(batch_size=sub.batch_size, accumulation_steps=accumulation_steps,
                                        precision=sub.precision, device=str(sub.device), clip_grad_norm=run.clip,
                                        scaler=run.scaler),
                      sweep=Sweep(sweep_steps=RECIPE_RANGE_STEPS), refine=Refine(enabled=False), seed=seed,
                      progress=False)  # the curve alone: a pre-flight check
        suggestion, confident = res.suggestion, res.confident
        answer = lambda: _lr_finds(run, run_steps, accumulation_steps, seed)  # noqa: E731
    run.findings += check_lr(lr, suggestion, confident, source, answer)
    run.findings += check_warmup(warmup, run_steps)

    budget, source = budget_bytes(memory_budget, sub.device)
    n = min(MEMORY_TRACE, batch_size_of(batch))
    sizes = sorted({max(1, n // 2), n})

    def make_step(m: nn.Module, o: Any) -> TrainStep:
        return TrainStep(m, o, sub.compute, device=sub.device, precision=sub.precision, clip_grad_norm=run.clip)

    run.findings += check_memory(sub.model, sub.optimizer, make_step, [slice_batch(batch, s) for s in sizes],
                                 run.batch_size, budget, source, sub.device, accumulation_steps)


@grouped_keywords(step=StepSettings, run=PlannedRun, checks=DoctorChecks)
@takes_their_objects
def doctor(
    model: nn.Module | Task, train_data: Data | None = None, loss_fn: LossFn | None = None, optimizer: Any = None,
    val_data: Data | None = None, *, compute_loss: ComputeLoss | None = None, memory_budget: int | str | None = None,
    step: StepSettings = StepSettings(), run: PlannedRun = PlannedRun(), checks: DoctorChecks = DoctorChecks(),
    seed: int = 0, progress: Optional[bool] = None,
) -> DoctorResult:
    """Pre-flight triage of a training set-up: every check's findings, before any LR or batch is tuned.

    The model, optimizer, scaler, RNGs and DataLoader generators are restored bitwise afterwards,
    also when the model raises. An exception raised by the model or loss during a check is a
    failure finding that names it (the run would fail the same way), not a crash; a usage error
    (data or loss that tunekit cannot read) is raised as :class:`UsageError`.

    The settings come in objects: the step (:class:`~tunekit.entry_options.StepSettings`), the run you intend
    (:class:`~tunekit.entry_options.PlannedRun`) and the checks' own (:class:`~tunekit.entry_options.DoctorChecks`);
    0.1's flat keywords still work for a release.

    Args:
        model: a :class:`Task` (a fresh model is checked) or a model in hand with its ``train_data``, ``loss_fn``
            (or ``compute_loss``) and ``optimizer`` (an instance or a factory; AdamW by default).
        run: the run you intend, its peak ``lr``, ``warmup`` and ``run_steps`` (0.1.0's ``steps=``); for a Task,
            its own recipe by default, as are the step's accumulation, precision and clipping.
        memory_budget: what the batch is checked against; by default the free memory.
        checks.anomaly: run the non-finite check's backward under autograd's anomaly mode.
        checks.overfit_floor: the lowest loss the tiny batch can reach, for a loss with terms that do not vanish
            (a KL term, an auxiliary loss); by default 0, or label smoothing's floor.
        checks.lr_find_result: a saved ``lr_find`` result (or its JSON file) to compare ``lr`` with, instead of
            the doctor's quick range test (the curve alone).
    """
    lr, warmup, run_steps = run.lr, run.warmup, run.run_steps
    anomaly, overfit_floor, lr_find_result = checks.anomaly, checks.overfit_floor, checks.lr_find_result
    batch_size, device, scaler = step.batch_size, step.device, step.scaler
    clip, accumulation_steps, precision = step_settings(model, step.clip_grad_norm, step.accumulation_steps,
                                                        step.precision)  # a Task's recipe where unset
    _check_args(lr, warmup, run_steps, accumulation_steps)
    if overfit_floor is not None:
        check_number("overfit_floor", overfit_floor, minimum=0, hint="the lowest loss reachable: pass e.g. overfit_floor=0.5")
    if memory_budget is not None:
        parse_bytes(memory_budget)  # a bad size fails before anything runs
    sub = resolve_inputs("doctor", model, train_data, loss_fn, optimizer, compute_loss=compute_loss,
                          val_data=val_data, batch_size=batch_size, precision=precision, device=device, seed=seed)
    lr, warmup, run_steps = _recipe_defaults(sub.task, lr, warmup, run_steps, in_hand=not isinstance(model, Task))
    saved_lr_find = LRFindResult.load(lr_find_result)
    if saved_lr_find is not None:
        check_saved("lr_find", saved_lr_find.settings, sub.task.name, sub.precision, str(sub.device))
    scaler = scaler if scaler is not None else make_scaler(sub.precision, sub.device)  # type: ignore[arg-type]
    start = time.perf_counter()
    with preserved(sub.model, sub.optimizer, scaler, sub.data) as snap, \
            bar(len(STAGES), "doctor", "check", enabled=progress) as progress_bar:
        seed_everything_for(seed, sub.device)
        state = _Run(sub, scaler, snap, batch_size=0, floor=overfit_floor, saved_lr_find=saved_lr_find, clip=clip,
                     given=model if isinstance(model, Task) else None)
        _stages(state, progress_bar, lr, warmup, run_steps, memory_budget, accumulation_steps, seed, anomaly)
    return _result(state, time.perf_counter() - start, DoctorSettings(
        lr=lr, warmup=warmup, run_steps=run_steps, batch_size=state.batch_size, accumulation_steps=accumulation_steps,
        clip_grad_norm=clip, precision=sub.precision, device=str(sub.device), seed=seed, memory_budget=memory_budget,
        anomaly=anomaly, overfit_floor=overfit_floor))


def _stages(run: _Run, progress_bar: Any, lr: Optional[float], warmup: Optional[Warmup], run_steps: Optional[int],
            memory_budget: Any, accumulation_steps: int, seed: int, anomaly: bool) -> None:
    """The checks in order; each model check starts from the model as given."""
    sub = run.sub

    def done(stage: str) -> None:
        progress_bar.set_postfix_str(stage)
        progress_bar.update(1)

    stage_data(run, seed)
    done("data")
    batch = _model_batch(run)
    if batch is None:
        run.findings.append(Finding("model", "info", f"every one of the {len(run.batches)} batches drawn holds a "
                                    "NaN/Inf: the model checks need clean data, and did not run"))
        return
    run.batch_size = sub.batch_size or batch_size_of(batch)
    run.reset()
    if not stage_model(run, batch):
        return
    done("model and loss")
    checks = (("gradients", lambda: check_gradient_flow(sub.model, sub.compute, batch, sub.optimizer, clip_grad_norm=run.clip)),
              ("nonfinite", lambda: check_nonfinite(sub.model, sub.compute, batch, anomaly=anomaly)),
              ("modes", lambda: check_modes(sub.model, sub.compute, slice_batch(batch, MODES_BATCH))),
              ("overfit", lambda: stage_overfit(run, batch, sub.precision)))
    for name, check in checks:
        run.reset()
        found = check()
        if found:
            run.findings += found
        done(name)
    run.reset()
    stage_recipe(run, batch, lr, warmup, run_steps, memory_budget, accumulation_steps, seed)
    done("recipe")


def _lr_finds(run: _Run, run_steps: Optional[int], accumulation_steps: int, seed: int) -> Optional[float]:
    """What ``lr_find`` suggests for these objects and this run, short runs and all (the LR to try where the
    intended one is far off): the same call a user makes, on the Task as given, else on the objects in hand."""
    sub = run.sub
    step = StepSettings(batch_size=sub.batch_size, accumulation_steps=accumulation_steps, precision=sub.precision,
                        device=str(sub.device))
    common: dict[str, Any] = dict(seed=seed, run_steps=run_steps, progress=False)
    if run.given is not None:
        return lr_find(run.given, step=step, **common).suggestion
    return lr_find(sub.model, sub.data, optimizer=sub.optimizer, compute_loss=lambda m, b: sub.compute(m, b)[0],
                   val_data=sub.val_data, step=dataclasses.replace(step, clip_grad_norm=run.clip, scaler=run.scaler),
                   **common).suggestion


def _result(run: _Run, seconds: float, settings: DoctorSettings) -> DoctorResult:
    """The result, with the gradient ratios and the tiny-batch curve lifted out of their findings' evidence."""
    curve = run.overfit
    return DoctorResult.build(run.findings, task=run.sub.task.name, grad_norms=take_ratios(run.findings),
                              overfit_losses=curve.losses if curve else [], overfit_target=curve.target if curve else None,
                              seconds=seconds, settings=settings)
