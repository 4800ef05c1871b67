"""A study read back as a :class:`~tunekit.results.SearchResult`: its trials, best, plan and probes."""

from __future__ import annotations

# Imported where used, not at the top: optuna; importing this module does not pay for them.
from pathlib import Path
from typing import Any, Optional

from tunekit.hpsearch.confirm import is_confirmation, runs_of
from tunekit.hpsearch.keys import CONFIRM_KEY, DESIGN_BATCH_KEY
from tunekit.hpsearch.seeding import Probes
from tunekit.hpsearch.study import excluded, safe_url, trial_dicts
from tunekit.hpsearch.worker_study import OpenedStudy, Prepared
from tunekit.hpsearch.seeded_space import lr_bounds_from_curve, widened
from tunekit.inputs.space import SearchSpace
from tunekit.objective import Objective, objective_of
from tunekit.results import SearchResult
from tunekit.results.confirmation import Confirmation, choose, shortfall

__all__ = ["build_result", "best_trial"]


def best_trial(study: Any) -> Any:
    """The study's best finished trial (by its direction), or None."""
    import optuna

    done = study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.COMPLETE,))
    return Objective.of_direction(study.direction).best(done)


def build_result(prep: Prepared, opened: OpenedStudy, seconds: float) -> SearchResult:
    """The search's result, from what the study holds now (``prep``: what its trials share; ``opened``:
    the study as this worker opened it; ``seconds``: what the result reports)."""
    import optuna

    study, settings, sp, probes, plan = opened.study, prep.settings, prep.inputs.space, prep.probes, prep.plan
    objective = objective_of(plan)
    trials = trial_dicts(study)
    best = objective.best(trials)
    confirmation = _confirmation(study, objective, best)
    note = _shortfall(study, settings, probes.seconds + sum(float(t.get("seconds") or 0.0) for t in trials))
    weights = _kept(best)
    if confirmation is not None:  # the answer is the configuration chosen by its mean; its kept run's weights
        best = next(t for t in trials if t["number"] == confirmation.chosen)
        weights = _kept(next((t for t in trials if t["number"] == confirmation.kept), None))
    result = SearchResult(
        study_name=study.study_name, storage=safe_url(prep.found.policy.storage_url(prep.found.store)),
        space=sp.name, direction=objective.direction, objective=objective.name,
        best_value=confirmation.mean if confirmation is not None else best["value"] if best else None,
        best_params=best["params"] if best else {}, best_config=best["config"] if best else {}, trials=trials,
        seed_params=opened.seed_params,
        distributions={n: optuna.distributions.distribution_to_json(d) for n, d in prep.dists.items()},
        budget=prep.inputs.budget.to_dict(), task=prep.named, plan=plan.to_dict(), probe_samples=probes.samples,
        seconds=seconds, seed=settings.seed, sampler_seed=settings.sampler_seed, probe_seconds=probes.seconds,
        device=probes.probe.device if probes.probe is not None else None, time_limit=settings.study.time_limit,
        lr_find=_lr_find_summary(probes.lr_find, sp, probes.own_lr_find),
        probe=_probe_summary(probes, study.user_attrs.get(DESIGN_BATCH_KEY)),
        keep=settings.keep, best_weights=weights, widened=widened(sp, prep.dists), confirmation=confirmation,
        confirm_note=note if best is not None else None)
    result.param_importances = result.importances()
    return result


def _confirmation(study: Any, objective: Objective, best: Optional[dict[str, Any]]) -> Optional[Confirmation]:
    """The confirmed configurations and the one chosen by its mean (None: the search confirmed none)."""
    if best is None:
        return None
    skip = excluded(study)
    trials = study.get_trials(deepcopy=False)
    done = not any(is_confirmation(t.user_attrs) and not t.state.is_finished() and t.number not in skip for t in trials)
    return choose(runs_of(trials, skip), objective, (best["number"], best["value"]), done)


def _shortfall(study: Any, settings: Any, device_seconds: float) -> Optional[str]:
    """What the result says where fewer confirmation runs ran than asked (None: all ran, or none was asked)."""
    confirm = settings.confirm
    if confirm.top <= 0:
        return None
    skip = excluded(study)
    chosen = study.user_attrs.get(CONFIRM_KEY)
    ran = sum(1 for t in study.get_trials(deepcopy=False)
              if is_confirmation(t.user_attrs) and t.state.is_finished() and t.number not in skip)
    limit = settings.study.time_limit
    return shortfall(confirm.top, confirm.seeds, None if chosen is None else len(chosen), ran,
                     limit is not None and device_seconds >= limit)


def _kept(best: Optional[dict[str, Any]]) -> Optional[str]:
    """The best trial's weights file, where it was kept and is still there."""
    path = (best or {}).get("weights")
    return str(path) if path and Path(path).is_file() else None


def _lr_find_summary(lf: Any, sp: SearchSpace, own: bool) -> Optional[dict[str, Any]]:
    if lf is None or "lr" not in sp.entries:
        return None
    # One update a point of each sweep, and the short runs' updates where they ran.
    updates = (sum(len(r.get("lrs") or ()) for r in lf.repeats) or len(lf.lrs)) + int((lf.refinement or {}).get("updates", 0))
    return {"suggestion": lf.suggestion, "samples": lf.samples, "updates": updates, "seconds": lf.seconds,
            "refined": bool(lf.refinement), "own": own, "run_steps": lf.settings.run_steps,
            "lr_bounds": list(lr_bounds_from_curve(lf, sp.entries["lr"].margin))}


def _probe_summary(probes: Probes, design: Optional[dict[str, Any]]) -> Optional[dict[str, Any]]:
    pr = probes.probe
    if pr is None:
        return None
    return {"max_batch": pr.max_batch, "critical_batch": pr.critical_batch, "samples": pr.samples,
            "updates": pr.updates, "seconds": pr.seconds, "critical_batch_range": pr.critical_batch_range,
            "noise_not_measured": probes.noise_not_measured, "design_batch": design,
            "memory_warning": pr.memory_warning, "busy_batches": pr.busy_batches}
