"""A shared search as a service: create a study, join it as a worker, reap stopped workers, report it.

Each is a thin layer over :func:`tunekit.search` and the study's spec (:mod:`.workers`):
``create_study`` is a search that runs the probes and no trial; ``join_study`` is a search
whose settings come from the study (the ones given must agree with it); ``study_result``
reads the whole study back, wherever its trials ran.
"""

from __future__ import annotations

# Imported where used, not at the top: optuna, torch, tqdm; importing this module does not pay for them.
from pathlib import Path
from typing import Any, Optional

import dataclasses
import warnings

from tunekit.errors import UsageError
from tunekit.hpsearch.budget import Budget
from tunekit.hpsearch.keys import ARTIFACTS_KEY
from tunekit.hpsearch.options import TPE, BackendOptions, Local, SharedStudy
from tunekit.hpsearch.settings import SearchSettings
from tunekit.hpsearch.shared.server import attach
from tunekit.hpsearch.shared.spec import StoredSpec
from tunekit.hpsearch.shared.workers import open_storage, reap_stopped, space_of, spec_probes, wait_for_spec
from tunekit.hpsearch.study import check_report_of, read_dists, read_plan
from tunekit.results import write_report

__all__ = ["create_study", "join_study", "reap_study", "delete_study", "study_result", "write_study_report",
           "JOIN_SETTINGS"]

# What a joining worker may repeat: the study's own values, as its spec keeps them (and max_steps,
# another way to say the budget); each must agree with the study's.
JOIN_SETTINGS = (*SearchSettings().study_dict(), "max_steps")


def create_study(task: Any = "shapes", space: Any = "from_scratch", *, study: Optional[SharedStudy] = None,
                 **search_args: Any) -> Any:
    """Create the shared ``study``: the probes run here, once; the spec, plan and seed trial are stored.
    Workers then join with :func:`join_study` (``tunekit worker``), given the same SharedStudy.
    ``search_args``: those of :func:`tunekit.search`. Returns the (empty) SearchResult."""
    from tunekit.hpsearch.run import search

    if study is None:
        if not search_args.get("storage"):  # tunekit 0.x: storage=URL, study_name=NAME
            raise UsageError("create_study needs study=SharedStudy(storage=URL) (postgresql://..., sqlite:///..., or "
                             "a journal file *.log)")
        return search(task, space, run_trials=False, **search_args)
    if not isinstance(study, SharedStudy):
        raise UsageError(f"create_study needs study=SharedStudy(storage=URL), got {study!r}")
    return search(task, space, study=dataclasses.replace(study, run_trials=False), **search_args)


def _load_spec(store: Any, name: str, storage: str, timeout: float) -> StoredSpec:
    import optuna

    if name not in optuna.get_all_study_names(store):
        raise UsageError(f"there is no study '{name}' in {storage}: create it with tunekit study create "
                         f"(or tunekit search --storage URL --study {name})")
    spec = wait_for_spec(store, name, timeout)
    if spec is None:
        raise UsageError(f"study '{name}' was created by an older tunekit and keeps no spec: join it with "
                         "tunekit search and the flags it was created with")
    return spec


def join_study(study: SharedStudy | str, study_name: Optional[str] = None, *, task: Any = None, out: Any = None,
               backend: BackendOptions = Local(), keep: str = "best", progress: Optional[bool] = None,
               **must_agree: Any) -> Any:
    """Join the shared ``study`` as a worker: run its trials until it holds its count; no probe runs.

    ``must_agree`` (any of :data:`JOIN_SETTINGS`, or ``sampler=``/``pruner=`` objects) are checked against
    the study's and refused in one line when they disagree; those not given are the study's. ``task``
    defaults to the study's (give the same task object when the study was created with one). ``keep``:
    which of this worker's trials keep their weights, in the study's artifact folder when it has one."""
    from tunekit.hpsearch.run import search
    from tunekit.integrations.task_spec import TaskSpec

    if isinstance(study, str):  # tunekit 0.x: join_study(storage, study_name, worker_id=..., timeout=...)
        study, backend = _legacy_worker(study, study_name, backend, must_agree)
    unknown = sorted(set(must_agree) - set(JOIN_SETTINGS) - {"sampler", "pruner", "objective"})
    if unknown:
        raise UsageError(f"join_study does not take {unknown[0]}=: a worker takes the study's settings; "
                         f"it may repeat {', '.join(JOIN_SETTINGS)}")
    if not study.name:
        raise UsageError("join_study needs the study's name: pass study=SharedStudy(storage=URL, name=NAME)")
    spec = _load_spec(open_storage(study.storage, None, study.heartbeat_grace, study.storage_retry), study.name,
                      study.storage, study.join_timeout)
    if task is None and spec.task is None:
        raise UsageError(f"study '{study.name}' was created with a Task object, not a spec: pass the same task=")
    kw = _the_studys(spec, {k: v for k, v in must_agree.items() if v is not None})
    config = kw.pop("task_config", None)
    if isinstance(task, TaskSpec):
        task, config = task.spec, dict(task.config) or config
    task = spec.task if task is None else task
    task = TaskSpec(task, config) if config and isinstance(task, str) else task
    return search(task, space_of(spec), study=study, backend=backend, out=out, keep=keep, progress=progress, **kw)


def _the_studys(spec: StoredSpec, given: dict[str, Any]) -> dict[str, Any]:
    """The study's settings as :func:`tunekit.search` takes them, with the ones a worker gave over them."""
    values = {k: spec.value(k) for k in JOIN_SETTINGS if spec.holds(k)}  # an older spec lacks the newer settings
    objects = {k: given.pop(k) for k in ("sampler", "pruner") if k in given}
    if "budget" in given or "max_steps" in given:
        values.pop("budget", None)  # search() compares the budget it resolves with the study's
    if "max_steps" in given:
        given["budget"] = f"{given.pop('max_steps')}updates"
    if isinstance(given.get("objective"), str) and given["objective"] != values.get("objective"):
        values.pop("direction", None)  # another objective's own direction, to be told apart in one line
    return SearchSettings.from_spec(values | given) | objects


def _legacy_worker(storage: str, name: Optional[str], backend: BackendOptions,
                   kw: dict[str, Any]) -> tuple[SharedStudy, BackendOptions]:
    """tunekit 0.x's join_study(storage, study_name, ...) keywords as a SharedStudy and a backend, warned."""
    old = {"worker_id": "worker_id", "threads": "threads", "grace_period": "heartbeat_grace", "timeout": "join_timeout",
           "time_limit": "time_limit", "storage_retry": "storage_retry"}
    fields = {new: kw.pop(k) for k, new in old.items() if k in kw}
    device = kw.pop("device", None)
    warnings.warn("join_study(storage, study_name, ...) is deprecated: pass join_study(SharedStudy(storage=URL, "
                  "name=NAME, worker_id=..., ...), backend=Local(device=...))", DeprecationWarning, stacklevel=3)
    if device is not None:
        backend = dataclasses.replace(backend, device=device)
    return SharedStudy(storage=storage, name=name, **fields), backend


def reap_study(storage: str, study_name: str, workers: Optional[list[str]] = None,
               heartbeat_grace: Optional[int] = None, *, grace_period: Optional[int] = None) -> list[int]:
    """Fail the trials whose worker stopped (stale heartbeat; a process of this machine that is gone;
    or a worker named ``host:pid`` in ``workers``), note why, queue their one re-run. Their numbers.
    (``grace_period=`` is 0.x's name of ``heartbeat_grace``: it works, with a DeprecationWarning.)"""
    import optuna

    if grace_period is not None:
        if heartbeat_grace is not None:
            raise UsageError("give the heartbeat's grace once: heartbeat_grace=, not also grace_period=")
        warnings.warn("reap_study(grace_period=) is deprecated: pass heartbeat_grace=", DeprecationWarning, stacklevel=2)
        heartbeat_grace = grace_period

    store = open_storage(storage, None, heartbeat_grace)
    if study_name not in optuna.get_all_study_names(store):
        raise UsageError(f"there is no study '{study_name}' in {storage}: give one of "
                         f"{', '.join(optuna.get_all_study_names(store)) or '(none)'}")
    for w in workers or ():
        if w.count(":") < 1 or not w.rpartition(":")[2].isdigit():
            raise UsageError(f"worker {w!r} is not HOST:PID: pass e.g. worker=gpu-3:41722")
    return reap_stopped(optuna.load_study(study_name=study_name, storage=store), store, workers)


def delete_study(storage: str, study_name: str, *, confirm: bool = False) -> dict[str, int]:
    """Delete study ``study_name`` from ``storage`` (its trials go with it): for a study whose creator
    died before it stored its settings, or one no longer wanted. Returns its trial counts by state;
    without ``confirm`` it only counts, and deletes nothing."""
    import optuna

    store = open_storage(storage, None)
    names = optuna.get_all_study_names(store)
    if study_name not in names:
        raise UsageError(f"there is no study '{study_name}' in {storage}: give one of {', '.join(names) or '(none)'}")
    counts: dict[str, int] = {}
    for t in optuna.load_study(study_name=study_name, storage=store).get_trials(deepcopy=False):
        counts[t.state.name] = counts.get(t.state.name, 0) + 1
    if confirm:
        optuna.delete_study(study_name=study_name, storage=store)
    return counts


def study_result(storage: str, study_name: str) -> Any:
    """The whole study as a SearchResult, from what it keeps (its spec, plan and trials)."""
    import optuna

    from tunekit.hpsearch.resolve import SearchInputs
    from tunekit.hpsearch.seeding import Probes
    from tunekit.hpsearch.shared.policy import policy_of
    from tunekit.hpsearch.summary import build_result
    from tunekit.hpsearch.worker_study import FoundStudy, OpenedStudy, Prepared

    store = open_storage(storage, None)
    spec = _load_spec(store, study_name, storage, timeout=0)
    study = optuna.load_study(study_name=study_name, storage=store)
    stored = read_plan(study)
    if stored is None or stored.budget is None:
        raise UsageError(f"study '{study_name}' keeps no plan yet: its creator has not finished setting it up")
    dists = {n: optuna.distributions.json_to_distribution(d) for n, d in read_dists(study).items()}
    times = [t for tr in study.get_trials(deepcopy=False) for t in (tr.datetime_start, tr.datetime_complete) if t]
    seconds = (max(times) - min(times)).total_seconds() if times else 0.0
    settings = SearchSettings(study=SharedStudy(storage=storage, name=study_name), seed=spec.seed,
                              sampler=TPE(seed=spec.sampler_seed))
    budget = Budget(**{k: v for k, v in stored.budget.items() if k != "samples"})
    probes = Probes(*spec_probes(spec), int(stored.probe_samples or 0), float(stored.probe_seconds or 0.0))
    found = FoundStudy(store, study_name, True, stored, read_dists(study), spec, policy_of(settings.study))
    prep = Prepared(settings, spec.task, spec.task, SearchInputs(space_of(spec), None, None, budget), found, probes,
                    stored.plan, dists, spec)
    opened = OpenedStudy(study, dict(spec.seed_params), None, "", spec.sampler_seed, stored)
    return build_result(prep, opened, seconds)


def write_study_report(storage: str, study_name: str, out: str | Path, artifacts: Optional[str] = None) -> Any:
    """The study's report in ``out``; with ``artifacts`` (or the study's own artifact folder), search.png
    is attached to the study too."""
    import optuna


    result = study_result(storage, study_name)
    Path(out).mkdir(parents=True, exist_ok=True)
    check_report_of(Path(out), study_name)
    write_report(result, Path(out))
    study = optuna.load_study(study_name=study_name, storage=open_storage(storage, None))
    folder = artifacts or study.user_attrs.get(ARTIFACTS_KEY)
    if folder:
        attach(study, folder, [Path(out) / "search.png"])
    return result
