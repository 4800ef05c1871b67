"""What a search optimises: a metric of each evaluation, by name, and its direction.

Built in: ``loss`` (the validation loss, minimised), ``accuracy`` (where the outputs are class
scores, maximised) and ``perplexity`` (exp of the validation loss, minimised). Any other name
is one of the task's own metrics (:attr:`tunekit.Task.metrics`, ``fn(model, val_data)``), and
needs its direction. The validation loss is recorded beside the objective in every trial.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Iterable, Mapping, Optional, TypeVar

from tunekit.errors import UsageError

__all__ = ["Objective", "DIRECTIONS", "BUILTIN_DIRECTIONS", "objective_name", "objective_of"]

DIRECTIONS = ("minimize", "maximize")
BUILTIN_DIRECTIONS = {"loss": "minimize", "accuracy": "maximize", "perplexity": "minimize"}
T = TypeVar("T")


def objective_name(objective: Any) -> str:
    """The name an objective is known by: its own (a string), or a callable's ``__name__``."""
    if isinstance(objective, str):
        return objective
    name = getattr(objective, "__name__", "")
    return name if name.isidentifier() else "objective"  # a lambda's is '<lambda>'


@dataclass(frozen=True)
class Objective:
    """A metric of each evaluation and whether higher or lower is better.

    ``Objective("accuracy")``, ``Objective("f1", "maximize")`` (a task's metric), or
    ``Objective(fn, "maximize")`` with ``fn(model, val_data) -> float`` (a Task object's search):
    the direction of a built-in metric is known; any other needs it."""

    name: Any = "loss"
    direction: Optional[str] = None
    fn: Any = field(default=None, compare=False, repr=False)  # the metric's function, where it was given as one

    def __post_init__(self) -> None:
        objective = self.name
        if not (isinstance(objective, str) and objective) and not callable(objective):
            raise UsageError(f"objective must be a metric's name or fn(model, val_data) -> float, got {objective!r}: "
                             "pass e.g. objective='accuracy'")
        if callable(objective):
            object.__setattr__(self, "fn", objective)
            object.__setattr__(self, "name", objective_name(objective))
        direction = self.direction
        if direction is None:
            direction = BUILTIN_DIRECTIONS.get(self.name) if self.fn is None else None
            if direction is None:
                raise UsageError(f"objective {self.name!r} is not built in ({', '.join(BUILTIN_DIRECTIONS)}): say which "
                                 f"way is better: pass objective=Objective({self.name!r}, 'maximize') (or 'minimize')")
        if direction not in DIRECTIONS:
            raise UsageError(f"direction must be minimize or maximize, got {direction!r}: pass e.g. "
                             f"Objective({self.name!r}, 'maximize')")
        object.__setattr__(self, "direction", direction)

    @classmethod
    def of(cls, objective: Any, direction: Optional[str] = None) -> "Objective":
        """The objective a search was given (a name, a callable or an Objective) with its direction, checked."""
        if isinstance(objective, Objective):
            return objective if direction is None else cls(objective.fn or objective.name, direction)
        return cls(objective, direction)

    @property
    def sign(self) -> float:
        """+1 when lower is better, -1 when higher is: ``sign * value`` is always to be minimised."""
        return 1.0 if self.direction == "minimize" else -1.0

    def best(self, trials: Iterable[T]) -> Optional[T]:
        """The best complete trial of ``trials`` by this direction (the first of equals), or None before one
        completed. A trial is Optuna's (``.state``, ``.value``) or a dict as search.json holds it."""
        done = [(value, t) for t in trials for value in [_complete_value(t)] if value is not None]
        return min(done, key=lambda d: self.sign * d[0])[1] if done else None

    @classmethod
    def of_direction(cls, direction: Any) -> "Objective":
        """An objective that knows only its direction (``"minimize"``, ``"maximize"``, or Optuna's
        ``StudyDirection``): what ranking trials by value needs."""
        name = getattr(direction, "name", direction)
        return cls("loss", str(name).lower())

    @property
    def label(self) -> str:
        """The objective as plots and dashboards name it."""
        return "validation loss" if self.name == "loss" else f"validation {self.name}"

    def value(self, metrics: Mapping[str, float]) -> float:
        """The objective in one evaluation's metrics."""
        if self.name == "perplexity":
            return math.exp(min(float(metrics["loss"]), 700.0))  # exp overflows past 709
        if self.name not in metrics:
            raise UsageError(self.missing(metrics))
        return float(metrics[self.name])

    def missing(self, metrics: Mapping[str, float]) -> str:
        """Why an evaluation has no value of this objective, and the fix."""
        if self.name == "accuracy":
            return ("objective 'accuracy' needs class scores: the model's outputs are not of shape "
                    "targets.shape + (classes,) with integer targets; use objective='loss', or give the task a "
                    "metric of its own (Task(metrics={'name': fn}))")
        return (f"objective {self.name!r} is not a metric of this task (it has {', '.join(sorted(metrics))}): "
                f"give the task metrics={{{self.name!r}: fn}} with fn(model, val_data) -> float, or name one of those")


def objective_of(record: Any) -> Objective:
    """The :class:`Objective` a stored record names by its string fields ``objective`` and ``direction``
    (a search's :class:`~tunekit.hpsearch.plan.Plan`, a trial's ``TrialConfig``, a ``SearchResult``): the
    records keep the strings they save, and this is the one way their objective is built."""
    return Objective(record.objective, record.direction)


def _complete_value(trial: Any) -> Optional[float]:
    """A complete trial's value (None for any other trial, or one without a value)."""
    if isinstance(trial, Mapping):
        state, value = trial.get("state"), trial.get("value")
    else:
        state, value = getattr(getattr(trial, "state", None), "name", None), getattr(trial, "value", None)
    return float(value) if state == "COMPLETE" and value is not None else None
