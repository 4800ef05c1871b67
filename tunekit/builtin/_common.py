from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import torch
from torch import nn

from ..errors import UsageError
from ..task import OptimizerFactory, default_optimizer


def _sgd(params: Iterable[nn.Parameter]) -> torch.optim.Optimizer:
    return torch.optim.SGD(params, lr=0.1, momentum=0.9, weight_decay=5e-4)


def optimizer_from_config(config: dict[str, Any]) -> OptimizerFactory:
    """The built-in tasks' optimizer choice: ``adamw`` (default) or ``sgd`` (momentum 0.9)."""
    name = str(config.get("optimizer", "adamw")).lower()
    if name == "adamw":
        return default_optimizer
    if name == "sgd":
        return _sgd
    raise UsageError(f"optimizer {name!r} is unknown for the built-in tasks: use adamw or sgd (e.g. --set optimizer=sgd)")
