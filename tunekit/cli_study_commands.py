"""The handlers of the ``tunekit`` commands of a search and of a shared study: search, study create, reap
and delete, worker, serve, dashboard, report.

Each builds the search's objects from the flags that ``tunekit.cli`` generated from their fields
(:mod:`tunekit.hpsearch.options`), calls one public function and prints what its result says.
"""

from __future__ import annotations

# Imported where used, not at the top: the search (tunekit.hpsearch, optuna) and the results: `tunekit --help` does not pay for them.
import argparse
import os
from pathlib import Path
from typing import Any

from tunekit.cli_common import out_dir, progress_of, task_config
from tunekit.errors import NoTrialSucceeded, UsageError, shown
from tunekit.hpsearch.options import CONCEPTS, SELECTED_BY, cli_fields
from tunekit.hpsearch.shared.server import dashboard, serve
from tunekit.objective import BUILTIN_DIRECTIONS, Objective
from tunekit.option_fields import dest_of, flag_of

__all__ = ["cmd_search", "cmd_study_create", "cmd_worker", "cmd_study_reap", "cmd_study_delete", "cmd_serve",
           "cmd_dashboard", "cmd_report"]


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


def _objective_of(args: argparse.Namespace) -> Objective:
    """--objective with its --direction: a metric that is not built in needs the flag (not Objective(...))."""
    if args.direction is None and args.objective not in BUILTIN_DIRECTIONS:
        raise UsageError(f"--objective {shown(args.objective)} is not built in ({', '.join(BUILTIN_DIRECTIONS)}): say "
                         "which way is better: pass --direction maximize (or minimize)")
    return Objective.of(args.objective, args.direction)


def _search_args(args: argparse.Namespace, out: Path | None) -> dict[str, Any]:
    """The arguments that ``search`` and ``create_study`` both take from the flags."""
    return dict(trials=args.trials, budget=_budget(args), objective=_objective_of(args),
                seed=args.seed, sampler=_options(args, "sampler", args.sampler),
                pruner=_options(args, "pruner", "none" if args.no_prune else "halving"),
                study=_options(args, "study", "shared" if args.storage else "local"),
                probes=_options(args, "probes", ""), confirm=_options(args, "confirm", ""), out=out,
                progress=progress_of(args))


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
                        backend=_options(args, "backend", "local"), keep=args.keep, progress=progress_of(args),
                        trials=args.trials, budget=args.budget, max_steps=args.max_steps, seed=args.seed,
                        sampler_seed=args.sampler_seed, confirm_top=args.confirm_top, confirm_seeds=args.confirm_seeds)
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
