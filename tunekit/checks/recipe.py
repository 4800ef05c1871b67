"""Check 7, the recipe: the intended LR against a range test, the warmup's share of the run, and the
memory headroom at the intended batch."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any, Optional

import torch
from torch import nn

from tunekit.inputs.data import Batch, batch_size_of
from tunekit.probes.memory_trace import fit_memory_model, trace_step
from tunekit.training.schedule import Warmup, warmup_steps
from tunekit.bytesize import format_bytes
from tunekit.results import Finding

__all__ = ["check_lr", "far_off", "check_warmup", "check_memory", "LR_FAR", "WARMUP_MAX", "HEADROOM"]

CHECK = "recipe"

# Final loss against the peak LR is flat within a few times the best LR and rises steeply beyond a
# decade (lr_regret, git tag legacy-lr-benchmarks): an LR more than 10x from the range test's suggestion is off.
LR_FAR = 10.0
# A common rule of thumb: warmup beyond 10% of the run spends its updates below the peak LR for
# no gain in stability.
WARMUP_MAX = 0.10
# Keep 15% of the memory free, as the probe does: allocator fragmentation and the peaks of
# kernels that no trace sees.
HEADROOM = 0.15


# Where the doctor's own suggestion comes from, said next to its number: it is cheaper than
# tunekit lr-find's (the curve alone), so the two may differ.
QUICK = "the quick range test's (the curve alone, no short runs)"


def far_off(lr: float, suggestion: float) -> bool:
    """Whether ``lr`` lies more than LR_FAR from ``suggestion``, either way."""
    return not 1 / LR_FAR <= lr / suggestion <= LR_FAR


def check_lr(lr: Optional[float], suggestion: Optional[float], confident: bool, source: str = QUICK,
             lr_finds: Optional[Callable[[], Optional[float]]] = None) -> list[Finding]:
    """Where the intended ``lr`` sits against a range test's ``suggestion`` (``source`` says whose); an LR far
    off is told to try ``lr_finds()``, lr_find's own answer (called only then: the curve alone can be 7x from
    it), else the suggestion. Said in the API's terms (``lr=``, ``lr_find_result=``); the CLI says its flags."""
    refine = "" if source != QUICK else ('; lr_find\'s short runs refine it, and lr_find_result="lr_find.json" '
                                         "compares with its result instead")
    if lr is None:
        if suggestion is None and source == QUICK:  # no LR to compare, so no range test ran: say so, claim nothing
            return [Finding(CHECK, "info", "no LR given, so none was checked and no range test ran (lr=... compares "
                            'yours with one; lr_find_result="lr_find.json" with lr_find\'s saved result)', {"source": None})]
        return [Finding(CHECK, "info", f"no LR given (lr=...): {source} suggestion is "
                        f"{'none' if suggestion is None else f'{suggestion:.3g}'}", {"suggestion": suggestion, "source": source})]
    if suggestion is None or not confident:
        return [Finding(CHECK, "info", f"lr {lr:.3g}: {source} has no confident suggestion to compare with",
                        {"lr": lr, "suggestion": suggestion, "source": source})]
    ratio = lr / suggestion
    evidence = {"lr": lr, "suggestion": suggestion, "ratio": ratio, "source": source}
    if far_off(lr, suggestion):
        side = "above" if ratio > 1 else "below"
        times = ratio if ratio > 1 else 1 / ratio
        return [Finding(CHECK, "warn", f"lr {lr:.3g} is {times:.0f}x {side} {source} suggestion {suggestion:.3g}",
                        evidence, _try(suggestion, lr_finds, evidence))]
    return [Finding(CHECK, "pass", f"lr {lr:.3g} is within {LR_FAR:.0f}x of {source} suggestion {suggestion:.3g}"
                    + refine, evidence)]


def _try(suggestion: float, lr_finds: Optional[Callable[[], Optional[float]]], evidence: dict[str, Any]) -> str:
    """The fix of an LR far off: the LR lr_find gives (recorded as ``lr_find``), never the curve's own where
    lr_find moves it (its short runs, or the carry to the planned run's passes over its data)."""
    if lr_finds is None:
        return f"try lr={suggestion:.2g}"
    answer = evidence["lr_find"] = lr_finds()
    if answer is None:
        return "lr_find gives no suggestion to try either: its reasons say why"
    moved = "" if math.isclose(answer, suggestion, rel_tol=0.1) else f", moved from the curve's {suggestion:.2g} for your run"
    return f"try lr={answer:.2g} (lr_find's suggestion{moved})"


def check_warmup(warmup: Optional[Warmup], steps: Optional[int]) -> list[Finding]:
    """Whether ``warmup`` (a fraction, or updates of a run of ``steps``) exceeds WARMUP_MAX of the run."""
    if warmup is None:
        return []
    if steps is None:
        if isinstance(warmup, float) and warmup < 1:
            steps = 1000  # a fraction is a fraction of any run
        else:
            return [Finding(CHECK, "info", f"warmup {warmup} updates: give run_steps=... to compare it with the run")]
    n = warmup_steps(warmup, steps)
    frac = n / steps
    evidence = {"warmup_updates": n, "steps": steps, "fraction": frac}
    if frac > WARMUP_MAX:
        return [Finding(CHECK, "warn", f"warmup is {frac:.0%} of the run ({n} of {steps} updates), over {WARMUP_MAX:.0%}",
                        evidence, f"warm up over at most {WARMUP_MAX:.0%} of the run, e.g. warmup={min(0.05, WARMUP_MAX):g}")]
    return [Finding(CHECK, "pass", f"warmup is {frac:.0%} of the run", evidence)]


def check_memory(model: nn.Module, optimizer: torch.optim.Optimizer, make_step: Callable[[nn.Module, Any], Any],
                 batches: Sequence[Batch], batch_size: int, budget: int, source: str, device: torch.device,
                 accumulation_steps: int = 1) -> list[Finding]:
    """Peak memory of the shared step at ``batch_size`` from the probe's memory model (traces on fake
    tensors of ``batches``, two small batches), against ``budget`` less HEADROOM."""
    try:
        traces = {batch_size_of(b): trace_step(model, optimizer, make_step, [b], device) for b in batches}
        mm = fit_memory_model(traces, accumulation_steps)
        peak = mm.peak(batch_size)
    except Exception as exc:  # a model the fake-tensor trace cannot follow: say so, do not guess
        return [Finding(CHECK, "info", f"memory not predicted: the step could not be traced ({type(exc).__name__})")]
    free = 1 - peak / budget
    evidence = {"peak_bytes": peak, "budget_bytes": budget, "budget_source": source, "free": free, "batch": batch_size}
    what = f"predicted peak {format_bytes(peak)} at batch {batch_size} of {format_bytes(budget)} ({source})"
    if peak > budget:
        return [Finding(CHECK, "fail", f"out of memory: {what}", evidence,
                        "lower the micro-batch and accumulate (accumulation_steps=...), or use bf16 (tunekit probe)")]
    if free < HEADROOM:
        return [Finding(CHECK, "warn", f"only {free:.0%} memory headroom: {what}", evidence,
                        f"keep {HEADROOM:.0%} free: a smaller micro-batch with accumulation (tunekit probe)")]
    shown = "over 99%" if free > 0.99 else f"{free:.0%}"  # "100% free" would read as nothing used
    return [Finding(CHECK, "pass", f"{shown} memory free: {what}", evidence)]

