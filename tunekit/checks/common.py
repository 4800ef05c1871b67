"""What the checks share: reading a batch into inputs, targets and outputs, and user errors."""

from __future__ import annotations

import traceback
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Optional

import torch
from torch import nn

from tunekit.inputs.data import Batch, batch_size_of
from tunekit.errors import UsageError
from tunekit.inputs.task import LossComputer
from tunekit.results import Finding

__all__ = ["Forward", "forward", "split_xy", "slice_batch", "tensors_of", "raised", "leaf_name"]


def split_xy(batch: Batch) -> tuple[Any, Optional[torch.Tensor]]:
    """(the inputs, the targets) of a tuple or dict batch; targets None where the batch has none."""
    if isinstance(batch, Mapping):
        labels = batch.get("labels")
        return {k: v for k, v in batch.items() if k != "labels"}, labels if isinstance(labels, torch.Tensor) else None
    if isinstance(batch, (tuple, list)) and len(batch) >= 2:
        target = batch[-1]
        return tuple(batch[:-1]), target if isinstance(target, torch.Tensor) else None
    return batch, None


def tensors_of(obj: Any) -> list[torch.Tensor]:
    """Every tensor in a (nested) batch or output."""
    if isinstance(obj, torch.Tensor):
        return [obj]
    if isinstance(obj, Mapping):
        return [t for v in obj.values() for t in tensors_of(v)]
    if isinstance(obj, (list, tuple)):
        return [t for v in obj for t in tensors_of(v)]
    if hasattr(obj, "__dict__") and not isinstance(obj, nn.Module):  # an output object (.loss, .logits)
        return [t for v in vars(obj).values() for t in tensors_of(v)]
    return []


def slice_batch(batch: Batch, n: int) -> Batch:
    """The first ``n`` samples of a batch: every tensor whose first dimension is the batch's is cut."""
    size = batch_size_of(batch)

    def cut(v: Any) -> Any:
        if isinstance(v, torch.Tensor):
            return v[:n] if v.ndim and v.shape[0] == size else v
        if isinstance(v, Mapping):
            return {k: cut(x) for k, x in v.items()}
        if isinstance(v, tuple) and hasattr(v, "_fields"):
            return type(v)(*(cut(x) for x in v))
        if isinstance(v, (list, tuple)):
            return type(v)(cut(x) for x in v)
        return v

    return cut(batch)


@dataclass
class Forward:
    """One forward pass: the loss (as the run computes it), the outputs and targets the loss saw."""

    loss: torch.Tensor
    outputs: Any  # the logits/predictions tensor where readable, else None
    targets: Optional[torch.Tensor]


def forward(model: nn.Module, compute: LossComputer, batch: Batch) -> Forward:
    """The loss of ``batch`` exactly as the shared step computes it, with what fed it."""
    loss, outputs, targets = compute(model, batch)
    if not isinstance(outputs, torch.Tensor):
        outputs = None
    if not isinstance(targets, torch.Tensor):
        targets = None
    return Forward(loss, outputs, targets)


def leaf_name(exc: BaseException) -> str:
    """Where an exception was raised: 'file.py:LINE in func' of its innermost frame."""
    frames = traceback.extract_tb(exc.__traceback__)
    if not frames:
        return "?"
    f = frames[-1]
    return f"{f.filename.rsplit('/', 1)[-1]}:{f.lineno} in {f.name}"


def raised(check: str, exc: BaseException, doing: str) -> Finding:
    """A failure finding for an exception the user's model, loss or data raised during a check.

    The run would fail the same way, so it is the check's finding, not tunekit's crash.
    A UsageError (tunekit cannot read the batch or the loss) is the user's to fix too, but
    belongs to the command line: it is re-raised.
    """
    if isinstance(exc, UsageError):
        raise exc
    return Finding(check, "fail", f"{doing} raised {type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"
                   f" (at {leaf_name(exc)})", {"exception": type(exc).__name__, "where": leaf_name(exc)},
                   "the training run would fail the same way: fix the error in the model, loss or data")


def _logits(out: Any) -> Any:
    if isinstance(out, torch.Tensor):
        return out
    if isinstance(out, Mapping):
        return out.get("logits")
    return getattr(out, "logits", None)


def outputs_of(model: nn.Module, compute: LossComputer, batch: Batch) -> tuple[Optional[torch.Tensor], Optional[torch.Tensor]]:
    """(the outputs the loss would see, the targets) without calling the loss, which may be what is
    broken; (None, None) for a custom ``compute_loss``, whose insides tunekit cannot see."""
    if compute.compute_loss is not None:
        return None, None
    inputs, targets = split_xy(batch)
    if isinstance(batch, Mapping):
        out = model(**inputs) if compute.loss is not None and "labels" in batch else model(**batch)
    elif isinstance(batch, (tuple, list)) and len(batch) >= 2:
        out = model(*inputs)
    else:
        return None, None
    logits = _logits(out)
    return (logits if isinstance(logits, torch.Tensor) else None), targets
