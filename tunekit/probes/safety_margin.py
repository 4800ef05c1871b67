"""The margin the probe's largest batch keeps below the budget, from the measured noise of its peak, and the
batch that keeps it (:func:`peak_margin`, :func:`settle`).

A step's peak moves with its data where shapes or branches follow the data (variable-length padding, a
loss that allocates for some samples); where they do not, two readings differ by what the instrument
resolves. So the probe reads the peak at its answer twice, on two draws of the data, and keeps a margin
from their spread.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional, Protocol

from tunekit.bytesize import format_bytes

__all__ = ["Margin", "Settled", "peak_margin", "unmeasured", "settle", "MARGIN_SPREADS"]

# The margin is this many times the spread of two readings: for readings normal about a mean m with
# deviation s, |r1 - r2| averages 1.13 s and the larger one m + 0.56 s, so larger + 2 x spread is m + 2.8 s,
# which a third reading passes 0.3% of the time.
MARGIN_SPREADS = 2


@dataclass(frozen=True)
class Margin:
    """The margin as a fraction of the predicted peak at the batch it was measured at, and why."""

    fraction: float
    source: str  # the readings it rests on, or why there are none


@dataclass(frozen=True)
class Settled:
    """The batch the probe answers, its predicted peak (bytes, with the resident state) and its margin."""

    batch: int
    peak_bytes: float
    margin: Margin


class _Model(Protocol):
    def largest_batch(self, budget_bytes: float, limit: int = ...) -> int: ...

    def peak(self, batch: int | float) -> float: ...


def peak_margin(readings: list[float], peak: float, resolution: float, batch: int, instrument: str) -> Margin:
    """The margin at ``batch`` from ``readings`` of its peak above the resident state on different data:
    MARGIN_SPREADS x their spread, never below the instrument's ``resolution`` (bytes), as a fraction of
    ``peak`` (the predicted peak with the resident state)."""
    spread = max(readings) - min(readings) if readings else 0.0
    relative = f"{spread / max(readings):.1%}" if readings and max(readings) > 0 else "0%"
    said = f"{len(readings)} readings at batch {batch} on other data"
    if MARGIN_SPREADS * spread > resolution:
        return Margin(MARGIN_SPREADS * spread / peak, f"{MARGIN_SPREADS}x the spread of {said} ({relative} apart)")
    if resolution <= 0:
        return Margin(0.0, f"{said} agree exactly ({instrument})")
    return Margin(resolution / peak, f"{instrument}'s resolution, {format_bytes(resolution)}: {said} agree within it")


def unmeasured(peak: float, resolution: float, why: str) -> Margin:
    """The margin where the peak was not read on a second draw of the data: the instrument's resolution."""
    return Margin(resolution / peak if peak > 0 else 0.0, why)


def settle(batch: int, model: _Model, worst: Optional[float], margin: Margin, usable: float) -> Settled:
    """The largest batch, ``batch`` or below, whose peak times (1 + margin) stays within ``usable``.

    The peak at ``batch`` is the larger of the model's and the ``worst`` reading (with the resident state);
    below it, the model's scaled by their ratio. A smaller batch's peak is below a measured one: it needs
    no step of its own. Never below 1."""
    scale = max(1.0, (worst or 0.0) / model.peak(batch)) if model.peak(batch) > 0 else 1.0
    peak = model.peak(batch) * scale
    if peak * (1 + margin.fraction) <= usable or batch <= 1:
        return Settled(batch, peak, margin)
    below = max(1, min(batch - 1, model.largest_batch(usable / (scale * (1 + margin.fraction)))))
    return Settled(below, model.peak(below) * scale, margin)
