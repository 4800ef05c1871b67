from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import torch
from torch import nn

from tunekit.errors import UsageError, shown
from tunekit.inputs.task import OptimizerFactory, default_optimizer


def _sgd(params: Iterable[nn.Parameter]) -> torch.optim.Optimizer:
    return torch.optim.SGD(params, lr=0.1, momentum=0.9, weight_decay=5e-4)


def optimizer_from_config(config: dict[str, Any]) -> OptimizerFactory:
    """The built-in tasks' optimizer choice: ``adamw`` (default) or ``sgd`` (momentum 0.9)."""
    name = str(config.get("optimizer", "adamw")).lower()
    if name == "adamw":
        return default_optimizer
    if name == "sgd":
        return _sgd
    raise UsageError(f"optimizer {shown(name)} is unknown for the built-in tasks: use adamw or sgd (e.g. --set optimizer=sgd)")


def check_config(task: str, config: dict[str, Any], known: dict[str, type]) -> dict[str, Any]:
    """Refuse unknown keys and values of the wrong type, naming them; return the cast values."""
    unknown = sorted(set(config) - set(known))
    if unknown:
        raise UsageError(f"task '{task}' has no setting {shown(unknown[0])}: its settings are {', '.join(sorted(known))}")
    out: dict[str, Any] = {}
    for key, value in config.items():
        kind = known[key]
        try:
            out[key] = kind(value)
        except (TypeError, ValueError, OverflowError):  # OverflowError: int(inf)
            raise UsageError(f"task '{task}': {key}={shown(value)} is not of type {kind.__name__}") from None
        if kind in (int, float) and out[key] < 0 or (key == "dropout" and not 0 <= out[key] < 1):
            raise UsageError(f"task '{task}': {key}={shown(value)} is out of range")
        if kind is int and out[key] < 1:
            raise UsageError(f"task '{task}': {key}={shown(value)} must be a positive integer")
    return out
