"""The local backend: trials one after another in this process, through ``study.optimize``.

``study.optimize`` (rather than ask and tell) keeps the storage's heartbeats
going, so on a shared database a worker that dies has its trial re-run by another.
"""

from __future__ import annotations

# Imported where used, not at the top: optuna; importing this module does not pay for them.
import os
import socket
import time
from collections.abc import Callable
from typing import Any, Optional

from tunekit.errors import SetupError, UsageError
from tunekit.hpsearch.backends.base import Work
from tunekit.hpsearch.keep import settle
from tunekit.hpsearch.keys import SURPLUS, WORKER
from tunekit.hpsearch.plan import Plan
from tunekit.hpsearch.settings import SearchSettings
from tunekit.hpsearch.shared.workers import mark_surplus
from tunekit.hpsearch.study import note_interrupted
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
        run_local(work)


def run_local(work: Work, run: Callable[..., Outcome] = run_trial, poll: float = 0.5) -> None:
    """Run trials until the study holds ``work.target`` finished ones (other workers' included), or until
    ``work.out_of_time()`` says the study has spent its device time.

    One ``study.optimize`` call a trial, so that between trials a shared worker can see
    the study: it stops when the target is reached, waits while the others' running trials
    would reach it (failing those whose worker stopped, and running their re-runs), and
    claims its slot (``work.policy.claim``) before a trial trains. ``run``
    trains one trial (:func:`~tunekit.hpsearch.trial.run_trial`, or the user's own loop's); ``work.keeper``
    keeps the trials' weights, and after each trial the files the study's best makes surplus go."""
    import optuna

    study, policy = work.study, work.policy
    target = work.target  # and the confirmation runs, once queued (work.goal)
    cache: dict[str, Any] = {}
    me = {"host": socket.gethostname(), "pid": os.getpid()}
    current: dict[str, int] = {}

    def claim_and_run(trial: Any) -> float:
        current["number"] = trial.number
        trial.set_user_attr(WORKER, me)
        if not policy.claim(study, trial.number, target):
            mark_surplus(trial, target)
            raise Surplus("surplus")
        return _run_trial(trial, work, cache, run)

    def after(study: Any, trial: Any) -> None:
        settle(study, work.keeper)
        if not trial.user_attrs.get(SURPLUS):
            work.on_end(trial.state.name)

    # A shared worker also reaps stopped workers while it trains (a thread): their trials' re-runs
    # do not wait for its own trial to end.
    with policy.reaping(study, work.store):
        while True:
            policy.reap(study, work.store)
            target = work.goal()
            finished, running = policy.counts(study)
            if finished >= target or work.out_of_time():
                return
            if finished + running >= target:  # the others' trials may finish it; if a worker stopped, we re-run its trial
                time.sleep(poll)
                continue
            try:
                study.optimize(claim_and_run, n_trials=1, catch=(TrialFailed,), callbacks=[after])
            except SetupError:
                note_interrupted(study, [current["number"]])  # once the task is mended, --resume runs it
                raise
            except (optuna.exceptions.UpdateFinishedTrialError, RuntimeError, ValueError):
                # Our trial was failed under us (our heartbeat was late: another worker took us for
                # stopped, and re-runs it); anything else is an error.
                if current.get("number") not in policy.stopped(study):
                    raise


def _run_trial(trial: Any, work: Work, cache: dict[str, Any], run: Callable[..., Outcome]) -> float:
    """One trial of ``work``: its params drawn, its run trained by ``run``, its outcome told to the study."""
    try:
        cfg = work.config(sample_params(trial, work.dists), trial.user_attrs)
    except UsageError as exc:  # a config that cannot run (no micro-batch fits) fails as its own trial
        return conclude(trial, Outcome("FAIL", error=f"{type(exc).__name__}: {exc}"))
    for key, value in start_attrs(cfg).items():
        trial.set_user_attr(key, value)
    try:
        outcome = run(work.task, trial, cfg, prune=work.settings.prune, cache=cache, keeper=work.keeper)
    except KeyboardInterrupt:
        note_interrupted(work.study, [trial.number])  # Optuna fails the trial; --resume runs it again
        raise
    return conclude(trial, outcome)


class Surplus(TrialFailed):
    """A trial that found the study's slots taken: failed before it trains, and not counted."""
