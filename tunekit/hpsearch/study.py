"""The study: storage, creation or resume, the sampler, interrupted trials, and reading trials back.

Only Optuna's public API: ``create_study``/``load_study``, ``study.ask``/``study.tell``
(with a trial number for trials another process left running),
``get_all_study_names``, study user attributes for what tunekit keeps beside
the trials (the plan, the distributions, the interrupted trials).
"""

from __future__ import annotations

# Imported where used, not at the top: grpc, optuna, sqlalchemy; importing this module does not pay for them.
import importlib.util
import json
import re
import time
import warnings
from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any, Optional

from tunekit.errors import UsageError
from tunekit.hpsearch import keys as K
from tunekit.hpsearch.confirm import confirm_key, rerun_attrs
from tunekit.hpsearch.keys import (DESIGN_BATCH_KEY, DESIGN_KEY, DISTS_KEY, ENQUEUED_KEY, ERROR, INTERRUPTED_KEY, PLAN_KEY, REASON,
                                   REQUEUED_KEY, RETRY_OF, STOPPED_PREFIX, SURPLUS)
from tunekit.hpsearch.plan import Plan
from tunekit.hpsearch.resilient import STORAGE_RETRY, retrying_class, stale_reason
from tunekit.hpsearch.trial import INTERRUPTED

__all__ = ["make_storage", "study_exists", "open_study", "check_resume", "mark_interrupted", "fail_trial",
           "stale_reason",
           "requeue_interrupted", "safe_url", "check_report_of", "trial_dicts", "finished_count",
           "device_seconds", "enqueue", "enqueue_design", "excluded", "stopped", "StoredPlan", "read_plan", "read_dists",
           "keep_plan"]



# Heartbeats: a worker's trial whose heartbeat is older than the grace period is failed by
# the others and re-run once. Optuna's default check runs only as a worker starts a trial;
# tunekit's workers also check while they wait (local.py), so a death costs about the grace.
GRACE_PERIOD = 60
GRPC_WAIT = 30.0  # seconds a worker waits for `tunekit serve` to answer
# SQLAlchemy URL schemes and the package each needs (the `postgres` extra installs psycopg).
DRIVERS = {"postgresql": ("psycopg", "tunekit[postgres]"), "postgres": ("psycopg", "tunekit[postgres]"),
           "mysql": ("pymysql", "pymysql")}


def make_storage(url: str | None, out: Path | None, heartbeat_grace: Optional[int] = None,
                 on_stale: Any = None, retry_for: float = STORAGE_RETRY) -> Any:
    """An Optuna storage: a SQLAlchemy URL, a journal file (*.log, *.jsonl), or SQLite in ``out``.

    ``heartbeat_grace``: seconds without a heartbeat after which another worker fails a trial;
    ``on_stale(study, trial)``: what then (a shared study's workers pass theirs:
    :func:`tunekit.hpsearch.shared.workers.open_storage`; None: Optuna's default, the trial failed);
    ``retry_for``: seconds an RDB or gRPC storage that does not answer is retried (:mod:`.resilient`)."""
    if url is None:
        if out is None:
            return None
        url = f"sqlite:///{(out / 'study.db').resolve()}"
    if "://" not in url:
        return _journal(url)
    if url.startswith("grpc://"):
        return _grpc(url, retry_for)
    grace = GRACE_PERIOD if heartbeat_grace is None else heartbeat_grace
    if isinstance(grace, bool) or not isinstance(grace, int) or grace < 2:
        raise UsageError(f"heartbeat_grace must be a whole number of seconds >= 2, got {grace!r}: pass e.g. heartbeat_grace=60")
    return _rdb(_with_driver(url), grace, on_stale, retry_for)


def _journal(url: str) -> Any:
    import optuna
    from optuna.storages.journal import JournalFileBackend

    if not url.endswith((".log", ".jsonl", ".journal")):
        raise UsageError(f"storage {url!r} is neither a URL (sqlite:///study.db, postgresql://...) nor a journal file (*.log)")
    if not Path(url).resolve().parent.is_dir():
        raise UsageError(f"storage {url!r}: the folder {str(Path(url).parent)!r} does not exist: create it or give another path")
    try:
        return optuna.storages.JournalStorage(JournalFileBackend(url))
    except OSError as exc:
        raise UsageError(f"storage {url!r} cannot be opened ({exc.strerror}): give a writable path") from None


def _grpc(url: str, retry_for: float = STORAGE_RETRY) -> Any:
    """A worker's storage through `tunekit serve` (Optuna's gRPC proxy). It keeps no heartbeats:
    a stopped worker is found by its process (same machine) or by `tunekit study reap --worker`."""
    import optuna

    host, _, port = url[len("grpc://"):].rstrip("/").rpartition(":")
    if not host or not port.isdigit():
        raise UsageError(f"storage {url!r} is not grpc://HOST:PORT: write e.g. grpc://127.0.0.1:13000")
    try:
        import grpc  # noqa: F401 - Optuna's proxy client needs it
    except ImportError:
        raise UsageError(f"storage {url!r} needs grpcio: pip install 'tunekit[serve]'") from None
    with warnings.catch_warnings():  # "experimental" in Optuna's words
        warnings.simplefilter("ignore")
        proxy = retrying_class(optuna.storages.GrpcStorageProxy, url)(host=host, port=int(port))
    proxy.retry_for = retry_for
    wait = max(1.0, min(GRPC_WAIT, retry_for))  # a server started just before its workers; no longer than the retries
    try:
        proxy.wait_server_ready(timeout=wait)
    except Exception:  # grpc.FutureTimeoutError: nothing answers there
        raise UsageError(f"no tunekit serve answers at {url} after {wait:.0f}s: start it there, or give its "
                         "HOST:PORT (the storage retry time bounds this wait)") from None
    return proxy


def _with_driver(url: str) -> str:
    """``postgresql://`` with the driver that is installed: SQLAlchemy's default for it is psycopg2,
    but the ``postgres`` extra installs psycopg (3); a missing driver is one line naming the package."""
    scheme, rest = url.split("://", 1)
    if "+" in scheme or scheme not in DRIVERS:
        return url
    if scheme.startswith("postgres"):
        if importlib.util.find_spec("psycopg2") is not None:
            return url
        scheme = "postgresql+psycopg"
    module, package = DRIVERS[url.split("://", 1)[0]]
    if importlib.util.find_spec(module) is None:
        raise UsageError(f"storage {safe_url(url)!r} needs the database driver {module!r}: pip install '{package}'")
    return f"{scheme}://{rest}"


def safe_url(url: str) -> str:
    """The URL without its password, for messages and reports."""
    return re.sub(r"(://[^:/@]*):[^@/]*@", r"\1:***@", url)


def _rdb(url: str, grace: int, on_stale: Any, retry_for: float = STORAGE_RETRY) -> Any:
    import optuna
    from sqlalchemy.exc import IntegrityError, ProgrammingError, SQLAlchemyError  # Optuna's RDB storage is built on it

    for attempt in range(6):
        try:
            with warnings.catch_warnings():  # heartbeats are "experimental" in Optuna's words
                warnings.simplefilter("ignore")
                store = retrying_class(_reasoned_rdb(), safe_url(url))(
                    url, heartbeat_interval=max(1, min(10, grace // 4)), grace_period=grace,
                    heartbeat_stale_trial_callback=on_stale)
                store.retry_for = retry_for
                return store
        except (IntegrityError, ProgrammingError):
            # Workers that start together on a fresh database race to create its tables (PostgreSQL:
            # pg_type_typname_nsp_index); the loser finds them there when it tries again.
            if attempt == 5:
                raise
            time.sleep(0.2 * (attempt + 1))
        except ImportError as exc:
            module = getattr(exc.__cause__, "name", None) or "the database driver"
            raise UsageError(f"storage {safe_url(url)!r} needs {module}: pip install it (for PostgreSQL: pip install "
                             "'tunekit[postgres]')") from None
        except ValueError as exc:
            raise UsageError(f"storage {safe_url(url)!r} cannot be opened: {exc}") from None
        except SQLAlchemyError as exc:  # a URL it cannot reach, a database it cannot read
            raise UsageError(f"storage {safe_url(url)!r} cannot be opened: {type(exc).__name__}: {str(exc).splitlines()[0]}") from None
    raise AssertionError("unreachable")


def _reasoned_rdb() -> type:
    """Optuna's RDB storage, except that a trial failed without a reason (by Optuna's own
    ``fail_stale_trials``, in whichever process starts a trial when another's heartbeat has gone
    stale) first gets one: a finished trial takes no attribute, and dashboards show the trial's."""
    import optuna

    class RDBStorage(optuna.storages.RDBStorage):
        def set_trial_state_values(self, trial_id: int, state: Any, values: Any = None) -> bool:
            if state == optuna.trial.TrialState.FAIL:
                trial = self.get_trial(trial_id)
                if trial.state == optuna.trial.TrialState.RUNNING and REASON not in trial.user_attrs:
                    # Every other path that fails a running trial notes its reason first (fail_trial,
                    # trial.record): only the heartbeat check arrives here without one.
                    self.set_trial_user_attr(trial_id, REASON, stale_reason(trial, self.grace_period))
            return super().set_trial_state_values(trial_id, state, values)

    return RDBStorage


def fail_trial(study: Any, store: Any, number: int, reason: str) -> bool:
    """Fail trial ``number`` (run by another process, or by one that died) with ``reason`` on it, for
    dashboards and reports; True in the one process whose call failed it. Without a storage in hand
    (an in-memory study) the reason cannot go on the trial: it is failed without one."""
    import optuna

    if store is None:
        study.tell(number, state=optuna.trial.TrialState.FAIL, skip_if_finished=True)
        return True
    tid = store.get_trial_id_from_study_id_trial_number(store.get_study_id_from_name(study.study_name), number)
    try:
        store.set_trial_user_attr(tid, REASON, reason)
        return bool(store.set_trial_state_values(tid, state=optuna.trial.TrialState.FAIL))
    except optuna.exceptions.UpdateFinishedTrialError:  # another process (or the trial itself) was first
        return False


def study_exists(store: Any, name: str) -> bool:
    import optuna

    if store is None:
        return False
    return name in optuna.get_all_study_names(store)


def open_study(store: Any, name: str, sampler: Any, pruner: Any, direction: str, stored: StoredPlan,
               dists: dict[str, Any], metric_name: str, design: list[dict[str, Any]],
               design_note: Optional[dict[str, Any]] = None, noted: bool = False) -> Any:
    """The study, created or loaded with this process's sampler and pruner; its plan kept (:func:`keep_plan`)
    and its design queued (:func:`enqueue_design`), once per study. ``noted``: this run made the design,
    whose batch step (``design_note``) the study keeps for the result."""
    import optuna

    study = optuna.create_study(study_name=name, storage=store, sampler=sampler, pruner=pruner,
                                direction=direction, load_if_exists=True)
    keep_plan(study, stored, dists, metric_name)
    if design:
        enqueue_design(study, design)
    if noted:  # said in the result (the study keeps it, for every worker and a resume)
        study.set_user_attr(DESIGN_BATCH_KEY, design_note)
    return study


def check_resume(stored: StoredPlan, plan: Plan, where: str) -> None:
    """Refuse, in one line, to continue a study under another plan (budget, seed, ...)."""
    mine = plan.to_dict()
    for key in ("budget_samples", "budget_seconds", "seed", "evals", "ref_batch", "lr_rule", "fixed", "objective",
                "direction"):
        theirs = getattr(stored.plan, key)
        if stored.holds(key) and theirs != mine.get(key):
            raise UsageError(f"study {where} was run with {key} = {theirs!r}, this run asks for {mine.get(key)!r}: "
                             f"use the same settings (a worker: drop the flag, to take the study's), or start a new study "
                             "(another --out or --study)")


def mark_interrupted(study: Any, store: Any = None) -> None:
    """Trials this process's storage holds as RUNNING were killed with the process that ran them: fail them
    with the reason on each, and note them as interrupted (the study keeps the list, for --resume)."""
    import optuna

    running = study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.RUNNING,))
    if not running:
        return
    for t in running:
        fail_trial(study, store, t.number, INTERRUPTED)
    note_interrupted(study, [t.number for t in running])


def note_interrupted(study: Any, numbers: list[int]) -> None:
    done = set(study.user_attrs.get(INTERRUPTED_KEY, []))
    study.set_user_attr(INTERRUPTED_KEY, sorted(done | set(numbers)))


def enqueue(study: Any, params: dict[str, Any], retry_of: Optional[int] = None,
            extra: Optional[dict[str, Any]] = None) -> None:
    """Queue a trial with these params, noted on the trial as well: a trial killed between leaving the
    queue and taking its params (Optuna sets them as they are suggested) can still be re-run.
    ``retry_of``: the trial it re-runs (the report says so beside that one); ``extra``: more attributes
    (a confirmation run's)."""
    attrs: dict[str, Any] = {ENQUEUED_KEY: params, **(extra or {})}
    if retry_of is not None:
        attrs[RETRY_OF] = retry_of
    study.enqueue_trial(params, user_attrs=attrs, skip_if_exists=False)


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
        if (t.number in interrupted or t.user_attrs.get(ERROR) == INTERRUPTED) and t.number not in requeued:
            requeued.add(t.number)
            params = t.params or t.user_attrs.get(ENQUEUED_KEY)  # killed before it took its queued params
            if params:  # else killed before the sampler drew any: there is nothing to re-run
                enqueue(study, dict(params), retry_of=t.number, extra=rerun_attrs(t.user_attrs))
    study.set_user_attr(REQUEUED_KEY, sorted(requeued))


def _interrupted(study: Any) -> set[int]:
    numbers = set(study.user_attrs.get(INTERRUPTED_KEY, []))
    return numbers | {t.number for t in study.get_trials(deepcopy=False) if t.user_attrs.get(ERROR) == INTERRUPTED}


def stopped(study: Any) -> dict[int, str]:
    """Trials whose worker stopped (heartbeat stale, or reaped): number -> the reason.

    One study attribute per trial: two workers reaping at once never overwrite each other's."""
    return {int(k[len(STOPPED_PREFIX):]): str(v) for k, v in study.user_attrs.items() if k.startswith(STOPPED_PREFIX) and v}


def excluded(study: Any) -> set[int]:
    """Trials that do not count toward the requested total: interrupted, stopped (re-run
    once, the re-run counts), surplus ones (they never ran), and a confirmation run queued twice (two
    workers at once) beyond its first live copy."""
    trials = study.get_trials(deepcopy=False)
    out = _interrupted(study) | set(stopped(study)) | {t.number for t in trials if t.user_attrs.get(SURPLUS)}
    seen: set[tuple[int, int]] = set()
    for t in trials:  # in number order
        key = confirm_key(t.user_attrs)
        if key is not None and t.number not in out:
            if key in seen:
                out.add(t.number)
            seen.add(key)
    return out


def device_seconds(study: Any) -> float:
    """The device time the study has spent: its trials' measured seconds and its probes'."""
    stored = read_plan(study)
    probes = float(stored.probe_seconds or 0.0) if stored is not None else 0.0
    return probes + sum(float(t.user_attrs.get(K.SECONDS) or 0.0) for t in study.get_trials(deepcopy=False))


def finished_count(study: Any) -> int:
    """Finished trials that count toward the requested total (interrupted, stopped and surplus ones do not)."""
    import optuna

    S = optuna.trial.TrialState
    skip = excluded(study)
    return sum(1 for t in study.get_trials(deepcopy=False, states=(S.COMPLETE, S.PRUNED, S.FAIL)) if t.number not in skip)


def trial_dicts(study: Any) -> list[dict[str, Any]]:
    """Every trial that ran (or runs), as search.json holds it."""
    import optuna

    skip, reasons = _interrupted(study), stopped(study)
    reruns = {t.user_attrs[RETRY_OF]: t.number for t in study.get_trials(deepcopy=False) if RETRY_OF in t.user_attrs}
    out = []
    for t in study.get_trials(deepcopy=False):
        if t.state == optuna.trial.TrialState.WAITING or t.user_attrs.get(SURPLUS):
            continue  # enqueued, never run; or found the study's slots taken, and did not run
        ua = t.user_attrs
        d: dict[str, Any] = {
            "number": t.number, "state": t.state.name, "value": t.value, "params": dict(t.params),
            "config": ua.get(K.CONFIG, {}), "task_config": ua.get(K.TASK_CONFIG, {}), "curve": ua.get(K.CURVE, []),
            "samples": ua.get(K.SAMPLES),
            "updates": ua.get(K.UPDATES), "micro_batch": ua.get(K.MICRO_BATCH),
            "accumulation_steps": ua.get(K.ACCUMULATION_STEPS), "effective_batch": ua.get(K.EFFECTIVE_BATCH),
            "seconds": ua.get(K.SECONDS), "predicted_seconds": ua.get(K.PREDICTED_SECONDS),
            "diverged": bool(ua.get(K.DIVERGED, False)),
            "val_loss": ua.get(K.VAL_LOSS), "lr": ua.get(K.LR_TRAINED, ua.get(K.CONFIG, {}).get("lr")),
            "error": _interrupted_note(t.number, reruns) if t.number in skip else reasons.get(t.number, ua.get(K.ERROR)),
            "finished": t.datetime_complete.timestamp() if t.datetime_complete else None,
        }
        if t.number in reasons:
            d["stopped"] = True  # its worker stopped: it does not count, and was re-run once
        if t.number in reruns:
            d["rerun_as"] = reruns[t.number]
        if RETRY_OF in ua:
            d["retry_of"] = ua[RETRY_OF]
        if confirm_key(ua) is not None:  # a confirmation run: the trial it runs again, and at which repeat
            d["confirm_of"], d["repeat"] = confirm_key(ua)
        if ua.get(K.WEIGHTS) and Path(ua[K.WEIGHTS]).is_file():
            d["weights"] = ua[K.WEIGHTS]  # its kept weights (a file removed since, as no longer the best, is not)
        for key, extra in ((K.WORKER, "worker"), (K.ATTEMPTS, "attempts"), (K.RUNG_VALUES, "rung_values"),
                           (K.BRANCH_SAMPLES, "branch_samples")):
            if key in ua:
                d[extra] = ua[key]
        out.append(d)
    return out


def _interrupted_note(number: int, reruns: dict[int, int]) -> str:
    """An interrupted trial's note: re-run on --resume, and as which trial once it was."""
    return f"interrupted; re-run as trial {reruns[number]}" if number in reruns else INTERRUPTED


# A plan stored before objectives existed was a study of the validation loss, minimised.
_ALWAYS_HELD = ("objective", "direction")


@dataclass(frozen=True)
class StoredPlan:
    """What a study keeps of its plan (:data:`~tunekit.hpsearch.keys.PLAN_KEY`): the Plan every trial
    shares, the probes' cost, the budget, the sampler seed and the pruner's rungs. A resumed or joining
    run reads it back, so it runs the study as it began. Stored flat, as JSON, as tunekit always has;
    a field an older tunekit did not store is None here (``holds`` tells which it did)."""

    plan: Plan
    probe_samples: Optional[int] = None
    probe_seconds: Optional[float] = None
    budget: Optional[dict[str, Any]] = None  # Budget.to_dict(): amount, unit, per_sample (and samples, once priced)
    sampler_seed: Optional[int] = None
    rungs: Optional[tuple[int, ...]] = None  # the ladder, in evaluations: a study keeps the rungs it began with
    held: Optional[frozenset[str]] = field(default=None, compare=False)  # the stored keys (None: all of them)

    def holds(self, key: str) -> bool:
        """Whether the study stored ``key`` (an older tunekit's plan lacks the later ones)."""
        return self.held is None or key in self.held or key in _ALWAYS_HELD

    def to_stored(self) -> dict[str, Any]:
        """The JSON the study keeps."""
        beside = {"probe_samples": self.probe_samples, "probe_seconds": self.probe_seconds, "budget": self.budget,
                  "sampler_seed": self.sampler_seed, "rungs": list(self.rungs) if self.rungs is not None else None}
        return {**self.plan.to_dict(), **beside}

    @classmethod
    def from_stored(cls, stored: Mapping[str, Any]) -> StoredPlan:
        """The record from the study's JSON (an older study's: the fields it lacks at their defaults)."""
        plan = Plan(**{f.name: stored[f.name] for f in fields(Plan) if f.name in stored})
        rungs = stored.get("rungs")
        return cls(plan, stored.get("probe_samples"), stored.get("probe_seconds"), stored.get("budget"),
                   stored.get("sampler_seed"), tuple(int(r) for r in rungs) if rungs is not None else None,
                   frozenset(stored))


def read_plan(study: Any) -> Optional[StoredPlan]:
    """The plan ``study`` keeps, or None before one is stored. The one reader of :data:`PLAN_KEY`."""
    stored = study.user_attrs.get(PLAN_KEY)
    return StoredPlan.from_stored(stored) if stored else None


def read_dists(study: Any) -> dict[str, str]:
    """The distributions ``study`` keeps (JSON, by parameter name); empty before they are stored."""
    return dict(study.user_attrs.get(DISTS_KEY, {}))


def keep_plan(study: Any, stored: StoredPlan, dists: dict[str, Any], metric_name: str = "validation loss") -> None:
    """The plan and the distributions, once; and the value's name, for dashboards. The one writer of
    :data:`PLAN_KEY`: the first run's plan stays the study's."""
    import optuna

    if not study.metric_names:
        with warnings.catch_warnings():  # "experimental" in Optuna's words
            warnings.simplefilter("ignore")
            study.set_metric_names([metric_name])

    if PLAN_KEY not in study.user_attrs:
        study.set_user_attr(PLAN_KEY, stored.to_stored())
    if DISTS_KEY not in study.user_attrs:
        study.set_user_attr(DISTS_KEY, {n: optuna.distributions.distribution_to_json(d) for n, d in dists.items()})


def default_name(task_name: str, space_name: str, given: Optional[str]) -> str:
    return given or f"tunekit-{task_name}-{space_name}"


def check_report_of(out_dir: Path, name: str) -> None:
    """An output folder holds one study's report: refuse to overwrite another study's."""
    report = out_dir / "search.json"
    if report.is_file():
        other = json.loads(report.read_text()).get("study_name")
        if other and other != name:
            raise UsageError(f"{out_dir} holds the report of study '{other}': give this search (study '{name}') "
                             "another out=DIR, so neither overwrites the other")
