"""The probe's cost bounded by the run it plans for (issue 52 item 2): at most the planned run's samples under
1,000 updates and 10% of them beyond, said before and after; a setting given asking for more is obeyed."""

from __future__ import annotations

import dataclasses
import warnings

import pytest

from tunekit import Measurement, probe
from tunekit.probes.batch_probe import ProbeCostWarning
from tunekit.probes.probe_cost import CostCap, cost_cap, plan_stages, stage_steps

from .tasks import regression_task


def _run(steps: int) -> object:
    """The regression task (256 samples, batch 16) with a planned run of ``steps`` updates."""
    base = regression_task()
    return dataclasses.replace(base, defaults={**base.defaults, "max_steps": steps})


def test_a_short_runs_probe_draws_no_more_than_the_run_and_says_so_before_and_after() -> None:
    task = _run(20)  # 320 samples: less than one 256-batch step and the noise scale (2,416) took before
    with warnings.catch_warnings():
        warnings.simplefilter("error", ProbeCostWarning)  # within its run: no warning
        r = probe(task, progress=False)
    assert r.run_samples == 320 and r.samples <= 320
    assert all(t["batch"] <= 256 for t in r.tried) and r.max_batch <= 320 // 3  # a step never over the run's samples
    assert r.noise is None and r.settings.noise_not_measured.startswith("not measured: it would draw 2,416 samples")
    # No noise scale to move it: the plan is for the run's own batch, and says why.
    assert r.splits[0]["effective_batch"] == 16 and r.splits_reason.startswith("the task's own batch: the noise scale")
    assert r.cost_plan.startswith("at most ") and "planned run's 320 (20 updates at batch 16" in r.cost_plan
    text = str(r)  # what the CLI prints: the cost planned, what the cap cut, and the cost spent against the run
    assert f"cost planned: {r.cost_plan}" in text and "cost: batches up to" in text
    assert f"{r.samples / 320:.2f}x the samples" in text and "of the planned run (20 updates at batch 16)" in text


def test_a_long_runs_probe_draws_a_tenth_of_it() -> None:
    r = probe(_run(2000), progress=False)  # 32,000 samples: 3,200 for the probe
    assert r.run_samples == 32_000 and 0 < r.samples <= 3_200
    assert "the cap: 10% of it" in r.cost_plan


def test_a_setting_given_over_the_cap_is_obeyed_and_said() -> None:
    with pytest.warns(ProbeCostWarning, match="the probe will draw up to"):
        r = probe(_run(20), measure=Measurement(batch_limit=256, noise_repeats=4, noise_warmup=5), progress=False)
    assert r.tried[0]["batch"] == 256 and r.noise is not None  # the batch and the noise scale asked for
    assert r.samples > r.run_samples and any("over the cap" in n for n in r.cost_notes)
    # cost_share=0: no cap at all, the 0.1 probe's batches up to the data's size.
    with pytest.warns(ProbeCostWarning):  # over the run, as before the cap
        assert probe(_run(20), measure=Measurement(cost_share=0, noise_repeats=0), progress=False).max_batch == 256


def steps_of(cap: CostCap, k: int) -> int:
    return cap.run_steps * k


@pytest.mark.parametrize("k", [1, 4])
@pytest.mark.parametrize("steps, batch", [(10, 8), (150, 16), (200, 64), (999, 32), (2000, 32), (50_000, 256)])
def test_the_plan_keeps_within_the_cap_at_the_default_settings(steps: int, batch: int, k: int) -> None:
    share = 1.0 if steps < 1000 else 0.1
    cap = CostCap(steps, batch * k, share, int(share * steps * batch * k))
    plan = plan_stages(cap, Measurement(), 100_000, k, 50, None)
    assert plan.ahead <= cap.samples and plan.limit <= cap.run_samples
    # In micro-steps too (what a small model's seconds follow): at most the run's, its share.
    steps = stage_steps(plan.throughput_points, plan.timing_steps, k, plan.noise_repeats, plan.noise_warmup)
    assert sum(steps) <= max(cap.share * steps_of(cap, k), stage_steps(0, 3, k, 0, 0)[0])
    # A target batch given: the noise scale cannot change the plan, and is not measured, whatever the cap.
    targeted = plan_stages(None, Measurement(), 100_000, k, 50, 256)
    assert targeted.noise_repeats == 0 and "the batch asked for (256)" in (targeted.noise_skipped or "")


def test_the_cap_is_the_tasks_run() -> None:
    task = _run(1000)
    cap = cost_cap(task, 2, None)
    assert cap is not None and (cap.run_steps, cap.run_batch, cap.share, cap.samples) == (1000, 32, 0.1, 3200)
    assert cost_cap(task, 1, 0) is None and cost_cap(object(), 1, None) is None  # no cap; no planned run known
    assert cost_cap(regression_task(), 1, None).run_steps == 200  # no max_steps: train's default


def test_a_busy_point_is_not_timed_again_once_the_probe_has_spent_its_runs_seconds(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A scripted clock: a step costs 1 ms + 10 us a sample, so the 20-update run takes about 7 ms, spent before
    the timings start; a point busy every other step is left out without being timed again, and said so.
    Without the cap it is timed again (BUSY_RETRIES times), as before."""
    from collections import Counter

    from tunekit import StepSettings
    from tunekit.probes import throughput

    calls: Counter[int] = Counter()

    def time_step(step: object) -> float:
        b = int(step().samples)  # type: ignore[operator]
        calls[b] += 1
        return (1e-3 + 1e-5 * b) * (10 if b == 16 and calls[b] % 2 == 0 else 1)

    monkeypatch.setattr(throughput, "_time_step", time_step)
    measure = dict(trace_sizes=(2, 4), throughput_points=3, timing_steps=3, noise_repeats=0, calibrate_steps=False,
                   batch_limit=16)
    r = probe(_run(20), step=StepSettings(device="cpu"), measure=Measurement(**measure), progress=False)
    busy = {t["batch"]: t for t in r.throughput}[16]
    assert busy["busy"] and busy["remeasured"] == 0
    assert "not timed again, as the probe had spent its planned run's seconds" in r.table()
    calls.clear()
    r = probe(_run(20), step=StepSettings(device="cpu"), measure=Measurement(**measure, cost_share=0), progress=False)
    assert {t["batch"]: t for t in r.throughput}[16]["remeasured"] == throughput.BUSY_RETRIES
