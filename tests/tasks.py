"""Tiny seeded tasks shared by the tests (after pytorch-lr-finder's tests/task.py)."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import torch
from torch import nn
from torch.utils.data import TensorDataset

from tunekit import Task


def regression_data(n: int = 256, dim: int = 8, noise: float = 0.1, seed: int = 0) -> TensorDataset:
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, dim, generator=g)
    w = torch.randn(dim, 1, generator=g)
    y = x @ w + noise * torch.randn(n, 1, generator=g)
    return TensorDataset(x, y)


def classification_data(n: int = 256, dim: int = 8, classes: int = 4, seed: int = 0) -> TensorDataset:
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, dim, generator=g)
    y = (x[:, :classes]).argmax(1)
    return TensorDataset(x, y)


class MLP(nn.Module):
    def __init__(self, dim: int = 8, hidden: int = 16, out: int = 1, dropout: float = 0.0) -> None:
        super().__init__()
        self.net = nn.Sequential(nn.Linear(dim, hidden), nn.ReLU(), nn.Dropout(dropout), nn.Linear(hidden, out))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x)


def regression_task(config: dict[str, Any] | None = None) -> Task:
    config = config or {}
    hidden = int(config.get("hidden", 16))
    return Task(
        model=lambda: MLP(8, hidden, 1),
        train_data=regression_data(256),
        val_data=regression_data(64, seed=1),
        loss=nn.MSELoss(),
        batch_size=16,
        name="regression",
    )


def classification_task() -> Task:
    return Task(
        model=lambda: MLP(8, 16, 4),
        train_data=classification_data(256),
        val_data=classification_data(128, seed=1),
        loss=nn.CrossEntropyLoss(),
        batch_size=32,
        name="classification",
    )


class HFStyleModel(nn.Module):
    """Returns an object with .loss and .logits, like a Hugging Face model given labels."""

    def __init__(self, dim: int = 8, classes: int = 4) -> None:
        super().__init__()
        self.linear = nn.Linear(dim, classes)

    def forward(self, input_values: torch.Tensor, labels: torch.Tensor | None = None) -> SimpleNamespace:
        logits = self.linear(input_values)
        loss = nn.functional.cross_entropy(logits, labels) if labels is not None else None
        return SimpleNamespace(loss=loss, logits=logits)


class PlainDictModel(nn.Module):
    """Takes dict batches' inputs as keywords and returns bare logits (no .loss)."""

    def __init__(self, dim: int = 8, classes: int = 4) -> None:
        super().__init__()
        self.linear = nn.Linear(dim, classes)

    def forward(self, input_values: torch.Tensor) -> torch.Tensor:
        return self.linear(input_values)


def dict_batches(n_batches: int = 8, batch: int = 16, seed: int = 0) -> list[dict[str, torch.Tensor]]:
    data = classification_data(n_batches * batch, seed=seed)
    x, y = data.tensors
    return [{"input_values": x[i : i + batch], "labels": y[i : i + batch]} for i in range(0, len(x), batch)]


def hf_task() -> Task:
    return Task(model=lambda: HFStyleModel(), train_data=dict_batches(), val_data=dict_batches(2, seed=1), name="hf")


def broken_model_task() -> Task:
    """A model whose forward raises: an internal error, not a usage error."""

    class Broken(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.w = nn.Parameter(torch.zeros(1))

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            raise RuntimeError("boom in forward")

    return Task(model=Broken, train_data=regression_data(32), loss=nn.MSELoss(), batch_size=8)


def not_a_task() -> int:
    return 3


def slow_regression_task(config: dict[str, Any] | None = None) -> Task:
    """Regression whose every step sleeps a little: a trial lasts long enough to be killed mid-way."""
    import time

    task = regression_task(config)

    def compute(model: nn.Module, batch: Any) -> torch.Tensor:
        time.sleep(0.02)
        return nn.functional.mse_loss(model(batch[0]), batch[1])

    task.loss, task.compute_loss = None, compute
    return task


def picky_regression_task(config: dict[str, Any] | None = None) -> Task:
    """Raises for one value of a task hyperparameter: a failing trial."""
    config = config or {}
    if int(config.get("hidden", 16)) == 13:
        raise RuntimeError("hidden=13 is unlucky")
    return regression_task(config)


def softmax_task() -> Task:
    """A classifier with a softmax before CrossEntropyLoss: tunekit doctor fails it."""
    return Task(
        model=lambda: nn.Sequential(MLP(8, 16, 4), nn.Softmax(dim=1)),
        train_data=classification_data(256),
        val_data=classification_data(128, seed=1),
        loss=nn.CrossEntropyLoss(),
        batch_size=32,
        name="softmax",
    )
