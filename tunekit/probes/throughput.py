"""The probe's throughput: samples per second at a few micro-batches up to the largest, each timed in a
block of consecutive steps as a run takes them, and timed again where the machine was busy; the knee of
the curve. And what an evaluation batch costs (:func:`measure_eval`): a search in device time prices a
trial's evaluations with it.
"""

from __future__ import annotations

import math
import statistics
import time
from collections.abc import Callable
from typing import Any, Optional

import numpy as np

from tunekit.inputs.data import BatchStream, dataset_size, iterate_once
from tunekit.probes.probe_run import ProbeRun
from tunekit.training.loop import evaluate

__all__ = ["measure_throughput", "measure_eval", "knee_and_fastest", "NOISY_TIMINGS", "BUSY_RETRIES", "EVAL_TIMED_BATCHES"]


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


def _time_pass(one_pass: Callable[[], Any], batches: int, batch: int) -> float:
    """Seconds one evaluation pass over ``batches`` batches of up to ``batch`` samples takes: the clock the
    evaluation's timing reads, and the seam a test replaces with a scripted one."""
    t0 = time.perf_counter()
    one_pass()
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
    """Samples per second at ``points_n`` micro-batches up to ``confirmed``: at each in turn, a warm-up step,
    then a block of timed steps, the median per point. A run steps at one batch, and on a CPU the first step
    after another batch size's is slower (1.3-1.9x at an LSTM's or a small GPT's smaller batches: the
    allocator's memory for the other shapes): no timed step follows another batch's. Each point times
    ``timing_steps`` steps, or fewer where its warm-up says they would take over two seconds, 3 at least.
    A point whose steps spread by more than NOISY_TIMINGS was timed on a busy machine: it is timed again
    (``remeasured``, up to BUSY_RETRIES times), and where it is still spread marked ``busy``: the knee, the
    plan and a search's prices leave it out. Timing again replays the batch the point last drew, after an
    untimed replay that settles it: it costs device time, not samples, so the probe's samples are the same
    however busy the machine was; it is not done once the probe is past ``seconds_left`` (read off each
    point's warm-up step's seconds)."""
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
    warm_steps: dict[int, float] = {}
    times: dict[int, list[float]] = {}
    for pb in points:  # a block at each point: its warm-up step settles it
        warm_steps[pb] = _time_step(steps[pb])
        n = max(3, min(timing_steps, int(2.0 / max(warm_steps[pb], 1e-6))))  # about two seconds a point at most
        times[pb] = [_time_step(steps[pb]) for _ in range(n)]
    deadline = time.perf_counter() + (seconds_left(warm_steps) if seconds_left is not None else math.inf)
    remeasured, counted = dict.fromkeys(points, 0), dict(run.counter)
    for _ in range(BUSY_RETRIES):
        busy = [pb for pb in points if _spread(times[pb]) > NOISY_TIMINGS]
        if not busy or time.perf_counter() > deadline:  # quiet, or the probe has spent its planned run's seconds
            break
        times.update(_timed_blocks(again, busy, {pb: len(times[pb]) for pb in busy}))
        for pb in busy:
            remeasured[pb] += 1
    run.counter.update(counted)  # the replays drew no new samples
    run.reset()
    return [{"batch": pb, "samples_per_s": pb * run.k / statistics.median(ts), "spread": _spread(ts),
             "remeasured": remeasured[pb], "busy": _spread(ts) > NOISY_TIMINGS} for pb, ts in times.items()]


def _timed_blocks(replay: dict[int, Callable[[], Any]], points: list[int],
                  rounds: dict[int, int]) -> dict[int, list[float]]:
    """At each of ``points`` in turn, an untimed replay that settles it, then ``rounds[pb]`` timed replays."""
    times: dict[int, list[float]] = {}
    for pb in points:
        replay[pb]()
        times[pb] = [_time_step(replay[pb]) for _ in range(rounds[pb])]
    return times


# An evaluation is timed over this many validation batches (fewer where the data has fewer), three times.
EVAL_TIMED_BATCHES = 4


def measure_eval(run: ProbeRun, val_data: Any, batch: int) -> Optional[dict[str, Any]]:
    """Seconds of one validation batch at ``batch``, as a run's evaluations take them (the shared
    ``evaluate``: forward only, in eval mode, the loader included; the task's own ``metrics`` left out):
    after an untimed pass, three timed passes over up to EVAL_TIMED_BATCHES batches, the median over the
    batches. Timed again, as the throughput's points are, where the passes spread by more than
    NOISY_TIMINGS; still spread, it is marked ``busy`` and prices nothing. None without validation data.
    A forward sample costs 0.1-0.6 of a training sample across the corpus: no ratio stands in for it."""
    if val_data is None:
        return None
    n = dataset_size(val_data)
    batches = EVAL_TIMED_BATCHES if n is None else max(1, min(EVAL_TIMED_BATCHES, -(-n // batch)))
    passed = sum(1 for _ in iterate_once(val_data, batch, batches)) if n is None else batches
    if passed < 1:
        return None

    def one_pass() -> None:
        evaluate(run.sub.model, val_data, run.sub.compute, device=run.dev, precision=run.sub.precision,
                 batch_size=batch, max_batches=passed)

    one_pass()  # the untimed pass: the loader's workers and the kernels' first-use costs
    times = [_time_pass(one_pass, passed, batch) for _ in range(3)]
    remeasured = 0
    while _spread(times) > NOISY_TIMINGS and remeasured < BUSY_RETRIES:
        times = [_time_pass(one_pass, passed, batch) for _ in range(3)]
        remeasured += 1
    return {"batch": batch, "batches": passed, "seconds": statistics.median(times) / passed,
            "spread": _spread(times), "remeasured": remeasured, "busy": _spread(times) > NOISY_TIMINGS}
