"""The ``tunekit`` command line: its subcommands' parsers, and the dispatch of each to its handler.

Every subcommand parses its flags here (built with :mod:`tunekit.cli_flags`, most generated from the
option objects' fields) and calls one handler in :mod:`tunekit.cli_commands` or
:mod:`tunekit.cli_study_commands`, which calls one public function, prints what its result says and
writes its files; :mod:`tunekit.cli_run` runs it. A usage error prints one line and exits 2; an
internal error exits 1.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from typing import Any

from tunekit import defaults
from tunekit.cli_commands import cmd_doctor, cmd_lr_find, cmd_probe, cmd_spaces, cmd_tasks, cmd_train
from tunekit.cli_flags import (RAY_FLAGS, SHARED_FLAGS, TASK_FORMS, Parser, add_command, add_fields, add_flags,
                               add_options, add_run_args, join_negative_values, renamed_flag)
from tunekit.cli_run import in_cli_terms, run
from tunekit.cli_study_commands import (cmd_dashboard, cmd_report, cmd_search, cmd_serve, cmd_study_create,
                                        cmd_study_delete, cmd_study_reap, cmd_worker)
from tunekit.entry_options import BatchTarget, DoctorChecks, Measurement, PlannedRun, Refine, StepSettings, Sweep
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


def _add_lr_find_command(sub: Any) -> None:
    p = add_command(sub, "lr-find", cmd_lr_find, "LR range test: suggest a peak LR for the run you plan", EPILOG_LR_FIND,
                 "Sweep the LR up over N optimizer updates of the shared step and suggest a peak LR. "
                 "Writes DIR/lr_find.json and DIR/lr_find.png.")
    # Generated from the objects' fields (tunekit.entry_options): the step defaults to the task's recipe, as in train.
    add_fields(p, Sweep)
    renamed_flag(p, "--steps", "--sweep-steps", type=int)
    add_fields(p, StepSettings)
    add_fields(p, Refine)
    p.add_argument("--run-steps", type=int, metavar="N", help="updates of the run you plan: the suggestion is "
                   "for it, and the short runs' cost is sized from it (default: the task's recipe, else "
                   f"{defaults.RUN_STEPS})")
    add_run_args(p, "lr_find.json and lr_find.png", device=False)


def _add_probe_command(sub: Any) -> None:
    p = add_command(sub, "probe", cmd_probe, "memory and throughput probe: largest, fastest and critical batch size",
                 EPILOG_PROBE, "Predict a training step's peak memory from a trace on fake tensors, confirm the largest "
                               "batch that fits with a real step, measure throughput and the gradient noise scale. "
                               "Writes DIR/probe.json and DIR/probe.png.")
    add_flags(p, "--memory-budget", help="e.g. 512MiB, 8GiB, 2.5GB (default: free GPU memory; on CPU a quarter of RAM, or what is free if less)")
    add_fields(p, StepSettings, skip=("--batch-size",))  # the probe finds the batch
    add_fields(p, Measurement)
    add_fields(p, BatchTarget)
    add_run_args(p, "probe.json and probe.png", device=False)


def _add_doctor_command(sub: Any) -> None:
    p = add_command(sub, "doctor", cmd_doctor, "pre-flight check: what would make a training run fail, before tuning",
                 EPILOG_DOCTOR, "Check the task's model, loss and data before any LR or batch is tuned: gradient "
                                "flow, a tiny-batch overfit, NaN/Inf, the loss contract, the data, train/eval modes "
                                "and the recipe. Writes DIR/doctor.json and DIR/doctor.png; exits 1 when a check fails.")
    add_fields(p, StepSettings)
    add_fields(p, PlannedRun)
    renamed_flag(p, "--steps", "--run-steps", type=int)
    add_flags(p, "--memory-budget", help="memory to check the batch against, e.g. 8GiB (default: free memory)")
    add_fields(p, DoctorChecks)
    add_run_args(p, "doctor.json and doctor.png", device=False)


def _add_search_flags(p: argparse.ArgumentParser) -> None:
    """The flags of a search (and of `tunekit study create`, which is one that runs no trial)."""
    add_flags(p, "--task", "--set")
    p.add_argument("--space", default="from_scratch", help="a shipped space (tunekit spaces) or a .toml file (default from_scratch)")
    add_flags(p, "--trials", default=12, help="finished trials the study should hold (default 12)")
    add_flags(p, "--budget", help="what one full trial may draw: 4000samples, 2epochs, 1e6tokens or 200updates (updates "
         "at the task's batch), or device time (10min): a trial at batch B runs budget/B updates, or what fits in the "
         "time at B by the probe's timed steps (default: one run of the task's recipe)")
    add_flags(p, "--max-steps", help="shorthand for --budget Nupdates")
    p.add_argument("--objective", default="loss", metavar="NAME", help="what trials are compared and pruned by: loss, "
                   "accuracy, perplexity, or a metric of the task (Task(metrics={NAME: fn})) (default loss)")
    p.add_argument("--direction", choices=["minimize", "maximize"], help="which way the objective is better "
                   "(default: loss and perplexity minimize, accuracy maximize)")
    p.add_argument("--sampler", choices=["tpe", "random"], default="tpe", help="Optuna sampler (default tpe)")
    add_options(p, "sampler")
    p.add_argument("--no-prune", action="store_true", help="run every trial to the end")
    add_options(p, "pruner")
    add_options(p, "probes")
    add_options(p, "confirm")
    p.add_argument("--backend", choices=["local", "ray"], default="local", help="where trials run (default local)")
    add_options(p, "backend", skip=RAY_FLAGS)
    add_options(p.add_argument_group("ray backend (--backend ray)"), "backend", only=RAY_FLAGS)
    add_options(p, "study", skip=SHARED_FLAGS)
    add_options(p.add_argument_group("shared study (--storage URL)"), "study", only=SHARED_FLAGS)
    add_flags(p, "--seed")
    add_flags(p, "--out", help="where to write search.json, trials.csv, search.png and study.db (default tunekit_runs)")
    add_flags(p, "--quiet")


def _add_search_command(sub: Any) -> None:
    p = add_command(sub, "search", cmd_search, "seeded Optuna TPE search with ASHA early stopping", EPILOG_SEARCH,
                 "Run the probes the space needs, seed the space from them, and search it with Optuna (TPE) and "
                 "successive-halving early stopping. Writes DIR/search.json, DIR/trials.csv, DIR/search.png and the "
                 "study (DIR/study.db).", task=False)
    _add_search_flags(p)
    add_flags(p, "--keep")


def _add_worker_command(sub: Any) -> None:
    p = add_command(sub, "worker", cmd_worker, "join a shared study and run its trials (no probe runs)", EPILOG_WORKER,
                 "Join a study created by `tunekit study create` (or a first `tunekit search --storage URL --study "
                 "NAME`): its settings are the study's, and a flag that disagrees with them is refused.", task=False)
    add_flags(p, "--task", help=f"{TASK_FORMS} (default: the study's task)")  # a worker runs the study's task
    add_flags(p, "--set")
    add_flags(p, "--trials", "--budget", help="must agree with the study's")
    add_flags(p, "--max-steps", help="must agree with the study's budget")
    add_flags(p, "--seed", default=None, help="must agree with the study's")
    add_options(p, "sampler", only=("--sampler-seed",))
    add_options(p, "confirm")  # must agree with the study's
    add_flags(p, "--keep")
    add_options(p, "backend", skip=RAY_FLAGS)
    add_options(p, "study", skip=("--resume",))  # --storage and --study: which study; the rest: this worker
    add_flags(p, "--out", default=None, help="also write this worker's snapshot of the study there (default: none; "
         "tunekit report --storage URL --study NAME reports the whole study)")
    add_flags(p, "--quiet")


def _add_study_command(sub: Any) -> None:
    p = add_command(sub, "study", None, "create a shared study, reap its stopped workers, or delete it", EPILOG_WORKER, task=False)
    ss = p.add_subparsers(dest="study_command", metavar="ACTION", parser_class=Parser, required=True)
    c = ss.add_parser("create", help="run the probes once and store what every worker must agree on",
                      description="A search that runs no trial: the probes, the plan, the seed trial and the study's "
                                  "spec go into --storage; then start workers with tunekit worker.")
    _add_search_flags(c)
    c.set_defaults(func=cmd_study_create, usage=c.format_usage, backend=None)
    d = ss.add_parser("delete", help="delete a study and its trials (a creator that died before storing its settings)",
                      description="Delete the study and all its trials from --storage; without --yes, say what it holds.")
    add_flags(d, "--storage", required=True, help="the study's SQLAlchemy URL or journal file")
    add_flags(d, "--study", required=True, help="the study's name")
    d.add_argument("--yes", action="store_true", help="delete it (without: only say what it holds)")
    d.set_defaults(func=cmd_study_delete, usage=d.format_usage)
    r = ss.add_parser("reap", help="fail the trials of stopped workers now, and queue their re-runs",
                      description="Fail the RUNNING trials whose worker stopped: a stale heartbeat (RDB), a process "
                                  "of this machine that is gone, or a --worker named; each is re-run once.")
    add_flags(r, "--storage", required=True, help="the study's SQLAlchemy URL or journal file")
    add_flags(r, "--study", required=True, help="the study's name")
    r.add_argument("--worker", action="append", metavar="HOST:PID", help="a worker known to have stopped (repeatable)")
    add_options(r, "study", only=("--heartbeat-grace",))
    r.set_defaults(func=cmd_study_reap, usage=r.format_usage)


def _add_serve_command(sub: Any) -> None:
    p = add_command(sub, "serve", cmd_serve, "serve a study's database to workers (Optuna's gRPC storage proxy)",
                 "examples:\n  tunekit serve --storage postgresql://db/tk --port 13000 --dashboard-port 8080\n",
                 "Run Optuna's gRPC storage proxy in front of a database; workers use --storage grpc://HOST:PORT. "
                 "It listens on 127.0.0.1 unless --host says otherwise, and has no authentication or encryption: "
                 "see the README before exposing it.", task=False)
    add_flags(p, "--storage", required=True, help="the database (postgresql://..., sqlite:///...)")
    p.add_argument("--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1: this machine only)")
    add_flags(p, "--port", default=13000, help="gRPC port (default 13000)")
    add_flags(p, "--dashboard-port", type=int, metavar="PORT", help="also serve optuna-dashboard on this port")
    add_flags(p, "--artifacts")


def _add_dashboard_command(sub: Any) -> None:
    p = add_command(sub, "dashboard", cmd_dashboard, "optuna-dashboard on a search's study (pip install 'tunekit[dashboard]')",
                 "examples:\n  tunekit dashboard tunekit_runs\n  tunekit dashboard postgresql://db/tk --port 8080\n", task=False)
    p.add_argument("target", metavar="DIR|URL", help="a directory written by tunekit search, a storage URL or a journal file")
    p.add_argument("--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1)")
    add_flags(p, "--port", default=8080, help="HTTP port (default 8080)")
    add_flags(p, "--artifacts")


def _add_report_command(sub: Any) -> None:
    p = add_command(sub, "report", cmd_report, "redraw a search's table and plots from DIR/search.json, or report a whole study",
                 "examples:\n  tunekit report tunekit_runs\n  tunekit report --storage postgresql://db/tk --study cifar "
                 "--out runs/cifar\n", task=False)
    p.add_argument("dir", metavar="DIR", nargs="?", help="a directory written by tunekit search, or its search.json")
    add_flags(p, "--storage", help="report the whole study in this storage instead (with --study)")
    add_flags(p, "--study", help="the study's name (with --storage)")
    add_flags(p, "--out", default=None, help="where the study's report goes (default: DIR, else tunekit_runs)")
    add_flags(p, "--artifacts")


def _add_spaces_command(sub: Any) -> None:
    p = add_command(sub, "spaces", cmd_spaces, "list the shipped search spaces, or show one",
                 "examples:\n  tunekit spaces\n  tunekit spaces from_scratch\n  tunekit spaces my_space.toml\n", task=False)
    p.add_argument("name", nargs="?", metavar="NAME", help="a shipped space or a .toml file: show its entries and its file")


def _add_train_command(sub: Any) -> None:
    p = add_command(sub, "train", cmd_train, "train a task with warmup + decay through the shared step", EPILOG_TRAIN,
                 "Train a fresh model of a task through tunekit's shared training step and print its curve.")
    add_flags(p, "--lr", help=f"peak learning rate (default: the task's, else {defaults.LR:g})")
    p.add_argument("--run-steps", type=int, dest="max_steps", metavar="N",
                   help=f"optimizer updates of the run (default: the task's, else {defaults.RUN_STEPS})")
    renamed_flag(p, "--steps", "--run-steps", type=int, dest="max_steps")
    add_flags(p, "--batch-size")
    add_flags(p, "--accumulation-steps", default=None)
    add_flags(p, "--warmup", help=f"warmup: a fraction of the run (0.05) or updates (20); default {defaults.WARMUP:g}")
    p.add_argument("--schedule", choices=list(defaults.DECAYS),
                   help=f"decay after warmup (default {defaults.SCHEDULE})")
    p.add_argument("--min-lr-ratio", type=float, help=f"final LR as a fraction of the peak (default {defaults.MIN_LR_RATIO:g})")
    add_flags(p, "--clip", help="clip the global grad norm at this value; 'none' to disable (default: the task's, else "
         f"{defaults.CLIP_GRAD_NORM:g})")
    p.add_argument("--weight-decay", type=float, help="override the optimizer's weight decay")
    add_flags(p, "--precision", help="fp32, bf16 autocast, or fp16 with a GradScaler (default: the task's)")
    add_flags(p, "--device")
    add_flags(p, "--seed", help="seed of the model's weights and the data order (default 0)")
    p.add_argument("--eval-every", type=int, help="evaluate on validation data every N updates")
    p.add_argument("--config", metavar="SEARCH_JSON", help="re-run a search's trial exactly: DIR/search.json (its best "
                   "trial, or --trial N); other settings are refused")
    p.add_argument("--trial", type=int, metavar="N", help="with --config: the trial to re-run (default: the best)")
    add_flags(p, "--out", help="where to write train.json and train.png (default tunekit_runs)")
    add_flags(p, "--quiet")


def build_parser() -> argparse.ArgumentParser:
    """The ``tunekit`` command's parser, every subcommand in it."""
    parser = Parser(prog="tunekit", epilog=EPILOG_MAIN, formatter_class=argparse.RawDescriptionHelpFormatter,
                     description="Find the learning rate, batch size and training recipe before you spend GPU-hours on a sweep.")
    parser.add_argument("--version", action="version", version=f"tunekit {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=Parser)
    add_command(sub, "tasks", cmd_tasks, "list the built-in tasks", "examples:\n  tunekit tasks\n", task=False)
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
    args = parser.parse_args(join_negative_values(sys.argv[1:] if argv is None else argv))
    if not getattr(args, "command", None):
        parser.print_help()
        return 2
    return run(args)


if __name__ == "__main__":
    sys.exit(main())
