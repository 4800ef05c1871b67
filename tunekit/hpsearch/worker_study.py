"""The study as one worker (or one process) opens it: :func:`open_worker_study` hands the task's study
to each module once, in order. The design and the sampler (:mod:`.seeding`), the rungs and their pruner
(:mod:`.rungs`), the study opened with them, its plan kept and its design queued once (:mod:`.study`), then
this process settled in (:mod:`.shared.policy`: a resume, the creator's spec, this worker registered). The
order fixes what joining workers wait for: the spec, stored last. What differs between one process's study
and a shared one is the study's policy.
"""

from __future__ import annotations

# Imported where used, not at the top: optuna; importing this module does not pay for them.
from dataclasses import dataclass
from typing import Any, Optional

from tunekit.hpsearch.plan import Plan
from tunekit.hpsearch.resolve import SearchInputs
from tunekit.hpsearch.rungs import halving
from tunekit.hpsearch.seeding import Probes, opening
from tunekit.hpsearch.settings import SearchSettings
from tunekit.hpsearch.shared.policy import StudyPolicy, settle_in
from tunekit.hpsearch.shared.spec import StoredSpec
from tunekit.hpsearch.shared.workers import set_threads
from tunekit.hpsearch.study import StoredPlan, open_study

__all__ = ["FoundStudy", "Prepared", "OpenedStudy", "open_worker_study", "set_threads"]


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
    sampler_seed: int  # this process's (the policy's, from the study's seed and the trials it holds)


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
    s, found = prep.settings, prep.found
    joined = dict(found.spec.seed_params) if found.spec is not None else None
    start = opening(s, prep.inputs, prep.dists, prep.probes, found.sampler_seed, concurrent or found.policy.parallel,
                    joined, prep.recipe)
    rungs, pruner = halving(s.pruner, s.trials, prep.inputs.budget.samples, s.prune, s.objective.direction,
                            found.old_plan.rungs if found.old_plan is not None else None)
    stored = StoredPlan(prep.plan, prep.probes.samples, prep.probes.seconds, prep.inputs.budget.to_dict(),
                        s.sampler_seed, tuple(rungs))
    study = open_study(found.store, found.name, start.sampler, pruner, s.objective.direction, stored, prep.dists,
                       s.objective.label, start.design, start.batch_note, start.computed)
    spec = prep.spec.with_seed(start.seed_params) if found.spec is None else None
    threads = settle_in(found.policy, study, found.store, spec, found.sampler_seed, s.study.resume, s.out)
    return OpenedStudy(study, start.seed_params, threads, found.policy.worker, found.sampler_seed, stored)
