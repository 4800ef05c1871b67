"""The local backend: trials one after another in this process, through ``study.optimize``.

``study.optimize`` (rather than ask and tell) keeps the storage's heartbeats
going, so on a shared database a worker that dies has its trial re-run by another.
"""

from __future__ import annotations

# Imported where used, not at the top: optuna; importing this module does not pay for them.
import contextlib
import os
import socket
import time
from collections.abc import Callable
from typing import Any, Optional

from tunekit.errors import SetupError, UsageError
from tunekit.hpsearch.backends.base import Work
from tunekit.hpsearch.keep import Keeper, settle
from tunekit.hpsearch.keys import SURPLUS, WORKER
from tunekit.hpsearch.plan import Plan, TrialConfig
from tunekit.hpsearch.settings import SearchSettings
from tunekit.hpsearch.shared.workers import claim, counts, mark_surplus, reap_every, reap_stopped, reaping
from tunekit.hpsearch.study import finished_count, note_interrupted, stopped
from tunekit.hpsearch.trial import Outcome, TrialFailed, conclude, run_trial, start_attrs

__all__ = ["LocalBackend", "sample_params"]


def sample_params(trial: Any, dists: dict[str, Any]) -> dict[str, Any]:
    """The trial's params, drawn by the study's sampler (or taken from an enqueued trial)."""
    import optuna.distributions as d

    params: dict[str, Any] = {}
    for name, dist in dists.items():
        if isinstance(dist, d.FloatDistribution):
            params[name] = trial.suggest_float(name, dist.low, dist.high, log=dist.log)
        elif isinstance(dist, d.IntDistribution):
            params[name] = trial.suggest_int(name, dist.low, dist.high, log=dist.log, step=dist.step)
        else:
            params[name] = trial.suggest_categorical(name, dist.choices)
    return params


class LocalBackend:
    """Trials one after another in this process (see the module's docstring)."""

    concurrent = False  # one trial at a time

    def check(self, settings: SearchSettings) -> None:
        """Nothing to refuse: the settings' own checks cover this backend."""

    def check_plan(self, settings: SearchSettings, plan: Plan, dists: dict[str, Any], probe: Optional[Any]) -> None:
        """Nothing to refuse: one trial at a time fits where the probe said it fits."""

    def run(self, work: Work) -> None:
        run_local(work.study, work.dists, work.config, work.task, work.target, prune=work.settings.prune,
                  on_end=work.on_end, store=work.store, shared=work.settings.shared, out_of_time=work.out_of_time,
                  keeper=work.keeper)


def run_local(study: Any, dists: dict[str, Any], make_config: Callable[[dict[str, Any]], TrialConfig], task: Any,
              target: int, *, prune: bool, on_end: Callable[[str], None], store: Any = None, shared: bool = False,
              poll: float = 0.5, out_of_time: Callable[[], bool] = lambda: False,
              run: Callable[..., Outcome] = run_trial, keeper: Optional[Keeper] = None) -> None:
    """Run trials until the study holds ``target`` finished ones (other workers' included), or until
    ``out_of_time()`` says the study has spent its device time.

    One ``study.optimize`` call a trial, so that between trials a shared worker can see
    the study: it stops when the target is reached, waits while the others' running trials
    would reach it (failing those whose worker stopped, and running their re-runs), and
    claims its slot (:func:`~tunekit.hpsearch.shared.workers.claim`) before a trial trains. ``run``
    trains one trial (:func:`~tunekit.hpsearch.trial.run_trial`, or the user's own loop's); ``keeper``
    keeps the trials' weights, and after each trial the files the study's best makes surplus go."""
    import optuna

    cache: dict[str, Any] = {}
    me = {"host": socket.gethostname(), "pid": os.getpid()}
    current: dict[str, int] = {}

    def objective(trial: Any) -> float:
        current["number"] = trial.number
        trial.set_user_attr(WORKER, me)
        if shared and not claim(study, trial.number, target):
            mark_surplus(trial, target)
            raise Surplus("surplus")
        return _objective(trial, study, dists, make_config, task, prune, cache, run, keeper)

    def after(study: Any, trial: Any) -> None:
        settle(study, keeper)
        if not trial.user_attrs.get(SURPLUS):
            on_end(trial.state.name)

    # A shared worker also reaps stopped workers while it trains (a thread): their trials' re-runs
    # do not wait for its own trial to end.
    with reaping(study, store, reap_every(store)) if shared else contextlib.nullcontext():
        while True:
            if shared:
                reap_stopped(study, store)
            finished, running = counts(study) if shared else (finished_count(study), 0)
            if finished >= target or out_of_time():
                return
            if finished + running >= target:  # the others' trials may finish it; if a worker stopped, we re-run its trial
                time.sleep(poll)
                continue
            try:
                study.optimize(objective, n_trials=1, catch=(TrialFailed,), callbacks=[after])
            except SetupError:
                note_interrupted(study, [current["number"]])  # once the task is mended, --resume runs it
                raise
            except (optuna.exceptions.UpdateFinishedTrialError, RuntimeError, ValueError):
                # Our trial was failed under us (our heartbeat was late: another worker took us for
                # stopped, and re-runs it); anything else is an error.
                if not shared or current.get("number") not in stopped(study):
                    raise


def _objective(trial: Any, study: Any, dists: dict[str, Any], make_config: Callable[[dict[str, Any]], TrialConfig],
               task: Any, prune: bool, cache: dict[str, Any], run: Callable[..., Outcome] = run_trial,
               keeper: Optional[Keeper] = None) -> float:
    try:
        cfg = make_config(sample_params(trial, dists))
    except UsageError as exc:  # a config that cannot run (no micro-batch fits) fails as its own trial
        return conclude(trial, Outcome("FAIL", error=f"{type(exc).__name__}: {exc}"))
    for key, value in start_attrs(cfg).items():
        trial.set_user_attr(key, value)
    try:
        outcome = run(task, trial, cfg, prune=prune, cache=cache, keeper=keeper)
    except KeyboardInterrupt:
        note_interrupted(study, [trial.number])  # Optuna fails the trial; --resume runs it again
        raise
    return conclude(trial, outcome)


class Surplus(TrialFailed):
    """A trial that found the study's slots taken: failed before it trains, and not counted."""
