"""How the ``tunekit`` parser is built: the argparse types, the flags several commands share, and the
flags generated from an option object's fields (:func:`add_fields`, :func:`add_options`: no list of
names here, so a field added is a flag added).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence
from typing import Any, NoReturn, Optional

from tunekit.errors import deprecated
from tunekit.hpsearch.options import CONCEPTS, cli_fields
from tunekit.option_fields import dest_of, flag_fields, flag_of

__all__ = ["Parser", "FLAGS", "TASK_FORMS", "add_flags", "add_command", "add_run_args", "add_field", "add_fields",
           "add_options", "renamed_flag", "join_negative_values", "RAY_FLAGS", "SHARED_FLAGS", "positive_float",
           "nonnegative_float"]


def bounded_float(bound: str) -> Callable[[str], float]:
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


positive_float, nonnegative_float = bounded_float("> 0"), bounded_float(">= 0")


def warmup_value(text: str) -> int | float:
    """'0.05' is a fraction of the run, '20' a number of updates."""
    try:
        return int(text)
    except ValueError:
        pass
    try:
        return float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is neither a step count (20) nor a fraction (0.05)") from None


def clip_value(text: str) -> float | str:
    """A positive max norm, or "none" for no clipping."""
    if text.lower() in ("none", "off", "0"):
        return "none"
    return positive_float(text)


def seed_value(text: str) -> int:
    """An argparse type: a seed that numpy and torch both take."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None
    if not 0 <= value < 2**62:
        raise argparse.ArgumentTypeError(f"{text!r} must be in [0, 2**62)")
    return value


def join_negative_values(argv: Sequence[str]) -> list[str]:
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


class Parser(argparse.ArgumentParser):
    """argparse, but a usage error is one line and exit status 2."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: error: {message} (see '{self.prog} --help')\n")


# The flags that several commands share, with their argparse settings: a command adds them with
# add_flags(), giving what it says differently (its help, its default) as keywords.
TASK_FORMS = "built-in name, package.module:function or path/to/file.py:function"
FLAGS: dict[str, dict[str, Any]] = {
    "--task": dict(default=None, metavar="SPEC", help=f"{TASK_FORMS} (default: shapes)"),
    "--set": dict(action="append", metavar="KEY=VALUE", dest="task_config",
                  help="task hyperparameter passed to the task function's config (repeatable)"),
    "--device": dict(default="auto", help="cpu, cuda, cuda:N or auto (default)"),
    "--seed": dict(type=seed_value, default=0, help="seed of the model and the data order (default 0)"),
    "--out": dict(metavar="DIR", default="tunekit_runs"), "--quiet": dict(action="store_true", help="no progress bar"),
    "--batch-size": dict(type=int, help="micro-batch size (default: the task's)"),
    "--accumulation-steps": dict(type=int, default=1, help="micro-batches per optimizer update (default 1)"),
    "--precision": dict(choices=["fp32", "bf16", "fp16"], help="fp32, bf16, or fp16 with a GradScaler (default: the task's)"),
    "--lr": dict(type=positive_float), "--warmup": dict(type=warmup_value),
    "--clip": dict(type=clip_value, dest="clip_grad_norm"), "--memory-budget": dict(metavar="SIZE"),
    "--trials": dict(type=int), "--budget": dict(metavar="AMOUNT"),
    "--max-steps": dict(type=int),
    "--storage": dict(metavar="URL"), "--study": dict(metavar="NAME"), "--port": dict(type=int),
    "--keep": dict(choices=["best", "all", "none"], default="best", help="which trials' trained weights to write: the best's "
                   "(one file, replaced as the best improves), all finished ones', or none (default best)"),
    "--artifacts": dict(metavar="DIR", help="Optuna artifact store (a folder every machine sees): the probes' "
                        "JSON and plots, and the report's search.png, attached to the study for optuna-dashboard"),
}


class Renamed(argparse.Action):
    """An old flag kept until its removal release: hidden from --help, and one line on stderr names the new one."""

    def __init__(self, *args: Any, new: str, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.shim = deprecated(self.option_strings[0], f"pass {new}")  # registered: removed in tunekit 0.3.0

    def __call__(self, parser: Any, namespace: Any, values: Any, option_string: Optional[str] = None) -> None:
        print(f"{parser.prog}: note: {self.shim.message(option_string or '')}", file=sys.stderr)
        setattr(namespace, self.dest, values)


def renamed_flag(p: Any, old: str, new: str, **settings: Any) -> None:
    """tunekit 0.1.0's ``old`` as an alias of ``new`` (give its type and dest), said so when used (a shim)."""
    settings.setdefault("dest", new.lstrip("-").replace("-", "_"))
    p.add_argument(old, action=Renamed, new=new, help=argparse.SUPPRESS, default=argparse.SUPPRESS, **settings)


def add_flags(p: Any, *flags: str, **settings: Any) -> None:
    """Add each flag with its shared settings, ``settings`` over them."""
    for flag in flags:
        p.add_argument(flag, **{**FLAGS.get(flag, {}), **settings})


def add_command(sub: Any, name: str, func: Callable[[argparse.Namespace], int] | None, help: str, epilog: str,
             description: str | None = None, task: bool = True) -> argparse.ArgumentParser:
    """A subcommand that runs ``func``, its examples kept as written; with ``task``, --task and --set first."""
    p: argparse.ArgumentParser = sub.add_parser(name, help=help, description=description, epilog=epilog,
                                                formatter_class=argparse.RawDescriptionHelpFormatter)
    if func is not None:  # None: a command of subcommands, each with its own
        p.set_defaults(func=func)
    if task:
        add_flags(p, "--task", "--set")
    return p


def add_run_args(p: Any, writes: str, device: bool = True) -> None:
    """The flags that every probe and search shares (``device=False``: its StepSettings has --device)."""
    add_flags(p, *(("--device",) if device else ()), "--seed")
    add_flags(p, "--out", help=f"where to write {writes} (default tunekit_runs)")
    add_flags(p, "--quiet")


def add_field(p: Any, f: Any) -> None:
    """The flag of one field of an option object, as its metadata says (:func:`tunekit.option_fields.opt`). Its
    default is None, so a flag given can be told from one not: the object's own default stands."""
    kind, settings = f.metadata["kind"], dict(dest=dest_of(f), default=None, help=f.metadata["help"])
    if kind == "bool":
        settings.update(action="store_const", const=f.default is not True)
    else:
        settings.update(type=KINDS[kind], metavar=f.metadata.get("metavar"), choices=f.metadata.get("choices"))
    p.add_argument(flag_of(f), **settings)


def add_fields(p: Any, cls: type, skip: Sequence[str] = ()) -> None:
    """A flag for each field of the option class ``cls`` that the CLI has one for, but those in ``skip``."""
    for f in flag_fields(cls):
        if flag_of(f) not in skip:
            add_field(p, f)


def add_options(p: Any, concept: str, skip: Sequence[str] = (), only: Optional[Sequence[str]] = None) -> None:
    """The flags of a concept's objects (:mod:`tunekit.hpsearch.options`), one per field, generated from
    the fields: no list of names here."""
    seen = set(skip)
    for _cls, f in cli_fields(concept):
        flag = flag_of(f)
        if flag in seen or (only is not None and flag not in only):  # a field of several classes (a study's name, a backend's device): one flag
            continue
        seen.add(flag)
        add_field(p, f)
        if flag == "--heartbeat-grace":  # tunekit 0.1.0's name for it, until 0.3.0
            renamed_flag(p, "--grace-period", flag, dest=dest_of(f), type=int)


def sizes_value(text: str) -> tuple[int, ...]:
    """Batch sizes written 4,8,16."""
    try:
        return tuple(int(part) for part in text.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a list of batch sizes: write e.g. 4,8,16") from None


# How a generated flag parses its value, by its field's kind.
KINDS: dict[str, Callable[[str], Any] | None] = {
    "str": None, "int": int, "count": int, "float": float, "seconds": nonnegative_float, "seed": seed_value,
    "positive": positive_float, "nonnegative": nonnegative_float, "clip": clip_value, "warmup": warmup_value, "sizes": sizes_value}


def only_of(concept: str, kind: str) -> tuple[str, ...]:
    """The flags of ``concept`` that only its class ``kind`` has (the Ray backend's, a shared study's)."""
    cls = CONCEPTS[concept][1][kind]
    others = {flag_of(f) for c, f in cli_fields(concept) if c is not cls}
    return tuple(flag_of(f) for c, f in cli_fields(concept) if c is cls and flag_of(f) not in others)


RAY_FLAGS, SHARED_FLAGS = only_of("backend", "ray"), only_of("study", "shared")
