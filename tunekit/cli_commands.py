"""What each ``tunekit`` subcommand does, and how a command fails.

``tunekit.cli`` parses the command line and calls one handler here with the parsed flags. A
handler calls one public function, prints what its result says (``summary()``) and writes its
files (``save()``). :func:`run` says its errors the CLI's way: a usage error is one line in the
command's own flags (exit 2), an error in the user's code shows their frames only (exit 1),
tunekit's own its whole traceback (exit 1), an interrupt what was kept (exit 130); a command that
fails leaves no empty --out folder behind.
"""

from __future__ import annotations

# Imported where used, not at the top: numpy, torch, tqdm; importing this module does not pay for them.
import argparse
import contextlib
import json
import os
import re
import sys
import sysconfig
import traceback
import warnings
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from tunekit.bytesize import parse_bytes
from tunekit.errors import HintedWarning, NoTrialSucceeded, UsageError, shown
from tunekit.entry_options import BatchPlan, DoctorChecks, Measurement, PlannedRun, Refine, StepSettings, Sweep
from tunekit.hpsearch.options import CONCEPTS, SELECTED_BY, cli_fields
from tunekit.option_fields import dest_of, flag_fields, flag_of
from tunekit.hpsearch.shared.server import dashboard, serve
from tunekit.inputs.space import list_spaces, load_space, space_path
from tunekit.objective import BUILTIN_DIRECTIONS, Objective
from tunekit.progress import show_progress

__all__ = ["run", "in_cli_terms", "cli_flag"]


def _parse_value(text: str) -> Any:
    """A --set value as the task function gets it: a bool, a number, JSON, else the text."""
    low = text.lower()
    if low in ("true", "false"):
        return low == "true"
    for cast in (int, float):
        try:
            return cast(text)
        except ValueError:
            pass
    try:
        return json.loads(text)
    except ValueError:
        return text


def task_config(pairs: Sequence[str] | None) -> dict[str, Any]:
    """The --set KEY=VALUE pairs as the task function's config."""
    config: dict[str, Any] = {}
    for pair in pairs or ():
        key, sep, value = pair.partition("=")
        if not sep or not key.strip():
            raise UsageError(f"--set {shown(pair)} is not KEY=VALUE: write e.g. --set width=128")
        try:
            config[key.strip()] = _parse_value(value.strip())
        except RecursionError:  # JSON nested past Python's recursion limit
            raise UsageError(f"--set {shown(key.strip())}: its JSON value nests too deeply to read: flatten it") from None
    return config


def _progress(args: argparse.Namespace) -> bool:
    """Whether the command draws its bar: not with --quiet, else where a person is watching (a terminal, not CI)."""
    return show_progress(False if args.quiet else None)


# Output folders this process created: a command that fails leaves none of them behind empty.
_CREATED: list[Path] = []


def out_dir(path: str | None) -> Path | None:
    """The --out folder, created (and removed again if the command fails while it is empty); None for none."""
    if path is None:
        return None
    out = Path(path)
    if out.exists() and not out.is_dir():
        raise UsageError(f"--out {path!r} is a file, not a directory: give a directory path")
    _CREATED.extend(p for p in reversed([out, *out.parents]) if not p.exists())
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise UsageError(f"--out {path!r} cannot be created ({exc.strerror}): give a writable directory") from None
    return out


_LOADED: dict[str, Any] = {}  # what the command's task was made from


def _load(args: argparse.Namespace) -> Any:
    """The task that --task and --set name."""
    from tunekit.builtin import DEFAULT_TASK
    from tunekit.integrations.task_spec import load_task

    if not args.task:  # say which task ran: a first run without --task should not leave that a guess
        print(f"task: {DEFAULT_TASK} (built in; --task SPEC runs yours: tunekit tasks lists the built-in ones)")
    task = load_task(args.task or DEFAULT_TASK, task_config(args.task_config))
    _LOADED["origin"] = task.origin  # a task function's Trainer or LightningRun: its errors in its terms
    return task


def _check_size(size: str | None) -> None:
    """A bad --memory-budget fails before the task loads, which can take a while."""
    if size is not None:
        parse_bytes(size)


def _show(result: Any, out: Path | None, text: str | None = None) -> int:
    """Print what the result says (its summary, else ``text``), write its files into ``out`` and say where;
    the command's exit status."""
    print(result.summary() if text is None else text)
    if out is not None:
        print("wrote " + " and ".join(map(str, result.save(out))))
    return int(result.exit_code)


def _print_names(descriptions: dict[str, str]) -> None:
    """One line per name, the descriptions aligned: the lists of tasks and of spaces."""
    width = max(map(len, descriptions))
    for name, desc in descriptions.items():
        print(f"{name:<{width}}  {desc}")


def cmd_tasks(args: argparse.Namespace) -> int:
    """`tunekit tasks`: the built-in tasks, the default marked."""
    from tunekit.builtin import DEFAULT_TASK
    from tunekit.integrations.task_spec import list_tasks

    _print_names({name: desc + (" (default)" if name == DEFAULT_TASK else "") for name, desc in list_tasks().items()})
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

    out = out_dir(args.out)
    task = _load(args)
    result = lr_find(task, sweep=object_of(args, Sweep), refine=object_of(args, Refine),
                     step=object_of(args, StepSettings), run_steps=args.run_steps, seed=args.seed,
                     progress=_progress(args))
    return _show(result, out, in_cli_terms(result.summary(), args.usage()))  # its advice as this command's flags


def cmd_probe(args: argparse.Namespace) -> int:
    """`tunekit probe`: the largest, fastest and critical batch, and probe.json and .png."""
    from tunekit.probes.batch_probe import probe

    out = out_dir(args.out)
    _check_size(args.memory_budget)
    result = probe(_load(args), memory_budget=args.memory_budget, step=object_of(args, StepSettings),
                   measure=object_of(args, Measurement), plan=object_of(args, BatchPlan), seed=args.seed,
                   progress=_progress(args))
    return _show(result, out, in_cli_terms(result.summary(), args.usage()))  # its advice (memory_budget) as flags


def cmd_doctor(args: argparse.Namespace) -> int:
    """`tunekit doctor`: the checks' findings, and doctor.json and .png; exit 1 when a check failed."""
    from tunekit.checks import doctor

    out = out_dir(args.out)
    _check_size(args.memory_budget)
    result = doctor(_load(args), memory_budget=args.memory_budget, step=object_of(args, StepSettings),
                    run=object_of(args, PlannedRun), checks=object_of(args, DoctorChecks), seed=args.seed,
                    progress=_progress(args))
    return _show(result, out, in_cli_terms(result.table(), args.usage()))  # its fixes as this command's flags


def _options(args: argparse.Namespace, concept: str, kind: str) -> Any:
    """The ``concept``'s object of class ``kind`` from the flags generated from its fields (cli.py); a flag
    of another class of the concept is refused, not ignored."""
    cls = CONCEPTS[concept][1][kind]
    mine = {f.name for c, f in cli_fields(concept) if c is cls}
    given: dict[str, Any] = {}
    for owner, f in cli_fields(concept):
        value = getattr(args, dest_of(f), None)
        if value is None or f.name in given:
            continue
        if f.name not in mine:
            how = SELECTED_BY[owner]
            raise UsageError(f"{flag_of(f)} applies only with {how}: drop it" + (f", or pass {how}" if how.startswith("--")
                                                                                 else ""))
        given[f.name] = value
    return cls(**given)


def _task(args: argparse.Namespace, default: Any = "shapes") -> Any:
    """--task and --set as a task: a spec with its config (TaskSpec) where --set was given."""
    from tunekit.integrations.task_spec import TaskSpec

    config = task_config(args.task_config)
    spec = args.task or default
    return TaskSpec(spec, config) if config and spec is not None else spec


def _budget(args: argparse.Namespace) -> Any:
    """--budget, or --max-steps N as Nupdates (one of them)."""
    if args.max_steps is None:
        return args.budget
    if args.budget is not None:
        raise UsageError("give the budget once: --budget (e.g. 4000samples) or --max-steps, not both")
    if args.max_steps < 2:
        raise UsageError(f"--max-steps must be >= 2, got {args.max_steps}: pass e.g. --max-steps 200")
    return f"{args.max_steps}updates"


def _objective(args: argparse.Namespace) -> Objective:
    """--objective with its --direction: a metric that is not built in needs the flag (not Objective(...))."""
    if args.direction is None and args.objective not in BUILTIN_DIRECTIONS:
        raise UsageError(f"--objective {shown(args.objective)} is not built in ({', '.join(BUILTIN_DIRECTIONS)}): say "
                         "which way is better: pass --direction maximize (or minimize)")
    return Objective.of(args.objective, args.direction)


def _search_args(args: argparse.Namespace, out: Path | None) -> dict[str, Any]:
    """The arguments that ``search`` and ``create_study`` both take from the flags."""
    return dict(trials=args.trials, budget=_budget(args), objective=_objective(args),
                seed=args.seed, sampler=_options(args, "sampler", args.sampler),
                pruner=_options(args, "pruner", "none" if args.no_prune else "halving"),
                study=_options(args, "study", "shared" if args.storage else "local"),
                probes=_options(args, "probes", ""), out=out, progress=_progress(args))


def cmd_search(args: argparse.Namespace) -> int:
    """`tunekit search`: the search's table; search() writes DIR's files as it goes."""
    from tunekit.hpsearch import search

    out = out_dir(args.out)
    try:
        result = search(_task(args), args.space, **_search_args(args, out),
                        backend=_options(args, "backend", args.backend), keep=args.keep)
    except NoTrialSucceeded as exc:  # the table of what failed, then the one line (run() says it)
        if exc.result is not None:
            print(exc.result.summary(out))
        raise
    print(result.summary(out))
    return 0


def cmd_study_create(args: argparse.Namespace) -> int:
    """`tunekit study create`: the probes, run once, and the study's spec stored for its workers."""
    from tunekit.hpsearch import create_study

    if not args.storage:
        raise UsageError("tunekit study create needs --storage URL (postgresql://..., sqlite:///..., or a journal file *.log)")
    # Only how trials run: refused, not ignored, since the study runs none here (--device stays: the probes run on it).
    given = ["--backend"] * (args.backend is not None) + [flag_of(f) for _, f in cli_fields("backend")
                                                         if f.name != "device" and getattr(args, dest_of(f), None) is not None]
    if given:
        raise UsageError(f"tunekit study create runs no trial, so {given[0]} would do nothing: drop it, and give it to "
                         f"the workers (tunekit worker) or to tunekit search")
    result = create_study(_task(args), args.space, **_search_args(args, out_dir(args.out)),
                          backend=_options(args, "backend", "local"))
    print(f"study '{result.study_name}' is ready for {args.trials} trials: on each machine run "
          f"tunekit worker --storage {args.storage} --study {result.study_name}")
    return 0


def cmd_worker(args: argparse.Namespace) -> int:
    """`tunekit worker`: join a shared study and run its trials."""
    from tunekit.hpsearch import join_study

    if not args.storage or not args.study:
        raise UsageError("tunekit worker needs the study: pass --storage URL --study NAME")
    out = out_dir(args.out)
    result = join_study(_options(args, "study", "shared"), task=_task(args, default=None), out=out,
                        backend=_options(args, "backend", "local"), keep=args.keep, progress=_progress(args),
                        trials=args.trials, budget=args.budget, max_steps=args.max_steps, seed=args.seed,
                        sampler_seed=args.sampler_seed)
    mine = [t for t in result.trials if (t.get("worker") or {}).get("pid") == os.getpid()]
    print(f"worker done: ran {len(mine)} of the study's {len(result.trials)} trials; "
          f"tunekit report --storage {args.storage} --study {args.study} reports the whole study")
    return 0


def cmd_study_reap(args: argparse.Namespace) -> int:
    """`tunekit study reap`: fail the trials of stopped workers now."""
    from tunekit.hpsearch import reap_study

    numbers = reap_study(args.storage, args.study, workers=args.worker, heartbeat_grace=args.heartbeat_grace)
    print(f"failed {len(numbers)} trial(s) of stopped workers{': ' + ', '.join(map(str, numbers)) if numbers else ''}"
          f"{'; each is re-run once by the next worker' if numbers else ''}")
    return 0


def cmd_study_delete(args: argparse.Namespace) -> int:
    """`tunekit study delete`: a study and its trials removed from the storage (with --yes; else a count)."""
    from tunekit.hpsearch import delete_study
    from tunekit.hpsearch.study import safe_url

    counts = delete_study(args.storage, args.study, confirm=args.yes)
    said = ", ".join(f"{n} {state.lower()}" for state, n in sorted(counts.items())) or "no trials"
    if not args.yes:
        raise UsageError(f"study '{args.study}' holds {said}: pass --yes to delete it with them")
    print(f"deleted study '{args.study}' ({said}) from {safe_url(args.storage)}")
    return 0


def cmd_serve(args: argparse.Namespace) -> int:
    """`tunekit serve`: Optuna's gRPC storage proxy in front of a study's database."""
    serve(args.storage, host=args.host, port=args.port, dashboard_port=args.dashboard_port, artifacts=args.artifacts,
          on_ready=lambda: print(f"serving {args.storage} on {args.host}:{args.port}: workers use "
                                 f"--storage grpc://{args.host}:{args.port}", flush=True))
    return 0


def cmd_dashboard(args: argparse.Namespace) -> int:
    """`tunekit dashboard`: optuna-dashboard on a search's study."""
    dashboard(args.target, host=args.host, port=args.port, artifacts=args.artifacts,
              on_ready=lambda: print(f"optuna-dashboard on http://{args.host}:{args.port}", flush=True))
    return 0


def cmd_report(args: argparse.Namespace) -> int:
    """`tunekit report`: a search's table and files again from DIR/search.json, or a whole shared study's."""
    from tunekit.results import SearchResult

    if args.storage or args.study:
        return _report_study(args)
    if args.dir is None:
        raise UsageError("give a directory written by tunekit search, or --storage URL --study NAME")
    path = Path(args.dir)
    if not path.is_file():  # the folder, as tunekit search wrote it; else its search.json itself
        path = path / "search.json"
    if not path.is_file():
        raise UsageError(f"'{path}' does not exist: give a directory written by tunekit search, or its search.json")
    if path.name != "search.json":  # the redraw writes DIR/search.json, trials.csv and search.png beside it
        raise UsageError(f"'{path}' is not a search.json: give the directory tunekit search wrote, or its search.json "
                         "(the redraw writes search.json, trials.csv and search.png beside it)")
    try:
        result = SearchResult.from_json(path)
    except TypeError as exc:  # fields of another version's search.json
        raise UsageError(f"'{path}' was written by another version of tunekit ({exc}): run the search again") from None
    except ValueError as exc:  # not JSON at all
        raise UsageError(f"'{path}' is not a search.json ({exc}): give a directory written by tunekit search") from None
    result.save(path.parent)
    print(result.table())
    if result.weights_line():
        print(result.weights_line())
    print(f"redrew {path.parent / 'search.png'} and trials.csv")
    return 0


def _report_study(args: argparse.Namespace) -> int:
    """`tunekit report --storage URL --study NAME`: the whole shared study."""
    if not (args.storage and args.study):
        raise UsageError("a study's report needs both --storage URL and --study NAME")
    from tunekit.hpsearch.shared.api import write_study_report

    out = out_dir(args.out or args.dir or "tunekit_runs")
    result = write_study_report(args.storage, args.study, out, artifacts=args.artifacts)
    print(result.table())
    if result.weights_line():
        print(result.weights_line())
    print(f"wrote {out}/search.json, trials.csv, search.png: study '{args.study}', {len(result.trials)} trials")
    return 0


def cmd_spaces(args: argparse.Namespace) -> int:
    """`tunekit spaces [NAME]`: the shipped search spaces, or one space's entries and file."""
    if not args.name:
        _print_names(list_spaces())
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
        task, config, trial = _load(args), {**overrides, "seed": args.seed, "device": args.device}, None
    result = train(task, config, progress=_progress(args))
    compared = "" if trial is None else "\n" + result.compared_with(trial, trial.get("objective", "loss"))
    return _show(result, out, result.table() + compared)


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


def run(args: argparse.Namespace) -> int:
    """Run the parsed command; its exit status. A command that does not succeed leaves no empty --out folder."""
    code = 1
    try:
        code = _said(args)
    finally:  # also when an exception goes through (code stays 1)
        if code != 0:
            for out in reversed(_CREATED):
                try:
                    out.rmdir()  # only an empty folder: anything written there stays
                except OSError:
                    pass
        _CREATED.clear()
    return code


@contextlib.contextmanager
def _warnings_in_cli_terms(args: argparse.Namespace) -> Iterator[None]:
    """While the command runs, tunekit's own warnings (the probe's cost ahead, a budget too small, a setting
    a Trainer does not apply) are said when they happen as one line in the command's flags, a
    :class:`~tunekit.errors.HintedWarning` with only the hints it has a flag for; other libraries'
    warnings as Python shows them."""
    with warnings.catch_warnings():
        python_shows = warnings.showwarning

        def show(message: Any, category: Any, filename: str, lineno: int, file: Any = None, line: Any = None) -> None:
            if not (isinstance(message, UserWarning) and type(message).__module__.startswith("tunekit.")):
                python_shows(message, category, filename, lineno, file, line)
                return
            usage = args.usage()
            text = str(message)
            if isinstance(message, HintedWarning):
                text = message.text(tuple(h for h in (_cli_hint(h, usage) for h in message.hints) if h))
            print(f"tunekit {args.command}: warning: {in_cli_terms(' '.join(text.split()), usage)}", file=sys.stderr)

        warnings.showwarning = show
        yield


def _said(args: argparse.Namespace) -> int:
    """The command, with its errors (and its warnings with a fix) said the way the CLI says them."""
    _LOADED.clear()  # this command's task, not an earlier one's in the same process
    try:
        with _warnings_in_cli_terms(args):
            return int(args.func(args))
    except UsageError as exc:
        said = str(exc)
        if _LOADED.get("origin"):
            from tunekit.integrations.adapted import in_their_terms

            said = in_their_terms(said, _LOADED["origin"])
        print(f"tunekit {args.command}: error: {in_cli_terms(said, args.usage())}", file=sys.stderr)
        return 2
    except NoTrialSucceeded as exc:  # nothing worked: the first failure's cause, in one line
        print(f"tunekit {args.command}: error: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        hint = _resume_hint(Path(args.out)) if args.command == "search" and args.out else ""
        print(f"tunekit {args.command}: interrupted{hint}", file=sys.stderr)
        return 130
    except Exception as exc:  # a bug, in tunekit or in the user's code: show where
        theirs = _user_frames(exc)
        if theirs:  # raised in the user's task, model or loss: their frames, and theirs to fix
            print("Traceback (most recent call last):\n" + "".join(traceback.format_list(theirs)).rstrip(), file=sys.stderr)
            from tunekit.builtin import DEFAULT_TASK

            spec = getattr(args, "task", None) or DEFAULT_TASK
            print(f"tunekit {args.command}: error in your code (task '{spec}'): {type(exc).__name__}: {exc}", file=sys.stderr)
            return 1
        if os.environ.get("TUNEKIT_DEBUG") != "0":
            traceback.print_exc()
        print(f"tunekit {args.command}: internal error: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 1


def _resume_hint(out: Path) -> str:
    """What an interrupted search kept in ``out``, and how to go on: --resume where it kept something."""
    from tunekit.hpsearch.run import probed

    if (out / "search.json").is_file():
        return f": what finished is in {out / 'search.json'}; go on with the same command and --resume"
    if probed(out):
        return f": the probes' results are in {out}; go on with the same command and --resume"
    return ": it was stopped before its probes finished, and kept nothing: run the same command again"


# API parameters whose flag is not their name with dashes.
_FLAG_OF = {"max_steps": "--run-steps", "clip_grad_norm": "--clip", "lr_find_result": "--lr-find",
            "probe_result": "--probe", "config": "--set", "task_config": "--set", "overfit_floor": "--loss-floor",
            "prune": "--no-prune", "join_timeout": "--timeout", "grace_period": "--heartbeat-grace"}
_SUBJECT = re.compile(r"^([a-z][a-z0-9_]*)(?=[ :])")
# (A value that is a call, objective=Objective('f1', ...), is Python's alone: left as it is.)
_ASSIGNMENT = re.compile(r"(?<![\w./-])([a-z][a-z0-9_]*)=([^\s,;()]+)(?![\w(])")
# A parameter named bare in a sentence ("raise memory_budget"): only names with an underscore, which
# no English word has, and none that is a file's name, a call, a quoted value or a space's [entry].
_BARE = re.compile(r"(?<![\w./\[\"'`-])([a-z][a-z0-9]*(?:_[a-z0-9]+)+)(?![\w./(\[\]=\"'`-])")


def _cli_hint(hint: str, usage: str) -> str | None:
    """A warning's hint ``name=value`` as the command's flag and value (``--batch-limit 128``); one that sets
    an option object's field, ``probes=ProbeSettings(lr_find='f.json')``, as that field's flag; None where the
    command has no flag for it."""
    name, _, value = hint.partition("=")
    inner = re.fullmatch(r"[A-Z]\w*\((\w+)=(.*)\)", value)
    if inner:
        name, value = inner.groups()
    flag = cli_flag(name, usage)
    return None if flag is None else f"{flag} {value.strip(chr(39) + chr(34))}"


def cli_flag(name: str, usage: str) -> str | None:
    """The command's flag for the API parameter ``name`` (``--batch-limit``), or None where it has none."""
    options = ["--" + name.replace("_", "-"), _FLAG_OF.get(name, "")]
    return next((o for o in options if o and re.search(re.escape(o) + r"(?![\w-])", usage)), None)


def in_cli_terms(message: str, usage: str) -> str:
    """An API message said as the command's flags: its ``name=value`` hints as ``--name value``,
    its subject (``max_steps must be ...``) and any other ``snake_case`` parameter it names as the
    flag it came from.

    The library's errors name Python parameters, since most of its callers are notebooks;
    only the parameters that the command has a flag for are rewritten.
    """
    def option(name: str) -> str | None:
        return cli_flag(name, usage)

    def assignment(match: re.Match[str]) -> str:
        name, value = match.group(1), match.group(2)
        tail = value[len(value.rstrip(".:")):]  # the sentence's own punctuation stays outside
        value = value.rstrip(".:").strip("'\"")
        flag = option(name)
        if flag is None:
            return match.group(0)
        return (flag if value == "True" else f"{flag} {value}") + tail

    def subject(match: re.Match[str]) -> str:  # "max_steps must be ..." -> "--steps must be ..."
        return option(match.group(1)) or match.group(1)

    said = _SUBJECT.sub(subject, _ASSIGNMENT.sub(assignment, message), count=1)
    return _BARE.sub(subject, said)  # "raise memory_budget" -> "raise --memory-budget"


def _user_frames(exc: BaseException) -> list[traceback.FrameSummary]:
    """The traceback from its first frame in the user's code (neither tunekit's nor an installed
    library's nor Python's own) on; empty when the error came from none."""
    frames = traceback.extract_tb(exc.__traceback__)
    ours = Path(__file__).resolve().parent
    libs = [Path(sysconfig.get_paths()[k]).resolve() for k in ("stdlib", "platstdlib", "purelib", "platlib")]

    def theirs(f: traceback.FrameSummary) -> bool:
        if f.filename.startswith("<"):
            return False
        path = Path(f.filename).resolve()
        return not path.is_relative_to(ours) and not any(path.is_relative_to(lib) for lib in libs)

    first = next((i for i, f in enumerate(frames) if theirs(f)), None)
    return [] if first is None else frames[first:]
