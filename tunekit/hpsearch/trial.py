"""One trial: train its config through the shared step, and record its outcome in the study.

Both backends end here: the local one runs :func:`run_trial` in this process,
the Ray one on a worker (reporting each evaluation to Tune); either way the
trial's end becomes an :class:`Outcome`, and :func:`record` writes it into the
Optuna study the same way: COMPLETE with the final value of the objective only when
the trial trained its whole budget; PRUNED with its intermediate values when
early stopping ended it; FAIL with ``diverged at update N`` or with the error
the trial raised.
"""

from __future__ import annotations

# Imported where used, not at the top: optuna, torch, tqdm; importing this module does not pay for them.
import json
import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Optional

from tunekit.errors import SetupError
from tunekit.hpsearch import keys as K
from tunekit.hpsearch.confirm import is_confirmation
from tunekit.hpsearch.keep import Keeper
from tunekit.hpsearch.plan import TrialConfig
from tunekit.hpsearch.resilient import StorageUnreachable
from tunekit.objective import Objective, objective_of
from tunekit.training.memory import collecting_young, free_memory

__all__ = ["Outcome", "RungBranches", "TrialRun", "run_config", "run_trial", "keep_weights", "evaluation_reporter", "record", "conclude", "start_attrs", "outcome_of", "TrialFailed",
           "INTERRUPTED"]

INTERRUPTED = "interrupted; re-run on --resume"


@dataclass
class Outcome:
    """How a trial ended, with what it cost. ``curve`` holds [samples seen, objective value] pairs."""

    state: str
    value: Optional[float] = None
    curve: list[list[float]] = field(default_factory=list)
    samples: int = 0
    updates: int = 0
    seconds: float = 0.0
    error: Optional[str] = None
    diverged: bool = False
    worker: Optional[dict[str, Any]] = None
    initial_loss: Optional[float] = None  # the first update's training loss: where the trial started
    final_step: Optional[int] = None  # where the final value is reported (in samples), as the last intermediate value
    reason: Optional[str] = None  # why a PRUNED trial stopped (a FAIL's reason is its error)
    val_loss: Optional[float] = None  # the last evaluation's validation loss, whatever the objective
    weights: Optional[str] = None  # the path of its kept weights (tunekit.hpsearch.keep)
    rung_values: list[list[float]] = field(default_factory=list)  # [samples, cooldown value] at each branch
    branch_samples: int = 0  # of ``samples``, those its cooldown branches trained on

    def attrs(self) -> dict[str, Any]:
        out: dict[str, Any] = {K.CURVE: self.curve, K.SAMPLES: self.samples, K.UPDATES: self.updates,
                               K.SECONDS: self.seconds}
        if self.rung_values:
            out[K.RUNG_VALUES], out[K.BRANCH_SAMPLES] = self.rung_values, self.branch_samples
        if self.val_loss is not None:
            out[K.VAL_LOSS] = self.val_loss
        if self.initial_loss is not None and math.isfinite(self.initial_loss):
            out[K.INITIAL_LOSS] = self.initial_loss
        if self.error:
            out[K.ERROR] = self.error
        if self.reason or self.error:  # one attribute a dashboard shows for pruned and failed trials alike
            out[K.REASON] = self.reason or self.error
        if self.diverged:
            out[K.DIVERGED] = True
        if self.worker:
            out[K.WORKER] = self.worker
        if self.weights:
            out[K.WEIGHTS] = self.weights
        return out


def start_attrs(cfg: TrialConfig) -> dict[str, Any]:
    """What a trial records as it starts: the run it trains (the LR as trained, also on its own for
    dashboards: the ``lr`` param is the LR at the range test's batch), its batch split, and the device
    seconds its updates are predicted to take."""
    attrs = {K.CONFIG: {k: v for k, v in cfg.train.items() if k != "device"}, K.TASK_CONFIG: dict(cfg.task),
             K.MICRO_BATCH: int(cfg.train["batch_size"]), K.ACCUMULATION_STEPS: int(cfg.train["accumulation_steps"]),
             K.EFFECTIVE_BATCH: cfg.effective_batch}
    if "lr" in cfg.train:
        attrs[K.LR_TRAINED] = float(cfg.train["lr"])
    if cfg.predicted_seconds is not None:
        attrs[K.PREDICTED_SECONDS] = float(cfg.predicted_seconds)
    return attrs


def run_config(task: Any, cfg: TrialConfig, report: Callable[[int, dict[str, float]], Any],
               cache: Optional[dict[str, Any]] = None, trained: Optional[dict[str, Any]] = None) -> Any:
    """One trial's training run: the task built with its config, then :func:`tunekit.train`.

    ``cache`` keeps the last task built, so trials with the same task config
    (most of them) do not rebuild its data; train() starts a fresh model each time.
    ``trained``: filled with the trained model's weights (on the CPU) when the run goes to its end.
    """
    from tunekit.integrations.task_spec import load_task
    from tunekit.inputs.task import Task
    from tunekit.training.loop import train

    if isinstance(task, Task):
        run_task = task
    else:
        key = json.dumps([task, cfg.task], sort_keys=True, default=str)
        run_task = cache.get(key) if cache is not None else None
        if run_task is None:
            run_task = load_task(task, cfg.task or None)
            if cache is not None:
                cache.clear()
                cache[key] = run_task
    on_trained = (lambda model: trained.update(Keeper.snapshot(model))) if trained is not None else None
    # The search's own bar counts trials.
    return train(run_task, cfg.train, callback=report, progress=False, on_trained=on_trained, cooldown=cfg.cooldown())


def keep_weights(keeper: Optional[Keeper], snapshot: dict[str, Any], outcome: Outcome, number: int, cfg: TrialConfig,
                 study: Any = None, always: bool = False) -> None:
    """A complete trial's weights written where ``keeper`` says, when it keeps them (its path into the outcome).
    ``always``: whatever the study's best (a confirmation run: its configuration may be chosen by its mean)."""
    if keeper is None or not snapshot or outcome.state != "COMPLETE" or outcome.value is None:
        return
    if keeper.wants(outcome.value, None if always else study):
        about = {"config": {k: v for k, v in cfg.train.items() if k != "device"}, "task_config": dict(cfg.task),
                 "objective": cfg.objective, "direction": cfg.direction}
        if "hyper_parameters" in snapshot:  # a LightningModule's: as the trial trained it, not as it was built
            from tunekit.integrations.lightning import trained_hparams

            snapshot = {**snapshot, "hyper_parameters": trained_hparams(snapshot["hyper_parameters"], about["config"])}
        try:
            outcome.weights = keeper.write(snapshot, number, outcome.value, about)
        except (OSError, RuntimeError) as exc:  # a full disk, a folder it cannot write: the trial stands, unkept
            import warnings

            warnings.warn(f"trial {number}'s weights could not be written to {keeper.folder} ({type(exc).__name__}: "
                          f"{exc}): it is recorded without them; free the disk or pass keep='none'", stacklevel=2)


def outcome_of(result: Any, curve: list[list[float]], seconds: float, final_step: Optional[int] = None,
               objective: Objective = Objective(), branches: Optional[RungBranches] = None) -> Outcome:
    """The outcome of a training run that went to its end (or diverged), valued by ``objective``; its
    cooldown branches' samples and updates (``branches``) counted in its own."""
    val_loss = float(result.evals[-1]["loss"]) if result.evals else None
    if result.diverged:
        return (branches or RungBranches()).charge(
            Outcome("FAIL", curve=curve, samples=int(result.samples), updates=int(result.updates), seconds=seconds,
                    error=f"diverged at update {result.diverged_at}", diverged=True, val_loss=val_loss))
    # Where the trial started, in the objective's units, for the rungs' learning point: the first
    # training loss (its exp for perplexity); other objectives have no value before the first
    # evaluation, and their rungs are the fixed ladder.
    first = float(result.losses[0]) if result.losses and objective.name in ("loss", "perplexity") else None
    if first is not None and objective.name == "perplexity":
        first = math.exp(min(first, 700.0))
    value = float(result.final_loss) if objective.name == "loss" else objective.value(result.evals[-1])
    return (branches or RungBranches()).charge(
        Outcome("COMPLETE", value, curve, int(result.samples), int(result.updates), seconds, initial_loss=first,
                final_step=final_step, val_loss=val_loss))


@dataclass
class RungBranches:
    """A trial's cooldown branches at its rungs (:mod:`tunekit.training.branch`): [samples seen, the branch's
    objective value] at each, what the pruner compared there, and what they cost beyond the run."""

    values: list[list[float]] = field(default_factory=list)
    updates: int = 0
    samples: int = 0

    def charge(self, outcome: Outcome) -> Outcome:
        """``outcome`` with the branches' values, and their samples and updates counted in its own."""
        outcome.rung_values, outcome.branch_samples = list(self.values), self.samples
        outcome.samples += self.samples
        outcome.updates += self.updates
        return outcome


def evaluation_reporter(cfg: TrialConfig, curve: list[list[float]], last: dict[str, float],
                        branches: Optional[RungBranches] = None) -> Callable[[int, dict[str, float]], float]:
    """``value(step, metrics)``: the value the pruner compares at an evaluation. The evaluation's objective
    value goes to ``curve`` (samples seen, value) and its metrics to ``last`` (for the validation loss of a
    trial stopped early); where a cooldown branch ran, its value is the one returned, kept in ``branches``
    with its cost (a branch with no finite value leaves the evaluation's own)."""
    from tunekit.training.branch import PREFIX

    objective = objective_of(cfg)

    def value(step: int, metrics: dict[str, float]) -> float:
        own = {k: v for k, v in metrics.items() if not k.startswith(PREFIX)}
        last.clear()
        last.update(own)
        v = objective.value(own)
        curve.append([step * cfg.effective_batch, v])
        if PREFIX + "loss" not in metrics:
            return v
        branch = {k.removeprefix(PREFIX): x for k, x in metrics.items() if k.startswith(PREFIX)}
        try:
            b = float(objective.value(branch))
        except (KeyError, TypeError, ValueError):  # a diverged branch measured its loss alone
            b = math.nan
        if branches is not None:
            branches.updates += int(branch["updates"])
            branches.samples += int(branch["samples"])
            if math.isfinite(b):
                branches.values.append([step * cfg.effective_batch, b])
        return b if math.isfinite(b) else v

    return value


@dataclass
class TrialRun:
    """One trial as it trains in this process: what it runs and what it has seen so far."""

    task: Any
    trial: Any  # Optuna's trial
    cfg: TrialConfig
    keeper: Optional[Keeper] = None  # which trials' weights are kept (None: none)
    cache: Optional[dict[str, Any]] = None  # the last task built (run_config)
    curve: list[list[float]] = field(default_factory=list)  # [samples seen, value] at each evaluation
    last: dict[str, float] = field(default_factory=dict)  # the last evaluation's metrics
    trained: dict[str, Any] = field(default_factory=dict)  # the model's weights at the end, where they are kept
    branches: RungBranches = field(default_factory=lambda: RungBranches())  # its cooldown branches at rungs
    t0: float = field(default_factory=time.perf_counter)


def run_trial(task: Any, trial: Any, cfg: TrialConfig, *, prune: bool, cache: Optional[dict[str, Any]] = None,
              keeper: Optional[Keeper] = None) -> Outcome:
    """Run one trial in this process; Optuna's pruner (the study's) decides at each evaluation.

    Reports are in training samples seen, so the rungs of trials at different
    batches fall at the same amount of data. KeyboardInterrupt propagates. A complete
    trial's weights are kept as ``keeper`` says (before the study is told: the path is its attribute).
    """
    import optuna

    run = TrialRun(task, trial, cfg, keeper, cache)
    value_of = evaluation_reporter(cfg, run.curve, run.last, run.branches)
    steps = int(cfg.train["max_steps"])

    def report(step: int, metrics: dict[str, float]) -> None:
        value = value_of(step, metrics)
        if step >= steps:
            return  # the final value is the trial's own
        if math.isfinite(value):
            trial.report(value, cfg.reported(step))
        if prune and trial.should_prune():
            raise optuna.TrialPruned(f"pruned at {cfg.reported(step)} samples with {objective_of(cfg).label} {value:.4f}")

    with collecting_young():  # the collection after the trial walks what the trial made, not the whole process
        try:
            return _run(run, report)
        finally:
            run.trained.clear()
            free_memory()  # after the handlers: an exception's frames no longer hold the trial's model


def _run(run: TrialRun, report: Callable[[int, dict[str, float]], None]) -> Outcome:
    """:func:`run_trial`'s run and outcome (its weights kept into ``run.trained``)."""
    import optuna

    cfg = run.cfg
    try:
        result = run_config(run.task, cfg, report, run.cache, run.trained if run.keeper is not None else None)
    except optuna.TrialPruned as exc:
        return _stopped(Outcome("PRUNED", reason=str(exc)), run)
    except SetupError as exc:
        # The task cannot train whatever the trial's params: the search stops, in one line.
        run.trial.set_user_attr(K.ERROR, f"SetupError: {exc}")
        raise
    except StorageUnreachable:  # the study's storage, not the trial, failed: the worker stops, in one line
        raise
    except Exception as exc:  # the user's task or model raised: the trial fails, the search goes on
        return _stopped(Outcome("FAIL", error=f"{type(exc).__name__}: {exc}"), run)
    outcome = outcome_of(result, run.curve, time.perf_counter() - run.t0, final_step(cfg), objective_of(cfg),
                         run.branches)
    keep_weights(run.keeper, run.trained, outcome, run.trial.number, cfg, run.trial.study,
                 always=is_confirmation(run.trial.user_attrs))
    return outcome


def _stopped(outcome: Outcome, run: TrialRun) -> Outcome:
    """A trial that ended before its budget: what it saw (samples, updates, its last validation loss)."""
    seen = int(run.curve[-1][0]) if run.curve else 0
    outcome.curve, outcome.samples, outcome.updates = run.curve, seen, seen // run.cfg.effective_batch
    outcome.seconds = time.perf_counter() - run.t0
    outcome.val_loss = float(run.last["loss"]) if "loss" in run.last else None
    return run.branches.charge(outcome)


def final_step(cfg: TrialConfig) -> int:
    """Where the final value is reported: after the last evaluation's step, even when the run's
    last update falls in the same reporting interval as that evaluation."""
    steps, every = int(cfg.train["max_steps"]), int(cfg.train.get("eval_every") or 1)
    last_eval = ((steps - 1) // every) * every  # the last evaluation before the final one
    return max(cfg.reported(steps), cfg.reported(last_eval) + 1) if last_eval > 0 else cfg.reported(steps)


class TrialFailed(Exception):
    """A trial that diverged or raised: Optuna records it as FAIL; its error is in its attributes."""


def _write(trial: Any, outcome: Outcome) -> None:
    for key, value in outcome.attrs().items():
        trial.set_user_attr(key, value)
    if outcome.state == "COMPLETE" and outcome.final_step is not None and outcome.value is not None:
        # The final value as the last intermediate value: a learning curve (optuna-dashboard's
        # included) ends where the trial did, not one evaluation early.
        trial.set_user_attr(K.FINAL_STEP, int(outcome.final_step))
        trial.report(float(outcome.value), int(outcome.final_step))


def record(study: Any, trial: Any, outcome: Outcome) -> None:
    """Write ``outcome`` into the study and end the trial there (a trial asked with ``study.ask``)."""
    import optuna

    _write(trial, outcome)
    if outcome.state == "COMPLETE":
        study.tell(trial, outcome.value)
    else:
        study.tell(trial, state=optuna.trial.TrialState[outcome.state])


def conclude(trial: Any, outcome: Outcome) -> float:
    """The same, inside ``study.optimize``: return the value, or raise what Optuna reads as PRUNED or FAIL."""
    import optuna

    _write(trial, outcome)
    if outcome.state == "PRUNED":
        raise optuna.TrialPruned(outcome.reason or "pruned")
    if outcome.state == "FAIL":
        raise TrialFailed(outcome.error or "failed")
    return float(outcome.value)  # type: ignore[arg-type]
