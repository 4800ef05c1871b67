"""The gradient noise scale, after McCandlish et al., "An Empirical Model of Large-Batch Training" (2018).

With |G_b|^2 the squared norm of a gradient estimated on a batch of b samples,

    E|G_b|^2 = |G|^2 + tr(Sigma) / b,

so two batch sizes b_small < b_big give unbiased estimates (their Appendix A)

    |G|^2     ~ (b_big |G_big|^2 - b_small |G_small|^2) / (b_big - b_small)
    tr(Sigma) ~ (|G_small|^2 - |G_big|^2) / (1 / b_small - 1 / b_big)

and the simple noise scale B_simple = tr(Sigma) / |G|^2: the batch size beyond
which a larger batch buys little optimisation progress per sample (the critical batch).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from tunekit.errors import UsageError

__all__ = ["NoiseScale", "noise_scale"]


@dataclass
class NoiseScale:
    b_simple: float  # the estimate (nan when |G|^2 came out <= 0)
    low: float  # 16th percentile of the bootstrap
    high: float  # 84th percentile of the bootstrap
    grad_sq: float  # |G|^2
    trace_sigma: float  # tr(Sigma)
    b_small: int
    b_big: int
    repeats: int


def _estimate(small: np.ndarray, big: np.ndarray, b_small: int, b_big: int) -> tuple[float, float, float]:
    s, g = float(np.mean(small)), float(np.mean(big))
    grad_sq = (b_big * g - b_small * s) / (b_big - b_small)
    trace = (s - g) / (1.0 / b_small - 1.0 / b_big)
    return (trace / grad_sq if grad_sq > 0 else math.nan), grad_sq, trace


def noise_scale(sq_norms_small: list[float] | np.ndarray, sq_norms_big: list[float] | np.ndarray,
                b_small: int, b_big: int, seed: int = 0, bootstrap: int = 500) -> NoiseScale:
    """B_simple from squared gradient norms measured at two batch sizes, with a bootstrap interval."""
    if not b_big > b_small >= 1:
        raise UsageError(f"noise_scale needs b_big > b_small >= 1, got b_small={b_small!r}, b_big={b_big!r}: "
                         "pass e.g. b_small=8, b_big=64")
    small = np.asarray(sq_norms_small, dtype=np.float64)
    big = np.asarray(sq_norms_big, dtype=np.float64)
    est, grad_sq, trace = _estimate(small, big, b_small, b_big)
    rng = np.random.default_rng(seed)
    boots = []
    for _ in range(bootstrap):
        e, _, _ = _estimate(rng.choice(small, len(small)), rng.choice(big, len(big)), b_small, b_big)
        boots.append(e if math.isfinite(e) and e > 0 else math.inf)
    # Order statistics, not np.percentile: a resample whose |G|^2 came out <= 0
    # counts as an unbounded noise scale (inf), which interpolation cannot handle.
    ordered = np.sort(np.asarray(boots))
    low, high = float(ordered[int(0.16 * (len(ordered) - 1))]), float(ordered[int(0.84 * (len(ordered) - 1))])
    return NoiseScale(est, low, high, grad_sq, trace, b_small, b_big, len(small))
