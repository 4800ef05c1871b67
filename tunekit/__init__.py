"""tunekit: choose the learning rate, batch size and training recipe before the sweep.

Everything the CLI does is a function here that a notebook can call with
objects in hand.

The names below are imported on first use (PEP 562), so ``import tunekit`` and
loading a saved result stay light: torch is imported by the first name that
needs it, never by ``tunekit report`` or ``tunekit.results``. The functions live
in private modules (``tunekit._probe``, ``tunekit._doctor`` ...), so ``tunekit.probe`` is always the
function, whatever was imported before.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from .errors import UsageError

if TYPE_CHECKING:  # what the names are, for type checkers and editors
    from ._doctor import doctor
    from ._lr_find import lr_find
    from ._probe import probe
    from ._search import create_study, join_study, reap_study, search, study_result
    from ._train import TrainConfig, evaluate, train
    from .results import DoctorResult, LRFindResult, ProbeResult, SearchResult, TrainResult
    from .schedule import lr_at, lr_schedule
    from .space import list_spaces, load_space
    from .step import StepOutput, TrainStep
    from .task import Task
    from .task_spec import list_tasks, load_task

# name -> the module that defines it
_LAZY = {
    "Task": ".task", "TrainConfig": "._train", "TrainStep": ".step", "StepOutput": ".step",
    "evaluate": "._train", "train": "._train", "lr_find": "._lr_find", "probe": "._probe", "search": "._search",
    "create_study": "._search", "join_study": "._search", "reap_study": "._search", "study_result": "._search",
    "doctor": "._doctor", "DoctorResult": ".results", "TrainResult": ".results", "LRFindResult": ".results",
    "SearchResult": ".results", "ProbeResult": ".results",
    "list_tasks": ".task_spec", "load_task": ".task_spec", "list_spaces": ".space", "load_space": ".space",
    "lr_at": ".schedule", "lr_schedule": ".schedule",
}

__all__ = ["UsageError", *_LAZY]
__version__ = "0.1.0"


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'tunekit' has no attribute {name!r}")
    value = getattr(importlib.import_module(module, __name__), name)
    globals()[name] = value  # once: later lookups do not come here
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_LAZY))
