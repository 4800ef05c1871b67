"""Built-in tasks: small, seeded, downloaded from nowhere.

Each trains meaningfully in seconds on two CPU cores, and its loss depends on
the learning rate: too low learns slowly, too high diverges. They are the
default task of every command and the shared fixtures of the tests and
benchmarks.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from tunekit.inputs.task import Task
from tunekit.builtin._common import optimizer_from_config
from tunekit.builtin.charlm import charlm_task
from tunekit.builtin.shapes import shapes_task

__all__ = ["BUILTIN_TASKS", "DEFAULT_TASK", "builtin_task", "optimizer_from_config"]

# name -> (task function taking the config dict, one-line description)
BUILTIN_TASKS: dict[str, tuple[Callable[[dict[str, Any]], Task], str]] = {
    "shapes": (shapes_task, "CNN classifying 16x16 synthetic images of 10 shape classes (4096 train / 1024 val)"),
    "charlm": (charlm_task, "tiny causal Transformer LM on characters of the Python stdlib's docstrings"),
}
DEFAULT_TASK = "shapes"


def builtin_task(name: str, config: dict[str, Any] | None = None) -> Task:
    fn, _ = BUILTIN_TASKS[name]
    return fn(dict(config or {}))
