"""A search space made Optuna distributions: its seeded entries' bounds from the probes' results.

The space file is parsed in :mod:`tunekit.inputs.space`; here the LR range test's curve bounds ``lr``
and the batch probe (with the range test's batch) chooses ``batch``'s effective batches.
"""

from __future__ import annotations

# Imported where used, not at the top: optuna; importing this module does not pay for them.
import math
from collections.abc import Mapping
from typing import Any

import numpy as np

from tunekit.errors import UsageError
from tunekit.inputs.space import Entry, SearchSpace
from tunekit.probes.lr_rules import prepare

__all__ = ["distributions", "lr_bounds_from_curve", "batch_centre", "batch_choices", "reference_batch",
           "PEAK_ABOVE_MINIMUM", "holding_own", "widened", "as_own", "ZERO_DECADES"]

# A log range cannot hold zero: a task's own zero (no weight decay: torch's default for SGD and Adam)
# stands this many decades below the range's low end. On the corpus's two SGD tasks without decay,
# weight decay 1e-5 (1e-3 / 10**2) at their best LR ended within 0.5% of none on 2 seeds, where the
# range's low end, 1e-3, ended 2.5% (regression) and 6% (long-horizon) worse: above their targets.
ZERO_DECADES = 2.0


def distributions(space: SearchSpace, lr_find: Any = None, probe: Any = None, max_batch: int | None = None,
                  adaptive_l2: bool = False, own: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """``space``'s Optuna distributions, with seeded entries' bounds taken from the probes' results.

    ``max_batch`` caps a seeded batch's choices (a search passes the largest batch
    its sample budget leaves enough updates for). ``adaptive_l2``: the optimizer is adaptive and
    adds weight decay to the gradient (L2: torch's Adam, RMSprop...), and a [weight_decay] with an
    ``adaptive_l2`` range takes that range. ``own``: the task's own settings (its recipe); an unseeded
    float or int range widens to hold its value (:func:`holding_own`): the search can return the user's recipe.
    """
    import optuna.distributions as d

    out: dict[str, Any] = {}
    for name, e in space.entries.items():
        if e.seeded == "probe":
            out[name] = d.CategoricalDistribution(batch_choices(e, probe, reference_batch(lr_find), max_batch))
        elif e.seeded == "lr_find" and lr_find is not None and lr_find.confident:
            low, high = lr_bounds_from_curve(lr_find, e.margin)
            out[name] = d.FloatDistribution(low, high, log=True)
        elif e.type == "float":
            low, high = e.adaptive_l2 if e.adaptive_l2 and adaptive_l2 else (e.low, e.high)
            if not e.seeded:  # an unseeded entry: the seeded LR's fallback range is the space's
                low, high = holding_own(low, high, e.log, (own or {}).get(name))  # type: ignore[arg-type]
            out[name] = d.FloatDistribution(low, high, log=e.log)
        elif e.type == "int":
            low, high = holding_own(e.low, e.high, e.log, (own or {}).get(name), step=1 if e.log else (e.step or 1))  # type: ignore[arg-type]
            out[name] = d.IntDistribution(int(low), int(high), log=e.log, step=1 if e.log else (e.step or 1))
        elif e.type == "categorical":
            out[name] = d.CategoricalDistribution(e.choices)  # type: ignore[arg-type]
    return out


def holding_own(low: float, high: float, log: bool, value: Any, step: int | None = None) -> tuple[float, float]:
    """``low``..``high`` widened to hold ``value`` (a number; anything else leaves it as it is). On a log
    range a value at or below zero stands :data:`ZERO_DECADES` below ``low``; an int range widens by
    whole ``step``s from ``low``."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        return low, high
    v = float(value)
    if log and step is not None and v < 1:
        return low, high  # a log int range starts at 1 at the lowest
    if log and v <= 0:
        v = low / 10**ZERO_DECADES
    if step is not None:  # an int range: its bounds on its step's lattice from low
        v = low + math.floor((v - low) / step) * step if v < low else low + math.ceil((v - low) / step) * step
    return min(low, v), max(high, v)


def widened(space: SearchSpace, dists: Mapping[str, Any]) -> dict[str, list[float]]:
    """The unseeded entries whose range was widened to hold the task's own value: name -> [low, high] as
    searched (a range that is none of those the space declares for it)."""
    out: dict[str, list[float]] = {}
    for name, e in space.entries.items():
        dist = dists.get(name)
        if e.seeded or e.type not in ("float", "int") or dist is None:
            continue
        declared = [(e.low, e.high)] + ([tuple(e.adaptive_l2)] if e.adaptive_l2 else [])
        if e.type == "int" and not e.log and e.step:  # Optuna takes high down onto the step's lattice
            declared = [(lo, lo + (hi - lo) // e.step * e.step) for lo, hi in declared]
        if not any(math.isclose(dist.low, lo) and math.isclose(dist.high, hi) for lo, hi in declared):
            out[name] = [float(dist.low), float(dist.high)]
    return out


def as_own(config: Mapping[str, Any], space: SearchSpace, searched: Mapping[str, list[float]]) -> dict[str, Any]:
    """``config`` with each value that stands for the task's own zero (the low end of a log range widened
    :data:`ZERO_DECADES` below the space's to hold it: :func:`holding_own`) said as that zero: the
    user's recipe given back unchanged (no weight decay stays 0.0, not 1e-08). ``searched``: :func:`widened`'s."""
    out = dict(config)
    for name, (low, _) in searched.items():
        e = space.entries.get(name)
        if e is None or not e.log or name not in out:
            continue
        lows = [e.low, *([e.adaptive_l2[0]] if e.adaptive_l2 else [])]
        if any(math.isclose(low, lo / 10**ZERO_DECADES) for lo in lows) and math.isclose(float(out[name]), low):
            out[name] = 0.0
    return out


def reference_batch(lr_find: Any) -> int | None:
    """The effective batch the LR range test ran at (None without a range test, or one saved without it)."""
    if lr_find is None or not lr_find.settings.batch_size:
        return None
    return int(lr_find.settings.batch_size) * int(lr_find.settings.accumulation_steps or 1)


def batch_centre(probe: Any, ref_batch: int | None = None) -> float:
    """The effective batch the choices centre on: ``ref_batch``, the batch the LR range test ran at,
    where there is one; else the critical batch the probe measured (or its throughput knee, or the
    largest batch that fits).

    Why not a noise scale below ``ref_batch``: the range test's LR holds at the batch it was found at,
    and a noise scale measured at the start of training is a lower bound on the run's: it grows as
    the loss falls (McCandlish et al., 2018; search_spaces/README.md has the corpus task where it
    misled). The design still tries half and a quarter of the centre (``AROUND``).
    """
    if probe is None:
        raise UsageError("the space's [batch] is seeded by the probe: run it (tunekit probe) or pass probe=FILE")
    if ref_batch:
        return float(ref_batch)
    return float(max(probe.critical_batch or probe.knee_batch or probe.max_batch, 1))


def batch_choices(entry: Entry, probe: Any, ref_batch: int | None = None, max_batch: int | None = None) -> list[int]:
    """Effective batches around :func:`batch_centre` (powers of two) that the probe says fit, as (micro x accumulation).

    ``ref_batch`` (the LR range test's effective batch) is added when it lies within the choices'
    span, so the seed trial can pair the suggested LR with the batch it was measured at.
    Choices are capped at the dataset's size and at ``max_batch``.
    """
    centre = batch_centre(probe, ref_batch)
    n = min(probe.dataset_size or 2**30, max_batch or 2**30)
    out: list[int] = []
    for mult in entry.around_critical:
        eff = int(2 ** round(math.log2(max(1.0, centre * mult))))
        eff = max(1, min(eff, n))
        if eff not in out:
            out.append(eff)
    if ref_batch and min(out) <= ref_batch <= max(out) and ref_batch not in out:
        out.append(int(ref_batch))
    return sorted(out)


# The best peak LR of a warmup + cosine run lies up to this many times above the LR at the
# range test's smoothed minimum (lr_rules, 12 tasks: 0.2x to 25x; git tag legacy-lr-benchmarks).
PEAK_ABOVE_MINIMUM = 25.0


def lr_bounds_from_curve(result: Any, margin: float) -> tuple[float, float]:
    """From where the range-test loss starts to fall, less ``margin`` decades, to
    :data:`PEAK_ABOVE_MINIMUM` times the LR of its minimum (below divergence), or ``margin``
    decades above it if that is more.

    "Starts to fall": the first LR at which the smoothed loss has covered 10% of
    its drop from the start to the minimum. The upper end is where the range test's
    own error says the best peak LR may still be: a bound at the minimum itself shut
    the search out of the optimum whenever the curve read low (a CNN's curve at 10x
    below its best LR left no trial there).
    """
    c = prepare(result.lrs, result.losses)
    if len(c.smooth) < 3:
        raise UsageError("the range test has too few finite points to bound the LR: rerun it with more steps")
    end = int(np.argmin(c.smooth))
    start = float(c.smooth[0])
    drop = start - float(c.smooth[end])
    if end < 2 or drop <= 0:
        # No descent: fall back to a decade each side of the suggestion, or of the minimum.
        centre = result.suggestion or float(c.lrs[end])
        return centre / 10 ** (1 + margin), centre * 10 ** (1 + margin)
    i = int(np.argmax(c.smooth[: end + 1] <= start - 0.1 * drop))
    low, high = float(c.lrs[i]), float(c.lrs[end])
    if result.diverged_at_lr:
        high = min(high, float(result.diverged_at_lr))
    return low / 10**margin, high * max(PEAK_ABOVE_MINIMUM, 10**margin)
