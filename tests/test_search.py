import json
import math
import warnings
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import optuna
import pytest
import torch

from tunekit import (Halving, Local, Measurement, NoPruning, Objective, ProbeSettings, RandomSampler, Refine,
                    SharedStudy, StepSettings, Study, Sweep, TPE, UsageError, load_space, lr_find, probe, search)
from tunekit.results import LRFindResult
from tunekit.hpsearch.seeded_space import batch_centre, batch_choices, distributions, lr_bounds_from_curve, reference_batch
from tunekit.inputs.space import list_spaces

from .tasks import (DIVERGING, FAILING, SMALL, TWO_LRS, classification_task, fingerprint, kill_and_resume, regression_task,
                    run_cli, write_space)


def test_shipped_spaces_parse() -> None:
    names = list_spaces()
    assert {"from_scratch", "full_finetune", "lora", "classifier_head"} <= set(names)
    for n in names:
        sp = load_space(n)
        assert sp.entries["lr"].seeded == "lr_find" and sp.needs_probe
    assert load_space("lora").entries["task.rank"].choices == [4, 8, 16]


@pytest.mark.parametrize(
    "body, needle",
    [
        ('[lr]\ntype = "gaussian"\nlow = 1\nhigh = 2\n', "entry [lr] has type 'gaussian'"),
        ('[lr]\ntype = "float"\nlow = 0.1\nhigh = 0.01\n', "entry [lr] has low 0.1 >= high 0.01"),
        ('[lr]\ntype = "float"\nlog = true\nlow = 0\nhigh = 1\n', "entry [lr] is log-scaled but low is 0"),
        ('[lr]\ntype = "float"\nlow = 0.1\nhihg = 1\n', "entry [lr] has an unknown key 'hihg'"),
        ('[schedule]\ntype = "categorical"\n', "entry [schedule] needs a non-empty list of choices"),
        ('[warmup]\ntype = "float"\nseeded = "probe"\nlow = 0\nhigh = 1\n', "entry [warmup] seeded = 'probe' is not supported"),
        ('[colour]\ntype = "fixed"\nvalue = 1\n', "entry [colour] is neither a training setting"),
        ('[wieght_decay]\ntype = "float"\nlow = 0.001\nhigh = 0.1\n', "nor [task.NAME]: did you mean [weight_decay]?"),
        ('[max_steps]\ntype = "fixed"\nvalue = 4\n', "entry [max_steps] is not searched: a trial's length is what its "
         "budget buys at its batch: give the budget instead (e.g. budget='200updates')"),
        ('[batch]\nseeded = "lr_find"\n', "entry [batch] must be seeded = \"probe\""),
        ("[lr\n", "is not valid TOML"),
        ('[lr]\ntype = "float"\nlog = true\nlow = 1e-4\nhigh = 1\nseeded = "lr_find"\nmargin = "x"\n', "margin must be a number of decades"),
        ('[task.width]\ntype = "int"\nlow = 1\nhigh = 8\nstep = "a"\n', "step must be a positive integer"),
        ('[task.width]\ntype = "int"\nlog = true\nlow = 0.5\nhigh = 8\n', "a log int range needs low >= 1"),
        ('[warmup]\ntype = "float"\nlow = 0\nhigh = 1\nadaptive_l2 = [0, 1]\n', "which only a float [weight_decay] takes"),
        ('[weight_decay]\ntype = "categorical"\nchoices = [0]\nadaptive_l2 = [0, 1]\n', "only a float [weight_decay]"),
        ('[weight_decay]\ntype = "float"\nlow = 0\nhigh = 1\nadaptive_l2 = 1e-3\n', "adaptive_l2 must be [low, high]"),
        ('[weight_decay]\ntype = "float"\nlog = true\nlow = 1e-3\nhigh = 1\nadaptive_l2 = [0, 1e-3]\n',
         "is log-scaled but adaptive_l2 low is 0"),
    ],
)
def test_bad_space_files_name_the_entry(tmp_path: Path, body: str, needle: str) -> None:
    path = write_space(tmp_path, body)
    with pytest.raises(UsageError) as exc:
        load_space(str(path))
    assert needle in str(exc.value) and "\n" not in str(exc.value)


def test_lr_bounds_and_batch_choices_from_given_probe_results() -> None:
    lrs = np.logspace(-6, 0, 100)
    x = np.log10(lrs)
    loss = 2.0 - 1.5 / (1 + np.exp(-(x + 3) * 3)) + np.where(x > -1.5, 5 * (x + 1.5) ** 2, 0.0)
    lf = LRFindResult(lrs=lrs.tolist(), losses=loss.tolist(), smoothed=[], suggestions={}, default_rule="tunekit",
                      suggestion=1e-3, confidence=1.0, confident=True, reasons=[], diverged=False, diverged_at_lr=None,
                      seconds=0.0, settings={})
    low, high = lr_bounds_from_curve(lf, margin=0.5)
    # The descent starts near 10**-3.7 (10% of the drop) and ends at the smoothed minimum, near 10**-1.9;
    # the best peak LR may lie up to 25x above the minimum.
    assert -4.6 < np.log10(low) < -4.0
    assert -0.7 < np.log10(high) < 0.0
    assert lr_bounds_from_curve(lf, margin=2.0)[1] > high  # a margin wider than 25x widens it
    pr = probe(classification_task(), memory_budget="256MiB", step=StepSettings(device="cpu"),
               measure=Measurement(throughput_points=2, noise_repeats=4))
    pr.critical_batch = 100.0
    assert batch_choices(load_space("from_scratch").entries["batch"], pr) == [32, 64, 128, 256]  # 512 > the 256 samples


def _probe_like(critical: float | None, interval: tuple[float, float] | None, n: int = 4096) -> SimpleNamespace:
    return SimpleNamespace(critical_batch=critical, critical_batch_range=interval, knee_batch=256, max_batch=1024,
                           dataset_size=n)


def test_batch_centre_is_the_lr_batch_and_the_noise_scale_only_without_one() -> None:
    entry = load_space("from_scratch").entries["batch"]
    # The LR's batch (64) is the centre, whatever the noise scale says: one at the start of training is a
    # lower bound on the run's, so even a confident estimate below it does not move it.
    for critical, interval in ((129.0, (50.0, 280.0)), (20.0, (12.0, 30.0)), (515.0, (180.0, float("inf"))),
                               (None, None), (129.0, None)):
        assert batch_centre(_probe_like(critical, interval), 64) == 64
    assert batch_choices(entry, _probe_like(3.0, (2.0, 4.0)), 64) == [16, 32, 64, 128, 256]
    # An LR batch inside the choices' span but off the powers of two is offered too.
    assert 100 in batch_choices(entry, _probe_like(129.0, (50.0, 280.0)), 100)
    # Without a range test (no reference batch): the point estimate, else the throughput knee.
    assert batch_centre(_probe_like(129.0, (50.0, 280.0)), None) == 129
    assert batch_centre(_probe_like(None, None), None) == 256
    assert 100 not in batch_choices(entry, _probe_like(12.0, (10.0, 14.0)), None)


def test_seed_trial_pairs_the_suggested_lr_with_its_own_batch(tmp_path: Path) -> None:
    task = classification_task()
    lf = lr_find(task, sweep=Sweep(sweep_steps=30), step=StepSettings(device="cpu"))
    ref = reference_batch(lf)
    assert ref == task.batch_size == 32
    pr = probe(task, memory_budget="256MiB", step=StepSettings(device="cpu"),
               measure=Measurement(throughput_points=2, noise_repeats=4))
    pr.critical_batch, pr.critical_batch_range = 100.0, (20.0, 200.0)  # 32 is plausible: the seed keeps it
    r = search(task, "from_scratch", trials=1, backend=Local(device="cpu"),
               probes=ProbeSettings(lr_find=lf, probe=pr), budget="100updates")
    assert r.seed_params["batch"] == 32 and r.trials[0]["config"]["lr"] == pytest.approx(lf.suggestion)  # design's first
    pr.critical_batch, pr.critical_batch_range = 8.0, (6.0, 9.0)  # a confident estimate below it: no move
    r = search(task, "from_scratch", trials=5, pruner=NoPruning(), backend=Local(device="cpu"),
               probes=ProbeSettings(lr_find=lf, probe=pr), budget="100updates")
    assert r.seed_params["batch"] == 32
    # The design tries half the batch too. The LR was found at batch 32; at 16 the trial draws the same
    # samples as one at 32 (100 updates of 32 = 200 updates of 16), and an adaptive optimizer's (AdamW)
    # LR goes down by the square root below it.
    half = next(t for t in r.trials if t["micro_batch"] * t["accumulation_steps"] == 16)
    assert half["params"]["lr"] == pytest.approx(lf.suggestion) and r.plan["lr_rule"] == "sqrt_below"
    assert half["config"]["lr"] == pytest.approx(lf.suggestion / 2**0.5)
    assert half["updates"] == 200 and half["samples"] == 3200


@pytest.mark.slow  # a search with the probes
def test_seeded_search_enqueues_the_seed_first(tmp_path: Path) -> None:
    task = classification_task()
    lf = lr_find(task, sweep=Sweep(sweep_steps=30), step=StepSettings(device="cpu"))
    lf.to_json(tmp_path / "lr_find.json")
    pr = probe(task, memory_budget="256MiB", step=StepSettings(device="cpu"),
               measure=Measurement(throughput_points=2, noise_repeats=4))
    pr.to_json(tmp_path / "probe.json")
    r = search(task, "from_scratch", trials=4, out=tmp_path / "out", backend=Local(device="cpu"),
               probes=ProbeSettings(lr_find=tmp_path / "lr_find.json", probe=str(tmp_path / "probe.json")),
               budget="20updates")
    first = r.trials[0]
    assert first["number"] == 0 and first["params"] == r.seed_params
    assert first["params"]["lr"] == pytest.approx(lf.suggestion)  # the design's first point: the suggestion
    assert r.probe_samples == 0  # the probes were given, not run
    for f in ("search.json", "trials.csv", "search.png", "study.db"):
        assert (tmp_path / "out" / f).exists()
    assert json.loads((tmp_path / "out" / "search.json").read_text())["study_name"] == r.study_name


@pytest.mark.slow  # a pruned search
def test_pruned_trials_are_never_complete(tmp_path: Path) -> None:
    space = write_space(tmp_path, SMALL.replace("1e-3", "1e-5").replace("high = 1e-1", "high = 1.0"))
    r = search(classification_task(), str(space), trials=10, seed=1, out=tmp_path / "o", backend=Local(device="cpu"),
               budget="40updates")
    states = [t["state"] for t in r.trials]
    assert "PRUNED" in states and "COMPLETE" in states
    for t in r.trials:
        if t["state"] == "COMPLETE":
            assert t["updates"] == 40 and t["samples"] == 40 * 32 and t["curve"][-1][0] == 40 * 32
        if t["state"] == "PRUNED":
            # Never before the first rung: 10 trials at reduction factor 3 get one rung, at 1/3
            # of the budget (the third of 8 evaluations: update 15).
            assert t["updates"] == 15 and t["samples"] == t["updates"] * 32
    # What Optuna holds agrees: a pruned trial is PRUNED there too, its reports in samples.
    assert r.storage.startswith("sqlite")
    study = optuna.load_study(study_name=r.study_name, storage=r.storage)
    assert [t.state.name for t in study.trials] == states
    for t in study.trials:
        if t.state.name == "PRUNED":
            assert max(t.intermediate_values) == t.user_attrs["samples"]


@pytest.mark.slow  # searches of several sizes
def test_asha_rungs_follow_the_trial_count(tmp_path: Path) -> None:
    # 30 trials at reduction factor 3: two rungs (30 / 3**2 >= 3 trials expected to finish), at 1/9
    # and 1/3 of the budget: updates 3 and 9 of 27; evaluating every update, trials stop exactly there.
    space = write_space(tmp_path, SMALL.replace("1e-3", "1e-5").replace("high = 1e-1", "high = 1.0"))
    r = search(regression_task(), str(space), trials=30, seed=0, sampler=TPE(seed_trial=False),
               pruner=Halving(evals=27), backend=Local(device="cpu"), budget="27updates")
    stopped = {t["updates"] for t in r.trials if t["state"] == "PRUNED"}
    assert stopped == {3, 9}
    assert sum(t["state"] == "COMPLETE" for t in r.trials) >= 3


@pytest.mark.slow  # two searches
def test_diverged_and_failed_trials_are_recorded_and_the_search_goes_on(tmp_path: Path) -> None:
    diverging = write_space(tmp_path, DIVERGING, "diverging.toml")
    r = search("tests.tasks:regression_task", str(diverging), trials=6, seed=0,
               sampler=RandomSampler(seed_trial=False), pruner=NoPruning(), backend=Local(device="cpu"),
               budget="10updates")
    assert len(r.trials) == 6
    for t in r.trials:
        if t["params"]["lr"] > 1:
            assert t["state"] == "FAIL" and t["diverged"] and "diverged at update" in t["error"]
        else:
            assert t["state"] == "COMPLETE" and t["value"] is not None
    assert {t["state"] for t in r.trials} == {"FAIL", "COMPLETE"}

    failing = write_space(tmp_path, FAILING, "failing.toml")
    r = search("tests.tasks:picky_regression_task", str(failing), trials=6, seed=0,
               sampler=RandomSampler(seed_trial=False), pruner=NoPruning(), backend=Local(device="cpu"),
               budget="10updates")
    assert len(r.trials) == 6
    for t in r.trials:
        if t["params"]["task.hidden"] == 13:
            assert t["state"] == "FAIL" and "RuntimeError: hidden=13 is unlucky" in t["error"]
        else:
            assert t["state"] == "COMPLETE"
    assert {t["state"] for t in r.trials} == {"FAIL", "COMPLETE"}


@pytest.mark.slow  # kill and resume
def test_resume_after_the_process_is_killed_at_random_points(tmp_path: Path) -> None:
    kill_and_resume(tmp_path, [], kills=3, seed=0)


def test_cli_search_usage_errors(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Each a usage error: exit 2 and one line on stderr (in this process: the CLI's main, as the
    console script calls it; a subprocess per case cost 20 s)."""
    from tunekit.cli import main

    bad = write_space(tmp_path, '[lr]\ntype = "float"\nlow = 1\nhigh = 0.5\n')
    for args, needle in ((["--space", str(bad)], "entry [lr] has low 1 >= high 0.5"),
                         (["--space", "nope"], "unknown space 'nope'"),
                         (["--trials", "0"], "--trials must be a positive integer, got 0: pass e.g. --trials 12"),
                         (["--lr-find", str(tmp_path / "none.json")], "does not exist"),
                         (["--storage", str(tmp_path / "missing" / "j.log")], "does not exist"),
                         (["--max-steps", "1"], "--max-steps must be >= 2"),
                         (["--budget", "4000 bananas"], "budget '4000 bananas' is not an amount with a unit"),
                         (["--budget", "10samples", "--max-steps", "5"], "give the budget once"),
                         (["--resume"], "--resume: there is no study")):
        code = main(["search", "--out", str(tmp_path / "o"), "--quiet", *args])
        err = capsys.readouterr().err
        assert code == 2, (args, err)
        lines = err.strip().splitlines()
        assert len(lines) == 1 and needle in lines[0], err


@pytest.mark.slow  # a subprocess
def test_cli_search_with_a_budget_in_epochs(tmp_path: Path) -> None:
    space = write_space(tmp_path, SMALL)
    r = run_cli("search", "--task", "tests.tasks:regression_task", "--space", str(space), "--trials", "2",
                "--budget", "0.5epochs", "--no-prune", "--device", "cpu", "--out", str(tmp_path / "o"), "--quiet")
    assert r.returncode == 0, r.stderr[-2000:]
    res = json.loads((tmp_path / "o" / "search.json").read_text())
    assert res["budget"]["unit"] == "epochs" and res["budget"]["samples"] == 128  # half of 256 samples
    assert [t["samples"] for t in res["trials"]] == [128, 128] and "epochs" in r.stdout


@pytest.mark.slow  # searches (in this process)
def test_report_redraws(tmp_path: Path, run_main, assert_usage_error) -> None:  # type: ignore[no-untyped-def]
    space = write_space(tmp_path, SMALL)
    search(regression_task(), str(space), trials=3, out=tmp_path / "s", backend=Local(device="cpu"),
           budget="10updates")
    (tmp_path / "s" / "search.png").unlink()
    code, out, err = run_main("report", str(tmp_path / "s"))
    assert code == 0 and "best loss" in out, err[-2000:]
    assert (tmp_path / "s" / "search.png").exists()
    assert_usage_error(["report", str(tmp_path / "nothing")], "nothing")


@pytest.mark.slow  # two searches
def test_same_seed_same_search(tmp_path: Path) -> None:
    """Probes included: the same seed gives the same trials (params, values, states, splits)."""
    runs = [search(classification_task(), "from_scratch", trials=6, seed=3, out=tmp_path / f"run{i}",
                   backend=Local(device="cpu"), budget="40updates") for i in range(2)]
    assert fingerprint(runs[0]) == fingerprint(runs[1])
    assert runs[0].probe_samples == runs[1].probe_samples > 0
    assert {t["state"] for t in runs[0].trials} & {"COMPLETE", "PRUNED"}
    # Another sampler seed, the same trial seed: the seed trial and design are the same runs, TPE's are not.
    other = search(classification_task(), "from_scratch", trials=6, seed=3, sampler=TPE(seed=4),
                   backend=Local(device="cpu"),
                   probes=ProbeSettings(lr_find=tmp_path / "run0" / "lr_find.json", probe=tmp_path / "run0" / "probe.json"),
                   budget="40updates")
    assert fingerprint(other)[:5] == fingerprint(runs[0])[:5]
    assert other.sampler_seed == 4 and other.seed == 3


def test_budget_is_samples_whatever_the_batch(tmp_path: Path) -> None:
    """Every trial draws the same samples: batch 16 runs 4x the updates of batch 64."""
    space = write_space(tmp_path, SMALL + '\n[batch_size]\ntype = "categorical"\nchoices = [16, 64]\n')
    r = search(classification_task(), str(space), trials=4, budget="1280samples", seed=0,
               sampler=RandomSampler(seed_trial=False), pruner=NoPruning(), backend=Local(device="cpu"))
    for t in r.trials:
        assert t["samples"] == 1280 and t["updates"] == 1280 // t["params"]["batch_size"]
        assert t["config"]["max_steps"] == t["updates"] and t["curve"][-1][0] == 1280
    assert r.compute == 4 * 1280 and r.budget["unit"] == "samples"
    # Validation: the same samples for every trial, at a batch size that is not the trial's.
    assert {t["config"]["eval_batch_size"] for t in r.trials} == {32}


def test_budget_units_parse_and_refuse() -> None:
    from tunekit.hpsearch.budget import parse_budget, resolve_budget

    assert parse_budget("4000samples") == (4000.0, "samples")
    assert parse_budget("2 epochs") == (2.0, "epochs")
    assert parse_budget("1e6tokens") == (1e6, "tokens")
    assert parse_budget(500) == (500.0, "samples")
    b = resolve_budget("200updates", task_batch=64, default_updates=100, dataset_size=1000, tokens_per_sample=None)
    assert b.samples == 12800 and b.of(12800) == pytest.approx(200)
    assert resolve_budget("2epochs", task_batch=64, default_updates=100, dataset_size=1000, tokens_per_sample=None).samples == 2000
    assert resolve_budget("6400tokens", task_batch=8, default_updates=100, dataset_size=None, tokens_per_sample=64).samples == 100
    assert resolve_budget(None, task_batch=32, default_updates=100, dataset_size=None, tokens_per_sample=None).samples == 3200
    for bad, needle in (("4000 bananas", "is not an amount with a unit"), ("-3samples", "is not an amount"),
                        ("0samples", "budget must be positive")):
        with pytest.raises(UsageError, match=needle):
            parse_budget(bad)
    with pytest.raises(UsageError, match="tokens needs batches of token ids"):
        resolve_budget("1e6tokens", task_batch=8, default_updates=100, dataset_size=None, tokens_per_sample=None)


def test_plan_splits_from_memory_and_rescales_the_lr() -> None:
    from tunekit.hpsearch.plan import Plan, initial_design, lr_rule_for, split_batch, trial_config
    from tunekit.training.optimizers import rescale_lr

    assert split_batch(256, 4096) == (256, 1)
    assert split_batch(256, 100) == (64, 4)  # the largest divisor that fits
    assert split_batch(96, 40) == (32, 3)
    assert rescale_lr(1e-3, 64, 256, "sqrt") == pytest.approx(2e-3)
    # As measured by benchmarks/lr_batch.py: with the same samples at every batch, linear for SGD, and for
    # adaptive optimizers the square root below the reference batch, unchanged above it; with the same
    # updates (device time), the square root both ways.
    sgd, adam = torch.optim.SGD([torch.zeros(1)], lr=0.1), torch.optim.AdamW([torch.zeros(1)])
    assert [lr_rule_for(sgd), lr_rule_for(adam), lr_rule_for(adam, "updates")] == ["linear", "sqrt_below", "sqrt"]
    assert rescale_lr(1e-3, 64, 16, "sqrt_below") == pytest.approx(5e-4) and rescale_lr(1e-3, 64, 256, "sqrt_below") == 1e-3
    assert rescale_lr(0.1, 64, 256, "linear") == pytest.approx(0.4)
    assert rescale_lr(0.1, 64, 256, "none") == 0.1
    plan = Plan(budget_samples=12800, seed=7, task_batch=64, max_micro=100, ref_batch=64, lr_rule="linear",
                fixed={"min_lr_ratio": 0.1})
    cfg = trial_config(plan, {"lr": 0.1, "batch": 256, "warmup": 0.05})
    assert (cfg.train["batch_size"], cfg.train["accumulation_steps"], cfg.train["max_steps"]) == (64, 4, 50)
    assert cfg.train["lr"] == pytest.approx(0.4) and cfg.train["seed"] == 7 and cfg.train["min_lr_ratio"] == 0.1
    assert cfg.samples == 12800 and cfg.train["eval_every"] == 50 // 8
    # The design starts at the seed trial (the suggestion: on the corpus it reads neither high nor low),
    # then steps a third and three times it, inside the space.
    dists = {"lr": optuna.distributions.FloatDistribution(1e-3, 1e-1, log=True),
             "batch": optuna.distributions.CategoricalDistribution([16, 32, 64, 128])}
    design = initial_design(dists, 0.05, 64, 5)
    assert design[0] == {"lr": pytest.approx(0.05), "batch": 64}
    assert [d["lr"] for d in design] == pytest.approx([0.05, 0.05 / 3, 0.1, 0.05, 0.05])
    assert [d["batch"] for d in design] == [64, 64, 64, 32, 16]
    # On a device a step of twice the batch does not saturate, the last point tries twice the batch.
    assert [d["batch"] for d in initial_design(dists, 0.05, 64, 5, larger_batch=True)] == [64, 64, 64, 32, 128]
    # Elsewhere the seed trial keeps the task's own recipe, clipped into the space.
    dists["weight_decay"] = optuna.distributions.FloatDistribution(1e-3, 0.1, log=True)
    dists["schedule"] = optuna.distributions.CategoricalDistribution(["cosine", "linear"])
    seeded = initial_design(dists, 0.05, 64, 2, recipe={"weight_decay": 5e-4, "schedule": "linear"})
    assert seeded[0]["weight_decay"] == 1e-3 and seeded[0]["schedule"] == "linear"
    assert initial_design(dists, 0.05, 64, 1)[0]["weight_decay"] == pytest.approx(1e-2)  # no recipe: the middle
    # With the range test's interval, the bracketing points are its ends (issue 51), not a third and 3x.
    bracketed = initial_design(dists, 0.02, 64, 3, interval=(0.005, 0.05))
    assert [d["lr"] for d in bracketed] == pytest.approx([0.02, 0.005, 0.05])
    assert [d["lr"] for d in initial_design(dists, 0.02, 64, 3, interval=(0.03, 0.05))] == pytest.approx(
        [0.02, 0.02 / 3, 0.06])  # an interval that does not hold the suggestion is not used
    # A suggestion more than 10x from the task's own LR: the last point tries the task's LR.
    far = initial_design(dists, 0.05, 64, 5, recipe={"lr": 0.002})
    assert [d["lr"] for d in far] == pytest.approx([0.05, 0.05 / 3, 0.1, 0.05, 0.002]) and far[-1]["batch"] == 64
    wide = initial_design(dists, None, 64, 5, recipe={"lr": 0.005})  # no range test to trust: the task's LR, wider
    assert [d["lr"] for d in wide] == pytest.approx([0.005, 0.015, 0.005 / 3, 0.05, 0.001])
    spread = initial_design(dists, None, 64, 5)  # nor a recipe: over the range, middle first
    assert [d["lr"] for d in spread][:3] == pytest.approx([1e-2, 10 ** -1.5, 10 ** -2.5])


def test_rungs_wait_until_the_first_complete_trial_has_learned() -> None:
    """No trial stops before one has completed; the first rung is where that trial had covered half its
    drop (a plateau at the start ranks trials by noise); later trials meet rungs at the same samples."""
    from tunekit.hpsearch.rungs import Rungs, ladder, learning_point

    assert ladder(800, 24, 3, 8) == [3]  # one rung for 24 trials at rf 3: 1/3 -> the third of 8 evaluations
    assert ladder(800, 100, 3, 8) == [1, 3]  # 100 trials: two, from 1/9 (the first evaluation)
    assert ladder(800, 24, 3, 8, first_rung=0.3) == [3]
    plateau = [(100 * k, v) for k, v in enumerate([2.1, 2.1, 1.2, 0.8, 0.6, 0.5, 0.5], start=1)]
    assert learning_point(plateau, initial=2.1, final=0.45, evals=8) == 3  # 2.1 - 1.2 >= half of 1.65
    assert learning_point(plateau, initial=0.4, final=0.45, evals=8) is None  # no drop: no evidence

    study = optuna.create_study()
    pruner = Rungs(unit=100, evals=8, ladder_evals=[1, 3], reduction_factor=3)
    dist = {"lr": optuna.distributions.FloatDistribution(1e-4, 1, log=True)}

    def report(values: list[float]) -> bool:
        t = study.ask(dist)
        for k, v in enumerate(values, start=1):
            t.report(v, 100 * k)
            if pruner.prune(study, study.trials[t.number]):
                study.tell(t, state=optuna.trial.TrialState.PRUNED)
                return True
        study.tell(t, values[-1])
        return False

    assert pruner.rungs(study) == []  # nothing completed: no rung yet
    t0 = study.ask(dist)
    for step, v in plateau:
        t0.report(v, step)
    t0.set_user_attr("initial_loss", 2.1)
    study.tell(t0, 0.45)
    assert pruner.rungs(study) == [3]  # rung 1 (inside the plateau) is dropped
    assert not report([9.0, 9.0])  # worse at evaluations 1-2: nothing decides there
    assert report([2.0, 2.0, 2.5])  # worse than trial 0 at evaluation 3: stopped
    assert not report([2.0, 2.0, 1.0, 0.7, 0.6, 0.5, 0.4])  # better there: goes on


def test_a_saved_range_test_of_another_task_is_refused(tmp_path: Path) -> None:
    lf = lr_find(regression_task(), sweep=Sweep(sweep_steps=20), step=StepSettings(device="cpu"))
    lf.to_json(tmp_path / "lr_find.json")
    with pytest.raises(UsageError, match=r"the saved lr_find result is for task 'regression', this search runs task 'classification'"):
        search(classification_task(), "from_scratch", trials=1, backend=Local(device="cpu"),
               probes=ProbeSettings(lr_find=tmp_path / "lr_find.json"), budget="10updates")


@pytest.mark.parametrize("saved, runs", [("regression", "task"), ("task", "regression")])
def test_a_saved_range_test_of_an_unnamed_task_says_task_name(saved: str, runs: str, tmp_path: Path) -> None:
    """A CLI lr_find.json (named after the spec's function) reused by a search of the same task as a Python
    Task without a name (or the other way round): the refusal names the fix, Task(name=...)."""
    import dataclasses

    lf = LRFindResult(lrs=[1e-4, 1e-3], losses=[1.0, 0.9], smoothed=[], suggestions={}, default_rule="tunekit",
                      suggestion=1e-3, confidence=1.0, confident=True, reasons=[], diverged=False, diverged_at_lr=None,
                      seconds=0.0, settings={"task": saved})
    task = dataclasses.replace(regression_task(), name=runs)
    with pytest.raises(UsageError) as exc:
        search(task, "from_scratch", trials=1, backend=Local(device="cpu"), probes=ProbeSettings(lr_find=lf),
               budget="10updates")
    assert str(exc.value).startswith(f"the saved lr_find result is for task '{saved}', this search runs task '{runs}': ")
    assert "Task(name='regression', ...)" in str(exc.value) and "defaults to 'task'" in str(exc.value)


@pytest.mark.slow  # searches
def test_one_directory_holds_one_study(tmp_path: Path) -> None:
    """Another space in the same --out would overwrite the first study's report: refused, nothing written."""
    space = write_space(tmp_path, SMALL)
    search(regression_task(), str(space), trials=1, out=tmp_path / "o", backend=Local(device="cpu"),
           budget="10updates")
    before = (tmp_path / "o" / "search.json").read_text()
    other = write_space(tmp_path, SMALL, "other.toml")
    with pytest.raises(UsageError, match="holds the report of study 'tunekit-regression-space'"):
        search(regression_task(), str(other), trials=1, out=tmp_path / "o", backend=Local(device="cpu"),
               budget="10updates")
    assert (tmp_path / "o" / "search.json").read_text() == before
    with pytest.raises(UsageError, match="run with budget_samples = 160, this run asks for 320"):
        search(regression_task(), str(space), trials=2, out=tmp_path / "o", backend=Local(device="cpu"),
               study=Study(resume=True), budget="20updates")


@pytest.mark.slow  # searches (in this process)
def test_cli_search_takes_fixed_task_settings(tmp_path: Path, run_main) -> None:  # type: ignore[no-untyped-def]
    """--set KEY=VALUE fixes a task setting for every trial (and the probes)."""
    space = write_space(tmp_path, SMALL)
    code, _, err = run_main("search", "--task", "tests.tasks:regression_task", "--space", str(space), "--trials", "2",
                            "--max-steps", "10", "--set", "hidden=7", "--device", "cpu", "--out", str(tmp_path / "o"),
                            "--quiet")
    assert code == 0, err[-2000:]
    res = json.loads((tmp_path / "o" / "search.json").read_text())
    assert res["plan"]["fixed"]["task.hidden"] == 7 and len(res["trials"]) == 2


@pytest.mark.slow  # a search interrupted, then resumed
def test_ctrl_c_keeps_what_finished_and_resume_goes_on(tmp_path: Path) -> None:
    """Interrupted in its third trial, a search has written the report of the two that finished."""
    task = regression_task()
    calls = {"n": 0}

    def compute(model, batch):
        calls["n"] += 1
        if calls["n"] == 2 * 14 + 3:  # into the third trial (a trial: 10 updates, then 4 validation batches)
            raise KeyboardInterrupt
        return torch.nn.functional.mse_loss(model(batch[0]), batch[1])

    task.loss, task.compute_loss = None, compute
    space = write_space(tmp_path, SMALL)
    with pytest.raises(KeyboardInterrupt):
        search(task, str(space), trials=4, out=tmp_path / "o", pruner=NoPruning(evals=1), backend=Local(device="cpu"),
               budget="10updates")
    report = json.loads((tmp_path / "o" / "search.json").read_text())
    assert [t["state"] for t in report["trials"]][:2] == ["COMPLETE", "COMPLETE"]
    assert report["trials"][2]["error"] == "interrupted; re-run on --resume"
    calls["n"] = -10**9  # no more interruptions
    r = search(task, str(space), trials=4, out=tmp_path / "o", pruner=NoPruning(evals=1), backend=Local(device="cpu"),
               study=Study(resume=True), budget="10updates")
    assert sum(t["state"] == "COMPLETE" for t in r.trials) == 4
    assert r.trials[0]["value"] == report["trials"][0]["value"]


@pytest.mark.slow  # a search with the probes
def test_a_search_result_prints_short_and_loads_back(tmp_path: Path) -> None:
    space = write_space(tmp_path, SMALL)
    r = search(regression_task(), str(space), trials=2, out=tmp_path / "o", backend=Local(device="cpu"),
               budget="10updates")
    text = repr(r)
    assert text.startswith("SearchResult(study='tunekit-regression-space', trials=2") and len(text) < 200
    back = type(r).from_json(tmp_path / "o" / "search.json")
    assert back.trials == r.trials and back.compute == r.compute == sum(t["samples"] for t in r.trials)


def test_importances_from_a_few_trials_are_called_a_guess(tmp_path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    space = write_space(tmp_path, SMALL)
    r = search(regression_task(), str(space), trials=3, pruner=NoPruning(), backend=Local(device="cpu"),
               budget="10updates")
    assert r.plot_importances().get_xlabel() == "importance (Optuna, 3 complete trials: a rough guess)"


@pytest.mark.slow  # searches (in this process)
def test_the_best_config_reruns_exactly(tmp_path: Path, run_main, assert_usage_error) -> None:  # type: ignore[no-untyped-def]
    """`tunekit train --config DIR/search.json` trains the best trial again and gets its value, to the bit."""
    space = write_space(tmp_path, SMALL)
    out = tmp_path / "s"
    code, said, err = run_main("search", "--task", "tests.tasks:regression_task", "--space", str(space), "--trials", "3",
                               "--max-steps", "20", "--device", "cpu", "--out", str(out), "--quiet")
    assert code == 0, err[-2000:]
    assert f"tunekit train --config {out}/search.json" in said
    best = json.loads((out / "search.json").read_text())["best_value"]
    code, said, err = run_main("train", "--config", str(out / "search.json"), "--out", str(tmp_path / "t"), "--quiet")
    assert code == 0, err[-2000:]
    assert json.loads((tmp_path / "t" / "train.json").read_text())["evals"][-1]["loss"] == best
    assert "(the same)" in said
    assert_usage_error(["train", "--config", str(out), "--lr", "0.1", "--quiet"], "--lr would change it")
    assert_usage_error(["train", "--config", str(out), "--trial", "99", "--quiet"], "has no trial 99")


@pytest.mark.slow  # a subprocess: the console entry point of `tunekit report`, end to end
def test_report_prints_no_optuna_log_and_probes_are_written_with_their_plots(tmp_path: Path, run_main) -> None:  # type: ignore[no-untyped-def]
    out = tmp_path / "s"
    code, _, err = run_main("search", "--task", "tests.tasks:classification_task", "--trials", "4", "--max-steps", "40",
                            "--device", "cpu", "--out", str(out), "--quiet")
    assert code == 0, err[-2000:]
    for name in ("lr_find", "probe"):  # each JSON with its plot, as the standalone commands write them
        assert (out / f"{name}.json").is_file() and (out / f"{name}.png").stat().st_size > 1000
    rep = run_cli("report", str(out))
    assert rep.returncode == 0 and "A new study created" not in rep.stderr + rep.stdout and rep.stderr == ""


# --- the settings object and the backend seam ------------------------------------------------


def test_search_takes_one_object_per_concept() -> None:
    """search() takes at most 16 parameters (one per concept), each a settings field or an object of one concept, and
    builds its settings without locals(): a parameter added to search() and not to the settings fails here."""
    import dataclasses
    import inspect

    from tunekit.hpsearch.settings import SearchSettings

    params = inspect.signature(search).parameters
    assert len(params) <= 16, list(params)
    fields = {f.name for f in dataclasses.fields(SearchSettings)}
    named = {n for n, p in params.items() if p.kind is inspect.Parameter.KEYWORD_ONLY}
    assert named <= fields, named - fields
    for path in (Path(__file__).parent.parent / "tunekit").rglob("*.py"):
        assert "locals()" not in path.read_text(), path


def test_the_cli_has_a_flag_for_every_field_of_the_search_objects() -> None:
    """The CLI's flags are generated from the objects' fields: read the fields, find each flag in the
    parser of tunekit search (the ones a Python object cannot be typed as, e.g. ray_init, say so)."""
    import dataclasses

    from tunekit.cli import build_parser
    from tunekit.hpsearch.options import CONCEPTS
    from tunekit.option_fields import flag_of

    parser = build_parser()
    search_cmd = next(a for a in parser._subparsers._group_actions if a.dest == "command").choices["search"]  # noqa: SLF001
    flags = {o for a in search_cmd._actions for o in a.option_strings}  # noqa: SLF001
    api_only = set()
    for concept, (selector, classes) in CONCEPTS.items():
        assert selector is None or selector in flags, selector
        for cls in classes.values():
            for f in dataclasses.fields(cls):
                if f.metadata.get("cli"):
                    assert flag_of(f) in flags, (cls.__name__, f.name)
                else:
                    api_only.add(f.name)
    assert api_only == {"ray_init", "run_trials"}


def test_the_objects_check_their_values_in_one_line() -> None:
    from tunekit import Halving, ProbeSettings, Ray, SharedStudy, Study, TPE
    from tunekit.hpsearch.settings import SearchSettings

    s = SearchSettings(budget="40updates", seed=7, out="runs/x")
    assert (s.budget, s.sampler_seed, str(s.out), s.prune) == ("40updates", 7, "runs/x", True)
    assert s.replace(trials=3).trials == 3 and s.trials == 12  # frozen: a copy, never a change
    with pytest.raises(Exception):
        s.trials = 3  # type: ignore[misc]
    for make, needle in [(lambda: SearchSettings(trials=0), "trials must be a positive integer, got 0"),
                         (lambda: SearchSettings(budget="3 fortnights"), "3 fortnights"),
                         (lambda: SearchSettings(backend="dask"), "backend must be a tunekit object"),
                         (lambda: Ray(gpus_per_trial=1.5), "1.5 is above 1 but not whole"),
                         (lambda: Ray(cpus_per_trial=True), "must be a number >= 0, got True"),
                         (lambda: Ray(cpus_per_trial=float("inf")), "must be a number >= 0, got inf"),
                         (lambda: Halving(reduction_factor=1), "reduction_factor"),
                         (lambda: Halving(rungs=2, first_rung=0.1), "not both"),
                         (lambda: TPE(design=-1), "design"),
                         (lambda: SharedStudy(storage=""), "SharedStudy needs storage=URL"),
                         (lambda: SharedStudy(storage="x.log", threads=0), "threads"),
                         (lambda: Study(time_limit="soon"), "soon"),
                         (lambda: SearchSettings(probes=ProbeSettings(), keep="some"), "keep 'some' is unknown")]:
        with pytest.raises(UsageError, match=needle) as caught:
            make()
        assert "\n" not in str(caught.value)


def test_the_old_keywords_still_work_warned_and_mean_the_same() -> None:
    """tunekit 0.x's flat keywords build the same settings as the objects, with a DeprecationWarning."""
    from tunekit import Halving, Local, NoPruning, ProbeSettings, Ray, SharedStudy, Study, TaskSpec, TPE
    from tunekit.hpsearch.run import settings_of
    from tunekit.objective import Objective

    common = dict(trials=4, budget=None, objective="loss", seed=3, out=None, keep="best", progress=False)
    defaults = dict(sampler=TPE(), pruner=Halving(), backend=Local(), study=Study(), probes=ProbeSettings())
    with pytest.warns(DeprecationWarning, match="sampler_seed="):
        old = settings_of("shapes", **common, **defaults, caller="search",
                          deprecated=dict(sampler_seed=5, rungs=2, backend="ray", cpus_per_trial=2, storage="j.log",
                                          study_name="s", grace_period=30, max_steps=40))
    new = settings_of("shapes", **{**common, "budget": "40updates"}, caller="search", deprecated={},
                      sampler=TPE(seed=5), pruner=Halving(rungs=2), backend=Ray(cpus_per_trial=2),
                      study=SharedStudy(storage="j.log", name="s", heartbeat_grace=30), probes=ProbeSettings())
    assert old == new
    with pytest.warns(DeprecationWarning):
        assert settings_of("shapes", **common, **{**defaults, "pruner": Halving()}, deprecated=dict(prune=False)).pruner == NoPruning()
    spec = settings_of(TaskSpec("tests.tasks:regression_task", {"width": 8}), **common, **defaults, deprecated={})
    assert spec.task_config == {"width": 8}
    assert Objective("accuracy").direction == "maximize" and Objective.of("f1", "maximize").name == "f1"
    with pytest.raises(UsageError, match="does not take|unexpected keyword nonsense"):
        settings_of("shapes", **common, **defaults, deprecated=dict(nonsense=1))
    with pytest.raises(UsageError, match=r"^sampler 'tpee' is unknown: pass sampler=TPE\(\) or RandomSampler\(\)$"):
        settings_of("shapes", **common, **{**defaults, "sampler": "tpee"}, deprecated={})


def test_each_old_keyword_is_told_its_own_replacement_and_a_conflict_is_refused() -> None:
    """The warning names each old keyword's new form; an object and an old keyword that disagree are refused."""
    from tunekit import Halving, Local, NoPruning, ProbeSettings, Study, TPE
    from tunekit.hpsearch.run import settings_of
    from tunekit.objective import Objective

    common = dict(trials=4, budget=None, objective="loss", seed=3, out=None, keep="best", progress=False)
    defaults = dict(sampler=TPE(), pruner=Halving(), backend=Local(), study=Study(), probes=ProbeSettings())
    with pytest.warns(DeprecationWarning) as got:
        settings_of("shapes", **common, **defaults, deprecated=dict(max_steps=30, prune=False, evals=4, device="cpu"))
    said = str(got[0].message)
    assert said.startswith("search(max_steps=, prune=, evals=, device=) is deprecated since tunekit 0.2.0 and "
                           "removed in tunekit 0.3.0: each has its object: pass ")
    for new in ("budget='30updates' (for max_steps=30)", "pruner=NoPruning(evals=4) (for prune=False, evals=4)",
                "backend=Local(device='cpu') (for device='cpu')"):
        assert new in said, said
    for given, old, needle in [
            (dict(pruner=Halving(evals=6)), dict(evals=4), r"^pruner=Halving\(evals=6\) and evals=4 disagree: give "
             r"evals once, in pruner=Halving\(evals=...\)$"),
            (dict(pruner=Halving(evals=6)), dict(prune=False), r"^pruner=Halving\(evals=6\) and prune=False disagree"),
            (dict(pruner=NoPruning()), dict(prune=True), r"^pruner=NoPruning\(\) and prune=True disagree"),
            (dict(backend=Local(device="cuda")), dict(device="cpu"), r"^backend=Local\(device='cuda'\) and device="),
            (dict(study=Study(name="x")), dict(storage="j.log"), r"^study=Study\(name='x'\) and storage='j.log'"),
            (dict(objective=Objective("f1", "minimize")), dict(direction="maximize"), r"and direction='maximize' disagree")]:
        with pytest.raises(UsageError, match=needle):
            settings_of("shapes", **{**common, **defaults, **given}, deprecated=old)
    with pytest.warns(DeprecationWarning):  # the same value both ways is no conflict
        assert settings_of("shapes", **{**common, **defaults, "pruner": Halving(evals=6)},
                           deprecated=dict(evals=6)).pruner.evals == 6


def test_a_search_runs_its_trials_through_the_backend_seam_alone(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Whatever runs the trials meets the search at one seam: a Backend given a Work. A backend
    that records what it is given, and runs it locally, sees the plan, the target and the settings."""
    from tunekit.hpsearch import run as run_module
    from tunekit.hpsearch.backends.local import LocalBackend

    seen: list = []

    class Recording(LocalBackend):
        def check(self, settings):  # type: ignore[no-untyped-def]
            seen.append(("check", settings.trials))

        def run(self, work):  # type: ignore[no-untyped-def]
            seen.append(("run", work.target, work.plan.budget_samples, sorted(work.dists)))
            super().run(work)

    monkeypatch.setattr(run_module, "get_backend", lambda name: Recording())
    r = search(regression_task(), str(write_space(tmp_path, SMALL)), trials=3, backend=Local(device="cpu"),
               budget="10updates")
    assert seen[0] == ("check", 3) and seen[1][0:3] == ("run", 3, r.plan["budget_samples"])
    assert seen[1][3] == sorted(r.distributions) and len([t for t in r.trials if t["state"] != "FAIL"]) == 3


# --- the objective: what trials are compared by ----------------------------------------------

def _two_lr_search(tmp_path: Path, name: str, **kw: object) -> "object":
    from .tasks import classification_task

    return search(classification_task(), str(write_space(tmp_path, TWO_LRS)), trials=3, out=tmp_path / name, **kw,
                  sampler=RandomSampler(design=0, seed_trial=False), pruner=NoPruning(), backend=Local(device="cpu"),
                  budget="40updates")


@pytest.mark.slow  # searches
def test_an_accuracy_search_keeps_the_most_accurate_trial_not_the_lowest_loss(tmp_path: Path) -> None:
    import csv

    r = _two_lr_search(tmp_path, "acc", objective="accuracy")
    done = [t for t in r.trials if t["state"] == "COMPLETE"]
    by_acc, by_loss = max(done, key=lambda t: t["value"]), min(done, key=lambda t: t["val_loss"])
    assert (r.objective, r.direction) == ("accuracy", "maximize")
    assert by_acc["params"] != by_loss["params"]  # the two rankings disagree on this task
    assert r.best_value == by_acc["value"] and r.best_params == by_acc["params"] == {"lr": 3.0}
    for t in done:  # the value is the final validation accuracy; the loss is recorded beside it
        assert 0 <= t["value"] <= 1 and t["val_loss"] > 0 and t["curve"][-1][1] == t["value"]
    # The same search by its validation loss keeps the other trial.
    by_default = _two_lr_search(tmp_path, "loss")
    assert (by_default.objective, by_default.best_params) == ("loss", {"lr": 0.003})
    # The report says the metric; trials.csv holds the validation loss and the LR as trained.
    assert "accuracy" in r.table().splitlines()[0] and "best accuracy 0.6" in r.table()
    rows = list(csv.DictReader((tmp_path / "acc" / "trials.csv").open()))
    assert {"value", "val_loss", "lr", "lr_ref"} <= set(rows[0]) and float(rows[0]["val_loss"]) > 0
    stored = optuna.load_study(study_name=r.study_name, storage=f"sqlite:///{tmp_path / 'acc' / 'study.db'}")
    assert stored.direction == optuna.study.StudyDirection.MAXIMIZE and stored.metric_names == ["validation accuracy"]


@pytest.mark.slow  # searches
def test_a_function_objective_and_its_direction(tmp_path: Path) -> None:
    """objective=fn(model, val_data): the trials are ranked by it, the way direction says."""
    from .tasks import classification_task

    def val_loss_again(model: torch.nn.Module, data: object) -> float:
        x, y = data.tensors  # type: ignore[attr-defined]
        return float(torch.nn.functional.cross_entropy(model(x), y))

    r = _two_lr_search(tmp_path, "fn", objective=Objective(val_loss_again, "maximize"))  # the worst loss wins
    done = [t for t in r.trials if t["state"] == "COMPLETE"]
    assert r.objective == "val_loss_again" and r.best_params == {"lr": 3.0}
    assert all(abs(t["value"] - t["val_loss"]) < 1e-5 for t in done)  # the function saw the whole validation set
    with pytest.raises(UsageError, match="needs the task as a Task object"):
        search("tests.tasks:classification_task", "from_scratch", objective=Objective(val_loss_again, "maximize"))
    with pytest.raises(UsageError, match=r"say which way is better: pass objective=Objective\(.val_loss_again., .maximize.\)"):
        search(classification_task(), "from_scratch", objective=val_loss_again)
    with pytest.raises(UsageError, match="a shared study's objective must be a name"):
        search(classification_task(), "from_scratch", study=SharedStudy(storage=f"sqlite:///{tmp_path / 'x.db'}"),
               objective=Objective(val_loss_again, "maximize"))


def test_an_objective_the_task_cannot_give_fails_before_anything_runs(tmp_path: Path) -> None:
    with pytest.raises(UsageError, match="objective 'accuracy' needs class scores"):
        search(regression_task(), str(write_space(tmp_path, SMALL)), objective="accuracy", out=tmp_path / "a")
    assert not (tmp_path / "a" / "lr_find.json").exists()  # no probe ran
    with pytest.raises(UsageError, match="objective 'f1' is not a metric of this task"):
        search(regression_task(), str(write_space(tmp_path, SMALL)), objective=Objective("f1", "maximize"))
    with pytest.raises(UsageError, match="direction must be minimize or maximize, got 'up'"):
        search(regression_task(), "from_scratch", objective=Objective("loss", "up"))


def test_rungs_keep_the_best_of_a_maximised_objective() -> None:
    """Successive halving compares sign x value: under maximize, the higher values go on."""
    from tunekit.hpsearch.rungs import Rungs

    def trial(number: int, value: float) -> SimpleNamespace:
        return SimpleNamespace(number=number, last_step=10, intermediate_values={10: value}, user_attrs={})

    others = [trial(i, v) for i, v in enumerate([0.9, 0.8, 0.7, 0.6, 0.5])]
    study = SimpleNamespace(get_trials=lambda deepcopy=False, states=None: others)
    up = Rungs(unit=10, evals=8, ladder_evals=[1], reduction_factor=3, adaptive=False, direction="maximize")
    down = Rungs(unit=10, evals=8, ladder_evals=[1], reduction_factor=3, adaptive=False)
    assert not up.prune(study, others[0]) and up.prune(study, others[4])  # 0.9 goes on, 0.5 stops
    assert down.prune(study, others[0]) and not down.prune(study, others[4])


@pytest.mark.slow  # searches (in this process)
def test_cli_search_for_accuracy_and_train_config_in_that_metric(tmp_path: Path, run_main, assert_usage_error) -> None:  # type: ignore[no-untyped-def]
    space = write_space(tmp_path, TWO_LRS)
    out = tmp_path / "s"
    code, _, err = run_main("search", "--task", "tests.tasks:classification_task", "--space", str(space), "--trials", "2",
                            "--max-steps", "40", "--device", "cpu", "--out", str(out), "--quiet", "--no-prune",
                            "--objective", "accuracy", "--direction", "maximize")
    assert code == 0, err[-2000:]
    saved = json.loads((out / "search.json").read_text())
    assert (saved["objective"], saved["direction"]) == ("accuracy", "maximize")
    code, said, err = run_main("train", "--config", str(out / "search.json"), "--out", str(tmp_path / "t"), "--quiet")
    assert code == 0, err[-2000:]
    assert json.loads((tmp_path / "t" / "train.json").read_text())["evals"][-1]["accuracy"] == saved["best_value"]
    assert "of the search: accuracy" in said and "(the same)" in said
    assert_usage_error(["search", "--task", "tests.tasks:regression_task", "--objective", "accuracy", "--quiet",
                        "--out", str(tmp_path / "b")], "needs class scores")


def test_the_design_takes_a_categorical_lr_at_its_nearest_choice() -> None:
    """A space whose lr is a list of choices: the seed trial and design pick the choices nearest
    the range test's LR (this crashed: a categorical has no low and high)."""
    from tunekit.hpsearch.plan import initial_design

    dists = {"lr": optuna.distributions.CategoricalDistribution([0.003, 0.03, 3.0])}
    points = initial_design(dists, lr=0.02, batch=None, n=5)
    # the seed trial at the suggestion (nearest 0.03), then a third of it (0.0067: nearest 0.003)
    assert points[:2] == [{"lr": 0.03}, {"lr": 0.003}] and {p["lr"] for p in points} <= {0.003, 0.03, 3.0}


def test_a_small_search_has_no_rung_and_a_rung_does_not_cut_a_tie() -> None:
    """Below rf**2 trials no rung (a rung would leave fewer than rf to compare); at a rung, a trial
    within 1% of the cut goes on (a difference the noise of one evaluation covers)."""
    from tunekit.hpsearch.rungs import Rungs, default_rungs, ladder

    assert [default_rungs(n, 3) for n in (2, 6, 8, 9, 26, 27)] == [0, 0, 0, 1, 1, 2]
    assert ladder(4000, 6) == [] and ladder(4000, 12) == [3]

    def trial(number: int, value: float) -> SimpleNamespace:
        return SimpleNamespace(number=number, last_step=10, intermediate_values={10: value}, user_attrs={})

    trials = [trial(0, 1.000), trial(1, 1.0017), trial(2, 1.05), trial(3, 1.2)]
    study = SimpleNamespace(get_trials=lambda deepcopy=False, states=None: trials)
    rungs = Rungs(unit=10, evals=8, ladder_evals=[1], reduction_factor=3, adaptive=False)
    # 4 at the rung: the best 1/3 is the leader alone; 0.17% behind it is a tie, 5% is not.
    assert [rungs.prune(study, t) for t in trials] == [False, False, True, True]


@pytest.mark.slow  # a search and its resumes
def test_a_resume_with_nothing_to_run_keeps_the_seconds_and_an_interrupted_trial_names_its_rerun(tmp_path: Path) -> None:
    import optuna as _optuna

    from tunekit.hpsearch.keys import INTERRUPTED_KEY
    from tunekit.hpsearch.study import requeue_interrupted, trial_dicts

    space = str(write_space(tmp_path, SMALL))
    first = search(regression_task(), space, trials=2, out=tmp_path / "o", backend=Local(device="cpu"),
                   budget="10updates")
    again = search(regression_task(), space, trials=2, out=tmp_path / "o", backend=Local(device="cpu"),
                   study=Study(resume=True), budget="10updates")
    assert again.seconds >= first.seconds and len(again.trials) == 2
    # A trial killed mid-run is re-run on resume: the report says which trial re-ran it.
    study = _optuna.create_study()
    t = study.ask({"lr": _optuna.distributions.FloatDistribution(1e-3, 1e-1)})
    study.tell(t, state=_optuna.trial.TrialState.FAIL)
    study.set_user_attr(INTERRUPTED_KEY, [t.number])
    requeue_interrupted(study)
    rerun = study.ask()
    study.tell(rerun, 0.5)
    rows = {d["number"]: d for d in trial_dicts(study)}
    assert rows[0]["error"] == "interrupted; re-run as trial 1" and rows[0]["rerun_as"] == 1 and rows[1]["retry_of"] == 0


@pytest.mark.slow  # a search and its resume
def test_resume_after_a_kill_during_the_probes_goes_on_with_them(tmp_path: Path) -> None:
    """A search killed during its probes leaves their saved files and no study: a restart with --resume (as a
    restart loop always passes it) goes on, reusing them and counting their cost, instead of refusing."""
    task, out = classification_task(), tmp_path / "o"
    out.mkdir()
    lf = lr_find(task, step=StepSettings(device="cpu"), refine=Refine(enabled=False), progress=False)
    lf.save(out, "lr_find")  # what the killed run had saved before it died in the batch probe
    r = search(task, "from_scratch", trials=2, out=out, backend=Local(device="cpu"), study=Study(resume=True),
               probes=ProbeSettings(memory_budget="256MiB"), budget="20updates")
    assert r.lr_find["suggestion"] == pytest.approx(lf.suggestion) and len(r.trials) == 2
    assert r.probe_samples > lf.samples > 0  # the reused range test, and the batch probe run now


def test_a_search_refused_before_its_study_holds_anything_leaves_no_study_db(tmp_path: Path) -> None:
    space = str(write_space(tmp_path, SMALL))
    with pytest.raises(UsageError, match="there is no study"):
        search(regression_task(), space, trials=2, out=tmp_path / "empty", backend=Local(device="cpu"),
               study=Study(resume=True), budget="10updates")
    assert not (tmp_path / "empty" / "study.db").exists()
    with pytest.raises(UsageError, match="does not exist"):
        search(regression_task(), space, trials=2, out=tmp_path / "m", backend=Local(device="cpu"),
               probes=ProbeSettings(lr_find=tmp_path / "nope.json"), budget="10updates")
    assert not (tmp_path / "m" / "study.db").exists()


def test_the_trial_table_shows_the_lr_each_trial_trained_at() -> None:
    """The lr param is the LR at the range test's batch; a batch-8 trial rescaled from 0.0156 trained at
    0.0078: the table, trials.csv, search.json's trial and the dashboard's attribute show that one."""
    from tunekit.hpsearch.plan import Plan, trial_config
    from tunekit.hpsearch.trial import start_attrs
    from tunekit.results import SearchResult

    plan = Plan(budget_samples=1600, seed=0, task_batch=16, max_micro=64, ref_batch=16, lr_rule="linear")
    cfg = trial_config(plan, {"lr": 0.0156, "batch": 8})
    attrs = start_attrs(cfg)
    assert attrs["lr_trained"] == pytest.approx(0.0078)
    row = {"number": 0, "state": "COMPLETE", "value": 0.5, "params": {"lr": 0.0156, "batch": 8},
           "config": attrs["config"], "lr": attrs["lr_trained"], "curve": [], "samples": 1600}
    r = SearchResult(study_name="s", storage="x", space="sp", direction="minimize", best_value=0.5,
                     best_params=row["params"], best_config=row["config"], trials=[row], seed_params={},
                     distributions={})
    line = r.table().splitlines()[1]
    assert "lr=0.0078" in line and "0.0156" not in line


def test_a_budget_under_the_probes_or_a_few_updates_is_warned_with_its_numbers() -> None:
    """Budget 1samples: said before the probes spend 1,600 samples on it, with what an update draws and the fix."""
    from tunekit import Local
    from tunekit.hpsearch.budget import BudgetWarning

    with warnings.catch_warnings():
        warnings.simplefilter("error", BudgetWarning)  # raised where it is said: before any probe runs
        with pytest.raises(BudgetWarning) as said:
            search(regression_task(), "from_scratch", trials=1, budget="1samples", backend=Local(device="cpu"), progress=False)
    text = str(said.value)
    assert text.startswith("budget 1samples is 1 sample a trial, under 20 updates at the task's batch of 16 "
                           "(one update draws 16 samples) and under what the probes will draw (the range test alone, "
                           "up to 100 updates at batch 16: 1,600 samples): a trial runs at batch 1 at most, 2 updates: "
                           "pass budget='1600samples' or probes=ProbeSettings(lr_find='lr_find.json') (a larger "
                           "budget, or a saved range test)"), text
    with warnings.catch_warnings():
        warnings.simplefilter("error", BudgetWarning)
        with pytest.raises(BudgetWarning, match=r"^budget 100samples is 100 samples a trial, under 20 updates .*"
                           r"pass budget='320samples' \(a larger budget\)$"):
            search(regression_task(), "from_scratch", trials=1, budget="100samples", backend=Local(device="cpu"), progress=False,
                   probes=ProbeSettings(lr_find=LRFindResult(lrs=[1e-4, 1e-3], losses=[1.0, 0.9], smoothed=[],
                   suggestions={}, default_rule="tunekit", suggestion=1e-3, confidence=1.0, confident=True, reasons=[],
                   diverged=False, diverged_at_lr=None, seconds=0.0, settings={"task": "regression"})))


def test_compute_in_full_trials_is_what_a_complete_trial_drew() -> None:
    """A budget of 1 sample runs trials of 2 updates: compute is counted in those trials, not in budgets."""
    from tunekit.results import SearchResult

    row = {"number": 0, "state": "COMPLETE", "value": 0.5, "params": {}, "config": {}, "samples": 2, "updates": 2}
    r = SearchResult(study_name="s", storage="x", space="sp", direction="minimize", best_value=0.5, best_params={},
                     best_config={}, trials=[row], seed_params={}, distributions={}, probe_samples=2599,
                     budget={"amount": 1.0, "unit": "samples", "per_sample": 1.0, "samples": 1},
                     lr_find={"suggestion": 0.01, "run_steps": 1, "own": True})
    table = r.table()
    assert "compute 2,601 samples (2,599 in probes, 1300.50 full trials)" in table, table
    assert "for a run of one trial (1 update)" in table


@pytest.mark.parametrize("budget, lead, beside", [
    ({"amount": 100.0, "unit": "samples", "per_sample": 1.0, "samples": 100},
     "compute 300 samples (100 in probes, 3.00 full trials)", "beside it 15 optimizer updates, 3 s of device time"),
    ({"amount": 10.0, "unit": "updates", "per_sample": 0.1, "samples": 100},
     "compute 30 updates (10 in probes, 3.00 full trials)",
     "beside it 300 samples, 15 optimizer updates, 3 s of device time"),
    ({"amount": 1.5, "unit": "seconds", "per_sample": 0.015, "samples": 100},
     "compute 3 s of device time (1 s in probes, 2.00 full trials)", "beside it 300 samples, 15 optimizer updates"),
])
def test_the_compute_line_leads_with_the_budgets_currency_and_shows_the_others_beside(budget, lead, beside) -> None:
    """Under a budget in samples (or updates, tokens, epochs) compute leads in that unit; under device time in
    device seconds; the other currencies follow, never first (issue 50, item 3)."""
    from tunekit.results import SearchResult

    row = {"number": 0, "state": "COMPLETE", "value": 0.5, "params": {}, "config": {}, "samples": 100, "updates": 5,
           "seconds": 1.0}
    r = SearchResult(study_name="s", storage="x", space="sp", direction="minimize", best_value=0.5, best_params={},
                     best_config={}, trials=[row, {**row, "number": 1}], seed_params={}, distributions={},
                     probe_samples=100, probe_seconds=1.0, budget=budget, probe={"updates": 3},
                     lr_find={"updates": 2})
    line = next(ln for ln in r.table().splitlines() if ln.startswith("trials: "))
    assert f"; {lead}; {beside}; " in line, line


def test_the_search_says_where_its_lr_came_from(tmp_path: Path) -> None:
    """The search's own range test is the curve alone: the report says so next to its number, and a
    saved refined lr_find result seeds it instead (one LR across tools)."""
    r = search(regression_task(),
               str(write_space(tmp_path, SMALL.replace('[warmup]', 'seeded = "lr_find"\n\n[warmup]'))), trials=1,
               backend=Local(device="cpu"), budget="10updates")
    assert "LR seeded from the search's own range test" in r.table() and "the curve alone" in r.table()
    # One LR across tools: the search's own range test is lr_find's for a run of one full trial.
    alone = lr_find(regression_task(), step=StepSettings(device="cpu"), run_steps=10)
    assert r.lr_find["run_steps"] == 10 and r.lr_find["suggestion"] == alone.suggestion and not r.lr_find["refined"]
    assert "for a run of one trial (10 updates)" in r.table()
    refined = lr_find(regression_task(), step=StepSettings(device="cpu"), sweep=Sweep(sweep_steps=40),
                      refine=Refine(steps=20, seeds=1))
    assert refined.refinement
    r2 = search(regression_task(),
                str(write_space(tmp_path, SMALL.replace('[warmup]', 'seeded = "lr_find"\n\n[warmup]'))), trials=1,
                backend=Local(device="cpu"), probes=ProbeSettings(lr_find=refined), budget="10updates")
    assert "LR seeded from the saved lr_find result" in r2.table() and r2.lr_find["suggestion"] == refined.suggestion


def test_a_trial_is_judged_at_a_rung_once_and_never_at_its_last_report() -> None:
    """Trials in flight while the first one completes (on Ray, in a shared study) passed the rung
    before it existed: they are not judged there afterwards; and a trial at its last report (its
    budget run, at 4000 of 4000 samples) is never stopped: that would throw its whole run away."""
    from tunekit.hpsearch.rungs import Rungs

    def trial(number: int, values: dict[int, float]) -> SimpleNamespace:
        return SimpleNamespace(number=number, last_step=max(values), intermediate_values=values, user_attrs={})

    leaders = [trial(i, {500: 0.1, 1000: 0.1}) for i in range(5)]
    late = trial(9, {500: 0.9, 1000: 0.9, 1500: 0.2})  # at 500 it was the worst, when no rung was there
    study = SimpleNamespace(get_trials=lambda deepcopy=False, states=None: leaders + [late])
    rungs = Rungs(unit=500, evals=8, ladder_evals=[1], reduction_factor=3, adaptive=False)
    assert not rungs.prune(study, late)  # its report at 1500 is not its first at or after the rung at 500
    fresh = trial(10, {500: 0.9})  # reaching the rung now: judged
    assert rungs.prune(SimpleNamespace(get_trials=lambda deepcopy=False, states=None: leaders + [fresh]), fresh)
    last = trial(11, {500: 0.1, 4000: 5.0})  # reported at the whole budget (8 x 500)
    assert not Rungs(unit=500, evals=8, ladder_evals=[1, 3, 7], reduction_factor=3, adaptive=False).prune(
        SimpleNamespace(get_trials=lambda deepcopy=False, states=None: leaders + [last]), last)


@pytest.mark.slow  # searches (in this process)
def test_a_task_that_cannot_train_stops_the_search_in_one_line(tmp_path: Path, run_main) -> None:  # type: ignore[no-untyped-def]
    """A loss that is not a scalar fails every trial the same way: the search stops on the first, with
    the one-line reason (not N failed trials and exit 0), and keeps what it recorded."""
    from .tasks import nonscalar_loss_task

    space = str(write_space(tmp_path, SMALL))
    with pytest.raises(UsageError, match="not a scalar"):
        search(nonscalar_loss_task(), space, trials=4, out=tmp_path / "o", backend=Local(device="cpu"),
               budget="10updates")
    saved = json.loads((tmp_path / "o" / "search.json").read_text())
    assert len(saved["trials"]) == 1 and saved["trials"][0]["state"] == "FAIL"
    code, _, err = run_main("search", "--task", "tests.tasks:nonscalar_loss_task", "--space", space, "--trials", "3",
                            "--max-steps", "20", "--device", "cpu", "--quiet", "--out", str(tmp_path / "c"))
    lines = err.strip().splitlines()  # what it recorded stays in c/ (not a usage error's nothing written)
    assert code == 2 and len(lines) == 1 and "not a scalar" in lines[0] and "Traceback" not in err


@pytest.mark.slow  # a search and two resumes
def test_studies_from_before_the_objective_resume_as_loss_studies(tmp_path: Path) -> None:
    """A plan stored before objectives existed is a loss study: resumed with another objective it is
    refused in one line (not maximised over old loss values), and resumed as it was it goes on."""
    from tunekit.hpsearch.keys import PLAN_KEY

    space = str(write_space(tmp_path, SMALL))
    search(regression_task(), space, trials=2, out=tmp_path / "o", backend=Local(device="cpu"), budget="10updates")
    url = f"sqlite:///{tmp_path / 'o' / 'study.db'}"
    study = optuna.load_study(study_name=optuna.get_all_study_names(url)[0], storage=url)
    old = {k: v for k, v in study.user_attrs[PLAN_KEY].items() if k not in ("objective", "direction")}
    study.set_user_attr(PLAN_KEY, old)
    with pytest.raises(UsageError, match="was run with objective = 'loss', this run asks for 'perplexity'"):
        search(regression_task(), space, trials=3, out=tmp_path / "o", objective="perplexity",
               backend=Local(device="cpu"), study=Study(resume=True), budget="10updates")
    again = search(regression_task(), space, trials=3, out=tmp_path / "o", backend=Local(device="cpu"),
                   study=Study(resume=True), budget="10updates")
    assert len(again.trials) == 3 and again.objective == "loss"


@pytest.mark.slow  # searches (in this process)
def test_report_refuses_a_json_file_that_is_not_a_search_json(tmp_path: Path, assert_usage_error) -> None:  # type: ignore[no-untyped-def]
    space = write_space(tmp_path, SMALL)
    search(regression_task(), str(space), trials=1, out=tmp_path / "s", backend=Local(device="cpu"),
           budget="10updates")
    other = tmp_path / "s" / "backup.json"
    other.write_text((tmp_path / "s" / "search.json").read_text())
    assert_usage_error(["report", str(other)], "is not a search.json")


def test_train_config_of_a_trial_with_no_final_value_says_so() -> None:
    from tunekit.results import TrainResult

    run = TrainResult(config={}, task="t", losses=[1.0] * 10)
    line = run.compared_with({"number": 4, "state": "PRUNED", "value": None})
    assert "ended pruned, with no final loss to compare with" in line and "NOT the same" not in line


def test_the_noise_scale_is_measured_only_without_a_range_test_batch(tmp_path: Path) -> None:
    """The search reads the noise scale only to centre its batches where no range test gave a batch: the
    probe skips it otherwise (and where the space has no batch), and says so."""
    from tunekit.hpsearch.resolve import prepare_inputs
    from tunekit.hpsearch.seeding import noise_repeats
    from tunekit.hpsearch.settings import SearchSettings
    from tunekit.entry_options import NOISE_REPEATS
    from tunekit.probes.batch_probe import noise_cost
    from tunekit.results.lr_find import LRFindSettings

    task = classification_task()
    updates, _ = noise_cost()
    ran_at = SimpleNamespace(settings=LRFindSettings(batch_size=task.batch_size))  # a range test's batch to centre on
    for budget in ("100000updates", "50updates", "60s"):
        inputs = prepare_inputs(task, "from_scratch", SearchSettings(budget=budget))
        repeats, why = noise_repeats(inputs, ran_at)
        assert repeats == 0 and "centre on the range test's batch" in why
        assert noise_repeats(inputs, None) == (NOISE_REPEATS, None)  # without one, the estimate is the centre
    no_batch = prepare_inputs(task, str(write_space(tmp_path, SMALL)), SearchSettings(budget="1000updates"))
    assert noise_repeats(no_batch, ran_at) == (0, "not measured: the space has no batch to centre")
    # A search: the probe skipped it (its cost is not in the probes'), the choices centre on the range
    # test's batch, and the table says why.
    r = search(task, "from_scratch", trials=1, backend=Local(device="cpu"),
               probes=ProbeSettings(memory_budget="256MiB"), budget="20updates")
    assert r.probe["critical_batch"] is None and r.seed_params["batch"] == task.batch_size
    assert r.probe["updates"] < updates and "critical batch not measured: the batch choices centre" in r.table()


class _Locked(torch.nn.Module):
    """A model holding a ``threading.Lock``: it neither deep-copies nor pickles."""

    def __init__(self) -> None:
        import threading

        super().__init__()
        self.net = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 4))
        self.lock = threading.Lock()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x)


def test_a_search_over_a_model_that_does_not_pickle_runs_and_says_how_its_probe_measured() -> None:
    import dataclasses

    task = dataclasses.replace(classification_task(), model=_Locked)
    r = search(task, "from_scratch", trials=1, budget="20updates", backend=Local(device="cpu"),
               probes=ProbeSettings(memory_budget="64KiB"))
    assert r.best_value is not None and r.probe["max_batch"] >= 1
    assert "cannot pickle '_thread.lock'" in r.probe["memory_warning"]
    assert "probe's memory: peak resident memory of each real step in this process" in r.table()


@pytest.mark.slow  # searches with two optimizers
def test_l2_inside_an_adaptive_optimizer_is_searched_over_its_own_range(tmp_path: Path) -> None:
    """L2 inside an adaptive optimizer (Adam's weight_decay) means far more than decoupled decay at the
    same number (for SGD the two are the same): where the task's optimizer does that, from_scratch
    searches its ``adaptive_l2`` range, and the seed trial keeps the task's own weight decay
    (inside that range; below the decoupled range, that range widens to hold it)."""
    import dataclasses

    from tunekit.training.optimizers import is_adaptive_l2

    p = [torch.nn.Parameter(torch.zeros(2))]
    assert is_adaptive_l2(torch.optim.Adam(p)) and is_adaptive_l2(torch.optim.RMSprop(p))
    assert is_adaptive_l2(torch.optim.NAdam(p)) and is_adaptive_l2(torch.optim.Adagrad(p))
    assert not is_adaptive_l2(torch.optim.AdamW(p)) and not is_adaptive_l2(torch.optim.Adam(p, decoupled_weight_decay=True))
    assert not is_adaptive_l2(torch.optim.SGD(p, lr=0.1, momentum=0.9))  # SGD's L2 is decay: no normalisation
    older = [torch.optim.Adam(p), torch.optim.AdamW(p)]  # as torch before 2.7 builds them: no flag in the group
    for opt in older:
        del opt.param_groups[0]["decoupled_weight_decay"]
    assert is_adaptive_l2(older[0]) and not is_adaptive_l2(older[1])
    # A shared study created before adaptive_l2 existed keeps its spec: an unset key is left out of it.
    from tunekit.hpsearch.shared.workers import space_dict

    assert "adaptive_l2" not in space_dict(load_space("classifier_head"))["entries"]["weight_decay"]
    assert space_dict(load_space("from_scratch"))["entries"]["weight_decay"]["adaptive_l2"] == [1e-6, 1e-3]

    class Custom(torch.optim.Optimizer):  # unknown to torch: taken as decoupling
        def __init__(self, params: list) -> None:
            super().__init__(params, {"lr": 0.1, "weight_decay": 0.0})

    assert not is_adaptive_l2(Custom(p))
    sp = load_space("from_scratch")
    assert "where an adaptive optimizer adds it to the gradient" in sp.table()
    wd = {c: distributions(sp, probe=_probe_like(None, None), adaptive_l2=c)["weight_decay"] for c in (True, False)}
    assert (wd[True].low, wd[True].high, wd[False].low, wd[False].high) == (1e-6, 1e-3, 1e-3, 0.1)
    adam = dataclasses.replace(regression_task(), optimizer=lambda ps: torch.optim.Adam(ps, lr=1e-3, weight_decay=5e-4))
    r = search(adam, "from_scratch", trials=4, backend=Local(device="cpu"),
               probes=ProbeSettings(memory_budget="256MiB"), budget="30updates")
    assert r.seed_params["weight_decay"] == pytest.approx(5e-4)  # the task's own, inside the adaptive_l2 range
    assert all(1e-6 <= t["params"]["weight_decay"] <= 1e-3 for t in r.trials)
    sgd = dataclasses.replace(regression_task(), optimizer=lambda ps: torch.optim.SGD(ps, lr=0.05, weight_decay=5e-4))
    r = search(sgd, "from_scratch", trials=1, backend=Local(device="cpu"),
               probes=ProbeSettings(memory_budget="256MiB"), budget="30updates")
    # Below the decoupled range: the range widens to hold the task's own, which the seed trial keeps.
    assert r.seed_params["weight_decay"] == pytest.approx(5e-4)
    assert r.widened == {"weight_decay": [pytest.approx(5e-4), pytest.approx(0.1)]}
    assert "weight_decay searched over 0.0005..0.1: widened to hold the task's own value" in r.table()


def test_the_space_holds_the_tasks_own_settings() -> None:
    """A range widens to hold the task's own value, so a search can return the user's recipe: on a log
    range a zero (no weight decay) stands ZERO_DECADES below the low end; an int range widens by its step;
    a value inside, a non-number or a seeded entry leaves the range as the space says."""
    from tunekit.hpsearch.seeded_space import ZERO_DECADES, holding_own, widened

    assert holding_own(1e-3, 0.1, True, 0.0) == (pytest.approx(1e-3 / 10**ZERO_DECADES), 0.1)
    assert holding_own(1e-3, 0.1, True, 5e-4) == (5e-4, 0.1)
    assert holding_own(1e-3, 0.1, True, 0.3) == (1e-3, 0.3)
    assert holding_own(1e-3, 0.1, True, 0.01) == (1e-3, 0.1)
    assert holding_own(0.0, 0.1, False, 0.0) == (0.0, 0.1)  # a linear range holds zero as it is
    assert holding_own(0.0, 0.1, False, 0.2) == (0.0, 0.2)
    assert holding_own(2, 10, False, 13, step=2) == (2, 14) and holding_own(2, 10, False, -1, step=2) == (-2, 10)
    for odd in (None, True, "0.5", math.nan):
        assert holding_own(1e-3, 0.1, True, odd) == (1e-3, 0.1)
    sp = load_space("from_scratch")
    own = {"weight_decay": 0.0, "warmup": 0.2, "lr": 50.0, "schedule": "step"}
    d = distributions(sp, probe=_probe_like(None, None), own=own)
    assert (d["weight_decay"].low, d["weight_decay"].high) == (pytest.approx(1e-5), 0.1)
    assert (d["warmup"].low, d["warmup"].high) == (0.0, 0.2)
    assert d["schedule"].choices == ("cosine", "linear")  # a categorical is the space's
    assert widened(sp, d) == {"weight_decay": [pytest.approx(1e-5), 0.1], "warmup": [0.0, 0.2]}
    assert widened(sp, distributions(sp, probe=_probe_like(None, None))) == {}
    assert (d["lr"].low, d["lr"].high) == (1e-5, 0.1)  # seeded: without a range test, the space's fallback
    # Inside an adaptive optimizer's L2 range the same rule holds.
    a = distributions(sp, probe=_probe_like(None, None), adaptive_l2=True, own={"weight_decay": 0.0})["weight_decay"]
    assert (a.low, a.high) == (pytest.approx(1e-8), 1e-3)
    # A log int range starts at 1: a value below it leaves the range alone (Optuna refuses low < 1).
    assert holding_own(2, 64, True, 0, step=1) == (2, 64) and holding_own(2, 64, True, 1, step=1) == (1, 64)
    # An int range whose high is off its step's lattice, as Optuna takes it, is not "widened".
    from tunekit.inputs.space import Entry, SearchSpace

    steps = SearchSpace("s", "", {"accumulation_steps": Entry("accumulation_steps", "int", low=2, high=11, step=2)})
    assert widened(steps, distributions(steps, probe=_probe_like(None, None))) == {}
    assert widened(steps, distributions(steps, probe=_probe_like(None, None), own={"accumulation_steps": 13})) == {
        "accumulation_steps": [2, 14]}


def test_the_stand_in_for_the_users_zero_is_given_back_as_that_zero() -> None:
    """A best value at the stand-in for the task's own zero (two decades below a log range, or below its
    adaptive_l2 range) is the user's 0.0, not a change to 1e-05; a value the user chose low stays as it is."""
    from tunekit.hpsearch.seeded_space import as_own, widened

    sp = load_space("from_scratch")
    for adaptive, stand_in in ((False, 1e-5), (True, 1e-8)):
        d = distributions(sp, probe=_probe_like(None, None), adaptive_l2=adaptive, own={"weight_decay": 0.0})
        best = {"weight_decay": d["weight_decay"].low, "lr": 0.01}
        assert best["weight_decay"] == pytest.approx(stand_in)
        assert as_own(best, sp, widened(sp, d)) == {"weight_decay": 0.0, "lr": 0.01}
        assert as_own({"weight_decay": 0.05}, sp, widened(sp, d)) == {"weight_decay": 0.05}  # sampled: as it is
    chosen = distributions(sp, probe=_probe_like(None, None), own={"weight_decay": 5e-4})  # the user's own 5e-4
    assert as_own({"weight_decay": 5e-4}, sp, widened(sp, chosen)) == {"weight_decay": 5e-4}


def test_only_what_the_user_chose_widens_the_space() -> None:
    """The space holds the user's own settings, not tunekit's defaults (a space of clip norms 0.1-0.5 stays
    so: 1.0 is tunekit's default, not the user's); a warmup in updates is not a fraction of the run; the
    weight decay is the run's where set (training applies it over the optimizer's), else the decaying group's."""
    import dataclasses

    from tunekit import TrainConfig
    from tunekit.hpsearch.seeding import own_settings, recipe

    cfg = TrainConfig(max_steps=50)
    task = regression_task()
    groups = lambda ps: torch.optim.AdamW([{"params": ps[:1], "weight_decay": 0.0},  # noqa: E731
                                           {"params": ps[1:], "weight_decay": 0.05}], lr=1e-3)
    own = recipe(dataclasses.replace(task, optimizer=lambda ps: groups(list(ps))), cfg, 0)
    assert own["weight_decay"] == 0.05  # the group that decays, not the first
    assert recipe(task, TrainConfig(max_steps=50, weight_decay=0.2), 0)["weight_decay"] == 0.2
    chosen = own_settings(own, cfg)
    assert chosen["weight_decay"] == 0.05 and chosen["max_steps"] == 50
    assert "clip_grad_norm" not in chosen and "min_lr_ratio" not in chosen and "warmup" not in chosen
    assert "warmup" not in own_settings({"warmup": 100}, cfg) and own_settings({"warmup": 0.2}, cfg) == {"warmup": 0.2}


def test_twice_the_batch_is_tried_where_the_timed_steps_say_it_is_cheaper() -> None:
    """The design's last point doubles the batch where the probe's timed steps price an update of twice
    the batch clearly under two of it (a device far from saturation), and quarters it where not."""
    from tunekit.hpsearch.seeding import larger_is_cheaper

    flat = SimpleNamespace(step_times=[[8, 0.010], [32, 0.011], [128, 0.014]], max_batch=128)  # a GPU below saturation
    linear = SimpleNamespace(step_times=[[8, 0.010], [32, 0.040], [128, 0.160]], max_batch=128)  # saturated
    assert larger_is_cheaper(flat, 32) and not larger_is_cheaper(linear, 32)
    # Twice the batch above the largest micro-batch runs as accumulation: two micro-steps, no saving.
    assert not larger_is_cheaper(flat, 128)
    assert not larger_is_cheaper(SimpleNamespace(step_times=[], max_batch=128), 32) and not larger_is_cheaper(None, 32)


@pytest.mark.slow  # searches with the probes
def test_the_table_says_which_way_the_designs_batch_step_went(tmp_path: Path) -> None:
    """Under a budget in device time the design's batch step is decided by the probe's stored timed steps;
    under one in samples or updates it goes to a smaller batch whatever they say; the search says which."""
    import dataclasses

    far = classification_task()
    lf = lr_find(far, sweep=Sweep(sweep_steps=30), step=StepSettings(device="cpu"))
    task = dataclasses.replace(far, defaults={"lr": lf.suggestion})  # the task's own LR near the suggestion
    pr = probe(task, memory_budget="256MiB", step=StepSettings(device="cpu"),
               measure=Measurement(throughput_points=2, noise_repeats=4))
    flat, steep = [[8, 0.010], [64, 0.011]], [[8, 0.010], [64, 0.080]]
    for budget, times, doubled in (("2s", flat, True), ("2s", steep, False), ("1280samples", flat, False)):
        pr.throughput = [{"batch": b, "samples_per_s": b / t} for b, t in times]
        r = search(task, "from_scratch", trials=5, budget=budget, backend=Local(device="cpu"),
                   probes=ProbeSettings(lr_find=lf, probe=pr))
        d = r.probe["design_batch"]
        assert (d["from"], d["step"], d["doubled"]) == (32, 64 if doubled else 8, doubled)
        assert r.trials[4]["params"]["batch"] == d["step"]
        assert f"design's batch step: 32 -> {d['step']}" in r.table()
        why = ("the device is not saturated" if doubled else "over that, it quarters it" if budget.endswith("s")
               and not budget.endswith("samples") else "the budget is not device time")
        assert why in r.table()
    # Where the suggestion is far from the task's own LR, the last point tries that LR: no batch step to report.
    r = search(far, "from_scratch", trials=5, backend=Local(device="cpu"), probes=ProbeSettings(lr_find=lf, probe=pr),
               budget="40updates")
    assert "design's batch step" not in r.table() and r.probe["design_batch"] is None


@pytest.mark.slow  # two searches with their probes
def test_the_search_seeds_with_the_curve_alone_unless_asked_to_refine() -> None:
    """By default the range test's curve alone seeds the search (the design's trials check it); --lr-refine
    runs the short runs first, and their samples count."""
    task = classification_task()
    runs = {refine: search(task, "from_scratch", trials=1, budget="3200samples",
                           probes=ProbeSettings(memory_budget="256MiB", lr_refine=refine),
                           backend=Local(device="cpu"))
            for refine in (True, False)}
    assert runs[True].lr_find["refined"] and not runs[False].lr_find["refined"]
    assert runs[False].probe_samples < runs[True].probe_samples
    assert runs[False].seed_params["lr"] == pytest.approx(runs[False].lr_find["suggestion"])
    assert "the curve alone, no short runs: the design's full-length trials around it check it" in runs[False].table()
    assert not search(task, "from_scratch", trials=1, budget="3200samples", backend=Local(device="cpu"),
                      probes=ProbeSettings(memory_budget="256MiB")).lr_find["refined"]  # the default


def test_the_search_range_test_length_is_a_probe_setting() -> None:
    """ProbeSettings(lr_sweep_steps=N): the search's own range test runs at most N updates (its cost counts)."""
    task = classification_task()
    r = search(task, "from_scratch", trials=1, budget="3200samples",
               probes=ProbeSettings(memory_budget="256MiB", lr_sweep_steps=30), backend=Local(device="cpu"))
    assert 10 <= r.lr_find["updates"] <= 30
    with pytest.raises(UsageError, match="lr_sweep_steps=100"):
        ProbeSettings(lr_sweep_steps=5)


def test_a_device_time_budget_is_not_priced_on_timings_taken_while_the_machine_was_busy() -> None:
    from tunekit.hpsearch.resolve import prepare_inputs
    from tunekit.hpsearch.seeding import priced
    from tunekit.hpsearch.settings import SearchSettings
    from tunekit.results.step_time import step_curve

    quiet = {"batch": 8, "samples_per_s": 800.0, "spread": 0.05, "remeasured": 0, "busy": False}
    busy = {"batch": 32, "samples_per_s": 100.0, "spread": 3.0, "remeasured": 2, "busy": True}
    assert step_curve([quiet, busy]) == [[8, 0.01]]  # the busy point prices nothing
    settings = SearchSettings(budget="60s")
    inputs = prepare_inputs(classification_task(), "from_scratch", settings)
    untimed = lambda batch, batches: None  # noqa: E731  (its evaluation was timed busy: not priced)
    ok = SimpleNamespace(probe=SimpleNamespace(step_times=step_curve([quiet, busy]), busy_batches=[32], max_batch=32,
                                               eval_seconds=untimed))
    assert priced(inputs, ok, settings).budget.priced
    all_busy = SimpleNamespace(probe=SimpleNamespace(step_times=step_curve([busy]), busy_batches=[32], max_batch=32,
                                                     eval_seconds=untimed))
    with pytest.raises(UsageError, match="every step the probe timed ran while the machine was busy"):
        priced(inputs, all_busy, settings)
    # The search's table says which timings its predictions left out.
    from tunekit.results import SearchResult

    r = SearchResult(study_name="s", storage="x", space="sp", direction="minimize", best_value=None, best_params={},
                     best_config={}, trials=[], seed_params={}, distributions={}, probe={"busy_batches": [32]})
    assert "probe's timings at batch 32 were taken while the machine was busy" in r.table()


# tests.tasks:picky_regression_task raises for hidden = 13, the only choice: every trial fails.
ALL_FAIL = FAILING.replace("[13, 16]", "[13]")
TASK_FILE = "from tests.tasks import picky_regression_task, regression_task  # noqa: F401\n"


def test_a_search_whose_every_trial_fails_raises_in_one_line_and_keeps_its_trials(tmp_path: Path) -> None:
    """Nothing worked: NoTrialSucceeded names the first failure's cause, after search.json holds every trial."""
    from tunekit import TPE, Local, NoTrialSucceeded

    space = write_space(tmp_path, ALL_FAIL)
    with pytest.raises(NoTrialSucceeded) as caught:
        search("tests.tasks:picky_regression_task", str(space), trials=2, budget="10updates", backend=Local(device="cpu"),
               sampler=TPE(seed_trial=False), out=tmp_path / "o", progress=False)
    said = str(caught.value)
    assert said.startswith("all 2 trials of this search failed, the first (trial 0) with RuntimeError: hidden=13 is "
                           "unlucky") and str(tmp_path / "o" / "search.json") in said and "\n" not in said
    report = json.loads((tmp_path / "o" / "search.json").read_text())
    assert [t["state"] for t in report["trials"]] == ["FAIL", "FAIL"] == [t["state"] for t in caught.value.result.trials]


def test_a_run_whose_trials_failed_or_were_pruned_and_none_finished_is_nothing_finished() -> None:
    """Failures with prunings beside them and no complete trial: nothing worked either."""
    from tunekit.hpsearch.run import nothing_finished

    assert nothing_finished(["FAIL", "FAIL"]) and nothing_finished(["PRUNED", "FAIL", "PRUNED"])
    assert not nothing_finished(["FAIL", "COMPLETE"]) and not nothing_finished([])
    assert not nothing_finished(["PRUNED"])  # pruned against trials an earlier run finished


def test_a_task_file_given_relative_is_kept_absolute_so_the_result_loads_from_any_folder(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """search.json names the task file by its absolute path: best_model() and `train --config` work elsewhere."""
    from tunekit import Local, SearchResult

    (tmp_path / "proj").mkdir()
    (tmp_path / "proj" / "mytasks.py").write_text(TASK_FILE)
    (tmp_path / "elsewhere").mkdir()
    monkeypatch.chdir(tmp_path / "proj")
    r = search("mytasks.py:regression_task", str(write_space(tmp_path, SMALL)), trials=1, budget="10updates",
               backend=Local(device="cpu"), out=tmp_path / "o", progress=False)
    assert r.task == f"{tmp_path / 'proj' / 'mytasks.py'}:regression_task"
    monkeypatch.chdir(tmp_path / "elsewhere")
    saved = SearchResult.from_json(tmp_path / "o" / "search.json")
    assert saved.task == r.task and isinstance(saved.best_model(), torch.nn.Module)
