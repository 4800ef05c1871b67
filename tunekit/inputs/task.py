"""The Task: how a user hands tunekit a training problem.

A Task bundles a model factory, data, a loss and an optimizer factory. Every
tunekit feature (train, lr_find, probe, search) takes one, and the notebook
functions build one on the fly from objects in hand.

How the loss is computed from a batch, in order:

1. ``compute_loss(model, batch)`` if given: anything goes, it returns the loss.
2. A dict batch (Hugging Face style): ``model(**batch)``. If ``loss`` is given and
   the batch has ``labels``, the labels are held back and the loss is
   ``loss(logits, labels)``; otherwise the model's own ``.loss`` is used.
3. A tuple/list batch ``(inputs, targets)`` or ``(*inputs, targets)``:
   ``loss(model(*inputs), targets)``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Optional

import torch
from torch import nn

from tunekit.inputs.data import Batch, Data, check_data
from tunekit.errors import SetupError, UsageError
from tunekit.precision import Precision, check_precision

__all__ = ["Task", "UNNAMED", "LossFn", "ComputeLoss", "OptimizerFactory", "Metric", "BUILTIN_METRICS", "default_optimizer",
           "LossComputer", "class_layout", "loss_problem", "label_problem", "check_optimizer_holds"]

LossFn = Callable[[Any, Any], torch.Tensor]
ComputeLoss = Callable[[nn.Module, Batch], torch.Tensor]
OptimizerFactory = Callable[[Iterable[nn.Parameter]], torch.optim.Optimizer]
Metric = Callable[[nn.Module, Any], float]  # fn(model, val_data) -> float
# What every evaluation computes itself (accuracy where the outputs are class scores).
BUILTIN_METRICS = ("loss", "accuracy", "perplexity")
# A Task's name when none is given (a spec's Task is named after its function instead).
UNNAMED = "task"


def default_optimizer(params: Iterable[nn.Parameter]) -> torch.optim.Optimizer:
    """AdamW with PyTorch's defaults but weight decay 0.01; the LR is set by the schedule."""
    return torch.optim.AdamW(params, lr=1e-3, weight_decay=0.01)


@dataclass
class Task:
    """A training problem.

    Args:
        model: a factory returning a *fresh* model on each call. tunekit seeds
            torch's RNG before calling it, so the same seed gives the same weights.
        train_data: a ``Dataset``, a ``DataLoader`` or a re-iterable of batches.
        val_data: optional validation data of the same kinds.
        loss: a criterion called as ``loss(outputs, targets)``, like
            ``nn.CrossEntropyLoss()``. May be omitted for dict batches whose model
            returns an object with ``.loss``.
        compute_loss: for any other batch: ``compute_loss(model, batch) -> loss``.
        optimizer: a factory ``optimizer(params) -> Optimizer``; AdamW by default.
            The LR it sets is replaced by the schedule; the ratios between its
            param groups' LRs are kept.
        batch_size: default micro-batch size (needed for a Dataset).
        precision: default precision, ``"fp32"``, ``"bf16"`` or ``"fp16"``.
        name: shown in reports.
        defaults: default training settings for this task (e.g. ``{"lr": 3e-3,
            "max_steps": 300}``), used where the user gives none.
        metrics: the user's own validation metrics, ``{"f1": fn}`` with
            ``fn(model, val_data) -> float`` (called in eval mode, without gradients, at
            each evaluation); a search can optimise one of them (``objective="f1"``).
        origin: the object it was made from, for a Task tunekit built from a Hugging Face
            ``Trainer`` (``"transformers.Trainer"``) or a Lightning module: advice is said in its terms.
    """

    model: Callable[[], nn.Module]
    train_data: Data
    val_data: Optional[Data] = None
    loss: Optional[LossFn] = None
    compute_loss: Optional[ComputeLoss] = None
    optimizer: OptimizerFactory = default_optimizer
    batch_size: Optional[int] = None
    precision: Precision = "fp32"
    name: str = UNNAMED
    defaults: dict[str, Any] = field(default_factory=dict)
    metrics: dict[str, Metric] = field(default_factory=dict)
    origin: Optional[str] = None

    def __post_init__(self) -> None:
        if not callable(self.model):
            raise UsageError(
                f"Task.model must be a factory that returns a fresh model, got a {type(self.model).__name__}: "
                "pass `lambda: MyModel()`"
            )
        if isinstance(self.model, nn.Module):
            raise UsageError("Task.model must be a factory, not a model instance: pass `lambda: MyModel()`")
        if self.loss is not None and self.compute_loss is not None:
            raise UsageError("give either loss= (a criterion on outputs and targets) or compute_loss= (a function of model and batch), not both")
        if self.loss is not None and not callable(self.loss):
            raise UsageError(f"loss must be callable as loss(outputs, targets), got {self.loss!r}")
        if self.compute_loss is not None and not callable(self.compute_loss):
            raise UsageError(f"compute_loss must be callable as compute_loss(model, batch), got {self.compute_loss!r}")
        self.precision = check_precision(self.precision)
        if self.batch_size is not None and (not isinstance(self.batch_size, int) or self.batch_size < 1):
            raise UsageError(f"batch_size must be a positive int, got {self.batch_size!r}")
        check_data(self.train_data, "train_data")
        if self.val_data is not None:
            check_data(self.val_data, "val_data")
        _check_metrics(self.metrics)

    def make_model(self, seed: int = 0) -> nn.Module:
        """A fresh model with weights drawn from ``seed``; the global RNG is left as it was."""
        # Models are built on the CPU: fork and seed the CPU generator only.
        with torch.random.fork_rng(devices=[]):
            torch.default_generator.manual_seed(seed)
            model = self.model()
        if not isinstance(model, nn.Module):
            raise UsageError(f"the task's model factory returned a {type(model).__name__}, not a torch.nn.Module")
        return model

    def make_optimizer(self, model: nn.Module) -> torch.optim.Optimizer:
        params = [p for p in model.parameters() if p.requires_grad]
        if not params:
            raise UsageError(f"the model of task '{self.name}' has no trainable parameters: check requires_grad, or the model factory")
        optimizer = self.optimizer(params)
        if isinstance(optimizer, torch.optim.Optimizer):  # a factory may ignore its params and take another model's
            check_optimizer_holds(model, optimizer)
        return optimizer

    def loss_computer(self) -> LossComputer:
        return LossComputer(self.loss, self.compute_loss)


def _check_metrics(metrics: Any) -> None:
    """The user's metrics: a dict of callables, none named after a built-in one."""
    if not isinstance(metrics, dict) or not all(isinstance(k, str) and callable(v) for k, v in metrics.items()):
        raise UsageError(f"metrics must be a dict of name -> fn(model, val_data) -> float, got {metrics!r}: "
                         "pass e.g. metrics={'f1': my_f1}")
    clash = sorted(set(metrics) & set(BUILTIN_METRICS))
    if clash:
        raise UsageError(f"metrics {clash[0]!r} is built in (tunekit computes {', '.join(BUILTIN_METRICS)}): "
                         "give yours another name")


def _model_loss(out: Any) -> torch.Tensor | None:
    if isinstance(out, Mapping):
        return out.get("loss")
    return getattr(out, "loss", None)


def _logits(out: Any) -> Any:
    if isinstance(out, torch.Tensor):
        return out
    if isinstance(out, Mapping) and "logits" in out:
        return out["logits"]
    logits = getattr(out, "logits", None)
    return logits if logits is not None else out


class LossComputer:
    """Computes ``(loss, outputs, targets)`` from a batch; outputs/targets feed accuracy.

    The kind of batch is checked once, on the first batch, so the hot path is a
    straight call.
    """

    def __init__(self, loss: LossFn | None, compute_loss: ComputeLoss | None) -> None:
        self.loss = loss
        self.compute_loss = compute_loss

    def __call__(self, model: nn.Module, batch: Batch) -> tuple[torch.Tensor, Any, Any]:
        if self.compute_loss is not None:
            return self.compute_loss(model, batch), None, None
        if isinstance(batch, Mapping):
            if self.loss is not None and "labels" in batch:
                inputs = {k: v for k, v in batch.items() if k != "labels"}
                out = _logits(model(**inputs))
                return self.criterion(out, batch["labels"]), out, batch["labels"]
            out = model(**batch)
            value = _model_loss(out)
            if value is None:
                raise UsageError(
                    "a dict batch needs a model that returns .loss, or a 'labels' key with loss=...: "
                    "pass loss= with labels in the batch, or compute_loss=(model, batch) -> loss"
                )
            labels = batch.get("labels")
            return value, _logits(out), labels
        if isinstance(batch, (tuple, list)) and len(batch) >= 2:
            if self.loss is None:
                raise UsageError(
                    "(inputs, targets) batches need a loss: pass loss=nn.CrossEntropyLoss() (or another criterion), "
                    "or compute_loss=(model, batch) -> loss"
                )
            *inputs, targets = batch
            out = model(*inputs)
            try:
                return self.criterion(out, targets), out, targets
            except TypeError as exc:
                if isinstance(out, torch.Tensor):
                    raise
                raise UsageError(_not_a_tensor(out, exc)) from exc
        raise UsageError(
            f"cannot read a batch of type {type(batch).__name__}: tunekit takes (inputs, targets) tuples or dicts; "
            "for anything else pass compute_loss=(model, batch) -> loss"
        )

    def criterion(self, out: Any, targets: Any) -> torch.Tensor:
        """``loss(out, targets)``; an IndexError from labels out of the outputs' class range is said as such."""
        try:
            return self.loss(out, targets)  # type: ignore[misc]
        except IndexError as exc:
            # The criterion, or the user's own loss, indexed with a label past the classes: the data's
            # fault, said as such. An IndexError with every label in range is theirs, and propagates.
            # (On CUDA the kernel asserts on the device instead: nothing to catch there.)
            problem = label_problem(out, targets, getattr(self.loss, "ignore_index", -100))
            if problem is None:
                raise
            raise SetupError(problem) from exc


def class_layout(outputs: torch.Tensor, targets: torch.Tensor) -> Optional[int]:
    """The class dimension of ``outputs`` when ``targets`` hold one class id per prediction
    (``outputs [.., C]`` with ``targets [..]``, or PyTorch's ``[B, C, ..]`` with ``[B, ..]``), else None."""
    if outputs.ndim != targets.ndim + 1:
        return None
    if outputs.shape[:-1] == targets.shape:
        return outputs.ndim - 1
    if outputs.shape[0] == targets.shape[0] and outputs.shape[2:] == targets.shape[1:]:
        return 1
    return None


def label_problem(outputs: Any, targets: Any, ignore_index: int = -100) -> Optional[str]:
    """What is wrong with integer labels that fall outside the outputs' classes, else None."""
    if not (isinstance(outputs, torch.Tensor) and isinstance(targets, torch.Tensor)):
        return None
    if targets.is_floating_point() or targets.dtype == torch.bool:
        return None
    dim = class_layout(outputs, targets)
    if dim is None:
        return None
    classes = int(outputs.shape[dim])
    labels = targets[targets != ignore_index]
    bad = labels[(labels < 0) | (labels >= classes)]
    if not bad.numel():
        return None
    return (f"label {int(bad[0])} is out of range for the model's {classes} classes (labels must lie in 0..{classes - 1}; "
            f"this batch holds {int(labels.min())}..{int(labels.max())}): make the output layer as wide as the number "
            f"of classes, or remap the labels to 0..{classes - 1}")


def loss_problem(loss: Any, compute: Optional[LossComputer] = None) -> Optional[tuple[str, str]]:
    """(what is wrong, the fix) when ``loss`` cannot be a training step's loss (not a tensor, not one value), else None.

    Reads only its type and shape: no host sync, and fake tensors (the memory trace) pass."""
    if not isinstance(loss, torch.Tensor):
        what = "None" if loss is None else f"a {type(loss).__name__}" + (f" ({loss!r})" if isinstance(loss, (int, float)) else "")
        return (f"the loss returned {what}, not a tensor",
                "return the loss tensor itself (not loss.item() or float(loss)), so that it can be backpropagated")
    if loss.numel() != 1:
        return f"the loss returned a tensor of shape {tuple(loss.shape)}, not a scalar", _reduce_hint(compute)
    return None


def _reduce_hint(compute: Optional[LossComputer]) -> str:
    """How to make a criterion's (or compute_loss's) per-sample losses one value."""
    criterion = getattr(compute, "loss", None)
    if getattr(compute, "compute_loss", None) is not None:
        return "reduce it to one value in compute_loss, e.g. return loss.mean()"
    if isinstance(criterion, nn.Module) and getattr(criterion, "reduction", None) == "none":
        name = type(criterion).__name__
        prefix = "nn." if type(criterion).__module__.startswith("torch.nn") else ""
        return f"use reduction='mean' ({prefix}{name}(reduction='mean')) or reduce it in compute_loss"
    return "reduce it to one value in the loss (e.g. .mean()), or in compute_loss"


def check_optimizer_holds(model: nn.Module, optimizer: torch.optim.Optimizer) -> None:
    """Refuse an optimizer that holds none of ``model``'s parameters (built on another model's).

    One that holds only some of them (a frozen backbone) or others besides (a loss with parameters) is fine."""
    own = {id(p) for p in model.parameters()}
    if any(id(p) in own for g in optimizer.param_groups for p in g["params"]):
        return
    name = type(optimizer).__name__
    opt = f"torch.optim.{name}" if type(optimizer).__module__.startswith("torch.optim") else name
    raise SetupError(f"the optimizer ({name}) holds none of the model's parameters: it was built on another model's; "
                     f"build the optimizer on this model's parameters: {opt}(model.parameters())")


def _not_a_tensor(out: Any, exc: TypeError) -> str:
    """The hint for a model whose output a criterion cannot take (a tuple, a dict, a model output)."""
    what = f"a {type(out).__name__}" + (f" of {len(out)}" if isinstance(out, (tuple, list)) else "")
    return (f"the model returned {what}, not a tensor, and loss(outputs, targets) cannot take it "
            f"({type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}): pass "
            "compute_loss=lambda model, batch: criterion(model(batch[0])[0], batch[1]), or return the logits alone")


def accuracy_counts(outputs: Any, targets: Any) -> tuple[int, int] | None:
    """(correct, counted) for classification-shaped outputs, else None.

    Applies when outputs are float scores of shape ``targets.shape + (C,)`` and
    targets are integer class ids; ids of -100 (PyTorch's ignore_index) are skipped.
    """
    if not (isinstance(outputs, torch.Tensor) and isinstance(targets, torch.Tensor)):
        return None
    if not outputs.is_floating_point() or targets.is_floating_point() or targets.dtype == torch.bool:
        return None
    if outputs.ndim != targets.ndim + 1 or outputs.shape[:-1] != targets.shape:
        return None
    mask = targets != -100
    correct = ((outputs.argmax(-1) == targets) & mask).sum()
    return int(correct), int(mask.sum())
