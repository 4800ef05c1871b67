"""What a probe works on: a fresh model of a Task, or the user's objects in hand.

Both probes (the LR range test and the batch-size probe) accept either
``probe(task)`` or ``probe(model, train_data, loss_fn, optimizer)``; this turns
either into the same bundle, with the same one-line errors.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from tunekit.inputs.data import Data
from tunekit.defaults import ACCUMULATION_STEPS, CLIP_GRAD_NORM
from tunekit.errors import UsageError, check_int
from tunekit.training.step import resolve_device
from tunekit.entry_options import TASK_DEFAULT  # the sentinel lives where the option objects (and the CLI) read it
from tunekit.precision import Precision, check_precision
from tunekit.inputs.task import UNNAMED, ComputeLoss, LossComputer, LossFn, Task, check_optimizer_holds, default_optimizer

__all__ = ["ProbeInputs", "resolve_inputs", "check_saved", "step_settings"]


def step_settings(model: Any, clip_grad_norm: Any, accumulation_steps: int | None,
                  precision: Precision | None) -> tuple[float | None, int, Precision | None]:
    """The step's clipping, accumulation and precision, resolved from a Task's recipe (its ``defaults``)
    the way ``train`` resolves them, where the call leaves them unset (TASK_DEFAULT, None)."""
    defaults = model.defaults if isinstance(model, Task) else {}
    if clip_grad_norm is TASK_DEFAULT:
        clip_grad_norm = defaults.get("clip_grad_norm", CLIP_GRAD_NORM)
    if accumulation_steps is None:
        accumulation_steps = defaults.get("accumulation_steps", ACCUMULATION_STEPS)
    if precision is None:
        precision = defaults.get("precision")  # else the task's precision (resolve_inputs)
    return clip_grad_norm, accumulation_steps, precision


@dataclass
class ProbeInputs:
    task: Task
    model: nn.Module
    optimizer: torch.optim.Optimizer
    data: Data
    val_data: Data | None
    compute: LossComputer
    batch_size: int | None
    precision: Precision
    device: torch.device


def resolve_inputs(
    what: str,
    model: nn.Module | Task,
    train_data: Data | None,
    loss_fn: LossFn | None,
    optimizer: Any,
    *,
    compute_loss: ComputeLoss | None = None,
    val_data: Data | None = None,
    batch_size: int | None = None,
    precision: Precision | None = None,
    device: str | None = "auto",
    seed: int = 0,
) -> ProbeInputs:
    if batch_size is not None:
        check_int("batch_size", batch_size, hint="pass e.g. batch_size=32")
    if isinstance(model, Task):
        task = model
        if train_data is not None or loss_fn is not None:
            raise UsageError(f"{what}(task) takes its data and loss from the task: do not pass train_data or loss_fn too")
        if compute_loss is not None:  # the caller's loss over the task's (a Trainer's model that returns none)
            task = dataclasses.replace(task, loss=None, compute_loss=compute_loss)
        dev = resolve_device(device)
        user_model = task.make_model(seed).to(dev)
        if isinstance(optimizer, torch.optim.Optimizer):
            raise UsageError("with a Task, optimizer must be a factory (params -> Optimizer), not an instance")
        if optimizer is not None:
            task = dataclasses.replace(task, optimizer=optimizer)
        user_opt = task.make_optimizer(user_model)
        data, vdata = task.train_data, task.val_data if val_data is None else val_data
        batch_size = batch_size or task.batch_size
        precision = precision or task.precision
    else:
        if not isinstance(model, nn.Module):
            raise UsageError(_not_a_model(what, model))
        if train_data is None:
            raise UsageError(f"{what}(model, ...) needs train_data: a DataLoader, a Dataset or a list of batches")
        params = [p for p in model.parameters() if p.requires_grad]
        if not params:
            raise UsageError("the model has no trainable parameters: check requires_grad")
        # A model in hand is probed where it lives; moving it would change the user's object.
        dev = params[0].device if device in (None, "auto") else resolve_device(device)
        if params[0].device != dev:
            raise UsageError(f"the model is on {params[0].device} but device is {dev}: move the model, or pass device='{params[0].device}'")
        if optimizer is None:
            user_opt = default_optimizer(params)
        elif isinstance(optimizer, torch.optim.Optimizer):
            user_opt = optimizer
        elif callable(optimizer):
            user_opt = optimizer(params)
        else:
            raise UsageError(f"optimizer must be an Optimizer or a factory (params -> Optimizer), got {optimizer!r}")
        if isinstance(user_opt, torch.optim.Optimizer):
            check_optimizer_holds(model, user_opt)
        # Task validates the loss arguments and the data the same way everywhere.
        task = Task(model=lambda: model, train_data=train_data, val_data=val_data, loss=loss_fn,
                    compute_loss=compute_loss, batch_size=batch_size, name=type(model).__name__)
        data, vdata = train_data, val_data
        user_model = model
        precision = precision or "fp32"
    return ProbeInputs(task, user_model, user_opt, data, vdata, task.loss_computer(), batch_size, check_precision(precision), dev)


def _not_a_model(what: str, obj: Any) -> str:
    """What ``what`` takes, said to someone who passed ``obj``; a Lightning Trainer alone is told what to wrap."""
    kind = type(obj)
    if kind.__name__ == "Trainer" and kind.__module__.split(".")[0] in ("lightning", "pytorch_lightning"):
        return (f"{what} takes the module, not the lightning.Trainer alone: pass LightningRun(module, datamodule, "
                "trainer) (from tunekit.integrations), or the LightningModule")
    return (f"{what} takes a tunekit.Task, a torch.nn.Module, a Hugging Face Trainer or a LightningRun(module, "
            f"datamodule, trainer), got a {kind.__name__}")


def check_saved(kind: str, settings: Any, task_name: str, precision: str, device: str) -> None:
    """A saved range test or probe must be of this task, precision and device: refuse it otherwise."""
    want = {"task": task_name, "precision": precision, "device": str(resolve_device(device))}
    for key, value in want.items():
        have = settings.get(key)
        if have is not None and str(have) != str(value):
            again = f"run tunekit {kind.replace('_', '-')} for it again, or leave the saved result out"
            if key == "task" and UNNAMED in (have, value):  # a Task given no name: it may be the same task
                fix = (f"the saved result's Task had no name (Task.name defaults to {UNNAMED!r}): run {kind} again "
                       f"on Task(name={value!r}, ...), or leave the saved result out" if have == UNNAMED else
                       f"this search's Task has no name (Task.name defaults to {UNNAMED!r}): if it is the same task, "
                       f"name it Task(name={have!r}, ...), else {again}")
                raise UsageError(f"the saved {kind} result is for task {have!r}, this search runs task {value!r}: {fix}")
            raise UsageError(f"the saved {kind} result is for {key} {have!r}, this search runs {key} {value!r}: {again}")
