"""What the ``tunekit`` commands' handlers share: the task that --task and --set name, the --out folder
(removed again, if still empty, by a command that fails: :mod:`tunekit.cli_run`), the progress bar's
switch, and how a result is shown and written.
"""

from __future__ import annotations

# Imported where used, not at the top: the task loaders (integrations, builtin): importing this module does not pay for them.
import argparse
import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from tunekit.bytesize import parse_bytes
from tunekit.errors import UsageError, shown
from tunekit.progress import show_progress

__all__ = ["task_config", "progress_of", "out_dir", "load_task_of", "check_size", "show", "print_names", "CREATED",
           "LOADED"]


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


def progress_of(args: argparse.Namespace) -> bool:
    """Whether the command draws its bar: not with --quiet, else where a person is watching (a terminal, not CI)."""
    return show_progress(False if args.quiet else None)


# Output folders this process created: a command that fails leaves none of them behind empty.
CREATED: list[Path] = []


def out_dir(path: str | None) -> Path | None:
    """The --out folder, created (and removed again if the command fails while it is empty); None for none."""
    if path is None:
        return None
    out = Path(path)
    if out.exists() and not out.is_dir():
        raise UsageError(f"--out {path!r} is a file, not a directory: give a directory path")
    CREATED.extend(p for p in reversed([out, *out.parents]) if not p.exists())
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise UsageError(f"--out {path!r} cannot be created ({exc.strerror}): give a writable directory") from None
    return out


LOADED: dict[str, Any] = {}  # what the command's task was made from


def load_task_of(args: argparse.Namespace) -> Any:
    """The task that --task and --set name."""
    from tunekit.builtin import DEFAULT_TASK
    from tunekit.integrations.task_spec import load_task

    if not args.task:  # say which task ran: a first run without --task should not leave that a guess
        print(f"task: {DEFAULT_TASK} (built in; --task SPEC runs yours: tunekit tasks lists the built-in ones)")
    task = load_task(args.task or DEFAULT_TASK, task_config(args.task_config))
    LOADED["origin"] = task.origin  # a task function's Trainer or LightningRun: its errors in its terms
    return task


def check_size(size: str | None) -> None:
    """A bad --memory-budget fails before the task loads, which can take a while."""
    if size is not None:
        parse_bytes(size)


def show(result: Any, out: Path | None, text: str | None = None) -> int:
    """Print what the result says (its summary, else ``text``), write its files into ``out`` and say where;
    the command's exit status."""
    print(result.summary() if text is None else text)
    if out is not None:
        print("wrote " + " and ".join(map(str, result.save(out))))
    return int(result.exit_code)


def print_names(descriptions: dict[str, str]) -> None:
    """One line per name, the descriptions aligned: the lists of tasks and of spaces."""
    width = max(map(len, descriptions))
    for name, desc in descriptions.items():
        print(f"{name:<{width}}  {desc}")
