"""The ``tunekit`` command line: its parser, and the dispatch of each subcommand to its handler.

Every subcommand parses its flags here and calls one handler in ``tunekit.cli_commands``, which
calls one public function, prints what its result says and writes its files. A usage error
prints one line and exits 2; an internal error exits 1.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence
from typing import Any, NoReturn, Optional

from tunekit import defaults
from tunekit.cli_commands import (cmd_dashboard, cmd_doctor, cmd_lr_find, cmd_probe, cmd_report, cmd_search,
                                  cmd_serve, cmd_spaces, cmd_study_create, cmd_study_delete, cmd_study_reap, cmd_tasks,
                                  cmd_train, cmd_worker, in_cli_terms, run)
from tunekit.errors import deprecated
from tunekit.hpsearch.options import CONCEPTS, cli_fields, dest_of, flag_of
from tunekit.version import __version__

__all__ = ["main", "build_parser", "in_cli_terms"]

EPILOG_MAIN = """examples:
  tunekit tasks                                  list the built-in tasks
  tunekit lr-find                                find a peak LR for the default built-in task
  tunekit probe --memory-budget 2GiB             largest batch, fastest batch, critical batch
  tunekit doctor                                 pre-flight check of the default built-in task
  tunekit search --trials 12                     seeded Optuna search with ASHA early stopping
  tunekit report tunekit_runs                    redraw a search's table and plots
  tunekit study create --storage URL --study S   a study many workers share (probes run once)
  tunekit worker --storage URL --study S         join it from any machine
  tunekit spaces                                 list the shipped search spaces
  tunekit train                                  train the default built-in task
  tunekit train --task charlm --lr 3e-3 --run-steps 300 --precision bf16
  tunekit train --task my_project.tasks:cifar --set width=128 --out runs/a
  tunekit train --task path/to/task.py:make_task --accumulation-steps 4

a task is a built-in name, 'package.module:function' or 'path/to/file.py:function';
the function returns a tunekit.Task and may take the config dict given by --set.
"""

EPILOG_LR_FIND = """examples:
  tunekit lr-find                                the default built-in task, written to tunekit_runs/
  tunekit lr-find --task charlm --repeats 3 --out runs/lm
  tunekit lr-find --task my_project.tasks:cifar --batch-size 128 --accumulation-steps 2 --precision bf16
  tunekit lr-find --min-lr 1e-6 --max-lr 1 --sweep-steps 200 --mode exp
  tunekit lr-find --task charlm --run-steps 20000  for a 20,000-update run; 5% of it checks the curve
"""

EPILOG_PROBE = """examples:
  tunekit probe --memory-budget 2GiB             the default built-in task, written to tunekit_runs/
  tunekit probe --task charlm --memory-budget 512MiB --target-batch 256
  tunekit probe --task my_project.tasks:cifar --device cuda --precision bf16 --accumulation-steps 4
  tunekit probe --lr 3e-3 --lr-batch 64 --target-batch 512   rescale an LR to the planned batch
"""

EPILOG_DOCTOR = """examples:
  tunekit doctor                                 the default built-in task, written to tunekit_runs/
  tunekit doctor --task charlm --lr 3e-3 --warmup 0.05 --run-steps 2000
  tunekit doctor --task my_project.tasks:cifar --precision fp16 --batch-size 256 --memory-budget 16GiB

exit status: 0 when no check failed, 1 when one did, 2 on a usage error.
"""

EPILOG_SEARCH = """examples:
  tunekit search --trials 12                     the default task and space, written to tunekit_runs/
  tunekit search --task charlm --space full_finetune --trials 20 --budget 9600samples
  tunekit search --task my_project.tasks:cifar --space my_space.toml --lr-find runs/lr_find.json --probe runs/probe.json
  tunekit search --out runs/s1 --resume          continue an interrupted search (completed trials are kept)
  tunekit search --storage postgresql://db/tk --study cifar   share one study between machines
"""

EPILOG_TRAIN = """examples:
  tunekit train
  tunekit train --task charlm --lr 3e-3 --run-steps 300 --warmup 0.1 --precision bf16
  tunekit train --task shapes --batch-size 32 --accumulation-steps 4 --schedule linear
  tunekit train --task path/to/task.py:make_task --set width=128 --set dropout=0.1 --out runs/a
"""

EPILOG_WORKER = """examples:
  tunekit study create --storage postgresql://db/tk --study cifar --task my_tasks:cifar --trials 60
  tunekit worker --storage postgresql://db/tk --study cifar          on each machine, as many as you like
  tunekit report --storage postgresql://db/tk --study cifar --out runs/cifar
  tunekit study reap --storage runs/journal.log --study cifar        fail the trials of stopped workers now
"""


def _bounded_float(bound: str) -> Callable[[str], float]:
    """An argparse type: a number that is ``> 0`` or ``>= 0`` (``bound``), said so when it is not."""
    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
        if not (value > 0 if bound == "> 0" else value >= 0):  # written so that NaN fails both
            raise argparse.ArgumentTypeError(f"{text!r} must be {bound}")
        return value
    return parse


_positive_float, _nonnegative_float = _bounded_float("> 0"), _bounded_float(">= 0")


def _warmup(text: str) -> int | float:
    """'0.05' is a fraction of the run, '20' a number of updates."""
    try:
        return int(text)
    except ValueError:
        pass
    try:
        return float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is neither a step count (20) nor a fraction (0.05)") from None


def _clip(text: str) -> float | str:
    """A positive max norm, or "none" for no clipping."""
    if text.lower() in ("none", "off", "0"):
        return "none"
    return _positive_float(text)


def _seed(text: str) -> int:
    """An argparse type: a seed that numpy and torch both take."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None
    if not 0 <= value < 2**62:
        raise argparse.ArgumentTypeError(f"{text!r} must be in [0, 2**62)")
    return value


def _join_negative_values(argv: Sequence[str]) -> list[str]:
    """``--memory-budget -5GB`` as ``--memory-budget=-5GB``: argparse reads a value that starts with
    '-' and a digit as a missing argument; joined, the value reaches its own check and message."""
    out: list[str] = []
    for token in argv:
        if out and out[-1].startswith("--") and "=" not in out[-1] and len(token) > 1 and token[0] == "-" \
                and (token[1].isdigit() or token[1] == "."):
            out[-1] = f"{out[-1]}={token}"
        else:
            out.append(token)
    return out


class _Parser(argparse.ArgumentParser):
    """argparse, but a usage error is one line and exit status 2."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: error: {message} (see '{self.prog} --help')\n")


# The flags that several commands share, with their argparse settings: a command adds them with
# _add(), giving what it says differently (its help, its default) as keywords.
_TASK_FORMS = "built-in name, package.module:function or path/to/file.py:function"
_FLAGS: dict[str, dict[str, Any]] = {
    "--task": dict(default=None, metavar="SPEC", help=f"{_TASK_FORMS} (default: shapes)"),
    "--set": dict(action="append", metavar="KEY=VALUE", dest="task_config",
                  help="task hyperparameter passed to the task function's config (repeatable)"),
    "--device": dict(default="auto", help="cpu, cuda, cuda:N or auto (default)"),
    "--seed": dict(type=_seed, default=0, help="seed of the model and the data order (default 0)"),
    "--out": dict(metavar="DIR", default="tunekit_runs"), "--quiet": dict(action="store_true", help="no progress bar"),
    "--batch-size": dict(type=int, help="micro-batch size (default: the task's)"),
    "--accumulation-steps": dict(type=int, default=1, help="micro-batches per optimizer update (default 1)"),
    "--precision": dict(choices=["fp32", "bf16", "fp16"], help="fp32, bf16, or fp16 with a GradScaler (default: the task's)"),
    "--lr": dict(type=_positive_float), "--warmup": dict(type=_warmup),
    "--clip": dict(type=_clip, dest="clip_grad_norm"), "--memory-budget": dict(metavar="SIZE"),
    "--trials": dict(type=int), "--budget": dict(metavar="AMOUNT"),
    "--max-steps": dict(type=int),
    "--storage": dict(metavar="URL"), "--study": dict(metavar="NAME"), "--port": dict(type=int),
    "--keep": dict(choices=["best", "all", "none"], default="best", help="which trials' trained weights to write: the best's "
                   "(one file, replaced as the best improves), all finished ones', or none (default best)"),
    "--artifacts": dict(metavar="DIR", help="Optuna artifact store (a folder every machine sees): the probes' "
                        "JSON and plots, and the report's search.png, attached to the study for optuna-dashboard"),
}


class _Renamed(argparse.Action):
    """An old flag kept until its removal release: hidden from --help, and one line on stderr names the new one."""

    def __init__(self, *args: Any, new: str, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.shim = deprecated(self.option_strings[0], f"pass {new}")  # registered: removed in tunekit 0.3.0

    def __call__(self, parser: Any, namespace: Any, values: Any, option_string: Optional[str] = None) -> None:
        print(f"{parser.prog}: note: {self.shim.message(option_string or '')}", file=sys.stderr)
        setattr(namespace, self.dest, values)


def _renamed_flag(p: Any, old: str, new: str, **settings: Any) -> None:
    """tunekit 0.1.0's ``old`` as an alias of ``new`` (give its type and dest), said so when used (a shim)."""
    settings.setdefault("dest", new.lstrip("-").replace("-", "_"))
    p.add_argument(old, action=_Renamed, new=new, help=argparse.SUPPRESS, default=argparse.SUPPRESS, **settings)


def _add(p: Any, *flags: str, **settings: Any) -> None:
    """Add each flag with its shared settings, ``settings`` over them."""
    for flag in flags:
        p.add_argument(flag, **{**_FLAGS.get(flag, {}), **settings})


def _command(sub: Any, name: str, func: Callable[[argparse.Namespace], int] | None, help: str, epilog: str,
             description: str | None = None, task: bool = True) -> argparse.ArgumentParser:
    """A subcommand that runs ``func``, its examples kept as written; with ``task``, --task and --set first."""
    p: argparse.ArgumentParser = sub.add_parser(name, help=help, description=description, epilog=epilog,
                                                formatter_class=argparse.RawDescriptionHelpFormatter)
    if func is not None:  # None: a command of subcommands, each with its own
        p.set_defaults(func=func)
    if task:
        _add(p, "--task", "--set")
    return p


def _add_run_args(p: Any, writes: str) -> None:
    """The flags that every probe and search shares."""
    _add(p, "--device", "--seed")
    _add(p, "--out", help=f"where to write {writes} (default tunekit_runs)")
    _add(p, "--quiet")


def _add_lr_find_command(sub: Any) -> None:
    p = _command(sub, "lr-find", cmd_lr_find, "LR range test: suggest a peak LR for a warmup + cosine run", EPILOG_LR_FIND,
                 "Sweep the LR up over N optimizer updates of the shared step and suggest a peak LR. "
                 "Writes DIR/lr_find.json and DIR/lr_find.png.")
    p.add_argument("--min-lr", type=_positive_float, default=1e-7, help="first LR of the sweep (default 1e-7)")
    p.add_argument("--max-lr", type=_positive_float, default=10.0, help="last LR of the sweep (default 10)")
    p.add_argument("--sweep-steps", type=int, default=defaults.SWEEP_STEPS, metavar="N",
                   help=f"optimizer updates in the sweep, at least 10 (default {defaults.SWEEP_STEPS})")
    _renamed_flag(p, "--steps", "--sweep-steps", type=int)
    p.add_argument("--mode", choices=["exp", "linear"], default="exp", help="LR spacing (default exp)")
    _add(p, "--batch-size")
    # The sweep runs training's step: these default to the task's, as in `tunekit train`.
    _add(p, "--accumulation-steps", default=None, help="micro-batches per optimizer update (default: the task's, else 1)")
    _add(p, "--precision")
    _add(p, "--clip", help="clip the global grad norm at this value; 'none' to disable (default: the task's, else "
         f"{defaults.CLIP_GRAD_NORM:g}, as in train)")
    p.add_argument("--repeats", type=int, default=1, help="repeat with other seeds and data orders; report the spread (default 1)")
    p.add_argument("--diverge-threshold", type=float, default=defaults.DIVERGE_THRESHOLD, metavar="X", help="stop where "
                   f"the loss is X times its best and far above its start's noise (default {defaults.DIVERGE_THRESHOLD:g})")
    p.add_argument("--no-refine", action="store_true", help="the curve's suggestion alone, without the short runs that check it")
    p.add_argument("--run-steps", type=int, metavar="N", help="updates of the run you plan: the suggestion is "
                   "for it, and the short runs' cost is sized from it (default: the task's recipe, else "
                   f"{defaults.RUN_STEPS})")
    p.add_argument("--refine-share", type=_positive_float, default=defaults.REFINE_SHARE, metavar="F",
                   help="the short runs' cost as a share of the planned run's updates, or one sweep's updates "
                   f"where that share buys no useful run (default {defaults.REFINE_SHARE:g})")
    p.add_argument("--refine-steps", type=int, metavar="N",
                   help="updates of each short run of the planned schedule, whatever it costs (default: what the "
                   "budget buys)")
    p.add_argument("--refine-seeds", type=int, metavar="S",
                   help="short runs per LR, with other data orders, their scores averaged (default: 1, 2 for runs "
                   "of 200 updates or more; 2 with --refine-steps)")
    _add_run_args(p, "lr_find.json and lr_find.png")


def _add_probe_command(sub: Any) -> None:
    p = _command(sub, "probe", cmd_probe, "memory and throughput probe: largest, fastest and critical batch size",
                 EPILOG_PROBE, "Predict a training step's peak memory from a trace on fake tensors, confirm the largest "
                               "batch that fits with a real step, measure throughput and the gradient noise scale. "
                               "Writes DIR/probe.json and DIR/probe.png.")
    _add(p, "--memory-budget", help="e.g. 512MiB, 8GiB, 2.5GB (default: free GPU memory; on CPU a quarter of RAM, or what is free if less)")
    p.add_argument("--headroom", type=float, default=0.15, help="fraction of the budget kept free (default 0.15)")
    _add(p, "--accumulation-steps", "--precision")
    p.add_argument("--target-batch", type=int, help="effective batch to plan for (default: the critical batch)")
    _add(p, "--lr", help="an LR found at --lr-batch, to rescale to the target batch")
    p.add_argument("--lr-batch", type=int, help="the effective batch at which --lr was found")
    p.add_argument("--batch-limit", type=int, metavar="N", help="the largest batch to try (default: the dataset's size)")
    _add_run_args(p, "probe.json and probe.png")


def _add_doctor_command(sub: Any) -> None:
    p = _command(sub, "doctor", cmd_doctor, "pre-flight check: what would make a training run fail, before tuning",
                 EPILOG_DOCTOR, "Check the task's model, loss and data before any LR or batch is tuned: gradient "
                                "flow, a tiny-batch overfit, NaN/Inf, the loss contract, the data, train/eval modes "
                                "and the recipe. Writes DIR/doctor.json and DIR/doctor.png; exits 1 when a check fails.")
    _add(p, "--batch-size", "--accumulation-steps", "--precision")
    _add(p, "--lr", help="the peak LR you intend, compared with a quick range test (default: the task's)")
    p.add_argument("--lr-find", metavar="FILE", help="a saved lr_find.json to compare --lr with, instead of the quick range test")
    _add(p, "--warmup", help="the warmup you intend: a fraction (0.05) or updates (20) (default: the task's)")
    p.add_argument("--run-steps", type=int, metavar="N",
                   help="the updates of the run you intend, for the warmup check (default: the task's)")
    _renamed_flag(p, "--steps", "--run-steps", type=int)
    _add(p, "--memory-budget", help="memory to check the batch against, e.g. 8GiB (default: free memory)")
    p.add_argument("--anomaly", action="store_true", help="also run the backward under autograd's anomaly mode (slow)")
    p.add_argument("--loss-floor", type=_nonnegative_float, help="the lowest loss the tiny batch can reach, for a loss "
                   "with terms that do not vanish (default 0, or label smoothing's floor)")
    _add_run_args(p, "doctor.json and doctor.png")


def _add_options(p: Any, concept: str, skip: Sequence[str] = (), only: Optional[Sequence[str]] = None) -> None:
    """The flags of a concept's objects (:mod:`tunekit.hpsearch.options`), one per field, generated from
    the fields: no list of names here. Every default is None, so a flag given can be told from one not."""
    seen = set(skip)
    for _cls, f in cli_fields(concept):
        flag = flag_of(f)
        if flag in seen or (only is not None and flag not in only):  # a field of several classes (a study's name, a backend's device): one flag
            continue
        seen.add(flag)
        kind, settings = f.metadata["kind"], dict(dest=dest_of(f), default=None, help=f.metadata["help"])
        if kind == "bool":
            settings.update(action="store_const", const=f.default is not True)
        else:
            settings.update(type=_KINDS[kind], metavar=f.metadata.get("metavar"))
        p.add_argument(flag, **settings)
        if flag == "--heartbeat-grace":  # tunekit 0.1.0's name for it, until 0.3.0
            _renamed_flag(p, "--grace-period", flag, dest=settings["dest"], type=int)


# How a generated flag parses its value, by its field's kind.
_KINDS: dict[str, Callable[[str], Any] | None] = {
    "str": None, "int": int, "count": int, "float": float, "seconds": _nonnegative_float, "seed": _seed}


def _add_search_flags(p: argparse.ArgumentParser) -> None:
    """The flags of a search (and of `tunekit study create`, which is one that runs no trial)."""
    _add(p, "--task", "--set")
    p.add_argument("--space", default="from_scratch", help="a shipped space (tunekit spaces) or a .toml file (default from_scratch)")
    _add(p, "--trials", default=12, help="finished trials the study should hold (default 12)")
    _add(p, "--budget", help="what one full trial may draw: 4000samples, 2epochs, 1e6tokens or 200updates (updates "
         "at the task's batch), or device time (10min): a trial at batch B runs budget/B updates, or what fits in the "
         "time at B by the probe's timed steps (default: one run of the task's recipe)")
    _add(p, "--max-steps", help="shorthand for --budget Nupdates")
    p.add_argument("--objective", default="loss", metavar="NAME", help="what trials are compared and pruned by: loss, "
                   "accuracy, perplexity, or a metric of the task (Task(metrics={NAME: fn})) (default loss)")
    p.add_argument("--direction", choices=["minimize", "maximize"], help="which way the objective is better "
                   "(default: loss and perplexity minimize, accuracy maximize)")
    p.add_argument("--sampler", choices=["tpe", "random"], default="tpe", help="Optuna sampler (default tpe)")
    _add_options(p, "sampler")
    p.add_argument("--no-prune", action="store_true", help="run every trial to the end")
    _add_options(p, "pruner")
    _add_options(p, "probes")
    p.add_argument("--backend", choices=["local", "ray"], default="local", help="where trials run (default local)")
    _add_options(p, "backend", skip=_RAY_FLAGS)
    _add_options(p.add_argument_group("ray backend (--backend ray)"), "backend", only=_RAY_FLAGS)
    _add_options(p, "study", skip=_SHARED_FLAGS)
    _add_options(p.add_argument_group("shared study (--storage URL)"), "study", only=_SHARED_FLAGS)
    _add(p, "--seed")
    _add(p, "--out", help="where to write search.json, trials.csv, search.png and study.db (default tunekit_runs)")
    _add(p, "--quiet")


def _only_of(concept: str, kind: str) -> tuple[str, ...]:
    """The flags of ``concept`` that only its class ``kind`` has (the Ray backend's, a shared study's)."""
    cls = CONCEPTS[concept][1][kind]
    others = {flag_of(f) for c, f in cli_fields(concept) if c is not cls}
    return tuple(flag_of(f) for c, f in cli_fields(concept) if c is cls and flag_of(f) not in others)


_RAY_FLAGS, _SHARED_FLAGS = _only_of("backend", "ray"), _only_of("study", "shared")


def _add_search_command(sub: Any) -> None:
    p = _command(sub, "search", cmd_search, "seeded Optuna TPE search with ASHA early stopping", EPILOG_SEARCH,
                 "Run the probes the space needs, seed the space from them, and search it with Optuna (TPE) and "
                 "successive-halving early stopping. Writes DIR/search.json, DIR/trials.csv, DIR/search.png and the "
                 "study (DIR/study.db).", task=False)
    _add_search_flags(p)
    _add(p, "--keep")


def _add_worker_command(sub: Any) -> None:
    p = _command(sub, "worker", cmd_worker, "join a shared study and run its trials (no probe runs)", EPILOG_WORKER,
                 "Join a study created by `tunekit study create` (or a first `tunekit search --storage URL --study "
                 "NAME`): its settings are the study's, and a flag that disagrees with them is refused.", task=False)
    _add(p, "--task", help=f"{_TASK_FORMS} (default: the study's task)")  # a worker runs the study's task
    _add(p, "--set")
    _add(p, "--trials", "--budget", help="must agree with the study's")
    _add(p, "--max-steps", help="must agree with the study's budget")
    _add(p, "--seed", default=None, help="must agree with the study's")
    _add_options(p, "sampler", only=("--sampler-seed",))
    _add(p, "--keep")
    _add_options(p, "backend", skip=_RAY_FLAGS)
    _add_options(p, "study", skip=("--resume",))  # --storage and --study: which study; the rest: this worker
    _add(p, "--out", default=None, help="also write this worker's snapshot of the study there (default: none; "
         "tunekit report --storage URL --study NAME reports the whole study)")
    _add(p, "--quiet")


def _add_study_command(sub: Any) -> None:
    p = _command(sub, "study", None, "create a shared study, reap its stopped workers, or delete it", EPILOG_WORKER, task=False)
    ss = p.add_subparsers(dest="study_command", metavar="ACTION", parser_class=_Parser, required=True)
    c = ss.add_parser("create", help="run the probes once and store what every worker must agree on",
                      description="A search that runs no trial: the probes, the plan, the seed trial and the study's "
                                  "spec go into --storage; then start workers with tunekit worker.")
    _add_search_flags(c)
    c.set_defaults(func=cmd_study_create, usage=c.format_usage, backend=None)
    d = ss.add_parser("delete", help="delete a study and its trials (a creator that died before storing its settings)",
                      description="Delete the study and all its trials from --storage; without --yes, say what it holds.")
    _add(d, "--storage", required=True, help="the study's SQLAlchemy URL or journal file")
    _add(d, "--study", required=True, help="the study's name")
    d.add_argument("--yes", action="store_true", help="delete it (without: only say what it holds)")
    d.set_defaults(func=cmd_study_delete, usage=d.format_usage)
    r = ss.add_parser("reap", help="fail the trials of stopped workers now, and queue their re-runs",
                      description="Fail the RUNNING trials whose worker stopped: a stale heartbeat (RDB), a process "
                                  "of this machine that is gone, or a --worker named; each is re-run once.")
    _add(r, "--storage", required=True, help="the study's SQLAlchemy URL or journal file")
    _add(r, "--study", required=True, help="the study's name")
    r.add_argument("--worker", action="append", metavar="HOST:PID", help="a worker known to have stopped (repeatable)")
    _add_options(r, "study", only=("--heartbeat-grace",))
    r.set_defaults(func=cmd_study_reap, usage=r.format_usage)


def _add_serve_command(sub: Any) -> None:
    p = _command(sub, "serve", cmd_serve, "serve a study's database to workers (Optuna's gRPC storage proxy)",
                 "examples:\n  tunekit serve --storage postgresql://db/tk --port 13000 --dashboard-port 8080\n",
                 "Run Optuna's gRPC storage proxy in front of a database; workers use --storage grpc://HOST:PORT. "
                 "It listens on 127.0.0.1 unless --host says otherwise, and has no authentication or encryption: "
                 "see the README before exposing it.", task=False)
    _add(p, "--storage", required=True, help="the database (postgresql://..., sqlite:///...)")
    p.add_argument("--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1: this machine only)")
    _add(p, "--port", default=13000, help="gRPC port (default 13000)")
    _add(p, "--dashboard-port", type=int, metavar="PORT", help="also serve optuna-dashboard on this port")
    _add(p, "--artifacts")


def _add_dashboard_command(sub: Any) -> None:
    p = _command(sub, "dashboard", cmd_dashboard, "optuna-dashboard on a search's study (pip install 'tunekit[dashboard]')",
                 "examples:\n  tunekit dashboard tunekit_runs\n  tunekit dashboard postgresql://db/tk --port 8080\n", task=False)
    p.add_argument("target", metavar="DIR|URL", help="a directory written by tunekit search, a storage URL or a journal file")
    p.add_argument("--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1)")
    _add(p, "--port", default=8080, help="HTTP port (default 8080)")
    _add(p, "--artifacts")


def _add_report_command(sub: Any) -> None:
    p = _command(sub, "report", cmd_report, "redraw a search's table and plots from DIR/search.json, or report a whole study",
                 "examples:\n  tunekit report tunekit_runs\n  tunekit report --storage postgresql://db/tk --study cifar "
                 "--out runs/cifar\n", task=False)
    p.add_argument("dir", metavar="DIR", nargs="?", help="a directory written by tunekit search, or its search.json")
    _add(p, "--storage", help="report the whole study in this storage instead (with --study)")
    _add(p, "--study", help="the study's name (with --storage)")
    _add(p, "--out", default=None, help="where the study's report goes (default: DIR, else tunekit_runs)")
    _add(p, "--artifacts")


def _add_spaces_command(sub: Any) -> None:
    p = _command(sub, "spaces", cmd_spaces, "list the shipped search spaces, or show one",
                 "examples:\n  tunekit spaces\n  tunekit spaces from_scratch\n  tunekit spaces my_space.toml\n", task=False)
    p.add_argument("name", nargs="?", metavar="NAME", help="a shipped space or a .toml file: show its entries and its file")


def _add_train_command(sub: Any) -> None:
    p = _command(sub, "train", cmd_train, "train a task with warmup + decay through the shared step", EPILOG_TRAIN,
                 "Train a fresh model of a task through tunekit's shared training step and print its curve.")
    _add(p, "--lr", help=f"peak learning rate (default: the task's, else {defaults.LR:g})")
    p.add_argument("--run-steps", type=int, dest="max_steps", metavar="N",
                   help=f"optimizer updates of the run (default: the task's, else {defaults.RUN_STEPS})")
    _renamed_flag(p, "--steps", "--run-steps", type=int, dest="max_steps")
    _add(p, "--batch-size")
    _add(p, "--accumulation-steps", default=None)
    _add(p, "--warmup", help=f"warmup: a fraction of the run (0.05) or updates (20); default {defaults.WARMUP:g}")
    p.add_argument("--schedule", choices=list(defaults.DECAYS),
                   help=f"decay after warmup (default {defaults.SCHEDULE})")
    p.add_argument("--min-lr-ratio", type=float, help=f"final LR as a fraction of the peak (default {defaults.MIN_LR_RATIO:g})")
    _add(p, "--clip", help="clip the global grad norm at this value; 'none' to disable (default: the task's, else "
         f"{defaults.CLIP_GRAD_NORM:g})")
    p.add_argument("--weight-decay", type=float, help="override the optimizer's weight decay")
    _add(p, "--precision", help="fp32, bf16 autocast, or fp16 with a GradScaler (default: the task's)")
    _add(p, "--device")
    _add(p, "--seed", help="seed of the model's weights and the data order (default 0)")
    p.add_argument("--eval-every", type=int, help="evaluate on validation data every N updates")
    p.add_argument("--config", metavar="SEARCH_JSON", help="re-run a search's trial exactly: DIR/search.json (its best "
                   "trial, or --trial N); other settings are refused")
    p.add_argument("--trial", type=int, metavar="N", help="with --config: the trial to re-run (default: the best)")
    _add(p, "--out", help="where to write train.json and train.png (default tunekit_runs)")
    _add(p, "--quiet")


def build_parser() -> argparse.ArgumentParser:
    """The ``tunekit`` command's parser, every subcommand in it."""
    parser = _Parser(prog="tunekit", epilog=EPILOG_MAIN, formatter_class=argparse.RawDescriptionHelpFormatter,
                     description="Find the learning rate, batch size and training recipe before you spend GPU-hours on a sweep.")
    parser.add_argument("--version", action="version", version=f"tunekit {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    _command(sub, "tasks", cmd_tasks, "list the built-in tasks", "examples:\n  tunekit tasks\n", task=False)
    for add in (_add_lr_find_command, _add_probe_command, _add_doctor_command, _add_search_command, _add_worker_command,
                _add_study_command, _add_serve_command, _add_dashboard_command, _add_report_command, _add_spaces_command,
                _add_train_command):  # in the order `tunekit --help` lists them
        add(sub)
    for command in sub.choices.values():  # to say an API error's hints as this command's flags
        command.set_defaults(usage=command.format_usage)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run ``tunekit ARGV``; its exit status: 0, 1 on an error (or a failed check), 2 on a usage error."""
    parser = build_parser()
    args = parser.parse_args(_join_negative_values(sys.argv[1:] if argv is None else argv))
    if not getattr(args, "command", None):
        parser.print_help()
        return 2
    return run(args)


if __name__ == "__main__":
    sys.exit(main())
