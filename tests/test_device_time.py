"""Device time as a cost the search sees: the probe's timed steps price every trial, and a budget in
device time buys each batch the updates that fit in it."""

import csv
import json
from pathlib import Path

import pytest

from tunekit import Local, Measurement, NoPruning, ProbeSettings, StepSettings, Study, UsageError, probe, search
from tunekit.results import ProbeResult
from tunekit.hpsearch.budget import Budget, parse_budget, price_budget, resolve_budget
from tunekit.hpsearch.plan import MIN_UPDATES, Plan, largest_batch, trial_config
from tunekit.results.step_time import format_seconds, micro_seconds, step_curve, update_seconds

from .tasks import SMALL, classification_task, fingerprint, write_space

# A device whose step costs 10 ms up to batch 32 (it saturates there), then grows with the batch.
GPU_LIKE = [[8, 0.010], [32, 0.010], [128, 0.040]]


def test_the_step_curve_reads_timed_steps_never_faster_for_a_larger_batch() -> None:
    timed = [{"batch": 64, "samples_per_s": 64 / 0.020}, {"batch": 8, "samples_per_s": 8 / 0.010},
             {"batch": 16, "samples_per_s": 16 / 0.009}]  # noise: 16 timed faster than 8
    curve = step_curve(timed)
    assert curve == [[8, 0.010], [16, 0.010], [64, 0.020]]
    assert micro_seconds(curve, 40) == pytest.approx(0.015)  # between points: linear
    assert micro_seconds(curve, 128) == pytest.approx(0.040)  # above: the last per-sample cost
    assert micro_seconds(curve, 4) == pytest.approx(0.010)  # below: no dearer, per sample no cheaper
    assert micro_seconds([[8, 0.010], [16, 0.020]], 4) == pytest.approx(0.005)
    assert update_seconds(curve, 16, 4) == pytest.approx(0.040)
    assert step_curve([]) == [] and format_seconds(0.5) == "0.5 s" and format_seconds(600) == "10 min"
    with pytest.raises(ValueError, match="no timed steps"):
        micro_seconds([], 8)


def test_a_budget_in_device_time_parses_and_is_priced_at_the_task_batch() -> None:
    assert parse_budget("10min") == (600.0, "seconds")
    assert parse_budget("1.5 h") == (5400.0, "seconds") and parse_budget("90s") == (90.0, "seconds")
    b = resolve_budget("10min", task_batch=32, default_updates=100, dataset_size=1000, tokens_per_sample=None)
    assert not b.priced and b.seconds == 600 and "samples" not in b.to_dict()
    priced = price_budget(b, 0.010, 32)  # 10 ms an update of 32: 60,000 updates, 1.92M samples
    assert priced.priced and priced.samples == 60_000 * 32 and priced.seconds == 600
    with pytest.raises(UsageError, match="timed no step to price it"):
        price_budget(b, None, 32)
    assert price_budget(Budget(100.0), None, 32) == Budget(100.0)  # other units need no price
    with pytest.raises(UsageError, match="10 fortnights.*10min"):
        parse_budget("10 fortnights")


def test_a_trial_in_device_time_runs_what_fits_and_a_batch_below_saturation_buys_fewer_samples() -> None:
    plan = Plan(budget_samples=32 * 500, seed=0, task_batch=32, max_micro=64, evals=4, budget_seconds=5.0,
                step_times=GPU_LIKE)
    at = {b: trial_config(plan, {"batch": b}) for b in (8, 32, 256)}
    # 10 ms a step at 8 and at 32: 500 updates each, so batch 8 sees a quarter of the samples.
    assert at[8].train["max_steps"] == at[32].train["max_steps"] == 500
    assert at[8].samples * 4 == at[32].samples
    # 256 runs as 64 x 4 micro-steps of 20 ms: 62 updates.
    assert (at[256].train["batch_size"], at[256].train["accumulation_steps"], at[256].train["max_steps"]) == (64, 4, 62)
    for cfg in at.values():
        assert cfg.predicted_seconds is not None and 0.98 * 5.0 <= cfg.predicted_seconds <= 5.0
        assert cfg.eval_samples == plan.budget_samples // 4  # rungs stay where the task's batch puts them
    # The largest batch offered leaves MIN_UPDATES updates of the budget.
    big = largest_batch(plan)
    assert trial_config(plan, {"batch": big}).train["max_steps"] >= MIN_UPDATES
    assert trial_config(plan, {"batch": 2 * big}).train["max_steps"] < MIN_UPDATES
    # Its evaluations are paid first: 420 updates and 4 evaluations of 0.2 s (every 105th update, and at the end)
    # fill 5 s; 421 would take a fifth (every 105th: 105, 210, 315, 420, and the end).
    evaluated = Plan(budget_samples=32 * 500, seed=0, task_batch=32, max_micro=64, evals=4, budget_seconds=5.0,
                     step_times=GPU_LIKE, eval_seconds=0.2)
    cfg = trial_config(evaluated, {"batch": 32})
    assert cfg.train["max_steps"] == 420 and cfg.predicted_seconds == pytest.approx(420 * 0.010 + 4 * 0.2)
    # The budget's samples at the task's batch: what is left after one evaluation more than that, at most.
    assert price_budget(Budget(5.0, "seconds", 0.0), 0.010, 32, evaluated.steps_seconds()).samples == 400 * 32
    assert trial_config(evaluated, {"batch": largest_batch(evaluated)}).train["max_steps"] >= MIN_UPDATES
    with pytest.raises(UsageError, match=r"evaluations take about 5s of it.*at least 5.2s"):
        price_budget(Budget(5.0, "seconds", 0.0), 0.010, 32, 0.0)
    # Rung branches too: each an evaluation, and updates a fifth of those so far (at evaluations 1 and 2 of 4).
    branched = Plan(budget_samples=32 * 500, seed=0, task_batch=32, max_micro=64, evals=4, budget_seconds=5.0,
                    step_times=GPU_LIKE, eval_seconds=0.2, rung_cooldown=0.2, branch_evals=[1, 2])
    cfg = trial_config(branched, {"batch": 32})
    # 316 updates: evaluations after 79, 158, 237 and at the end, branches of 16 and 32 updates at the first two
    # (each evaluated): 4.84 s; 317 would add an evaluation at 316 (5.05 s).
    assert cfg.train["max_steps"] == 316
    assert cfg.predicted_seconds == pytest.approx(316 * 0.010 + (16 + 32) * 0.010 + (4 + 2) * 0.2)
    # A budget in samples keeps its samples, and its trials are priced all the same.
    samples_plan = Plan(budget_samples=3200, seed=0, task_batch=32, max_micro=64, step_times=GPU_LIKE)
    cfg = trial_config(samples_plan, {"batch": 8})
    assert cfg.samples == 3200 and cfg.predicted_seconds == pytest.approx(400 * 0.010)


def _timed(tmp_path: Path, name: str, trials: int = 3, **kw: object):
    space = write_space(tmp_path, SMALL + '\n[batch_size]\ntype = "categorical"\nchoices = [16, 64]\n')
    return search(classification_task(), str(space), trials=trials, seed=1, out=tmp_path / name, progress=False, **kw,
                  backend=Local(device="cpu"))


@pytest.mark.slow  # two searches
def test_a_search_in_device_time_from_a_stored_probe_is_the_same_twice_and_reports_its_seconds(
        tmp_path: Path, steady_clock: None) -> None:
    first = _timed(tmp_path, "first", budget="0.5s", pruner=NoPruning())
    stored = ProbeSettings(probe=tmp_path / "first" / "probe.json")
    runs = [_timed(tmp_path, f"again{i}", budget="0.5s", pruner=NoPruning(), probes=stored) for i in range(2)]
    assert fingerprint(runs[0]) == fingerprint(runs[1])
    assert [t["predicted_seconds"] for t in runs[0].trials] == [t["predicted_seconds"] for t in runs[1].trials]
    plan = runs[0].plan
    # One evaluation: the validation set (128 samples) at the task's batch of 32, 4 batches at the scripted
    # 0.2 ms + 5 us a sample each, timed by the probe and stored with it.
    timed = ProbeResult.load(tmp_path / "first" / "probe.json").eval_time
    assert timed is not None and timed["batch"] == 32 and timed["batches"] == 4
    assert plan["eval_seconds"] == pytest.approx(4 * (2e-4 + 5e-6 * 32))
    for t in runs[0].trials:  # each trial ran what its batch buys in 0.5 s at the stored prices, evaluations paid first
        assert t["predicted_seconds"] <= 0.5 and t["seconds"] > 0
        per = update_seconds(plan["step_times"], t["micro_batch"], t["accumulation_steps"])
        assert t["updates"] == int((0.5 - 9 * plan["eval_seconds"]) / per)
        evals = len(range(max(1, t["updates"] // 8), t["updates"], max(1, t["updates"] // 8))) + 1
        assert t["predicted_seconds"] == pytest.approx(t["updates"] * per + evals * plan["eval_seconds"])
    assert first.budget["unit"] == "seconds" and first.device == "cpu" and first.probe_seconds > 0
    # search.json, trials.csv and the table carry the seconds beside the samples.
    saved = json.loads((tmp_path / "again0" / "search.json").read_text())
    assert all("predicted_seconds" in t for t in saved["trials"])
    rows = list(csv.DictReader((tmp_path / "again0" / "trials.csv").open()))
    assert all(float(r["predicted_seconds"]) > 0 and float(r["seconds"]) > 0 for r in rows)
    table = runs[0].table()
    assert "device time" in table and "a full run of it" in table and "predicted" in table


def test_a_budget_in_device_time_needs_a_probe_that_timed_its_steps(tmp_path: Path) -> None:
    untimed = probe(classification_task(), measure=Measurement(throughput_points=0, noise_repeats=0),
                    step=StepSettings(device="cpu"), progress=False)
    with pytest.raises(UsageError, match="timed no step"):
        _timed(tmp_path, "second", budget="1s", probes=ProbeSettings(probe=untimed))


def _stopped_at_the_limit(r, limit: float, asked: int) -> None:
    """No trial started once the study had spent ``limit`` device seconds, and the table says so."""
    spent = [float(t["seconds"]) for t in sorted(r.trials, key=lambda t: t["finished"])]
    assert 1 <= len(spent) < asked
    assert sum(spent[:-1]) < limit <= sum(spent) + r.probe_seconds
    assert "reached: no trial started after it" in r.table()


@pytest.mark.slow  # a search
def test_a_study_wide_device_time_limit_starts_no_trial_after_it(tmp_path: Path, steady_clock: None) -> None:
    _timed(tmp_path, "first", budget="0.3s", pruner=NoPruning())
    r = _timed(tmp_path, "limited", budget="0.3s", pruner=NoPruning(),
               probes=ProbeSettings(probe=tmp_path / "first" / "probe.json"), study=Study(time_limit="0.6s"), trials=8)
    assert r.probe_seconds == 0  # a stored probe costs nothing here: the trials spent the limit
    _stopped_at_the_limit(r, 0.6, 8)  # trials of ~0.1-0.2 s (their evaluations paid out of the 0.3 s): 3-6 of 8
    with pytest.raises(UsageError, match="time_limit must be a device time, got '3 days'"):
        search(classification_task(), study=Study(time_limit="3 days"))


@pytest.mark.slow  # a search with the probes
def test_the_search_probe_tries_no_batch_the_space_cannot_offer(tmp_path: Path) -> None:
    """The probe's dearest steps are its largest batches: a search's probe stops at the largest batch its
    space can offer (choices centre at or below the range test's batch) and at what the budget can use."""
    from tunekit.inputs.space import load_space

    sp = load_space("from_scratch")
    assert sp.largest_batch(32) == 128 and sp.largest_batch(24) == 128  # 4 x, to a power of two
    assert sp.largest_batch(None) is None  # no range-test batch: only the probe bounds it
    assert load_space("full_finetune").largest_batch(32) == 64
    r = search(classification_task(), "from_scratch", trials=1, budget="6400samples", out=tmp_path / "o",
               pruner=NoPruning(), backend=Local(device="cpu"), probes=ProbeSettings(memory_budget="256MiB"))
    assert r.plan["ref_batch"] == 32 and len(classification_task().train_data) == 256  # the data and budget (6400 / 20) allow more
    saved = ProbeResult.load(tmp_path / "o" / "probe.json")
    assert saved.max_batch == r.probe["max_batch"] == 128 and max(t["batch"] for t in saved.throughput) == 128
    assert "128" in r.distributions["batch"] and "256" not in r.distributions["batch"]
