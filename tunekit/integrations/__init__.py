"""Where users already train: a Hugging Face ``Trainer`` or a Lightning module, taken as they are.

``tunekit.lr_find``, ``tunekit.probe`` and ``tunekit.doctor`` take, in place of a Task or a model:

- a ``transformers.Trainer`` (its model, ``train_dataset``, ``data_collator``, ``eval_dataset`` and
  ``TrainingArguments``): :mod:`.hf`;
- a ``LightningModule``, with its datamodule (or a DataLoader) as ``train_data``, or
  :class:`LightningRun` ``(module, datamodule, trainer)`` for the Lightning Trainer's precision,
  accumulation, clipping and run length: :mod:`.lightning`.

``tunekit.search`` and ``tunekit.train`` take a Trainer (fresh models from its ``model_init``, else copies of its
model), a :class:`LightningRun` whose module is a factory, or a function returning a fresh Trainer
or module. :func:`training_arguments` and :func:`hyperparameters` give a best configuration back in
their terms; :mod:`.callbacks` makes a user's own loop a trial (:func:`tunekit.search_own`). Neither
library is imported by tunekit: the user's objects have imported them already.
"""

from __future__ import annotations

from tunekit.integrations.adapted import Adapted, IntegrationWarning
from tunekit.integrations.hf import from_trainer, training_arguments
from tunekit.integrations.lightning import from_lightning, hyperparameters
from tunekit.integrations.objects import LightningRun, adapt, adapt_for_search
from tunekit.integrations.task_spec import takes_their_objects

__all__ = ["LightningRun", "Adapted", "IntegrationWarning", "adapt", "adapt_for_search", "takes_their_objects",
           "training_arguments", "hyperparameters", "from_trainer", "from_lightning"]
