"""The probe's throughput: samples per second at a few micro-batches up to the largest, timed in
interleaved rounds, and timed again where the machine was busy; the knee of the curve.
"""

from __future__ import annotations

import math
import statistics
import time
from collections.abc import Callable
from typing import Any, Optional

import numpy as np

from tunekit.inputs.data import BatchStream
from tunekit.probes.probe_run import ProbeRun

__all__ = ["measure_throughput", "knee_and_fastest", "NOISY_TIMINGS", "BUSY_RETRIES"]


def knee_and_fastest(throughput: list[dict[str, float]]) -> tuple[Optional[int], Optional[int]]:
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


def measure_throughput(run: ProbeRun, sizes: list[int], confirmed: int, points_n: int, timing_steps: int,
                       seconds_left: Optional[Callable[[dict[int, float]], float]] = None) -> list[dict[str, Any]]:
    """Samples per second at ``points_n`` micro-batches up to ``confirmed``: a warm-up step at each, then
    rounds that time one step at every point, the median per point. Interleaved, a change in the
    machine's load falls on every point alike, and the curve that prices a search keeps its shape.
    A point whose steps spread by more than NOISY_TIMINGS was timed on a busy machine: it is timed again
    (``remeasured``, up to BUSY_RETRIES times), and where it is still spread marked ``busy``: the knee, the
    plan and a search's prices leave it out. Timing again replays the batch the point last drew: it costs
    device time, not samples, so the probe's samples are the same however busy the machine was; it is not done
    once ``seconds_left`` (of each point's warm-up step's seconds) have passed since the warm-up."""
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
    warm_steps = {pb: _time_step(steps[pb]) for pb in points}  # a warm-up step at each
    warm = sum(warm_steps.values())
    deadline = time.perf_counter() + (seconds_left(warm_steps) if seconds_left is not None else math.inf)
    # Several rounds for the medians, but about two seconds per point at most.
    rounds = max(3, min(timing_steps, int(2.0 * len(points) / max(warm, 1e-6))))
    times = _timed_rounds(steps, points, rounds)
    remeasured, counted = dict.fromkeys(points, 0), dict(run.counter)
    for _ in range(BUSY_RETRIES):
        busy = [pb for pb in points if _spread(times[pb]) > NOISY_TIMINGS]
        if not busy or time.perf_counter() > deadline:  # quiet, or the probe has spent its planned run's seconds
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
