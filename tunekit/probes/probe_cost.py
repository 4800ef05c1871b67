"""The probe's cost bounded by the run it plans for: what its stages may draw, decided before they run.

A probe that costs more than the run it sizes is no help to it. By default its samples (and its micro-steps,
which a small model's seconds follow) are held to :data:`~tunekit.defaults.PROBE_SHORT_RUN_SHARE` of the
planned run's samples for runs under :data:`tunekit.defaults.PROBE_FULL_RUN_UPDATES` updates and to
:data:`~tunekit.defaults.PROBE_LONG_RUN_SHARE` of them beyond (:class:`CostCap`). Within that cap (:func:`plan_stages`): the noise scale may take at most
:data:`NOISE_SHARE` of it, or is not measured, and not where it cannot change the answer (a target batch
given); the throughput is timed at fewer rounds and batches where its steps would not fit the rest; the
largest batch tried is the largest at which the largest-batch search and the timings fit the rest. A :class:`~tunekit.entry_options.Measurement` setting given away from its default
is obeyed as given, and said where it takes the probe over the cap.

Samples stand for device time too: a step's seconds grow with its batch, so a probe that steps through
fewer samples than the run takes less time, less the fixed costs (the trace, the measuring child); the
short runs' share leaves room for a large batch's dearer samples.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, Optional

import numpy as np

from tunekit.defaults import PROBE_FULL_RUN_UPDATES as FULL_RUN_UPDATES
from tunekit.defaults import PROBE_LONG_RUN_SHARE as LONG_RUN_SHARE
from tunekit.defaults import PROBE_SHORT_RUN_SHARE as SHORT_RUN_SHARE
from tunekit.defaults import RUN_STEPS
from tunekit.entry_options import Measurement
from tunekit.errors import check_number
from tunekit.inputs.task import Task

__all__ = ["CostCap", "StagePlan", "cost_cap", "plan_stages", "stage_samples", "stage_steps", "throughput_points",
           "NOISE_SHARE", "LARGEST_STEPS", "NOISE_WARMUP_BATCH",
           "NOISE_SMALL_BATCH", "NOISE_MAX_ACCUM"]

# The noise scale may take at most this share of the cap; the largest batch and the throughput the rest.
NOISE_SHARE = 0.5
# The largest-batch search's real steps at its largest batch, as a cost: up to two tries and the answer read again
# on another draw of the data (the measuring child's warm-up step is at the smallest traced batch).
LARGEST_STEPS = 3
# The noise-scale stage: a fresh model first trains its warm-up updates at a batch of at most NOISE_WARMUP_BATCH;
# then its repeats of gradients at a small batch (at most NOISE_SMALL_BATCH) and as many at up to
# NOISE_MAX_ACCUM times it.
NOISE_WARMUP_BATCH = 32
NOISE_SMALL_BATCH = 8
NOISE_MAX_ACCUM = 16


@dataclass(frozen=True)
class CostCap:
    """The planned run, and the samples the probe may draw for it (``share`` of the run's)."""

    run_steps: int  # the planned run's optimizer updates
    run_batch: int  # its effective batch (micro-batch x accumulation)
    share: float  # of the run's samples the probe may draw
    samples: int  # the cap: share x the run's samples

    @property
    def run_samples(self) -> int:
        return self.run_steps * self.run_batch

    def text(self) -> str:
        return (f"{self.share:.0%} of the planned run's {self.run_samples:,} samples ({self.run_steps} updates at "
                f"batch {self.run_batch})")


@dataclass(frozen=True)
class StagePlan:
    """What the probe's real steps will do, sized to the cap: the largest batch they try, the timings, the
    noise scale's gradients and warm-up; ``ahead`` the samples they draw at most, ``notes`` what the cap cut
    or what a given setting took over it, in words."""

    limit: int
    throughput_points: int
    timing_steps: int
    noise_repeats: int
    noise_warmup: int
    ahead: int
    notes: tuple[str, ...] = ()
    noise_skipped: Optional[str] = None  # why the noise scale is not measured, where the plan leaves it out

    def line(self, cap: Optional[CostCap]) -> str:
        """The cost ahead, in one line: the samples the real steps draw at most, against the planned run."""
        text = f"at most {self.ahead:,} samples"
        if cap is None:
            return text + " (no cap: no planned run known, or cost_share=0)"
        return (text + f", {self.ahead / cap.run_samples:.2f}x the planned run's {cap.run_samples:,} ({cap.run_steps} "
                f"updates at batch {cap.run_batch}; the cap: {cap.share:.0%} of it)")


def cost_cap(model: Any, accumulation_steps: int, share: Optional[float]) -> Optional[CostCap]:
    """The cap for a Task with a batch (its ``max_steps``, else train's default, at its batch with
    accumulation); None for a model in hand (no planned run) or ``share=0`` (no cap)."""
    if share is not None:
        check_number("cost_share", share, minimum=0, hint="a share of the planned run's samples: pass e.g. "
                     "cost_share=0.5, or 0 for no cap")
    if not isinstance(model, Task) or not model.batch_size or share == 0:
        return None
    steps = int(model.defaults.get("max_steps") or RUN_STEPS)
    batch = int(model.batch_size) * accumulation_steps
    if share is None:
        share = SHORT_RUN_SHARE if steps < FULL_RUN_UPDATES else LONG_RUN_SHARE
    return CostCap(steps, batch, share, max(1, int(share * steps * batch)))


def throughput_points(low: int, top: int, n: int) -> list[int]:
    """The micro-batches timed: ``n`` spaced geometrically from ``low`` (at most ``top``) to ``top``."""
    if n < 1:
        return []
    return sorted({max(1, int(round(x))) for x in np.geomspace(max(1, min(low, top)), top, n)})


def stage_samples(top: int, low: int, points_n: int, timing_steps: int, k: int, repeats: int, warmup: int,
                  limit: int) -> tuple[int, int, int]:
    """(largest batch, throughput, noise scale): the samples each stage draws at most with batches up to
    ``top``: the largest batch's steps and the child's warm-up, a warm-up and the timed rounds at each point
    (timing again on a busy machine replays drawn batches), the noise scale's warm-up and its two accumulations."""
    largest = (LARGEST_STEPS * top + min(low, top)) * k
    timed = sum(throughput_points(low, top, points_n)) * k * (1 + max(3, timing_steps))
    b_small = max(1, min(NOISE_SMALL_BATCH, top, limit // 64 or 1))
    k_big = max(2, min(NOISE_MAX_ACCUM, limit // b_small))
    noise = warmup * min(NOISE_WARMUP_BATCH, top) + repeats * b_small * (1 + k_big) if repeats >= 2 else 0
    return largest, timed, noise


def _given(measure: Measurement, name: str) -> bool:
    """Whether a Measurement setting was given away from its default (obeyed as given, not sized)."""
    f = next(f for f in dataclasses.fields(Measurement) if f.name == name)
    return getattr(measure, name) != f.default


def stage_steps(points_n: int, timing_steps: int, k: int, repeats: int, warmup: int) -> tuple[int, int, int]:
    """(largest batch, throughput, noise scale): the micro-steps each stage runs at most. A small model's step
    takes its overhead's seconds whatever its batch: steps bound the seconds where samples do not."""
    largest = (LARGEST_STEPS + 1) * k
    timed = points_n * (1 + max(3, timing_steps)) * k
    noise = warmup * k + repeats * (1 + NOISE_MAX_ACCUM) if repeats >= 2 else 0
    return largest, timed, noise


def plan_stages(cap: Optional[CostCap], measure: Measurement, data_limit: int, k: int, warmup: int,
                target_batch: Optional[int]) -> StagePlan:
    """The stages sized to ``cap`` (see the module), in samples and in micro-steps (the planned run's share of
    its own); without one, the settings as given up to ``data_limit`` (the data's size, or a given
    ``batch_limit``)."""
    low, points_n, timing, repeats = min(measure.trace_sizes), measure.throughput_points, measure.timing_steps, \
        measure.noise_repeats
    notes: list[str] = []
    skipped = None
    if target_batch is not None and repeats >= 2 and not _given(measure, "noise_repeats"):
        repeats = 0
        skipped = f"not measured: the plan is for the batch asked for ({target_batch}), which it cannot change"
    if cap is None:
        return StagePlan(data_limit, points_n, timing, repeats, warmup,
                         sum(stage_samples(data_limit, low, points_n, timing, k, repeats, warmup, data_limit)), (),
                         skipped)
    step_cap = max(1, int(cap.share * cap.run_steps * k))  # the run's micro-steps, its share
    repeats, skipped, noise, noise_steps = _noise_within(cap, step_cap, measure, data_limit, k, repeats, warmup, skipped,
                                                         notes)
    steps_left = step_cap - stage_steps(0, timing, k, 0, 0)[0] - min(noise_steps, int(NOISE_SHARE * step_cap))
    if stage_steps(points_n, timing, k, 0, 0)[1] > steps_left and not _given(measure, "timing_steps"):
        timing = 3  # the fewest rounds timed, whatever timing_steps asks
    while points_n > 2 and stage_steps(points_n, timing, k, 0, 0)[1] > steps_left and \
            not _given(measure, "throughput_points"):
        points_n -= 1
    if points_n and stage_steps(points_n, timing, k, 0, 0)[1] > steps_left and not _given(measure, "throughput_points"):
        notes.append(f"throughput not timed: two batches would take {stage_steps(2, timing, k, 0, 0)[1]} steps, over "
                     f"the {max(steps_left, 0)} left of the planned run's {step_cap} ({cap.share:.0%})")
        points_n = 0
    rest = cap.samples - min(noise, int(NOISE_SHARE * cap.samples))
    limit = data_limit
    if not _given(measure, "batch_limit"):
        limit = _largest_within(rest, data_limit, low, points_n, timing, k)
        if limit < min(low, data_limit) and points_n and not _given(measure, "throughput_points"):
            notes.append(f"throughput not timed: even at batch {low} it would draw "
                         f"{sum(stage_samples(low, low, points_n, timing, k, 0, 0, low)):,} samples, over the "
                         f"{rest:,} left of the cap")
            points_n = 0
            limit = _largest_within(rest, data_limit, low, 0, timing, k)
        if limit < data_limit:
            notes.append(f"batches up to {limit:,} tried (the data allows {data_limit:,}): larger ones would take "
                         f"the probe over its cap, {cap.text()}")
    parts = stage_samples(limit, low, points_n, timing, k, repeats, warmup, data_limit)
    if sum(parts) > cap.samples:
        notes.append(f"the settings given draw up to {sum(parts):,} samples, over the cap ({cap.samples:,})")
    return StagePlan(limit, points_n, timing, repeats, warmup, sum(parts), tuple(notes), skipped)


def _noise_within(cap: CostCap, step_cap: int, measure: Measurement, data_limit: int, k: int, repeats: int,
                  warmup: int, skipped: Optional[str], notes: list[str]) -> tuple[int, Optional[str], int, int]:
    """The noise scale's repeats, why it is not measured, its samples and its micro-steps: left out where it would
    take over NOISE_SHARE of the cap's samples or of the run's steps, unless its settings were given (then said
    in ``notes`` where over)."""
    samples = stage_samples(data_limit, min(measure.trace_sizes), 0, 3, k, repeats, warmup, data_limit)[2]
    steps = stage_steps(0, 3, k, repeats, warmup)[2]
    half_samples, half_steps = int(NOISE_SHARE * cap.samples), int(NOISE_SHARE * step_cap)
    over = ([f"draw {samples:,} samples, over the {half_samples:,} ({NOISE_SHARE:.0%}) of the probe's cap it may take"]
            if samples > half_samples else []) + \
        ([f"run {steps:,} steps, over the {half_steps:,} ({NOISE_SHARE:.0%}) of the run's {step_cap:,} it may take"]
         if steps > half_steps else [])
    if not over:
        return repeats, skipped, samples, steps
    if _given(measure, "noise_repeats") or _given(measure, "noise_warmup"):
        notes.append(f"the noise scale as asked for will {' and '.join(over)}")
        return repeats, skipped, samples, steps
    return 0, f"not measured: it would {' and '.join(over)}, {cap.text()}", 0, 0


def _largest_within(samples: int, data_limit: int, low: int, points_n: int, timing: int, k: int) -> int:
    """The largest batch (at least 1, at most ``data_limit``) at which the largest-batch search and the
    throughput timings draw at most ``samples`` (their cost grows with it)."""
    def cost(b: int) -> int:
        largest, timed, _ = stage_samples(b, low, points_n, timing, k, 0, 0, b)
        return largest + timed

    lo, hi = 1, data_limit
    if cost(hi) <= samples:
        return hi
    while lo < hi:  # the largest b with cost(b) <= samples (1 where none does)
        mid = (lo + hi + 1) // 2
        lo, hi = (mid, hi) if cost(mid) <= samples else (lo, mid - 1)
    return lo
