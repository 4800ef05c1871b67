"""What a search's probes give it: the probes that seed the space, the plan, the design.

- :func:`run_probes`: the LR range test and batch probe the space needs, run with the trials'
  own step settings, or their saved results (checked to be of this task);
- :func:`make_plan`: what every trial shares (:class:`~tunekit.hpsearch.plan.Plan`);
- :func:`opening`: the seed trial (the probes' recommendation), the design around it and the
  sampler that goes on from them; pure: the study queues the design (:func:`~tunekit.hpsearch.study.open_study`).
"""

from __future__ import annotations

# Imported where used, not at the top: optuna; importing this module does not pay for it.
import dataclasses
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional

from tunekit.defaults import SWEEP_STEPS
from tunekit.errors import UsageError, warn_at_caller
from tunekit.hpsearch.budget import BudgetWarning, price_budget
from tunekit.hpsearch.plan import (AROUND, LARGER, MIN_UPDATES, Plan, initial_design, lr_rule_for, steps_seconds,
                                   nearest_choice, split_batch, updates_for)
from tunekit.hpsearch.resolve import SearchInputs
from tunekit.hpsearch.rungs import branch_plan
from tunekit.hpsearch.seeded_space import batch_centre, reference_batch
from tunekit.hpsearch.settings import SearchSettings
from tunekit.inputs.data import dataset_size
from tunekit.inputs.space import SearchSpace
from tunekit.entry_options import NOISE_REPEATS, Measurement, Refine, StepSettings, Sweep
from tunekit.probes.batch_probe import probe
from tunekit.probes.range_test import lr_find
from tunekit.probes.resolve import check_saved
from tunekit.training.optimizers import is_adaptive_l2
from tunekit.results import LRFindResult, ProbeResult
from tunekit.results.step_time import update_seconds

__all__ = ["Probes", "run_probes", "priced", "make_plan", "design_size", "Opening", "opening", "make_sampler",
           "guided_lr", "seed_and_design", "probe_cap", "noise_repeats", "adaptive_l2", "larger_is_cheaper",
           "twice_batch_share", "design_batch", "recipe", "own_settings", "EVAL_SAMPLES", "DESIGN_TRIALS"]

# Validation reads at most this many samples (the first ones, in the set's own order).
EVAL_SAMPLES = 4096
DESIGN_TRIALS = 5
# Micro-batches the search's probe times, to price its trials in device time.
PRICE_POINTS = 4
# Twice the batch is "cheaper" where its update costs at most this share of two updates at the batch:
# the same samples in at least 10% less device time (a saturated device's timings land near 1.0).
UNSATURATED = 0.9
# The search reads the noise scale for one thing: the batch choices' centre where no range test gave a
# batch (``batch_centre``); with one, the probe does not measure it (its gradients are samples the user pays).


@dataclass
class Probes:
    """The range test and batch probe a study was seeded with, and the samples and seconds they cost."""

    lr_find: Any = None
    probe: Any = None
    samples: int = 0
    seconds: float = 0.0
    own_lr_find: bool = True  # the search's own range test (else the caller's saved result)

    @property
    def noise_not_measured(self) -> Optional[str]:
        """Why the search's probe did not measure the noise scale (None: it did, or no probe ran)."""
        return self.probe.settings.noise_not_measured if self.probe is not None else None

    def note_noise_not_measured(self, why: str) -> None:
        """Note on the probe why the noise scale was not measured (saved with it)."""
        self.probe.settings.noise_not_measured = why


# --- the probes -------------------------------------------------------------------------


def run_probes(inputs: SearchInputs, settings: SearchSettings, existing: bool, saved: tuple[Any, Any]) -> Probes:
    """The range test and batch probe the space needs, run with the trials' step settings, or
    loaded: ``saved`` (lr_find, probe) results or paths, or a resumed study's own files."""
    task, sp, cfg, out_dir = inputs.task, inputs.space, inputs.cfg, settings.out
    lr_find_result, probe_result = saved
    if existing and out_dir is not None:  # a study keeps the probes it was seeded with
        if lr_find_result is None and (out_dir / "lr_find.json").is_file():
            lr_find_result = out_dir / "lr_find.json"
        if probe_result is None and (out_dir / "probe.json").is_file():
            probe_result = out_dir / "probe.json"
    found = Probes(_load_result(lr_find_result, "lr_find"), _load_result(probe_result, "probe"),
                   own_lr_find=saved[0] is None)
    for given, result in ((saved[0], found.lr_find), (saved[1], found.probe)):
        if given is None and result is not None:  # this search's own, from an earlier run: its cost counts
            found.samples += int(result.samples or 0)  # (a study's stored total replaces it, when there is one)
            found.seconds += float(result.seconds or 0.0)
    clip = sp.fixed().get("clip_grad_norm", cfg.clip_grad_norm)
    precision = sp.fixed().get("precision", cfg.precision)
    for kind, result in (("lr_find", found.lr_find), ("probe", found.probe)):
        if result is not None:
            check_saved(kind, result.settings, task.name, precision or task.precision, settings.backend.device)
    step = StepSettings(device=settings.backend.device, clip_grad_norm=clip, precision=precision)
    common = dict(seed=settings.seed, progress=settings.progress)
    _warn_small_budget(inputs, settings, runs_lr_find=sp.needs_lr_find and found.lr_find is None)
    if sp.needs_lr_find and found.lr_find is None:
        # The curve's suggestion for a run of one full trial: the design's first trials run at that length
        # around it, which is what lr_find's short runs estimate (ProbeSettings.lr_refine asks for them).
        sweep = Sweep(sweep_steps=settings.probes.lr_sweep_steps) if settings.probes.lr_sweep_steps else Sweep()
        found.lr_find = lr_find(task, step=dataclasses.replace(step, accumulation_steps=int(cfg.accumulation_steps)),
                                sweep=sweep, refine=Refine(enabled=settings.probes.lr_refine),
                                run_steps=_trial_updates(inputs), **common)
        found.samples += found.lr_find.samples
        found.seconds += found.lr_find.seconds
        _save(found.lr_find, out_dir, "lr_find")
    if (sp.needs_probe or not inputs.budget.priced) and found.probe is None:
        # The timed steps price every trial in device time (and size a budget given in it): they
        # are stored with the study, so its trials are the same on every run. No batch above what
        # the space can offer, or a budget in samples can use, is tried: those steps are the
        # probe's dearest, in samples and in time.
        repeats, skipped = noise_repeats(inputs, found.lr_find)
        measure = Measurement(throughput_points=PRICE_POINTS, batch_limit=probe_cap(inputs, found.lr_find),
                              noise_repeats=repeats, cost_share=0)  # priced by the search's budget, not one run
        found.probe = probe(task, memory_budget=settings.probes.memory_budget, step=step, measure=measure, **common)
        if skipped:
            found.note_noise_not_measured(skipped)
        found.samples += found.probe.samples
        found.seconds += found.probe.seconds
        _save(found.probe, out_dir, "probe")
    return found


def _warn_small_budget(inputs: SearchInputs, settings: SearchSettings, runs_lr_find: bool) -> None:
    """A budget under ``MIN_UPDATES`` updates at the task's batch (its trials cannot run at that batch, nor
    schedule a warmup and a decay), or under what the range test about to run will draw: said, with the
    numbers and the fix, before the probes spend anything."""
    budget = inputs.budget
    if not budget.priced:  # device time: priced, and its batches capped, once the probe has timed a step
        return
    samples, batch = budget.samples, inputs.task_batch
    sweep = settings.probes.lr_sweep_steps or SWEEP_STEPS
    probes = sweep * batch if runs_lr_find else 0
    few = samples < MIN_UPDATES * batch
    if not few and samples >= probes:
        return
    why = [f"under {MIN_UPDATES} updates at the task's batch of {batch} (one update draws {batch:,} "
           f"sample{'s' if batch > 1 else ''})"] if few else []
    if samples < probes:
        why.append(f"under what the probes will draw (the range test alone, up to {sweep} updates at batch {batch}: "
                   f"{probes:,} samples)")
    largest = max(1, samples // MIN_UPDATES)
    runs = f": a trial runs at batch {largest} at most, {updates_for(samples, largest)} updates" if few else ""
    need = max(MIN_UPDATES * batch, probes)
    hints = (f"budget='{need}samples'",) + (("probes=ProbeSettings(lr_find='lr_find.json')",) if probes > samples else ())
    said = "the default budget" if settings.budget is None else f"budget {settings.budget}"
    warn_at_caller(BudgetWarning(
        f"{said} is {samples:,} sample{'s' if samples > 1 else ''} a trial, {' and '.join(why)}{runs}", hints,
        " (a larger budget" + (", or a saved range test)" if len(hints) > 1 else ")")))


def noise_repeats(inputs: SearchInputs, lr_find: Any = None) -> tuple[int, Optional[str]]:
    """The gradients the search's probe measures the noise scale with (0: not measured), and why none."""
    if "batch" not in inputs.space.entries:
        return 0, "not measured: the space has no batch to centre"
    if reference_batch(lr_find) is not None:
        return 0, ("not measured: the batch choices centre on the range test's batch (a noise scale at the start "
                   "of training is a lower bound on the run's)")
    return NOISE_REPEATS, None


def _trial_updates(inputs: SearchInputs) -> Optional[int]:
    """One full trial's optimizer updates at the task's own batch (None for a budget in device time, not
    yet priced: lr_find then plans for the task's recipe)."""
    if not inputs.budget.priced:
        return None
    return updates_for(inputs.budget.samples, inputs.task_batch)  # as the trial at that batch runs them


def probe_cap(inputs: SearchInputs, lr_find: Any) -> Optional[int]:
    """The largest batch the search's probe tries: the space's largest offer (its choices centre on
    the range test's batch or below), and no more than leaves a trial ``MIN_UPDATES`` updates."""
    caps = [inputs.space.largest_batch(reference_batch(lr_find))]
    if inputs.budget.priced:
        caps.append(max(1, inputs.budget.samples // MIN_UPDATES))
    known = [c for c in caps if c is not None]
    return min(known) if known else None


def evaluation(inputs: SearchInputs) -> tuple[int, Optional[int], Optional[int]]:
    """How every trial evaluates: (its eval batch, the batches it stops at (None: all), the batches one
    evaluation reads (None: the validation data's size is not known))."""
    eval_bs = int(inputs.task.batch_size or inputs.cfg.batch_size or 1)
    n_val = dataset_size(inputs.task.val_data) if inputs.task.val_data is not None else 0
    eval_batches = None if n_val is None or n_val <= EVAL_SAMPLES else max(1, EVAL_SAMPLES // eval_bs)
    read = eval_batches if eval_batches is not None else (None if n_val is None else -(-n_val // eval_bs))
    return eval_bs, eval_batches, read


def eval_seconds(inputs: SearchInputs, probes: Probes) -> Optional[float]:
    """One trial evaluation's predicted seconds, from the probe's timed validation batch (None where it
    timed none: an older probe, or a busy machine; the evaluations are then not priced)."""
    eval_bs, _, read = evaluation(inputs)
    if probes.probe is None or read is None:
        return None
    return probes.probe.eval_seconds(eval_bs, read) if read else 0.0


def priced(inputs: SearchInputs, probes: Probes, settings: SearchSettings) -> SearchInputs:
    """The inputs with a budget in device time priced by the probe's timed steps at the task's own batch,
    the trials' evaluations (and rung branches) paid first."""
    if inputs.budget.priced:
        return inputs
    task_batch = inputs.task_batch
    curve = probes.probe.step_times if probes.probe is not None else []
    if not curve and probes.probe is not None and probes.probe.busy_batches:
        raise UsageError(f"budget {inputs.budget.amount:g}s is device time, and every step the probe timed ran while the "
                         "machine was busy (timed again, still spread): run the search when it is quieter, or give the "
                         "budget in samples")
    per_update = update_seconds(curve, *split_batch(task_batch, int(probes.probe.max_batch))) if curve else None
    cooldown, branch_evals = branch_plan(settings.pruner, settings.trials, 0, settings.prune)  # (the ladder is in evaluations)
    steps = None if inputs.budget.seconds is None else steps_seconds(
        inputs.budget.seconds, settings.pruner.evals, eval_seconds(inputs, probes), cooldown, branch_evals)
    return dataclasses.replace(inputs, budget=price_budget(inputs.budget, per_update, task_batch, steps))


def _save(result: Any, out_dir: Optional[Path], name: str) -> None:
    """A probe's JSON and its plot, written together (as the CLI writes them)."""
    if out_dir is not None:
        result.save(out_dir, name)


def _load_result(value: Any, kind: str) -> Any:
    """A saved range test or probe (the result, or its JSON file), or None."""
    return (LRFindResult if kind == "lr_find" else ProbeResult).load(value)


# --- the plan and the design ------------------------------------------------------------


def make_plan(inputs: SearchInputs, probes: Probes, settings: SearchSettings) -> Plan:
    """What every trial shares: the budget, the LR's reference batch and rule, the largest
    micro-batch, the seed, the validation set."""
    sp, task = inputs.space, inputs.task
    lr_entry = sp.entries.get("lr")
    ref = reference_batch(probes.lr_find) if lr_entry is not None and lr_entry.seeded == "lr_find" else None
    rule = "none"
    if ref:
        rule = lr_entry.scale_with_batch or "auto"  # type: ignore[union-attr]
        if rule == "auto":
            same = "updates" if inputs.budget.seconds is not None else "samples"  # what each batch's trial gets
            rule = lr_rule_for(task.make_optimizer(task.make_model(settings.seed)), same)
    eval_bs, eval_batches, _ = evaluation(inputs)
    cooldown, branch_evals = branch_plan(settings.pruner, settings.trials, inputs.budget.samples, settings.prune)
    return Plan(budget_samples=inputs.budget.samples, seed=settings.seed, task_batch=inputs.task_batch,
                max_micro=int(probes.probe.max_batch) if probes.probe is not None else 1 << 30,
                ref_batch=ref, lr_rule=rule, evals=settings.pruner.evals, device=settings.backend.device, eval_batch_size=eval_bs,
                eval_batches=eval_batches, fixed=sp.fixed(), objective=settings.objective.name,
                direction=settings.objective.direction, budget_seconds=inputs.budget.seconds,
                step_times=probes.probe.step_times if probes.probe is not None else [],
                rung_cooldown=cooldown, branch_evals=branch_evals, eval_seconds=eval_seconds(inputs, probes))


def adaptive_l2(inputs: SearchInputs, optimizer: Any) -> bool:
    """Whether the task's ``optimizer`` is adaptive and adds weight decay to the gradient (L2), where the
    space's [weight_decay] has an ``adaptive_l2`` range for it (:func:`~tunekit.training.optimizers.is_adaptive_l2`)."""
    entry = inputs.space.entries.get("weight_decay")
    return bool(entry is not None and entry.adaptive_l2 and is_adaptive_l2(optimizer))


def design_size(settings: SearchSettings, sp: SearchSpace, probes: Probes) -> int:
    """Trials queued before the sampler's own: the seed trial and the design around it."""
    if settings.sampler.design is not None:
        return settings.sampler.design
    if not settings.sampler.seed_trial:
        return 0
    return DESIGN_TRIALS if probes.lr_find is not None and "lr" in sp.entries else 1


def recipe(task: Any, cfg: Any, seed: int, optimizer: Any = None) -> dict[str, Any]:
    """The task's own settings: its training defaults, its weight decay (the run's where set, as
    training applies it; else the largest of its optimizer's groups: the one that decays, where
    biases and norms are kept free of it) and its LR (the task's ``defaults["lr"]`` first: what
    its author trains with). ``optimizer``: the task's, where built already (a model build can be costly)."""
    out = {k: v for k, v in dataclasses.asdict(cfg).items() if v is not None}
    groups = (optimizer if optimizer is not None else task.make_optimizer(task.make_model(seed))).param_groups
    decays = [float(g["weight_decay"]) for g in groups if "weight_decay" in g]
    if "weight_decay" not in out and decays:
        out["weight_decay"] = max(decays)
    out["lr"] = task.defaults.get("lr") or groups[0].get("lr")
    return out


def own_settings(task_recipe: dict[str, Any], cfg: Any) -> dict[str, Any]:
    """What of a :func:`recipe` the user chose, for the space to hold: the settings that differ from
    tunekit's defaults (``cfg``'s class's), and the weight decay; a warmup in updates (1 or more)
    is left out, where a space's warmup is a fraction of the run."""
    ours = dataclasses.asdict(type(cfg)())
    out = {k: v for k, v in task_recipe.items() if k == "weight_decay" or (k in ours and v != ours[k])}
    if isinstance(out.get("warmup"), (int, float)) and out["warmup"] >= 1:
        del out["warmup"]
    return out


def twice_batch_share(probe: Any, batch: Optional[float]) -> Optional[float]:
    """An update of twice ``batch`` over two updates of it, priced by the probe's timed steps (stored
    with the study, so the same on every run); None without timings or a batch."""
    curve = probe.step_times if probe is not None else []
    if not curve or not batch:
        return None
    one = update_seconds(curve, *split_batch(int(batch), int(probe.max_batch)))
    two = update_seconds(curve, *split_batch(2 * int(batch), int(probe.max_batch)))
    return two / (2 * one)


def larger_is_cheaper(probe: Any, batch: Optional[float]) -> bool:
    """Whether an update of twice ``batch`` costs at most ``UNSATURATED`` of two updates of it: the same
    samples in clearly less device time, and the design doubles the batch (see ``plan.LARGER``)."""
    share = twice_batch_share(probe, batch)
    return share is not None and share <= UNSATURATED


def design_batch(probe: Any, dists: dict[str, Any], centre: Optional[float], doubled: bool,
                 design: list[dict[str, Any]], in_time: bool) -> Optional[dict[str, Any]]:
    """The design's batch step, for the search's result: from which batch to which, the price of an
    update of twice the centre over two of it, the line it was held to; None where the design has no
    such point (too few design trials, or its last point went to the task's own LR)."""
    if centre is None or "batch" not in dists:
        return None
    choices = dists["batch"].choices
    base = nearest_choice(choices, centre)
    step = nearest_choice(choices, centre * (LARGER[1] if doubled else AROUND[-1][1]))
    if step == base or not any(p.get("batch") == step for p in design[1:]):
        return None
    return {"from": base, "step": step, "centre": float(centre), "twice_share": twice_batch_share(probe, centre),
            "unsaturated": UNSATURATED, "doubled": doubled, "in_time": in_time}


@dataclass
class Opening:
    """What a study starts with: the trials queued before the sampler's own (the seed trial first), and the
    sampler that goes on from them."""

    design: list[dict[str, Any]]  # queued once per study (empty: a joining worker's, or no seed trial asked)
    seed_params: dict[str, Any]  # the seed trial's (the creator's, for a joining worker; {} without one)
    batch_note: Optional[dict[str, Any]]  # the design's batch step, for the result (design_batch)
    computed: bool  # whether this run made the design (else the study already holds it, or it has none)
    sampler: Any


def opening(settings: SearchSettings, inputs: SearchInputs, dists: dict[str, Any], probes: Probes, seed: int,
            parallel: bool, joined: Optional[dict[str, Any]], task_recipe: Optional[dict[str, Any]]) -> Opening:
    """The design and the sampler. ``joined``: a joining worker's seed params (the creator queued the design);
    ``task_recipe``: the task's own settings where read already (else read here, where a design is made);
    ``parallel``: other trials run while one does (the sampler then lies about them)."""
    n_design = design_size(settings, inputs.space, probes)
    startup = n_design or max(3, min(10, settings.trials // 3))
    sampler = make_sampler(settings.sampler.kind, seed, startup, parallel,
                           lr_param=guided_lr(settings, inputs.space, probes), horizon=settings.trials - startup)
    if joined is not None or not (settings.sampler.seed_trial or n_design):
        return Opening([], dict(joined or {}), None, False, sampler)
    own = task_recipe if task_recipe is not None else recipe(inputs.task, inputs.cfg, settings.seed)
    design, note = seed_and_design(dists, probes, n_design, settings.trials, own, in_time=inputs.budget.seconds is not None)
    return Opening(design, design[0], note, True, sampler)


def make_sampler(kind: str, seed: int, startup: int, parallel: bool, lr_param: Optional[str] = None,
                 horizon: int = 0) -> Any:
    """TPE (its random start-up replaced by ``startup`` enqueued design trials) or random search.
    ``lr_param``: the seeded LR's name, drawn near the best trial for the ``horizon`` trials after the
    design (:class:`~tunekit.hpsearch.guided.GuidedSampler`); None: TPE alone."""
    import optuna

    if kind == "random":
        return optuna.samplers.RandomSampler(seed=seed)
    with warnings.catch_warnings():  # constant_liar is "experimental" in Optuna's words
        warnings.simplefilter("ignore")
        # With trials running in parallel, constant_liar keeps TPE from proposing
        # the same point to every free worker.
        tpe = optuna.samplers.TPESampler(seed=seed, n_startup_trials=startup, constant_liar=parallel)
    if lr_param is None or horizon <= 0:
        return tpe
    from tunekit.hpsearch.guided import GuidedSampler

    return GuidedSampler(tpe, lr_param, design=startup, horizon=horizon, seed=seed)


def guided_lr(settings: SearchSettings, sp: SearchSpace, probes: Probes) -> Optional[str]:
    """The LR parameter the sampler draws near the best trial early: the one the range test seeded (its
    suggestion trusted), under a TPE sampler that asks for it; None otherwise."""
    lf = probes.lr_find
    entry = sp.entries.get("lr")
    if not getattr(settings.sampler, "guided", False) or entry is None or entry.seeded != "lr_find":
        return None
    return "lr" if lf is not None and lf.confident and lf.suggestion else None


def seed_and_design(dists: dict[str, Any], probes: Probes, n: int, trials: int, task_recipe: dict[str, Any],
                    in_time: bool) -> tuple[list[dict[str, Any]], Optional[dict[str, Any]]]:
    """The seed trial (the probes' recommendation) and the design around it, with the design's batch step.

    A range test that saw no clear descent (``confident`` False) gives no LR to
    centre on: the design spreads over the LR range instead. The batch step follows the budget's
    currency: twice the batch only for a budget in device time (``in_time``) on a device the probe
    found unsaturated; under samples, tokens, epochs or updates, fewer larger updates save device
    time the user did not ask to save, at the cost of the loss, so the design tries a smaller batch."""
    lf, pr = probes.lr_find, probes.probe
    lr = lf.suggestion if lf is not None and lf.suggestion and lf.confident else None
    centre = batch_centre(pr, reference_batch(lf)) if "batch" in dists else None
    # Twice the batch where it is cheaper and the space offers a larger batch than the centre's.
    doubled = in_time and centre is not None and larger_is_cheaper(pr, centre) and (
        nearest_choice(dists["batch"].choices, LARGER[1] * centre) > nearest_choice(dists["batch"].choices, centre))
    # The interval's ends bracket the suggestion where short runs checked it; the curve's number alone (the
    # search's own range test) has an interval twice as wide, whose ends are too far for full-length trials:
    # the design's fixed factors instead (plan.AROUND).
    interval = tuple(lf.interval) if lr is not None and lf is not None and lf.interval and lf.checked else None
    design = initial_design(dists, lr, centre, max(1, n), task_recipe, larger_batch=doubled,
                            interval=interval)[:trials]  # type: ignore[arg-type]
    return design, design_batch(pr, dists, centre, doubled, design, in_time)
