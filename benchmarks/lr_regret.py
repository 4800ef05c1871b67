"""How good is each LR suggestion rule? Regret against a grid of full training runs.

For each task, a grid of full warmup + cosine trainings (log-spaced peak LRs,
several seeds each) gives the true curve of final validation loss against peak
LR and its best value L*. For each suggestion rule, run on range tests with
different seeds, the regret is

    (L(suggested LR) - L*) / L*,

with L interpolated over log LR on the grid's seed-mean curve (a diverged run
counts as the untrained model's loss; a suggestion beyond the grid takes the
edge's value). The finder's cost is its wall time over the time of the same
number of plain training updates.

    python -m benchmarks.lr_regret [--seeds 2] [--finder-seeds 3] [--tasks shapes,charlm,shapes-sgd]

Besides the rules that lr_find reports, a few candidate default rules are
scored on the same curves; the best of them became tunekit's default.
"""

from __future__ import annotations

import argparse
import dataclasses
import math
from collections.abc import Callable

import numpy as np
import torch

from benchmarks._common import hardware  # noqa: E402

import tunekit  # noqa: E402
from tunekit.probes import lr_rules as suggest  # noqa: E402
from tunekit.training.step import resolve_device  # noqa: E402
from tunekit.training.loop import evaluate  # noqa: E402

# name -> (task spec, task config, grid of log10 peak LRs, training updates)
TASKS: dict[str, tuple[str, dict[str, object], np.ndarray, int]] = {
    "shapes": ("shapes", {}, np.arange(-4.5, 0.01, 0.5), 200),
    "charlm": ("charlm", {}, np.arange(-4.0, -0.49, 0.5), 150),
    "shapes-sgd": ("shapes", {"optimizer": "sgd"}, np.arange(-3.0, 1.01, 0.5), 200),
}


def _candidates() -> dict[str, Callable[[suggest.Curve], float | None]]:
    """Candidate defaults, scored next to the reported rules."""

    def min_div(k: float) -> Callable[[suggest.Curve], float | None]:
        return lambda c: float(c.lrs[int(np.argmin(c.smooth))] / k) if len(c.smooth) > 1 else None

    def descent_fraction(f: float) -> Callable[[suggest.Curve], float | None]:
        def rule(c: suggest.Curve) -> float | None:
            end = int(np.argmin(c.smooth))
            if end < 2:
                return None
            start = float(c.smooth[0])
            target = start - f * (start - float(c.smooth[end]))
            i = int(np.argmax(c.smooth[: end + 1] <= target))
            return float(c.lrs[i])
        return rule

    return {
        "cand:geo(steep,min)": suggest.geometric_steepest_min,
        "cand:min/3": min_div(3.0),
        "cand:min/5": min_div(5.0),
        "cand:drop80%": descent_fraction(0.8),
        "cand:drop90%": descent_fraction(0.9),
    }


def grid_curve(task: tunekit.Task, log_lrs: np.ndarray, steps: int, seeds: int) -> tuple[np.ndarray, float]:
    """Seed-mean final val loss at each grid LR, and the untrained model's val loss (for diverged runs)."""
    device = resolve_device("cpu")
    untrained = evaluate(task.make_model(0), task.val_data, task.loss_computer(), device=device,
                         batch_size=task.batch_size, max_batches=20)["loss"]
    means = []
    for log_lr in log_lrs:
        finals = []
        for seed in range(seeds):
            r = tunekit.train(task, lr=float(10 ** log_lr), run_steps=steps, seed=seed, device="cpu", eval_every=None)
            finals.append(min(r.final_loss, untrained) if math.isfinite(r.final_loss) else untrained)
        means.append(float(np.mean(finals)))
        print(f"    grid lr={10 ** log_lr:9.3g}  final val loss {means[-1]:.4f}", flush=True)
    return np.asarray(means), untrained


def loss_at(lr: float | None, log_lrs: np.ndarray, curve: np.ndarray, worst: float) -> float:
    if lr is None or not lr > 0:
        return worst
    return float(np.interp(math.log10(lr), log_lrs, curve))  # np.interp holds the edge values beyond the grid


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seeds", type=int, default=2, help="training seeds per grid LR")
    ap.add_argument("--finder-seeds", type=int, default=3, help="range tests per task (each another seed)")
    ap.add_argument("--tasks", default=",".join(TASKS))
    ap.add_argument("--threads", type=int, default=2)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    print(f"hardware: {hardware()}\n")

    rules = dict(suggest.RULES) | _candidates()
    regrets: dict[str, dict[str, float]] = {r: {} for r in rules}
    costs: dict[str, float] = {}
    picks: dict[str, dict[str, float | None]] = {}
    names = [t for t in args.tasks.split(",") if t]
    for name in names:
        spec, config, log_lrs, steps = TASKS[name]
        task = tunekit.load_task(spec, dict(config))
        print(f"{name}: grid of {len(log_lrs)} peak LRs x {args.seeds} seeds, {steps} updates each", flush=True)
        curve, worst = grid_curve(task, log_lrs, steps, args.seeds)
        best = float(curve.min())
        print(f"  grid best: lr={10 ** log_lrs[int(curve.argmin())]:.3g}, val loss {best:.4f}")
        per_rule: dict[str, list[float]] = {r: [] for r in rules}
        picked: dict[str, list[float | None]] = {r: [] for r in rules}
        cost_ratios = []
        for s in range(args.finder_seeds):
            found = tunekit.lr_find(task, seed=100 + s, device="cpu")
            c = suggest.prepare(found.lrs, found.losses)
            # The same number of plain training updates through the same step, no evaluation.
            n = sum(math.isfinite(v) for v in found.losses)
            plain = tunekit.train(dataclasses.replace(task, val_data=None), lr=1e-4, run_steps=n, seed=100 + s, device="cpu")
            cost_ratios.append(found.seconds / plain.seconds)
            for r, rule in rules.items():
                lr = rule(c)
                picked[r].append(lr)
                per_rule[r].append((loss_at(lr, log_lrs, curve, worst) - best) / best)
        for r in rules:
            regrets[r][name] = float(np.mean(per_rule[r]))
        picks[name] = {r: (float(10 ** np.median(np.log10([v for v in picked[r] if v]))) if any(picked[r]) else None) for r in rules}
        costs[name] = float(np.median(cost_ratios))
        print(f"  finder cost: {costs[name]:.3f}x the same number of plain updates\n", flush=True)

    width = max(map(len, rules)) + 2
    head = f"{'rule':<{width}}" + "".join(f"{n:>22}" for n in names) + f"{'mean regret':>13}"
    print("regret (lower is better); in brackets the median suggested LR")
    print(head)
    means = {}
    for r in rules:
        means[r] = float(np.mean([regrets[r][n] for n in names]))
        cells = "".join(f"{regrets[r][n]:>10.3f} [{(picks[n][r] or float('nan')):>9.2g}]" for n in names)
        mark = "  <- default" if r == suggest.DEFAULT_RULE else ""
        print(f"{r:<{width}}{cells}{means[r]:>13.3f}{mark}")
    d = means[suggest.DEFAULT_RULE]
    others = {r: means[r] for r in ("steepest", "valley", "min/10")}
    print(f"\ndefault ({suggest.DEFAULT_RULE}) mean regret {d:.3f} vs " + ", ".join(f"{r} {v:.3f}" for r, v in others.items())
          + f": {'lower than each' if all(d < v for v in others.values()) else 'NOT lower than each'}")
    print("finder cost vs plain updates: " + ", ".join(f"{n} {c:.3f}x" for n, c in costs.items())
          + f" (max {max(costs.values()):.3f}x, target <= 1.15)")


if __name__ == "__main__":
    main()
