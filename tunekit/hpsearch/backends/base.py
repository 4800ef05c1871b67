"""The seam between the search and the backends that run its trials.

A backend gets a :class:`Work`: the study, its space, the plan that turns a trial's params
into a run, how many finished trials the study should hold, and the study's policy (a shared
study's slots and stopped workers, or none). It runs trials until the
study holds them (or, under a device-time limit, until ``work.out_of_time()``: then no trial
starts), each through :mod:`tunekit.hpsearch.trial` (the one trial path), and calls
``work.on_end`` as each ends. The search never asks which backend it has.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Optional, Protocol

from tunekit.hpsearch.confirm import seed_of
from tunekit.hpsearch.confirm_runs import goal, queue_confirmations
from tunekit.hpsearch.keep import Keeper
from tunekit.hpsearch.plan import Plan, TrialConfig, trial_config
from tunekit.hpsearch.settings import SearchSettings
from tunekit.hpsearch.shared.policy import StudyPolicy
from tunekit.hpsearch.study import device_seconds

__all__ = ["Backend", "Work", "get_backend"]


@dataclass(frozen=True)
class Work:
    """What a backend runs: ``study``'s trials until it holds ``target`` finished ones, and then the
    confirmation runs of its best (:meth:`goal`)."""

    study: Any
    dists: dict[str, Any]
    plan: Plan
    task: Any  # a task spec (each worker builds it) or a Task object
    target: int
    settings: SearchSettings
    store: Any  # the study's storage: a shared study's workers read each other's trials there
    on_end: Callable[[str], None]  # called with a trial's final state (COMPLETE, PRUNED, FAIL)
    policy: StudyPolicy  # one process's study or a shared one: slots, reaping, counts (never asked which)
    keeper: Optional[Keeper] = None  # which trials' weights are kept, and where (None: none)

    def config(self, params: dict[str, Any], attrs: Optional[dict[str, Any]] = None) -> TrialConfig:
        """The run of a trial with these params (``attrs``: its user attributes; a confirmation run's seed is its own)."""
        return trial_config(self.plan, params, seed=seed_of(self.plan.seed, attrs))

    def goal(self) -> int:
        """The finished trials the study should hold now: ``target``, and the confirmation runs once queued
        (they are queued here, once the ``target`` trials are done and the settings ask for them)."""
        queue_confirmations(self.study, self.settings.confirm, self.target)
        return goal(self.study, self.target)

    def out_of_time(self) -> bool:
        """Whether the study has spent its device-time limit: then no trial starts (those running finish)."""
        limit = self.settings.study.time_limit
        return limit is not None and device_seconds(self.study) >= limit


class Backend(Protocol):
    """Runs a search's trials. One instance per search."""

    # Whether this process's trials run at once: the sampler then lies about the running ones
    # (constant_liar), so that no two propose the same point.
    concurrent: bool

    def check(self, settings: SearchSettings) -> None:
        """Refuse, in one line, settings this backend cannot honour: before any probe runs."""

    def check_plan(self, settings: SearchSettings, plan: Plan, dists: dict[str, Any], probe: Optional[Any]) -> None:
        """Refuse a plan this backend cannot run (e.g. trials packed on a GPU that cannot hold them),
        before any trial is queued."""

    def run(self, work: Work) -> None:
        """Run trials until ``work.study`` holds ``work.target`` finished ones (Ctrl-C propagates)."""


# name -> "module:class"; imported on use, so the local backend never imports Ray.
_BACKENDS = {"local": "tunekit.hpsearch.backends.local:LocalBackend",
             "ray": "tunekit.hpsearch.backends.ray.backend:RayBackend"}


def get_backend(name: str) -> Backend:
    """The backend called ``name`` (settings were validated: it is one of them)."""
    module, cls = _BACKENDS[name].split(":")
    backend: Backend = getattr(importlib.import_module(module), cls)()
    return backend
