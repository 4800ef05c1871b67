"""lr_find on small data called without validation data (issue 21), for the planned 200-update run:
its default (5% of the run buys no short runs: the curve alone), then paying twice the run for short
runs scored on the training data itself or on a held-out slice of it (``hold_out_share=0.2``, another
slice per seed).

Each task has a few hundred training samples and a planned run (warmup + cosine, ``train``'s
defaults) of 200 updates. Its ground truth: that run at each LR of a grid, several seeds, scored on a
large test set the finder never sees. The finder is called as a notebook user calls it: the model,
the training data, the loss, no validation data; five finder seeds. Regret at the suggestion is
interpolated over log LR on the grid's seed-mean curve.

    python -m benchmarks.lr_small_data [--seeds 3] [--finder-seeds 5]
"""

from __future__ import annotations

import argparse
import math
from collections.abc import Callable
from typing import Any

import numpy as np
import torch
from torch import nn
from torch.utils.data import TensorDataset

from benchmarks._common import hardware  # noqa: E402

import tunekit  # noqa: E402

GRID = np.logspace(-4.5, 0, 19)
STEPS, BATCH = 200, 16


def _teacher_regression(n: int, seed: int) -> TensorDataset:
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, 10, generator=g)
    w = torch.randn(10, 1, generator=torch.Generator().manual_seed(7))
    y = torch.tanh(x @ w) + 0.3 * (x[:, :1] * x[:, 1:2]) + 0.5 * torch.randn(n, 1, generator=g)
    return TensorDataset(x, (y - 0.1) / 0.9)


def _teacher_classes(n: int, seed: int) -> TensorDataset:
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, 12, generator=g)
    w = torch.randn(12, 5, generator=torch.Generator().manual_seed(11))
    return TensorDataset(x, (x @ w + 1.0 * torch.randn(n, 5, generator=g)).argmax(1))


def tasks() -> dict[str, dict[str, Any]]:
    """name -> the model factory, the optimizer factory, the loss, the small training set and a large test set."""
    mlp = lambda d, o: (lambda: nn.Sequential(nn.Linear(d, 128), nn.ReLU(), nn.Linear(128, 128), nn.ReLU(),  # noqa: E731
                                              nn.Linear(128, o)))
    adamw = lambda p: torch.optim.AdamW(p, lr=1e-3, weight_decay=0.01)  # noqa: E731
    sgdm = lambda p: torch.optim.SGD(p, lr=1e-2, momentum=0.9)  # noqa: E731
    return {
        "regression-353-adamw": dict(model=mlp(10, 1), opt=adamw, loss=nn.MSELoss(),
                                     train=_teacher_regression(353, 1), test=_teacher_regression(4000, 2)),
        "regression-353-sgdm": dict(model=mlp(10, 1), opt=sgdm, loss=nn.MSELoss(),
                                    train=_teacher_regression(353, 3), test=_teacher_regression(4000, 4)),
        "classes-300-adamw": dict(model=mlp(12, 5), opt=adamw, loss=nn.CrossEntropyLoss(),
                                  train=_teacher_classes(300, 1), test=_teacher_classes(4000, 2)),
    }


def _task(spec: dict[str, Any]) -> tunekit.Task:
    return tunekit.Task(model=spec["model"], train_data=spec["train"], val_data=spec["test"], loss=spec["loss"],
                        optimizer=spec["opt"], batch_size=BATCH, defaults={"max_steps": STEPS})


def grid_curve(spec: dict[str, Any], seeds: int) -> np.ndarray:
    """The planned run's test loss at each grid LR, the mean over ``seeds`` (a diverged run: the untrained loss)."""
    task, out = _task(spec), []
    untrained = tunekit.evaluate(task.make_model(0), spec["test"], task.loss_computer(), device=torch.device("cpu"),
                                 batch_size=1000)["loss"]
    for lr in GRID:
        runs = [tunekit.train(task, lr=float(lr), seed=s, eval_batches=None, eval_batch_size=1000, progress=False)
                for s in range(seeds)]
        out.append(np.mean([r.final_loss if not r.diverged and math.isfinite(r.final_loss) else untrained
                            for r in runs]))
    return np.array(out)


def loss_at(curve: np.ndarray, lr: float) -> float:
    x = math.log10(min(max(lr, GRID[0]), GRID[-1]))
    return float(np.interp(x, np.log10(GRID), curve))


ARMS = {  # how lr_find is called: for the planned run, its defaults; then paying for short runs
    "default (5%)": {},
    "share 2, train": {"refine_share": 2.0},
    "share 2, held-out": {"refine_share": 2.0, "hold_out_share": 0.2},
}


def suggestions(spec: dict[str, Any], seeds: int, arm: dict[str, Any]) -> list[tuple[float | None, int]]:
    """(the suggestion, its samples) for each finder seed, called without validation data for the planned
    run (``run_steps=STEPS``), with the arm's settings."""
    out = []
    for s in range(100, 100 + seeds):
        torch.manual_seed(s)
        model = spec["model"]()
        found = tunekit.lr_find(model, spec["train"], spec["loss"], spec["opt"], batch_size=BATCH, seed=s,
                                run_steps=STEPS, progress=False, **arm)
        out.append((found.suggestion, int(found.samples)))  # None: no suggestion (scored as the grid's worst)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--finder-seeds", type=int, default=5)
    a = parser.parse_args()
    torch.set_num_threads(1)
    print(hardware())
    print(f"planned run: {STEPS} updates at batch {BATCH}, warmup + cosine; no validation data given to lr_find")
    print(f"{'task':22} {'best lr':>8} {'lr_find':>18} {'median lr':>10} {'x best':>7} {'regret mean':>12} "
          f"{'worst':>7} {'spread dec':>10} {'cost x run':>10}")
    summary: dict[str, list[float]] = {label: [] for label in ARMS}
    for name, spec in tasks().items():
        curve = grid_curve(spec, a.seeds)
        best_lr, best = float(GRID[int(np.argmin(curve))]), float(curve.min())
        for label, arm in ARMS.items():
            found = suggestions(spec, a.finder_seeds, arm)
            lrs, cost = [lr for lr, _ in found if lr is not None], float(np.mean([n for _, n in found])) / (STEPS * BATCH)
            regrets = [(loss_at(curve, lr) if lr is not None else float(curve.max())) / best - 1 for lr, _ in found]
            summary[label] += regrets
            spread = float(np.log10(max(lrs) / min(lrs))) if lrs else math.nan
            print(f"{name:22} {best_lr:>8.3g} {label:>18} {np.median(lrs):>10.3g} {np.median(lrs) / best_lr:>7.2f} "
                  f"{100 * np.mean(regrets):>11.2f}% {100 * max(regrets):>6.1f}% {spread:>10.2f} {cost:>10.2f}"
                  + (f"  ({len(found) - len(lrs)} without a suggestion)" if len(lrs) < len(found) else ""))
    for label, regrets in summary.items():
        print(f"{label}: mean regret {100 * np.mean(regrets):.2f}%, worst {100 * max(regrets):.2f}%")


if __name__ == "__main__":
    main()
