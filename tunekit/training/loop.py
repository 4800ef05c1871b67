"""``tunekit.train``: a full run of the shared step under a warmup + decay schedule."""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Optional

import torch
from torch import nn

from tunekit.inputs.data import Data, batch_size_of, iterate_once, to_device, BatchStream
from tunekit.defaults import ACCUMULATION_STEPS, CLIP_GRAD_NORM, LR, MIN_LR_RATIO, RUN_STEPS, SCHEDULE, WARMUP
from tunekit.errors import CLIP_HINT, UsageError, check_int, check_number, deprecated
from tunekit.progress import bar
from tunekit.results import TrainResult
from tunekit.training.branch import Cooldown, branch_seed, run_cooldown
from tunekit.training.schedule import DECAYS, Warmup, lr_schedule, warmup_steps
from tunekit.training.state import preserved, seed_everything_for
from tunekit.training.step import StepOutput, TrainStep, Updates, autocast_context, resolve_device
from tunekit.precision import Precision, check_precision
from tunekit.inputs.task import LossComputer, Metric, Task, accuracy_counts

__all__ = ["TrainConfig", "TrainResult", "train", "evaluate", "EvalCallback"]

# Imported where used, not at the top: tunekit.integrations (the built-in tasks, their objects' readers); a
# run of a Task in hand does not pay for them.

# callback(step, metrics) after each evaluation; return True to stop the run.
EvalCallback = Callable[[int, dict[str, float]], Optional[bool]]


def _positive_int(name: str, value: Any, example: int) -> None:
    check_int(name, value, hint=f"pass e.g. {name}={example}")


@dataclass
class TrainConfig:
    """Settings of one training run. Unset fields fall back to the task's defaults.

    ``warmup`` is a fraction of the run when a float in [0, 1), else a number of
    updates. ``max_steps`` (the planned run's length, ``run_steps`` everywhere else:
    the field keeps its name for the saved configs and studies that hold it) counts
    optimizer updates; with ``accumulation_steps`` K, each update sees K micro-batches.

    Validation reads the first ``eval_batches`` batches (None: all) of the
    validation data, in its own fixed order, at ``eval_batch_size`` (default: the
    task's batch size). It does not depend on the run's ``batch_size``, so runs
    at different batch sizes are scored on the same samples.
    """

    lr: float = LR
    max_steps: int = RUN_STEPS
    batch_size: Optional[int] = None
    accumulation_steps: int = ACCUMULATION_STEPS
    warmup: Warmup = WARMUP
    schedule: str = SCHEDULE
    min_lr_ratio: float = MIN_LR_RATIO
    clip_grad_norm: Optional[float] = CLIP_GRAD_NORM
    precision: Optional[Precision] = None
    device: str = "auto"
    seed: int = 0
    eval_every: Optional[int] = None
    eval_batches: Optional[int] = 20
    eval_batch_size: Optional[int] = None
    weight_decay: Optional[float] = None

    def __post_init__(self) -> None:
        check_number("lr", self.lr, positive=True, hint="pass e.g. lr=3e-4")
        _positive_int("max_steps", self.max_steps, RUN_STEPS)
        if self.batch_size is not None:
            _positive_int("batch_size", self.batch_size, 32)
        _positive_int("accumulation_steps", self.accumulation_steps, 2)
        warmup_steps(self.warmup, self.max_steps)
        if self.schedule not in DECAYS:
            raise UsageError(f"schedule {self.schedule!r} is unknown: use one of {', '.join(DECAYS)}")
        check_number("min_lr_ratio", self.min_lr_ratio, minimum=0, maximum=1, hint="pass e.g. min_lr_ratio=0.1")
        if self.clip_grad_norm is not None:
            check_number("clip_grad_norm", self.clip_grad_norm, positive=True, hint=CLIP_HINT)
        if self.precision is not None:
            check_precision(self.precision)
        if self.eval_every is not None:
            _positive_int("eval_every", self.eval_every, 50)
        if self.eval_batches is not None:
            _positive_int("eval_batches", self.eval_batches, 20)
        if self.eval_batch_size is not None:
            _positive_int("eval_batch_size", self.eval_batch_size, 256)
        if self.weight_decay is not None:
            check_number("weight_decay", self.weight_decay, minimum=0, hint="pass e.g. weight_decay=0.01")

    @property
    def run_steps(self) -> int:
        """The run's length in optimizer updates, by the name the rest of tunekit gives it."""
        return self.max_steps

    @classmethod
    def for_task(cls, task: Task, config: TrainConfig | dict[str, Any] | None = None, **overrides: Any) -> TrainConfig:
        """The task's defaults, then ``config``, then ``overrides``; unknown keys are refused."""
        known = {f.name for f in dataclasses.fields(cls)}
        values: dict[str, Any] = {}
        values.update({k: v for k, v in task.defaults.items() if k in known})
        if task.batch_size is not None:
            values.setdefault("batch_size", task.batch_size)
        if isinstance(config, TrainConfig):
            # An explicit TrainConfig wins over task defaults field by field,
            # except for fields still at their dataclass default.
            for f in dataclasses.fields(cls):
                v = getattr(config, f.name)
                if v != f.default or f.name not in values:
                    values[f.name] = v
        elif config:
            unknown = sorted(set(config) - known)
            if unknown:
                raise UsageError(f"unknown training setting {unknown[0]!r}: known settings are {', '.join(sorted(known))}")
            values.update(config)
        unknown = sorted(set(overrides) - known)
        if unknown:
            raise UsageError(f"unknown training setting {unknown[0]!r}: known settings are {', '.join(sorted(known))}")
        values.update(overrides)
        return cls(**values)


# train(max_steps=), 0.1.0's name of run_steps=: deprecated in 0.2.0, removed in 0.3.0.
_MAX_STEPS = deprecated("train(max_steps=)", "pass run_steps=")


def _run_steps_as_max_steps(config: Any, overrides: dict[str, Any]) -> tuple[Any, dict[str, Any]]:
    """``run_steps`` (train's keyword, or a config dict's key) as TrainConfig's ``max_steps``; the old
    ``max_steps=`` keyword warns (:data:`_MAX_STEPS`); both at once are refused in one line."""
    if isinstance(config, Mapping) and "run_steps" in config:
        if "max_steps" in config:
            raise UsageError("the config gives both run_steps and max_steps, its old name: give only run_steps")
        _positive_int("run_steps", config["run_steps"], RUN_STEPS)
        config = {("max_steps" if k == "run_steps" else k): v for k, v in config.items()}
    if "max_steps" in overrides:
        if "run_steps" in overrides:
            raise UsageError("train() got both max_steps= and run_steps=, its new name: pass only run_steps=")
        _MAX_STEPS.warn()
    elif "run_steps" in overrides:
        _positive_int("run_steps", overrides["run_steps"], RUN_STEPS)
        overrides = {("max_steps" if k == "run_steps" else k): v for k, v in overrides.items()}
    return config, overrides


@torch.no_grad()
def evaluate(
    model: nn.Module,
    data: Data,
    compute: LossComputer,
    *,
    device: torch.device,
    precision: Precision = "fp32",
    batch_size: int | None = None,
    max_batches: int | None = None,
    metrics: Mapping[str, Metric] | None = None,
) -> dict[str, float]:
    """Mean loss over ``data`` (weighted by batch size), accuracy where outputs are class scores,
    and each of ``metrics`` (``fn(model, data)``, without gradients; :attr:`Task.metrics`).

    The model is put in eval mode and returned to the mode it was in, and the global CPU RNG to its
    state: when a run evaluates does not change how it trains.
    """
    was_training = model.training
    model.eval()
    total, count, correct, counted = 0.0, 0, 0, 0
    # The global CPU RNG as it was: iterating a DataLoader draws its base seed from it (a loader without a
    # generator of its own), which would move a training run's dropout by when it evaluates.
    rng = torch.get_rng_state()
    try:
        for batch in iterate_once(data, batch_size, max_batches):
            batch = to_device(batch, device)
            with autocast_context(precision, device):
                loss, outputs, targets = compute(model, batch)
            n = batch_size_of(batch) or 1
            total += float(loss) * n
            count += n
            acc = accuracy_counts(outputs, targets)
            if acc is not None:
                correct += acc[0]
                counted += acc[1]
        if count == 0:
            raise UsageError("the validation data yielded no batch: check that it is not empty")
        out = {"loss": total / count}
        if counted:
            out["accuracy"] = correct / counted
        with torch.no_grad():
            for name, fn in (metrics or {}).items():
                out[name] = float(fn(model, data))
    finally:
        model.train(was_training)
        torch.set_rng_state(rng)
    return out


def train(
    task: Any,
    config: TrainConfig | dict[str, Any] | None = None,
    *,
    callback: EvalCallback | None = None,
    progress: Optional[bool] = None,
    on_trained: Callable[[nn.Module], None] | None = None,
    cooldown: Optional[Cooldown] = None,
    **overrides: Any,
) -> TrainResult:
    """Train a fresh model of ``task`` (any form :func:`~tunekit.load_task` takes: a Task, ``"shapes"``, a
    spec, their objects) through the shared step; return its curve.

    ``config`` may be a :class:`TrainConfig` or a dict of its fields; keyword overrides win over both. Divergence
    (a non-finite loss) ends the run and is reported in the result, not raised. ``callback(step, metrics)`` runs
    after each evaluation; returning True stops the run (``stopped_early``), and an exception it raises (e.g.
    ``optuna.TrialPruned``) propagates. ``on_trained(model)`` gets the trained model after the final evaluation of
    a run that went to its end (a search keeps its weights there). ``cooldown``: :mod:`~tunekit.training.branch`.

    The global RNGs and the training DataLoader's generators are left as they were: the run draws from its
    own seed, and two runs of one Task with the same config are the same run. ``run_steps=`` (also a key
    of a ``config`` dict) is the run's length, ``TrainConfig.max_steps``; ``max_steps=`` still works for a release.
    """
    from tunekit.integrations.task_spec import load_task

    task = load_task(task)  # a built-in name, a spec, a TaskSpec or their objects, as every entry point takes it
    config, overrides = _run_steps_as_max_steps(config, overrides)
    cfg = TrainConfig.for_task(task, config, **overrides)
    device = resolve_device(cfg.device)
    precision = check_precision(cfg.precision or task.precision)
    result = TrainResult(config=dataclasses.asdict(cfg) | {"precision": precision}, task=task.name, device=str(device))

    # The run's own RNG: seeded here, and the caller's (CPU and the run's GPU) put back afterwards.
    cuda_devices = [device.index if device.index is not None else torch.cuda.current_device()] if device.type == "cuda" else []
    # The training DataLoader's own generators too: each run starts from the order the loader held when it
    # was called (a loader with a seeded generator otherwise gives a second run another data order).
    with torch.random.fork_rng(devices=cuda_devices), preserved(data=task.train_data):
        seed_everything_for(cfg.seed, device)
        step = _fresh_step(task, cfg, device, precision)
        batches = BatchStream(task.train_data, cfg.batch_size, seed=cfg.seed)
        lrs = lr_schedule(cfg.max_steps, cfg.lr, cfg.warmup, cfg.schedule, cfg.min_lr_ratio).tolist()  # type: ignore[arg-type]
        run_eval = _evaluator(task, cfg, step, result, callback, cooldown, lrs)

        # The updates, evaluated every ``eval_every``, until the schedule ends, the loss diverges or
        # the callback says stop.
        start = time.perf_counter()
        loop = Updates(step, batches, lrs)
        update = 0
        with bar(cfg.max_steps, task.name, "step", progress) as steps_bar:
            for i, lr, out in loop:
                update = i + 1
                _record(result, i, lr, out)
                steps_bar.update(1)
                if update % 10 == 0:
                    steps_bar.set_postfix(loss=f"{out.loss:.4f}", refresh=False)
                if cfg.eval_every and update % cfg.eval_every == 0 and update < cfg.max_steps:
                    if run_eval(update):
                        result.stopped_early = True
                        break
        result.skipped_steps = loop.skipped
        if loop.diverged_at is not None:
            result.diverged, result.diverged_at = True, loop.diverged_at
        result.updates = update

        # A run that ended on its own is evaluated at its end.
        if not result.diverged and not result.stopped_early:
            run_eval(update)
        result.seconds = time.perf_counter() - start
        if on_trained is not None and not result.diverged and not result.stopped_early:
            on_trained(step.model)
    return result


def _fresh_step(task: Task, cfg: TrainConfig, device: torch.device, precision: Precision) -> TrainStep:
    """The task's fresh model (seeded by ``cfg.seed``) and optimizer, in the shared step with the run's settings."""
    model = task.make_model(cfg.seed).to(device)
    model.train()
    optimizer = task.make_optimizer(model)
    if cfg.weight_decay is not None:
        # The groups that decay take the run's weight decay; groups kept free of it (biases and norms, as
        # Hugging Face's Trainer builds them) stay free, unless no group decays at all.
        decaying = [g for g in optimizer.param_groups if g.get("weight_decay", 0)] or optimizer.param_groups
        for group in decaying:
            group["weight_decay"] = cfg.weight_decay
    return TrainStep(model, optimizer, task.loss_computer(), device=device, precision=precision,
                     accumulation_steps=cfg.accumulation_steps, clip_grad_norm=cfg.clip_grad_norm)


def _evaluator(task: Task, cfg: TrainConfig, step: TrainStep, result: TrainResult,
               callback: EvalCallback | None, cooldown: Optional[Cooldown] = None,
               lrs: Optional[list[float]] = None) -> Callable[[int], bool]:
    """``run_eval(update)``: the validation metrics (and a cooldown branch's, where ``cooldown`` says) into
    ``result.evals``, then the callback; True to stop."""

    def measure() -> dict[str, float]:
        return evaluate(
            step.model, task.val_data, step.compute, device=step.device, precision=step.precision,
            batch_size=cfg.eval_batch_size or task.batch_size or cfg.batch_size, max_batches=cfg.eval_batches,
            metrics=task.metrics,
        )

    def run_eval(at: int) -> bool:
        if task.val_data is None:
            return False
        metrics = measure()
        if cooldown is not None and lrs and at in cooldown.at:
            metrics.update(run_cooldown(step, task.train_data, cfg.batch_size, branch_seed(cfg.seed, at), lrs[at - 1],
                                        cooldown.updates(at), measure).prefixed())
        result.evals.append({"step": at, **metrics})
        return bool(callback(at, metrics)) if callback is not None else False

    return run_eval


def _record(result: TrainResult, i: int, lr: float, out: StepOutput) -> None:
    """One update's point on the curve."""
    result.steps.append(i)
    result.lrs.append(lr)
    result.losses.append(out.loss)
    result.grad_norms.append(out.grad_norm)
    result.samples += out.samples
