"""The local backend: trials one after another in this process, through ``study.optimize``.

``study.optimize`` (rather than ask and tell) keeps the storage's heartbeats
going, so on a shared database a worker that dies has its trial re-run by another.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ..errors import UsageError
from .plan import TrialConfig
from .study import finished_count, note_interrupted
from .trial import Outcome, TrialFailed, conclude, run_trial, start_attrs

__all__ = ["run_local", "suggest"]


def suggest(trial: Any, dists: dict[str, Any]) -> dict[str, Any]:
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


def run_local(*, study: Any, dists: dict[str, Any], make_config: Callable[[dict[str, Any]], TrialConfig], task: Any,
              target: int, prune: bool, on_end: Callable[[str], None]) -> None:
    """Run trials until the study holds ``target`` finished ones (other workers' included)."""
    cache: dict[str, Any] = {}

    def objective(trial: Any) -> float:
        try:
            cfg = make_config(suggest(trial, dists))
        except UsageError as exc:  # a config that cannot run (no micro-batch fits) fails as its own trial
            return conclude(trial, Outcome("FAIL", error=f"{type(exc).__name__}: {exc}"))
        for key, value in start_attrs(cfg).items():
            trial.set_user_attr(key, value)
        try:
            outcome = run_trial(task, trial, cfg, prune=prune, cache=cache)
        except KeyboardInterrupt:
            note_interrupted(study, [trial.number])  # Optuna fails the trial; --resume runs it again
            raise
        return conclude(trial, outcome)

    def after(study: Any, trial: Any) -> None:
        on_end(trial.state.name)
        if finished_count(study) >= target:
            study.stop()

    remaining = target - finished_count(study)
    if remaining > 0:
        study.optimize(objective, n_trials=remaining, catch=(TrialFailed,), callbacks=[after])
