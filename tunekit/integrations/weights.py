"""A kept trial's weights file (written by :mod:`tunekit.hpsearch.keep`) read back, and loaded into the
model of an object the user holds."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch
from tunekit.errors import UsageError

__all__ = ["load_weights", "load_into"]


def load_into(obj: Any, weights: dict[str, Any]) -> Any:
    """``weights`` (a state_dict) loaded into the model of ``obj`` (a module, a Hugging Face Trainer's ``model``, a
    LightningRun's ``module``), on the device it is on; the model."""

    model = obj if isinstance(obj, torch.nn.Module) else getattr(obj, "model", None)
    if model is None:
        model = getattr(obj, "module", None)
    if not isinstance(model, torch.nn.Module):
        raise UsageError(f"load_best_into takes a torch.nn.Module, a Hugging Face Trainer or a LightningRun, got "
                         f"{type(obj).__name__}: pass the model itself")
    device = next(iter(model.parameters()), torch.empty(0)).device
    model.load_state_dict({k: v.to(device) for k, v in weights.items()})
    return model


def load_weights(path: str | Path) -> dict[str, Any]:
    """A kept file's contents (``state_dict``, ``trial``, ``value``, ...), on the CPU."""
    return torch.load(path, map_location="cpu", weights_only=True)  # type: ignore[no-any-return]
