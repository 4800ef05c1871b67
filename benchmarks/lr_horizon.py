"""How the best peak LR moves with the run's length, and where lr_find's suggestion sits (issue 21).

Tasks with data large enough that no run repeats a sample (a teacher network labelling random
inputs): a grid of warmup + cosine runs at two lengths, the longest 3,000 updates, several seeds,
scored on held-out samples; then ``lr_find`` as it is today (100-update short runs, whatever the
planned run). Reported per task: the best LR at each length, the suggestion and its ratio to each,
and the regret at the long run (interpolated over log LR on the grid's seed-mean curve).

    python benchmarks/lr_horizon.py [--seeds 2] [--lengths 300,3000]
"""

from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn
from torch.utils.data import TensorDataset

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import hardware  # noqa: E402

import tunekit  # noqa: E402

GRID = np.logspace(-4, -0.5, 15)
BATCH = 64


def teacher(n: int, seed: int, dim: int = 32, classes: int = 8) -> TensorDataset:
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, dim, generator=g)
    t = torch.Generator().manual_seed(4242)
    w1, w2 = torch.randn(dim, 64, generator=t) / dim ** 0.5, torch.randn(64, classes, generator=t) / 8
    logits = torch.tanh(x @ w1) @ w2 * 4
    return TensorDataset(x, (logits + 0.5 * torch.randn(n, classes, generator=g)).argmax(1))


def tasks(longest: int) -> dict[str, tunekit.Task]:
    train, val = teacher(longest * BATCH + BATCH, 1), teacher(4096, 2)
    net = lambda: nn.Sequential(nn.Linear(32, 128), nn.ReLU(), nn.Linear(128, 128), nn.ReLU(), nn.Linear(128, 8))  # noqa: E731
    common = dict(model=net, train_data=train, val_data=val, loss=nn.CrossEntropyLoss(), batch_size=BATCH)
    return {"teacher-adamw": tunekit.Task(optimizer=lambda p: torch.optim.AdamW(p, lr=1e-3, weight_decay=0.01),
                                          name="teacher-adamw", **common),
            "teacher-sgdm": tunekit.Task(optimizer=lambda p: torch.optim.SGD(p, lr=1e-2, momentum=0.9),
                                         name="teacher-sgdm", **common)}


def curve(task: tunekit.Task, steps: int, seeds: int) -> np.ndarray:
    out = []
    for lr in GRID:
        runs = [tunekit.train(task, lr=float(lr), max_steps=steps, seed=s, eval_batches=None, eval_batch_size=1024,
                              progress=False) for s in range(seeds)]
        out.append(np.mean([r.final_loss if not r.diverged and math.isfinite(r.final_loss) else 10.0 for r in runs]))
    return np.array(out)


def at(c: np.ndarray, lr: float) -> float:
    return float(np.interp(math.log10(min(max(lr, GRID[0]), GRID[-1])), np.log10(GRID), c))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=2)
    parser.add_argument("--lengths", default="300,3000")
    a = parser.parse_args()
    lengths = [int(x) for x in a.lengths.split(",")]
    torch.set_num_threads(1)
    print(hardware())
    for name, task in tasks(max(lengths)).items():
        curves = {n: curve(task, n, a.seeds) for n in lengths}
        best = {n: float(GRID[int(np.argmin(c))]) for n, c in curves.items()}
        found = [tunekit.lr_find(task, seed=s, progress=False) for s in range(100, 100 + a.seeds)]
        lrs = [float(f.suggestion) for f in found]
        long = max(lengths)
        regret = [at(curves[long], lr) / curves[long].min() - 1 for lr in lrs]
        cost = np.mean([f.samples for f in found]) / (long * BATCH)
        print(f"{name}: best lr " + ", ".join(f"{best[n]:.3g} at {n} updates" for n in lengths)
              + f"; lr_find {np.median(lrs):.3g} (" + ", ".join(f"{np.median(lrs) / best[n]:.2f}x the {n}-update best"
                                                          for n in lengths)
              + f"); regret at {long} updates mean {100 * np.mean(regret):.2f}%, worst {100 * max(regret):.2f}%; "
              f"cost {100 * cost:.1f}% of the {long}-update run's samples")


if __name__ == "__main__":
    main()
