"""Check 5, the data: input scale, shuffling, a constant label, and validation samples that are
also training samples."""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from typing import Optional

import torch
from torch.utils.data import DataLoader, Dataset, IterableDataset

from tunekit.inputs.data import Batch, Data, batch_size_of, iterate_once
from tunekit.checks.common import split_xy, tensors_of
from tunekit.checks.loss import FAR_SCALE
from tunekit.results import Finding

__all__ = ["check_input_scale", "check_shuffled", "check_constant_label", "check_leakage", "sample_hashes",
           "SHUFFLE_FACTOR", "LEAK_FAIL", "MAX_HASHED"]

CHECK = "data"

# Shuffled labels with class frequencies p_i form runs of mean length 1 / (1 - sum p_i^2) (about 1.1
# for 10 balanced classes, 2 for a 90/10 split). Runs four times longer than that, and at least
# MIN_RUN long, do not come from shuffling: the data arrives sorted or grouped.
SHUFFLE_FACTOR = 4.0
MIN_RUN = 8.0
# Exact duplicates between training and validation in 1% or more of the validation set inflate the
# validation score visibly; fewer are common in real data (blank images, boilerplate text) and are
# reported as information.
LEAK_FAIL = 0.01
# Samples hashed per split: enough to see a leak, bounded in time on big data sets.
MAX_HASHED = 100_000


def _float_inputs(batches: Sequence[Batch]) -> list[torch.Tensor]:
    return [t for b in batches for t in tensors_of(split_xy(b)[0]) if t.is_floating_point() and t.ndim >= 2]


def check_input_scale(batches: Sequence[Batch]) -> list[Finding]:
    """The largest per-feature |mean| or std of the float inputs (features: columns of a [B, D] input,
    channels of a [B, C, ...] one)."""
    xs = _float_inputs(batches)
    if not xs:
        return [Finding(CHECK, "info", "no float inputs (token ids or custom batches): input scale not checked")]
    worst = 0.0
    for shape in {tuple(t.shape[1:]) for t in xs}:
        x = torch.cat([t.detach().float() for t in xs if tuple(t.shape[1:]) == shape])
        feats = x.transpose(0, 1).reshape(x.shape[1], -1)  # feature -> every value of it in the batches
        finite = torch.where(torch.isfinite(feats), feats, torch.zeros(()))
        scale = torch.maximum(finite.mean(1).abs(), finite.std(1) if feats.shape[1] > 1 else finite.mean(1).abs())
        worst = max(worst, float(scale.max()))
    if worst > FAR_SCALE:
        return [Finding(CHECK, "warn", f"inputs far from normalised: a feature's |mean| or std is {worst:.3g}",
                        {"input_scale": worst}, "standardise the inputs (e.g. x / 255, or subtract the mean and divide "
                        "by the std per feature)")]
    return [Finding(CHECK, "pass", f"inputs normalised (largest feature scale {worst:.3g})", {"input_scale": worst})]


def _labels(batches: Sequence[Batch]) -> Optional[torch.Tensor]:
    ys = [split_xy(b)[1] for b in batches]
    if not ys or any(y is None for y in ys):
        return None
    return torch.cat([y.detach().reshape(len(y), -1) if y.ndim else y.reshape(1, 1) for y in ys])  # type: ignore[union-attr]


def own_order(data: Data, n: int) -> Optional[list[Batch]]:
    """The first ``n`` batches in the order the data yields them, or None for a Dataset, which
    tunekit (and any sane loader) reshuffles."""
    if isinstance(data, Dataset) and not isinstance(data, IterableDataset):
        return None
    out = []
    for batch in data:
        out.append(batch)
        if len(out) >= n:
            break
    return out


def check_shuffled(batches: Optional[Sequence[Batch]]) -> list[Finding]:
    """Runs of one class in ``batches`` (consecutive batches in the data's own order) against shuffled data's."""
    if batches is None:
        return [Finding(CHECK, "pass", "a Dataset: its order is reshuffled every epoch")]
    y = _labels(batches)
    if y is None or y.shape[1] != 1 or y.is_floating_point() or len(y) < 2:
        return [Finding(CHECK, "info", "no per-sample class labels: shuffling not checked")]
    y = y.reshape(-1)
    _, counts = torch.unique(y, return_counts=True)
    p = counts.double() / len(y)
    same = float((p * p).sum())
    if same >= 1.0:  # one class only: the constant-label check speaks
        return []
    expected = 1.0 / (1.0 - same)
    runs = 1 + int((y[1:] != y[:-1]).sum())
    observed = len(y) / runs
    evidence = {"mean_run": observed, "expected_run": expected, "samples": len(y)}
    if observed > SHUFFLE_FACTOR * expected and observed >= MIN_RUN:
        return [Finding(CHECK, "fail", f"the data is not shuffled: labels come in runs of {observed:.0f} on average "
                        f"(shuffled: {expected:.1f}) over {len(y)} samples", evidence,
                        "shuffle the training data: DataLoader(..., shuffle=True)")]
    return [Finding(CHECK, "pass", f"labels are mixed (mean run {observed:.1f}, shuffled {expected:.1f})", evidence)]


def check_constant_label(batches: Sequence[Batch]) -> list[Finding]:
    """Every label (class or regression target) the same over batches drawn across the data."""
    y = _labels(batches)
    if y is None or y.numel() < 2:
        return []
    if bool((y == y.reshape(-1)[0]).all()):
        value = y.reshape(-1)[0].item()
        return [Finding(CHECK, "fail", f"every label is {value:g} over {len(y)} samples", {"label": value, "samples": len(y)},
                        "the labels are lost or overwritten in the dataset or the collate function")]
    return [Finding(CHECK, "pass", f"labels vary ({len(torch.unique(y))} distinct values over {len(y)} samples)")]


def sample_hashes(data: Data, batch_size: Optional[int], limit: int = MAX_HASHED) -> list[bytes]:
    """A hash of each sample's inputs (targets left out: a leaked input is the leak), in the data's order."""
    out: list[bytes] = []
    for batch in iterate_once(data, batch_size or 256):
        inputs, _ = split_xy(batch)
        n = batch_size_of(batch)
        rows = [t.detach().cpu().contiguous().reshape(n, -1) for t in tensors_of(inputs) if t.ndim and t.shape[0] == n]
        if not rows:
            return out
        arrays = [r.numpy() if r.dtype != torch.bfloat16 else r.float().numpy() for r in rows]
        for i in range(n):
            h = hashlib.blake2b(digest_size=16)
            for a in arrays:
                h.update(a[i].tobytes())
            out.append(h.digest())
        if len(out) >= limit:
            break
    return out[:limit]


def check_leakage(train: Data, val: Optional[Data], batch_size: Optional[int]) -> list[Finding]:
    """Validation samples whose inputs are byte-for-byte training samples."""
    if val is None:
        return [Finding(CHECK, "info", "no validation data: leakage not checked")]
    if isinstance(train, DataLoader) and isinstance(train.dataset, IterableDataset):
        return [Finding(CHECK, "info", "an IterableDataset: leakage not checked")]
    seen = set(sample_hashes(train, batch_size))
    val_h = sample_hashes(val, batch_size)
    dup = sum(h in seen for h in val_h)
    evidence = {"duplicates": dup, "val_samples": len(val_h), "train_samples": len(seen)}
    if val_h and dup / len(val_h) >= LEAK_FAIL:
        return [Finding(CHECK, "fail", f"{dup} of {len(val_h)} validation samples ({dup / len(val_h):.0%}) are also "
                        "in the training data (exact duplicates)", evidence,
                        "split before augmenting or windowing, and de-duplicate across the split")]
    if dup:
        return [Finding(CHECK, "info", f"{dup} validation sample(s) also in the training data (under {LEAK_FAIL:.0%})", evidence)]
    return [Finding(CHECK, "pass", f"no validation sample is in the training data ({len(val_h)} hashed)", evidence)]
