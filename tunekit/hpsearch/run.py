"""``tunekit.search``: a seeded Optuna search with early stopping, through the shared step.

1. The settings are built and checked once (:class:`~tunekit.hpsearch.settings.SearchSettings`),
   the task, space, recipe and budget resolved once (:mod:`~tunekit.hpsearch.resolve`), and the
   backend refuses what it cannot honour.
2. The study's storage is opened, so a clash or a bad storage fails at once. A shared study
   is created by one worker, which runs the probes; the others join and take its spec.
3. The probes the space needs run (or their saved results are used), with the trials' own
   step settings (:mod:`~tunekit.hpsearch.seeding`).
4. A :class:`~tunekit.hpsearch.plan.Plan` fixes what every trial shares, and the space is
   seeded from the probes.
5. The seed trial and a small design around it are enqueued; TPE samples the rest.
6. The backend (:mod:`~tunekit.hpsearch.backends`) runs trials until the study holds
   ``trials`` finished ones; successive halving on samples seen stops the weak ones. With
   ``confirm``, the best then run again at fresh seeds (:mod:`~tunekit.hpsearch.confirm_runs`).
"""

from __future__ import annotations

# Imported where used, not at the top: optuna; importing this module does not pay for them.
import contextlib
import dataclasses
import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Optional

from tunekit.errors import NoTrialSucceeded, UsageError
from tunekit.hpsearch.backends.base import Backend, Work, get_backend
from tunekit.hpsearch.confirm_runs import expected
from tunekit.hpsearch.keep import Keeper, settle
from tunekit.hpsearch.options import (BackendOptions, Confirm, Halving, Local, ProbeSettings, Pruner, Sampler,
                                      SharedStudy, Study, TPE)
from tunekit.hpsearch.plan import Plan, largest_batch, split_batch
from tunekit.hpsearch.resolve import ResolvedSearch, resolve_search
from tunekit.hpsearch.seeded_space import as_own, distributions
from tunekit.hpsearch.seeding import Probes, adaptive_l2, make_plan, own_settings, priced, recipe, run_probes
from tunekit.hpsearch.settings import SearchSettings, from_keywords
from tunekit.hpsearch.shared.policy import StudyPolicy, policy_of, probed
from tunekit.hpsearch.shared.spec import StoredSpec
from tunekit.hpsearch.shared.workers import check_spec, space_dict, spec_probes
from tunekit.hpsearch.study import (check_report_of, check_resume, default_name, finished_count, read_dists, read_plan,
                                    study_exists)
from tunekit.hpsearch.summary import best_trial, build_result
from tunekit.hpsearch.worker_study import FoundStudy, Prepared, open_worker_study, set_threads
from tunekit.inputs.space import SearchSpace
from tunekit.integrations.task_spec import TaskSpec, task_of
from tunekit.progress import bar
from tunekit.results import SearchResult, write_report
from tunekit.training.state import preserved
from tunekit.version import __version__

__all__ = ["search", "search_with", "run_search", "probed", "nothing_finished"]


def search(
    task: Any = "shapes",
    space: str | SearchSpace = "from_scratch",
    *,
    trials: int = 12,
    budget: Any = None,
    objective: Any = "loss",
    seed: int = 0,
    sampler: Sampler = TPE(),
    pruner: Pruner = Halving(),
    backend: BackendOptions = Local(),
    study: Study | SharedStudy = Study(),
    probes: ProbeSettings = ProbeSettings(),
    confirm: Confirm = Confirm(),
    out: str | Path | None = None,
    keep: str = "best",
    progress: Optional[bool] = None,
    **deprecated: Any,  # 0.1.0's flat keywords (settings.FLAT_KEYWORDS): removed in tunekit 0.3.0
) -> SearchResult:
    """Search ``space`` for the best training configuration of ``task``; the result holds the best trial.

    ``task``: a spec (``"shapes"``, ``"pkg.mod:fn"``, ``TaskSpec("file.py:fn", width=64)``), a :class:`Task`,
    a HF ``Trainer`` or a ``LightningRun``. ``trials``: finished trials the study should hold. ``budget``:
    what one full trial may draw (``"4000samples"``, ``"2epochs"``, ``"1e6tokens"``, ``"200updates"``,
    ``"10min"`` of device time; default one run of the task's recipe). ``objective``: ``"loss"``,
    ``"accuracy"``, ``"perplexity"`` or ``Objective(name_or_fn, direction)``. ``seed`` seeds the trials and
    the probes. The sampler, pruner, backend, study and probes are objects (:mod:`tunekit.hpsearch.options`),
    as Optuna takes a sampler and a pruner. ``confirm=Confirm(top=3, seeds=2)`` runs the 3 best trials again at
    2 fresh seeds each and answers with the best mean (off by default). ``keep``: whose trained weights are written (``"best"``,
    ``"all"``, ``"none"``). tunekit 0.1.0's flat keywords still work, with a DeprecationWarning, until 0.3.0.
    """
    settings = settings_of(task, trials=trials, budget=budget, objective=objective, seed=seed, sampler=sampler,
                           pruner=pruner, backend=backend, study=study, probes=probes, confirm=confirm, out=out, keep=keep,
                           progress=progress, deprecated=deprecated)
    return search_with(task_of(task), space, settings)


def settings_of(task: Any, *, deprecated: dict[str, Any], caller: str = "search", **given: Any) -> SearchSettings:
    """The search's settings from :func:`search`'s arguments (a TaskSpec's config among them), built once."""
    kw = from_keywords(given, dict(deprecated), caller)
    if isinstance(task, TaskSpec):
        if kw.get("task_config"):
            raise UsageError("give the task's config once: TaskSpec(spec, config), not also task_config=")
        kw["task_config"] = dict(task.config) or None
    return SearchSettings(**kw)


def search_with(task: Any, space: str | SearchSpace, settings: SearchSettings, backend: Optional[Backend] = None) -> SearchResult:
    """:func:`search` with its settings built, and optionally a backend of the caller's (the user's own
    training loop: :func:`tunekit.search_own`). A Hugging Face Trainer or a Lightning
    module is taken as a Task that builds a fresh model per trial; the best configuration comes back
    in their terms too."""
    # Every RNG as the caller left it: a model factory (a module's class, model_init) draws from the
    # global one as it builds the template, and so may their code; the trials draw from their own seeds.
    with preserved():
        resolved = resolve_search(task, space, settings)
        adapted = resolved.adapted
        with adapted.speaking() if adapted is not None else contextlib.nullcontext():
            result = run_search(resolved, backend)
    if result.best_value is not None and adapted is not None and adapted.theirs is not None:
        # Their recipe's own values said as theirs: a zero that the search's log range held as 1e-08 is 0.0.
        best = as_own(result.best_config, resolved.inputs.space, result.widened)
        result.best_theirs, result.theirs_kind = adapted.theirs(best), adapted.kind
        if settings.out is not None:
            write_report(result, settings.out)
    return result


def run_search(resolved: ResolvedSearch, backend: Optional[Backend] = None) -> SearchResult:
    """:func:`search` with its inputs resolved: the stages of the module's docstring. ``backend``:
    one of the caller's, else the one ``settings.backend`` names."""
    start = time.perf_counter()
    settings = resolved.settings
    backend = backend if backend is not None else get_backend(settings.backend.kind)
    backend.check(settings)
    policy = policy_of(settings.study)  # one process's study or a shared one: chosen here, once
    with _no_empty_study_left(policy.own_file(settings.out)):
        prep = _prepare(resolved, backend, policy)

    # The study, its seed trial and design (once, by the creator), this worker's sampler.
    opened = open_worker_study(prep, concurrent=backend.concurrent)
    study = opened.study

    # Run until the study holds `trials` finished trials. Interrupted (Ctrl-C), the
    # report of what finished is written all the same, and --resume goes on from it.
    folder = policy.weights_folder(study, settings) if policy.runs_trials else None
    keeper = Keeper(settings.keep, folder, settings.objective.direction) if folder is not None else None
    ended: list[str] = []  # the states of the trials this process ran, as they ended
    before: set[int] = set()  # the study's trials that had finished before this process ran any
    try:
        if policy.runs_trials:
            settle(study, keeper)  # what a search killed during a write left
            before = {t.number for t in study.get_trials(deepcopy=False) if t.state.is_finished()}
            work = Work(study, prep.dists, prep.plan, prep.task, settings.trials, settings, prep.found.store, _no_end,
                        policy, keeper)
            ended = _run_trials(backend, work)
    finally:
        set_threads(opened.threads_before)  # the caller's (a notebook's) threads again
        result = build_result(prep, opened, policy.seconds(study, time.perf_counter() - start))
        result.made_from = prep.task  # what best_model() builds the model from, in this process
        if settings.out is not None:
            write_report(result, settings.out)
    if nothing_finished(ended):
        raise NoTrialSucceeded(_all_failed(result, ended, before, settings.out, policy.whose), result)
    return result


def nothing_finished(ended: list[str]) -> bool:
    """Whether the trials a process ran (their end states) gave nothing: some failed and none completed. (Trials
    that were all pruned had values good enough to compare; a run that ran none, a resumed one, is not judged.)"""
    return bool(ended) and "FAIL" in ended and "COMPLETE" not in ended


def _all_failed(result: SearchResult, ended: list[str], before: set[int], out: Optional[Path], whose: str) -> str:
    """One line: no trial this process ran finished (each failed, or was pruned beside failures), the first
    failure's cause, and where they all are (``whose``: the policy's words for this process's trials)."""
    failed = [t for t in result.trials if t.get("state") == "FAIL" and t.get("number") not in before]
    first = min(failed, key=lambda t: t["number"]) if failed else {}
    cause = " ".join(str(first.get("error") or "no error recorded").split())
    cause = cause if len(cause) <= 300 else cause[:297] + "..."
    where = f"; each trial's error is in {out / 'search.json'}" if out is not None else ""
    n, pruned = len(ended), ended.count("PRUNED")
    trials = ("the trial" if n == 1 else f"all {n} trials") + whose
    how = "failed" if not pruned else f"failed or were pruned and none finished ({n - pruned} failed, {pruned} pruned)"
    return f"{trials} {how}, the first (trial {first.get('number', '?')}) with {cause}{where}"


def _prepare(resolved: ResolvedSearch, backend: Backend, policy: StudyPolicy) -> Prepared:
    """The storage, the probes, the plan and the seeded space; every refusal before a trial."""
    import optuna

    task, inputs, settings = resolved.task, resolved.inputs, resolved.settings

    # The storage first: a clash fails before any probe runs; a joining worker takes the spec.
    found = _open(settings, policy, default_name(inputs.task.name, inputs.space.name, settings.study.name))
    saved = (settings.probes.lr_find, settings.probes.probe)
    if found.spec is not None:
        # What needs no probe first (the task, the space, the trial count...): a worker with another
        # task is told that, not what follows from it (the probes' task, a budget of other samples).
        check_spec(found.spec, _spec_settings(task, settings, inputs.space), found.name)
        saved = _spec_probes(found.spec, settings)

    # The probes (or their saved results), the plan every trial shares, the seeded space.
    with _creating(found):
        probes = run_probes(inputs, settings, found.existing or settings.study.resume, saved)
        inputs = priced(inputs, probes, settings)  # a budget in device time, by the probe's timed steps
        if found.old_plan is not None:  # the study's probes' cost, as its first run counted it
            probes.samples = int(_or(found.old_plan.probe_samples, probes.samples))
            probes.seconds = float(_or(found.old_plan.probe_seconds, probes.seconds))
        plan = make_plan(inputs, probes, settings)
        if found.old_plan is not None:  # a study's trials branch where its first run's did (an older study's: nowhere)
            plan = dataclasses.replace(plan, rung_cooldown=found.old_plan.plan.rung_cooldown,
                                       branch_evals=list(found.old_plan.plan.branch_evals))
        task_recipe = None
        if found.old_dists:  # the space a study started with stays its space
            dists = {n: optuna.distributions.json_to_distribution(d) for n, d in found.old_dists.items()}
            if found.old_plan is not None:
                check_resume(found.old_plan, plan, f"'{found.name}'")
        else:
            # The task's own settings inside the space: the search can always return the user's recipe.
            # The task's model and optimizer built once here, read for the recipe and the decay's kind.
            optimizer = inputs.task.make_optimizer(inputs.task.make_model(settings.seed))
            task_recipe = recipe(inputs.task, inputs.cfg, settings.seed, optimizer)
            dists = distributions(inputs.space, probes.lr_find, probes.probe, max_batch=largest_batch(plan),
                                  adaptive_l2=adaptive_l2(inputs, optimizer),
                                  own=own_settings(task_recipe, inputs.cfg))
        spec = study_spec(task, settings, inputs.space, probes, plan, dists)
        if found.spec is not None:
            check_spec(found.spec, spec.to_stored(), found.name)
        backend.check_plan(settings, plan, dists, probes.probe)
    return Prepared(settings, task, resolved.named, inputs, found, probes, plan, dists, spec, task_recipe)


def _or(value: Any, default: Any) -> Any:
    """``value``, or ``default`` where the study did not store one (an older tunekit's)."""
    return default if value is None else value


@contextlib.contextmanager
def _creating(found: FoundStudy) -> Iterator[None]:
    """A study's creator that fails before it stores the spec says so in the study (a shared one: the next
    process that creates it with the same settings takes its place at once)."""
    try:
        yield
    except BaseException:
        if found.spec is None:
            found.policy.gave_up(found.store, found.name)
        raise


@contextlib.contextmanager
def _no_empty_study_left(db: Optional[Path]) -> Iterator[None]:
    """A search refused before its study holds anything (a resume into an empty folder, a missing saved
    probe) leaves no study file of its own making (``db``: the policy's) behind."""
    fresh = db is not None and not db.exists()
    try:
        yield
    except (UsageError, KeyboardInterrupt):
        if fresh and db is not None:
            for path in (db, db.with_name("study.db-journal"), db.with_name("study.db-wal"), db.with_name("study.db-shm")):
                path.unlink(missing_ok=True)
        raise


# --- stages ---------------------------------------------------------------------------


def _open(settings: SearchSettings, policy: StudyPolicy, name: str) -> FoundStudy:
    """The storage, whether the study exists, its stored plan and distributions, and a joining
    worker's spec (it waits for the creator's); clashes refused."""
    import optuna

    optuna.logging.set_verbosity(optuna.logging.ERROR)  # failures are in the table, with their errors
    out_dir = settings.out
    if out_dir is not None:
        out_dir.mkdir(parents=True, exist_ok=True)
        check_report_of(out_dir, name)
    store = policy.open_storage(out_dir)
    spec, existing = policy.find(store, name, study_exists(store, name), out_dir, settings.objective.direction)
    seed = policy.sampler_seed(settings.sampler_seed, store, name, existing)
    if not (existing or spec is not None):
        return FoundStudy(store, name, False, None, {}, None, policy, seed)
    stored = optuna.load_study(study_name=name, storage=store)
    return FoundStudy(store, name, True, read_plan(stored), read_dists(stored), spec, policy, seed)


def _spec_probes(spec: StoredSpec, settings: SearchSettings) -> tuple[Any, Any]:
    if settings.probes.lr_find is not None or settings.probes.probe is not None:
        raise UsageError("a worker that joins a study takes the study's probes: drop ProbeSettings(lr_find=..., probe=...)")
    return spec_probes(spec)


def _spec_settings(task: Any, settings: SearchSettings, sp: SearchSpace) -> dict[str, Any]:
    """The part of a study's spec known before any probe: version, task, space and the settings' study fields."""
    return {"version": __version__, "task": task if isinstance(task, str) else None, "space": space_dict(sp),
            **settings.study_dict(), "task_config": settings.task_config or {}}


def study_spec(task: Any, settings: SearchSettings, sp: SearchSpace, probes: Probes, plan: Plan,
               dists: dict[str, Any]) -> StoredSpec:
    """What every worker of a shared study must agree on, as the study keeps it: the settings' study
    fields, the task and space, each batch's split and the probes' results (the seed trial's params
    are added once it is queued)."""
    batches = sorted({int(b) for n in ("batch", "batch_size") if n in dists for b in getattr(dists[n], "choices", ())})
    known = _spec_settings(task, settings, sp)
    own = {k: known.pop(k) for k in ("version", "task", "space")}
    spec = {**own, **known, "splits": {str(b): list(split_batch(b, plan.max_micro)) for b in batches},
            "lr_find": probes.lr_find.to_dict() if probes.lr_find is not None else None,
            "probe": probes.probe.to_dict() if probes.probe is not None else None}
    return dataclasses.replace(StoredSpec.from_stored(json.loads(json.dumps(spec, default=str))), held=None)


def _no_end(state: str) -> None:
    """A trial ended (replaced by the progress bar's update when trials run)."""


def _run_trials(backend: Backend, work: Work) -> list[str]:
    """The backend runs the trials still missing, under one progress bar with the best value; the
    states of those that ended, in order."""
    remaining = max(0, expected(work.study, work.target, work.settings.confirm) - finished_count(work.study))
    ended: list[str] = []
    if not remaining:
        return ended
    with bar(remaining, "search", "trial", work.settings.progress) as b:
        def on_end(state: str) -> None:
            ended.append(state)
            best = next((f"{t.value:.4f}" for t in [best_trial(work.study)] if t is not None), "-")
            b.set_postfix_str(f"best {best}, last {state.lower()}", refresh=False)
            b.update(1)

        backend.run(dataclasses.replace(work, on_end=on_end))
    return ended
