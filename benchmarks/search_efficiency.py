"""Does seeding the search with the probes make it cheaper?

On a built-in task, over several seeds, the compute (optimizer updates, the
probes' own included) each strategy spends before its best completed trial is
within 2% of the grid-best validation loss:

- seeded: the `from_scratch` space (LR bounded by the range test, batch from the
  probe, seed trial first), TPE + successive-halving (ASHA) pruning;
- random-full: random search over a wide unseeded space (LR 1e-6 to 1), every
  trial to the end;
- tpe-wide: TPE + ASHA over the same wide space, no probes.

The grid-best is the best final validation loss over a log grid of peak LRs at
the task's default settings, trained with the same seed as the search's trials
(model initialisation and data order move the final loss by several percent,
more than the 2% target, so each search is held to the grid at its own seed). Also printed: scheduler overhead, the wall
time of a search over the sum of its trials' training times.

    python benchmarks/search_efficiency.py [--task shapes] [--seeds 3] [--trials 20]
"""

from __future__ import annotations

import argparse
import math
import statistics
import sys
import tempfile
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import hardware  # noqa: E402

import tunekit  # noqa: E402

WIDE = str(Path(__file__).resolve().parent / "spaces" / "wide.toml")


def grid_best(task: tunekit.Task, steps: int, seed: int) -> tuple[float, float]:
    best, best_lr = math.inf, math.nan
    for log_lr in np.arange(-4.0, -0.49, 0.5):
        final = tunekit.train(task, lr=float(10**log_lr), max_steps=steps, seed=seed, device="cpu").final_loss
        if math.isfinite(final) and final < best:
            best, best_lr = final, float(10**log_lr)
    return best, best_lr


def compute_to_target(result: tunekit.SearchResult, target: float) -> float:
    spent = result.probe_updates
    for t in sorted(result.trials, key=lambda t: t.get("finished") or 0):
        spent += int(t.get("updates") or 0)
        if t["state"] == "COMPLETE" and t["value"] is not None and t["value"] <= target:
            return float(spent)
    return math.inf


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--task", default="shapes")
    ap.add_argument("--seeds", type=int, default=3)
    ap.add_argument("--trials", type=int, default=20)
    ap.add_argument("--threads", type=int, default=2)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    task = tunekit.load_task(args.task)
    steps = int(task.defaults.get("max_steps", 200))
    print(f"hardware: {hardware()}")
    print(f"task {args.task}: {steps} updates a trial, {args.trials} trials a search\n")

    strategies = {
        "seeded TPE+ASHA": dict(space="from_scratch", sampler="tpe", prune=True, seed_trial=True),
        "random, full budgets": dict(space=WIDE, sampler="random", prune=False, seed_trial=False),
        "TPE+ASHA, wide space": dict(space=WIDE, sampler="tpe", prune=True, seed_trial=False),
    }
    table: dict[str, list[float]] = {k: [] for k in strategies}
    overhead: dict[str, list[float]] = {k: [] for k in strategies}
    probes: dict[str, list[int]] = {k: [] for k in strategies}
    for seed in range(args.seeds):
        best, best_lr = grid_best(task, steps, seed)
        target = best * 1.02
        print(f"seed {seed}: grid-best val loss {best:.4f} at lr {best_lr:.3g}; target {target:.4f}", flush=True)
        for name, kw in strategies.items():
            with tempfile.TemporaryDirectory() as tmp:
                r = tunekit.search(task, kw["space"], trials=args.trials, max_steps=steps, seed=seed, out=Path(tmp),
                                   sampler=kw["sampler"], prune=kw["prune"], seed_trial=kw["seed_trial"],
                                   memory_budget="1GiB", device="cpu")
            c = compute_to_target(r, target)
            table[name].append(c)
            probes[name].append(r.probe_updates)
            trained = sum(t.get("seconds") or 0.0 for t in r.trials)
            overhead[name].append(r.seconds / trained if trained else math.nan)
            print(f"  seed {seed} {name:<22} best {r.best_value:.4f}  compute to target {c:>8.0f}  "
                  f"(probes {r.probe_updates}, all {r.compute})", flush=True)
    print(f"\n{'strategy':<24} {'median compute to target':>25} {'reached':>8} {'wall/train time':>16}")
    med = {}
    for name in strategies:
        vals = table[name]
        med[name] = statistics.median(vals)
        reached = sum(math.isfinite(v) for v in vals)
        print(f"{name:<24} {med[name]:>25.0f} {f'{reached}/{len(vals)}':>8} {statistics.median(overhead[name]):>16.3f}")
    ratio = med["seeded TPE+ASHA"] / med["random, full budgets"]
    print(f"\nseeded / random-full compute: {ratio:.3f} (target <= 0.5); seeded / tpe-wide: "
          f"{med['seeded TPE+ASHA'] / med['TPE+ASHA, wide space']:.3f}")
    print("compute counts every optimizer update of every trial (pruned ones included) and the probes' own updates")


if __name__ == "__main__":
    main()
