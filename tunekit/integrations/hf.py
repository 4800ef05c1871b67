"""A Hugging Face ``transformers.Trainer`` as a tunekit Task: its model, data, collator, loss and recipe.

Read from ``trainer.args`` (``TrainingArguments``): ``learning_rate``, ``per_device_train_batch_size``,
``gradient_accumulation_steps``, ``max_grad_norm``, ``warmup_steps`` (a fraction of the run), ``lr_scheduler_type``,
``bf16``/``fp16``, ``max_steps`` (else ``num_train_epochs``), ``gradient_checkpointing``, and the
optimizer ``Trainer.create_optimizer`` builds (``optim``, ``weight_decay`` on all but biases and
norms, Adam's betas and epsilon), or the one passed as ``optimizers=(optimizer, scheduler)``.
The loss is the model's own (``labels`` in the batch), or the Trainer's ``compute_loss`` where a
subclass, ``compute_loss_func`` or label smoothing changes it.

transformers is imported by the user's Trainer, never by tunekit.
"""

from __future__ import annotations

# Imported where used, not at the top: transformers; importing this module does not pay for them.
import copy
import math
from collections.abc import Callable, Iterable
from typing import Any, Optional

import torch
from torch import nn
from torch.utils.data import DataLoader, Dataset

from tunekit.defaults import WSD_DECAY
from tunekit.errors import UsageError
from tunekit.inputs.task import Task
from tunekit.integrations.adapted import Adapted, LatestModel

__all__ = ["from_trainer", "training_arguments", "ARG_NAMES"]

# tunekit's setting -> TrainingArguments' name for it.
ARG_NAMES = {"lr": "learning_rate", "batch_size": "per_device_train_batch_size",
             "accumulation_steps": "gradient_accumulation_steps", "warmup": "warmup_steps",
             "weight_decay": "weight_decay", "max_steps": "max_steps", "clip_grad_norm": "max_grad_norm",
             "schedule": "lr_scheduler_type"}
# lr_scheduler_type -> (tunekit's decay, its floor as a fraction of the peak); HF's decays reach 0.
_SCHEDULES = {"linear": ("linear", 0.0), "cosine": ("cosine", 0.0), "constant": ("constant", 1.0),
              "constant_with_warmup": ("constant", 1.0), "cosine_with_min_lr": ("cosine", None),
              "warmup_stable_decay": ("wsd", None)}


def from_trainer(trainer: Any, *, fresh: bool = False) -> Adapted:
    """``trainer`` as a Task. ``fresh=False``: the Task's model is ``trainer.model`` itself (a probe,
    which puts it back); ``fresh=True``: a new one per call (a search's trials), from ``model_init``
    when the Trainer has one, else a copy of the model's weights as they are now."""
    args = trainer.args
    notes: list[str] = []
    if trainer.train_dataset is None:
        raise UsageError("the Trainer has no train_dataset: pass Trainer(..., train_dataset=...), which tunekit trains on")
    latest = LatestModel(_model_factory(trainer, fresh, notes))
    train_data, val_data = _loaders(trainer, notes)
    steps = _run_length(args, len(train_data))
    schedule, floor = _schedule(args, notes, steps)
    defaults: dict[str, Any] = {
        "lr": float(args.learning_rate), "max_steps": steps, "warmup": _warmup(args, steps),
        "schedule": schedule, "min_lr_ratio": floor, "accumulation_steps": int(args.gradient_accumulation_steps),
        "clip_grad_norm": float(args.max_grad_norm) if args.max_grad_norm else None,
    }
    notes += _unsupported(trainer)
    name = type(trainer.model if trainer.model is not None else latest()).__name__
    task = Task(model=latest, train_data=train_data, val_data=val_data, compute_loss=_compute_loss(trainer),
                origin="transformers.Trainer",
                optimizer=_optimizer_factory(trainer, latest), batch_size=int(args.per_device_train_batch_size),
                precision="bf16" if args.bf16 else "fp16" if args.fp16 else "fp32", name=name, defaults=defaults)
    adapted = Adapted(task, "transformers.Trainer", None if fresh else trainer.model, notes,
                      theirs=lambda config: training_arguments(config, trainer))
    if not fresh and _checkpointing_asked(args) and not _checkpointing(trainer.model):
        adapted.after.append(lambda: _disable_checkpointing(trainer.model))
    return adapted


def _model_factory(trainer: Any, fresh: bool, notes: list[str]) -> Callable[[], nn.Module]:
    """The model in hand, or fresh ones: ``model_init`` (HF's convention for a search), else copies."""
    args = trainer.args
    if not fresh:
        if trainer.model is None:
            raise UsageError("the Trainer holds no model (it was built with model_init): pass one with a model, "
                             "or give it to tunekit.search, which builds a model per trial")
        build: Callable[[], nn.Module] = lambda: trainer.model  # noqa: E731
    elif trainer.model_init is not None:
        init = trainer.model_init
        made = init if init.__code__.co_argcount == 0 else (lambda: init(None))
        build = lambda: _as_trainer_sets(made(), args)  # noqa: E731
    else:
        template = copy.deepcopy(trainer.model).to("cpu")  # the weights every trial starts from (a fine-tune's)
        build = lambda: copy.deepcopy(template)  # noqa: E731
    if not _checkpointing_asked(args):
        return build
    if not fresh:
        notes.append("activation (gradient) checkpointing is turned on in your model for the call and off again "
                     "after, as Trainer.train() would turn it on")

    def checkpointed() -> nn.Module:
        model = build()
        _enable_checkpointing(model, args)
        return model
    return checkpointed


def _as_trainer_sets(model: nn.Module, args: Any) -> nn.Module:
    """A fresh model as the Trainer sets its own up: no key/value cache in training (``args.use_cache``)."""
    config = getattr(model, "config", None)
    if config is not None and hasattr(args, "use_cache"):
        config.use_cache = args.use_cache
    return model


def _checkpointing_asked(args: Any) -> bool:
    """TrainingArguments' activation_checkpointing (transformers 5), or gradient_checkpointing (4.x)."""
    return bool(getattr(args, "activation_checkpointing", False) or getattr(args, "gradient_checkpointing", False))


def _enable_checkpointing(model: nn.Module, args: Any) -> None:
    """Turn checkpointing on as ``Trainer.train()`` does, in transformers 5 or 4."""
    kwargs = dict(getattr(args, "activation_checkpointing_kwargs", None)
                  or getattr(args, "gradient_checkpointing_kwargs", None) or {})
    if hasattr(model, "activation_checkpointing_enable"):
        model.activation_checkpointing_enable(activation_checkpointing_kwargs=kwargs or None)
    else:
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs=kwargs or None)


def _disable_checkpointing(model: nn.Module) -> None:
    off = getattr(model, "activation_checkpointing_disable", None) or model.gradient_checkpointing_disable
    off()


def _checkpointing(model: nn.Module) -> bool:
    """Gradient checkpointing is on in ``model`` (transformers' layers carry a ``gradient_checkpointing`` flag)."""
    return any(getattr(m, "gradient_checkpointing", False) is True for m in model.modules())


def _loaders(trainer: Any, notes: list[str]) -> tuple[DataLoader, Optional[DataLoader]]:
    """The training data batched by the Trainer's collator, shuffled by a generator seeded from ``args.seed``
    (tunekit re-batches it at other batch sizes); the evaluation data, in order."""
    args = trainer.args
    dataset, collate = trainer.train_dataset, trainer.data_collator
    if _is_datasets(dataset):  # a datasets.Dataset: the Trainer drops the columns its model does not take
        loader = trainer.get_train_dataloader()
        dataset, collate = loader.dataset, loader.collate_fn
    train = DataLoader(_as_dataset(dataset), batch_size=int(args.per_device_train_batch_size), shuffle=True, collate_fn=collate,
                       drop_last=bool(args.dataloader_drop_last), generator=torch.Generator().manual_seed(int(args.seed)))
    evalset = trainer.eval_dataset
    if isinstance(evalset, dict):
        first = next(iter(evalset))
        notes.append(f"eval_dataset holds {len(evalset)} sets: tunekit scores on the first, {first!r}")
        evalset = evalset[first]
    if evalset is None:
        return train, None
    if _is_datasets(evalset):
        loader = trainer.get_eval_dataloader(evalset)
        evalset, collate = loader.dataset, loader.collate_fn
    return train, DataLoader(_as_dataset(evalset), batch_size=int(args.per_device_eval_batch_size), collate_fn=collate)


class _Indexed(Dataset):
    """A list of samples (the Trainer takes one as a dataset) as a torch Dataset, which tunekit re-batches."""

    def __init__(self, samples: Any) -> None:
        self.samples = samples

    def __len__(self) -> int:
        return len(self.samples)

    def __getitem__(self, i: int) -> Any:
        return self.samples[i]


def _as_dataset(data: Any) -> Any:
    return data if isinstance(data, Dataset) or not hasattr(data, "__getitem__") else _Indexed(data)


def _is_datasets(data: Any) -> bool:
    return type(data).__module__.startswith("datasets.")


def _run_length(args: Any, batches_per_epoch: int) -> int:
    """The run's optimizer updates, as the Trainer counts them: ``max_steps``, else the epochs' updates."""
    if args.max_steps and args.max_steps > 0:
        return int(args.max_steps)
    per_epoch = max(1, batches_per_epoch // int(args.gradient_accumulation_steps))
    return max(1, math.ceil(per_epoch * float(args.num_train_epochs)))


def _warmup(args: Any, steps: int) -> float | int:
    """``warmup_steps`` (or ``warmup_ratio``) as a fraction of the planned run's ``steps``, as a space's warmup
    is: a search's seed trial keeps it at any trial length (8 of 150 updates: 0.053, not the space's middle).
    A warmup as long as the run stays in updates (a fraction is below 1)."""
    warm = int(args.get_warmup_steps(steps))
    return warm / steps if warm < steps else warm


def _schedule(args: Any, notes: list[str], steps: int) -> tuple[str, float]:
    kind = getattr(args.lr_scheduler_type, "value", args.lr_scheduler_type)
    decay, floor = _SCHEDULES.get(kind, ("cosine", 0.0))
    if kind not in _SCHEDULES:
        notes.append(f"lr_scheduler_type={kind!r} is run as warmup + cosine decay to 0 (tunekit's schedules: "
                     "linear, cosine, constant, warmup_stable_decay)")
    kwargs = args.lr_scheduler_kwargs or {}
    if decay == "wsd":  # min_lr_ratio; its decay is tunekit's: a cosine over the last WSD_DECAY of the run
        floor = kwargs.get("min_lr_ratio", 0.0)
        decay_steps = kwargs.get("num_decay_steps")
        sized = decay_steps is None or abs(int(decay_steps) - WSD_DECAY * steps) <= max(1.0, 0.1 * WSD_DECAY * steps)
        if not sized or kwargs.get("decay_type", "cosine") != "cosine":
            notes.append(f"warmup_stable_decay runs its decay as a cosine over the last {WSD_DECAY:.0%} of the run "
                         f"(num_decay_steps={decay_steps}, decay_type={kwargs.get('decay_type', 'cosine')!r} are not read)")
    elif floor is None:  # cosine_with_min_lr: min_lr_rate, or min_lr over the peak
        floor = kwargs.get("min_lr_rate", kwargs.get("min_lr", 0.0) / float(args.learning_rate))
    return decay, float(floor)


def _unsupported(trainer: Any) -> list[str]:
    """What tunekit's step does not do that this Trainer would: one line each."""
    args, notes = trainer.args, []
    if getattr(trainer, "lr_scheduler", None) is not None:
        notes.append(f"the scheduler passed in optimizers= ({type(trainer.lr_scheduler).__name__}) is replaced by "
                     "tunekit's warmup + decay from the TrainingArguments")
    for flag, what in (("torch_compile", "the model is not compiled"), ("neftune_noise_alpha", "no NEFTune noise"),
                       ("group_by_length", "batches are not grouped by length"),
                       ("deepspeed", "DeepSpeed is not used: one process, one device"),
                       ("fsdp", "FSDP is not used: one process, one device")):
        if getattr(args, flag, None):
            notes.append(f"{flag} is set: {what}")
    gpus = int(getattr(args, "n_gpu", 1) or 1)
    if gpus > 1:
        notes.append(f"the Trainer would split each batch over {gpus} GPUs (DataParallel): tunekit measures one "
                     "device, at per_device_train_batch_size")
    return notes


def _compute_loss(trainer: Any) -> Optional[Callable[[nn.Module, Any], torch.Tensor]]:
    """None (the model's own loss from the batch's labels) unless the Trainer computes it otherwise."""
    from transformers import Trainer  # the user's Trainer imported transformers already

    own = type(trainer).compute_loss is not Trainer.compute_loss
    if not (own or trainer.compute_loss_func is not None or trainer.args.label_smoothing_factor):
        return None
    return lambda model, batch: trainer.compute_loss(model, batch)


def _optimizer_factory(trainer: Any, latest: LatestModel) -> Callable[[Iterable[nn.Parameter]], torch.optim.Optimizer]:
    """The optimizer the Trainer would build (``create_optimizer``) for the model tunekit built last, or
    the one it was given (``optimizers=``), which holds the model in hand's parameters."""
    given = trainer.optimizer

    def build(params: Iterable[nn.Parameter]) -> torch.optim.Optimizer:
        model = latest.model_of(params)
        if given is not None and model is trainer.model:
            return given
        # create_optimizer is public but stores what it builds on the Trainer: build it on a shallow copy,
        # so that the user's Trainer keeps no optimizer of ours.
        shadow = copy.copy(trainer)
        shadow.optimizer = None
        try:
            return shadow.create_optimizer(model)
        except ImportError as exc:  # optim="adamw_bnb_8bit" and friends need a package the Trainer imports late
            raise UsageError(f"TrainingArguments(optim={_optim_name(trainer)!r}) needs a package that is not "
                             f"installed ({exc}): install it, or use optim='adamw_torch'") from None
    return build


def _optim_name(trainer: Any) -> str:
    optim = getattr(trainer.args, "optim", "")
    return str(getattr(optim, "value", optim))


def training_arguments(config: dict[str, Any], trainer: Any = None) -> dict[str, Any]:
    """A search's best configuration (``result.best_config``) as ``TrainingArguments`` keywords: the
    arguments to change, e.g. ``dataclasses.replace(trainer.args, **training_arguments(best))``."""
    out: dict[str, Any] = {}
    for key, value in config.items():
        if key == "precision":
            out["bf16"], out["fp16"] = value == "bf16", value == "fp16"
        elif key == "clip_grad_norm":
            out["max_grad_norm"] = 0.0 if value is None else value
        elif key in ARG_NAMES:
            out[ARG_NAMES[key]] = value
    floor = config.get("min_lr_ratio")
    if out.get("lr_scheduler_type") == "wsd":  # HF's name, its decay sized as tunekit's
        out["lr_scheduler_type"] = "warmup_stable_decay"
        steps = int(config.get("max_steps") or 0)
        out["lr_scheduler_kwargs"] = {"min_lr_ratio": floor or 0.0, "num_decay_steps": max(1, round(WSD_DECAY * steps))}
    elif floor and out.get("lr_scheduler_type", "cosine") == "cosine":  # HF's cosine decays to 0: this one to a floor
        out["lr_scheduler_type"] = "cosine_with_min_lr"
        out["lr_scheduler_kwargs"] = {"min_lr_rate": floor}
    if trainer is not None:  # only what differs from the Trainer's own arguments
        out = {k: v for k, v in out.items() if not _holds(trainer.args, k, v, int(config.get("max_steps") or 0))}
    return out


def _holds(args: Any, name: str, value: Any, steps: int) -> bool:
    """Whether ``args`` already say ``name=value``: a warmup given as a fraction of a run of ``steps`` updates
    holds where the Trainer warms up over as many of them (8 of 150 is 0.053 of it)."""
    if name == "warmup_steps" and isinstance(value, float) and 0 < value < 1 and steps > 0:
        return int(round(value * steps)) == int(args.get_warmup_steps(steps))
    return bool(getattr(args, name, object()) == value)
