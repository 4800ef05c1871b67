"""The ``tunekit`` command: a thin shell over the public API.

Every subcommand parses its flags, calls one public function, prints a short
table and writes its files. A usage error prints one line and exits 2; an
internal error exits 1.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
import traceback
from collections.abc import Sequence
from pathlib import Path
from typing import Any, NoReturn

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


class _Parser(argparse.ArgumentParser):
    """argparse, but a usage error is one line and exit status 2."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: error: {message} (see '{self.prog} --help')\n")


def _positive_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if not value > 0:
        raise argparse.ArgumentTypeError(f"{text!r} must be > 0")
    return value


def _nonnegative_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if not value >= 0:
        raise argparse.ArgumentTypeError(f"{text!r} must be >= 0")
    return value


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
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None
    if not 0 <= value < 2**62:
        raise argparse.ArgumentTypeError(f"{text!r} must be in [0, 2**62)")
    return value


def _parse_value(text: str) -> Any:
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
    config: dict[str, Any] = {}
    for pair in pairs or ():
        key, sep, value = pair.partition("=")
        if not sep or not key.strip():
            raise UsageError(f"--set {pair!r} is not KEY=VALUE: write e.g. --set width=128")
        config[key.strip()] = _parse_value(value.strip())
    return config


def _add_task_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--task", default=None, metavar="SPEC",
                   help="built-in name, package.module:function or path/to/file.py:function (default: shapes)")
    p.add_argument("--set", action="append", metavar="KEY=VALUE", dest="task_config",
                   help="task hyperparameter passed to the task function's config (repeatable)")


def _add_run_args(p: argparse.ArgumentParser, writes: str) -> None:
    """The flags that every probe and search shares."""
    p.add_argument("--device", default="auto", help="cpu, cuda, cuda:N or auto (default)")
    p.add_argument("--seed", type=_seed, default=0, help="seed of the model and the data order (default 0)")
    p.add_argument("--out", metavar="DIR", default="tunekit_runs", help=f"where to write {writes} (default tunekit_runs)")
    p.add_argument("--quiet", action="store_true", help="no progress bar")


def _add_step_args(p: argparse.ArgumentParser) -> None:
    """How the probes run the shared step."""
    p.add_argument("--accumulation-steps", type=int, default=1, help="micro-batches per optimizer update (default 1)")
    p.add_argument("--precision", choices=["fp32", "bf16", "fp16"], help="fp32, bf16, or fp16 with a GradScaler (default: the task's)")


def _add_tasks_command(sub: Any) -> None:
    p = sub.add_parser("tasks", help="list the built-in tasks",
                       epilog="examples:\n  tunekit tasks\n", formatter_class=argparse.RawDescriptionHelpFormatter)
    p.set_defaults(func=cmd_tasks)


def _add_lr_find_command(sub: Any) -> None:
    p = sub.add_parser("lr-find", help="LR range test: suggest a peak LR for a warmup + cosine run",
                       description="Sweep the LR up over N optimizer updates of the shared step and suggest a peak LR. "
                                   "Writes DIR/lr_find.json and DIR/lr_find.png.",
                       epilog=EPILOG_LR_FIND, formatter_class=argparse.RawDescriptionHelpFormatter)
    _add_task_args(p)
    p.add_argument("--min-lr", type=_positive_float, default=1e-7, help="first LR of the sweep (default 1e-7)")
    p.add_argument("--max-lr", type=_positive_float, default=10.0, help="last LR of the sweep (default 10)")
    p.add_argument("--steps", type=int, default=100, help="optimizer updates in the sweep, at least 10 (default 100)")
    p.add_argument("--mode", choices=["exp", "linear"], default="exp", help="LR spacing (default exp)")
    p.add_argument("--batch-size", type=int, help="micro-batch size (default: the task's)")
    # The sweep runs training's step: these default to the task's, as in `tunekit train`.
    p.add_argument("--accumulation-steps", type=int, help="micro-batches per optimizer update (default: the task's, else 1)")
    p.add_argument("--precision", choices=["fp32", "bf16", "fp16"], help="fp32, bf16, or fp16 with a GradScaler (default: the task's)")
    p.add_argument("--clip", type=_clip, dest="clip_grad_norm", help="clip the global grad norm at this value; 'none' to disable (default: the task's, else 1.0, as in train)")
    p.add_argument("--repeats", type=int, default=1, help="repeat with other seeds and data orders; report the spread (default 1)")
    p.add_argument("--no-refine", action="store_true",
                   help="the curve's suggestion alone, without the short runs that check it")
    p.add_argument("--refine-steps", type=int, default=100, metavar="N",
                   help="updates of each short warmup + cosine run that checks the suggestion (default 100)")
    p.add_argument("--refine-seeds", type=int, default=2, metavar="S",
                   help="short runs per LR, with other data orders, their scores averaged (default 2)")
    _add_run_args(p, "lr_find.json and lr_find.png")
    p.set_defaults(func=cmd_lr_find)


def _add_probe_command(sub: Any) -> None:
    p = sub.add_parser("probe", help="memory and throughput probe: largest, fastest and critical batch size",
                       description="Predict a training step's peak memory from a trace on fake tensors, confirm the "
                                   "largest batch that fits with a real step, measure throughput and the gradient noise "
                                   "scale. Writes DIR/probe.json and DIR/probe.png.",
                       epilog=EPILOG_PROBE, formatter_class=argparse.RawDescriptionHelpFormatter)
    _add_task_args(p)
    p.add_argument("--memory-budget", metavar="SIZE", help="e.g. 512MiB, 8GiB, 2.5GB (default: free GPU memory, or available RAM on CPU)")
    p.add_argument("--headroom", type=float, default=0.15, help="fraction of the budget kept free (default 0.15)")
    _add_step_args(p)
    p.add_argument("--target-batch", type=int, help="effective batch to plan for (default: the critical batch)")
    p.add_argument("--lr", type=_positive_float, help="an LR found at --lr-batch, to rescale to the target batch")
    p.add_argument("--lr-batch", type=int, help="the effective batch at which --lr was found")
    _add_run_args(p, "probe.json and probe.png")
    p.set_defaults(func=cmd_probe)


def _add_doctor_command(sub: Any) -> None:
    p = sub.add_parser("doctor", help="pre-flight check: what would make a training run fail, before tuning",
                       description="Check the task's model, loss and data before any LR or batch is tuned: gradient "
                                   "flow, a tiny-batch overfit, NaN/Inf, the loss contract, the data, train/eval modes "
                                   "and the recipe. Writes DIR/doctor.json and DIR/doctor.png; exits 1 when a check fails.",
                       epilog=EPILOG_DOCTOR, formatter_class=argparse.RawDescriptionHelpFormatter)
    _add_task_args(p)
    p.add_argument("--batch-size", type=int, help="micro-batch size (default: the task's)")
    _add_step_args(p)
    p.add_argument("--lr", type=_positive_float, help="the peak LR you intend, compared with a quick range test (default: the task's)")
    p.add_argument("--warmup", type=_warmup, help="the warmup you intend: a fraction (0.05) or updates (20) (default: the task's)")
    p.add_argument("--steps", type=int, help="the updates of the run you intend, for the warmup check (default: the task's)")
    p.add_argument("--memory-budget", metavar="SIZE", help="memory to check the batch against, e.g. 8GiB (default: free memory)")
    p.add_argument("--anomaly", action="store_true", help="also run the backward under autograd's anomaly mode (slow)")
    p.add_argument("--loss-floor", type=_nonnegative_float, help="the lowest loss the tiny batch can reach, for a loss "
                   "with terms that do not vanish (default 0, or label smoothing's floor)")
    _add_run_args(p, "doctor.json and doctor.png")
    p.set_defaults(func=cmd_doctor)


def _add_search_command(sub: Any) -> None:
    p = sub.add_parser("search", help="seeded Optuna TPE search with ASHA early stopping",
                       description="Run the probes the space needs, seed the space from them, and search it with "
                                   "Optuna (TPE) and successive-halving early stopping. Writes DIR/search.json, "
                                   "DIR/trials.csv, DIR/search.png and the study (DIR/study.db).",
                       epilog=EPILOG_SEARCH, formatter_class=argparse.RawDescriptionHelpFormatter)
    _add_search_flags(p)
    p.set_defaults(func=cmd_search)


def _add_search_flags(p: argparse.ArgumentParser) -> None:
    """The flags of a search (and of `tunekit study create`, which is one that runs no trial)."""
    _add_task_args(p)
    p.add_argument("--space", default="from_scratch", help="a shipped space (tunekit spaces) or a .toml file (default from_scratch)")
    p.add_argument("--trials", type=int, default=12, help="finished trials the study should hold (default 12)")
    p.add_argument("--budget", metavar="AMOUNT", help="what one full trial may draw: 4000samples, 2epochs, 1e6tokens or "
                   "200updates (updates at the task's batch); a trial at batch B runs budget/B updates "
                   "(default: one run of the task's recipe)")
    p.add_argument("--max-steps", type=int, help="shorthand for --budget Nupdates")
    p.add_argument("--backend", choices=["local", "ray"], default="local", help="where trials run (default local)")
    p.add_argument("--sampler", choices=["tpe", "random"], default="tpe", help="Optuna sampler (default tpe)")
    p.add_argument("--no-prune", action="store_true", help="run every trial to the end")
    p.add_argument("--storage", metavar="URL", help="SQLAlchemy URL or journal file (default: sqlite in DIR)")
    p.add_argument("--study", metavar="NAME", help="study name (default tunekit-TASK-SPACE)")
    p.add_argument("--resume", action="store_true", help="continue the study: keep finished trials, re-run interrupted ones")
    p.add_argument("--lr-find", metavar="FILE", help="a saved lr_find.json instead of running the range test")
    p.add_argument("--probe", metavar="FILE", help="a saved probe.json instead of running the probe")
    p.add_argument("--memory-budget", metavar="SIZE", help="memory budget of the probe (e.g. 8GiB)")
    p.add_argument("--sampler-seed", type=_seed, metavar="N", help="seed of the sampler (default: --seed)")
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
    _add_artifacts_arg(g)
    _add_run_args(p, "search.json, trials.csv, search.png and study.db")


def _add_worker_args(g: Any) -> None:
    g.add_argument("--grace-period", type=int, metavar="S", help="seconds without a heartbeat after which a worker's "
                   "trial is failed and re-run once (default 60; RDB storages)")
    g.add_argument("--threads", type=int, metavar="N", help="torch threads of this worker (default: the cores divided "
                   "among the study's workers on this machine)")
    g.add_argument("--worker-id", metavar="ID", help="this worker's name, from which its sampler seed comes (default HOST:PID)")


def _add_artifacts_arg(g: Any) -> None:
    g.add_argument("--artifacts", metavar="DIR", help="Optuna artifact store (a folder every machine sees): the probes' "
                   "JSON and plots, and the report's search.png, attached to the study for optuna-dashboard")


EPILOG_WORKER = """examples:
  tunekit study create --storage postgresql://db/tk --study cifar --task my_tasks:cifar --trials 60
  tunekit worker --storage postgresql://db/tk --study cifar          on each machine, as many as you like
  tunekit report --storage postgresql://db/tk --study cifar --out runs/cifar
  tunekit study reap --storage runs/journal.log --study cifar        fail the trials of stopped workers now
"""


def _add_worker_command(sub: Any) -> None:
    p = sub.add_parser("worker", help="join a shared study and run its trials (no probe runs)",
                       description="Join a study created by `tunekit study create` (or a first `tunekit search "
                                   "--storage URL --study NAME`): its settings are the study's, and a flag that "
                                   "disagrees with them is refused.",
                       epilog=EPILOG_WORKER, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--storage", metavar="URL", required=True, help="the study's SQLAlchemy URL or journal file")
    p.add_argument("--study", metavar="NAME", required=True, help="the study's name")
    _add_task_args(p)
    p.add_argument("--trials", type=int, help="must agree with the study's")
    p.add_argument("--budget", metavar="AMOUNT", help="must agree with the study's")
    p.add_argument("--max-steps", type=int, help="must agree with the study's budget")
    p.add_argument("--seed", type=_seed, help="must agree with the study's")
    p.add_argument("--sampler-seed", type=_seed, metavar="N", help="must agree with the study's")
    p.add_argument("--device", default="auto", help="cpu, cuda, cuda:N or auto (default)")
    p.add_argument("--timeout", type=_positive_float, default=1800, metavar="S",
                   help="how long to wait for the study's creator to store its settings (default 1800)")
    _add_worker_args(p)
    p.add_argument("--out", metavar="DIR", help="also write this worker's snapshot of the study there (default: none; "
                   "tunekit report --storage URL --study NAME reports the whole study)")
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    p.set_defaults(func=cmd_worker)


def _add_serve_command(sub: Any) -> None:
    p = sub.add_parser("serve", help="serve a study's database to workers (Optuna's gRPC storage proxy)",
                       description="Run Optuna's gRPC storage proxy in front of a database; workers use "
                                   "--storage grpc://HOST:PORT. It listens on 127.0.0.1 unless --host says otherwise, "
                                   "and has no authentication or encryption: see the README before exposing it.",
                       epilog="examples:\n  tunekit serve --storage postgresql://db/tk --port 13000 --dashboard-port 8080\n",
                       formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--storage", metavar="URL", required=True, help="the database (postgresql://..., sqlite:///...)")
    p.add_argument("--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1: this machine only)")
    p.add_argument("--port", type=int, default=13000, help="gRPC port (default 13000)")
    p.add_argument("--dashboard-port", type=int, metavar="PORT", help="also serve optuna-dashboard on this port")
    _add_artifacts_arg(p)
    p.set_defaults(func=cmd_serve)


def _add_dashboard_command(sub: Any) -> None:
    p = sub.add_parser("dashboard", help="optuna-dashboard on a search's study (pip install 'tunekit[dashboard]')",
                       epilog="examples:\n  tunekit dashboard tunekit_runs\n  tunekit dashboard postgresql://db/tk --port 8080\n",
                       formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("target", metavar="DIR|URL", help="a directory written by tunekit search, a storage URL or a journal file")
    p.add_argument("--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1)")
    p.add_argument("--port", type=int, default=8080, help="HTTP port (default 8080)")
    _add_artifacts_arg(p)
    p.set_defaults(func=cmd_dashboard)


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


def _add_study_command(sub: Any) -> None:
    p = sub.add_parser("study", help="create a shared study, or reap its stopped workers",
                       epilog=EPILOG_WORKER, formatter_class=argparse.RawDescriptionHelpFormatter)
    ss = p.add_subparsers(dest="study_command", metavar="ACTION", parser_class=_Parser, required=True)
    c = ss.add_parser("create", help="run the probes once and store what every worker must agree on",
                      description="A search that runs no trial: the probes, the plan, the seed trial and the study's "
                                  "spec go into --storage; then start workers with tunekit worker.")
    _add_search_flags(c)
    c.set_defaults(func=cmd_study_create, usage=c.format_usage)
    r = ss.add_parser("reap", help="fail the trials of stopped workers now, and queue their re-runs",
                      description="Fail the RUNNING trials whose worker stopped: a stale heartbeat (RDB), a process "
                                  "of this machine that is gone, or a --worker named; each is re-run once.")
    r.add_argument("--storage", metavar="URL", required=True, help="the study's SQLAlchemy URL or journal file")
    r.add_argument("--study", metavar="NAME", required=True, help="the study's name")
    r.add_argument("--worker", action="append", metavar="HOST:PID", help="a worker known to have stopped (repeatable)")
    r.add_argument("--grace-period", type=int, metavar="S", help="heartbeat grace period (default 60)")
    r.set_defaults(func=cmd_study_reap, usage=r.format_usage)


def _add_report_command(sub: Any) -> None:
    p = sub.add_parser("report", help="redraw a search's table and plots from DIR/search.json, or report a whole study",
                       epilog="examples:\n  tunekit report tunekit_runs\n"
                              "  tunekit report --storage postgresql://db/tk --study cifar --out runs/cifar\n",
                       formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("dir", metavar="DIR", nargs="?", help="a directory written by tunekit search")
    p.add_argument("--storage", metavar="URL", help="report the whole study in this storage instead (with --study)")
    p.add_argument("--study", metavar="NAME", help="the study's name (with --storage)")
    p.add_argument("--out", metavar="DIR", help="where the study's report goes (default: DIR, else tunekit_runs)")
    _add_artifacts_arg(p)
    p.set_defaults(func=cmd_report)


def _add_spaces_command(sub: Any) -> None:
    p = sub.add_parser("spaces", help="list the shipped search spaces, or show one",
                       epilog="examples:\n  tunekit spaces\n  tunekit spaces from_scratch\n  tunekit spaces my_space.toml\n",
                       formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("name", nargs="?", metavar="NAME", help="a shipped space or a .toml file: show its entries and its file")
    p.set_defaults(func=cmd_spaces)


def _add_train_command(sub: Any) -> None:
    p = sub.add_parser("train", help="train a task with warmup + decay through the shared step",
                       description="Train a fresh model of a task through tunekit's shared training step and print its curve.",
                       epilog=EPILOG_TRAIN, formatter_class=argparse.RawDescriptionHelpFormatter)
    _add_task_args(p)
    p.add_argument("--lr", type=_positive_float, help="peak learning rate (default: the task's, else 1e-3)")
    p.add_argument("--steps", type=int, dest="max_steps", help="optimizer updates (default: the task's, else 200)")
    p.add_argument("--batch-size", type=int, help="micro-batch size (default: the task's)")
    p.add_argument("--accumulation-steps", type=int, help="micro-batches per optimizer update (default 1)")
    p.add_argument("--warmup", type=_warmup, help="warmup: a fraction of the run (0.05) or updates (20); default 0.05")
    p.add_argument("--schedule", choices=["cosine", "linear", "constant"], help="decay after warmup (default cosine)")
    p.add_argument("--min-lr-ratio", type=float, help="final LR as a fraction of the peak (default 0.1)")
    p.add_argument("--clip", type=_clip, dest="clip_grad_norm", help="clip the global grad norm at this value; 'none' to disable (default: the task's, else 1.0)")
    p.add_argument("--weight-decay", type=float, help="override the optimizer's weight decay")
    p.add_argument("--precision", choices=["fp32", "bf16", "fp16"], help="fp32, bf16 autocast, or fp16 with a GradScaler (default: the task's)")
    p.add_argument("--device", default="auto", help="cpu, cuda, cuda:N or auto (default)")
    p.add_argument("--seed", type=_seed, default=0, help="seed of the model's weights and the data order (default 0)")
    p.add_argument("--eval-every", type=int, help="evaluate on validation data every N updates")
    p.add_argument("--config", metavar="SEARCH_JSON", help="re-run a search's trial exactly: DIR/search.json (its best "
                   "trial, or --trial N); other settings are refused")
    p.add_argument("--trial", type=int, metavar="N", help="with --config: the trial to re-run (default: the best)")
    p.add_argument("--out", metavar="DIR", default="tunekit_runs",
                   help="where to write train.json and train.png (default tunekit_runs)")
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    p.set_defaults(func=cmd_train)


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="tunekit",
        description="Find the learning rate, batch size and training recipe before you spend GPU-hours on a sweep.",
        epilog=EPILOG_MAIN,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    from tunekit.version import __version__

    parser.add_argument("--version", action="version", version=f"tunekit {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    _add_tasks_command(sub)
    _add_lr_find_command(sub)
    _add_probe_command(sub)
    _add_doctor_command(sub)
    _add_search_command(sub)
    _add_worker_command(sub)
    _add_study_command(sub)
    _add_serve_command(sub)
    _add_dashboard_command(sub)
    _add_report_command(sub)
    _add_spaces_command(sub)
    _add_train_command(sub)
    for command in sub.choices.values():  # to say an API error's hints as this command's flags
        command.set_defaults(usage=command.format_usage)
    return parser


def cmd_tasks(args: argparse.Namespace) -> int:
    from tunekit.builtin import DEFAULT_TASK
    from tunekit.inputs.task_spec import list_tasks

    tasks = list_tasks()
    width = max(map(len, tasks))
    for name, desc in tasks.items():
        mark = " (default)" if name == DEFAULT_TASK else ""
        print(f"{name:<{width}}  {desc}{mark}")
    return 0


def _load(args: argparse.Namespace) -> Any:
    from tunekit.builtin import DEFAULT_TASK
    from tunekit.inputs.task_spec import load_task

    return load_task(args.task or DEFAULT_TASK, _task_config(args.task_config))


# Output folders this process created: a command that fails leaves none of them behind empty.
_CREATED: list[Path] = []


def _out_dir(path: str | None) -> Path | None:
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
    for out in reversed(_CREATED):
        try:
            out.rmdir()  # only an empty folder: anything written there stays
        except OSError:
            pass


def cmd_lr_find(args: argparse.Namespace) -> int:
    from tunekit.probes.range_test import lr_find
    from tunekit.plotting import save_plot

    out = _out_dir(args.out)
    task = _load(args)
    from tunekit.probes.range_test import TASK_DEFAULT
    clip = TASK_DEFAULT if args.clip_grad_norm is None else None if args.clip_grad_norm == "none" else args.clip_grad_norm
    result = lr_find(task, min_lr=args.min_lr, max_lr=args.max_lr, steps=args.steps, mode=args.mode,
                     batch_size=args.batch_size, accumulation_steps=args.accumulation_steps,
                     precision=args.precision, clip_grad_norm=clip, repeats=args.repeats, seed=args.seed,
                     refine=not args.no_refine, refine_steps=args.refine_steps, refine_seeds=args.refine_seeds,
                     device=args.device,
                     progress=not args.quiet)
    print(result.table())
    if result.suggestion is None:
        print("no suggestion: " + "; ".join(result.reasons))
    else:
        spread = ""
        if result.lr_range is not None:
            spread = f" (range over {args.repeats} repeats: {result.lr_range[0]:.3g} .. {result.lr_range[1]:.3g})"
        ref = result.refinement
        how = (f"best of {len(ref['lrs'])} LRs, {args.refine_seeds} short runs of {args.refine_steps} updates each"
               if ref is not None
               else f"{result.default_rule} rule")
        print(f"suggested peak LR: {result.suggestion:.3g}{spread}  [{how}, confidence {result.confidence:.2f}]")
        if not result.confident:
            print("LOW CONFIDENCE, do not trust this number blindly: " + "; ".join(result.reasons))
    stop = f", stopped at lr {result.diverged_at_lr:.3g} (diverged)" if result.diverged_at_lr else ""
    runs = f" over {args.repeats} runs ({len(result.losses)} updates in the first)" if args.repeats > 1 else \
        f" ({len(result.losses)} updates)"
    if result.refinement is not None:
        n = len(result.refinement["lrs"])
        runs = runs[:-1] + (f", then {n} LRs x {args.refine_seeds} short runs of {args.refine_steps}: "
                            f"{result.refinement['samples']} samples)")
    print(f"{result.samples} samples{runs} in {result.seconds:.1f}s{stop}")
    assert out is not None
    result.to_json(out / "lr_find.json")
    save_plot(result.plot, str(out / "lr_find.png"))
    print(f"wrote {out / 'lr_find.json'} and {out / 'lr_find.png'}")
    return 0


def cmd_probe(args: argparse.Namespace) -> int:
    from tunekit.plotting import save_plot
    from tunekit.probes.batch_probe import probe

    out = _out_dir(args.out)
    if args.memory_budget is not None:
        from tunekit.bytesize import parse_bytes

        parse_bytes(args.memory_budget)  # a bad size fails before the task loads
    task = _load(args)
    result = probe(task, memory_budget=args.memory_budget, headroom=args.headroom, device=args.device,
                   precision=args.precision, accumulation_steps=args.accumulation_steps,
                   target_batch=args.target_batch, lr=args.lr, lr_batch=args.lr_batch, seed=args.seed,
                   progress=not args.quiet)
    print(result.table())
    print(f"probe took {result.seconds:.1f}s")
    assert out is not None
    result.to_json(out / "probe.json")
    save_plot(result.plot, str(out / "probe.png"))
    print(f"wrote {out / 'probe.json'} and {out / 'probe.png'}")
    return 0


def cmd_doctor(args: argparse.Namespace) -> int:
    from tunekit.checks import doctor
    from tunekit.plotting import save_plot

    out = _out_dir(args.out)
    if args.memory_budget is not None:
        from tunekit.bytesize import parse_bytes

        parse_bytes(args.memory_budget)  # a bad size fails before the task loads
    task = _load(args)
    result = doctor(task, batch_size=args.batch_size, accumulation_steps=args.accumulation_steps,
                    precision=args.precision, device=args.device, seed=args.seed, lr=args.lr, warmup=args.warmup,
                    steps=args.steps, memory_budget=args.memory_budget, anomaly=args.anomaly,
                    overfit_floor=args.loss_floor, progress=not args.quiet)
    print(in_cli_terms(result.table(), args.usage()))  # its fixes as this command's flags
    assert out is not None
    result.to_json(out / "doctor.json")
    save_plot(result.plot_overview, str(out / "doctor.png"))
    print(f"wrote {out / 'doctor.json'} and {out / 'doctor.png'}")
    return result.exit_code


def cmd_search(args: argparse.Namespace) -> int:
    from tunekit.hpsearch import search

    out = _out_dir(args.out)
    result = search(args.task or "shapes", args.space, task_config=_task_config(args.task_config) or None,
                    trials=args.trials, budget=args.budget, max_steps=args.max_steps,
                    storage=args.storage, study_name=args.study, resume=args.resume, seed=args.seed,
                    sampler_seed=args.sampler_seed, out=out, lr_find_result=args.lr_find,
                    probe_result=args.probe, backend=args.backend, sampler=args.sampler, prune=not args.no_prune,
                    memory_budget=args.memory_budget, device=args.device, progress=not args.quiet,
                    rungs=args.rungs, first_rung=args.first_rung, reduction_factor=args.reduction_factor,
                    cpus_per_trial=args.cpus_per_trial, gpus_per_trial=args.gpus_per_trial,
                    max_concurrent=args.max_concurrent, max_failures=args.max_failures, address=args.address,
                    storage_path=args.storage_path, grace_period=args.grace_period, threads=args.threads,
                    worker_id=args.worker_id, artifacts=args.artifacts)
    print(result.table())
    print(f"search took {result.seconds:.1f}s; wrote {out}/search.json, trials.csv, search.png; study '{result.study_name}' in {result.storage}")
    if result.best_value is not None:
        print(f"re-run the best trial exactly: tunekit train --config {out}/search.json")
    return 0


def cmd_report(args: argparse.Namespace) -> int:
    from tunekit.results import SearchResult, write_report

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
    write_report(result, Path(args.dir))
    print(result.table())
    print(f"redrew {Path(args.dir) / 'search.png'} and trials.csv")
    return 0


def _report_study(args: argparse.Namespace) -> int:
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


def cmd_study_create(args: argparse.Namespace) -> int:
    from tunekit.hpsearch import create_study

    if not args.storage:
        raise UsageError("tunekit study create needs --storage URL (postgresql://..., sqlite:///..., or a journal file *.log)")
    out = _out_dir(args.out)
    result = create_study(args.task or "shapes", args.space, task_config=_task_config(args.task_config) or None,
                          trials=args.trials, budget=args.budget, max_steps=args.max_steps, storage=args.storage,
                          study_name=args.study, seed=args.seed, sampler_seed=args.sampler_seed, out=out,
                          lr_find_result=args.lr_find, probe_result=args.probe, sampler=args.sampler,
                          prune=not args.no_prune, memory_budget=args.memory_budget, device=args.device,
                          progress=not args.quiet, rungs=args.rungs, first_rung=args.first_rung,
                          reduction_factor=args.reduction_factor, grace_period=args.grace_period,
                          artifacts=args.artifacts)
    print(f"study '{result.study_name}' is ready for {args.trials} trials: on each machine run "
          f"tunekit worker --storage {args.storage} --study {result.study_name}")
    return 0


def cmd_study_reap(args: argparse.Namespace) -> int:
    from tunekit.hpsearch import reap_study

    numbers = reap_study(args.storage, args.study, workers=args.worker, grace_period=args.grace_period)
    print(f"failed {len(numbers)} trial(s) of stopped workers{': ' + ', '.join(map(str, numbers)) if numbers else ''}"
          f"{'; each is re-run once by the next worker' if numbers else ''}")
    return 0


def cmd_spaces(args: argparse.Namespace) -> int:
    from tunekit.inputs.space import list_spaces, load_space, space_path

    if args.name:
        space = load_space(args.name)  # an unknown name or a bad file is one usage line
        print(space.table())
        print(f"file: {space_path(args.name)}")
        return 0
    spaces = list_spaces()
    width = max(map(len, spaces))
    for name, desc in spaces.items():
        print(f"{name:<{width}}  {desc}")
    return 0


def cmd_train(args: argparse.Namespace) -> int:
    from tunekit.plotting import save_plot
    from tunekit.training.loop import train

    out = _out_dir(args.out)
    keys = ("lr", "max_steps", "batch_size", "accumulation_steps", "warmup", "schedule", "min_lr_ratio",
            "weight_decay", "precision", "seed", "eval_every")
    overrides = {k: getattr(args, k) for k in keys if getattr(args, k) is not None and k != "seed"}
    if args.clip_grad_norm is not None:
        overrides["clip_grad_norm"] = None if args.clip_grad_norm == "none" else args.clip_grad_norm
    if args.config:
        task, config, trial = _from_search(args, overrides)
    else:
        if args.trial is not None:
            raise UsageError("--trial goes with --config DIR/search.json: add it, or drop --trial")
        task, config, trial = _load(args), {**overrides, "seed": args.seed, "device": args.device}, None
    result = train(task, config, progress=not args.quiet)
    print(result.table())
    if trial is not None:
        same = "the same" if result.final_loss == trial["value"] else "NOT the same"
        print(f"trial {trial['number']} of the search: value {trial['value']}; this run: {result.final_loss} ({same})")
    if out is not None:
        result.to_json(out / "train.json")
        save_plot(result.plot, str(out / "train.png"))
        print(f"wrote {out / 'train.json'} and {out / 'train.png'}")
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
    parser = build_parser()
    args = parser.parse_args(_join_negative_values(sys.argv[1:] if argv is None else argv))
    if not getattr(args, "command", None):
        parser.print_help()
        return 2
    code = 1
    try:
        code = _run(args)
    except BaseException:
        code = 1
        raise
    finally:
        if code != 0:
            _remove_empty_outputs()  # a failed command leaves no empty --out folder behind
        _CREATED.clear()
    return code


def _run(args: argparse.Namespace) -> int:
    """The command, with its errors said the way the CLI says them."""
    try:
        return int(args.func(args))
    except UsageError as exc:
        print(f"tunekit {args.command}: error: {in_cli_terms(str(exc), args.usage())}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        hint = ""
        if args.command == "search":
            hint = f": what finished is in {args.out}/search.json; go on with the same command and --resume"
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


# API parameters whose flag is not their name with dashes.
_FLAG_OF = {"max_steps": "--steps", "clip_grad_norm": "--clip", "lr_find_result": "--lr-find",
            "probe_result": "--probe", "config": "--set", "task_config": "--set", "overfit_floor": "--loss-floor",
            "prune": "--no-prune"}
_SUBJECT = re.compile(r"^([a-z][a-z0-9_]*)(?=[ :])")
_ASSIGNMENT = re.compile(r"(?<![\w./-])([a-z][a-z0-9_]*)=([^\s,;)]+)")


def in_cli_terms(message: str, usage: str) -> str:
    """An API message said as the command's flags: its ``name=value`` hints as ``--name value``,
    and its subject (``max_steps must be ...``) as the flag it came from.

    The library's errors name Python parameters, since most of its callers are notebooks;
    only the parameters that the command has a flag for are rewritten.
    """
    def option(name: str) -> str | None:
        options = ["--" + name.replace("_", "-"), _FLAG_OF.get(name, "")]
        return next((o for o in options if o and re.search(re.escape(o) + r"(?![\w-])", usage)), None)

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

    return _SUBJECT.sub(subject, _ASSIGNMENT.sub(assignment, message), count=1)


def _user_frames(exc: BaseException) -> list[traceback.FrameSummary]:
    """The traceback from its first frame in the user's code (neither tunekit's nor an installed
    library's nor Python's own) on; empty when the error came from none."""
    import sysconfig

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


if __name__ == "__main__":
    sys.exit(main())
