"""``charlm``: a tiny causal Transformer language model on characters.

The corpus is built at run time from the docstrings of a fixed list of Python
standard-library modules, text that every machine with Python has. Characters
outside printable ASCII are dropped, so the vocabulary is the same everywhere.
"""

from __future__ import annotations

import importlib
import inspect
import math
import string
from functools import lru_cache
from typing import Any

import torch
from torch import nn
from torch.nn import functional as F
from torch.utils.data import TensorDataset

from tunekit.errors import UsageError
from tunekit.inputs.task import Task
from tunekit.builtin._common import check_config, optimizer_from_config

__all__ = ["stdlib_corpus", "VOCAB", "encode", "CharTransformer", "charlm_task"]

MODULES = (
    "argparse", "collections", "contextlib", "csv", "dataclasses", "datetime", "decimal", "difflib",
    "functools", "heapq", "inspect", "itertools", "json", "logging", "os", "pathlib", "random", "re",
    "shutil", "statistics", "string", "subprocess", "tempfile", "textwrap", "threading", "typing",
    "unittest", "urllib.parse", "zipfile",
)
VOCAB = "\n" + "".join(c for c in string.printable if c.isprintable())
_INDEX = {c: i for i, c in enumerate(VOCAB)}


@lru_cache(maxsize=1)
def stdlib_corpus() -> str:
    """Docstrings of MODULES and their public members, in a fixed order."""
    parts: list[str] = []
    for name in MODULES:
        try:
            module = importlib.import_module(name)
        except ImportError:  # a stripped-down Python; the corpus is just smaller
            continue
        parts.append(inspect.getdoc(module) or "")
        for attr in sorted(dir(module)):
            if attr.startswith("_"):
                continue
            doc = inspect.getdoc(getattr(module, attr, None))
            if doc and getattr(getattr(module, attr, None), "__module__", None) == module.__name__:
                parts.append(doc)
    text = "\n\n".join(p for p in parts if p)
    return "".join(c for c in text if c in _INDEX)


def encode(text: str) -> torch.Tensor:
    return torch.tensor([_INDEX[c] for c in text], dtype=torch.long)


class Block(nn.Module):
    def __init__(self, dim: int, heads: int, dropout: float) -> None:
        super().__init__()
        self.heads = heads
        self.ln1 = nn.LayerNorm(dim)
        self.qkv = nn.Linear(dim, 3 * dim)
        self.proj = nn.Linear(dim, dim)
        self.ln2 = nn.LayerNorm(dim)
        self.mlp = nn.Sequential(nn.Linear(dim, 4 * dim), nn.GELU(), nn.Linear(4 * dim, dim))
        self.drop = nn.Dropout(dropout)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, d = x.shape
        q, k, v = self.qkv(self.ln1(x)).view(b, t, 3, self.heads, d // self.heads).permute(2, 0, 3, 1, 4)
        att = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.drop(self.proj(att.transpose(1, 2).reshape(b, t, d)))
        return x + self.drop(self.mlp(self.ln2(x)))


class CharTransformer(nn.Module):
    def __init__(self, vocab: int = len(VOCAB), dim: int = 64, layers: int = 2, heads: int = 4, context: int = 64, dropout: float = 0.0) -> None:
        super().__init__()
        self.tok = nn.Embedding(vocab, dim)
        self.pos = nn.Parameter(torch.zeros(context, dim))
        self.blocks = nn.ModuleList(Block(dim, heads, dropout) for _ in range(layers))
        self.ln = nn.LayerNorm(dim)
        self.head = nn.Linear(dim, vocab, bias=False)
        nn.init.normal_(self.pos, std=0.02)
        nn.init.normal_(self.tok.weight, std=0.02)

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        x = self.tok(idx) + self.pos[: idx.shape[1]]
        for block in self.blocks:
            x = block(x)
        return self.head(self.ln(x))


def lm_loss(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """Cross-entropy over every position: logits [B, T, V], targets [B, T]."""
    return F.cross_entropy(logits.flatten(0, 1), targets.flatten())


def charlm_task(config: dict[str, Any]) -> Task:
    """Config keys: ``optimizer`` ("adamw" or "sgd"), ``dim`` (64), ``layers`` (2), ``heads`` (4), ``context`` (64), ``dropout`` (0.0)."""
    config = check_config("charlm", config, {"dim": int, "layers": int, "heads": int, "context": int, "dropout": float, "optimizer": str})
    dim = int(config.get("dim", 64))
    layers = int(config.get("layers", 2))
    heads = int(config.get("heads", 4))
    context = int(config.get("context", 64))
    dropout = float(config.get("dropout", 0.0))
    if dim % heads:
        raise UsageError(f"task 'charlm': dim={dim} is not divisible by heads={heads}: choose heads that divide dim")
    ids = encode(stdlib_corpus())
    # Non-overlapping windows of context+1 characters; the last 10% is validation.
    n = (len(ids) - 1) // context
    windows = ids[: n * context + 1]
    x = windows[:-1][: n * context].view(n, context)
    y = windows[1:][: n * context].view(n, context)
    split = max(1, math.floor(n * 0.9))
    return Task(
        model=lambda: CharTransformer(len(VOCAB), dim, layers, heads, context, dropout),
        train_data=TensorDataset(x[:split], y[:split]),
        val_data=TensorDataset(x[split:], y[split:]),
        loss=lm_loss,
        batch_size=32,
        optimizer=optimizer_from_config(config),
        name="charlm",
        defaults={"lr": 3e-3, "max_steps": 200, "eval_every": 50},
    )
