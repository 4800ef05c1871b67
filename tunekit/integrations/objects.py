"""Their objects taken where a Task or a model goes: :func:`adapt` (probes), :func:`adapt_for_search`,
and the decorator that lets ``lr_find``, ``probe`` and ``doctor`` take them (see the package's docstring)."""

from __future__ import annotations

import copy
import functools
import inspect
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Optional, TypeVar

from torch import nn

from tunekit.errors import UsageError
from tunekit.integrations.adapted import Adapted, kind_of, say_notes
from tunekit.integrations.hf import from_trainer
from tunekit.integrations.lightning import from_lightning

__all__ = ["LightningRun", "adapt", "adapt_for_search", "takes_their_objects"]

F = TypeVar("F", bound=Callable[..., Any])


@dataclass
class LightningRun:
    """A LightningModule with what Lightning trains it with: its datamodule and its ``lightning.Trainer``.

    ``module`` is the module in hand, or (for ``tunekit.search``) a function returning a fresh one."""

    module: Any
    datamodule: Any = None
    trainer: Any = None


def adapt(obj: Any, train_data: Any = None, own_loss: bool = False) -> Optional[Adapted]:
    """The user's Trainer or module, in hand, as an :class:`Adapted` Task; None for anything else.

    A LightningModule given with a loss of the caller's (``own_loss``: a ``loss_fn`` or ``compute_loss``,
    as tunekit's own checks pass one) is a plain model: only its ``training_step`` makes it Lightning's."""
    if isinstance(obj, LightningRun):
        if callable(obj.module) and kind_of(obj.module) is None:
            raise UsageError("LightningRun(module=a factory) is for tunekit.search: give lr_find, probe and doctor "
                             "the module itself")
        return from_lightning(obj.module, obj.datamodule if obj.datamodule is not None else train_data, obj.trainer)
    kind = kind_of(obj)
    if kind == "hf":
        if train_data is not None:
            raise UsageError("a Trainer brings its own data (train_dataset): do not pass train_data too")
        return from_trainer(obj)
    if kind == "lightning" and not own_loss:
        return from_lightning(obj, train_data)
    return None


def adapt_for_search(obj: Any) -> Optional[Adapted]:
    """What a search takes: fresh models per trial from a Trainer, a LightningRun or a factory of either."""
    if isinstance(obj, LightningRun):
        build = obj.module if kind_of(obj.module) is None else None
        template = build() if build is not None else obj.module
        return from_lightning(template, obj.datamodule, obj.trainer, factory=build or _copies(template))
    kind = kind_of(obj)
    if kind == "hf":
        return from_trainer(obj, fresh=True)
    if kind == "lightning":
        return from_lightning(obj, factory=_copies(obj))
    if callable(obj) and not isinstance(obj, (type, nn.Module)) and _takes_nothing(obj):
        made = obj()
        made_kind = kind_of(made)
        if made_kind == "hf":
            adapted = from_trainer(made, fresh=True)
            adapted.task.model.build = lambda: obj().model  # a fresh Trainer per trial, as its factory makes it
            return adapted
        if made_kind == "lightning":
            return from_lightning(made, factory=obj)
    return None


def _takes_nothing(fn: Any) -> bool:
    """A factory called with no arguments (a builtin whose signature cannot be read is not one)."""
    try:
        return not inspect.signature(fn).parameters
    except (TypeError, ValueError):
        return False


def _copies(module: Any) -> Callable[[], Any]:
    template = copy.deepcopy(module).to("cpu")
    return lambda: copy.deepcopy(template)


def takes_their_objects(fn: F) -> F:
    """Let ``fn(model, train_data, ...)`` (lr_find, probe, doctor) take a Trainer or a Lightning module.

    Their objects become a Task whose model is the one in hand, worked on where it lives, and whose
    defaults are their recipe (which ``fn`` reads as it reads any Task's); each setting that cannot
    be honoured is warned once; the result records where it came from."""

    @functools.wraps(fn)
    def wrapper(model: Any, *args: Any, **kwargs: Any) -> Any:
        train_data = args[0] if args else kwargs.get("train_data")
        own_loss = (len(args) > 1 and args[1] is not None) or any(
            kwargs.get(k) is not None for k in ("loss_fn", "compute_loss"))
        adapted = adapt(model, train_data, own_loss)
        if adapted is None:
            return fn(model, *args, **kwargs)
        args = (None, *args[1:]) if args else args
        kwargs.pop("train_data", None)
        kwargs["device"] = adapted.device(kwargs.get("device", "auto"))
        say_notes(adapted)
        try:
            with adapted.speaking():  # advice in their terms: the Trainer's eval_dataset, not the task's val_data
                result = fn(adapted.task, *args, **kwargs)
        finally:
            adapted.close()
        restate = getattr(result, "restate", None)
        if callable(restate):  # its advice in their terms: a doctor's "try lr=" is their learning_rate=
            restate(adapted.in_their_terms)
        settings = getattr(result, "settings", None)
        if settings is not None and hasattr(settings, "__setitem__"):  # a dict, or a result's settings record
            settings["from"] = {"kind": adapted.kind, "notes": list(adapted.notes)}
        return result
    return wrapper  # type: ignore[return-value]
