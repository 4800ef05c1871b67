"""What a Hugging Face ``Trainer`` or a Lightning module becomes: a :class:`~tunekit.Task`, their recipe as its defaults.

tunekit reads the user's settings from their objects rather than asking for them again, and says in
one line each what it cannot honour (:attr:`Adapted.notes`). Everything then runs through the one
shared step, as for any Task.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any, Optional

import torch
from torch import nn

from tunekit.errors import UsageError
from tunekit.inputs.task import Task

__all__ = ["Adapted", "LatestModel", "IntegrationWarning", "say_notes", "kind_of"]


class IntegrationWarning(UserWarning):
    """A setting of the user's Trainer or module that tunekit cannot honour (one line: which, and what it does instead)."""


@dataclass
class Adapted:
    """The user's objects as a Task.

    ``theirs(config)``: a tunekit configuration (a search's best) as their arguments.

    ``task``: its model factory gives the model in hand (probes, which put it back) or a fresh one per
    call (a search); its ``defaults`` are their recipe (lr, warmup, schedule, clipping, accumulation,
    precision, run length). ``model``: the model in hand, if any. ``notes``: what is not honoured."""

    task: Task
    kind: str  # "transformers.Trainer" or "lightning.LightningModule"
    model: Optional[nn.Module] = None
    notes: list[str] = field(default_factory=list)
    after: list[Callable[[], None]] = field(default_factory=list)  # what puts their objects back, when the call ends
    theirs: Optional[Callable[[dict[str, Any]], dict[str, Any]]] = None  # a configuration in their terms

    def close(self) -> None:
        for undo in self.after:
            undo()

    def device(self, device: Any) -> Any:
        """A model in hand is worked on where it lives: "auto" is its device (moving it would change their object)."""
        if self.model is None or device not in (None, "auto"):
            return device
        param = next(self.model.parameters(), None)
        return str(param.device) if param is not None else device


def say_notes(adapted: Adapted) -> None:
    """Each setting tunekit cannot honour, as one warning line (shown once per call site)."""
    for note in adapted.notes:
        warnings.warn(f"{adapted.kind}: {note}", IntegrationWarning, stacklevel=3)


class LatestModel:
    """A model factory that remembers what it built last, for optimizer factories that need the model.

    tunekit builds the optimizer right after the model (``Task.make_optimizer(model)`` passes the
    model's trainable parameters): a Trainer's or a LightningModule's own optimizer wants the model
    itself (parameter names for weight decay groups, ``configure_optimizers``)."""

    def __init__(self, build: Callable[[], nn.Module]) -> None:
        self.build = build
        self.last: Optional[nn.Module] = None

    def __call__(self) -> nn.Module:
        self.last = self.build()
        return self.last

    def model_of(self, params: Iterable[torch.Tensor]) -> nn.Module:
        """The model these parameters belong to: the last one built."""
        params = list(params)
        own = {id(p) for p in self.last.parameters()} if self.last is not None else set()
        if not params or not all(id(p) in own for p in params):
            raise UsageError("the optimizer factory of a Trainer or LightningModule builds the optimizer of the model "
                             "tunekit built last: call task.make_optimizer(model) right after task.make_model()")
        return self.last  # type: ignore[return-value]


def kind_of(obj: Any) -> Optional[str]:
    """"hf" for a transformers Trainer, "lightning" for a LightningModule, else None; imports neither library."""
    for cls in type(obj).__mro__:
        module = cls.__module__
        if cls.__name__ == "Trainer" and module.startswith("transformers."):
            return "hf"
        if cls.__name__ == "LightningModule" and module.startswith(("lightning.", "pytorch_lightning.")):
            return "lightning"
    return None
