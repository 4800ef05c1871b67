"""The study: storage, creation or resume, the sampler, interrupted trials, and reading trials back.

Only Optuna's public API: ``create_study``/``load_study``, ``study.ask``/``study.tell``
(with a trial number for trials another process left running),
``get_all_study_names``, study user attributes for what tunekit keeps beside
the trials (the plan, the distributions, the interrupted trials).
"""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import Any, Optional

from ..errors import UsageError
from .trial import INTERRUPTED

__all__ = ["make_storage", "study_exists", "make_sampler", "open_study", "check_resume", "mark_interrupted",
           "requeue_interrupted", "resume", "trial_dicts", "finished_count", "enqueue", "enqueue_design", "PLAN_KEY",
           "DISTS_KEY"]

PLAN_KEY = "tunekit_plan"
DISTS_KEY = "tunekit_distributions"
INTERRUPTED_KEY = "tunekit_interrupted"
REQUEUED_KEY = "tunekit_requeued"
ENQUEUED_KEY = "tunekit_enqueued"  # a queued trial's params, on the trial
DESIGN_KEY = "tunekit_design_queued"


def make_storage(url: str | None, out: Path | None) -> Any:
    """An Optuna storage: a SQLAlchemy URL, a journal file (*.log, *.jsonl), or SQLite in ``out``."""
    import optuna
    from sqlalchemy.exc import SQLAlchemyError  # Optuna's RDB storage is built on it

    if url is None:
        if out is None:
            return None
        url = f"sqlite:///{(out / 'study.db').resolve()}"
    if "://" not in url:
        if not url.endswith((".log", ".jsonl", ".journal")):
            raise UsageError(f"storage {url!r} is neither a URL (sqlite:///study.db, postgresql://...) nor a journal file (*.log)")
        from optuna.storages.journal import JournalFileBackend

        if not Path(url).resolve().parent.is_dir():
            raise UsageError(f"storage {url!r}: the folder {str(Path(url).parent)!r} does not exist: create it or give another path")
        try:
            return optuna.storages.JournalStorage(JournalFileBackend(url))
        except OSError as exc:
            raise UsageError(f"storage {url!r} cannot be opened ({exc.strerror}): give a writable path") from None
    try:
        with warnings.catch_warnings():  # heartbeats are "experimental" in Optuna's words
            warnings.simplefilter("ignore")
            # Heartbeats let the other workers of a shared study re-run a trial whose process died.
            return optuna.storages.RDBStorage(
                url, heartbeat_interval=10, grace_period=60,
                heartbeat_stale_trial_callback=optuna.storages.RetryHeartbeatStaleTrialCallback(max_retry=1))
    except (ImportError, ValueError) as exc:
        raise UsageError(f"storage {url!r} cannot be opened: {exc}") from None
    except SQLAlchemyError as exc:  # a URL it cannot reach, a database it cannot read
        raise UsageError(f"storage {url!r} cannot be opened: {type(exc).__name__}: {str(exc).splitlines()[0]}") from None


def study_exists(store: Any, name: str) -> bool:
    import optuna

    if store is None:
        return False
    return name in optuna.get_all_study_names(store)


def make_sampler(kind: str, seed: int, startup: int, parallel: bool) -> Any:
    """TPE (its random start-up replaced by ``startup`` enqueued design trials) or random search."""
    import optuna

    if kind == "random":
        return optuna.samplers.RandomSampler(seed=seed)
    with warnings.catch_warnings():  # constant_liar is "experimental" in Optuna's words
        warnings.simplefilter("ignore")
        # With trials running in parallel, constant_liar keeps TPE from proposing
        # the same point to every free worker.
        return optuna.samplers.TPESampler(seed=seed, n_startup_trials=startup, constant_liar=parallel)


def open_study(store: Any, name: str, sampler: Any, pruner: Any) -> Any:
    import optuna

    return optuna.create_study(study_name=name, storage=store, sampler=sampler, pruner=pruner,
                               direction="minimize", load_if_exists=True)


def check_resume(stored: dict[str, Any], plan: dict[str, Any], where: str) -> None:
    """Refuse, in one line, to continue a study under another plan (budget, seed, ...)."""
    for key in ("budget_samples", "seed", "evals", "ref_batch", "lr_rule", "fixed"):
        if key in stored and stored[key] != plan.get(key):
            raise UsageError(f"study {where} was run with {key} = {stored[key]!r}, this run asks for {plan.get(key)!r}: "
                             f"resume with the same settings, or start a new study (another --out or --study)")


def mark_interrupted(study: Any) -> None:
    """Trials this process's storage holds as RUNNING were killed with the process that ran them: fail them,
    and note them as interrupted (a finished trial takes no attributes, so the study keeps the list)."""
    import optuna

    running = study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.RUNNING,))
    if not running:
        return
    for t in running:
        study.tell(t.number, state=optuna.trial.TrialState.FAIL, skip_if_finished=True)
    note_interrupted(study, [t.number for t in running])


def note_interrupted(study: Any, numbers: list[int]) -> None:
    done = set(study.user_attrs.get(INTERRUPTED_KEY, []))
    study.set_user_attr(INTERRUPTED_KEY, sorted(done | set(numbers)))


def resume(study: Any, shared: bool) -> None:
    """Trials that died with their process fail, and the interrupted ones are queued again.

    On our own storage (one process) a RUNNING trial died with the process; on a
    shared one, other workers may be running: only trials whose heartbeat stopped
    are dead (Optuna's retry callback re-enqueues them)."""
    import optuna

    if shared:
        optuna.storages.fail_stale_trials(study)
    else:
        mark_interrupted(study)
    requeue_interrupted(study)


def enqueue(study: Any, params: dict[str, Any]) -> None:
    """Queue a trial with these params, noted on the trial as well: a trial killed between leaving the
    queue and taking its params (Optuna sets them as they are suggested) can still be re-run."""
    study.enqueue_trial(params, user_attrs={ENQUEUED_KEY: params}, skip_if_exists=False)


def enqueue_design(study: Any, points: list[dict[str, Any]]) -> None:
    """The initial design, queued once per study, also when a kill cut the queueing short."""
    if study.user_attrs.get(DESIGN_KEY):
        return
    for params in points:
        study.enqueue_trial(params, user_attrs={ENQUEUED_KEY: params}, skip_if_exists=True)
    study.set_user_attr(DESIGN_KEY, True)


def requeue_interrupted(study: Any) -> None:
    """Interrupted trials (killed, or stopped with Ctrl-C) run again with their params, once each."""
    import optuna

    interrupted = set(study.user_attrs.get(INTERRUPTED_KEY, []))
    requeued = set(study.user_attrs.get(REQUEUED_KEY, []))
    for t in study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.FAIL,)):
        if (t.number in interrupted or t.user_attrs.get("error") == INTERRUPTED) and t.number not in requeued:
            requeued.add(t.number)
            params = t.params or t.user_attrs.get(ENQUEUED_KEY)  # killed before it took its queued params
            if params:  # else killed before the sampler drew any: there is nothing to re-run
                enqueue(study, dict(params))
    study.set_user_attr(REQUEUED_KEY, sorted(requeued))


def _interrupted(study: Any) -> set[int]:
    numbers = set(study.user_attrs.get(INTERRUPTED_KEY, []))
    return numbers | {t.number for t in study.get_trials(deepcopy=False) if t.user_attrs.get("error") == INTERRUPTED}


def finished_count(study: Any) -> int:
    """Finished trials that count toward the requested total (interrupted ones do not)."""
    import optuna

    S = optuna.trial.TrialState
    skip = _interrupted(study)
    return sum(1 for t in study.get_trials(deepcopy=False, states=(S.COMPLETE, S.PRUNED, S.FAIL)) if t.number not in skip)


def trial_dicts(study: Any) -> list[dict[str, Any]]:
    """Every trial that ran (or runs), as search.json holds it."""
    skip = _interrupted(study)
    out = []
    import optuna

    for t in study.get_trials(deepcopy=False):
        if t.state == optuna.trial.TrialState.WAITING:
            continue  # enqueued, never run
        ua = t.user_attrs
        d: dict[str, Any] = {
            "number": t.number, "state": t.state.name, "value": t.value, "params": dict(t.params),
            "config": ua.get("config", {}), "task_config": ua.get("task_config", {}), "curve": ua.get("curve", []),
            "samples": ua.get("samples"),
            "updates": ua.get("updates"), "micro_batch": ua.get("micro_batch"),
            "accumulation_steps": ua.get("accumulation_steps"), "effective_batch": ua.get("effective_batch"),
            "seconds": ua.get("seconds"), "diverged": bool(ua.get("diverged", False)),
            "error": INTERRUPTED if t.number in skip else ua.get("error"),
            "finished": t.datetime_complete.timestamp() if t.datetime_complete else None,
        }
        for extra in ("worker", "attempts"):
            if extra in ua:
                d[extra] = ua[extra]
        out.append(d)
    return out


def stored_plan(store: Any, name: str) -> tuple[dict[str, Any], dict[str, str]]:
    import optuna

    attrs = optuna.load_study(study_name=name, storage=store).user_attrs
    return attrs.get(PLAN_KEY, {}), attrs.get(DISTS_KEY, {})


def keep_plan(study: Any, plan: dict[str, Any], dists: dict[str, Any]) -> None:
    import optuna

    if PLAN_KEY not in study.user_attrs:
        study.set_user_attr(PLAN_KEY, plan)
    if DISTS_KEY not in study.user_attrs:
        study.set_user_attr(DISTS_KEY, {n: optuna.distributions.distribution_to_json(d) for n, d in dists.items()})


def default_name(task_name: str, space_name: str, given: Optional[str]) -> str:
    return given or f"tunekit-{task_name}-{space_name}"
