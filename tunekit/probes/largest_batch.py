"""The probe's largest batch: real steps at the batch the memory model recommends, each measured, the
model refitted until one agrees with it (:func:`find_largest_batch`).

Measured how the device allows: on CUDA ``torch.cuda.max_memory_allocated``, on the CPU the peak
resident memory in a child process whose heap starts clean (:mod:`.clean_heap`), else in this
process, said in the result. What kernels allocate out of the trace's sight is found here; an
out-of-memory error steps back.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from typing import Any, Optional, Protocol

import torch

from tunekit.bytesize import format_bytes
from tunekit.errors import UsageError
from tunekit.inputs.data import BatchStream
from tunekit.probes import clean_heap
from tunekit.probes.memory_trace import MemoryModel, Trace, calibrate, fit_memory_model, real_step_peak, static_bytes
from tunekit.probes.probe_run import ProbeRun, Room, cpu_available_bytes, trace_at
from tunekit.probes.safety_margin import Settled, peak_margin, settle, unmeasured
from tunekit.results.probe import MEMORY_WARNING
from tunekit.training.memory import free_memory, is_oom

__all__ = ["largest_batch", "find_largest_batch", "cuda_budget", "measurement_warnings", "CONFIRM_TOLERANCE",
           "MEASURED_IN_CHILD", "MEASURED_IN_PROCESS", "IN_PROCESS_CAVEAT"]


# A confirmation step whose measured peak is within this of the prediction confirms the model;
# further off, the model is refitted with that point and the new largest batch confirmed again.
CONFIRM_TOLERANCE = 0.03


class _Predictor(Protocol):
    def largest_batch(self, budget_bytes: float, limit: int = ...) -> int: ...

    def peak(self, batch: int | float) -> float: ...


def find_largest_batch(run_step: Callable[[int], Optional[float]], refit: Callable[[dict[int, float]], _Predictor],
                       usable: float, limit: int, *, tolerance: float = CONFIRM_TOLERANCE, max_steps: int = 6,
                       free: Callable[[], None] = free_memory) -> tuple[int, list[dict[str, Any]], _Predictor]:
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
        if not is_oom(exc):
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


# What resident memory resolves: two readings of one step on the same data differ by a few pages (a tiny
# step reads a few pages either way); the margin below the budget is never less.
RESIDENT_PAGES = 1 << 20
# Real steps are not measured where the whole data's batch is traced under 1/FAR_BELOW of the budget.
FAR_BELOW = 8
# How the real steps' peaks were measured, as the result states it.
MEASURED_IN_CHILD = ("peak resident memory of each real step in a child process whose heap starts clean "
                     "(glibc's mmap threshold pinned at 64 KiB): the same whatever this process did before")
MEASURED_IN_PROCESS = "peak resident memory of each real step in this process"
IN_PROCESS_CAVEAT = "it may read higher after other work in this process"


def _far_below(mm: MemoryModel, room: Room) -> Optional[str]:
    """Why the real steps need no measuring, where the largest batch the data (batch_limit, the cost cap) allows is
    traced at under 1/FAR_BELOW of the usable budget: what kernels allocate beyond the trace (up to
    4x it, an LSTM's workspace) cannot make it miss. None where the budget may bind."""
    peak = mm.peak(room.limit)
    if peak * FAR_BELOW > room.usable:
        return None
    return (f"not measured: at batch {room.limit}, the largest the data, batch_limit or the probe's cost cap allows, "
            f"the traced peak "
            f"{format_bytes(peak)} is under 1/{FAR_BELOW} of the usable {format_bytes(room.usable)}")


def _measurement(run: ProbeRun, child: Optional[clean_heap.CleanHeapSteps], calibrate_steps: bool) -> tuple[bool, str]:
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


def _too_big_to_copy(run: ProbeRun) -> Optional[str]:
    """Why the model should not be copied to the measuring child, where its two copies there (the one
    sent and the one a step loads) would take over half the available RAM; else None."""
    state = sum(static_bytes(run.sub.model, run.sub.optimizer)[k] for k in ("params", "buffers", "optimizer"))
    available = cpu_available_bytes()
    if 2 * state <= available / 2:
        return None
    return (f"two copies of the model and optimizer state ({format_bytes(2 * state)}) would take over half the "
            f"available RAM ({format_bytes(available)})")


def measurement_warnings(how: str) -> list[str]:
    return [f"{MEMORY_WARNING}{how}"] if how.startswith(MEASURED_IN_PROCESS) else []


def largest_batch(run: ProbeRun, mm: MemoryModel, traces: dict[int, Trace], room: Room, calibrate_steps: bool,
                   warm_up_batch: int = 4) -> tuple[Settled, list[dict[str, Any]], MemoryModel, str]:
    """The largest batch that fits with its margin, confirmed by real steps (:func:`_confirmed`); on the CPU
    measured in the process's measuring child, unless the budget cannot bind. Returns the settled batch (its
    predicted peak and margin), the tries, the memory model and how the steps were measured."""
    far_below = _far_below(mm, room) if calibrate_steps and run.dev.type == "cpu" else None
    calibrate_steps = calibrate_steps and far_below is None
    with _measuring_child(run.dev, calibrate_steps) as child:
        settled, tried, model, how = _confirmed(run, mm, traces, room, calibrate_steps, child, warm_up_batch)
    if far_below is not None:  # the margin's words say why the peak was not read again
        settled = Settled(settled.batch, settled.peak_bytes,
                          unmeasured(settled.peak_bytes, 0.0, "none needed: the peak is far below the budget"))
    return settled, tried, model, far_below or how


def _confirmed(run: ProbeRun, mm: MemoryModel, traces: dict[int, Trace], room: Room, calibrate_steps: bool,
               child: Optional[clean_heap.CleanHeapSteps], warm_up_batch: int) -> tuple[Settled, list[dict[str, Any]], MemoryModel, str]:
    """The probe's search for the largest batch: real steps through the shared step at the batches the memory
    model recommends, each measured and traced, the model calibrated on them; then the answer with the margin its
    peak's readings on two draws of the data justify (:func:`_settled`). Without ``calibrate_steps`` one unmeasured
    step shows the batch runs. On the CPU the steps run in ``child`` (a clean heap) where it can take them."""
    real: dict[int, int] = {}  # peak above the level before the step: the reading, or the trace where larger
    raw: dict[int, int] = {}  # the reading itself, as real_step_peak measures it
    in_child, how = _measurement(run, child, calibrate_steps)
    lost: list[str] = []  # why the child could not be replaced, where one died and its successor failed
    replaced_before = child.replaced if child is not None else 0

    def in_process(batches: list[Any]) -> Optional[int]:
        step = run.make_step(run.sub.model, run.sub.optimizer)
        try:
            return real_step_peak(lambda: step(batches), run.dev)
        finally:
            run.reset()

    def in_the_child(batches: list[Any]) -> Optional[int]:
        assert child is not None
        if lost:
            return in_process(batches)
        for attempt in (1, 2):
            warm = None if child.warm else BatchStream(run.data, warm_up_batch, seed=run.seed).take(run.k)
            try:
                got = child.measure(batches, warm_up=warm)
                break
            except clean_heap.ChildOutOfMemory as exc:
                if child.alive() or attempt == 2:  # its own out-of-memory error, or killed twice at this batch
                    raise torch.OutOfMemoryError(f"out of memory in the probe's measuring process: {exc}") from None
                # Killed (the kernel's OOM killer, or a signal from outside): this batch again in a fresh
                # child tells which; without one, the steps run here from now on.
                why = child.replace()
                if why is not None:
                    lost.append(why)
                    return in_process(batches)
            except clean_heap.ChildStepError:
                return in_process(batches)  # the user's own error, raised here as theirs
        run.counter["updates"] += 1 + (warm is not None)  # the child's steps are the probe's cost too
        run.counter["samples"] += got.samples
        return got.peak_bytes

    def reading(b: int, draw: int) -> Optional[int]:
        """One real step's peak above the resident state at ``b`` on the ``draw``-th draw of the data."""
        batches = BatchStream(run.data, b, seed=run.seed + draw).take(run.k)
        delta = in_the_child(batches) if in_child else in_process(batches)
        del batches
        return delta if calibrate_steps else None

    def run_step(b: int) -> Optional[float]:
        if not calibrate_steps:  # the step only shows the batch runs: no reading, so no trace to weigh it against
            return _plain_step(run, b)
        if b not in traces:
            traces[b] = trace_at(run, b)  # fake tensors: no memory, a fraction of a second
        delta = reading(b, 0)
        if delta is None:
            return None
        # Where the trace and the measurement disagree, the larger: a reading below the trace may have missed
        # pages the next step touches. Within a few pages they agree (a refit on those would move the answer).
        traced = max(traces[b].peaks.values()) - traces[b].resident
        raw[b] = delta
        real[b] = traced if run.dev.type == "cpu" and abs(delta - traced) < RESIDENT_PAGES else max(delta, traced)
        return traces[b].resident + real[b]

    def refit(measured: dict[int, float]) -> MemoryModel:
        if not measured:
            return mm
        return calibrate(fit_memory_model(traces, run.k), traces, {b: real[b] for b in measured})

    resolution = _resolution(run.dev, room.usable)
    with cuda_budget(run.dev, room.enforced):
        # The search keeps the resolution below the budget, so that fixed shapes need no step down after it.
        confirmed, tried, model = find_largest_batch(run_step, refit, room.usable - resolution, room.limit,
                                                     free=free_memory)
        if confirmed < 1:
            raise UsageError(f"no batch size ran within the budget (tried {[t['batch'] for t in tried]}): raise memory_budget")
        first = (raw[confirmed], real[confirmed], traces[confirmed].resident) if confirmed in real else None
        settled = _settled(run, room, model, tried, confirmed, first, lambda b: reading(b, 1), calibrate_steps)
    return settled, tried, model, _replacements(how, child, replaced_before, lost)  # type: ignore[return-value]


def _plain_step(run: ProbeRun, b: int) -> None:
    """One real step at ``b`` that only shows the batch runs: not measured, the model put back after it."""
    batches = BatchStream(run.data, b, seed=run.seed).take(run.k)
    try:
        run.make_step(run.sub.model, run.sub.optimizer)(batches)
    finally:
        run.reset()


def _resolution(dev: torch.device, usable: float) -> int:
    """What two readings of one step on the same data may differ by, in bytes: a few pages of resident memory
    on the CPU (under a budget so small that they are a large share of it, at most an eighth of it: there the
    steps are read below what resident memory resolves, and the trace decides); max_memory_allocated counts
    single bytes."""
    return 0 if dev.type == "cuda" else int(min(RESIDENT_PAGES, usable / 8))


def _settled(run: ProbeRun, room: Room, model: MemoryModel, tried: list[dict[str, Any]], confirmed: int,
             first: Optional[tuple[int, int, int]], read_again: Callable[[int], Optional[int]],
             calibrate_steps: bool) -> Settled:
    """The answer with its margin: the peak at ``confirmed`` read again on another draw of the data
    (``read_again``, added to ``tried``), the margin from the two readings' spread, and the largest batch
    at or below ``confirmed`` that keeps it (:mod:`.safety_margin`). ``first``: the search's (reading,
    peak with the trace where larger, resident state) at ``confirmed``; None where it was not measured."""
    resolution, peak = _resolution(run.dev, room.usable), model.peak(confirmed)
    if first is None:
        why = ("not measured (calibrate_steps=False): the instrument's resolution" if not calibrate_steps
               else "the steps' peaks cannot be measured here: the instrument's resolution")
        return settle(confirmed, model, None, unmeasured(peak, resolution, why), room.usable)
    raw, real, resident = first
    second, oom = _attempt(read_again, confirmed)
    if oom:
        free_memory()
    tried.append({"batch": confirmed, "ok": not oom and second is not None and resident + second <= room.usable,
                  "peak_bytes": None if second is None else resident + second, "predicted_bytes": peak, "draw": 1})
    if oom:  # it fits one draw of the data, not another: a fifth below it, no margin measured
        below = max(1, int(confirmed * 0.8))
        why = f"batch {confirmed} ran out of memory on another draw of the data; answered 80% of it"
        return Settled(below, model.peak(below), unmeasured(peak, resolution, why))
    readings = [float(raw)] + ([float(second)] if second is not None else [])
    worst = resident + max(real, *readings)  # the trace, where larger
    instrument = "max_memory_allocated" if run.dev.type == "cuda" else "resident memory"
    margin = peak_margin(readings, max(peak, worst), resolution, confirmed, instrument)
    return settle(confirmed, model, worst, margin, room.usable)


def _replacements(how: str, child: Optional[clean_heap.CleanHeapSteps], before: int, lost: list[str]) -> str:
    """How the steps were measured, with the measuring children that died during this probe said."""
    died = (child.replaced - before) if child is not None else 0
    if not died:
        return how
    times = "once" if died == 1 else f"{died} times"
    if lost:
        return (f"{MEASURED_IN_PROCESS} after the measuring child was killed and a fresh one could not take the "
                f"objects ({lost[0]}); {IN_PROCESS_CAVEAT}")
    return (f"{how}; the child was killed {times} (as the kernel's out-of-memory killer does) and replaced, "
            "the batch it died at measured again in the fresh one")
