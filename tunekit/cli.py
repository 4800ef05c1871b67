"""The ``tunekit`` command: a thin shell over the public API.

Every subcommand parses its flags, calls one public function, prints a short
table and writes its files. A usage error prints one line and exits 2; an
internal error exits 1.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, NoReturn

from tunekit.cli_errors import in_cli_terms, run
from tunekit.errors import UsageError

__all__ = ["main", "build_parser"]

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
  tunekit train --task charlm --lr 3e-3 --steps 300 --precision bf16
  tunekit train --task my_project.tasks:cifar --set width=128 --out runs/a
  tunekit train --task path/to/task.py:make_task --accumulation-steps 4

a task is a built-in name, 'package.module:function' or 'path/to/file.py:function';
the function returns a tunekit.Task and may take the config dict given by --set.
"""

EPILOG_LR_FIND = """examples:
  tunekit lr-find                                the default built-in task, written to tunekit_runs/
  tunekit lr-find --task charlm --repeats 3 --out runs/lm
  tunekit lr-find --task my_project.tasks:cifar --batch-size 128 --accumulation-steps 2 --precision bf16
  tunekit lr-find --min-lr 1e-6 --max-lr 1 --steps 200 --mode exp
"""

EPILOG_PROBE = """examples:
  tunekit probe --memory-budget 2GiB             the default built-in task, written to tunekit_runs/
  tunekit probe --task charlm --memory-budget 512MiB --target-batch 256
  tunekit probe --task my_project.tasks:cifar --device cuda --precision bf16 --accumulation-steps 4
  tunekit probe --lr 3e-3 --lr-batch 64 --target-batch 512   rescale an LR to the planned batch
"""

EPILOG_DOCTOR = """examples:
  tunekit doctor                                 the default built-in task, written to tunekit_runs/
  tunekit doctor --task charlm --lr 3e-3 --warmup 0.05 --steps 2000
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
  tunekit train --task charlm --lr 3e-3 --steps 300 --warmup 0.1 --precision bf16
  tunekit train --task shapes --batch-size 32 --accumulation-steps 4 --schedule linear
  tunekit train --task path/to/task.py:make_task --set width=128 --set dropout=0.1 --out runs/a
"""


EPILOG_WORKER = """examples:
  tunekit study create --storage postgresql://db/tk --study cifar --task my_tasks:cifar --trials 60
  tunekit worker --storage postgresql://db/tk --study cifar          on each machine, as many as you like
  tunekit report --storage postgresql://db/tk --study cifar --out runs/cifar
  tunekit study reap --storage runs/journal.log --study cifar        fail the trials of stopped workers now
"""


class _Parser(argparse.ArgumentParser):
    """argparse, but a usage error is one line and exit status 2."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: error: {message} (see '{self.prog} --help')\n")


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
    """An argparse type: a seed numpy and torch both take."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None
    if not 0 <= value < 2**62:
        raise argparse.ArgumentTypeError(f"{text!r} must be in [0, 2**62)")
    return value


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


def _task_config(pairs: Sequence[str] | None) -> dict[str, Any]:
    """The --set KEY=VALUE pairs as the task function's config."""
    config: dict[str, Any] = {}
    for pair in pairs or ():
        key, sep, value = pair.partition("=")
        if not sep or not key.strip():
            raise UsageError(f"--set {pair!r} is not KEY=VALUE: write e.g. --set width=128")
        config[key.strip()] = _parse_value(value.strip())
    return config


# The flags that several commands share: their argparse settings, by flag. _add() adds them, and a
# command gives what it says differently (its help, a default) as keywords.
_FLAGS: dict[str, dict[str, Any]] = {
    "--task": dict(default=None, metavar="SPEC",
                   help="built-in name, package.module:function or path/to/file.py:function (default: shapes)"),
    "--set": dict(action="append", metavar="KEY=VALUE", dest="task_config",
                  help="task hyperparameter passed to the task function's config (repeatable)"),
    "--device": dict(default="auto", help="cpu, cuda, cuda:N or auto (default)"),
    "--seed": dict(type=_seed, default=0, help="seed of the model and the data order (default 0)"),
    "--quiet": dict(action="store_true", help="no progress bar"),
    "--batch-size": dict(type=int, help="micro-batch size (default: the task's)"),
    "--accumulation-steps": dict(type=int, default=1, help="micro-batches per optimizer update (default 1)"),
    "--precision": dict(choices=["fp32", "bf16", "fp16"], help="fp32, bf16, or fp16 with a GradScaler (default: the task's)"),
    "--lr": dict(type=_positive_float), "--steps": dict(type=int), "--warmup": dict(type=_warmup),
    "--clip": dict(type=_clip, dest="clip_grad_norm"), "--memory-budget": dict(metavar="SIZE"),
    "--trials": dict(type=int), "--budget": dict(metavar="AMOUNT"), "--max-steps": dict(type=int),
    "--sampler-seed": dict(type=_seed, metavar="N"), "--grace-period": dict(type=int, metavar="S"),
    "--storage": dict(metavar="URL"), "--study": dict(metavar="NAME"), "--port": dict(type=int),
    "--artifacts": dict(metavar="DIR", help="Optuna artifact store (a folder every machine sees): the probes' "
                        "JSON and plots, and the report's search.png, attached to the study for optuna-dashboard"),
}
_STUDY_FLAGS = {"--storage": dict(required=True, help="the study's SQLAlchemy URL or journal file"),
                "--study": dict(required=True, help="the study's name")}


def _add(p: Any, *flags: str, **settings: Any) -> None:
    """Add each flag with its shared settings, ``settings`` overriding them."""
    for flag in flags:
        p.add_argument(flag, **{**_FLAGS.get(flag, {}), **settings})


def _add_run_args(p: Any, writes: str) -> None:
    """The flags that every probe and search shares."""
    _add(p, "--device", "--seed")
    p.add_argument("--out", metavar="DIR", default="tunekit_runs", help=f"where to write {writes} (default tunekit_runs)")
    _add(p, "--quiet")


def _command(sub: Any, name: str, func: Callable[[argparse.Namespace], int] | None, help: str, epilog: str,
             description: str | None = None, task: bool = True) -> argparse.ArgumentParser:
    """A subcommand that runs ``func``, its examples kept as written; with ``task``, its --task and --set first."""
    p: argparse.ArgumentParser = sub.add_parser(name, help=help, description=description, epilog=epilog,
                                                formatter_class=argparse.RawDescriptionHelpFormatter)
    if func is not None:  # None: a command of subcommands, each with its own
        p.set_defaults(func=func)
    if task:
        _add(p, "--task", "--set")
    return p


def _add_lr_find_command(sub: Any) -> None:
    p = _command(sub, "lr-find", cmd_lr_find, "LR range test: suggest a peak LR for a warmup + cosine run",
                 EPILOG_LR_FIND, "Sweep the LR up over N optimizer updates of the shared step and suggest a peak LR. "
                                 "Writes DIR/lr_find.json and DIR/lr_find.png.")
    p.add_argument("--min-lr", type=_positive_float, default=1e-7, help="first LR of the sweep (default 1e-7)")
    p.add_argument("--max-lr", type=_positive_float, default=10.0, help="last LR of the sweep (default 10)")
    _add(p, "--steps", default=100, help="optimizer updates in the sweep, at least 10 (default 100)")
    p.add_argument("--mode", choices=["exp", "linear"], default="exp", help="LR spacing (default exp)")
    _add(p, "--batch-size")
    # The sweep runs training's step: these default to the task's, as in `tunekit train`.
    _add(p, "--accumulation-steps", default=None, help="micro-batches per optimizer update (default: the task's, else 1)")
    _add(p, "--precision")
    _add(p, "--clip", help="clip the global grad norm at this value; 'none' to disable (default: the task's, else 1.0, as in train)")
    p.add_argument("--repeats", type=int, default=1, help="repeat with other seeds and data orders; report the spread (default 1)")
    p.add_argument("--no-refine", action="store_true", help="the curve's suggestion alone, without the short runs that check it")
    p.add_argument("--refine-steps", type=int, default=100, metavar="N",
                   help="updates of each short warmup + cosine run that checks the suggestion (default 100)")
    p.add_argument("--refine-seeds", type=int, default=2, metavar="S",
                   help="short runs per LR, with other data orders, their scores averaged (default 2)")
    _add_run_args(p, "lr_find.json and lr_find.png")


def _add_probe_command(sub: Any) -> None:
    p = _command(sub, "probe", cmd_probe, "memory and throughput probe: largest, fastest and critical batch size",
                 EPILOG_PROBE, "Predict a training step's peak memory from a trace on fake tensors, confirm the "
                               "largest batch that fits with a real step, measure throughput and the gradient noise "
                               "scale. Writes DIR/probe.json and DIR/probe.png.")
    _add(p, "--memory-budget", help="e.g. 512MiB, 8GiB, 2.5GB (default: free GPU memory, or available RAM on CPU)")
    p.add_argument("--headroom", type=float, default=0.15, help="fraction of the budget kept free (default 0.15)")
    _add(p, "--accumulation-steps", "--precision")
    p.add_argument("--target-batch", type=int, help="effective batch to plan for (default: the critical batch)")
    _add(p, "--lr", help="an LR found at --lr-batch, to rescale to the target batch")
    p.add_argument("--lr-batch", type=int, help="the effective batch at which --lr was found")
    _add_run_args(p, "probe.json and probe.png")


def _add_doctor_command(sub: Any) -> None:
    p = _command(sub, "doctor", cmd_doctor, "pre-flight check: what would make a training run fail, before tuning",
                 EPILOG_DOCTOR, "Check the task's model, loss and data before any LR or batch is tuned: gradient "
                                "flow, a tiny-batch overfit, NaN/Inf, the loss contract, the data, train/eval modes "
                                "and the recipe. Writes DIR/doctor.json and DIR/doctor.png; exits 1 when a check fails.")
    _add(p, "--batch-size", "--accumulation-steps", "--precision")
    _add(p, "--lr", help="the peak LR you intend, compared with a quick range test (default: the task's)")
    _add(p, "--warmup", help="the warmup you intend: a fraction (0.05) or updates (20) (default: the task's)")
    _add(p, "--steps", help="the updates of the run you intend, for the warmup check (default: the task's)")
    _add(p, "--memory-budget", help="memory to check the batch against, e.g. 8GiB (default: free memory)")
    p.add_argument("--anomaly", action="store_true", help="also run the backward under autograd's anomaly mode (slow)")
    p.add_argument("--loss-floor", type=_nonnegative_float, help="the lowest loss the tiny batch can reach, for a loss "
                   "with terms that do not vanish (default 0, or label smoothing's floor)")
    _add_run_args(p, "doctor.json and doctor.png")


def _add_search_flags(p: argparse.ArgumentParser) -> None:
    """The flags of a search (and of `tunekit study create`, which is one that runs no trial)."""
    _add(p, "--task", "--set")
    p.add_argument("--space", default="from_scratch", help="a shipped space (tunekit spaces) or a .toml file (default from_scratch)")
    _add(p, "--trials", default=12, help="finished trials the study should hold (default 12)")
    _add(p, "--budget", help="what one full trial may draw: 4000samples, 2epochs, 1e6tokens or 200updates (updates "
         "at the task's batch); a trial at batch B runs budget/B updates (default: one run of the task's recipe)")
    _add(p, "--max-steps", help="shorthand for --budget Nupdates")
    p.add_argument("--backend", choices=["local", "ray"], default="local", help="where trials run (default local)")
    p.add_argument("--sampler", choices=["tpe", "random"], default="tpe", help="Optuna sampler (default tpe)")
    p.add_argument("--no-prune", action="store_true", help="run every trial to the end")
    _add(p, "--storage", help="SQLAlchemy URL or journal file (default: sqlite in DIR)")
    _add(p, "--study", help="study name (default tunekit-TASK-SPACE)")
    p.add_argument("--resume", action="store_true", help="continue the study: keep finished trials, re-run interrupted ones")
    p.add_argument("--lr-find", metavar="FILE", help="a saved lr_find.json instead of running the range test")
    p.add_argument("--probe", metavar="FILE", help="a saved probe.json instead of running the probe")
    _add(p, "--memory-budget", help="memory budget of the probe (e.g. 8GiB)")
    _add(p, "--sampler-seed", help="seed of the sampler (default: --seed)")
    p.add_argument("--rungs", type=int, metavar="N", help="early-stopping rungs, at budget/rf**N .. budget/rf (default: as many as leave rf trials "
                   "expected to finish, none before the first complete trial had started to learn)")
    p.add_argument("--first-rung", type=float, metavar="F", help="the first rung as a fraction of the budget (instead of --rungs)")
    p.add_argument("--reduction-factor", type=int, default=3, metavar="N", help="successive halving keeps the best 1/N at each rung (default 3)")
    g = p.add_argument_group("ray backend (--backend ray)")
    g.add_argument("--cpus-per-trial", type=_nonnegative_float, default=1, metavar="N", help="CPUs per trial (default 1)")
    g.add_argument("--gpus-per-trial", type=_nonnegative_float, default=0, metavar="N",
                   help="GPUs per trial; 0.5 runs two trials on a GPU if its memory holds them (default 0)")
    g.add_argument("--max-concurrent", type=int, metavar="N", help="trials at once (default: as many as resources allow)")
    g.add_argument("--max-failures", type=int, default=0, metavar="N", help="retries of a trial that raises (default 0)")
    g.add_argument("--address", metavar="ADDR", help="join a running Ray cluster: auto or HOST:PORT (default: start a local one)")
    g.add_argument("--storage-path", metavar="DIR", help="Tune's trial directories; a shared filesystem for several machines (default DIR/ray)")
    g = p.add_argument_group("shared study (--storage URL)")
    _add_worker_args(g)
    _add(g, "--artifacts")
    _add_run_args(p, "search.json, trials.csv, search.png and study.db")


def _add_worker_args(g: Any) -> None:
    """The flags of one worker of a shared study."""
    _add(g, "--grace-period", help="seconds without a heartbeat after which a worker's trial is failed and re-run "
         "once (default 60; RDB storages)")
    g.add_argument("--threads", type=int, metavar="N", help="torch threads of this worker (default: the cores divided "
                   "among the study's workers on this machine)")
    g.add_argument("--worker-id", metavar="ID", help="this worker's name, from which its sampler seed comes (default HOST:PID)")


def _add_worker_command(sub: Any) -> None:
    p = _command(sub, "worker", cmd_worker, "join a shared study and run its trials (no probe runs)", EPILOG_WORKER,
                 "Join a study created by `tunekit study create` (or a first `tunekit search --storage URL --study "
                 "NAME`): its settings are the study's, and a flag that disagrees with them is refused.", task=False)
    for flag, settings in _STUDY_FLAGS.items():
        _add(p, flag, **settings)
    _add(p, "--task", "--set")
    _add(p, "--trials", "--budget", help="must agree with the study's")
    _add(p, "--max-steps", help="must agree with the study's budget")
    _add(p, "--seed", "--sampler-seed", default=None, help="must agree with the study's")
    _add(p, "--device")
    p.add_argument("--timeout", type=_positive_float, default=1800, metavar="S",
                   help="how long to wait for the study's creator to store its settings (default 1800)")
    _add_worker_args(p)
    p.add_argument("--out", metavar="DIR", help="also write this worker's snapshot of the study there (default: none; "
                   "tunekit report --storage URL --study NAME reports the whole study)")
    _add(p, "--quiet")


def _add_study_command(sub: Any) -> None:
    p = _command(sub, "study", None, "create a shared study, or reap its stopped workers", EPILOG_WORKER,
                 task=False)
    ss = p.add_subparsers(dest="study_command", metavar="ACTION", parser_class=_Parser, required=True)
    c = ss.add_parser("create", help="run the probes once and store what every worker must agree on",
                      description="A search that runs no trial: the probes, the plan, the seed trial and the study's "
                                  "spec go into --storage; then start workers with tunekit worker.")
    _add_search_flags(c)
    c.set_defaults(func=cmd_study_create, usage=c.format_usage)
    r = ss.add_parser("reap", help="fail the trials of stopped workers now, and queue their re-runs",
                      description="Fail the RUNNING trials whose worker stopped: a stale heartbeat (RDB), a process "
                                  "of this machine that is gone, or a --worker named; each is re-run once.")
    for flag, settings in _STUDY_FLAGS.items():
        _add(r, flag, **settings)
    r.add_argument("--worker", action="append", metavar="HOST:PID", help="a worker known to have stopped (repeatable)")
    _add(r, "--grace-period", help="heartbeat grace period (default 60)")
    r.set_defaults(func=cmd_study_reap, usage=r.format_usage)


def _add_serve_commands(sub: Any) -> None:
    """`tunekit serve` (the study's database, to workers) and `tunekit dashboard` (a study, to a browser)."""
    p = _command(sub, "serve", cmd_serve, "serve a study's database to workers (Optuna's gRPC storage proxy)",
                 "examples:\n  tunekit serve --storage postgresql://db/tk --port 13000 --dashboard-port 8080\n",
                 "Run Optuna's gRPC storage proxy in front of a database; workers use --storage grpc://HOST:PORT. "
                 "It listens on 127.0.0.1 unless --host says otherwise, and has no authentication or encryption: "
                 "see the README before exposing it.", task=False)
    _add(p, "--storage", required=True, help="the database (postgresql://..., sqlite:///...)")
    p.add_argument("--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1: this machine only)")
    _add(p, "--port", default=13000, help="gRPC port (default 13000)")
    p.add_argument("--dashboard-port", type=int, metavar="PORT", help="also serve optuna-dashboard on this port")
    _add(p, "--artifacts")
    p = _command(sub, "dashboard", cmd_dashboard, "optuna-dashboard on a search's study (pip install 'tunekit[dashboard]')",
                 "examples:\n  tunekit dashboard tunekit_runs\n  tunekit dashboard postgresql://db/tk --port 8080\n", task=False)
    p.add_argument("target", metavar="DIR|URL", help="a directory written by tunekit search, a storage URL or a journal file")
    p.add_argument("--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1)")
    _add(p, "--port", default=8080, help="HTTP port (default 8080)")
    _add(p, "--artifacts")


def _add_report_commands(sub: Any) -> None:
    """`tunekit report` (a search's table and plots) and `tunekit spaces` (the search spaces)."""
    p = _command(sub, "report", cmd_report, "redraw a search's table and plots from DIR/search.json, or report a whole study",
                 "examples:\n  tunekit report tunekit_runs\n  tunekit report --storage postgresql://db/tk --study cifar "
                 "--out runs/cifar\n", task=False)
    p.add_argument("dir", metavar="DIR", nargs="?", help="a directory written by tunekit search")
    _add(p, "--storage", help="report the whole study in this storage instead (with --study)")
    _add(p, "--study", help="the study's name (with --storage)")
    p.add_argument("--out", metavar="DIR", help="where the study's report goes (default: DIR, else tunekit_runs)")
    _add(p, "--artifacts")
    p = _command(sub, "spaces", cmd_spaces, "list the shipped search spaces, or show one",
                 "examples:\n  tunekit spaces\n  tunekit spaces from_scratch\n  tunekit spaces my_space.toml\n", task=False)
    p.add_argument("name", nargs="?", metavar="NAME", help="a shipped space or a .toml file: show its entries and its file")


def _add_train_command(sub: Any) -> None:
    p = _command(sub, "train", cmd_train, "train a task with warmup + decay through the shared step", EPILOG_TRAIN,
                 "Train a fresh model of a task through tunekit's shared training step and print its curve.")
    _add(p, "--lr", help="peak learning rate (default: the task's, else 1e-3)")
    _add(p, "--steps", dest="max_steps", help="optimizer updates (default: the task's, else 200)")
    _add(p, "--batch-size")
    _add(p, "--accumulation-steps", default=None)
    _add(p, "--warmup", help="warmup: a fraction of the run (0.05) or updates (20); default 0.05")
    p.add_argument("--schedule", choices=["cosine", "linear", "constant"], help="decay after warmup (default cosine)")
    p.add_argument("--min-lr-ratio", type=float, help="final LR as a fraction of the peak (default 0.1)")
    _add(p, "--clip", help="clip the global grad norm at this value; 'none' to disable (default: the task's, else 1.0)")
    p.add_argument("--weight-decay", type=float, help="override the optimizer's weight decay")
    _add(p, "--precision", help="fp32, bf16 autocast, or fp16 with a GradScaler (default: the task's)")
    _add(p, "--device")
    _add(p, "--seed", help="seed of the model's weights and the data order (default 0)")
    p.add_argument("--eval-every", type=int, help="evaluate on validation data every N updates")
    p.add_argument("--config", metavar="SEARCH_JSON", help="re-run a search's trial exactly: DIR/search.json (its best "
                   "trial, or --trial N); other settings are refused")
    p.add_argument("--trial", type=int, metavar="N", help="with --config: the trial to re-run (default: the best)")
    p.add_argument("--out", metavar="DIR", default="tunekit_runs",
                   help="where to write train.json and train.png (default tunekit_runs)")
    _add(p, "--quiet")


def build_parser() -> argparse.ArgumentParser:
    """The ``tunekit`` command's parser, every subcommand in it."""
    parser = _Parser(
        prog="tunekit",
        description="Find the learning rate, batch size and training recipe before you spend GPU-hours on a sweep.",
        epilog=EPILOG_MAIN,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    from tunekit.version import __version__

    parser.add_argument("--version", action="version", version=f"tunekit {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    _command(sub, "tasks", cmd_tasks, "list the built-in tasks", "examples:\n  tunekit tasks\n", task=False)
    _add_lr_find_command(sub)
    _add_probe_command(sub)
    _add_doctor_command(sub)
    p = _command(sub, "search", cmd_search, "seeded Optuna TPE search with ASHA early stopping", EPILOG_SEARCH,
                 "Run the probes the space needs, seed the space from them, and search it with Optuna (TPE) and "
                 "successive-halving early stopping. Writes DIR/search.json, DIR/trials.csv, DIR/search.png and the "
                 "study (DIR/study.db).", task=False)
    _add_search_flags(p)
    _add_worker_command(sub)
    _add_study_command(sub)
    _add_serve_commands(sub)
    _add_report_commands(sub)
    _add_train_command(sub)
    for command in sub.choices.values():  # to say an API error's hints as this command's flags
        command.set_defaults(usage=command.format_usage)
    return parser


def _print_names(descriptions: dict[str, str]) -> None:
    """One line per name, the descriptions aligned: the lists of tasks and spaces."""
    width = max(map(len, descriptions))
    for name, desc in descriptions.items():
        print(f"{name:<{width}}  {desc}")


def cmd_tasks(args: argparse.Namespace) -> int:
    from tunekit.builtin import DEFAULT_TASK
    from tunekit.inputs.task_spec import list_tasks

    _print_names({name: desc + (" (default)" if name == DEFAULT_TASK else "") for name, desc in list_tasks().items()})
    return 0


def _load(args: argparse.Namespace) -> Any:
    """The task that --task and --set name."""
    from tunekit.builtin import DEFAULT_TASK
    from tunekit.inputs.task_spec import load_task

    return load_task(args.task or DEFAULT_TASK, _task_config(args.task_config))


# Output folders this process created: a command that fails leaves none of them behind empty.
_CREATED: list[Path] = []


def _out_dir(path: str | None) -> Path | None:
    """The --out folder, created (and remembered, to remove if the command fails); None for no --out."""
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


def _remove_empty_outputs() -> None:
    """Remove the folders this process created that are still empty."""
    for out in reversed(_CREATED):
        try:
            out.rmdir()  # only an empty folder: anything written there stays
        except OSError:
            pass


def _check_size(size: str | None) -> None:
    """A bad --memory-budget fails before the task loads, which can take a while."""
    if size is not None:
        from tunekit.bytesize import parse_bytes

        parse_bytes(size)


def _show(result: Any, out: Path | None, text: str | None = None) -> None:
    """Print what the result says (its summary, else ``text``), then write its files into ``out`` and say where."""
    print(result.summary() if text is None else text)
    if out is not None:
        print("wrote " + " and ".join(map(str, result.save(out))))


def cmd_lr_find(args: argparse.Namespace) -> int:
    from tunekit.probes.range_test import TASK_DEFAULT, lr_find

    out = _out_dir(args.out)
    task = _load(args)
    clip = TASK_DEFAULT if args.clip_grad_norm is None else None if args.clip_grad_norm == "none" else args.clip_grad_norm
    result = lr_find(task, min_lr=args.min_lr, max_lr=args.max_lr, steps=args.steps, mode=args.mode,
                     batch_size=args.batch_size, accumulation_steps=args.accumulation_steps,
                     precision=args.precision, clip_grad_norm=clip, repeats=args.repeats, seed=args.seed,
                     refine=not args.no_refine, refine_steps=args.refine_steps, refine_seeds=args.refine_seeds,
                     device=args.device, progress=not args.quiet)
    _show(result, out)
    return 0


def cmd_probe(args: argparse.Namespace) -> int:
    from tunekit.probes.batch_probe import probe

    out = _out_dir(args.out)
    _check_size(args.memory_budget)
    result = probe(_load(args), memory_budget=args.memory_budget, headroom=args.headroom, device=args.device,
                   precision=args.precision, accumulation_steps=args.accumulation_steps,
                   target_batch=args.target_batch, lr=args.lr, lr_batch=args.lr_batch, seed=args.seed,
                   progress=not args.quiet)
    _show(result, out)
    return 0


def cmd_doctor(args: argparse.Namespace) -> int:
    from tunekit.checks import doctor

    out = _out_dir(args.out)
    _check_size(args.memory_budget)
    result = doctor(_load(args), batch_size=args.batch_size, accumulation_steps=args.accumulation_steps,
                    precision=args.precision, device=args.device, seed=args.seed, lr=args.lr, warmup=args.warmup,
                    steps=args.steps, memory_budget=args.memory_budget, anomaly=args.anomaly,
                    overfit_floor=args.loss_floor, progress=not args.quiet)
    _show(result, out, in_cli_terms(result.table(), args.usage()))  # its fixes as this command's flags
    return result.exit_code


def _search_settings(args: argparse.Namespace, out: Path | None) -> dict[str, Any]:
    """The keyword arguments that ``search`` and ``create_study`` both take from the flags."""
    names = ("trials", "budget", "max_steps", "storage", "seed", "sampler_seed", "sampler", "memory_budget", "device",
             "rungs", "first_rung", "reduction_factor", "grace_period", "artifacts")
    return dict(task_config=_task_config(args.task_config) or None, study_name=args.study, out=out,
                lr_find_result=args.lr_find, probe_result=args.probe, prune=not args.no_prune,
                progress=not args.quiet, **{name: getattr(args, name) for name in names})


def cmd_search(args: argparse.Namespace) -> int:
    from tunekit.hpsearch import search

    out = _out_dir(args.out)
    ray = ("cpus_per_trial", "gpus_per_trial", "max_concurrent", "max_failures", "address", "storage_path")
    result = search(args.task or "shapes", args.space, **_search_settings(args, out), resume=args.resume,
                    backend=args.backend, threads=args.threads, worker_id=args.worker_id,
                    **{name: getattr(args, name) for name in ray})
    print(result.summary(out))
    return 0


def cmd_study_create(args: argparse.Namespace) -> int:
    from tunekit.hpsearch import create_study

    if not args.storage:
        raise UsageError("tunekit study create needs --storage URL (postgresql://..., sqlite:///..., or a journal file *.log)")
    result = create_study(args.task or "shapes", args.space, **_search_settings(args, _out_dir(args.out)))
    print(f"study '{result.study_name}' is ready for {args.trials} trials: on each machine run "
          f"tunekit worker --storage {args.storage} --study {result.study_name}")
    return 0


def cmd_report(args: argparse.Namespace) -> int:
    from tunekit.results import SearchResult

    if args.storage or args.study:
        return _report_study(args)
    if args.dir is None:
        raise UsageError("give a directory written by tunekit search, or --storage URL --study NAME")
    path = Path(args.dir) / "search.json"
    if not path.is_file():
        raise UsageError(f"'{path}' does not exist: give a directory written by tunekit search")
    try:
        result = SearchResult.from_json(path)
    except TypeError as exc:  # fields of another version's search.json
        raise UsageError(f"'{path}' was written by another version of tunekit ({exc}): run the search again") from None
    result.save(Path(args.dir))
    print(result.table())
    print(f"redrew {Path(args.dir) / 'search.png'} and trials.csv")
    return 0


def _report_study(args: argparse.Namespace) -> int:
    """`tunekit report --storage URL --study NAME`: the whole shared study."""
    if not (args.storage and args.study):
        raise UsageError("a study's report needs both --storage URL and --study NAME")
    from tunekit.hpsearch.shared.api import write_study_report

    out = _out_dir(args.out or args.dir or "tunekit_runs")
    result = write_study_report(args.storage, args.study, out, artifacts=args.artifacts)
    print(result.table())
    print(f"wrote {out}/search.json, trials.csv, search.png: study '{args.study}', {len(result.trials)} trials")
    return 0


def cmd_worker(args: argparse.Namespace) -> int:
    from tunekit.hpsearch import join_study

    out = _out_dir(args.out)
    result = join_study(args.storage, args.study, task=args.task, out=out, device=args.device, progress=not args.quiet,
                        worker_id=args.worker_id, threads=args.threads, grace_period=args.grace_period,
                        timeout=args.timeout, trials=args.trials, budget=args.budget, max_steps=args.max_steps,
                        seed=args.seed, sampler_seed=args.sampler_seed, task_config=_task_config(args.task_config) or None)
    mine = [t for t in result.trials if (t.get("worker") or {}).get("pid") == os.getpid()]
    print(f"worker done: ran {len(mine)} of the study's {len(result.trials)} trials; "
          f"tunekit report --storage {args.storage} --study {args.study} reports the whole study")
    return 0


def cmd_study_reap(args: argparse.Namespace) -> int:
    from tunekit.hpsearch import reap_study

    numbers = reap_study(args.storage, args.study, workers=args.worker, grace_period=args.grace_period)
    print(f"failed {len(numbers)} trial(s) of stopped workers{': ' + ', '.join(map(str, numbers)) if numbers else ''}"
          f"{'; each is re-run once by the next worker' if numbers else ''}")
    return 0


def cmd_serve(args: argparse.Namespace) -> int:
    from tunekit.hpsearch.shared.server import serve

    ready = lambda: print(f"serving {args.storage} on {args.host}:{args.port}: workers use "  # noqa: E731
                          f"--storage grpc://{args.host}:{args.port}", flush=True)
    serve(args.storage, host=args.host, port=args.port, dashboard_port=args.dashboard_port, artifacts=args.artifacts,
          on_ready=ready)
    return 0


def cmd_dashboard(args: argparse.Namespace) -> int:
    from tunekit.hpsearch.shared.server import dashboard

    dashboard(args.target, host=args.host, port=args.port, artifacts=args.artifacts,
              on_ready=lambda: print(f"optuna-dashboard on http://{args.host}:{args.port}", flush=True))
    return 0


def cmd_spaces(args: argparse.Namespace) -> int:
    from tunekit.inputs.space import list_spaces, load_space, space_path

    if args.name:
        space = load_space(args.name)  # an unknown name or a bad file is one usage line
        print(space.table())
        print(f"file: {space_path(args.name)}")
    else:
        _print_names(list_spaces())
    return 0


def cmd_train(args: argparse.Namespace) -> int:
    from tunekit.training.loop import train

    out = _out_dir(args.out)
    keys = ("lr", "max_steps", "batch_size", "accumulation_steps", "warmup", "schedule", "min_lr_ratio",
            "weight_decay", "precision", "eval_every")
    overrides = {k: getattr(args, k) for k in keys if getattr(args, k) is not None}
    if args.clip_grad_norm is not None:
        overrides["clip_grad_norm"] = None if args.clip_grad_norm == "none" else args.clip_grad_norm
    if args.config:
        task, config, trial = _from_search(args, overrides)
    else:
        if args.trial is not None:
            raise UsageError("--trial goes with --config DIR/search.json: add it, or drop --trial")
        task, config, trial = _load(args), {**overrides, "seed": args.seed, "device": args.device}, None
    result = train(task, config, progress=not args.quiet)
    _show(result, out, result.table() if trial is None else f"{result.table()}\n{result.compared_with(trial)}")
    return 0


def _from_search(args: argparse.Namespace, overrides: dict[str, Any]) -> tuple[Any, dict[str, Any], dict[str, Any]]:
    """(the task, the training config, the trial) of a search's trial, for an exact re-run."""
    from tunekit.inputs.task_spec import load_task
    from tunekit.hpsearch import SearchResult

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
    except (TypeError, ValueError) as exc:
        raise UsageError(f"--config '{path}' is not a search.json of this tunekit ({exc})") from None
    trial = result.trial(args.trial)
    spec = args.task or result.task
    if spec is None:
        raise UsageError("the search ran a Task object, not a spec: give the same task with --task")
    config = {**trial["config"], "device": args.device}
    return load_task(spec, trial.get("task_config") or None), config, trial


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


def main(argv: Sequence[str] | None = None) -> int:
    """Run ``tunekit ARGV``; return its exit status (0, 1 on an error or a failed check, 2 on a usage error)."""
    parser = build_parser()
    args = parser.parse_args(_join_negative_values(sys.argv[1:] if argv is None else argv))
    if not getattr(args, "command", None):
        parser.print_help()
        return 2
    code = 1
    try:
        code = run(args)
    except BaseException:
        code = 1
        raise
    finally:
        if code != 0:
            _remove_empty_outputs()  # a failed command leaves no empty --out folder behind
        _CREATED.clear()
    return code


if __name__ == "__main__":
    sys.exit(main())
