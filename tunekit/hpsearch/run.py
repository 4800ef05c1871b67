"""``tunekit.search``: a seeded Optuna search with early stopping, through the shared step.

1. The study's storage is opened first, so a clash or a bad storage fails at once.
2. The probes the space needs run (or their saved results are used), with the
   trials' own step settings: the LR range test bounds the LR at its batch, the
   batch probe gives the effective batches near the critical batch and the
   memory model that splits them into micro-batches.
3. A :class:`~tunekit.hpsearch.plan.Plan` fixes what every trial shares: the
   budget in samples, the LR's reference batch and rescaling rule, the largest
   micro-batch, the seed, the validation set.
4. The seed trial and a small design around it are enqueued; TPE samples the rest.
5. A backend (local, or Ray Tune) runs trials until the study holds ``trials``
   finished ones; successive halving on samples seen stops the weak ones.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional

from tunekit.errors import UsageError, check_int
from tunekit.inputs.space import SearchSpace, batch_centre, load_space, lr_bounds_from_curve, reference_batch
from tunekit.hpsearch.budget import Budget, parse_budget, resolve_budget
from tunekit.hpsearch.plan import MIN_UPDATES, Plan, initial_design, lr_rule_for, trial_config
from tunekit.results import SearchResult, write_report
from tunekit.hpsearch.rungs import ladder, make_pruner
from tunekit.hpsearch.study import (check_resume, default_name, enqueue_design, finished_count, keep_plan, make_sampler, make_storage,
                    open_study, stored_plan, study_exists, trial_dicts)
from tunekit.hpsearch.study import SPEC_KEY, safe_url
from tunekit.hpsearch.study import resume as resume_study
from tunekit.hpsearch.shared.workers import (check_spec, claim_creation, default_threads, register_worker, space_dict, spec_probes,
                     wait_for_spec, worker_seed)
from tunekit.hpsearch.shared.workers import worker_id as default_worker_id

__all__ = ["search"]

# Validation reads at most this many samples (the first ones, in the set's own order).
EVAL_SAMPLES = 4096
DESIGN_TRIALS = 5


@dataclass
class _Probes:
    lr_find: Any = None
    probe: Any = None
    samples: int = 0


def search(
    task: Any = "shapes",
    space: str | SearchSpace = "from_scratch",
    *,
    task_config: Optional[dict[str, Any]] = None,
    trials: int = 12,
    budget: Any = None,
    max_steps: Optional[int] = None,
    storage: Optional[str] = None,
    study_name: Optional[str] = None,
    resume: bool = False,
    seed: int = 0,
    sampler_seed: Optional[int] = None,
    out: str | Path | None = None,
    lr_find_result: Any = None,
    probe_result: Any = None,
    backend: str = "local",
    sampler: str = "tpe",
    seed_trial: bool = True,
    design: Optional[int] = None,
    prune: bool = True,
    reduction_factor: int = 3,
    rungs: Optional[int] = None,
    first_rung: Optional[float] = None,
    evals: int = 8,
    memory_budget: Optional[str] = None,
    device: str = "auto",
    progress: bool = False,
    cpus_per_trial: float = 1,
    gpus_per_trial: float = 0,
    max_concurrent: Optional[int] = None,
    max_failures: int = 0,
    address: Optional[str] = None,
    storage_path: Optional[str] = None,
    ray_init: Optional[dict[str, Any]] = None,
    grace_period: Optional[int] = None,
    worker_id: Optional[str] = None,
    threads: Optional[int] = None,
    run_trials: bool = True,
    join_timeout: float = 1800.0,
    artifacts: Optional[str] = None,
) -> SearchResult:
    """Search a space for the best training configuration of ``task``.

    ``task``: a spec (``shapes``, ``pkg.mod:fn``, ``file.py:fn``; its function gets the space's
    ``task.*`` entries over ``task_config``) or a :class:`Task`. ``trials``: finished trials the
    study should hold (a resumed search runs only what is missing). ``budget``: what one full
    trial may draw, ``"4000samples"``, ``"2epochs"``, ``"1e6tokens"`` or ``"200updates"`` (at the
    task's batch; ``max_steps=N`` is ``"Nupdates"``), by default one run of the task's recipe; a
    trial at effective batch B runs budget / B updates. ``seed`` seeds the trials' models and
    data order and the probes, ``sampler_seed`` (default ``seed``) the sampler. ``design``
    trials (5 with a seeded LR) replace TPE's random start-up. Early stopping: successive
    halving on samples, ``evals`` reports a trial, ``rungs`` rungs or one from ``first_rung``
    (a fraction of the budget), keeping the best 1 / ``reduction_factor``. ``backend="ray"``:
    Ray Tune runs the trials (``cpus_per_trial``, ``gpus_per_trial``, ``max_concurrent``,
    ``max_failures``, ``address``, ``storage_path``, ``ray_init``). See the README for each.

    A ``storage`` is shared: the first search creates the study and runs the probes, the others
    join it (:mod:`tunekit.hpsearch.shared.workers`: ``grace_period``, ``worker_id``, ``threads``,
    ``join_timeout``, ``artifacts``); ``run_trials=False`` creates the study and runs no trial.
    """
    import optuna

    _check_args(backend, trials, reduction_factor, evals, max_failures, max_concurrent, cpus_per_trial,
                gpus_per_trial, address, storage_path, sampler, rungs, design)
    start, shared = time.perf_counter(), storage is not None
    budget, sp, base_task, base_cfg = _inputs(task, space, task_config, budget, max_steps, device)
    out_dir, sampler_seed = Path(out) if out is not None else None, seed if sampler_seed is None else sampler_seed

    # 1. The study's storage, before any probe runs. A shared study is created by one worker,
    #    which runs the probes; the others join: they take its spec and run no probe.
    name = default_name(base_task.name, sp.name, study_name)
    store, existing, old_plan, old_dists = _open(storage, out_dir, name, resume, grace_period)
    spec = _join(store, name, shared, existing, join_timeout)
    if spec is not None:
        existing, (old_plan, old_dists) = True, stored_plan(store, name)
        lr_find_result, probe_result = _spec_probes(spec, lr_find_result, probe_result)

    # 2. Probes (or their saved results), with the trials' step settings.
    bud = _budget(budget, base_task, base_cfg)
    probes = _probes(base_task, sp, base_cfg, bud, out_dir, existing, lr_find_result, probe_result,
                     memory_budget, device, seed, progress)
    if existing:
        probes.samples = int(old_plan.get("probe_samples", probes.samples))

    # 3. The plan every trial shares, and the space seeded from the probes.
    plan = _plan(sp, base_task, base_cfg, bud, probes, seed, evals, device)
    dists = sp.distributions(probes.lr_find, probes.probe, max_batch=max(1, bud.samples // MIN_UPDATES))
    if old_dists:  # the space a study started with stays its space
        dists = {n: optuna.distributions.json_to_distribution(d) for n, d in old_dists.items()}
        check_resume(old_plan, plan.to_dict(), f"'{name}'")
    mine = _spec(task, task_config, sp, trials, budget, seed, sampler_seed, sampler, prune, reduction_factor, rungs,
                 first_rung, seed_trial, design, evals, probes, plan, dists)
    if spec is not None:
        check_spec(spec, mine, name)
    if backend == "ray":
        _check_packing(gpus_per_trial, dists, plan, probes.probe)

    # 4. The study, its seed trial and design (once, by the creator), this worker's sampler.
    study, seed_params, threads_before = _worker_study(
        store, name, spec, mine, existing, resume, sp, dists, plan, probes, bud, base_task, base_cfg, seed,
        sampler=sampler, sampler_seed=sampler_seed, trials=trials, seed_trial=seed_trial, design=design,
        backend=backend, shared=shared, worker_id=worker_id, threads=threads, prune=prune,
        reduction_factor=reduction_factor, evals=evals, rungs=rungs, first_rung=first_rung, artifacts=artifacts,
        out_dir=out_dir)

    # 5. Run until the study holds `trials` finished trials. Interrupted (Ctrl-C), the
    #    report of what finished is written all the same, and --resume goes on from it.
    try:
        if run_trials:
            ray_kw = dict(cpus_per_trial=cpus_per_trial, gpus_per_trial=gpus_per_trial, max_concurrent=max_concurrent,
                          max_failures=max_failures, address=address, storage_path=storage_path, **(ray_init or {}))
            _run_backend(backend, study, dists, plan, task, trials, prune, progress, out_dir, store, shared, ray_kw)
    finally:
        _set_threads(threads_before)  # the caller's (a notebook's) threads again
        result = _result(study, name, store, storage, sp, dists, seed_params, bud, plan, probes, seed, sampler_seed,
                         time.perf_counter() - start, task if isinstance(task, str) else None)
        if out_dir is not None:
            write_report(result, out_dir)
    return result


# --- stages ---------------------------------------------------------------------------


def _inputs(task: Any, space: str | SearchSpace, task_config: Optional[dict[str, Any]], budget: Any,
            max_steps: Optional[int], device: str) -> tuple[Any, SearchSpace, Any, Any]:
    """(the budget's spec, the space with the fixed task settings, the task at them, its recipe).
    A bad budget or space fails here, before anything runs."""
    from tunekit.training.loop import TrainConfig

    budget = _budget_spec(budget, max_steps)
    parse_budget(budget)
    sp = space if isinstance(space, SearchSpace) else load_space(space)
    sp = _with_task_config(sp, task, task_config)
    base_task = _base_task(task, sp)
    return budget, sp, base_task, TrainConfig.for_task(base_task, device=device)


def _worker_study(store: Any, name: str, spec: Optional[dict[str, Any]], mine: dict[str, Any], existing: bool,
                  resume: bool, sp: SearchSpace, dists: dict[str, Any], plan: Plan, probes: _Probes, bud: Budget,
                  base_task: Any, base_cfg: Any, seed: int, *, sampler: str, sampler_seed: int, trials: int,
                  seed_trial: bool, design: Optional[int], backend: str, shared: bool, worker_id: Optional[str],
                  threads: Optional[int], prune: bool, reduction_factor: int, evals: int, rungs: Optional[int],
                  first_rung: Optional[float], artifacts: Optional[str],
                  out_dir: Optional[Path]) -> tuple[Any, dict[str, Any], Optional[int]]:
    """The study opened for this worker: (study, the seed trial's params, the threads to restore after).

    Each worker of a shared study samples with its own seed (from the study's and its id), and
    with constant_liar, so none proposes what another runs; only the creator enqueues the seed
    trial and design, and stores the spec that joining workers wait for."""
    n_design = _design_size(design, sp, probes, seed_trial)
    wid = worker_id or default_worker_id()
    smp_seed = _sampler_seed(shared, sampler_seed, wid, store, name, existing)
    smp = make_sampler(sampler, smp_seed, n_design or max(3, min(10, trials // 3)), parallel=backend == "ray" or shared)
    rung_list = ladder(bud.samples, trials, reduction_factor, evals, rungs, first_rung)
    study = open_study(store, name, smp, make_pruner(bud.samples // evals, evals, rung_list, reduction_factor, prune,
                                                     adaptive=rungs is None and first_rung is None))
    keep_plan(study, {**plan.to_dict(), "probe_samples": probes.samples, "budget": bud.to_dict(),
                      "sampler_seed": sampler_seed, "rungs": rung_list}, dists)
    if resume:
        resume_study(study, shared=shared, store=store)
    seed_params: dict[str, Any] = {}
    if spec is not None:  # a joining worker: the creator has queued the seed trial and design, once
        seed_params = dict(spec.get("seed_params") or {})
    elif seed_trial or n_design:
        seed_params = _enqueue_design(study, dists, probes, n_design, trials, _recipe(base_task, base_cfg, seed))
    if spec is None and SPEC_KEY not in study.user_attrs:  # the creator, last: joining workers wait for it
        _keep_spec(study, {**mine, "seed_params": seed_params}, artifacts, out_dir)
    return study, seed_params, _become_worker(study, wid, smp_seed, threads, shared)


def _budget_spec(budget: Any, max_steps: Optional[int]) -> Any:
    if max_steps is None:
        return budget
    if budget is not None:
        raise UsageError("give the budget once: budget (e.g. budget=4000samples) or max_steps, not both")
    if isinstance(max_steps, bool) or not isinstance(max_steps, int) or max_steps < 2:
        raise UsageError(f"max_steps must be >= 2, got {max_steps!r}: pass e.g. max_steps=200")
    return f"{max_steps}updates"


def _open(storage: Optional[str], out_dir: Optional[Path], name: str, resume: bool,
          grace_period: Optional[int] = None) -> tuple[Any, bool, dict[str, Any], dict[str, str]]:
    """(storage, whether the study exists, its stored plan and distributions); clashes refused."""
    import optuna

    optuna.logging.set_verbosity(optuna.logging.ERROR)  # failures are in the table, with their errors
    if out_dir is not None:
        out_dir.mkdir(parents=True, exist_ok=True)
    report = out_dir / "search.json" if out_dir is not None else None
    if report is not None and report.is_file():
        import json

        other = json.loads(report.read_text()).get("study_name")
        if other and other != name:
            raise UsageError(f"{out_dir} holds the report of study '{other}': give this search (study '{name}') "
                             "another out=DIR, so neither overwrites the other")
    store = make_storage(storage, out_dir, grace_period)
    existing = study_exists(store, name)
    if existing and not resume and storage is None:
        raise UsageError(f"study '{name}' already exists in {out_dir}: pass resume=True to continue it, or another out=DIR or study=NAME")
    if resume and storage is None and out_dir is not None and not existing:
        raise UsageError(f"resume: there is no study '{name}' in {out_dir} to continue: drop resume=True to start one")
    old_plan, old_dists = stored_plan(store, name) if existing else ({}, {})
    return store, existing, old_plan, old_dists


def _join(store: Any, name: str, shared: bool, existing: bool, timeout: float) -> Optional[dict[str, Any]]:
    """The study's spec when this worker joins a shared study; None when it creates it (or none is shared)."""
    if not shared or not existing and claim_creation(store, name):
        return None
    return wait_for_spec(store, name, timeout)


def _spec_probes(spec: dict[str, Any], lr_find_result: Any, probe_result: Any) -> tuple[Any, Any]:
    if lr_find_result is not None or probe_result is not None:
        raise UsageError("a worker that joins a study takes the study's probes: drop lr_find_result= and probe_result=")
    return spec_probes(spec)


def _spec(task: Any, task_config: Optional[dict[str, Any]], sp: SearchSpace, trials: int, budget: Any, seed: int,
          sampler_seed: int, sampler: str, prune: bool, reduction_factor: int, rungs: Optional[int],
          first_rung: Optional[float], seed_trial: bool, design: Optional[int], evals: int, probes: _Probes,
          plan: Plan, dists: dict[str, Any]) -> dict[str, Any]:
    """What every worker of a shared study must agree on, as the study keeps it (JSON)."""
    import json

    from tunekit.version import __version__
    from tunekit.hpsearch.plan import split_batch

    batches = sorted({int(b) for n in ("batch", "batch_size") if n in dists for b in getattr(dists[n], "choices", ())})
    splits = {str(b): list(split_batch(b, plan.max_micro)) for b in batches}
    out = {"version": __version__, "task": task if isinstance(task, str) else None, "task_config": task_config or {},
           "space": space_dict(sp), "trials": trials, "budget": budget, "seed": seed, "sampler_seed": sampler_seed,
           "sampler": sampler, "prune": prune, "reduction_factor": reduction_factor, "rungs": rungs,
           "first_rung": first_rung, "seed_trial": seed_trial, "design": design, "evals": evals, "splits": splits,
           "lr_find": probes.lr_find.to_dict() if probes.lr_find is not None else None,
           "probe": probes.probe.to_dict() if probes.probe is not None else None}
    return json.loads(json.dumps(out, default=str))


def _sampler_seed(shared: bool, sampler_seed: int, wid: str, store: Any, name: str, existing: bool) -> int:
    """A shared study's worker: its own seed. One process: the study's, moved on by the trials it holds
    (a resumed search does not replay the first run's proposals)."""
    if shared:
        return worker_seed(sampler_seed, wid)
    import optuna

    return sampler_seed + (len(optuna.load_study(study_name=name, storage=store).trials) if existing else 0)


def _keep_spec(study: Any, spec: dict[str, Any], artifacts: Optional[str], out_dir: Optional[Path]) -> None:
    """The study's spec (and, with an artifact folder, the probes' files attached to the study)."""
    if artifacts is not None and out_dir is not None:
        from tunekit.hpsearch.shared.server import attach

        attach(study, artifacts, [out_dir / f"{n}.{x}" for n in ("lr_find", "probe") for x in ("json", "png")])
    study.set_user_attr(SPEC_KEY, spec)


def _become_worker(study: Any, wid: str, smp_seed: int, threads: Optional[int], shared: bool) -> Optional[int]:
    """A worker of a shared study registers (its id, seed and threads); it, or a search given ``threads``,
    sets its torch threads. Returns the threads before (None when unchanged)."""
    if threads is not None:
        check_int("threads", threads, hint="pass e.g. threads=4")
    if not shared and threads is None:
        return None
    n = threads or default_threads(study)
    if shared:
        register_worker(study, wid, smp_seed, n)
    return _set_threads(n)


def _set_threads(n: Optional[int]) -> Optional[int]:
    if n is None:
        return None
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(n)
    return before


def _check_args(backend: str, trials: int, reduction_factor: int, evals: int, max_failures: int,
                max_concurrent: Optional[int], cpus: float, gpus: float, address: Optional[str],
                storage_path: Optional[str], sampler: str, rungs: Optional[int], design: Optional[int]) -> None:
    if backend not in ("local", "ray"):
        raise UsageError(f"backend {backend!r} is unknown: use local or ray")
    check_int("trials", trials, hint="pass e.g. trials=12")
    check_int("reduction_factor", reduction_factor, minimum=2, hint="pass e.g. reduction_factor=3")
    check_int("evals", evals, hint="evaluations per trial: pass e.g. evals=8")
    check_int("max_failures", max_failures, minimum=0, hint="pass e.g. max_failures=2")
    if rungs is not None:
        check_int("rungs", rungs, minimum=0, hint="pass e.g. rungs=2")
    if design is not None:
        check_int("design", design, minimum=0, hint="pass e.g. design=5")
    if max_concurrent is not None:
        check_int("max_concurrent", max_concurrent, hint="pass e.g. max_concurrent=4")
    for flag, v in (("cpus_per_trial", cpus), ("gpus_per_trial", gpus)):
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not (v >= 0 and math.isfinite(v)):
            raise UsageError(f"{flag} must be a number >= 0, got {v!r}: pass e.g. {flag}=1")
    if cpus <= 0 and gpus <= 0:
        raise UsageError("a trial needs some resource: pass e.g. cpus_per_trial=1, or gpus_per_trial above 0")
    if gpus > 1 and gpus != int(gpus):
        raise UsageError(f"gpus_per_trial {gpus:g} is above 1 but not whole: use a fraction below 1 or a whole number")
    if backend == "local" and (address or storage_path or gpus or max_concurrent or max_failures):
        raise UsageError("address=..., storage_path=..., gpus_per_trial=..., max_concurrent=... and max_failures=... apply to "
                         "the Ray backend: pass backend=ray, or drop them")
    if sampler not in ("tpe", "random"):
        raise UsageError(f"sampler {sampler!r} is unknown: use tpe or random")
    if backend == "ray":
        from tunekit.hpsearch.backends.ray.cluster import check_address, ray_available

        if not ray_available():
            raise UsageError("backend=ray needs Ray Tune: pip install 'tunekit[ray]' (or 'ray[tune]')")
        if address:
            check_address(address)  # before the probes: a wrong address fails at once


def _with_task_config(sp: SearchSpace, task: Any, task_config: Optional[dict[str, Any]]) -> SearchSpace:
    """The space with ``task_config`` (``--set KEY=VALUE``) as fixed ``task.KEY`` entries under its own."""
    if not task_config:
        return sp
    from tunekit.inputs.task import Task

    if isinstance(task, Task):
        raise UsageError("task_config (--set) needs the task as a spec (pkg.mod:fn) whose function takes a config")
    from tunekit.inputs.space import Entry

    fixed = {f"task.{k}": Entry(f"task.{k}", "fixed", value=v) for k, v in task_config.items()}
    return SearchSpace(sp.name, sp.description, {**fixed, **sp.entries})


def _base_task(task: Any, sp: SearchSpace) -> Any:
    from tunekit.inputs.task_spec import load_task
    from tunekit.inputs.task import Task

    if isinstance(task, Task) and any(n.startswith("task.") for n in sp.entries):
        raise UsageError(f"space '{sp.name}' varies task hyperparameters (task.*): pass the task as a spec "
                         "(pkg.mod:fn) whose function takes a config")
    fixed_task_cfg = {n[5:]: v for n, v in sp.fixed().items() if n.startswith("task.")}
    base = task if isinstance(task, Task) else load_task(task, fixed_task_cfg or None)
    if base.val_data is None:
        raise UsageError("search needs validation data to compare and prune trials: give the task val_data")
    return base


def _budget(spec: Any, task: Any, cfg: Any) -> Budget:
    from tunekit.inputs.data import dataset_size

    task_batch = int(cfg.batch_size or task.batch_size or 1) * int(cfg.accumulation_steps or 1)
    tokens = _tokens_per_sample(task, cfg) if isinstance(spec, str) and "token" in spec else None
    return resolve_budget(spec, task_batch=task_batch, default_updates=int(cfg.max_steps),
                          dataset_size=dataset_size(task.train_data), tokens_per_sample=tokens)


def _tokens_per_sample(task: Any, cfg: Any) -> Optional[int]:
    """Tokens in one training sample: the sequence length of integer token ids (batch, sequence)."""
    import torch

    from tunekit.inputs.data import BatchStream

    batch = next(iter(BatchStream(task.train_data, cfg.batch_size or task.batch_size, seed=0)))
    first = batch.get("input_ids") if isinstance(batch, dict) else batch[0] if isinstance(batch, (list, tuple)) else batch
    if isinstance(first, torch.Tensor) and first.ndim == 2 and not first.is_floating_point():
        return int(first.shape[1])
    return None


def _probes(task: Any, sp: SearchSpace, cfg: Any, bud: Budget, out_dir: Optional[Path], existing: bool,
            lr_find_result: Any, probe_result: Any, memory_budget: Optional[str], device: str, seed: int,
            progress: bool) -> _Probes:
    """The range test and batch probe the space needs, run with the trials' step settings, or loaded."""
    if existing and out_dir is not None:  # a study keeps the probes it was seeded with
        if lr_find_result is None and (out_dir / "lr_find.json").is_file():
            lr_find_result = out_dir / "lr_find.json"
        if probe_result is None and (out_dir / "probe.json").is_file():
            probe_result = out_dir / "probe.json"
    found = _Probes(_load_result(lr_find_result, "lr_find"), _load_result(probe_result, "probe"))
    clip = sp.fixed().get("clip_grad_norm", cfg.clip_grad_norm)
    precision = sp.fixed().get("precision", cfg.precision)
    for kind, saved in (("lr_find", found.lr_find), ("probe", found.probe)):
        if saved is not None:
            _check_saved(kind, saved.settings, task.name, precision or task.precision, device)
    if sp.needs_lr_find and found.lr_find is None:
        from tunekit.probes.range_test import lr_find

        found.lr_find = lr_find(task, device=device, seed=seed, progress=progress, clip_grad_norm=clip,
                                accumulation_steps=int(cfg.accumulation_steps), precision=precision,
                                refine=False)  # the space spans decades around it: the sweep alone seeds it
        found.samples += found.lr_find.samples
        _save(found.lr_find, out_dir, "lr_find")
    if sp.needs_probe and found.probe is None:
        from tunekit.probes.batch_probe import probe

        # Timings decide nothing in a search (they vary with the machine's load), so the
        # throughput sweep is skipped; no batch above what the budget can use is tried.
        found.probe = probe(task, memory_budget=memory_budget, device=device, seed=seed, progress=progress,
                            clip_grad_norm=clip, precision=precision, throughput_points=0,
                            max_batch=max(1, bud.samples // MIN_UPDATES))
        found.samples += found.probe.samples
        _save(found.probe, out_dir, "probe")
    return found


def _save(result: Any, out_dir: Optional[Path], name: str) -> None:
    """A probe's JSON and its plot, written together."""
    if out_dir is None:
        return
    from tunekit.plotting import save_plot

    result.to_json(out_dir / f"{name}.json")
    save_plot(result.plot, str(out_dir / f"{name}.png"))


def _check_saved(kind: str, settings: dict[str, Any], task_name: str, precision: str, device: str) -> None:
    """A saved range test or probe must be of this task, precision and device: refuse it otherwise."""
    from tunekit.training.step import resolve_device

    want = {"task": task_name, "precision": precision, "device": str(resolve_device(device))}
    for key, value in want.items():
        have = settings.get(key)
        if have is not None and str(have) != str(value):
            raise UsageError(f"the saved {kind} result is for {key} {have!r}, this search runs {key} {value!r}: "
                             f"run tunekit {kind.replace('_', '-')} for it again, or leave the saved result out")


def _load_result(value: Any, kind: str) -> Any:
    if value is None or not isinstance(value, (str, Path)):
        return value
    path = Path(value)
    flag = kind.replace("_", "-")
    if not path.is_file():
        raise UsageError(f"the saved {kind} file '{path}' does not exist: run tunekit {flag} first, or leave it out")
    if kind == "lr_find":
        from tunekit.probes.range_test import LRFindResult

        return LRFindResult.from_json(path)
    from tunekit.probes.batch_probe import ProbeResult

    return ProbeResult.from_json(path)


def _plan(sp: SearchSpace, task: Any, cfg: Any, bud: Budget, probes: _Probes, seed: int, evals: int,
          device: str) -> Plan:
    lr_entry = sp.entries.get("lr")
    ref = reference_batch(probes.lr_find) if lr_entry is not None and lr_entry.seeded == "lr_find" else None
    rule = "none"
    if ref:
        rule = lr_entry.scale_with_batch or "auto"  # type: ignore[union-attr]
        if rule == "auto":
            rule = lr_rule_for(task.make_optimizer(task.make_model(seed)))
    task_batch = int(cfg.batch_size or task.batch_size or 1)
    eval_bs = int(task.batch_size or cfg.batch_size or 1)
    from tunekit.inputs.data import dataset_size

    n_val = dataset_size(task.val_data)
    eval_batches = None if n_val is None or n_val <= EVAL_SAMPLES else max(1, EVAL_SAMPLES // eval_bs)
    return Plan(budget_samples=bud.samples, seed=seed, task_batch=task_batch * int(cfg.accumulation_steps or 1),
                max_micro=int(probes.probe.max_batch) if probes.probe is not None else 1 << 30,
                ref_batch=ref, lr_rule=rule, evals=evals, device=device, eval_batch_size=eval_bs,
                eval_batches=eval_batches, fixed=sp.fixed())


def _check_packing(gpus_per_trial: float, dists: dict[str, Any], plan: Plan, pr: Any) -> None:
    if not (0 < gpus_per_trial < 1 and pr is not None and str(pr.device).startswith("cuda")):
        return
    from tunekit.hpsearch.plan import split_batch
    from tunekit.hpsearch.backends.ray import check_packing

    if "batch" in dists:
        micro = max(split_batch(int(b), plan.max_micro)[0] for b in dists["batch"].choices)
    elif "batch_size" in dists:
        d = dists["batch_size"]
        micro = int(max(d.choices) if hasattr(d, "choices") else d.high)
    else:
        micro = int(plan.fixed.get("batch_size") or plan.task_batch)
    check_packing(gpus_per_trial, pr.predicted_peak(micro), pr.usable_bytes, f"micro-batch {micro}, by the probe's memory model")


def _design_size(design: Optional[int], sp: SearchSpace, probes: _Probes, seed_trial: bool) -> int:
    if design is not None:
        return design
    if not seed_trial:
        return 0
    return DESIGN_TRIALS if probes.lr_find is not None and "lr" in sp.entries else 1


def _recipe(task: Any, cfg: Any, seed: int) -> dict[str, Any]:
    """The task's own settings: its training defaults, and its optimizer's weight decay and LR
    (the task's ``defaults["lr"]`` first: what its author trains with)."""
    import dataclasses

    recipe = {k: v for k, v in dataclasses.asdict(cfg).items() if v is not None}
    groups = task.make_optimizer(task.make_model(seed)).param_groups
    if "weight_decay" in groups[0]:
        recipe["weight_decay"] = float(groups[0]["weight_decay"])
    recipe["lr"] = task.defaults.get("lr") or groups[0].get("lr")
    return recipe


def _enqueue_design(study: Any, dists: dict[str, Any], probes: _Probes, n: int, trials: int,
                    recipe: dict[str, Any]) -> dict[str, Any]:
    """The seed trial (the probes' recommendation) and the design around it, once per study.

    A range test that saw no clear descent (``confident`` False) gives no LR to
    centre on: the design spreads over the LR range instead."""
    lf, pr = probes.lr_find, probes.probe
    lr = lf.suggestion if lf is not None and lf.suggestion and lf.confident else None
    centre = batch_centre(pr, reference_batch(lf)) if "batch" in dists else None
    points = initial_design(dists, lr, centre, max(1, n), recipe)
    enqueue_design(study, points[:trials])
    return points[0]


def _run_backend(backend: str, study: Any, dists: dict[str, Any], plan: Plan, task: Any, trials: int, prune: bool,
                 progress: bool, out_dir: Optional[Path], store: Any, shared: bool, ray_kw: dict[str, Any]) -> None:
    from tunekit.progress import bar

    target = trials
    remaining = max(0, target - finished_count(study))
    if not remaining:
        return
    with bar(remaining, "search", "trial", progress) as b:
        def on_end(state: str) -> None:
            best = next((f"{t.value:.4f}" for t in [_best_trial(study)] if t is not None), "-")
            b.set_postfix_str(f"best {best}, last {state.lower()}", refresh=False)
            b.update(1)

        make_config = lambda params: trial_config(plan, params)  # noqa: E731
        if backend == "ray":
            from tunekit.hpsearch.backends.ray import run_ray

            run_ray(study=study, dists=dists, make_config=make_config, task=task, n_trials=remaining, prune=prune,
                    out_dir=out_dir, on_end=on_end, **ray_kw)
        else:
            from tunekit.hpsearch.backends.local import run_local

            run_local(study=study, dists=dists, make_config=make_config, task=task, target=target, prune=prune,
                      on_end=on_end, store=store, shared=shared)


def _best_trial(study: Any) -> Any:
    import optuna

    done = study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.COMPLETE,))
    return min(done, key=lambda t: t.value) if done else None


def _result(study: Any, name: str, store: Any, storage: Optional[str], sp: SearchSpace, dists: dict[str, Any],
            seed_params: dict[str, Any], bud: Budget, plan: Plan, probes: _Probes, seed: int, sampler_seed: int,
            seconds: float, task_spec: Optional[str]) -> SearchResult:
    import optuna

    trials = trial_dicts(study)
    complete = [t for t in trials if t["state"] == "COMPLETE" and t["value"] is not None]
    best = min(complete, key=lambda t: t["value"]) if complete else None
    lf, pr = probes.lr_find, probes.probe
    result = SearchResult(
        study_name=name, storage=safe_url(str(getattr(store, "url", storage or "in-memory"))), space=sp.name,
        direction="minimize", best_value=best["value"] if best else None, best_params=best["params"] if best else {},
        best_config=best["config"] if best else {}, trials=trials, seed_params=seed_params,
        distributions={n: optuna.distributions.distribution_to_json(d) for n, d in dists.items()},
        budget=bud.to_dict(), task=task_spec, plan=plan.to_dict(), probe_samples=probes.samples, seconds=seconds, seed=seed,
        sampler_seed=sampler_seed,
        lr_find={"suggestion": lf.suggestion, "samples": lf.samples,
                 "lr_bounds": list(lr_bounds_from_curve(lf, sp.entries["lr"].margin))}
        if lf is not None and "lr" in sp.entries else None,
        probe={"max_batch": pr.max_batch, "critical_batch": pr.critical_batch, "samples": pr.samples,
               "critical_batch_range": pr.critical_batch_range} if pr is not None else None,
    )
    result.param_importances = result.importances()
    return result
