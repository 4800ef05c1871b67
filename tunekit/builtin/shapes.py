"""``shapes``: a small CNN on 16x16 synthetic images of 10 classes.

Each class is a smooth random template; a sample is its template shifted by up
to 2 pixels, scaled in contrast and buried in noise, so the task is learnable
but not trivial. The data is drawn from a fixed seed, whatever the run's seed.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn
from torch.nn import functional as F
from torch.utils.data import TensorDataset

from tunekit.inputs.task import Task
from tunekit.builtin._common import check_config, optimizer_from_config

__all__ = ["make_shapes", "ShapesCNN", "shapes_task"]

SIZE, CLASSES = 16, 10


def make_shapes(n: int, seed: int = 1234, noise: float = 2.0) -> TensorDataset:
    g = torch.Generator().manual_seed(seed)
    # Class templates from low-frequency noise: upsampled 4x4 random fields.
    tg = torch.Generator().manual_seed(99)
    coarse = torch.randn(CLASSES, 1, 4, 4, generator=tg)
    templates = F.interpolate(coarse, size=(SIZE, SIZE), mode="bicubic", align_corners=False)
    templates = (templates - templates.mean((2, 3), keepdim=True)) / templates.std((2, 3), keepdim=True)
    labels = torch.randint(0, CLASSES, (n,), generator=g)
    x = templates[labels]
    shifts = torch.randint(-2, 3, (n, 2), generator=g)
    x = torch.stack([torch.roll(img, (int(dy), int(dx)), dims=(1, 2)) for img, (dy, dx) in zip(x, shifts)])
    contrast = 0.5 + torch.rand(n, 1, 1, 1, generator=g)
    x = contrast * x + noise * torch.randn(x.shape, generator=g)
    return TensorDataset(x.contiguous(), labels)


class ShapesCNN(nn.Module):
    def __init__(self, width: int = 16, dropout: float = 0.0) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(1, width, 3, padding=1)
        self.conv2 = nn.Conv2d(width, 2 * width, 3, padding=1)
        self.drop = nn.Dropout(dropout)
        self.head = nn.Linear(2 * width * 4 * 4, CLASSES)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = F.max_pool2d(F.relu(self.conv1(x)), 2)
        x = F.max_pool2d(F.relu(self.conv2(x)), 2)
        return self.head(self.drop(x.flatten(1)))


def shapes_task(config: dict[str, Any]) -> Task:
    """Config keys: ``optimizer`` ("adamw" or "sgd"), ``width`` (16), ``dropout`` (0.0), ``n_train`` (4096)."""
    config = check_config("shapes", config, {"width": int, "dropout": float, "n_train": int, "optimizer": str})
    width = int(config.get("width", 16))
    dropout = float(config.get("dropout", 0.0))
    n_train = int(config.get("n_train", 4096))
    data = make_shapes(n_train + 1024)
    x, y = data.tensors
    return Task(
        model=lambda: ShapesCNN(width, dropout),
        train_data=TensorDataset(x[:n_train], y[:n_train]),
        val_data=TensorDataset(x[n_train:], y[n_train:]),
        loss=nn.CrossEntropyLoss(),
        batch_size=64,
        optimizer=optimizer_from_config(config),
        name="shapes",
        defaults={"lr": 3e-3, "max_steps": 200, "eval_every": 50},
    )
