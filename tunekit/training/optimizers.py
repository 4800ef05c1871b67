"""The optimizer's family and how a peak LR moves with the batch: the one table of families that
lr_find's rules and a search's plan both read, and the one LR-vs-batch rescaler that the probe's plan
and a search's trials both apply.

The families sit differently against the range test's curve and move differently with the batch:
SGD (plain, momentum or Nesterov) linearly (Goyal et al., 2017), per-parameter second-moment optimizers
(Adam, AdamW, RMSprop, Adagrad, Adafactor, ...) by about the square root (Malladi et al., 2022).
"""

from __future__ import annotations

# Imported where used, not at the top: torch; importing this module does not pay for it.
import math
from typing import Any

from tunekit.errors import UsageError

__all__ = ["optimizer_family", "adaptive_classes", "is_adaptive_l2", "rescale_lr", "LR_RULES", "ADAPTIVE_NAMES"]

# How an LR found at one effective batch is carried to another (rescale_lr).
LR_RULES = ("sqrt", "linear", "none", "sqrt_below")

# Second-moment optimizers of other packages, by class name (tunekit imports neither): Hugging Face's
# Adafactor (optim="adafactor") and bitsandbytes' 8-bit and paged Adams (optim="adamw_bnb_8bit", ...).
ADAPTIVE_NAMES = frozenset({"Adafactor", "Adam8bit", "AdamW8bit", "Adam32bit", "AdamW32bit", "PagedAdam",
                            "PagedAdamW", "PagedAdam8bit", "PagedAdamW8bit", "PagedAdamW32bit", "LAMB", "LAMB8bit"})


def adaptive_classes() -> tuple[type, ...]:
    """torch's own per-parameter second-moment optimizers."""
    import torch

    return (torch.optim.Adam, torch.optim.AdamW, torch.optim.RMSprop, torch.optim.Adagrad, torch.optim.Adadelta,
            torch.optim.Adamax, torch.optim.NAdam, torch.optim.RAdam)


def optimizer_family(optimizer: Any) -> str:
    """"sgd" (plain, momentum or Nesterov), "adaptive" (per-parameter second-moment scaling: Adam, AdamW,
    RMSprop, Adagrad, Adafactor...) or "other". lr_find's rules and a search's LR rule read it."""
    import torch

    if isinstance(optimizer, torch.optim.SGD):
        return "sgd"
    if isinstance(optimizer, adaptive_classes()) or type(optimizer).__name__ in ADAPTIVE_NAMES or (
            hasattr(torch.optim, "Adafactor") and isinstance(optimizer, torch.optim.Adafactor)):
        return "adaptive"
    return "other"


def is_adaptive_l2(optimizer: Any) -> bool:
    """Whether the optimizer is adaptive and adds weight decay to the gradient (L2) before its
    per-parameter normalisation, which changes what the number means (Loshchilov & Hutter, 2019); SGD's
    L2 goes through no normalisation, only its momentum: it is decay. torch's built-ins say which they do:
    ``decoupled_weight_decay`` in Adam's (from torch 2.7), NAdam's and RAdam's param groups; AdamW
    decouples; torch's other adaptive ones add it to the gradient. Any other optimizer is taken as
    decoupling, as most recent ones (Lion, Sophia, Adafactor's decay) do."""
    import torch

    group = optimizer.param_groups[0] if optimizer.param_groups else {}
    if "decoupled_weight_decay" in group:
        return not group["decoupled_weight_decay"]
    return isinstance(optimizer, adaptive_classes()) and not isinstance(optimizer, torch.optim.AdamW)


def rescale_lr(lr: float, from_batch: int, to_batch: int, rule: str) -> float:
    """An LR found at effective batch ``from_batch``, carried to ``to_batch`` by ``rule``: ``linear``,
    ``sqrt`` (the square root of the ratio), ``sqrt_below`` (the square root below ``from_batch``,
    unchanged above it) or ``none``."""
    if rule not in LR_RULES:
        raise UsageError(f"LR rule {rule!r} is unknown: use one of {', '.join(LR_RULES)}")
    ratio = to_batch / from_batch
    if rule == "sqrt_below":
        return lr * math.sqrt(min(ratio, 1.0))
    return lr * (ratio if rule == "linear" else math.sqrt(ratio) if rule == "sqrt" else 1.0)
