"""The search-efficiency benchmark's own tasks: three small problems of different kinds.

Each is a function ``config -> tunekit.Task`` (``config`` may be None or a dict
of the keys its docstring lists), built in-process from seeded synthetic data
or from Python's own standard-library source: nothing is downloaded. The data
is drawn from fixed seeds, whatever the run's seed.

- ``cnn_adamw``: a small CNN with BatchNorm on 12x12 noisy oriented gratings
  (8 classes by orientation and frequency, random phase and shift), AdamW.
- ``mlp_sgd``: an MLP on a noisy teacher-labelled 6-class problem in 24
  dimensions (three hidden layers), SGD with momentum 0.9 and weight decay.
- ``tiny_lm``: a one-layer GPT-2-style causal Transformer (pre-norm, learned
  positions) predicting the characters of stdlib modules' source code, AdamW.
- ``long_adam``: the long-trial regime (2,400 updates a full trial, where probes are
  cheap next to a trial): a narrow MLP with LayerNorm on the teacher problem, 65,536
  training samples (a full trial at its batch reads about one epoch), Adam.

Each task's final validation loss is U-shaped in the LR at its default batch
and ``max_steps`` (too small: undertrained; too large: unstable), and one full
trial takes about 1-3 s on one CPU thread; validation sets hold <= 1024 samples.
"""

from __future__ import annotations

import importlib
import inspect
import math
import string
from collections.abc import Callable
from functools import lru_cache
from typing import Any, Optional

import torch
from torch import nn
from torch.nn import functional as F
from torch.utils.data import TensorDataset

from tunekit import Task

__all__ = ["TASKS", "cnn_adamw", "mlp_sgd", "tiny_lm", "long_adam"]


def _split(data: TensorDataset, n_val: int) -> tuple[TensorDataset, TensorDataset]:
    """The last ``n_val`` samples are validation, the rest training."""
    tensors = data.tensors
    return (TensorDataset(*(t[:-n_val] for t in tensors)), TensorDataset(*(t[-n_val:] for t in tensors)))


# --- cnn_adamw: oriented gratings ---------------------------------------------------------

IMAGE, GRATING_CLASSES = 12, 8


def gratings(n: int, seed: int = 4321, noise: float = 1.0) -> TensorDataset:
    """``n`` 12x12 images of 8 classes: class k is a Gaussian-windowed grating of
    orientation ``k * pi / 4`` (mod pi) and one of two frequencies, drawn with a
    random phase, a shift of up to 2 pixels, a random contrast, and noise."""
    g = torch.Generator().manual_seed(seed)
    labels = torch.randint(0, GRATING_CLASSES, (n,), generator=g)
    theta = (labels % 4).float() * math.pi / 4
    freq = torch.where(labels < 4, torch.tensor(0.18), torch.tensor(0.32))
    phase = 2 * math.pi * torch.rand(n, generator=g)
    shift = torch.randint(-2, 3, (n, 2), generator=g).float()
    coords = torch.arange(IMAGE).float() - (IMAGE - 1) / 2
    yy, xx = torch.meshgrid(coords, coords, indexing="ij")
    y = yy[None] - shift[:, 0, None, None]
    x = xx[None] - shift[:, 1, None, None]
    along = x * torch.cos(theta)[:, None, None] + y * torch.sin(theta)[:, None, None]
    wave = torch.cos(2 * math.pi * freq[:, None, None] * along + phase[:, None, None])
    window = torch.exp(-(x**2 + y**2) / (2 * 3.5**2))
    contrast = 0.6 + 0.8 * torch.rand(n, 1, 1, generator=g)
    images = contrast * wave * window + noise * torch.randn(n, IMAGE, IMAGE, generator=g)
    return TensorDataset(images[:, None].contiguous(), labels)


class GratingCNN(nn.Module):
    """conv-BN-ReLU-pool twice, then a linear head."""

    def __init__(self, width: int = 12) -> None:
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv2d(1, width, 3, padding=1), nn.BatchNorm2d(width), nn.ReLU(), nn.MaxPool2d(2),
            nn.Conv2d(width, 2 * width, 3, padding=1), nn.BatchNorm2d(2 * width), nn.ReLU(), nn.MaxPool2d(2),
        )
        self.head = nn.Linear(2 * width * (IMAGE // 4) ** 2, GRATING_CLASSES)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.features(x).flatten(1))


def cnn_adamw(config: Optional[dict[str, Any]] = None) -> Task:
    """Config keys: ``width`` (16), ``n_train`` (4096), ``max_steps`` (300)."""
    config = config or {}
    width, n_train = int(config.get("width", 16)), int(config.get("n_train", 4096))
    train, val = _split(gratings(n_train + 512), 512)
    return Task(
        model=lambda: GratingCNN(width),
        train_data=train,
        val_data=val,
        loss=nn.CrossEntropyLoss(),
        optimizer=lambda params: torch.optim.AdamW(params, lr=1e-3, weight_decay=0.01),
        batch_size=32,
        name="cnn_adamw",
        defaults={"lr": 3e-3, "max_steps": int(config.get("max_steps", 300)), "eval_every": 40},
    )


# --- mlp_sgd: a noisy teacher ------------------------------------------------------------

MLP_DIM, MLP_CLASSES = 24, 6


def teacher_data(n: int, seed: int = 2468, temperature: float = 0.3) -> TensorDataset:
    """Gaussian inputs labelled by sampling a random two-layer tanh teacher's softmax:
    the labels are noisy, so the best loss stays well above zero."""
    g = torch.Generator().manual_seed(seed)
    w1 = torch.randn(MLP_DIM, 64, generator=g) / math.sqrt(MLP_DIM)
    w2 = torch.randn(64, MLP_CLASSES, generator=g) / math.sqrt(64) * 3
    x = torch.randn(n, MLP_DIM, generator=g)
    logits = torch.tanh(2 * x @ w1) @ w2 / temperature
    labels = torch.multinomial(torch.softmax(logits, dim=1), 1, generator=g).squeeze(1)
    return TensorDataset(x, labels)


def mlp(hidden: int = 192, depth: int = 3) -> nn.Module:
    """``depth`` ReLU hidden layers of width ``hidden``, then a linear head."""
    layers: list[nn.Module] = []
    width = MLP_DIM
    for _ in range(depth):
        layers += [nn.Linear(width, hidden), nn.ReLU()]
        width = hidden
    return nn.Sequential(*layers, nn.Linear(width, MLP_CLASSES))


def mlp_sgd(config: Optional[dict[str, Any]] = None) -> Task:
    """Config keys: ``hidden`` (192), ``depth`` (3), ``n_train`` (16384), ``max_steps`` (1000)."""
    config = config or {}
    hidden, depth = int(config.get("hidden", 192)), int(config.get("depth", 3))
    n_train = int(config.get("n_train", 16384))
    train, val = _split(teacher_data(n_train + 1024), 1024)
    return Task(
        model=lambda: mlp(hidden, depth),
        train_data=train,
        val_data=val,
        loss=nn.CrossEntropyLoss(),
        optimizer=lambda params: torch.optim.SGD(params, lr=0.1, momentum=0.9, weight_decay=5e-4),
        batch_size=64,
        name="mlp_sgd",
        defaults={"lr": 0.03, "max_steps": int(config.get("max_steps", 1000)), "eval_every": 125},
    )


def long_adam(config: Optional[dict[str, Any]] = None) -> Task:
    """Config keys: ``hidden`` (48), ``n_train`` (65536), ``max_steps`` (2400)."""
    config = config or {}
    hidden, n_train = int(config.get("hidden", 48)), int(config.get("n_train", 65536))
    train, val = _split(teacher_data(n_train + 1024, seed=1357), 1024)

    def model() -> nn.Module:
        return nn.Sequential(nn.Linear(MLP_DIM, hidden), nn.LayerNorm(hidden), nn.GELU(),
                             nn.Linear(hidden, hidden), nn.GELU(), nn.Linear(hidden, MLP_CLASSES))

    return Task(
        model=model, train_data=train, val_data=val, loss=nn.CrossEntropyLoss(),
        optimizer=lambda params: torch.optim.Adam(params, lr=1e-3),
        batch_size=32, name="long_adam",
        defaults={"lr": 1e-3, "max_steps": int(config.get("max_steps", 2400)), "eval_every": 300},
    )


# --- tiny_lm: characters of stdlib source --------------------------------------------------

SOURCE_MODULES = ("textwrap", "heapq", "bisect", "fnmatch", "colorsys", "shlex", "queue", "sched", "glob",
                  "fractions", "calendar", "copy", "keyword", "numbers", "operator", "pprint", "reprlib",
                  "string", "tokenize", "weakref")
LM_VOCAB = "\n" + "".join(c for c in string.printable if c.isprintable())
_LM_INDEX = {c: i for i, c in enumerate(LM_VOCAB)}


@lru_cache(maxsize=1)
def source_corpus() -> str:
    """The source code of SOURCE_MODULES, printable ASCII only (tabs dropped), in a fixed order."""
    parts = []
    for name in SOURCE_MODULES:
        try:
            parts.append(inspect.getsource(importlib.import_module(name)))
        except (ImportError, OSError, TypeError):  # a Python without sources: the corpus is smaller
            continue
    return "".join(c for c in "\n\n".join(parts) if c in _LM_INDEX)


class Block(nn.Module):
    """Pre-norm Transformer block: causal self-attention, then a GELU MLP."""

    def __init__(self, dim: int, heads: int) -> None:
        super().__init__()
        self.heads = heads
        self.ln1, self.ln2 = nn.LayerNorm(dim), nn.LayerNorm(dim)
        self.qkv, self.proj = nn.Linear(dim, 3 * dim), nn.Linear(dim, dim)
        self.mlp = nn.Sequential(nn.Linear(dim, 4 * dim), nn.GELU(), nn.Linear(4 * dim, dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, d = x.shape
        q, k, v = self.qkv(self.ln1(x)).view(b, t, 3, self.heads, d // self.heads).permute(2, 0, 3, 1, 4)
        att = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.proj(att.transpose(1, 2).reshape(b, t, d))
        return x + self.mlp(self.ln2(x))


class TinyGPT(nn.Module):
    """Token + learned position embeddings, pre-norm blocks, final LayerNorm, untied head."""

    def __init__(self, vocab: int, dim: int, layers: int, heads: int, context: int) -> None:
        super().__init__()
        self.tok = nn.Embedding(vocab, dim)
        self.pos = nn.Parameter(0.02 * torch.randn(context, dim))
        self.blocks = nn.Sequential(*(Block(dim, heads) for _ in range(layers)))
        self.ln = nn.LayerNorm(dim)
        self.head = nn.Linear(dim, vocab, bias=False)
        nn.init.normal_(self.tok.weight, std=0.02)

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        return self.head(self.ln(self.blocks(self.tok(idx) + self.pos[: idx.shape[1]])))


def lm_loss(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    return F.cross_entropy(logits.flatten(0, 1), targets.flatten())


def char_windows(text: str, context: int) -> TensorDataset:
    """Non-overlapping windows: inputs are ``context`` characters, targets the same shifted by one."""
    ids = torch.tensor([_LM_INDEX[c] for c in text], dtype=torch.long)
    n = (len(ids) - 1) // context
    x = ids[: n * context].view(n, context)
    y = ids[1 : n * context + 1].view(n, context)
    return TensorDataset(x, y)


def tiny_lm(config: Optional[dict[str, Any]] = None) -> Task:
    """Config keys: ``dim`` (64), ``layers`` (1), ``heads`` (4), ``context`` (32), ``max_steps`` (150)."""
    config = config or {}
    dim, layers = int(config.get("dim", 64)), int(config.get("layers", 1))
    heads, context = int(config.get("heads", 4)), int(config.get("context", 32))
    windows = char_windows(source_corpus(), context)
    # Shuffle the windows once (fixed seed) so validation is not one module's tail.
    order = torch.randperm(len(windows), generator=torch.Generator().manual_seed(1357))
    train, val = _split(TensorDataset(*(t[order] for t in windows.tensors)), min(512, len(windows) // 10))
    return Task(
        model=lambda: TinyGPT(len(LM_VOCAB), dim, layers, heads, context),
        train_data=train,
        val_data=val,
        loss=lm_loss,
        optimizer=lambda params: torch.optim.AdamW(params, lr=1e-3, betas=(0.9, 0.95), weight_decay=0.1),
        batch_size=32,
        name="tiny_lm",
        defaults={"lr": 3e-3, "max_steps": int(config.get("max_steps", 150)), "eval_every": 20},
    )


TASKS: dict[str, Callable[[Optional[dict[str, Any]]], Task]] = {
    "cnn_adamw": cnn_adamw, "mlp_sgd": mlp_sgd, "tiny_lm": tiny_lm, "long_adam": long_adam,
}
