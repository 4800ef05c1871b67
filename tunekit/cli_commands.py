"""The handlers of the ``tunekit`` commands that work on one task: tasks, lr-find, probe, doctor, spaces, train.

``tunekit.cli`` parses the command line and calls one handler here (the search's and the shared study's
are in :mod:`tunekit.cli_study_commands`) with the parsed flags. A handler calls one public function,
prints what its result says (``summary()``) and writes its files (``save()``); how a command fails is
:mod:`tunekit.cli_run`'s.
"""

from __future__ import annotations

# Imported where used, not at the top: torch and the probes (tunekit.probes, tunekit.checks, training): `tunekit tasks` and `--help` do not pay for them.
import argparse
from pathlib import Path
from typing import Any

from tunekit.cli_common import check_size, load_task_of, out_dir, print_names, progress_of, show, task_config
from tunekit.cli_run import in_cli_terms
from tunekit.entry_options import BatchTarget, DoctorChecks, Measurement, PlannedRun, Refine, StepSettings, Sweep
from tunekit.errors import UsageError, shown
from tunekit.inputs.space import list_spaces, load_space, space_path
from tunekit.option_fields import dest_of, flag_fields

__all__ = ["cmd_tasks", "cmd_lr_find", "cmd_probe", "cmd_doctor", "cmd_spaces", "cmd_train", "object_of", "task_config",
           "in_cli_terms"]


def cmd_tasks(args: argparse.Namespace) -> int:
    """`tunekit tasks`: the built-in tasks, the default marked."""
    from tunekit.builtin import DEFAULT_TASK
    from tunekit.integrations.task_spec import list_tasks

    print_names({name: desc + (" (default)" if name == DEFAULT_TASK else "") for name, desc in list_tasks().items()})
    return 0


def object_of(args: argparse.Namespace, cls: type) -> Any:
    """The option object ``cls`` made of its fields' flags (cli.py generates them); a flag not given leaves
    the object's default, and ``--clip none`` is no clipping."""
    given = {f.name: getattr(args, dest_of(f)) for f in flag_fields(cls) if getattr(args, dest_of(f), None) is not None}
    if given.get("clip_grad_norm") == "none":
        given["clip_grad_norm"] = None
    return cls(**given)


def cmd_lr_find(args: argparse.Namespace) -> int:
    """`tunekit lr-find`: the range test's suggestion, and lr_find.json and .png."""
    from tunekit.probes.range_test import lr_find

    sweep, refine, step = object_of(args, Sweep), object_of(args, Refine), object_of(args, StepSettings)
    out = out_dir(args.out)
    result = lr_find(load_task_of(args), sweep=sweep, refine=refine, step=step, run_steps=args.run_steps,
                     seed=args.seed, progress=progress_of(args))
    return show(result, out, in_cli_terms(result.summary(), args.usage()))  # its advice as this command's flags


def cmd_probe(args: argparse.Namespace) -> int:
    """`tunekit probe`: the largest, fastest and critical batch, and probe.json and .png."""
    from tunekit.probes.batch_probe import probe

    step, measure, target = object_of(args, StepSettings), object_of(args, Measurement), object_of(args, BatchTarget)
    out = out_dir(args.out)
    check_size(args.memory_budget)
    result = probe(load_task_of(args), memory_budget=args.memory_budget, step=step, measure=measure, target=target,
                   seed=args.seed, progress=progress_of(args))
    return show(result, out, in_cli_terms(result.summary(), args.usage()))  # its advice (memory_budget) as flags


def cmd_doctor(args: argparse.Namespace) -> int:
    """`tunekit doctor`: the checks' findings, and doctor.json and .png; exit 1 when a check failed."""
    from tunekit.checks import doctor

    step, run, checks = object_of(args, StepSettings), object_of(args, PlannedRun), object_of(args, DoctorChecks)
    out = out_dir(args.out)
    check_size(args.memory_budget)
    result = doctor(load_task_of(args), memory_budget=args.memory_budget, step=step, run=run, checks=checks,
                    seed=args.seed, progress=progress_of(args))
    return show(result, out, in_cli_terms(result.table(), args.usage()))  # its fixes as this command's flags


def cmd_spaces(args: argparse.Namespace) -> int:
    """`tunekit spaces [NAME]`: the shipped search spaces, or one space's entries and file."""
    if not args.name:
        print_names(list_spaces())
        return 0
    space = load_space(args.name)  # an unknown name or a bad file is one usage line
    print(space.table())
    print(f"file: {space_path(args.name)}")
    return 0


def cmd_train(args: argparse.Namespace) -> int:
    """`tunekit train`: one run of a task (or of a search's trial, exactly), and train.json and .png."""
    from tunekit.training.loop import train

    out = out_dir(args.out)
    keys = ("lr", "max_steps", "batch_size", "accumulation_steps", "warmup", "schedule", "min_lr_ratio",
            "weight_decay", "precision", "eval_every")
    overrides = {k: getattr(args, k) for k in keys if getattr(args, k) is not None}
    if args.clip_grad_norm is not None:
        overrides["clip_grad_norm"] = None if args.clip_grad_norm == "none" else args.clip_grad_norm
    if args.config:
        task, config, trial = _from_search(args, overrides)
    elif args.trial is not None:
        raise UsageError("--trial goes with --config DIR/search.json: add it, or drop --trial")
    else:
        task, config, trial = load_task_of(args), {**overrides, "seed": args.seed, "device": args.device}, None
    result = train(task, config, progress=progress_of(args))
    compared = "" if trial is None else "\n" + result.compared_with(trial, trial.get("objective", "loss"))
    return show(result, out, result.table() + compared)


def _from_search(args: argparse.Namespace, overrides: dict[str, Any]) -> tuple[Any, dict[str, Any], dict[str, Any]]:
    """(the task, the training config, the trial) of a search's trial, for an exact re-run."""
    from tunekit.integrations.task_spec import load_task
    from tunekit.results import SearchResult

    if overrides or args.task_config:
        flag = "--" + next(iter(overrides)).replace("_", "-") if overrides else "--set"
        raise UsageError(f"--config re-runs a trial exactly: {flag} would change it; drop it, or train without --config")
    path = Path(args.config)
    if path.is_dir():
        path = path / "search.json"
    if not path.is_file():
        raise UsageError(f"--config '{args.config}' does not exist: give a search's DIR/search.json")
    try:
        result = SearchResult.from_json(path)
        trial = result.trial(args.trial)
    except UsageError:
        raise
    except (TypeError, ValueError, KeyError, AttributeError, IndexError, RecursionError) as exc:
        # Not JSON, not the fields of a search.json, trials that are not trials: the file, not tunekit, is wrong.
        said = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
        raise UsageError(f"--config '{shown(str(path), 120)[1:-1]}' is not a search.json of this tunekit "
                         f"({type(exc).__name__}{': ' + shown(said, 100)[1:-1] if said else ''})") from None
    spec = args.task or result.task
    if spec is None:
        raise UsageError("the search ran a Task object, not a spec: give the same task with --task")
    # The trial with the search's objective: the re-run is compared with it in that metric.
    trial = {**trial, "objective": result.objective}
    return load_task(spec, trial.get("task_config") or None), {**trial["config"], "device": args.device}, trial
