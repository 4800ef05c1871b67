"""The batch-size and memory probe: predict first, confirm with very few real steps.

1. Trace the shared step on fake tensors at a few small batch sizes and fit a
   memory model (:mod:`tunekit.probes.memory_trace`).
2. Predict the largest micro-batch that fits the budget less a headroom, and confirm it with
   real steps whose peaks are measured; off by more than 3%, the model is refitted with that
   point and an out-of-memory error tries smaller (:mod:`tunekit.probes.largest_batch`).
3. Measure throughput up to that batch; the knee is the smallest within 5% of the best
   (:mod:`tunekit.probes.throughput`).
4. Estimate the gradient noise scale (the critical batch size).
5. Plan (micro-batch, accumulation) pairs for a target effective batch.

The user's model, optimizer, scaler, train/eval modes, RNGs and DataLoader
generators are restored when the probe ends, however it ends; what the stages share is
:mod:`tunekit.probes.probe_run`.
"""

from __future__ import annotations

import dataclasses
import math
import time
from collections.abc import Callable
from typing import Any, Optional

import numpy as np
import torch
from torch import nn

from tunekit.bytesize import format_bytes
from tunekit.errors import HintedWarning, UsageError, check_int, check_number, warn_at_caller
from tunekit.inputs.data import BatchStream, Data, dataset_size
from tunekit.entry_options import NOISE_REPEATS, BatchTarget, Measurement, StepSettings
from tunekit.option_fields import grouped_keywords
from tunekit.inputs.task import ComputeLoss, LossFn, Task
from tunekit.integrations.task_spec import takes_their_objects
from tunekit.probes.largest_batch import largest_batch, measurement_warnings
from tunekit.probes.memory_trace import MemoryModel, Trace, fit_memory_model
from tunekit.probes.noise_scale import noise_scale
from tunekit.probes.probe_cost import (NOISE_MAX_ACCUM, NOISE_SMALL_BATCH, NOISE_WARMUP_BATCH, CostCap, StagePlan,
                                       cost_cap, plan_stages, stage_samples)
from tunekit.probes.probe_run import CountingStep, ProbeRun, Room, budget_bytes, trace_at
from tunekit.probes.resolve import resolve_inputs, step_settings
from tunekit.probes.throughput import BUSY_RETRIES, NOISY_TIMINGS, knee_and_fastest, measure_eval, measure_throughput
from tunekit.progress import bar
from tunekit.results import ProbeResult
from tunekit.results.probe import ProbeRunSettings
from tunekit.training.memory import collecting_young
from tunekit.training.optimizers import rescale_lr
from tunekit.training.schedule import lr_schedule
from tunekit.training.state import preserved, seed_everything_for
from tunekit.training.step import Updates, make_scaler

__all__ = ["probe", "split_target", "PROBE_LR_RULES", "noise_cost", "TASK_NOISE_WARMUP"]

# A fresh model of a Task trains TASK_NOISE_WARMUP updates before its noise scale is measured.
TASK_NOISE_WARMUP = 50
# The rules a probe's plan carries a given LR to its target batch by: linear (Goyal et al.) and square root (Hoffer et al.).
PROBE_LR_RULES = ("linear", "sqrt")


def noise_cost(warmup: int = TASK_NOISE_WARMUP, repeats: int = NOISE_REPEATS) -> tuple[int, int]:
    """What the noise-scale stage costs at most: (optimizer steps, training samples)."""
    if repeats < 2:
        return 0, 0
    return (warmup + 2 * repeats,
            warmup * NOISE_WARMUP_BATCH + repeats * NOISE_SMALL_BATCH * (1 + NOISE_MAX_ACCUM))


def split_target(target: int, max_batch: int, throughput: list[dict[str, float]], model: MemoryModel) -> list[dict[str, Any]]:
    """(micro-batch, accumulation) pairs whose product is ``target`` and that fit, best first.

    The fewest accumulation steps (the largest micro-batch that fits) come first, unless another
    pair is faster by more than the timings' own spread: more micro-batches cost kernel launches
    and optimizer bookkeeping that a noisy timing must not be taken to repay. Speed is
    interpolated in log-log between measured throughputs and never extrapolated (nan outside
    the timed range).
    """
    if target < 1:
        raise UsageError(f"target batch must be >= 1, got {target}")
    pairs = [(m, target // m) for m in range(1, min(target, max_batch) + 1) if target % m == 0]
    if not pairs:
        return []
    timed = sorted((t for t in throughput if not t.get("busy")), key=lambda t: t["batch"])  # a busy timing: no speed
    xs = np.log([t["batch"] for t in timed]) if timed else np.array([])
    ys = np.log([t["samples_per_s"] for t in timed]) if timed else np.array([])
    out = []
    for micro, k in pairs:
        x = math.log(micro)
        inside = len(xs) > 0 and xs[0] - 1e-9 <= x <= xs[-1] + 1e-9
        speed = float(np.exp(np.interp(x, xs, ys))) if inside else math.nan
        out.append({"effective_batch": target, "micro_batch": micro, "accumulation_steps": k,
                    "samples_per_s": speed, "peak_bytes": model.peak(micro)})
    out.sort(key=lambda p: p["accumulation_steps"])
    # Faster than the fewest-steps pair by more than the timings' spread (at least NOISY_TIMINGS).
    margin = max([NOISY_TIMINGS] + [float(t.get("spread", 0.0)) for t in timed])
    ref = out[0]["samples_per_s"]
    faster = [p for p in out[1:] if math.isfinite(p["samples_per_s"]) and math.isfinite(ref)
              and p["samples_per_s"] > ref * (1 + margin)]
    faster.sort(key=lambda p: -p["samples_per_s"])
    return faster + [p for p in out if p not in faster]


@grouped_keywords(step=StepSettings, measure=Measurement, target=BatchTarget)
@takes_their_objects
def probe(
    model: nn.Module | Task, train_data: Data | None = None, loss_fn: LossFn | None = None, optimizer: Any = None,
    *, compute_loss: ComputeLoss | None = None, memory_budget: int | str | None = None,
    step: StepSettings = StepSettings(), measure: Measurement = Measurement(), target: BatchTarget = BatchTarget(),
    seed: int = 0, progress: bool | None = None,
) -> ProbeResult:
    """Probe memory and throughput of the shared step, and the critical batch size.

    The settings come in objects (:mod:`tunekit.entry_options`): the step (:class:`StepSettings`: its
    accumulation, clipping and precision default to a Task's recipe, as :func:`tunekit.train` resolves them),
    what is measured (:class:`Measurement`) and the run planned for (:class:`BatchTarget`); 0.1's flat
    keywords still work for a release.

    Args:
        memory_budget: bytes or "8GiB"; by default the GPU's free memory, on the CPU a run's share (a quarter
            of RAM, or what is free if less); ``measure.headroom`` of it is kept free.
        target.target_batch: plan (micro-batch, accumulation) pairs for this effective batch (default: the critical
            batch, rounded to a power of two); ``lr`` found at effective batch ``lr_batch`` is rescaled to it
            by the linear and square-root rules.
        measure.noise_warmup: updates before the noise scale (default 50 for a Task's fresh model, 0 for one in hand).
        measure.cost_share: the probe's samples at most this share of the planned run's (default 0.7 under 1,000
            updates, 0.1 beyond): the largest batch, the timings and the noise scale sized to it (:mod:`.probe_cost`).
    """
    step.refuse(("batch_size", "the probe finds it: pass measure=Measurement(batch_limit=N) for the largest it tries"),
                ("scaler", "the probe steps with a GradScaler of its own"), caller="probe")
    headroom, batch_limit, device = measure.headroom, measure.batch_limit, step.device
    target_batch, lr, lr_batch = target.target_batch, target.lr, target.lr_batch
    clip_grad_norm, accumulation_steps, precision = step_settings(model, step.clip_grad_norm, step.accumulation_steps,
                                                                  step.precision)
    _check_args(headroom, accumulation_steps, target_batch, lr, lr_batch, batch_limit)
    sub = resolve_inputs("probe", model, train_data, loss_fn, optimizer, compute_loss=compute_loss,
                          precision=precision, device=device, seed=seed)
    cap, plan, n_data = _sized(model, sub.data, measure, accumulation_steps, target_batch)  # sized to the planned run
    throughput_points, timing_steps, noise_repeats, noise_warmup = (plan.throughput_points, plan.timing_steps,
                                                                    plan.noise_repeats, plan.noise_warmup)
    room = Room.of(memory_budget, headroom, sub.device, limit=plan.limit)
    scaler = make_scaler(sub.precision, sub.device)  # type: ignore[arg-type]
    settings = _run_settings(sub, measure, seed, memory_budget, accumulation_steps, clip_grad_norm, plan)

    # Stages 1-4 run on the user's objects, back as they were however the probe ends; collections walk what it made.
    start = time.perf_counter()
    with bar(4, "probe", "stage", progress) as stages, preserved(sub.model, sub.optimizer, scaler, sub.data) as snap, collecting_young():
        stages.set_postfix_str(plan.line(cap), refresh=False)  # the cost ahead, said before the stages run
        seed_everything_for(seed, sub.device)
        sub.model.train()
        run = ProbeRun(sub, sub.data, sub.device, snap, scaler, seed, accumulation_steps, clip_grad_norm)
        sizes = sorted({min(s, room.limit) for s in measure.trace_sizes})
        mm, traces = _memory_model(run, sizes)  # 1. The memory model, on fake tensors.
        _stage_done(stages, "memory model")
        predicted = _predicted_largest(mm, room)
        _say_cost_ahead(sub.task, predicted, cost_ahead(predicted, sizes, throughput_points, timing_steps, accumulation_steps,
                                                         noise_repeats, noise_warmup, room.limit),
                        throughput_points, noise_repeats, cap)
        # 2. Real steps at the batch the model recommends, measured, until one agrees with it; then the margin.
        settled, tried, mm, measured_how = largest_batch(run, mm, traces, room, measure.calibrate_steps, sizes[0])
        confirmed = settled.batch
        _stage_done(stages, "largest batch")
        throughput, eval_time = _timings(run, sizes, confirmed, throughput_points, timing_steps,  # 3. Up to the largest.
                                         _seconds_left(cap, sub.task.batch_size, accumulation_steps, start))
        _stage_done(stages, "throughput")
        noise = _noise(run, confirmed, room.limit, noise_repeats, noise_warmup, lr)  # 4. Gradient noise scale.
        _stage_done(stages, "noise scale")

    # 5. What it means for a run: the critical batch, a plan for the target batch, the LR rescaled to it.
    critical = noise["b_simple"] if noise and math.isfinite(noise["b_simple"]) else None
    effective, why = _target_of(target_batch, noise, critical, noise_warmup, noise_repeats, confirmed, sub.task.batch_size,
                                plan.noise_skipped)
    pairs, lr_scaling = _splits(effective, confirmed, throughput, mm, lr, lr_batch)
    knee, fastest = knee_and_fastest(throughput)
    return ProbeResult(
        device=str(sub.device), precision=sub.precision, accumulation_steps=accumulation_steps, budget_bytes=room.budget,
        budget_source=room.source, headroom=headroom, usable_bytes=room.usable, memory=mm.to_dict(),
        predicted_max_batch=predicted, max_batch=confirmed, tried=tried, throughput=throughput, knee_batch=knee,
        fastest_batch=fastest, critical_batch=critical, noise=noise, margin=settled.margin.fraction, margin_source=settled.margin.source,
        critical_batch_range=(noise["low"], noise["high"]) if critical is not None else None,
        splits=pairs, splits_reason=why, lr_scaling=lr_scaling, dataset_size=n_data, seconds=time.perf_counter() - start, settings=settings,
        updates=run.counter["updates"], samples=run.counter["samples"], memory_measured=measured_how,
        run_steps=cap.run_steps if cap else sub.task.defaults.get("max_steps"), run_batch=sub.task.batch_size,
        predicted_peak_bytes=int(settled.peak_bytes), cost_plan=plan.line(cap), cost_notes=list(plan.notes), eval_time=eval_time,
        warnings=_warnings(throughput, noise, noise_warmup) + measurement_warnings(measured_how))


def _sized(model: Any, data: Data, measure: Measurement, k: int,
           target_batch: Optional[int]) -> tuple[Optional[CostCap], StagePlan, int]:
    """(the cap on the probe's cost, its stages sized to it, the dataset's size). A fresh model of a task trains
    a little before its noise scale is measured; a model in hand is measured as it is."""
    noise_warmup = measure.noise_warmup
    noise_warmup = (TASK_NOISE_WARMUP if isinstance(model, Task) else 0) if noise_warmup is None else noise_warmup
    n_data = _dataset_size(data)
    cap = cost_cap(model, k, measure.cost_share)
    limit = min(n_data, measure.batch_limit or n_data)
    return cap, plan_stages(cap, measure, limit, k, noise_warmup, target_batch), n_data


def _run_settings(sub: Any, measure: Measurement, seed: int, memory_budget: int | str | None, k: int,
                  clip_grad_norm: Optional[float], plan: StagePlan) -> ProbeRunSettings:
    """What the probe ran, as resolved, for its result."""
    return ProbeRunSettings(task=sub.task.name, device=str(sub.device), precision=sub.precision, seed=seed,
                            headroom=measure.headroom, memory_budget=memory_budget, accumulation_steps=k,
                            clip_grad_norm=clip_grad_norm, batch_limit=measure.batch_limit,
                            noise_not_measured=plan.noise_skipped)


def _seconds_left(cap: Optional[CostCap], micro: Optional[int], k: int,
                  start: float) -> Optional[Callable[[dict[int, float]], float]]:
    """What is left of the probe's share of the planned run's seconds, from the throughput's warm-up steps (the
    run's at the timed batch nearest its own): timing again on a busy machine costs device time, not samples."""
    if cap is None or not micro:
        return None

    def left(warm: dict[int, float]) -> float:
        near = min(warm, key=lambda b: abs(math.log(b / micro)))
        return cap.share * cap.run_samples * warm[near] / (near * k) - (time.perf_counter() - start)
    return left


def _dataset_size(data: Data) -> int:
    """The number of samples; the probe varies the batch size, so it needs to know it."""
    n = dataset_size(data)
    if n is None:
        raise UsageError("probe varies the batch size: pass a map-style Dataset or a DataLoader over one, not a list of batches")
    return n


def cost_ahead(predicted: int, sizes: list[int], points_n: int, timing_steps: int, k: int, repeats: int,
               warmup: int, limit: int) -> int:
    """The samples the probe's real steps will draw, at most, once the memory model predicts the largest batch:
    the largest batch's steps (a warm-up and up to two measured), the throughput points (a warm-up and the
    timed rounds each; timing again on a busy machine replays drawn batches), the noise scale (its warm-up
    and its two accumulations)."""
    return sum(stage_samples(predicted, sizes[0], points_n, timing_steps, k, repeats, warmup, limit))


def _say_cost_ahead(task: Task, predicted: int, ahead: int, points_n: int, repeats: int,
                    cap: Optional[CostCap] = None) -> None:
    """Before the real steps: what they will cost (``ahead`` samples), said where it is more than the planned run
    (settings given over the cap, or no cap), with the arguments that spend less, and none that would not (a
    batch_limit at or above the largest batch it tries)."""
    steps, batch = (cap.run_steps, cap.run_batch) if cap else (task.defaults.get("max_steps"), task.batch_size)
    if not steps or not batch:
        return
    planned = int(steps) * int(batch)
    if ahead <= planned:
        return
    limit = 8 * int(task.batch_size or batch)
    hints = ((f"measure=Measurement(batch_limit={limit})",) if limit < predicted else ()) \
        + (("measure=Measurement(throughput_points=2)",) if points_n > 2 else ()) \
        + (("measure=Measurement(noise_repeats=0)",) if repeats >= 2 else ())
    warn_at_caller(ProbeCostWarning(
        f"the probe will draw up to {ahead:,} samples, {ahead / planned:.1f}x the planned run ({steps} updates at "
        f"batch {batch}: {planned:,}); its batches go up to {predicted:,}", hints, " to spend less"))


class ProbeCostWarning(HintedWarning):
    """A probe that will cost more than the run it plans for, said before it starts its real steps."""


def _predicted_largest(mm: MemoryModel, room: Room) -> int:
    """The traced model's largest batch, the first one the real steps try; a UsageError if not even 1 fits."""
    predicted = min(mm.largest_batch(room.usable), room.limit)
    if predicted < 1:
        raise UsageError(
            f"the model does not fit even at batch 1: predicted peak {format_bytes(mm.peak(1))} > usable "
            f"{format_bytes(room.usable)} ({format_bytes(room.budget)} less {room.headroom:.0%} headroom): "
            "raise memory_budget, use bf16, or a smaller model"
        )
    return predicted


def _warnings(throughput: list[dict[str, float]], noise: Optional[dict[str, Any]], noise_warmup: int) -> list[str]:
    out = []
    noisy = [t for t in throughput if t.get("spread", 0.0) > NOISY_TIMINGS]
    if noisy:
        worst = max(noisy, key=lambda t: t["spread"])
        said = f"timings spread by up to {worst['spread']:.0%} (at batch {worst['batch']}): the machine is busy"
        busy = [t["batch"] for t in noisy if t.get("busy")]
        if busy:
            left = "every timed batch" if len(busy) == len(throughput) else "batch " + ", ".join(map(str, busy))
            again = max(int(t.get("remeasured", BUSY_RETRIES)) for t in noisy if t.get("busy"))
            timed = (f"timed again {again} times and still spread" if again else
                     "not timed again, as the probe had spent its planned run's seconds")
            said += (f"; {timed}, {left} is left out of the fastest batch, "
                     "the knee, the plan, the planned run's seconds and a search's device-time prices")
        else:  # a result saved before busy timings were timed again
            said += ", so the fastest batch and the knee may move between runs"
        out.append(said)
    if noise is not None and noise_warmup == 0:
        out.append("the noise scale was measured on the model as given, without training it first: at "
                   "initialisation it is much smaller than during training, so the critical batch is likely too "
                   "small (pass noise_warmup=50, or probe a Task)")
    return out


def _target_of(given: Optional[int], noise: Optional[dict[str, Any]], critical: Optional[float], noise_warmup: int,
               repeats: int, largest: int, own: Optional[int], skipped: Optional[str] = None) -> tuple[int, str]:
    """:func:`_target` from the noise scale as measured: a plan rests on the critical batch only where it was
    measured on a trained model and its interval is bounded (0..inf says nothing of it). ``skipped``: why the
    probe's plan left the noise scale out: the target is then the task's own batch (``own``), and says why."""
    if skipped and given is None:  # the run's own batch, which the probe had no measurement to move it from
        if own:
            return min(own, largest), f"the task's own batch: the noise scale was {skipped}"
        return largest, f"the largest batch that fits: the noise scale was {skipped}"
    bounded = critical is not None and noise is not None and noise["low"] > 0 and math.isfinite(noise["high"])
    unbounded = bool(noise_warmup) and critical is not None and not bounded
    return _target(given, critical if noise_warmup and bounded else None, largest, measured=repeats >= 2,
                   own=own if unbounded else None)


def _target(given: Optional[int], critical: Optional[float], largest: int, measured: bool = True,
            own: Optional[int] = None) -> tuple[int, str]:
    """The effective batch to plan for, and why: the one given; else the critical batch as a power of two
    (``critical`` is None where the noise scale is not to be trusted); else, where it was measured but its
    interval is unbounded, the task's own batch (``own``); else the largest batch that fits."""
    if given is not None:
        return given, "the batch asked for"
    if critical is not None:
        return int(2 ** round(math.log2(max(critical, 1)))), "the critical batch, as a power of two"
    if own is not None:
        return min(own, largest), ("the task's own batch: the critical batch's interval is unbounded (its noise "
                                   "scale is too noisy to plan on)")
    if not measured:
        return largest, "the largest batch that fits: the noise scale was not measured (noise_repeats < 2)"
    return largest, ("the largest batch that fits: no noise scale to trust (a model measured as given, at "
                     "initialisation, understates it; probe a Task or pass noise_warmup=50 for the critical batch)")


def _splits(target: int, confirmed: int, throughput: list[dict[str, float]], mm: MemoryModel, lr: Optional[float],
            lr_batch: Optional[int]) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """The (micro-batch, accumulation) splits of the target batch, and an LR found at ``lr_batch`` rescaled to it."""
    splits = split_target(target, confirmed, throughput, mm) if target else []
    lr_scaling: dict[str, Any] = {}
    if lr is not None and lr_batch is not None and target:
        for rule in PROBE_LR_RULES:
            lr_scaling[rule] = {"from_lr": lr, "from_batch": lr_batch, "to_batch": target,
                                "lr": rescale_lr(lr, lr_batch, target, rule)}
    return splits, lr_scaling


def _check_args(headroom: float, accumulation_steps: int, target_batch: Optional[int], lr: Optional[float],
                lr_batch: Optional[int], batch_limit: Optional[int] = None) -> None:
    check_number("headroom", headroom, minimum=0, below=1, hint="e.g. 0.15 keeps 15% free")
    if batch_limit is not None:
        check_int("batch_limit", batch_limit, hint="the largest batch to try: pass e.g. batch_limit=1024")
    check_int("accumulation_steps", accumulation_steps, hint="pass e.g. accumulation_steps=2")
    if target_batch is not None:
        check_int("target_batch", target_batch, hint="pass e.g. target_batch=256")
    if (lr is None) != (lr_batch is None):
        raise UsageError("give lr=... and lr_batch=... together: the LR you found and the effective batch it was found at")
    if lr_batch is not None:
        check_int("lr_batch", lr_batch, hint="the effective batch at which the LR was found")
    if lr is not None:
        check_number("lr", lr, positive=True, hint="the peak LR found at lr_batch: pass e.g. lr=3e-4")


def _memory_model(run: ProbeRun, sizes: list[int]) -> tuple[MemoryModel, dict[int, Trace]]:
    """Traces at ``sizes`` on fake tensors (two micro-batches when accumulating: the second runs with
    the first one's gradients alive), and the memory model fitted to them."""
    try:
        traces = {b: trace_at(run, b) for b in sizes}
    except Exception:
        _real_loss(run, sizes[0])  # a loss the fake tensors cannot follow (a loss.item()): said as the real step says it
        raise
    return fit_memory_model(traces, run.k), traces


def _real_loss(run: ProbeRun, b: int) -> None:
    """One real forward of the shared step at batch ``b``, without gradients: its UsageError for a bad loss."""
    batch = BatchStream(run.data, b, seed=run.seed).take(1)[0]
    with torch.no_grad():
        run.make_step(run.sub.model, run.sub.optimizer, 1).forward(batch)


def _noise(run: ProbeRun, confirmed: int, limit: int, repeats: int, warmup: int, lr: Optional[float]) -> Optional[dict[str, Any]]:
    """The gradient noise scale, through the shared step at LR 0 (grad norms before clipping).

    At initialisation the gradient is large and the noise scale small (McCandlish et al. see it
    grow as training goes on), so a fresh model first trains for ``warmup`` updates, undone after.
    """
    sub = run.sub
    if repeats < 2:
        return None
    if warmup > 0:
        _warm_up(run, warmup, lr or float(sub.task.defaults.get("lr", 1e-3)), min(NOISE_WARMUP_BATCH, confirmed))
    b_small = max(1, min(NOISE_SMALL_BATCH, confirmed, limit // 64 or 1))
    k_big = max(2, min(NOISE_MAX_ACCUM, limit // b_small))
    norms: dict[int, list[float]] = {1: [], k_big: []}
    stream = BatchStream(run.data, b_small, seed=run.seed + 1)
    for k in (1, k_big):
        step = CountingStep(run.counter, sub.model, sub.optimizer, sub.compute, device=run.dev, precision=sub.precision,
                             accumulation_steps=k, clip_grad_norm=None, scaler=run.scaler)
        step.set_lr(0.0)
        for _ in range(repeats):
            out = step(stream.take(k))
            if out.finite and not out.skipped and math.isfinite(out.grad_norm):
                norms[k].append(out.grad_norm ** 2)
    run.reset()
    if len(norms[1]) < 2 or len(norms[k_big]) < 2:
        return None
    return dataclasses.asdict(noise_scale(norms[1], norms[k_big], b_small, b_small * k_big, seed=run.seed))


def _warm_up(run: ProbeRun, updates: int, lr: float, batch: int) -> None:
    """Train for ``updates`` updates on the shared schedule (linear warm-up over the first fifth, then
    constant), as ``train()`` would; a divergence ends it early."""
    lrs = lr_schedule(updates, lr, warmup=updates // 5, decay="constant")
    stream = BatchStream(run.data, batch, seed=run.seed + 2)
    for _ in Updates(run.make_step(run.sub.model, run.sub.optimizer), stream, lrs):
        pass


def _timings(run: ProbeRun, sizes: list[int], confirmed: int, points: int, timing_steps: int,
             seconds_left: Optional[Callable[[dict[int, float]], float]]) -> tuple[list[dict[str, Any]], Optional[dict[str, Any]]]:
    """The throughput's points up to ``confirmed``, and, where they are timed, one validation batch at the run's batch
    (32 at most without one, or the largest): a search in device time prices its trials' evaluations with it."""
    if not points:
        return [], None
    task = run.sub.task
    return (measure_throughput(run, sizes, confirmed, points, timing_steps, seconds_left),
            measure_eval(run, task.val_data, int(task.batch_size or min(32, confirmed))))


def _stage_done(stages: Any, name: str) -> None:
    """One of the probe's four stages (memory model, largest batch, throughput, noise scale) is done."""
    stages.set_postfix_str(name, refresh=False)
    stages.update(1)
