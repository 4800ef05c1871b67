"""lr_find, probe and doctor take grouped option objects (tunekit/entry_options.py), as search does: few
parameters, 0.1's flat keywords kept for a release with a warning, and CLI flags generated from the fields."""

from __future__ import annotations

import dataclasses
import inspect
import warnings
from typing import Any

import pytest

import tunekit
from tunekit.entry_options import (BatchTarget, DoctorChecks, Measurement, PlannedRun, Refine, StepSettings, Sweep)
from tunekit.errors import UsageError
from tunekit.option_fields import flag_fields, flag_of, opt

from .tasks import classification_task

MAX_PARAMETERS = 12  # **kwargs counts as one


def _parameters(fn: Any) -> list[str]:
    return list(inspect.signature(fn).parameters)  # through the decorators (functools.wraps) to the function


@pytest.mark.parametrize("name", ["lr_find", "probe", "doctor", "train"])
def test_the_entry_points_take_at_most_12_parameters(name: str) -> None:
    params = _parameters(getattr(tunekit, name))
    assert len(params) <= MAX_PARAMETERS, f"{name} takes {len(params)}: {params}"


def test_search_takes_one_parameter_per_concept_and_its_shim() -> None:
    """search() is not held to 12: it takes one object per concept (sampler, pruner, backend, study, probes,
    confirm) beside the task, space, trials, budget, objective, seed, out, keep and progress, and 0.1.0's flat
    keywords as **deprecated until 0.3.0 (a registered shim), 16 in all; a new setting goes in an object."""
    params = _parameters(tunekit.search)
    assert len(params) <= 16 and params[-1] == "deprecated", params


def _no_warning(call: Any) -> Any:
    with warnings.catch_warnings():
        warnings.simplefilter("error", DeprecationWarning)
        return call()


def test_lr_find_grouped_is_the_flat_call_and_the_flat_one_warns_at_the_callers_line() -> None:
    task = classification_task()
    grouped = _no_warning(lambda: tunekit.lr_find(task, sweep=Sweep(sweep_steps=20, max_lr=1.0),
                                                  refine=Refine(enabled=False), step=StepSettings(device="cpu"),
                                                  progress=False))
    with pytest.warns(DeprecationWarning) as said:
        flat = tunekit.lr_find(task, sweep_steps=20, max_lr=1.0, refine=False, device="cpu", progress=False)
    assert (flat.lrs, flat.losses, flat.suggestion) == (grouped.lrs, grouped.losses, grouped.suggestion)
    texts = sorted(str(w.message) for w in said)
    assert texts == [
        "lr_find(device=) is deprecated since tunekit 0.2.0 and removed in tunekit 0.3.0: pass step=StepSettings(device=...)",
        "lr_find(refine=) is deprecated since tunekit 0.2.0 and removed in tunekit 0.3.0: pass refine=Refine(enabled=...)",
        "lr_find(sweep_steps=, max_lr=) is deprecated since tunekit 0.2.0 and removed in tunekit 0.3.0: pass "
        "sweep=Sweep(sweep_steps=..., max_lr=...)"]
    assert {w.filename for w in said} == {__file__}


def test_probe_grouped_is_the_flat_call() -> None:
    task = classification_task()
    measure = Measurement(trace_sizes=(2, 4), throughput_points=0, timing_steps=1, noise_repeats=0,
                          calibrate_steps=False, batch_limit=32)
    grouped = _no_warning(lambda: tunekit.probe(task, memory_budget="1GiB", step=StepSettings(device="cpu"),
                                                measure=measure, target=BatchTarget(target_batch=64), progress=False))
    with pytest.warns(DeprecationWarning) as said:
        flat = tunekit.probe(task, memory_budget="1GiB", device="cpu", target_batch=64, progress=False,
                             **{f.name: getattr(measure, f.name) for f in dataclasses.fields(measure)})
    texts = sorted((str(w.message).split(": pass ")[1], str(w.message)) for w in said)  # one a group, naming its object
    assert [new.split("(")[0] for new, _ in texts] == ["measure=Measurement", "step=StepSettings", "target=BatchTarget"]
    assert texts[0][1].startswith("probe(headroom=, batch_limit=, ") and texts[2][0] == "target=BatchTarget(target_batch=...)"
    assert (flat.max_batch, flat.predicted_max_batch, flat.settings) == (
        grouped.max_batch, grouped.predicted_max_batch, grouped.settings)
    assert [p["effective_batch"] for p in flat.splits] == [p["effective_batch"] for p in grouped.splits] and grouped.splits


def test_doctor_grouped_is_the_flat_call() -> None:
    task = classification_task()
    grouped = _no_warning(lambda: tunekit.doctor(task, step=StepSettings(device="cpu"), run=PlannedRun(lr=1e-3),
                                                 checks=DoctorChecks(overfit_floor=0.0), progress=False))
    with pytest.warns(DeprecationWarning) as said:
        flat = tunekit.doctor(task, device="cpu", lr=1e-3, overfit_floor=0.0, progress=False)
    texts = sorted(str(w.message).split(": pass ")[1] for w in said)  # one warning a group, each naming its object
    assert texts == ["checks=DoctorChecks(overfit_floor=...)", "run=PlannedRun(lr=...)", "step=StepSettings(device=...)"]
    assert flat.settings == grouped.settings
    assert [(f["check"], f["status"]) for f in flat.findings] == [(f["check"], f["status"]) for f in grouped.findings]
    assert flat.findings


@pytest.mark.parametrize("call, said", [
    (lambda t: tunekit.lr_find(t, min_lr=1e-6, sweep=Sweep()),
     "lr_find() got both min_lr= and sweep=: pass only sweep=Sweep(min_lr=...)"),
    (lambda t: tunekit.lr_find(t, refine_share=0.1, refine=Refine()),
     "lr_find() got both refine_share= and refine=: pass only refine=Refine(share=...)"),
    (lambda t: tunekit.probe(t, noise_repeats=0, measure=Measurement()),
     "probe() got both noise_repeats= and measure=: pass only measure=Measurement(noise_repeats=...)"),
    (lambda t: tunekit.doctor(t, device="cpu", step=StepSettings()),
     "doctor() got both device= and step=: pass only step=StepSettings(device=...)"),
    (lambda t: tunekit.lr_find(t, sweep={"min_lr": 1e-6}),
     "lr_find(sweep=...) takes a Sweep, got {'min_lr': 1e-06}: pass sweep=Sweep(...)"),
])
def test_a_flat_keyword_beside_its_object_is_refused_in_one_line(call: Any, said: str) -> None:
    with pytest.raises(UsageError) as exc:
        call(classification_task())
    assert str(exc.value) == said


def test_refine_false_and_a_flat_share_make_one_refine() -> None:
    """0.1's ``refine=False`` is its group's switch: with ``refine_share=`` beside it, one Refine of both."""
    seen: dict[str, Any] = {}
    from tunekit.option_fields import grouped_keywords

    @grouped_keywords(refine=Refine)
    def fn(*, refine: Refine = Refine()) -> None:
        seen["refine"] = refine

    with pytest.warns(DeprecationWarning):
        fn(refine_share=0.2, refine=False)
    assert seen["refine"] == Refine(enabled=False, share=0.2)
    fn(refine=Refine(steps=50))  # the object itself: no warning, passed as it is
    assert seen["refine"] == Refine(steps=50)


def _flags(command: str, parser: Any = None) -> set[str]:
    from tunekit.cli import build_parser

    parser = parser or build_parser()
    sub = next(a for a in parser._subparsers._group_actions if a.dest == "command").choices[command]  # noqa: SLF001
    return {o for a in sub._actions for o in a.option_strings}  # noqa: SLF001


COMMANDS = {"lr-find": (Sweep, Refine, StepSettings), "probe": (StepSettings, Measurement, BatchTarget),
            "doctor": (StepSettings, PlannedRun, DoctorChecks)}


@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_each_field_of_a_commands_objects_is_a_flag_of_it(command: str) -> None:
    flags = _flags(command)
    missing = [(cls.__name__, f.name) for cls in COMMANDS[command] for f in flag_fields(cls)
               if flag_of(f) not in flags and not (command == "probe" and f.name == "batch_size")]
    assert not missing
    assert {f.name for f in dataclasses.fields(StepSettings) if not f.metadata["cli"]} == {"scaler"}  # Python's only


def test_the_flags_keep_their_names_and_build_the_objects() -> None:
    from tunekit.cli import build_parser
    from tunekit.cli_commands import object_of

    args = build_parser().parse_args(["lr-find", "--min-lr", "1e-6", "--sweep-steps", "30", "--no-refine",
                                      "--refine-share", "0.1", "--clip", "none", "--accumulation-steps", "2"])
    assert object_of(args, Sweep) == Sweep(min_lr=1e-6, sweep_steps=30)
    assert object_of(args, Refine) == Refine(enabled=False, share=0.1)
    assert object_of(args, StepSettings) == StepSettings(clip_grad_norm=None, accumulation_steps=2)
    args = build_parser().parse_args(["doctor", "--lr", "0.01", "--warmup", "20", "--loss-floor", "0.5",
                                      "--lr-find", "f.json", "--anomaly"])
    assert object_of(args, PlannedRun) == PlannedRun(lr=0.01, warmup=20)
    assert object_of(args, DoctorChecks) == DoctorChecks(anomaly=True, overfit_floor=0.5, lr_find_result="f.json")
    args = build_parser().parse_args(["probe", "--trace-sizes", "2,4", "--no-calibrate-steps", "--lr", "0.1",
                                      "--lr-batch", "32"])
    assert object_of(args, Measurement) == Measurement(trace_sizes=(2, 4), calibrate_steps=False)
    assert object_of(args, BatchTarget) == BatchTarget(lr=0.1, lr_batch=32)


def test_a_field_added_to_an_object_is_a_flag_of_its_commands(monkeypatch: pytest.MonkeyPatch) -> None:
    import tunekit.cli as cli
    from tunekit.cli_commands import object_of

    @dataclasses.dataclass(frozen=True)
    class Wider(Sweep):
        flat_points: int = opt(3, "points of the flat start (default 3)", kind="int", metavar="N")

    assert "--flat-points" not in _flags("lr-find")
    monkeypatch.setattr(cli, "Sweep", Wider)
    parser = cli.build_parser()
    assert "--flat-points" in _flags("lr-find", parser)
    assert object_of(parser.parse_args(["lr-find", "--flat-points", "7"]), Wider).flat_points == 7


@pytest.mark.parametrize("make, said", [
    (lambda: Measurement(trace_sizes=(0, 4)), "trace_sizes must be positive batch sizes, got (0, 4)"),
    (lambda: Measurement(timing_steps=0), "timing_steps must be a positive integer, got 0"),
    (lambda: Measurement(noise_repeats=-1), "noise_repeats must be an integer >= 0, got -1"),
    (lambda: Measurement(noise_warmup=True), "noise_warmup must be an integer >= 0, got True"),
    (lambda: Sweep(val_batches=0), "val_batches must be a positive integer, got 0"),
])
def test_the_probes_measurement_settings_are_checked_when_made(make: Any, said: str) -> None:
    """The fields the probe reads unchecked (now flags too) are refused in one line when the object is made."""
    with pytest.raises(UsageError) as exc:
        make()
    assert str(exc.value).startswith(said) and "\n" not in str(exc.value)
    assert Measurement(trace_sizes=[2, 4]).trace_sizes == (2, 4)


def test_a_bad_generated_flag_is_one_line_before_the_task_loads(assert_usage_error) -> None:  # type: ignore[no-untyped-def]
    line = assert_usage_error(["probe", "--timing-steps", "0", "--task", "no.such.module:task"],
                              "--timing-steps must be a positive integer, got 0")
    assert "no.such.module" not in line  # refused before the task (which does not exist) is looked for


def test_the_probe_refuses_a_step_setting_it_has_no_use_for() -> None:
    """The probe finds the batch and steps with its own GradScaler: a StepSettings naming either is refused."""
    with pytest.raises(UsageError) as exc:
        tunekit.probe(classification_task(), step=StepSettings(batch_size=32))
    assert str(exc.value) == ("probe() takes no StepSettings(batch_size=...), got 32: the probe finds it: pass "
                              "measure=Measurement(batch_limit=N) for the largest it tries")
    with pytest.raises(UsageError, match=r"^probe\(\) takes no StepSettings\(scaler=\.\.\.\)"):
        tunekit.probe(classification_task(), step=StepSettings(scaler=object()))
