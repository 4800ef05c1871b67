"""A benchmark report that says how it was made: the command, the commit, the machine and its load."""

from __future__ import annotations

import datetime
import os
import shlex
import subprocess
import sys
from pathlib import Path

DATA = Path(__file__).resolve().parent.parent / "data"


def command() -> str:
    """The command line that is running, as a user would type it from the repository's root."""
    argv = list(sys.argv)
    main = sys.modules.get("__main__")
    spec = getattr(main, "__spec__", None)
    if spec is not None and spec.name:  # run with python -m
        return "python -m " + " ".join([spec.name.removesuffix(".__main__"), *map(shlex.quote, argv[1:])])
    return "python " + " ".join(map(shlex.quote, argv))


def commit() -> str:
    try:
        root = Path(__file__).resolve().parents[2]
        sha = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=root, capture_output=True, text=True,
                             timeout=10).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=root,
                               capture_output=True, text=True, timeout=10).stdout.strip()
        return (sha or "unknown") + (" (with uncommitted changes)" if dirty else "")
    except (OSError, subprocess.SubprocessError):
        return "unknown"


def load() -> str:
    try:
        one, five, _ = os.getloadavg()
        return f"load average {one:.2f} (1 min), {five:.2f} (5 min) on {os.cpu_count()} cores"
    except OSError:
        return "load average unknown"


def header(title: str) -> str:
    from benchmarks._common import hardware

    now = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    return "\n".join([f"# {title}", f"command: {command()}", f"commit: {commit()}", f"machine: {hardware()}",
                      f"load at the end: {load()}", f"written: {now}", ""])


def write(name: str, title: str, body: str, quick: bool = False) -> Path:
    """Print the report and write it to benchmarks/data/<name>_report.txt (a quick run to a temporary
    folder's file instead, so it never replaces a full run's report)."""
    text = header(title + (" (quick mode: not a figure to quote)" if quick else "")) + body.rstrip() + "\n"
    print(text)
    if quick:
        import tempfile

        path = Path(tempfile.gettempdir()) / f"tunekit_{name}_quick_report.txt"
    else:
        path = DATA / f"{name}_report.txt"
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(f".tmp{os.getpid()}")
    tmp.write_text(text)
    tmp.replace(path)
    print(f"(report written to {path})")
    return path
