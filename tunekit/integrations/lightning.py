"""A ``LightningModule`` (with its datamodule, and optionally its ``lightning.Trainer``) as a tunekit Task.

The loss is the module's ``training_step(batch, batch_idx)`` (a tensor, or a dict with ``"loss"``);
the optimizer is what ``configure_optimizers`` returns; the data is the datamodule's (or the
module's) ``train_dataloader`` and ``val_dataloader``. From the Trainer: ``precision``,
``accumulate_grad_batches``, ``gradient_clip_val`` and ``max_steps`` (else ``max_epochs``).
Without a scheduler the module's recipe is a constant LR, and tunekit keeps it; a scheduler is
replaced by tunekit's warmup + cosine, and said.

lightning is imported by the user's module, never by tunekit.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Callable, Iterable, Mapping
from typing import Any, Optional

import torch
from torch import nn
from torch.utils.data import DataLoader, IterableDataset

from tunekit.errors import UsageError
from tunekit.inputs.data import rebatched_loader
from tunekit.inputs.task import Task
from tunekit.integrations.adapted import Adapted, LatestModel

__all__ = ["from_lightning", "hyperparameters", "trained_hparams"]

# Lightning's precision strings -> tunekit's.
_PRECISION = {"bf16-mixed": "bf16", "bf16-true": "bf16", "bf16": "bf16", "16-mixed": "fp16", "16-true": "fp16",
              "16": "fp16", "32-true": "fp32", "32": "fp32"}
# What a search tunes, as a best configuration gives it back.
TUNED = ("lr", "batch_size", "accumulation_steps", "warmup", "weight_decay", "schedule", "min_lr_ratio", "max_steps",
         "clip_grad_norm", "precision")
# Those a lightning.Trainer takes, under its names.
_TRAINER_NAMES = {"accumulation_steps": "accumulate_grad_batches", "clip_grad_norm": "gradient_clip_val",
                  "max_steps": "max_steps", "precision": "precision"}
# tunekit's settings -> the hyperparameter names modules commonly give them.
_HPARAM_NAMES = {"lr": ("lr", "learning_rate"), "batch_size": ("batch_size",), "weight_decay": ("weight_decay",),
                 "warmup": ("warmup", "warmup_steps")}


def from_lightning(module: Any, datamodule: Any = None, trainer: Any = None, *,
                   factory: Optional[Callable[[], nn.Module]] = None) -> Adapted:
    """``module`` as a Task. Without ``factory`` the Task's model is ``module`` itself (a probe, which
    puts it back); with one, each call builds a fresh module (a search's trials)."""
    notes: list[str] = []
    latest = LatestModel(factory if factory is not None else (lambda: module))
    train, val = _loaders(module, datamodule)
    optimizer, scheduler = _configured(module)
    defaults: dict[str, Any] = {"lr": float(optimizer.param_groups[0]["lr"])}
    fixed: dict[str, Any] = {}
    if scheduler is None:  # Lightning without a scheduler: a constant LR from the first update, which it keeps
        fixed = {"schedule": "constant", "warmup": 0, "min_lr_ratio": 1.0}
        defaults.update(fixed)
    else:
        notes.append(f"the scheduler from configure_optimizers ({type(scheduler).__name__}) is replaced by "
                     "tunekit's warmup + cosine decay")
    precision = _from_trainer(trainer, len(train), defaults, notes)
    task = Task(model=latest, train_data=train, val_data=val, compute_loss=_training_step_loss,
                origin="lightning.LightningModule",
                optimizer=_optimizer_factory(latest), batch_size=train.batch_size, precision=precision,
                name=type(module).__name__, defaults=defaults)
    return Adapted(task, "lightning.LightningModule", module if factory is None else None, notes,
                   theirs=lambda config: hyperparameters(config, module, {**defaults, "batch_size": train.batch_size}),
                   cannot_apply=fixed)


def _hparams(module: Any) -> dict[str, Any]:
    return dict(getattr(module, "hparams", {}) or {})


def _loaders(module: Any, datamodule: Any) -> tuple[DataLoader, Optional[Any]]:
    """The datamodule's loaders (after its ``setup("fit")``, as Lightning calls it), else the module's;
    a map-style training set reshuffled by a seeded generator, so the same call sees the same batches."""
    if isinstance(datamodule, DataLoader):  # the training data itself, given in place of a datamodule
        return _reshuffled(datamodule), None
    source = datamodule if datamodule is not None else module
    if datamodule is not None:
        datamodule.setup("fit")
    try:
        loader = source.train_dataloader()
    except Exception as exc:  # Lightning raises its own error when the hook is not defined
        raise UsageError(f"{type(source).__name__}.train_dataloader() failed ({type(exc).__name__}): pass the "
                         "datamodule, or define train_dataloader on the module") from exc
    if not isinstance(loader, DataLoader):
        raise UsageError(f"train_dataloader() returned a {type(loader).__name__}: tunekit takes one DataLoader")
    loader = _reshuffled(loader)
    val = None
    if _overridden(source, "val_dataloader"):
        val = source.val_dataloader()
        if isinstance(val, (list, tuple)):
            val = val[0] if val else None
    return loader, val


def _reshuffled(loader: DataLoader) -> DataLoader:
    """A map-style loader's dataset, shuffled by a generator seeded at 0 (the same call sees the same batches)."""
    if isinstance(loader.dataset, IterableDataset) or loader.batch_size is None:
        return loader
    return rebatched_loader(loader, loader.batch_size, torch.Generator().manual_seed(0))


def _overridden(obj: Any, hook: str) -> bool:
    """``obj`` defines ``hook`` itself, not only Lightning's base class (whose default raises)."""
    for cls in type(obj).__mro__:
        if hook in vars(cls):
            return not cls.__module__.startswith(("lightning.", "pytorch_lightning."))
    return False


def _configured(module: Any) -> tuple[torch.optim.Optimizer, Any]:
    """(the optimizer, its scheduler or None) from ``module.configure_optimizers()``, in any of its return forms."""
    out = module.configure_optimizers()
    scheduler = None
    if isinstance(out, Mapping):
        out, scheduler = out.get("optimizer"), out.get("lr_scheduler")
    elif isinstance(out, (list, tuple)) and len(out) == 2 and isinstance(out[0], (list, tuple)):
        out, scheduler = out[0], (out[1][0] if out[1] else None)
    if isinstance(out, (list, tuple)):
        if len(out) != 1:
            raise UsageError(f"configure_optimizers returned {len(out)} optimizers: tunekit tunes one optimizer "
                             "(manual optimization, as in GANs, is not supported)")
        out = out[0]
    if not isinstance(out, torch.optim.Optimizer):
        raise UsageError(f"configure_optimizers returned {type(out).__name__}, not an optimizer: return one "
                         "(optionally with a scheduler)")
    if isinstance(scheduler, Mapping):
        scheduler = scheduler.get("scheduler")
    return out, scheduler


def _from_trainer(trainer: Any, batches_per_epoch: int, defaults: dict[str, Any], notes: list[str]) -> str:
    """The Trainer's precision (returned), accumulation, clipping and run length, into ``defaults``."""
    if trainer is None:
        defaults["clip_grad_norm"] = None  # Lightning clips only when told
        return "fp32"
    precision = _PRECISION.get(str(trainer.precision))
    if precision is None:
        notes.append(f"precision={trainer.precision!r} is run in fp32")
        precision = "fp32"
    accumulate = int(trainer.accumulate_grad_batches)
    defaults["accumulation_steps"] = accumulate
    clip = trainer.gradient_clip_val
    defaults["clip_grad_norm"] = float(clip) if clip else None
    if clip and str(getattr(trainer.gradient_clip_algorithm, "value", trainer.gradient_clip_algorithm)) == "value":
        notes.append(f"gradient_clip_algorithm='value' is run as clipping by norm at {clip}")
    if trainer.max_steps and trainer.max_steps > 0:
        defaults["max_steps"] = int(trainer.max_steps)
    elif trainer.max_epochs and trainer.max_epochs > 0:
        defaults["max_steps"] = max(1, math.ceil(batches_per_epoch // accumulate * trainer.max_epochs))
    return precision


def _training_step_loss(model: nn.Module, batch: Any) -> torch.Tensor:
    """The module's own loss: what its ``training_step`` returns (a tensor, or a dict's ``"loss"``)."""
    with warnings.catch_warnings():
        # self.log() with no Lightning Trainer attached warns and does nothing: no Trainer is meant here.
        warnings.filterwarnings("ignore", message=r".*self\.log\(\)")
        out = model.training_step(batch, 0)
    if isinstance(out, Mapping):
        out = out.get("loss")
    if out is None:
        raise UsageError("training_step returned None: return the loss (manual optimization is not supported)")
    return out


def _optimizer_factory(latest: LatestModel) -> Callable[[Iterable[nn.Parameter]], torch.optim.Optimizer]:
    """``configure_optimizers`` of the module tunekit built last (its scheduler is not used)."""
    def build(params: Iterable[nn.Parameter]) -> torch.optim.Optimizer:
        return _configured(latest.model_of(params))[0]
    return build


def hyperparameters(config: dict[str, Any], module: Any = None, recipe: Optional[dict[str, Any]] = None) -> dict[str, Any]:
    """A search's best configuration in the module's terms: the settings tunekit tunes, under the names
    ``module.hparams`` gives them (``lr`` or ``learning_rate``), else as ``lightning.Trainer`` arguments
    (``accumulate_grad_batches``, ``gradient_clip_val``, ``max_steps``) or tunekit's names; a value the
    module's hyperparameters or its run's ``recipe`` (what it trains with now) already hold is left out."""
    have = _hparams(module) if module is not None else {}
    recipe = recipe or {}
    out = {}
    for key in TUNED:
        if key not in config or (key in recipe and recipe[key] == config[key]):
            continue
        names = _HPARAM_NAMES.get(key, (key,))
        name = next((n for n in names if n in have), _TRAINER_NAMES.get(key, names[0]))
        value = _in_their_units(name, config[key], config)
        if name not in have or have[name] != value:
            out[name] = value
    return out


def _in_their_units(name: str, value: Any, config: Mapping[str, Any]) -> Any:
    """A setting as the module's hyperparameter ``name`` holds it: a warmup under ``warmup_steps`` in updates
    of the configuration's run (tunekit's warmup is a fraction of it), else as it is."""
    if name == "warmup_steps" and isinstance(value, float) and value < 1 and config.get("max_steps"):
        return int(round(value * int(config["max_steps"])))
    return value


def trained_hparams(hparams: Mapping[str, Any], config: Mapping[str, Any]) -> dict[str, Any]:
    """A module's ``hparams`` with the settings a trial trained at, under the names the module gives them
    (``lr`` or ``learning_rate``, ``weight_decay``...): a kept checkpoint's, so ``load_from_checkpoint`` builds
    the module as its weights were trained. Only names the module has change: its ``__init__`` takes those."""
    out = dict(hparams)
    for key, names in _HPARAM_NAMES.items():
        name = next((n for n in names if n in out), None)
        if name is not None and key in config:
            out[name] = _in_their_units(name, config[key], config)
    return out
