"""Errors name Python parameters through the API and flags through the CLI."""

from __future__ import annotations

from pathlib import Path

import pytest

from tunekit import (BatchTarget, Local, PlannedRun, Refine, SharedStudy, StepSettings, Sweep, UsageError, lr_find,
                    search, train)
from tunekit.cli import build_parser, in_cli_terms, main

from .tasks import classification_task


@pytest.mark.parametrize("call, hint", [
    (lambda t: lr_find(t, step=StepSettings(accumulation_steps=0)), "pass e.g. accumulation_steps=2"),
    (lambda t: lr_find(t, sweep=Sweep(min_lr=1.0, max_lr=0.5)), "pass e.g. min_lr=1e-7 max_lr=10"),
    (lambda t: train(t, accumulation_steps=0), "pass e.g. accumulation_steps=2"),
    (lambda t: train(t, eval_batches=0), "pass e.g. eval_batches=20"),
    (lambda t: search(t, trials=0), "pass e.g. trials=12"),
    (lambda t: search(t, budget="lots"), "pass e.g. budget=4000samples"),
])
def test_api_errors_name_parameters_not_flags(call, hint: str) -> None:
    with pytest.raises(UsageError) as exc:
        call(classification_task())
    assert hint in str(exc.value) and "--" not in str(exc.value)


def test_cli_says_the_same_hints_as_its_flags(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["lr-find", "--accumulation-steps", "0", "--out", str(tmp_path / "a"), "--quiet"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.endswith("pass e.g. --accumulation-steps 2") and len(err.splitlines()) == 1
    assert not (tmp_path / "a").exists()


def test_in_cli_terms_rewrites_only_the_commands_flags() -> None:
    parser = build_parser()
    train_usage = parser.parse_args(["train"]).usage()
    search_usage = parser.parse_args(["search"]).usage()
    assert in_cli_terms("pass e.g. max_steps=200.", train_usage) == "pass e.g. --run-steps 200."
    assert in_cli_terms("pass e.g. max_steps=200", search_usage) == "pass e.g. --max-steps 200"
    assert in_cli_terms("pass resume=True, or another out=DIR", search_usage) == "pass --resume, or another --out DIR"
    assert in_cli_terms("ray_init must be a dict: pass e.g. ray_init={}", search_usage) == "ray_init must be a dict: pass e.g. ray_init={}"  # no flag
    assert in_cli_terms("max_steps must be >= 2: pass e.g. max_steps=2", search_usage) == "--max-steps must be >= 2: pass e.g. --max-steps 2"
    assert in_cli_terms("rejected its config {'width': 'x=1'}", search_usage) == "rejected its config {'width': 'x=1'}"
    # A call is Python's alone: never half of it as a flag's value (--objective Objective('f1, ...).
    said = "pass objective=Objective('f1', 'maximize') (or 'minimize'), or sampler=TPE()"
    assert in_cli_terms(said, search_usage) == said


def test_a_storage_that_cannot_be_opened_is_one_line(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path}/no/such/folder/study.db"
    with pytest.raises(UsageError, match=r"storage 'sqlite:///.*' cannot be opened: OperationalError: "):
        search(classification_task(), "from_scratch", trials=1, backend=Local(device="cpu"),
               study=SharedStudy(storage=url))


def test_a_zero_batch_size_is_refused_not_taken_for_the_default() -> None:
    from tunekit import doctor

    for call in (lambda t: lr_find(t, step=StepSettings(batch_size=0)),
                 lambda t: doctor(t, step=StepSettings(batch_size=0))):
        with pytest.raises(UsageError, match=r"batch_size must be a positive integer, got 0: pass e.g. batch_size=32"):
            call(classification_task())


def _step_given_one_micro_batch_of_two() -> None:
    import torch
    from torch import nn

    from tunekit import TrainStep
    from tunekit.inputs.task import LossComputer

    model = nn.Linear(2, 1)
    step = TrainStep(model, torch.optim.SGD(model.parameters(), lr=0.1), LossComputer(nn.MSELoss(), None),
                     device=torch.device("cpu"), accumulation_steps=2)
    step([(torch.zeros(4, 2), torch.zeros(4, 1))])


def _noise_scale_with_equal_batches() -> None:
    from tunekit.probes.noise_scale import noise_scale

    noise_scale([1.0, 2.0], [1.0, 2.0], b_small=8, b_big=8)


def _prepare_with_a_loss_missing() -> None:
    from tunekit.probes.lr_rules import prepare

    prepare([1e-3, 1e-2, 1e-1], [1.0, 0.9])


def _finding_with_an_unknown_status() -> None:
    from tunekit.checks import Finding

    Finding("lr", "ok", "lr 3e-4 looks fine")  # type: ignore[arg-type]


@pytest.mark.parametrize("call, message", [
    (_step_given_one_micro_batch_of_two,
     "a step takes accumulation_steps=2 micro-batches, got 1: pass a list of 2, e.g. BatchStream(data, batch_size).take(2)"),
    (_noise_scale_with_equal_batches, "noise_scale needs b_big > b_small >= 1, got b_small=8, b_big=8: pass e.g. b_small=8, b_big=64"),
    (_prepare_with_a_loss_missing,
     "lrs and losses must pair up, one loss per LR, got shapes (3,) and (2,): pass e.g. prepare(result.lrs, result.losses)"),
    (_finding_with_an_unknown_status, "Finding status must be one of fail, warn, pass, info, got 'ok': pass e.g. status='warn'"),
], ids=["TrainStep", "noise_scale", "lr_rules.prepare", "Finding"])
def test_a_bad_value_given_to_a_public_function_is_a_one_line_usage_error(call, message: str) -> None:
    with pytest.raises(UsageError) as exc:
        call()
    assert str(exc.value) == message
    assert isinstance(exc.value, ValueError)  # callers that catch ValueError still do


@pytest.mark.parametrize("value", [True, float("nan"), float("inf"), "3e-4", None, -1.0, 0])
def test_check_number_refuses_what_is_no_positive_number_in_one_line(value: object) -> None:
    from tunekit.errors import check_number

    with pytest.raises(UsageError) as exc:
        check_number("lr", value, positive=True, hint="pass e.g. lr=3e-4")
    assert str(exc.value) == f"lr must be a positive number, got {value!r}: pass e.g. lr=3e-4"


def test_check_number_bounds_and_what_it_returns() -> None:
    from tunekit.errors import check_number

    assert check_number("x", 3, positive=True) == 3.0 and check_number("x", 0, minimum=0, maximum=1) == 0.0
    assert check_number("x", float("inf"), positive=True, finite=False) == float("inf")
    with pytest.raises(UsageError, match=r"x must be a number in \(0, 1\), got 1"):
        check_number("x", 1, above=0, below=1)
    with pytest.raises(UsageError, match=r"x must be a number > 1, got 1"):
        check_number("x", 1, above=1)


@pytest.mark.parametrize("bad", [True, float("inf"), float("nan")])
def test_entry_points_refuse_a_bool_or_an_infinite_number(bad: object) -> None:
    from tunekit import TrainConfig, doctor, probe

    calls = [lambda t: lr_find(t, sweep=Sweep(min_lr=bad)), lambda t: lr_find(t, step=StepSettings(clip_grad_norm=bad)),
             lambda t: TrainConfig(lr=bad), lambda t: TrainConfig(min_lr_ratio=bad),
             lambda t: doctor(t, run=PlannedRun(lr=bad)),
             lambda t: probe(t, target=BatchTarget(lr=bad, lr_batch=32)), lambda t: lr_find(t, refine=Refine(share=bad))]
    for call in calls:
        with pytest.raises(UsageError, match=f"must be .*number.*, got {bad!r}"):
            call(classification_task())


def test_old_keywords_still_work_with_one_deprecation_warning_each() -> None:
    """lr_find(steps=), doctor(steps=), probe(max_batch=), train(max_steps=): 0.1.0's names, said the same way
    (an errors.deprecated shim, removed in tunekit 0.3.0) once each, at the caller's line, naming today's form."""
    from tunekit import doctor, probe

    task = classification_task()
    calls = {"lr_find(steps=)": (lambda: lr_find(task, steps=10, refine=Refine(enabled=False),
                                                 step=StepSettings(device="cpu"), progress=False), "sweep=Sweep(sweep_steps=...)"),
             "doctor(steps=)": (lambda: doctor(task, steps=0), "run=PlannedRun(run_steps=...)"),
             "probe(max_batch=)": (lambda: probe(task, max_batch=0), "measure=Measurement(batch_limit=...)"),
             "train(max_steps=)": (lambda: train(task, max_steps=0), "run_steps=")}
    for old, (call, new_form) in calls.items():
        with pytest.deprecated_call(match=r"^\w+\(\w+=\) is deprecated since tunekit 0\.2\.0 and removed in tunekit 0\.3\.0: "
                                          r"pass ") as got:
            try:
                call()
            except UsageError as exc:  # the new name's check, on the old name's value
                assert "run_steps" in str(exc) or "batch_limit" in str(exc) or "max_steps" in str(exc), exc
        said = [str(w.message) for w in got]
        assert len(said) == 1 and said[0].startswith(old) and said[0].endswith("pass " + new_form), said
        assert got[0].filename == __file__


def test_old_and_new_keyword_together_are_refused_in_one_line() -> None:
    with pytest.raises(UsageError, match=r"lr_find\(\) got both steps= and sweep_steps=: pass only sweep=Sweep\(sweep_steps=...\)"):
        lr_find(classification_task(), steps=20, sweep_steps=30)
    with pytest.raises(UsageError, match=r"train\(\) got both max_steps= and run_steps="):
        train(classification_task(), max_steps=20, run_steps=30)


def test_old_flags_are_hidden_and_say_their_new_name(capsys: pytest.CaptureFixture[str]) -> None:
    parser = build_parser()
    for command, old, new, dest in (("lr-find", "--steps", "--sweep-steps", "sweep_steps"),
                                    ("doctor", "--steps", "--run-steps", "run_steps"),
                                    ("train", "--steps", "--run-steps", "max_steps"),
                                    ("worker", "--grace-period", "--heartbeat-grace", "heartbeat_grace")):
        sub = parser.parse_args([command]).usage()
        assert new in sub and old + " " not in sub and old + "]" not in sub
        assert getattr(parser.parse_args([command, old, "30"]), dest) == 30
        err = capsys.readouterr().err.strip()
        assert err == (f"tunekit {command}: note: {old} is deprecated since tunekit 0.2.0 and removed in tunekit 0.3.0: "
                       f"pass {new}")
        assert getattr(parser.parse_args([command, new, "40"]), dest) == 40 and not capsys.readouterr().err
    from tunekit.cli_commands import object_of
    from tunekit.entry_options import Measurement, Sweep

    # A flag not given leaves the object's default; one given sets its field.
    assert object_of(parser.parse_args(["lr-find"]), Sweep).sweep_steps == 100
    assert object_of(parser.parse_args(["probe", "--batch-limit", "64"]), Measurement).batch_limit == 64
