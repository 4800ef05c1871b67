"""Real data the corpus can have offline: scikit-learn's bundled datasets and installed text.

- tables and images from ``sklearn.datasets`` (digits, wine, iris, breast cancer, diabetes; the two
  sample photographs), which ship inside the scikit-learn wheel: no download;
- English prose: the help topics of Python's own documentation (``pydoc_data.topics``, 0.46 MB);
- source code: the standard library's and PyTorch's installed ``.py`` files (PyTorch: 46 MB, enough
  for thousands of updates that never see a window twice).

Every split is drawn from a fixed seed; a task's data does not depend on the run's seed.
"""

from __future__ import annotations

import glob
import os
from functools import lru_cache

import numpy as np
import torch
from torch.utils.data import TensorDataset

from benchmarks.search_tasks import _LM_INDEX

__all__ = ["split", "table", "digits_images", "photo_patches", "photo_pixels", "docs_text", "torch_source",
           "char_windows"]


def split(data: TensorDataset, n_val: int, seed: int = 0) -> tuple[TensorDataset, TensorDataset]:
    """Shuffle once (fixed seed), then the last ``n_val`` samples are validation, the rest training."""
    order = torch.randperm(len(data), generator=torch.Generator().manual_seed(seed))
    tensors = [t[order] for t in data.tensors]
    return TensorDataset(*(t[:-n_val] for t in tensors)), TensorDataset(*(t[-n_val:] for t in tensors))


@lru_cache(maxsize=8)
def table(name: str, regression: bool = False) -> TensorDataset:
    """A scikit-learn bundled table, features standardized; targets class ids, or standardized values."""
    from sklearn import datasets

    bunch = getattr(datasets, f"load_{name}")()
    x = torch.tensor(bunch.data, dtype=torch.float32)
    x = (x - x.mean(0)) / x.std(0).clamp_min(1e-6)
    if regression:
        y = torch.tensor(bunch.target, dtype=torch.float32).reshape(len(x), -1)
        return TensorDataset(x, (y - y.mean(0)) / y.std(0))
    return TensorDataset(x, torch.tensor(bunch.target, dtype=torch.long))


@lru_cache(maxsize=1)
def digits_images() -> TensorDataset:
    """scikit-learn's 1,797 handwritten digits, 8x8 images scaled to [0, 1], one channel."""
    from sklearn import datasets

    bunch = datasets.load_digits()
    x = torch.tensor(bunch.images, dtype=torch.float32)[:, None] / 16.0
    return TensorDataset(x, torch.tensor(bunch.target, dtype=torch.long))


@lru_cache(maxsize=1)
def _photos() -> torch.Tensor:
    """The two sample photographs (China, flower), 427x640 RGB in [0, 1], as (2, 3, 427, 640)."""
    from sklearn import datasets

    images = np.stack(datasets.load_sample_images().images).astype(np.float32) / 255.0
    return torch.from_numpy(images).permute(0, 3, 1, 2).contiguous()


def photo_patches(n: int, size: int = 12, seed: int = 5) -> TensorDataset:
    """``n`` grey ``size`` x ``size`` patches cut at random from the photographs; the label is the
    photograph and the quarter it came from (8 classes). Each patch is brightness-normalised, so the
    class is in texture, not in mean colour."""
    photos = _photos().mean(1)  # grey
    g = torch.Generator().manual_seed(seed)
    which = torch.randint(0, 2, (n,), generator=g)
    h, w = photos.shape[1:]
    top = torch.randint(0, h - size, (n,), generator=g)
    left = torch.randint(0, w - size, (n,), generator=g)
    patches = torch.stack([photos[k, t:t + size, s:s + size] for k, t, s in zip(which, top, left)])
    patches = patches - patches.mean((1, 2), keepdim=True)
    patches = patches / patches.std((1, 2), keepdim=True).clamp_min(0.02)
    quarter = (top >= (h - size) // 2).long() * 2 + (left >= (w - size) // 2).long()
    return TensorDataset(patches[:, None].contiguous(), which * 4 + quarter)


def photo_pixels(n: int, seed: int = 7, radius: int = 2) -> TensorDataset:
    """Predict a pixel's RGB from its (2r+1)^2 - 1 neighbours' RGB (the centre left out): a real
    regression with half a million samples. Inputs and targets standardized."""
    photos = _photos()
    g = torch.Generator().manual_seed(seed)
    which = torch.randint(0, 2, (n,), generator=g)
    h, w = photos.shape[2:]
    ys = torch.randint(radius, h - radius, (n,), generator=g)
    xs = torch.randint(radius, w - radius, (n,), generator=g)
    offsets = [(dy, dx) for dy in range(-radius, radius + 1) for dx in range(-radius, radius + 1) if (dy, dx) != (0, 0)]
    x = torch.stack([photos[which, :, ys + dy, xs + dx] for dy, dx in offsets], 1).flatten(1)
    y = photos[which, :, ys, xs]
    mean, std = photos.mean((0, 2, 3)), photos.std((0, 2, 3))
    return TensorDataset((x - mean.repeat(len(offsets))) / std.repeat(len(offsets)), (y - mean) / std)


def _printable(text: str) -> str:
    return "".join(c for c in text if c in _LM_INDEX)


@lru_cache(maxsize=1)
def docs_text() -> str:
    """Python's documentation help topics: English prose with code samples."""
    import pydoc_data.topics as topics

    return _printable("\n\n".join(topics.topics[k] for k in sorted(topics.topics)))


@lru_cache(maxsize=2)
def torch_source(max_chars: int = 12_000_000) -> str:
    """The installed PyTorch's Python source, files in sorted order, up to ``max_chars`` characters."""
    root = os.path.dirname(torch.__file__)
    parts, total = [], 0
    for path in sorted(glob.glob(os.path.join(root, "**", "*.py"), recursive=True)):
        try:
            with open(path, encoding="utf-8") as f:
                text = _printable(f.read())
        except (OSError, UnicodeDecodeError):
            continue
        parts.append(text)
        total += len(text)
        if total >= max_chars:
            break
    return "\n\n".join(parts)[:max_chars]


def char_windows(text: str, context: int, n_val: int, seed: int = 1357,
                 max_windows: int | None = None) -> tuple[TensorDataset, TensorDataset]:
    """Non-overlapping windows of ``context`` characters (targets shifted by one), shuffled once;
    ``n_val`` of them for validation, at most ``max_windows`` for training."""
    ids = torch.tensor([_LM_INDEX[c] for c in text], dtype=torch.long)
    n = (len(ids) - 1) // context
    x, y = ids[: n * context].view(n, context), ids[1: n * context + 1].view(n, context)
    order = torch.randperm(n, generator=torch.Generator().manual_seed(seed))
    if max_windows is not None:
        order = order[: max_windows + n_val]
    x, y = x[order], y[order]
    return TensorDataset(x[:-n_val], y[:-n_val]), TensorDataset(x[-n_val:], y[-n_val:])
