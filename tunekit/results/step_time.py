"""What one optimizer update costs on the user's device, read off the probe's timed steps: pure functions.

The probe times the shared step at a few micro-batches (medians of consecutive steps, as a run
takes them, on the user's device and precision). A step's time is read off those points: linearly between them
(a step costs a fixed part plus a part per sample; on a GPU the fixed part rules up to the
batch that saturates it), never faster for a larger batch (timing noise is not a discount).
Below the smallest timed batch a step costs no more than there, and no less per sample; above
the largest, the per-sample cost stays the last one's. An update of ``k`` accumulated
micro-batches costs ``k`` micro-steps.

A search prices every trial with these, so the same stored probe gives the same prices.
"""

from __future__ import annotations

import math
from typing import Any, Sequence

__all__ = ["step_curve", "micro_seconds", "update_seconds", "format_seconds"]


def step_curve(throughput: Sequence[dict[str, Any]]) -> list[list[float]]:
    """``[[micro-batch, seconds per micro-step], ...]`` from the probe's throughput points (batch,
    samples per second), by batch, the seconds made non-decreasing; [] without timings. A point timed
    while the machine was busy (``busy``: still spread after the probe timed it again) prices nothing."""
    points = sorted((int(t["batch"]), float(t["batch"]) / float(t["samples_per_s"])) for t in throughput
                    if t.get("samples_per_s") and math.isfinite(float(t["samples_per_s"])) and t["samples_per_s"] > 0
                    and not t.get("busy"))
    out: list[list[float]] = []
    for batch, seconds in points:
        if out and batch == out[-1][0]:
            continue
        out.append([batch, max(seconds, out[-1][1]) if out else seconds])
    return out


def micro_seconds(curve: Sequence[Sequence[float]], micro: float) -> float:
    """Seconds of one micro-step at ``micro`` samples, read off ``curve`` (see the module's docstring)."""
    if not curve:
        raise ValueError("no timed steps to price a step with: the probe ran without throughput points")
    (b0, t0), (bn, tn) = curve[0], curve[-1]
    if micro >= bn:
        return tn * micro / bn
    if micro <= b0:
        if len(curve) == 1:
            return t0
        b1, t1 = curve[1]
        along = t0 - (t1 - t0) / (b1 - b0) * (b0 - micro)  # the first segment, carried down
        return min(t0, max(t0 * micro / b0, along))
    for (lo, t_lo), (hi, t_hi) in zip(curve, curve[1:]):
        if lo <= micro <= hi:
            return t_lo + (t_hi - t_lo) * (micro - lo) / (hi - lo)
    raise AssertionError("unreachable: micro lies between the first and the last point")


def update_seconds(curve: Sequence[Sequence[float]], micro: int, accumulation: int = 1) -> float:
    """Seconds of one optimizer update: ``accumulation`` micro-steps of ``micro`` samples."""
    return accumulation * micro_seconds(curve, micro)


def format_seconds(seconds: float) -> str:
    """``seconds`` as people read a duration: 0.84 s, 42 s, 3.2 min, 1.5 h."""
    if seconds < 10:
        return f"{seconds:.2g} s"
    if seconds < 120:
        return f"{seconds:.0f} s"
    if seconds < 7200:
        return f"{seconds / 60:.3g} min"
    return f"{seconds / 3600:.3g} h"
