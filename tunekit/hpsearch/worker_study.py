"""The study as one worker (or one process) opens it, in small steps.

:func:`open_worker_study` seeds the sampler, builds the pruner from the rungs, stores the plan
(or keeps the study's), resumes, queues the seed trial and design (the creator, once), stores the
spec and registers this worker and its threads, in that order: the order fixes the sampler's seed
(it counts the trials already there) and what joining workers wait for. What differs between one
process's study and a shared one is the study's policy (:mod:`tunekit.hpsearch.shared.policy`).
"""

from __future__ import annotations

# Imported where used, not at the top: optuna; importing this module does not pay for them.
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional

from tunekit.hpsearch.keys import SPEC_KEY
from tunekit.hpsearch.options import Halving
from tunekit.hpsearch.plan import Plan
from tunekit.hpsearch.resolve import SearchInputs
from tunekit.hpsearch.rungs import ladder, make_pruner
from tunekit.hpsearch.seeding import Probes, design_size, enqueue_seed_and_design, recipe
from tunekit.hpsearch.settings import SearchSettings
from tunekit.hpsearch.shared.policy import StudyPolicy
from tunekit.hpsearch.shared.server import attach
from tunekit.hpsearch.shared.spec import StoredSpec
from tunekit.hpsearch.shared.workers import set_threads
from tunekit.hpsearch.study import StoredPlan, keep_plan, make_sampler, open_study

__all__ = ["FoundStudy", "Prepared", "OpenedStudy", "open_worker_study", "guided_lr", "rungs_of", "pruner_of",
           "stored_plan_of", "queue_seed_and_design", "store_spec", "set_threads"]


@dataclass
class FoundStudy:
    """The study's storage as this search found it, before the probes run."""

    store: Any
    name: str
    existing: bool
    old_plan: Optional[StoredPlan]  # the plan it keeps (None: a new study, or one created but not yet planned)
    old_dists: dict[str, str]
    spec: Optional[StoredSpec]  # a joining worker's: the study's settings and probes
    policy: StudyPolicy  # one process's study or a shared one: chosen once, asked from then on


@dataclass
class Prepared:
    """What the trials share, once the storage is open and the probes have run."""

    settings: SearchSettings
    task: Any  # as the trials run it (a callable objective added to a Task's metrics)
    named: Optional[str]  # the task's spec as the user named it, for the result (None for an object)
    inputs: SearchInputs
    found: FoundStudy
    probes: Probes
    plan: Plan
    dists: dict[str, Any]
    spec: StoredSpec  # this run's (seed_params still empty): what a creator stores
    recipe: Optional[dict[str, Any]] = None  # the task's own settings (seeding.recipe), where read already


@dataclass
class OpenedStudy:
    """The study opened for this worker, and what the search needs of how it was opened."""

    study: Any
    seed_params: dict[str, Any]  # the seed trial's params (the creator's, for a joining worker)
    threads_before: Optional[int]  # the torch threads to restore after (None: unchanged)
    worker: str  # this worker's id
    sampler_seed: int
    stored: StoredPlan  # the plan this run stored (the study keeps its first run's: read_plan)


def open_worker_study(prep: Prepared, concurrent: bool) -> OpenedStudy:
    """The study opened for this worker. Each worker of a shared study samples with its own seed
    (from the study's and its id), with constant_liar, so none proposes what another runs; only the
    creator queues the seed trial and design, and stores the spec that joining workers wait for.
    ``concurrent``: the backend runs trials in parallel in this process."""
    s, found, policy = prep.settings, prep.found, prep.found.policy
    seed = policy.sampler_seed(s.sampler_seed, found.store, found.name, found.existing)
    n_design = design_size(s, prep.inputs.space, prep.probes)
    startup = n_design or max(3, min(10, s.trials // 3))
    sampler = make_sampler(s.sampler.kind, seed, startup, parallel=concurrent or policy.parallel,
                           lr_param=guided_lr(prep), horizon=s.trials - startup)
    rungs = rungs_of(s, prep.inputs.budget.samples, found.old_plan)
    study = open_study(found.store, found.name, sampler, pruner_of(s, prep.inputs.budget.samples, rungs), s.objective.direction)
    stored = stored_plan_of(prep, rungs)
    keep_plan(study, stored, prep.dists, s.objective.label)
    if s.study.resume:
        policy.resume(study, found.store)
    seed_params = queue_seed_and_design(study, prep, n_design)
    if found.spec is None and SPEC_KEY not in study.user_attrs:  # the creator, last: joining workers wait for it
        store_spec(study, prep.spec.with_seed(seed_params), policy.artifacts, s.out)
        policy.created(found.store, found.name)
    threads = policy.become_worker(study, seed)
    return OpenedStudy(study, seed_params, threads, policy.worker, seed, stored)


def guided_lr(prep: Prepared) -> Optional[str]:
    """The LR parameter the sampler draws near the best trial early: the one the range test seeded (its
    suggestion trusted), under a TPE sampler that asks for it; None otherwise."""
    lf = prep.probes.lr_find
    entry = prep.inputs.space.entries.get("lr")
    if not getattr(prep.settings.sampler, "guided", False) or entry is None or entry.seeded != "lr_find":
        return None
    return "lr" if lf is not None and lf.confident and lf.suggestion else None


def _halving(settings: SearchSettings) -> Halving:
    """Without pruning the study still keeps the ladder halving would use (its stored plan reads the same)."""
    return settings.pruner if isinstance(settings.pruner, Halving) else Halving(evals=settings.pruner.evals)


def rungs_of(settings: SearchSettings, budget_samples: int, old: Optional[StoredPlan]) -> list[int]:
    """The rungs, in evaluations: the ones the study began with, else the ladder of this run's settings."""
    if old is not None and old.rungs is not None:
        return list(old.rungs)
    h = _halving(settings)
    return ladder(budget_samples, settings.trials, h.reduction_factor, h.evals, h.rungs, h.first_rung)


def pruner_of(settings: SearchSettings, budget_samples: int, rungs: list[int]) -> Any:
    """Successive halving on samples seen, over ``rungs`` (adaptive unless the rungs were given)."""
    h = _halving(settings)
    return make_pruner(budget_samples // h.evals, h.evals, rungs, h.reduction_factor, settings.prune,
                       adaptive=h.rungs is None and h.first_rung is None, direction=settings.objective.direction)


def stored_plan_of(prep: Prepared, rungs: list[int]) -> StoredPlan:
    """This run's plan as the study keeps it (stored only by the study's first run)."""
    return StoredPlan(prep.plan, prep.probes.samples, prep.probes.seconds, prep.inputs.budget.to_dict(),
                      prep.settings.sampler_seed, tuple(rungs))


def queue_seed_and_design(study: Any, prep: Prepared, n_design: int) -> dict[str, Any]:
    """The seed trial's params. A joining worker takes the creator's (it queued them, once); the creator
    or a one-process search queues the seed trial and design (once per study: a resume queues nothing)."""
    if prep.found.spec is not None:
        return dict(prep.found.spec.seed_params)
    settings = prep.settings
    if not (settings.sampler.seed_trial or n_design):
        return {}
    task_recipe = prep.recipe if prep.recipe is not None else recipe(prep.inputs.task, prep.inputs.cfg, settings.seed)
    return enqueue_seed_and_design(study, prep.dists, prep.probes, n_design, settings.trials, task_recipe,
                                   in_time=prep.inputs.budget.seconds is not None)


def store_spec(study: Any, spec: StoredSpec, artifacts: Optional[str], out_dir: Optional[Path]) -> None:
    """The study's spec (and, with an ``artifacts`` folder, the probes' files in ``out_dir`` attached to the study)."""
    if artifacts is not None and out_dir is not None:
        attach(study, artifacts, [Path(out_dir) / f"{n}.{x}" for n in ("lr_find", "probe") for x in ("json", "png")])
    study.set_user_attr(SPEC_KEY, spec.to_stored())
