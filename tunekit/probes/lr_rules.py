"""LR suggestion rules: pure functions of a recorded range-test curve.

Every rule takes the LRs and raw losses of one range test and returns an LR (or
None when the curve gives it nothing to work with). They share one smoothing:
a local-linear Gaussian kernel fit over log10(LR). It is symmetric, so it does
not lag the way a causal moving average does, and its local slope is the
derivative of the loss against *log* LR, which is what "steepest descent" on a
log-scale plot means.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from tunekit.defaults import INTERVAL_DECADES
from tunekit.errors import UsageError

__all__ = [
    "Curve",
    "prepare",
    "smooth_loglinear",
    "steepest",
    "valley",
    "minimum_div10",
    "minimum",
    "bottom",
    "bottom_range",
    "leave_bottom",
    "geometric_steepest_min",
    "blowup",
    "start_noise",
    "NOISE_POINTS",
    "NOISE_MARGIN",
    "bracket_next",
    "bracket_polish",
    "bracket_minimum",
    "ANCHORS",
    "divided",
    "divisor",
    "interval",
    "descent",
    "FLAT",
    "DEFAULT_SPEC",
    "tunekit_rule",
    "RULES",
    "DEFAULT_RULE",
    "assess",
    "Assessment",
]


@dataclass
class Curve:
    """A range-test curve cut at its first non-finite loss, with its smoothing."""

    lrs: np.ndarray
    losses: np.ndarray
    x: np.ndarray  # log10(lr)
    smooth: np.ndarray  # smoothed loss
    slope: np.ndarray  # d(smoothed loss) / d log10(lr)
    bandwidth: float = 0.0  # of the smoothing, in decades
    family: str | None = None  # the optimizer's: "sgd", "adaptive" or "other" (lr_find's settings["family"])


def smooth_loglinear(x: np.ndarray, y: np.ndarray, bandwidth: float) -> tuple[np.ndarray, np.ndarray]:
    """Local-linear Gaussian kernel regression of y on x: (value, slope) at each x.

    At each point a weighted least-squares line is fitted with weights
    exp(-((x - x0) / bandwidth)^2 / 2); its intercept is the smoothed value and
    its slope the local derivative. Being centred, it has no lag, and being
    local-*linear*, it has no bias at the ends of the curve.
    """
    x = np.asarray(x, dtype=np.float64)
    y = np.asarray(y, dtype=np.float64)
    if len(x) < 3 or bandwidth <= 0:
        grad = np.gradient(y, x) if len(x) >= 2 else np.zeros_like(y)
        return y.copy(), grad
    d = x[None, :] - x[:, None]  # d[i, j] = x_j - x_i
    w = np.exp(-0.5 * (d / bandwidth) ** 2)
    s0 = w.sum(1)
    s1 = (w * d).sum(1)
    s2 = (w * d * d).sum(1)
    t0 = (w * y[None, :]).sum(1)
    t1 = (w * d * y[None, :]).sum(1)
    det = s0 * s2 - s1 * s1
    safe = np.abs(det) > 1e-12 * np.maximum(s0 * s2, 1e-300)
    value = np.where(safe, (s2 * t0 - s1 * t1) / np.where(safe, det, 1.0), t0 / s0)
    slope = np.where(safe, (s0 * t1 - s1 * t0) / np.where(safe, det, 1.0), 0.0)
    return value, slope


def prepare(lrs: np.ndarray | list[float], losses: np.ndarray | list[float], bandwidth: float | None = None,
            family: str | None = None) -> Curve:
    """Cut the curve at its first non-finite loss and smooth it over log LR.

    ``bandwidth`` is in decades of LR; by default 5% of the curve's log-LR span,
    and never less than two points' spacing.
    """
    lrs = np.asarray(lrs, dtype=np.float64)
    losses = np.asarray(losses, dtype=np.float64)
    if lrs.shape != losses.shape:
        raise UsageError(f"lrs and losses must pair up, one loss per LR, got shapes {lrs.shape} and {losses.shape}: "
                         "pass e.g. prepare(result.lrs, result.losses)")
    bad = ~np.isfinite(losses) | ~(lrs > 0)
    end = int(np.argmax(bad)) if bad.any() else len(losses)
    lrs, losses = lrs[:end], losses[:end]
    x = np.log10(lrs) if len(lrs) else lrs
    if len(x) >= 2:
        span = float(x[-1] - x[0])
        spacing = span / (len(x) - 1)
        h = bandwidth if bandwidth is not None else max(0.05 * span, 2.0 * spacing)
    else:
        h = 0.0
    smooth, slope = smooth_loglinear(x, losses, h)
    return Curve(lrs, losses, x, smooth, slope, float(h), family)


#: A smoothed loss this much (relative) above its start, past the first bandwidth: the sweep has come apart.
RISEN = 0.1


def _descent_end(c: Curve) -> int:
    """Index of the smoothed minimum: the rules look for descent before it.

    A minimum in the curve's last bandwidth, past a point where the smoothed loss had risen ``RISEN``
    above its start, is not one: there the one-sided fit at the curve's end slopes down off a spike
    (a lone one that the sweep's median-of-3 divergence check lets through), below every loss the model
    reached. The minimum before that rise is taken instead; without this it, and every rule built on
    it, sat at whatever LR the sweep happened to end at."""
    end = int(np.argmin(c.smooth))
    n = len(c.smooth)
    if n < 3 or c.bandwidth <= 0 or c.x[end] <= c.x[-1] - c.bandwidth:
        return end
    start = float(np.median(c.smooth[: max(1, n // 20)]))
    lo = _edge_points(c)
    risen = np.flatnonzero(c.smooth[lo:end] > start + RISEN * max(abs(start), 1e-12))
    return int(np.argmin(c.smooth[: lo + int(risen[0])])) if len(risen) else end


def _edge_points(c: Curve) -> int:
    """Points within one bandwidth of an end of the curve: their smoothing sees one side only."""
    if len(c.x) < 2 or c.bandwidth <= 0:
        return 0
    return int(np.searchsorted(c.x, c.x[0] + c.bandwidth))


def steepest(c: Curve) -> float | None:
    """The LR where the smoothed loss falls fastest against log LR, before its minimum.

    The first bandwidth of points is left out: there the local slope is fitted on
    one side only and is mostly the noise of the first few losses.
    """
    end = _descent_end(c)
    lo = _edge_points(c)
    if end <= lo:
        return None
    i = lo + int(np.argmin(c.slope[lo: end + 1]))
    return float(c.lrs[i]) if c.slope[i] < 0 else None


def _crossing(x: np.ndarray, y: np.ndarray, level: float) -> float:
    """x where y first reaches ``level`` (y[0] on the far side of it), linearly interpolated."""
    j = int(np.argmax(y <= level)) if y[0] > level else int(np.argmax(y >= level))
    if j == 0:
        return float(x[0])
    t = (level - y[j - 1]) / (y[j] - y[j - 1]) if y[j] != y[j - 1] else 1.0
    return float(x[j - 1] + t * (x[j] - x[j - 1]))


def bottom_range(c: Curve, level: float = 0.1) -> tuple[float, float] | None:
    """The curve's bottom: the (low, high) LRs where the smoothed loss is within ``level`` of its
    descent (start to minimum) above the minimum. None where the curve does not descend.

    Its two ends are level crossings on the curve's flanks, where the loss moves fast against LR,
    so they hold still from one range test to the next where the minimum itself (a flat argmin)
    wanders. A curve still falling at its end has no right flank: its last LR closes the bottom.
    """
    end = _descent_end(c)
    if end < 1 or len(c.smooth) < 3:
        return None
    start, low = float(c.smooth[0]), float(c.smooth[end])
    if not start > low:
        return None
    cut = low + level * (start - low)
    left = _crossing(c.x[: end + 1], c.smooth[: end + 1], cut)
    right = _crossing(c.x[end:], c.smooth[end:], cut) if c.smooth[end:].max() >= cut else float(c.x[-1])
    return float(10 ** left), float(10 ** right)


def bottom(c: Curve, level: float = 0.1) -> float | None:
    """The geometric middle of the curve's bottom (:func:`bottom_range`)."""
    got = bottom_range(c, level)
    return None if got is None else float(math.sqrt(got[0] * got[1]))


def valley(c: Curve) -> float | None:
    """The middle (in log LR) of the longest stretch where the smoothed loss keeps falling."""
    if len(c.smooth) < 3:
        return None
    falling = np.diff(c.smooth) < 0
    best_len, best_start, run_start = 0, 0, None
    for i, f in enumerate(np.append(falling, False)):
        if f and run_start is None:
            run_start = i
        elif not f and run_start is not None:
            if i - run_start > best_len:
                best_len, best_start = i - run_start, run_start
            run_start = None
    if best_len == 0:
        return None
    lo, hi = best_start, best_start + best_len  # smooth falls from index lo to hi
    return float(10 ** ((c.x[lo] + c.x[hi]) / 2))


def minimum_div10(c: Curve) -> float | None:
    """A tenth of the LR at the smoothed minimum (fastai's "lr_min")."""
    if len(c.smooth) < 2:
        return None
    return float(c.lrs[_descent_end(c)] / 10)


def minimum(c: Curve) -> float | None:
    """The LR at the smoothed minimum; None when it lies within the sweep's first bandwidth (no descent)."""
    if len(c.smooth) < 2 or _descent_end(c) < max(1, _edge_points(c)):
        return None
    return float(c.lrs[_descent_end(c)])


def leave_bottom(c: Curve, level: float = 0.1) -> float | None:
    """The LR past the minimum where the smoothed loss rises back above the bottom
    (``level`` of the descent above the minimum): where the sweep starts to blow up.
    The last LR of a curve still falling at its end."""
    end = _descent_end(c)
    if end < 1 or len(c.smooth) < 3 or not c.smooth[0] > c.smooth[end]:
        return None
    cut = float(c.smooth[end] + level * (c.smooth[0] - c.smooth[end]))
    if c.smooth[end:].max() < cut:
        return float(c.lrs[-1])
    return float(10 ** _crossing(c.x[end:], c.smooth[end:], cut))


def geometric_steepest_min(c: Curve) -> float | None:
    """The geometric mean of the steepest descent and the minimum (tunekit's default before issue 11)."""
    s = steepest(c)
    m = minimum(c)
    return None if s is None or m is None else float(math.sqrt(s * m))


def blowup(c: Curve, rise: float = 0.1) -> float | None:
    """Where the sweep comes apart for good: past the smoothed minimum, the LR where the smoothed
    loss last rises through ``rise`` (relative to the minimum) above it, never to come back. It
    holds still on a flat, noisy curve whose minimum wanders over decades (a descent of 1%), and
    an early bump that the curve recovers from is not it. None when the loss ends below that."""
    if len(c.smooth) < 3:
        return None
    end = _descent_end(c)
    low = float(c.smooth[end])
    cut = low + rise * max(abs(low), 1e-12)
    after = c.smooth[end:]
    below = np.flatnonzero(after < cut)
    j = int(below[-1]) if len(below) else 0
    if j >= len(after) - 1:
        return None
    return float(10 ** _crossing(c.x[end + j:], after[j:], cut))


#: The sweep's first losses, where the LR is too low to move the model: their spread is the loss's batch-to-batch
#: noise, measured before the sweep rises.
NOISE_POINTS = 10
#: A rise over the best loss is divergence only beyond this many times the start's noise: heavy-tailed targets
#: throw single batches far above the median, and the median of three lets two through. A normal task's start
#: varies by a few % of its loss, so its stop is unchanged (benchmarks/data/constants_history.md).
NOISE_MARGIN = 8.0


def start_noise(losses: list[float] | np.ndarray, points: int = NOISE_POINTS) -> float:
    """The loss's batch-to-batch noise at the start of a sweep: the range of its first ``points`` finite
    losses about their straight-line trend (a start already falling is not noise). 0 under three points."""
    y = np.asarray(losses[:points], dtype=np.float64)
    y = y[np.isfinite(y)]
    if len(y) < 3:
        return 0.0
    i = np.arange(len(y), dtype=np.float64)
    slope, icpt = np.polyfit(i, y, 1)
    return float(np.ptp(y - (slope * i + icpt)))


def bracket_next(xs: list[float], ys: list[float], step: float) -> float | None:
    """The next log10 LR of a bracketing search: one ``step`` past the end that holds the lowest
    loss (``xs`` ascending), or None once the lowest loss has a higher one on each side."""
    i = int(np.argmin(ys))
    if i == 0:
        return float(xs[0] - step)
    if i == len(xs) - 1:
        return float(xs[-1] + step)
    return None


def bracket_polish(xs: list[float], ys: list[float]) -> float | None:
    """Once bracketed, the next log10 LR to try: halfway from the lowest loss to its lower
    neighbour, where the minimum lies (``xs`` ascending); None while the lowest is at an end."""
    i = int(np.argmin(ys))
    if i == 0 or i == len(xs) - 1:
        return None
    j = i - 1 if ys[i - 1] <= ys[i + 1] else i + 1
    return float((xs[i] + xs[j]) / 2)


def bracket_minimum(xs: list[float], ys: list[float]) -> float:
    """The log10 LR of the lowest loss, moved to the vertex of the parabola through it and its two
    neighbours when it has both (``xs`` ascending, spaced as they are), and never past them."""
    i = int(np.argmin(ys))
    if 0 < i < len(xs) - 1 and all(math.isfinite(v) for v in ys[i - 1: i + 2]):
        (x0, x1, x2), (y0, y1, y2) = xs[i - 1: i + 2], ys[i - 1: i + 2]
        num = (x1 - x0) ** 2 * (y1 - y2) - (x1 - x2) ** 2 * (y1 - y0)
        den = (x1 - x0) * (y1 - y2) - (x1 - x2) * (y1 - y0)
        if den != 0:
            return float(np.clip(x1 - 0.5 * num / den, x0, x2))
    return float(xs[i])


#: The points of a curve the rules are built from: each a pure function of the curve.
ANCHORS: dict[str, Callable[[Curve], float | None]] = {
    "min": minimum,
    "bottom": bottom,
    "leave": leave_bottom,
    "steepest": steepest,
    "geo": geometric_steepest_min,
    "blowup": blowup,
}


def divided(anchor: str, k: float | dict[str, float]) -> Callable[[Curve], float | None]:
    """The rule "anchor / k"; ``k`` a number, or one per optimizer family (``{"sgd": 2, "adaptive": 3}``,
    read from ``Curve.family``; a family it does not name gets the geometric mean of those it does)."""
    point = ANCHORS[anchor]

    def rule(c: Curve) -> float | None:
        lr = point(c)
        if lr is None:
            return None
        return float(lr / divisor(c.family, k))

    rule.__name__ = f"{anchor}/{k}"
    return rule


def divisor(family: str | None, k: float | dict[str, float] | None = None) -> float:
    """What :func:`divided` divides by for an optimizer ``family``: ``k`` (by default the shipped rule's,
    ``DEFAULT_SPEC``), or its entry for the family (a family it does not name: the geometric mean of those it does)."""
    k = DEFAULT_SPEC[1] if k is None else k
    if isinstance(k, dict):
        return float(k.get(family or "", float(np.exp(np.mean(np.log(list(k.values())))))))
    return float(k)


def tunekit_rule(c: Curve) -> float | None:
    """tunekit's default: ``DEFAULT_SPEC`` (how it does on the task corpus: benchmarks/data/corpus_lr_report.txt)."""
    return _DEFAULT(c)


# With SGD, clipped at 1.0 like training, the minimum itself; with an adaptive optimizer, half of it. Its
# regret at the planned run on the task corpus, per family and leaving each family out:
# benchmarks/data/corpus_lr_report.txt (python -m benchmarks.corpus_lr); how it was first chosen:
# benchmarks/data/constants_history.md.
DEFAULT_SPEC: tuple[str, float | dict[str, float]] = ("min", {"sgd": 1.0, "adaptive": 2.0})
_DEFAULT = divided(*DEFAULT_SPEC)


#: A curve whose smoothed loss falls by less than this share of its start shows no descent: no interval. The
#: task corpus's curves all fell by more (the least by 1.1%), so the interval's measured coverage holds.
FLAT = 0.01


def descent(c: Curve) -> float:
    """How far the smoothed loss falls, from its start (the median of its first 5%) to its minimum, as a share
    of its start (0 under three points)."""
    n = len(c.smooth)
    if n < 3:
        return 0.0
    start = float(np.median(c.smooth[: max(1, n // 20)]))
    return (start - float(c.smooth[_descent_end(c)])) / max(abs(start), 1e-12)


def interval(suggestion: float | None, decades: float = INTERVAL_DECADES,
             curve: Curve | None = None, confident: bool = True,
             reach: float | None = None) -> tuple[float, float] | None:
    """Where the planned run's best peak LR likely lies: ``decades`` either side of ``suggestion``, twice that
    where the finder is not ``confident`` (pass False, too, where no short runs checked the curve's number),
    the top at least ``decades`` above ``reach`` (the short runs' carried best, where the sweep's blow-up capped
    the suggestion below it). None without a suggestion, or where the ``curve`` it came from falls by under
    ``FLAT`` (a flat curve's number is noise). Why a band: on the task corpus no range read off the curve's shape
    held the best more often at the same width (benchmarks/data/lr_interval_report.txt)."""
    if suggestion is None or not (suggestion > 0 and math.isfinite(suggestion)):
        return None
    if curve is not None and descent(curve) < FLAT:
        return None
    width = decades if confident else 2 * decades
    top = suggestion * 10 ** width
    if reach is not None and math.isfinite(reach):
        top = max(top, reach * 10 ** decades)
    return float(suggestion / 10 ** width), float(top)


RULES = {
    "tunekit": tunekit_rule,
    "steepest": steepest,
    "valley": valley,
    "min/10": minimum_div10,
}
DEFAULT_RULE = "tunekit"


@dataclass
class Assessment:
    """Whether a curve shows a descent clear enough to trust a suggestion."""

    confidence: float  # 0..1
    confident: bool
    reasons: list[str] = field(default_factory=list)


def assess(c: Curve, min_drop: float = 0.05, batch_noise: float | None = None) -> Assessment:
    """Score how clearly the smoothed loss descends before its minimum.

    The score combines the size of the drop (relative to the starting loss and
    to the noise around the smoothing) and the span of LRs it covers. Below
    ``min_drop`` relative drop, or a minimum at the curve's first points, the
    suggestion is flagged as not to be trusted. ``batch_noise`` (:func:`start_noise`, else measured here)
    names the cause of a curve that never falls: batch noise over ``4 * min_drop`` of the loss hides
    a descent, and a lower sweep would not show it.
    """
    reasons: list[str] = []
    n = len(c.smooth)
    if n < 5:
        return Assessment(0.0, False, ["fewer than 5 finite points in the curve"])
    end = _descent_end(c)
    start = float(np.median(c.smooth[: max(1, n // 20)]))
    drop = start - float(c.smooth[end])
    rel_drop = descent(c)
    # Noise of the raw curve around the smoothing, over the descent only: past
    # the minimum the blow-up is signal, not noise.
    noise = float(np.std((c.losses - c.smooth)[: end + 1])) or 1e-12
    span = float(c.x[end] - c.x[0]) if end > 0 else 0.0
    if end <= max(1, n // 20):
        reasons.append(_never_falls(start_noise(c.losses) if batch_noise is None else batch_noise, c.losses, min_drop))
    if rel_drop < min_drop:
        reasons.append(f"the loss falls by only {100 * max(rel_drop, 0):.1f}% before its minimum")
    if drop < 2 * noise:
        reasons.append("the descent is within the noise of the curve (more sweep_steps, a larger batch_size, or repeats=3)")
    if end >= n - 2 and n > 5:
        reasons.append("the loss was still falling at the end of the sweep (end the sweep higher)")
    score = float(np.clip(rel_drop / (4 * min_drop), 0, 1) * np.clip(drop / (6 * noise), 0, 1) * np.clip(span / 1.0, 0, 1))
    return Assessment(score, not reasons, reasons)


def _never_falls(noise: float, losses: np.ndarray, min_drop: float) -> str:
    """Why the loss never falls, in words: its noise, where a batch's loss varies by more than ``4 * min_drop``
    of its median at the start (on heavy-tailed targets, 100% and more; a normal task's, a few %), else a
    sweep that starts too high."""
    typical = float(np.median(losses[:NOISE_POINTS])) if len(losses) else 0.0
    if noise > 4 * min_drop * max(abs(typical), 1e-12):
        return (f"the loss never falls beyond its batch-to-batch noise (it varies by {noise:.3g} at the start of "
                f"the sweep, {100 * noise / max(abs(typical), 1e-12):.0f}% of its median): average it over more "
                "samples, with a larger batch_size, more sweep_steps, or repeats=3")
    return "the loss never falls: its minimum is at the start of the sweep (start the sweep lower)"
