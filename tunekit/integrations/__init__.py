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

from collections.abc import Callable
from typing import Any

from tunekit.errors import UsageError
from tunekit.integrations.adapted import Adapted, IntegrationWarning
from tunekit.integrations.hf import from_trainer, training_arguments
from tunekit.integrations.lightning import from_lightning, hyperparameters
from tunekit.integrations.objects import LightningRun, adapt, adapt_for_search, takes_their_objects

__all__ = ["LightningRun", "Adapted", "IntegrationWarning", "adapt", "adapt_for_search", "takes_their_objects", "search_own",
           "training_arguments", "hyperparameters", "from_trainer", "from_lightning"]


def search_own(task: Any, space: Any = "from_scratch", *, run: Callable[[Any], Any], **kwargs: Any) -> Any:
    """A search whose trials run in the user's own loop: ``run(trial)`` trains one, typically
    ``Trainer(..., args=replace(args, **trial.training_arguments()), callbacks=[trial.hf_callback()]).train()``
    or ``lightning.Trainer(**trial.lightning_arguments(), callbacks=[trial.lightning_callback()]).fit(module)``.

    ``task`` is what the probes measure (a Trainer, a LightningRun, a Task or a spec); ``kwargs`` are
    :func:`tunekit.search`'s. The trials are pruned by tunekit's rungs through the callbacks' reports,
    one after another in this process, with the memory a finished trial left collected before the next."""
    import inspect

    from tunekit.hpsearch.backends.own import OwnLoop
    from tunekit.hpsearch.options import Local
    from tunekit.hpsearch.run import search, search_with, settings_of
    from tunekit.inputs.task_spec import task_of

    backend = kwargs.get("backend", Local())
    if not isinstance(backend, Local) and backend != "local":
        raise UsageError(f"search_own runs trials in this process, in your loop: backend={backend!r} "
                         "cannot be used with it; drop backend=")
    if not callable(run):
        raise UsageError(f"run must be a function of one trial, got {run!r}: pass run=lambda trial: ...")
    given = {n: kwargs.pop(n, p.default) for n, p in inspect.signature(search).parameters.items()
             if p.kind is inspect.Parameter.KEYWORD_ONLY}  # search()'s own defaults for what is not given
    settings = settings_of(task, deprecated=kwargs, caller="search_own", **given)
    return search_with(task_of(task), space, settings, OwnLoop(run))
