"""Where users already train: a Hugging Face ``Trainer`` or a Lightning module, taken as they are.

``tunekit.lr_find``, ``tunekit.probe`` and ``tunekit.doctor`` take, in place of a Task or a model:

- a ``transformers.Trainer`` (its model, ``train_dataset``, ``data_collator``, ``eval_dataset`` and
  ``TrainingArguments``): :mod:`.hf`;
- a ``LightningModule``, with its datamodule (or a DataLoader) as ``train_data``, or
  :class:`LightningRun` ``(module, datamodule, trainer)`` for the Lightning Trainer's precision,
  accumulation, clipping and run length: :mod:`.lightning`.

``tunekit.search`` takes a Trainer (fresh models from its ``model_init``, else copies of its
model), a :class:`LightningRun` whose module is a factory, or a function returning a fresh Trainer
or module. :func:`training_arguments` and :func:`hyperparameters` give a best configuration back in
their terms; :mod:`.callbacks` makes a user's own ``trainer.fit``/``trainer.train`` a tunekit trial.

Neither library is imported by tunekit: the user's objects have imported them already.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Optional, TypeVar

from tunekit.errors import UsageError
from tunekit.integrations.adapted import Adapted, IntegrationWarning, kind_of, say_notes
from tunekit.integrations.hf import from_trainer, training_arguments
from tunekit.integrations.lightning import from_lightning, hyperparameters

__all__ = ["LightningRun", "Adapted", "IntegrationWarning", "adapt", "adapt_for_search", "takes_their_objects", "search_own",
           "training_arguments", "hyperparameters", "from_trainer", "from_lightning"]

F = TypeVar("F", bound=Callable[..., Any])


@dataclass
class LightningRun:
    """A LightningModule with what Lightning trains it with: its datamodule and its ``lightning.Trainer``.

    ``module`` is the module in hand, or (for ``tunekit.search``) a function returning a fresh one."""

    module: Any
    datamodule: Any = None
    trainer: Any = None


def adapt(obj: Any, train_data: Any = None) -> Optional[Adapted]:
    """The user's Trainer or module, in hand, as an :class:`Adapted` Task; None for anything else."""
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
    if kind == "lightning":
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
    if callable(obj) and not isinstance(obj, type) and not inspect.signature(obj).parameters:
        made = obj()
        made_kind = kind_of(made)
        if made_kind == "hf":
            adapted = from_trainer(made, fresh=True)
            adapted.task.model.build = lambda: obj().model  # a fresh Trainer per trial, as its factory makes it
            return adapted
        if made_kind == "lightning":
            return from_lightning(made, factory=obj)
    return None


def search_own(task: Any, space: Any = "from_scratch", *, run: Callable[[Any], Any], **kwargs: Any) -> Any:
    """A search whose trials run in the user's own loop: ``run(trial)`` trains one, typically
    ``Trainer(..., args=replace(args, **trial.training_arguments()), callbacks=[trial.hf_callback()]).train()``
    or ``lightning.Trainer(**trial.lightning_arguments(), callbacks=[trial.lightning_callback()]).fit(module)``.

    ``task`` is what the probes measure (a Trainer, a LightningRun, a Task or a spec); ``kwargs`` are
    :func:`tunekit.search`'s. The trials are pruned by tunekit's rungs through the callbacks' reports,
    one after another in this process, with the memory a finished trial left collected before the next."""
    from tunekit.hpsearch.backends.own import OwnLoop
    from tunekit.hpsearch.run import search_with
    from tunekit.hpsearch.settings import SearchSettings

    if kwargs.get("backend", "local") != "local":
        raise UsageError(f"search_own runs trials in this process, in your loop: backend={kwargs['backend']!r} "
                         "cannot be used with it; drop backend=")
    if not callable(run):
        raise UsageError(f"run must be a function of one trial, got {run!r}: pass run=lambda trial: ...")
    return search_with(task, space, SearchSettings(**kwargs), OwnLoop(run))


def _copies(module: Any) -> Callable[[], Any]:
    import copy

    template = copy.deepcopy(module).to("cpu")
    return lambda: copy.deepcopy(template)


def takes_their_objects(fn: F) -> F:
    """Let ``fn(model, train_data, ...)`` (lr_find, probe, doctor) take a Trainer or a Lightning module.

    Their objects become a Task whose model is the one in hand, worked on where it lives; the
    recipe's accumulation and clipping fill what the call leaves unset; each setting that cannot
    be honoured is warned once; the result records where it came from."""
    params = inspect.signature(fn).parameters

    @functools.wraps(fn)
    def wrapper(model: Any, *args: Any, **kwargs: Any) -> Any:
        train_data = args[0] if args else kwargs.get("train_data")
        adapted = adapt(model, train_data)
        if adapted is None:
            return fn(model, *args, **kwargs)
        args = (None, *args[1:]) if args else args
        kwargs.pop("train_data", None)
        kwargs["device"] = adapted.device(kwargs.get("device", "auto"))
        for key in ("accumulation_steps", "clip_grad_norm"):
            if key in params and key not in kwargs and key in adapted.task.defaults:
                kwargs[key] = adapted.task.defaults[key]
        say_notes(adapted)
        try:
            result = fn(adapted.task, *args, **kwargs)
        finally:
            adapted.close()
        settings = getattr(result, "settings", None)
        if isinstance(settings, dict):
            settings["from"] = {"kind": adapted.kind, "notes": list(adapted.notes)}
        return result
    return wrapper  # type: ignore[return-value]
