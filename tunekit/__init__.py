"""tunekit: choose the learning rate, batch size and training recipe before the sweep.

Everything the CLI does is a function here that a notebook can call with
objects in hand.

The names below are imported on first use (PEP 562), so ``import tunekit`` and
loading a saved result stay light: torch is imported by the first name that
needs it, never by ``tunekit report`` or ``tunekit.results``. No module under
``tunekit`` is named after one of these functions (the probe lives in ``tunekit.probes.batch_probe``,
the search in ``tunekit.hpsearch``), so ``tunekit.probe`` is always the function, whatever was
imported before.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from tunekit.errors import NoTrialSucceeded, UsageError

if TYPE_CHECKING:  # what the names are, for type checkers and editors
    from tunekit.checks import doctor
    from tunekit.probes.range_test import lr_find
    from tunekit.probes.batch_probe import probe
    from tunekit.hpsearch import create_study, join_study, reap_study, search, search_own, study_result
    from tunekit.training.loop import TrainConfig, evaluate, train
    from tunekit.results import DoctorResult, LRFindResult, ProbeResult, SearchResult, TrainResult
    from tunekit.training.schedule import lr_at, lr_schedule
    from tunekit.inputs.space import list_spaces, load_space
    from tunekit.training.step import StepOutput, TrainStep
    from tunekit.inputs.task import Task
    from tunekit.integrations.task_spec import TaskSpec, list_tasks, load_task
    from tunekit.hpsearch.options import (TPE, Confirm, Halving, Local, NoPruning, ProbeSettings, RandomSampler, Ray,
                                          SharedStudy, Study)
    from tunekit.objective import Objective
    from tunekit.entry_options import BatchTarget, DoctorChecks, Measurement, PlannedRun, Refine, StepSettings, Sweep

# name -> the module that defines it
_LAZY = {
    "Task": "tunekit.inputs.task", "TrainConfig": "tunekit.training.loop", "TrainStep": "tunekit.training.step",
    "StepOutput": "tunekit.training.step", "evaluate": "tunekit.training.loop", "train": "tunekit.training.loop",
    "lr_find": "tunekit.probes.range_test", "probe": "tunekit.probes.batch_probe", "doctor": "tunekit.checks",
    "search": "tunekit.hpsearch", "create_study": "tunekit.hpsearch", "join_study": "tunekit.hpsearch",
    "reap_study": "tunekit.hpsearch", "study_result": "tunekit.hpsearch", "search_own": "tunekit.hpsearch",
    "DoctorResult": "tunekit.results", "TrainResult": "tunekit.results", "LRFindResult": "tunekit.results",
    "SearchResult": "tunekit.results", "ProbeResult": "tunekit.results",
    "list_tasks": "tunekit.integrations.task_spec", "load_task": "tunekit.integrations.task_spec",
    "list_spaces": "tunekit.inputs.space", "load_space": "tunekit.inputs.space",
    "lr_at": "tunekit.training.schedule", "lr_schedule": "tunekit.training.schedule",
    "TaskSpec": "tunekit.integrations.task_spec", "Objective": "tunekit.objective",
    # the search's objects, one per concept
    **{name: "tunekit.hpsearch.options" for name in ("TPE", "RandomSampler", "Halving", "NoPruning", "Local", "Ray",
                                                     "Study", "SharedStudy", "ProbeSettings", "Confirm")},
    # lr_find's, probe's and doctor's objects
    **{name: "tunekit.entry_options" for name in ("Sweep", "Refine", "StepSettings", "Measurement", "BatchTarget",
                                                  "PlannedRun", "DoctorChecks")},
}

__all__ = ["UsageError", "NoTrialSucceeded", *_LAZY]
from tunekit.version import __version__  # noqa: E402  (one place for it)


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'tunekit' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value  # once: later lookups do not come here
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_LAZY))
