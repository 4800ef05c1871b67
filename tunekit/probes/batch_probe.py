"""The batch-size and memory probe: predict first, confirm with very few real steps.

1. Trace the shared step on fake tensors at a few small batch sizes and fit a
   memory model (:mod:`tunekit.probes.memory_trace`).
2. Predict the largest micro-batch that fits the budget less a headroom, and
   confirm it with a real step whose peak is measured (CUDA: max_memory_allocated;
   CPU: peak resident memory, in a child process whose heap starts clean, so that the
   answer does not depend on what this process did before: :mod:`tunekit.probes.clean_heap`).
   Off by more than 3%, the model is refitted with that point (kernel workspaces that grow
   with the batch are found where they matter); a CUDA out-of-memory error tries smaller.
3. Measure throughput up to that batch; the knee is the smallest within 5% of the best.
4. Estimate the gradient noise scale (the critical batch size).
5. Plan (micro-batch, accumulation) pairs for a target effective batch.

The user's model, optimizer, scaler, train/eval modes, RNGs and DataLoader
generators are restored when the probe ends, however it ends.
"""

from __future__ import annotations

import contextlib
import dataclasses
import gc
import math
import os
import statistics
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any, Optional, Protocol

import numpy as np
import torch
from torch import nn

from tunekit.bytesize import format_bytes, parse_bytes
from tunekit.errors import HintedWarning, UsageError, check_int, check_number, renamed_keywords, warn_at_caller
from tunekit.inputs.data import BatchStream, Data, dataset_size
from tunekit.entry_options import NOISE_REPEATS, BatchPlan, Measurement, StepSettings
from tunekit.option_fields import grouped_keywords
from tunekit.inputs.task import ComputeLoss, LossFn, Task
from tunekit.integrations.task_spec import takes_their_objects
from tunekit.probes import clean_heap
from tunekit.probes.memory_trace import MemoryModel, Trace, calibrate, fit_memory_model, real_step_peak, static_bytes, trace_step
from tunekit.probes.noise_scale import noise_scale
from tunekit.probes.resolve import TASK_DEFAULT, resolve_inputs, step_settings
from tunekit.progress import bar
from tunekit.results import ProbeResult
from tunekit.results.probe import MEMORY_WARNING, BatchProbeSettings
from tunekit.training.schedule import lr_schedule
from tunekit.training.state import preserved, seed_everything_for
from tunekit.training.step import TrainStep, Updates, make_scaler

__all__ = ["probe", "ProbeResult", "plan_batches", "scale_lr", "find_largest_batch", "budget_bytes", "noise_cost",
           "NOISE_REPEATS", "TASK_NOISE_WARMUP"]

# The noise-scale stage: a fresh model of a Task first trains TASK_NOISE_WARMUP updates at a batch of
# at most NOISE_WARMUP_BATCH; then NOISE_REPEATS gradients at a small batch (at most NOISE_SMALL_BATCH)
# and as many at up to NOISE_MAX_ACCUM times it.
TASK_NOISE_WARMUP = 50
NOISE_WARMUP_BATCH = 32
NOISE_SMALL_BATCH = 8
NOISE_MAX_ACCUM = 16


def noise_cost(warmup: int = TASK_NOISE_WARMUP, repeats: int = NOISE_REPEATS) -> tuple[int, int]:
    """What the noise-scale stage costs at most: (optimizer steps, training samples)."""
    if repeats < 2:
        return 0, 0
    return (warmup + 2 * repeats,
            warmup * NOISE_WARMUP_BATCH + repeats * NOISE_SMALL_BATCH * (1 + NOISE_MAX_ACCUM))


def scale_lr(lr: float, from_batch: int, to_batch: int) -> dict[str, float]:
    """An LR found at one effective batch, scaled to another: linear (Goyal et al.) and square-root (Hoffer et al.)."""
    ratio = to_batch / from_batch
    return {"linear": lr * ratio, "sqrt": lr * math.sqrt(ratio)}


def plan_batches(target: int, max_batch: int, throughput: list[dict[str, float]], model: MemoryModel) -> list[dict[str, Any]]:
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


CPU_SHARE = 4  # of the machine's memory, a CPU probe's default budget


def _cpu_total_bytes() -> int:
    return int(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES"))


def _cpu_available_bytes() -> int:
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return _cpu_total_bytes()


def _is_oom(exc: BaseException) -> bool:
    """An out-of-memory error, recognised by its type (torch.OutOfMemoryError covers every device)."""
    return isinstance(exc, torch.OutOfMemoryError)


def _free_memory(device: torch.device) -> None:
    gc.collect()
    if device.type == "cuda":
        torch.cuda.empty_cache()


@renamed_keywords(max_batch="batch_limit")
@grouped_keywords(step=StepSettings, measure=Measurement, plan=BatchPlan)
@takes_their_objects
def probe(
    model: nn.Module | Task, train_data: Data | None = None, loss_fn: LossFn | None = None, optimizer: Any = None,
    *, compute_loss: ComputeLoss | None = None, memory_budget: int | str | None = None,
    step: StepSettings = StepSettings(), measure: Measurement = Measurement(), plan: BatchPlan = BatchPlan(),
    seed: int = 0, progress: bool | None = None,
) -> ProbeResult:
    """Probe memory and throughput of the shared step, and the critical batch size.

    The settings come in objects (:mod:`tunekit.entry_options`): the step (:class:`StepSettings`: its
    accumulation, clipping and precision default to a Task's recipe, as :func:`tunekit.train` resolves them),
    what is measured (:class:`Measurement`) and the run planned for (:class:`BatchPlan`); 0.1's flat
    keywords still work for a release.

    Args:
        memory_budget: bytes or "8GiB"; by default the GPU's free memory, on the CPU a run's share (a quarter
            of RAM, or what is free if less); ``measure.headroom`` of it is kept free.
        plan.target_batch: plan (micro-batch, accumulation) pairs for this effective batch (default: the critical
            batch, rounded to a power of two); ``lr`` found at effective batch ``lr_batch`` is rescaled to it
            by the linear and square-root rules.
        measure.batch_limit: the largest batch tried (0.1.0's ``max_batch=``); ``ProbeResult.max_batch`` is the largest confirmed.
        measure.noise_warmup: updates before the noise scale is measured (default 50 for a Task's fresh model, 0 for a
            model in hand), at ``lr`` or the task's default LR; undone with everything else.
        measure.calibrate_steps: measure the real steps that confirm the largest batch; 3% off, the model is refitted.
    """
    step.refuse(("batch_size", "the probe finds it: pass measure=Measurement(batch_limit=N) for the largest it tries"),
                ("scaler", "the probe steps with a GradScaler of its own"), caller="probe")
    headroom, batch_limit, trace_sizes = measure.headroom, measure.batch_limit, measure.trace_sizes
    throughput_points, timing_steps, calibrate_steps = measure.throughput_points, measure.timing_steps, measure.calibrate_steps
    noise_repeats, noise_warmup, device = measure.noise_repeats, measure.noise_warmup, step.device
    target_batch, lr, lr_batch = plan.target_batch, plan.lr, plan.lr_batch
    clip_grad_norm, accumulation_steps, precision = step_settings(model, step.clip_grad_norm, step.accumulation_steps,
                                                                  step.precision)
    _check_args(headroom, accumulation_steps, target_batch, lr, lr_batch, batch_limit)
    # A fresh model of a task trains a little first; a model in hand is measured as it is.
    noise_warmup = (TASK_NOISE_WARMUP if isinstance(model, Task) else 0) if noise_warmup is None else noise_warmup
    sub = resolve_inputs("probe", model, train_data, loss_fn, optimizer, compute_loss=compute_loss,
                          precision=precision, device=device, seed=seed)
    room = _Room.of(memory_budget, headroom, sub.device, limit=min(n_data := _dataset_size(sub.data), batch_limit or n_data))
    scaler = make_scaler(sub.precision, sub.device)  # type: ignore[arg-type]
    settings = BatchProbeSettings(task=sub.task.name, device=str(sub.device), precision=sub.precision, seed=seed, headroom=headroom,
                                  memory_budget=memory_budget, accumulation_steps=accumulation_steps, clip_grad_norm=clip_grad_norm, batch_limit=batch_limit)

    # Stages 1-4 run on the user's objects, which come back as they were however the probe ends.
    start = time.perf_counter()
    with bar(4, "probe", "stage", progress) as stages, preserved(sub.model, sub.optimizer, scaler, sub.data) as snap:
        seed_everything_for(seed, sub.device)
        sub.model.train()
        run = _Run(sub, sub.data, sub.device, snap, scaler, seed, accumulation_steps, clip_grad_norm)
        sizes = sorted({min(s, room.limit) for s in trace_sizes})
        mm, traces = _memory_model(run, sizes)  # 1. The memory model, on fake tensors.
        _stage_done(stages, "memory model")
        predicted = _predicted_largest(mm, room)
        _say_cost_ahead(sub.task, predicted, cost_ahead(predicted, sizes, throughput_points, timing_steps, accumulation_steps,
                                                         noise_repeats, noise_warmup, room.limit),
                        throughput_points, noise_repeats)
        # 2. Real steps at the batch the model recommends, measured; the model is refitted until
        # one agrees with it. What kernels allocate out of the trace's sight is found here.
        confirmed, tried, mm, measured_how = _largest_batch(run, mm, traces, room, calibrate_steps, sizes[0])
        _stage_done(stages, "largest batch")
        # 3. Throughput up to the confirmed batch (none with throughput_points=0).
        throughput = _throughput(run, sizes, confirmed, throughput_points, timing_steps)
        _stage_done(stages, "throughput")
        noise = _noise(run, confirmed, room.limit, noise_repeats, noise_warmup, lr)  # 4. Gradient noise scale.
        _stage_done(stages, "noise scale")

    # 5. What it means for a run: the critical batch, a plan for the target batch, the LR rescaled to it.
    critical = noise["b_simple"] if noise and math.isfinite(noise["b_simple"]) else None
    target, why = _target_of(target_batch, noise, critical, noise_warmup, noise_repeats, confirmed, sub.task.batch_size)
    pairs, lr_scaling = _plan(target, confirmed, throughput, mm, lr, lr_batch)
    knee, fastest = _knee(throughput)
    return ProbeResult(
        device=str(sub.device), precision=sub.precision, accumulation_steps=accumulation_steps, budget_bytes=room.budget,
        budget_source=room.source, headroom=headroom, usable_bytes=room.usable, memory=mm.to_dict(),
        predicted_max_batch=predicted, max_batch=confirmed, tried=tried, throughput=throughput, knee_batch=knee,
        fastest_batch=fastest, critical_batch=critical, noise=noise,
        critical_batch_range=(noise["low"], noise["high"]) if critical is not None else None,
        plan=pairs, plan_reason=why, lr_scaling=lr_scaling, dataset_size=n_data, seconds=time.perf_counter() - start, settings=settings,
        updates=run.counter["updates"], samples=run.counter["samples"], memory_measured=measured_how,
        run_steps=sub.task.defaults.get("max_steps"), run_batch=sub.task.batch_size,
        warnings=_warnings(throughput, noise, noise_warmup) + _measurement_warnings(measured_how))


@dataclass
class _Room:
    """The memory a probe may fill, and the largest batch the data allows."""

    budget: int
    source: str  # where the budget came from: given, free GPU memory, available RAM
    headroom: float
    usable: int  # the budget less the headroom
    limit: int  # the dataset's size, or batch_limit
    enforced: Optional[int]  # a given budget, which CUDA enforces on the real steps

    @classmethod
    def of(cls, memory_budget: int | str | None, headroom: float, dev: torch.device, limit: int) -> _Room:
        budget, source = budget_bytes(memory_budget, dev)
        return cls(budget, source, headroom, int(budget * (1 - headroom)), limit,
                   budget if memory_budget is not None else None)


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
    largest = 3 * predicted * k
    points = {max(1, int(round(x))) for x in np.geomspace(max(1, min(sizes[0], predicted)), predicted, points_n)} \
        if points_n >= 1 else set()
    throughput = sum(points) * k * (1 + max(3, timing_steps))  # (timing again replays drawn batches)
    b_small = max(1, min(NOISE_SMALL_BATCH, predicted, limit // 64 or 1))
    k_big = max(2, min(NOISE_MAX_ACCUM, limit // b_small))
    noise = warmup * min(NOISE_WARMUP_BATCH, predicted) + repeats * b_small * (1 + k_big) if repeats >= 2 else 0
    return int(largest + throughput + noise)


def _say_cost_ahead(task: Task, predicted: int, ahead: int, points_n: int, repeats: int) -> None:
    """Before the real steps: what they will cost (``ahead`` samples), said where it is more than the planned run,
    with the arguments that spend less, and none that would not (a batch_limit at or above the largest batch it tries)."""
    steps, batch = task.defaults.get("max_steps"), task.batch_size
    if not steps or not batch:
        return
    planned = int(steps) * int(batch)
    if ahead <= planned:
        return
    cap = 8 * int(batch)
    hints = ((f"measure=Measurement(batch_limit={cap})",) if cap < predicted else ()) \
        + (("measure=Measurement(throughput_points=2)",) if points_n > 2 else ()) \
        + (("measure=Measurement(noise_repeats=0)",) if repeats >= 2 else ())
    warn_at_caller(ProbeCostWarning(
        f"the probe will draw up to {ahead:,} samples, {ahead / planned:.1f}x the planned run ({steps} updates at "
        f"batch {batch}: {planned:,}); its batches go up to {predicted:,}", hints, " to spend less"))


class ProbeCostWarning(HintedWarning):
    """A probe that will cost more than the run it plans for, said before it starts its real steps."""


def _predicted_largest(mm: MemoryModel, room: _Room) -> int:
    """The traced model's largest batch, the first one the real steps try; a UsageError if not even 1 fits."""
    predicted = min(mm.largest_batch(room.usable), room.limit)
    if predicted < 1:
        raise UsageError(
            f"the model does not fit even at batch 1: predicted peak {format_bytes(mm.peak(1))} > usable "
            f"{format_bytes(room.usable)} ({format_bytes(room.budget)} less {room.headroom:.0%} headroom): "
            "raise memory_budget, use bf16, or a smaller model"
        )
    return predicted


def _knee(throughput: list[dict[str, float]]) -> tuple[Optional[int], Optional[int]]:
    """(the smallest batch within 5% of the best throughput, the fastest batch), of the timings taken while the
    machine was quiet; None without them."""
    quiet = [t for t in throughput if not t.get("busy")]  # a timing taken while the machine was busy is not acted on
    if not quiet:
        return None, None
    best = max(t["samples_per_s"] for t in quiet)
    fastest = max(quiet, key=lambda t: t["samples_per_s"])["batch"]
    return min(t["batch"] for t in quiet if t["samples_per_s"] >= 0.95 * best), fastest


# Timed steps that spread by more than this (interquartile range over the median) make the knee a guess.
NOISY_TIMINGS = 0.25


def _warnings(throughput: list[dict[str, float]], noise: Optional[dict[str, Any]], noise_warmup: int) -> list[str]:
    out = []
    noisy = [t for t in throughput if t.get("spread", 0.0) > NOISY_TIMINGS]
    if noisy:
        worst = max(noisy, key=lambda t: t["spread"])
        said = f"timings spread by up to {worst['spread']:.0%} (at batch {worst['batch']}): the machine is busy"
        busy = [t["batch"] for t in noisy if t.get("busy")]
        if busy:
            left = "every timed batch" if len(busy) == len(throughput) else "batch " + ", ".join(map(str, busy))
            said += (f"; timed again {BUSY_RETRIES} times and still spread, {left} is left out of the fastest batch, "
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
               repeats: int, largest: int, own: Optional[int]) -> tuple[int, str]:
    """:func:`_target` from the noise scale as measured: a plan rests on the critical batch only where it was
    measured on a trained model and its interval is bounded (0..inf says nothing of it)."""
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


def _plan(target: int, confirmed: int, throughput: list[dict[str, float]], mm: MemoryModel, lr: Optional[float],
          lr_batch: Optional[int]) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """The (micro-batch, accumulation) plan for the target batch, and an LR found at ``lr_batch`` rescaled to it."""
    plan = plan_batches(target, confirmed, throughput, mm) if target else []
    lr_scaling: dict[str, Any] = {}
    if lr is not None and lr_batch is not None and target:
        for rule, value in scale_lr(lr, lr_batch, target).items():
            lr_scaling[rule] = {"from_lr": lr, "from_batch": lr_batch, "to_batch": target, "lr": value}
    return plan, lr_scaling


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


def budget_bytes(memory_budget: int | str | None, dev: torch.device) -> tuple[int, str]:
    """(the memory budget in bytes, where it came from)."""
    if memory_budget is not None:
        return parse_bytes(memory_budget), "given"
    if dev.type == "cuda":
        free, _ = torch.cuda.mem_get_info(dev)
        return int(free + torch.cuda.memory_allocated(dev)), "free GPU memory"
    # A CPU run shares its machine: a quarter of its memory is what one would sensibly take (the whole of
    # the free memory let a Trainer's probe run the whole dataset as one batch, 4.66 GiB, on a shared machine).
    share = _cpu_total_bytes() // CPU_SHARE
    available = _cpu_available_bytes()
    if available <= share:
        return available, "available RAM"
    return share, f"1/{CPU_SHARE} of this machine's RAM, a CPU run's share; a larger memory_budget for more"


@dataclass
class _Run:
    """What every stage of one probe shares; ``reset`` puts the model back between stages."""

    sub: Any
    data: Data
    dev: torch.device
    snap: Any
    scaler: Any
    seed: int
    k: int  # accumulation_steps
    clip_grad_norm: Optional[float]
    counter: dict[str, int] = field(default_factory=lambda: {"updates": 0, "samples": 0})  # real ones, for the result

    def make_step(self, m: nn.Module, o: torch.optim.Optimizer, k: Optional[int] = None) -> TrainStep:
        """The shared step over ``m`` and ``o`` (the user's, or a trace's copies, which get a scaler of their own)."""
        sub = self.sub
        return _CountingStep(self.counter, m, o, sub.compute, device=self.dev, precision=sub.precision,
                             accumulation_steps=self.k if k is None else k, clip_grad_norm=self.clip_grad_norm,
                             scaler=self.scaler if m is sub.model else make_scaler(sub.precision, self.dev))

    def reset(self) -> None:
        self.snap.restore()
        self.sub.model.train()


def _memory_model(run: _Run, sizes: list[int]) -> tuple[MemoryModel, dict[int, Trace]]:
    """Traces at ``sizes`` on fake tensors (two micro-batches when accumulating: the second runs with
    the first one's gradients alive), and the memory model fitted to them."""
    try:
        traces = {b: _trace_at(run, b) for b in sizes}
    except Exception:
        _real_loss(run, sizes[0])  # a loss the fake tensors cannot follow (a loss.item()): said as the real step says it
        raise
    return fit_memory_model(traces, run.k), traces


def _real_loss(run: _Run, b: int) -> None:
    """One real forward of the shared step at batch ``b``, without gradients: its UsageError for a bad loss."""
    batch = BatchStream(run.data, b, seed=run.seed).take(1)[0]
    with torch.no_grad():
        run.make_step(run.sub.model, run.sub.optimizer, 1).forward(batch)


def _trace_at(run: _Run, b: int) -> Trace:
    k_trace = min(run.k, 2)
    batches = BatchStream(run.data, b, seed=run.seed).take(k_trace)
    return trace_step(run.sub.model, run.sub.optimizer, lambda m, o: run.make_step(m, o, k_trace), batches, run.dev)


# A confirmation step whose measured peak is within this of the prediction confirms the model;
# further off, the model is refitted with that point and the new largest batch confirmed again.
CONFIRM_TOLERANCE = 0.03


class _Predictor(Protocol):
    def largest_batch(self, budget_bytes: float, limit: int = ...) -> int: ...

    def peak(self, batch: int | float) -> float: ...


def find_largest_batch(run_step: Callable[[int], Optional[float]], refit: Callable[[dict[int, float]], _Predictor],
                       usable: float, limit: int, *, tolerance: float = CONFIRM_TOLERANCE, max_steps: int = 6,
                       free: Callable[[], None] = gc.collect) -> tuple[int, list[dict[str, Any]], _Predictor]:
    """The largest micro-batch that fits ``usable`` bytes, confirmed by real steps: (batch, tries, model).

    ``run_step(b)`` runs one real step at micro-batch ``b`` and returns its measured peak, on the
    prediction's scale (None where it cannot be measured); it raises ``torch.OutOfMemoryError``
    where the batch does not fit. ``refit(measured)`` is the memory model refitted with the
    measured {batch: peak} points. Each try runs at the batch the latest model says is the
    largest; a measurement more than ``tolerance`` off the prediction refits the model and tries
    again, so the tries land on the recommended batch. The answer is the largest batch that
    ran and was measured within ``usable``, never one that was only predicted to fit.
    """
    tried: list[dict[str, Any]] = []
    measured: dict[int, float] = {}
    model = refit(measured)
    best, ceiling = 0, limit + 1  # the largest batch seen to fit, the smallest seen not to
    b = min(model.largest_batch(usable), limit)
    while 1 <= b < ceiling and len(tried) < max_steps:
        predicted = model.peak(b)
        peak, oom = _attempt(run_step, b)
        if oom:
            free()  # outside the except block, whose traceback held the step's tensors
            tried.append({"batch": b, "ok": False, "peak_bytes": None, "predicted_bytes": predicted})
            # One OOM: the prediction was a little off, step back 20%. Two: it is badly off
            # (memory outside the step), so halve.
            ooms = sum(t["peak_bytes"] is None and not t["ok"] for t in tried)
            ceiling, b = b, int(b * (0.8 if ooms == 1 else 0.5))
            if b <= best:  # a batch that ran is as far as the search gets below this one
                break
            continue
        fits = peak is None or peak <= usable
        tried.append({"batch": b, "ok": fits, "peak_bytes": peak, "predicted_bytes": predicted})
        best, ceiling = (max(best, b), ceiling) if fits else (best, min(ceiling, b))
        # Below a batch measured over, by more than the measurement's own wobble: no creeping down one by one.
        step_below = int(ceiling * (1 - tolerance / 2)) if ceiling <= limit else limit
        if peak is None:
            break
        measured[b] = peak
        model = refit(measured)  # every measured point in, the confirming one too: the model reports peaks
        if fits and abs(peak - predicted) <= tolerance * predicted:
            break
        b = min(model.largest_batch(usable), limit, step_below)
        if b <= best * (1 + tolerance):  # nothing larger fits, or too little larger to tell apart
            break
    return best, tried, model


def _attempt(run_step: Callable[[int], Optional[float]], b: int) -> tuple[Optional[float], bool]:
    """(measured peak, False), or (None, True) on an out-of-memory error; any other error propagates."""
    try:
        return run_step(b), False
    except Exception as exc:
        if not _is_oom(exc):
            raise
    return None, True


@contextlib.contextmanager
def cuda_budget(dev: torch.device, budget: Optional[int]) -> Iterator[None]:
    """On CUDA, a given budget enforced with the per-process memory fraction, so a batch over it
    raises an out-of-memory error; lifted afterwards."""
    if dev.type != "cuda" or budget is None:
        yield
        return
    total = torch.cuda.get_device_properties(dev).total_memory
    torch.cuda.set_per_process_memory_fraction(min(1.0, budget / total), dev)
    try:
        yield
    finally:
        torch.cuda.set_per_process_memory_fraction(1.0, dev)


@contextlib.contextmanager
def _measuring_child(dev: torch.device, calibrate_steps: bool) -> Iterator[Optional[clean_heap.CleanHeapSteps]]:
    """On the CPU, the child process that measures the real steps (the process's first probe that
    measures starts it); None on CUDA, without calibration, or where it cannot run."""
    if dev.type != "cpu" or not calibrate_steps or clean_heap.available() is not None:
        yield None
        return
    with clean_heap.steps_child() as child:
        yield child


# How far apart two readings of one step's peak resident memory may be (benchmarks/probe_accuracy.py),
# relative and absolute: a measured peak within RESIDENT_PAGES of the traced one is the traced one (a
# tiny step reads a few pages either way, and a refit on those would move the answer between calls).
RESIDENT_NOISE = 0.005
RESIDENT_PAGES = 1 << 20
# Real steps are not measured where the whole data's batch is traced under 1/FAR_BELOW of the budget.
FAR_BELOW = 8
# How the real steps' peaks were measured, as the result states it.
MEASURED_IN_CHILD = ("peak resident memory of each real step in a child process whose heap starts clean "
                     "(glibc's mmap threshold pinned at 64 KiB): the same whatever this process did before")
MEASURED_IN_PROCESS = "peak resident memory of each real step in this process"
IN_PROCESS_CAVEAT = "it may read higher after other work in this process"


def _far_below(mm: MemoryModel, room: _Room) -> Optional[str]:
    """Why the real steps need no measuring, where the largest batch the data (or batch_limit) allows is
    traced at under 1/FAR_BELOW of the usable budget: what kernels allocate beyond the trace (up to
    4x it, an LSTM's workspace) cannot make it miss. None where the budget may bind."""
    peak = mm.peak(room.limit)
    if peak * FAR_BELOW > room.usable:
        return None
    return (f"not measured: at batch {room.limit}, the largest the data or batch_limit allows, the traced peak "
            f"{format_bytes(peak)} is under 1/{FAR_BELOW} of the usable {format_bytes(room.usable)}")


def _measurement(run: _Run, child: Optional[clean_heap.CleanHeapSteps], calibrate_steps: bool) -> tuple[bool, str]:
    """(whether the child measures the steps, how the result says they were measured)."""
    if run.dev.type == "cuda":
        return False, "torch.cuda.max_memory_allocated of each real step"
    if not calibrate_steps:
        return False, "not measured (calibrate_steps=False): the traced model, confirmed by a step that ran"
    why = clean_heap.available() if child is None else _too_big_to_copy(run)
    if why is None and child is not None:
        why = child.load(run.sub.model, run.sub.optimizer, run.sub.compute, clean_heap.StepSettings(
            run.sub.precision, run.k, run.clip_grad_norm, run.seed, torch.get_num_threads()))
    if why is None:
        return True, MEASURED_IN_CHILD
    return False, f"{MEASURED_IN_PROCESS}, as {why}; {IN_PROCESS_CAVEAT}"


def _too_big_to_copy(run: _Run) -> Optional[str]:
    """Why the model should not be copied to the measuring child, where its two copies there (the one
    sent and the one a step loads) would take over half the available RAM; else None."""
    state = sum(static_bytes(run.sub.model, run.sub.optimizer)[k] for k in ("params", "buffers", "optimizer"))
    available = _cpu_available_bytes()
    if 2 * state <= available / 2:
        return None
    return (f"two copies of the model and optimizer state ({format_bytes(2 * state)}) would take over half the "
            f"available RAM ({format_bytes(available)})")


def _measurement_warnings(how: str) -> list[str]:
    return [f"{MEMORY_WARNING}{how}"] if how.startswith(MEASURED_IN_PROCESS) else []


def _largest_batch(run: _Run, mm: MemoryModel, traces: dict[int, Trace], room: _Room, calibrate_steps: bool,
                   warm_up_batch: int = 4) -> tuple[int, list[dict[str, Any]], MemoryModel, str]:
    """The largest batch that fits, confirmed by real steps (:func:`_confirmed`); on the CPU measured in
    the process's measuring child, unless the budget cannot bind. Returns the confirmed batch, the
    tries, the memory model and how the steps were measured."""
    far_below = _far_below(mm, room) if calibrate_steps and run.dev.type == "cpu" else None
    calibrate_steps = calibrate_steps and far_below is None
    with _measuring_child(run.dev, calibrate_steps) as child:
        confirmed, tried, model, how = _confirmed(run, mm, traces, room, calibrate_steps, child, warm_up_batch)
    return confirmed, tried, model, far_below or how


def _confirmed(run: _Run, mm: MemoryModel, traces: dict[int, Trace], room: _Room, calibrate_steps: bool,
               child: Optional[clean_heap.CleanHeapSteps],
               warm_up_batch: int) -> tuple[int, list[dict[str, Any]], MemoryModel, str]:
    """The probe's search for the largest batch: real steps through the shared step at the batches
    the memory model recommends, each measured and traced, the model calibrated on them.
    Without ``calibrate_steps`` one step confirms the trace's prediction and nothing is refitted.
    On the CPU the steps run in ``child`` (a copy of the objects, a clean heap) where it can take them."""
    real: dict[int, int] = {}  # peak above the level before the step, as real_step_peak measures it
    in_child, how = _measurement(run, child, calibrate_steps)

    def in_process(batches: list[Any]) -> Optional[int]:
        step = run.make_step(run.sub.model, run.sub.optimizer)
        try:
            return real_step_peak(lambda: step(batches), run.dev)
        finally:
            run.reset()

    def in_the_child(batches: list[Any]) -> Optional[int]:
        assert child is not None
        warm = None if child.warm else BatchStream(run.data, warm_up_batch, seed=run.seed).take(run.k)
        try:
            got = child.measure(batches, warm_up=warm)
        except clean_heap.ChildOutOfMemory as exc:
            raise torch.OutOfMemoryError(f"out of memory in the probe's measuring process: {exc}") from None
        except clean_heap.ChildStepError:
            return in_process(batches)  # the user's own error, raised here as theirs
        run.counter["updates"] += 1 + (warm is not None)  # the child's steps are the probe's cost too
        run.counter["samples"] += got.samples
        return got.peak_bytes

    def run_step(b: int) -> Optional[float]:
        if b not in traces:
            traces[b] = _trace_at(run, b)  # fake tensors: no memory, a fraction of a second
        batches = BatchStream(run.data, b, seed=run.seed).take(run.k)
        delta = in_the_child(batches) if in_child else in_process(batches)
        del batches
        if delta is None or not calibrate_steps:
            return None
        traced = max(traces[b].peaks.values()) - traces[b].resident
        if run.dev.type == "cpu" and abs(delta - traced) < RESIDENT_PAGES:
            delta = traced
        real[b] = delta
        return traces[b].resident + delta

    def refit(measured: dict[int, float]) -> MemoryModel:
        if not measured:
            return mm
        return calibrate(fit_memory_model(traces, run.k), traces, {b: real[b] for b in measured})

    with cuda_budget(run.dev, room.enforced):
        # Resident memory reads a few pages apart from one run of a step to the next (0.2% at 256 MiB):
        # the confirmed batch keeps that far below the budget, so that it is never over it.
        usable = room.usable if run.dev.type == "cuda" else int(room.usable * (1 - RESIDENT_NOISE))
        confirmed, tried, model = find_largest_batch(run_step, refit, usable, room.limit,
                                                     free=lambda: _free_memory(run.dev))
    if confirmed < 1:
        raise UsageError(f"no batch size ran within the budget (tried {[t['batch'] for t in tried]}): raise memory_budget")
    return confirmed, tried, model, how  # type: ignore[return-value]


def _noise(run: _Run, confirmed: int, limit: int, repeats: int, warmup: int, lr: Optional[float]) -> Optional[dict[str, Any]]:
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
        step = _CountingStep(run.counter, sub.model, sub.optimizer, sub.compute, device=run.dev, precision=sub.precision,
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


def _warm_up(run: _Run, updates: int, lr: float, batch: int) -> None:
    """Train for ``updates`` updates on the shared schedule (linear warm-up over the first fifth, then
    constant), as ``train()`` would; a divergence ends it early."""
    lrs = lr_schedule(updates, lr, warmup=updates // 5, decay="constant")
    stream = BatchStream(run.data, batch, seed=run.seed + 2)
    for _ in Updates(run.make_step(run.sub.model, run.sub.optimizer), stream, lrs):
        pass


# Timed points whose steps spread by more than NOISY_TIMINGS (the machine was busy: another job started or
# stopped) are timed again, at most BUSY_RETRIES times; those still spread are marked busy and not acted on.
BUSY_RETRIES = 2


def _time_step(step: Callable[[], Any]) -> float:
    """Seconds one step takes (the loss read inside syncs the device): the one clock the timed steps read, and
    the seam a test replaces with a scripted one."""
    t0 = time.perf_counter()
    step()
    return time.perf_counter() - t0


def _spread(ts: list[float]) -> float:
    """How far apart the timed steps are: their interquartile range over the median. One slow step (a
    collection, the scheduler) moves it little; a load that lasts through the rounds moves it a lot."""
    if len(ts) < 2:
        return 0.0
    q1, _, q3 = statistics.quantiles(ts, n=4, method="inclusive")
    return (q3 - q1) / statistics.median(ts)


def _throughput(run: _Run, sizes: list[int], confirmed: int, points_n: int, timing_steps: int) -> list[dict[str, Any]]:
    """Samples per second at ``points_n`` micro-batches up to ``confirmed``: a warm-up step at each, then
    rounds that time one step at every point, the median per point. Interleaved, a change in the
    machine's load falls on every point alike, and the curve that prices a search keeps its shape.
    A point whose steps spread by more than NOISY_TIMINGS was timed on a busy machine: it is timed again
    (``remeasured``, up to BUSY_RETRIES times), and where it is still spread marked ``busy``: the knee, the
    plan and a search's prices leave it out. Timing again replays the batch the point last drew: it costs
    device time, not samples, so the probe's samples are the same however busy the machine was."""
    if points_n < 1:
        return []
    points = sorted({max(1, int(round(x))) for x in np.geomspace(max(1, min(sizes[0], confirmed)), confirmed, points_n)})
    steps: dict[int, Callable[[], Any]] = {}
    again: dict[int, Callable[[], Any]] = {}  # a step on the batch the point last drew
    drawn: dict[int, Any] = {}
    for pb in points:
        step, stream = run.make_step(run.sub.model, run.sub.optimizer), BatchStream(run.data, pb, seed=run.seed)
        step.set_lr(0.0)  # measure speed, not learning: the weights stay put

        def draw_and_step(step: Any = step, stream: BatchStream = stream, pb: int = pb) -> Any:
            drawn[pb] = stream.take(run.k)
            return step(drawn[pb])
        steps[pb], again[pb] = draw_and_step, (lambda step=step, pb=pb: step(drawn[pb]))
    warm = sum(_time_step(steps[pb]) for pb in points)  # a warm-up step at each
    # Several rounds for the medians, but about two seconds per point at most.
    rounds = max(3, min(timing_steps, int(2.0 * len(points) / max(warm, 1e-6))))
    times = _timed_rounds(steps, points, rounds)
    remeasured, counted = dict.fromkeys(points, 0), dict(run.counter)
    for _ in range(BUSY_RETRIES):
        busy = [pb for pb in points if _spread(times[pb]) > NOISY_TIMINGS]
        if not busy:
            break
        times.update(_timed_rounds(again, busy, rounds))
        for pb in busy:
            remeasured[pb] += 1
    run.counter.update(counted)  # the replays drew no new samples
    run.reset()
    return [{"batch": pb, "samples_per_s": pb * run.k / statistics.median(ts), "spread": _spread(ts),
             "remeasured": remeasured[pb], "busy": _spread(ts) > NOISY_TIMINGS} for pb, ts in times.items()]


def _timed_rounds(steps: dict[int, Callable[[], Any]], points: list[int], rounds: int) -> dict[int, list[float]]:
    """``rounds`` rounds that time one step at each of ``points``, interleaved."""
    times: dict[int, list[float]] = {pb: [] for pb in points}
    for _ in range(rounds):
        for pb in points:
            times[pb].append(_time_step(steps[pb]))
    return times


class _CountingStep(TrainStep):
    """A TrainStep that counts the real updates it makes (not the fake-tensor traces)."""

    def __init__(self, counter: dict[str, int], *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.counter = counter

    def __call__(self, micro_batches: Any) -> Any:
        out = super().__call__(micro_batches)
        self.counter["updates"] += 1
        self.counter["samples"] += int(out.samples)
        return out


def _stage_done(stages: Any, name: str) -> None:
    """One of the probe's four stages (memory model, largest batch, throughput, noise scale) is done."""
    stages.set_postfix_str(name, refresh=False)
    stages.update(1)
