"""A shared study as a service: reap its stopped workers, delete it, report it.

Each is a thin layer over the study's spec (:mod:`.workers`): ``study_result`` reads the whole
study back, wherever its trials ran. Creating and joining one are searches, beside
:func:`tunekit.search` (:mod:`tunekit.hpsearch.entries`).
"""

from __future__ import annotations

# Imported where used, not at the top: optuna, torch, tqdm; importing this module does not pay for them.
from pathlib import Path
from typing import Any, Optional


from tunekit.errors import UsageError, deprecated
from tunekit.hpsearch.budget import Budget
from tunekit.hpsearch.keys import ARTIFACTS_KEY
from tunekit.hpsearch.options import TPE, SharedStudy
from tunekit.hpsearch.settings import SearchSettings
from tunekit.hpsearch.shared.server import attach
from tunekit.hpsearch.shared.spec import StoredSpec
from tunekit.hpsearch.shared.workers import open_storage, reap_stopped, space_of, spec_probes, wait_for_spec
from tunekit.hpsearch.study import check_report_of, read_dists, read_plan
from tunekit.results import write_report

__all__ = ["load_spec", "reap_study", "delete_study", "study_result", "write_study_report"]

def load_spec(store: Any, name: str, storage: str, timeout: float) -> StoredSpec:
    """The study's spec, waited for ``timeout`` seconds; refused in one line where there is none."""
    import optuna

    if name not in optuna.get_all_study_names(store):
        raise UsageError(f"there is no study '{name}' in {storage}: create it with tunekit study create "
                         f"(or tunekit search --storage URL --study {name})")
    spec = wait_for_spec(store, name, timeout)
    if spec is None:
        raise UsageError(f"study '{name}' was created by an older tunekit and keeps no spec: join it with "
                         "tunekit search and the flags it was created with")
    return spec


# 0.1.0's reap_study(grace_period=): deprecated in 0.2.0, removed in 0.3.0.
_GRACE_PERIOD = deprecated("reap_study(grace_period=)", "pass heartbeat_grace=")


def reap_study(storage: str, study_name: str, workers: Optional[list[str]] = None,
               heartbeat_grace: Optional[int] = None, *, grace_period: Optional[int] = None) -> list[int]:
    """Fail the trials whose worker stopped (stale heartbeat; a process of this machine that is gone;
    or a worker named ``host:pid`` in ``workers``), note why, queue their one re-run. Their numbers.
    (``grace_period=`` is 0.1.0's name of ``heartbeat_grace``: it works, with a DeprecationWarning, until 0.3.0.)"""
    import optuna

    if grace_period is not None:
        if heartbeat_grace is not None:
            raise UsageError("give the heartbeat's grace once: heartbeat_grace=, not also grace_period=")
        _GRACE_PERIOD.warn()
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
    spec = load_spec(store, study_name, storage, timeout=0)
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
    found = FoundStudy(store, study_name, True, stored, read_dists(study), spec, policy_of(settings.study),
                       spec.sampler_seed)
    prep = Prepared(settings, spec.task, spec.task, SearchInputs(space_of(spec), None, None, budget, stored.plan.task_batch), found, probes,
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
