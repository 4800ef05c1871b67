"""What a Hugging Face ``Trainer`` or a Lightning module becomes: a :class:`~tunekit.Task`, their recipe as its defaults.

tunekit reads the user's settings from their objects rather than asking for them again, and says in
one line each what it cannot honour (:attr:`Adapted.notes`). Everything then runs through the one
shared step, as for any Task.
"""

from __future__ import annotations

import contextlib
import warnings
import weakref
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any, Optional

import torch
from torch import nn

from tunekit.errors import UsageError
from tunekit.inputs.task import Task

__all__ = ["Adapted", "LatestModel", "IntegrationWarning", "say_notes", "kind_of", "in_their_terms"]


# tunekit's advice, as said of a Task, and what the user of each object does instead.
_THEIR_TERMS: dict[str, tuple[tuple[str, str], ...]] = {
    "transformers.Trainer": (
        ("(or give the task val_data)", "(or give the Trainer an eval_dataset)"),
        ("give the task val_data", "give the Trainer an eval_dataset"),
        ("compute_loss=(model, batch) -> loss",
         "compute_loss=(model, batch) -> loss to lr_find, probe and doctor, or give the Trainer "
         "compute_loss_func=(outputs, labels, num_items_in_batch) -> loss (what search uses)"),
        ("try lr=", "try learning_rate="),  # the doctor's fix, as their TrainingArguments name it
    ),
    "lightning.LightningModule": (
        ("give the task val_data", "give the module or its datamodule a val_dataloader() (LightningRun(module, "
         "datamodule, trainer))"),
    ),
}


def in_their_terms(message: str, origin: Optional[str]) -> str:
    """tunekit's advice (said of a Task) as the user of the object ``origin`` names acts on it."""
    for ours, theirs in _THEIR_TERMS.get(origin or "", ()):
        if theirs not in message:  # said once, however many seams it passes
            message = message.replace(ours, theirs)
    return message


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
    # Settings their training cannot change from its recipe (a module without a scheduler trains at a
    # constant LR): a search over a shipped space keeps them fixed, so its best is one they can apply.
    cannot_apply: dict[str, Any] = field(default_factory=dict)

    def close(self) -> None:
        for undo in self.after:
            undo()

    def in_their_terms(self, message: str) -> str:
        """tunekit's advice (said of a Task) as the user of this object acts on it."""
        return in_their_terms(message, self.kind)

    @contextlib.contextmanager
    def speaking(self) -> Iterator[None]:
        """Refusals raised inside, in this object's terms."""
        try:
            yield
        except UsageError as exc:
            said = self.in_their_terms(str(exc))
            if said != str(exc):
                exc.args = (said,)  # the same error (its type, its cause), in their words
            raise

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
        # Held weakly: a finished trial's model is freed with the trial, not kept until the next build.
        self._last: Optional[weakref.ref[nn.Module]] = None

    def __call__(self) -> nn.Module:
        model = self.build()
        self._last = weakref.ref(model)
        return model

    @property
    def last(self) -> Optional[nn.Module]:
        return self._last() if self._last is not None else None

    def model_of(self, params: Iterable[torch.Tensor]) -> nn.Module:
        """The model these parameters belong to: the last one built."""
        params = list(params)
        last = self.last
        own = {id(p) for p in last.parameters()} if last is not None else set()
        if last is None or not params or not all(id(p) in own for p in params):
            raise UsageError("the optimizer factory of a Trainer or LightningModule builds the optimizer of the model "
                             "tunekit built last: call task.make_optimizer(model) right after task.make_model()")
        return last


def kind_of(obj: Any) -> Optional[str]:
    """"hf" for a transformers Trainer, "lightning" for a LightningModule, else None; imports neither library."""
    for cls in type(obj).__mro__:
        module = cls.__module__
        if cls.__name__ == "Trainer" and module.startswith("transformers."):
            return "hf"
        if cls.__name__ == "LightningModule" and module.startswith(("lightning.", "pytorch_lightning.")):
            return "lightning"
    return None
