"""The objects ``doctor`` takes beside the step (:class:`~tunekit.probes.options.StepSettings`): the run it
checks, and how its checks run. Their fields are the only list of these settings: the CLI's flags are
generated from them. This module imports nothing heavy: the CLI reads it to build its parser.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Optional, Union

from tunekit.option_fields import opt

__all__ = ["PlannedRun", "DoctorChecks"]


@dataclass(frozen=True)
class PlannedRun:
    """The run you intend: its peak LR, warmup and updates; unset, a Task's own recipe."""

    lr: Optional[float] = opt(None, "the peak LR you intend, compared with a quick range test (default: the task's)",
                              kind="positive", metavar="LR")
    warmup: Optional[Union[int, float]] = opt(None, "the warmup you intend: a fraction (0.05) or updates (20) "
                                              "(default: the task's)", kind="warmup", metavar="W")
    run_steps: Optional[int] = opt(None, "the updates of the run you intend, for the warmup check (default: the "
                                   "task's)", kind="int", metavar="N")


@dataclass(frozen=True)
class DoctorChecks:
    """How the checks run, and a saved range test to compare the LR with."""

    anomaly: bool = opt(False, "also run the backward under autograd's anomaly mode (slow)", kind="bool")
    overfit_floor: Optional[float] = opt(None, "the lowest loss the tiny batch can reach, for a loss with terms that "
                                         "do not vanish (default 0, or label smoothing's floor)", flag="--loss-floor",
                                         kind="nonnegative", metavar="LOSS")
    lr_find_result: Any = opt(None, "a saved lr_find.json to compare --lr with, instead of the quick range test",
                              flag="--lr-find", metavar="FILE")
