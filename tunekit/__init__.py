"""tunekit: choose the learning rate, batch size and recipe before the sweep.

Everything the CLI does is a function here that a notebook can call with
objects in hand.
"""

from __future__ import annotations

from .doctor import DoctorResult, doctor
from .errors import UsageError
from .loading import list_tasks, load_task
from .lr_find import LRFindResult, lr_find
from .probe import ProbeResult, probe
from .search import SearchResult, search
from .space import list_spaces, load_space
from .schedule import lr_at, lr_schedule
from .step import StepOutput, TrainStep
from .task import Task
from .train import TrainConfig, TrainResult, evaluate, train

__all__ = [
    "Task",
    "TrainConfig",
    "TrainResult",
    "TrainStep",
    "StepOutput",
    "UsageError",
    "doctor",
    "DoctorResult",
    "evaluate",
    "list_tasks",
    "LRFindResult",
    "lr_find",
    "ProbeResult",
    "probe",
    "SearchResult",
    "search",
    "list_spaces",
    "load_space",
    "load_task",
    "lr_at",
    "lr_schedule",
    "train",
]
__version__ = "0.1.0"
