"""Turning what users already have into an endless, seeded stream of batches.

tunekit accepts a torch ``Dataset``, a ``DataLoader``, or any re-iterable of
batches (a list, a generator *function*'s result is not re-iterable and is
refused). Batches may be ``(inputs, targets)`` tuples, ``(*inputs, targets)``,
or dicts in the Hugging Face style.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping, Sized
from typing import Any

import torch
from torch.utils.data import DataLoader, Dataset, IterableDataset, Subset, TensorDataset

from tunekit.errors import UsageError

__all__ = ["Batch", "Data", "to_device", "batch_size_of", "BatchStream", "iterate_once", "check_data", "rebatched_loader",
           "dataset_size", "batches_per_epoch", "hold_out"]

Batch = Any
Data = Any  # Dataset | DataLoader | Iterable[Batch]


def to_device(batch: Batch, device: torch.device) -> Batch:
    """Move every tensor in a (nested) batch to ``device``."""
    if isinstance(batch, torch.Tensor):
        return batch.to(device, non_blocking=True)
    if isinstance(batch, Mapping):
        return {k: to_device(v, device) for k, v in batch.items()}
    if isinstance(batch, tuple) and hasattr(batch, "_fields"):  # namedtuple
        return type(batch)(*(to_device(v, device) for v in batch))
    if isinstance(batch, (list, tuple)):
        return type(batch)(to_device(v, device) for v in batch)
    return batch


def batch_size_of(batch: Batch) -> int:
    """Number of samples in a batch: the leading dimension of its first tensor."""
    if isinstance(batch, torch.Tensor):
        return int(batch.shape[0]) if batch.ndim else 1
    if isinstance(batch, Mapping):
        for v in batch.values():
            n = batch_size_of(v)
            if n:
                return n
        return 0
    if isinstance(batch, (list, tuple)):
        for v in batch:
            n = batch_size_of(v)
            if n:
                return n
        return 0
    return 0


def check_data(data: Data, what: str = "train_data") -> None:
    """Refuse data that cannot be iterated more than once, with one clear line."""
    if data is None:
        raise UsageError(f"{what} is None: pass a Dataset, a DataLoader or a list of batches")
    if isinstance(data, (Dataset, DataLoader)):
        if dataset_size(data) == 0:  # else said later as a batch size larger than 0 samples
            raise UsageError(f"{what} is empty (a {type(data).__name__} of 0 samples): pass data with at least one batch")
        return
    if isinstance(data, Sized) and not len(data):
        raise UsageError(f"{what} is empty (a {type(data).__name__} of no batches): pass data with at least one batch")
    if isinstance(data, Iterator):
        raise UsageError(
            f"{what} is a one-shot iterator ({type(data).__name__}): pass a list of batches, a Dataset "
            "or a DataLoader, which tunekit can iterate more than once"
        )
    if not isinstance(data, Iterable):
        raise UsageError(f"{what} of type {type(data).__name__} is not iterable: pass a Dataset, a DataLoader or a list of batches")


def rebatched_loader(loader: DataLoader, batch_size: int, generator: torch.Generator) -> DataLoader:
    """A copy of ``loader`` that draws ``batch_size`` samples per batch, shuffled by ``generator``."""
    return DataLoader(
        loader.dataset,
        batch_size=batch_size,
        shuffle=True,
        drop_last=True,
        collate_fn=loader.collate_fn,
        num_workers=loader.num_workers,
        pin_memory=loader.pin_memory,
        generator=generator,
    )


class BatchStream:
    """An endless stream of batches, reshuffled every epoch and seeded.

    * A ``TensorDataset`` is sliced directly (one index per batch, not one per
      sample): for the small models tunekit probes, per-sample collation would
      cost more than the step itself.
    * Any other map-style ``Dataset`` goes through a shuffled ``DataLoader``.
    * A ``DataLoader`` is re-batched from its dataset when ``batch_size`` is given,
      keeping its ``collate_fn``; otherwise it is iterated as it is.
    * Any other iterable is iterated as it is, epoch after epoch; its batch size
      is whatever its batches hold.
    """

    def __init__(self, data: Data, batch_size: int | None, seed: int = 0, shuffle: bool = True) -> None:
        check_data(data)
        self.data = data
        self.batch_size = batch_size
        self.generator = torch.Generator().manual_seed(seed)
        self.shuffle = shuffle
        self._iter: Iterator[Batch] | None = None
        self.epoch = 0
        if isinstance(data, TensorDataset) or _tensor_subset(data):
            n = len(data)
            if batch_size is None:
                raise UsageError("a Dataset needs a batch size: pass e.g. batch_size=32")
            if batch_size > n:
                raise UsageError(f"batch size {batch_size} is larger than the dataset ({n} samples): use a smaller batch size")
        elif isinstance(data, Dataset) and not isinstance(data, IterableDataset):
            if batch_size is None:
                raise UsageError("a Dataset needs a batch size: pass e.g. batch_size=32")
            if batch_size > len(data):  # type: ignore[arg-type]
                raise UsageError(
                    f"batch size {batch_size} is larger than the dataset ({len(data)} samples): use a smaller batch size"  # type: ignore[arg-type]
                )
        elif isinstance(data, IterableDataset):
            raise UsageError("an IterableDataset has no fixed order to reshuffle: wrap it in a DataLoader with a batch size")

    def _epoch(self) -> Iterator[Batch]:
        data = self.data
        if isinstance(data, TensorDataset) or _tensor_subset(data):
            tensors, rows = (data.tensors, None) if isinstance(data, TensorDataset) else (data.dataset.tensors,
                                                                                           torch.as_tensor(data.indices))
            n, bs = len(data), int(self.batch_size)  # type: ignore[arg-type]
            order = torch.randperm(n, generator=self.generator) if self.shuffle else torch.arange(n)
            order = order if rows is None else rows[order]
            for start in range(0, n - bs + 1, bs):
                idx = order[start : start + bs]
                yield tuple(t[idx] for t in tensors)
        elif isinstance(data, Dataset):
            yield from DataLoader(data, batch_size=self.batch_size, shuffle=self.shuffle, drop_last=True, generator=self.generator)
        elif isinstance(data, DataLoader) and self.batch_size is not None and data.batch_size != self.batch_size:
            if isinstance(data.dataset, IterableDataset):
                raise UsageError(
                    f"cannot re-batch a DataLoader over an IterableDataset to batch size {self.batch_size}: "
                    "leave batch_size unset or pass a map-style Dataset"
                )
            yield from rebatched_loader(data, self.batch_size, self.generator)
        else:
            yield from data

    def __iter__(self) -> BatchStream:
        return self

    def __next__(self) -> Batch:
        for _ in range(2):
            if self._iter is None:
                self._iter = self._epoch()
            try:
                return next(self._iter)
            except StopIteration:
                self._iter = None
                self.epoch += 1
        raise UsageError("the training data yielded no batch: check that it is not empty (and, for a Dataset, that batch_size <= its length)")

    def take(self, n: int) -> list[Batch]:
        return [next(self) for _ in range(n)]


def iterate_once(data: Data, batch_size: int | None, limit: int | None = None) -> Iterator[Batch]:
    """One pass over (validation) data in a fixed order, at most ``limit`` batches."""
    check_data(data, "val_data")
    if isinstance(data, TensorDataset):
        bs = batch_size or len(data)
        it: Iterable[Batch] = (tuple(t[i : i + bs] for t in data.tensors) for i in range(0, len(data), bs))
    elif isinstance(data, Dataset) and not isinstance(data, IterableDataset):
        it = DataLoader(data, batch_size=batch_size or 1, shuffle=False)
    else:
        it = data
    for i, batch in enumerate(it):
        if limit is not None and i >= limit:
            return
        yield batch


def _tensor_subset(data: Data) -> bool:
    """A Subset of a TensorDataset (a held-out split of one): sliced directly, like the TensorDataset."""
    return isinstance(data, Subset) and isinstance(data.dataset, TensorDataset)


def hold_out(data: Data, share: float, most: int, seed: int) -> tuple[Data, Data] | None:
    """(what to train on, a held-out slice): ``share`` of the samples (at most ``most``), drawn by ``seed``,
    from a map-style Dataset or a DataLoader over one, or the last batches of a list of batches; None
    where there is no fixed set of samples to split (an iterable dataset) or too little to split."""
    if isinstance(data, list):
        k = min(len(data) - 1, max(1, round(share * len(data))))
        return (data[:-k], data[-k:]) if k >= 1 else None
    loader = data if isinstance(data, DataLoader) else None
    dataset = loader.dataset if loader is not None else data
    if not isinstance(dataset, Dataset) or isinstance(dataset, IterableDataset) or dataset_size(dataset) is None:
        return None
    n = len(dataset)  # type: ignore[arg-type]
    k = min(most, int(share * n))
    if k < 1 or n - k < 1:
        return None
    order = torch.randperm(n, generator=torch.Generator().manual_seed(seed)).tolist()
    train, held = Subset(dataset, order[k:]), Subset(dataset, sorted(order[:k]))
    if loader is None:
        return train, held
    again = dict(batch_size=loader.batch_size, collate_fn=loader.collate_fn, num_workers=loader.num_workers)
    # The training part shuffles from torch's global RNG, which each run seeds (the same order per seed).
    return DataLoader(train, shuffle=True, **again), DataLoader(held, shuffle=False, **again)


def batches_per_epoch(data: Data, batch_size: int | None) -> int | None:
    """Batches one pass over ``data`` draws at ``batch_size`` (as :class:`BatchStream` batches it, the last
    partial batch dropped); None when it has no length (an iterable dataset or a generator)."""
    n = dataset_size(data)
    if n is not None and batch_size:
        return max(1, n // batch_size)
    if isinstance(data, IterableDataset) or not isinstance(data, Sized):
        return None
    try:
        return len(data) or None  # a DataLoader as it is, or a list of batches
    except TypeError:  # a DataLoader over an IterableDataset of no length
        return None


def dataset_size(data: Data) -> int | None:
    """Samples in a map-style dataset (or a DataLoader's); None when it has no length."""
    if isinstance(data, DataLoader):
        data = data.dataset
        if isinstance(data, Sized) and hasattr(data, "__getitem__") and not isinstance(data, IterableDataset):
            return len(data)  # a DataLoader over a list of samples: re-batched like a Dataset
    if isinstance(data, Dataset) and not isinstance(data, IterableDataset):
        try:
            return len(data)  # type: ignore[arg-type]
        except TypeError:
            return None
    return None
