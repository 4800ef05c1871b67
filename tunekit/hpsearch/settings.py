"""Every setting of a search, in one frozen object built once from the caller's arguments.

:class:`SearchSettings` is validated once, when it is built. The fields marked ``study`` are what
a shared study keeps in its spec and what a joining worker may repeat (they must agree); the
others say where and how this process runs. :func:`~tunekit.search` takes the fields as its
keyword arguments (a test keeps the two in step), and everything below it takes the object.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional

from tunekit.errors import UsageError, check_int
from tunekit.hpsearch.budget import parse_budget, parse_duration
from tunekit.hpsearch.keep import KEEP
from tunekit.hpsearch.resilient import STORAGE_RETRY
from tunekit.objective import Objective

__all__ = ["SearchSettings", "STUDY_SETTINGS", "JOIN_SETTINGS", "BACKENDS"]

BACKENDS = ("local", "ray")
SAMPLERS = ("tpe", "random")


def _study(default: Any, compared_by: str = "spec") -> Any:
    """A field that defines the study: kept in its spec, compared when a worker joins.

    ``compared_by="plan"``: compared through the plan the setting resolves to (a budget of
    ``2epochs`` and one of ``4000samples`` may be the same budget), not as written."""
    return field(default=default, metadata={"study": compared_by})


@dataclass(frozen=True)
class SearchSettings:
    """The settings of one search (see :func:`tunekit.search` for each)."""

    # --- what the study is: kept in a shared study's spec ---------------------------------
    task_config: Optional[dict[str, Any]] = _study(None)
    trials: int = _study(12)
    budget: Any = _study(None, "plan")
    seed: int = _study(0, "plan")
    sampler: str = _study("tpe")
    sampler_seed: Optional[int] = _study(None)
    prune: bool = _study(True)
    reduction_factor: int = _study(3)
    rungs: Optional[int] = _study(None)
    first_rung: Optional[float] = _study(None)
    seed_trial: bool = _study(True)
    design: Optional[int] = _study(None)
    evals: int = _study(8, "plan")
    # What the trials are compared by: a metric's name (loss, accuracy, perplexity, or one of the
    # task's own metrics) or fn(model, val_data) -> float, and which way is better.
    objective: Any = _study("loss", "plan")
    direction: Optional[str] = _study(None, "plan")
    # ``max_steps=N`` is ``budget="Nupdates"``: folded into ``budget`` when the settings are built.
    max_steps: Optional[int] = None
    # The study's device time (its trials' measured seconds and its probes'), after which no
    # trial starts: 90s, 30min, 2h (seconds once the settings are built). Checked by each
    # worker, so a resume may raise it.
    time_limit: Any = None
    # --- where its results go and what it starts from --------------------------------------
    storage: Optional[str] = None
    study_name: Optional[str] = None
    resume: bool = False
    out: Optional[Path] = None
    lr_find_result: Any = None
    probe_result: Any = None
    memory_budget: Optional[str] = None
    device: str = "auto"
    progress: Optional[bool] = None  # None: a bar where a person is watching (tunekit.progress)
    # Which trials' trained weights are written: the best's (one file, replaced as the best improves),
    # every finished trial's, or none (tunekit.hpsearch.keep).
    keep: str = "best"
    # --- the backend that runs the trials ----------------------------------------------------
    backend: str = "local"
    cpus_per_trial: float = 1
    gpus_per_trial: float = 0
    max_concurrent: Optional[int] = None
    max_failures: int = 0
    address: Optional[str] = None
    storage_path: Optional[str] = None
    ray_init: Optional[dict[str, Any]] = None
    # --- this process as a worker of a shared study -----------------------------------------
    grace_period: Optional[int] = None
    storage_retry: float = STORAGE_RETRY  # seconds a storage that does not answer is retried before this process stops
    worker_id: Optional[str] = None
    threads: Optional[int] = None
    run_trials: bool = True
    join_timeout: float = 1800.0
    artifacts: Optional[str] = None

    def __post_init__(self) -> None:
        self._check()
        # Normalised once, so the spec, the plan and the report all see the same values.
        if self.max_steps is not None:
            object.__setattr__(self, "budget", f"{self.max_steps}updates")
            object.__setattr__(self, "max_steps", None)
        if self.sampler_seed is None:
            object.__setattr__(self, "sampler_seed", self.seed)
        object.__setattr__(self, "time_limit", parse_duration(self.time_limit, "time_limit"))
        object.__setattr__(self, "direction", self.goal.direction)
        if self.out is not None and not isinstance(self.out, Path):
            object.__setattr__(self, "out", Path(self.out))

    @property
    def shared(self) -> bool:
        """Whether the study lives in a storage that other workers may share."""
        return self.storage is not None

    @property
    def goal(self) -> Objective:
        """The objective by name, with its direction."""
        return Objective.of(self.objective, self.direction)

    def study_dict(self) -> dict[str, Any]:
        """The fields that define the study, as its spec keeps them (a callable objective by its name)."""
        return {name: getattr(self, name) for name in STUDY_SETTINGS} | {"objective": self.goal.name}

    def replace(self, **changes: Any) -> "SearchSettings":
        """A copy with ``changes`` (validated again)."""
        return dataclasses.replace(self, **changes)

    # --- validation: every refusal names the value and the fix -----------------------------

    def _check(self) -> None:
        self._check_counts()
        self._check_budget()
        self._check_resources()
        if self.backend not in BACKENDS:
            raise UsageError(f"backend {self.backend!r} is unknown: use local or ray")
        if self.keep not in KEEP:
            raise UsageError(f"keep {self.keep!r} is unknown: use best (the best trial's weights), all (every "
                             "finished trial's) or none")
        if self.sampler not in SAMPLERS:
            raise UsageError(f"sampler {self.sampler!r} is unknown: use tpe or random")
        if self.threads is not None:
            check_int("threads", self.threads, hint="pass e.g. threads=4")
        if isinstance(self.storage_retry, bool) or not isinstance(self.storage_retry, (int, float)) or not self.storage_retry >= 0:
            raise UsageError(f"storage_retry must be seconds >= 0, got {self.storage_retry!r}: pass e.g. storage_retry=60")
        goal = self.goal  # a bad objective or direction fails here
        if self.shared and not isinstance(self.objective, str):
            raise UsageError(f"a shared study's objective must be a name every worker can find, got a function "
                             f"({goal.name}): give the task metrics={{'{goal.name}': fn}} and pass "
                             f"objective='{goal.name}'")

    def _check_counts(self) -> None:
        check_int("trials", self.trials, hint="pass e.g. trials=12")
        check_int("reduction_factor", self.reduction_factor, minimum=2, hint="pass e.g. reduction_factor=3")
        check_int("evals", self.evals, hint="evaluations per trial: pass e.g. evals=8")
        check_int("max_failures", self.max_failures, minimum=0, hint="pass e.g. max_failures=2")
        for name, minimum, example in (("rungs", 0, 2), ("design", 0, 5), ("max_concurrent", 1, 4)):
            value = getattr(self, name)
            if value is not None:
                check_int(name, value, minimum=minimum, hint=f"pass e.g. {name}={example}")

    def _check_budget(self) -> None:
        if self.max_steps is not None:
            if self.budget is not None:
                raise UsageError("give the budget once: budget (e.g. budget=4000samples) or max_steps, not both")
            if isinstance(self.max_steps, bool) or not isinstance(self.max_steps, int) or self.max_steps < 2:
                raise UsageError(f"max_steps must be >= 2, got {self.max_steps!r}: pass e.g. max_steps=200")
        else:
            parse_budget(self.budget)

    def _check_resources(self) -> None:
        cpus, gpus = self.cpus_per_trial, self.gpus_per_trial
        for flag, v in (("cpus_per_trial", cpus), ("gpus_per_trial", gpus)):
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not (v >= 0 and math.isfinite(v)):
                raise UsageError(f"{flag} must be a number >= 0, got {v!r}: pass e.g. {flag}=1")
        if cpus <= 0 and gpus <= 0:
            raise UsageError("a trial needs some resource: pass e.g. cpus_per_trial=1, or gpus_per_trial above 0")
        if gpus > 1 and gpus != int(gpus):
            raise UsageError(f"gpus_per_trial {gpus:g} is above 1 but not whole: use a fraction below 1 or a whole number")
        if self.backend == "local" and (self.address or self.storage_path or gpus or self.max_concurrent
                                        or self.max_failures):
            raise UsageError("address=..., storage_path=..., gpus_per_trial=..., max_concurrent=... and max_failures=... "
                             "apply to the Ray backend: pass backend=ray, or drop them")


# The study's own settings, in the order its spec lists them; a joining worker may repeat these
# (and max_steps, another way to say the budget), and must agree with the study on each.
STUDY_SETTINGS = tuple(f.name for f in dataclasses.fields(SearchSettings) if "study" in f.metadata)
JOIN_SETTINGS = (*STUDY_SETTINGS, "max_steps")
# Compared as written when a worker joins; the others through the plan they resolve to.
SPEC_COMPARED = tuple(f.name for f in dataclasses.fields(SearchSettings) if f.metadata.get("study") == "spec")
