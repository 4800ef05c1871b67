"""Does seeding the search with the probes make it cheaper?

On built-in tasks, over several seeds, the compute (optimizer updates: every
trial's, pruned ones included, plus the probes' own) each strategy spends
before its first completed trial is within 2% of the target loss:

- seeded: the `from_scratch` space (LR bounded by the range test, batch from the
  probe, seed trial first), TPE + successive-halving (ASHA) pruning;
- random-full: random search over a wide unseeded space (LR 1e-6 to 1), every
  trial to the end;
- tpe-wide: TPE + ASHA over the same wide space, no probes;
- seeded on Ray: the seeded search with its trials run by Ray Tune (its
  ASHAScheduler, trials two at a time), to compare compute and wall time with
  the local backend (Ray's start-up included: a fresh local instance a search).

The target is the expected validation loss of the grid's best configuration:
a log grid of peak LRs (1e-4 to 1, half-decade steps) at the task's default
settings, each LR trained with ``--grid-seeds`` training seeds (1000, 1001, ...,
disjoint from the searches' seeds); the best mean over LRs, plus 2%. A single
training seed moves the final loss by several percent, more than the 2% margin,
so a per-seed minimum over the grid would reward the grid's luck, not a config.
Search number ``s`` trains all its trials (and runs its probes) with seed ``s``.

A search that never reaches the target within ``--trials`` trials counts as
inf; the medians are over all seeds, so a median is finite only when at least
half the seeds reached the target. A second line gives, for reference, the
median with each miss counted as the compute that search spent (a lower bound
on what it would need), marked with ">=" when any seed missed.

Also printed: scheduler overhead, the wall time of a search over the sum of its
trials' training times.

    python benchmarks/search_efficiency.py [--tasks shapes,shapes-sgd] [--seeds 5] [--trials 20]
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
# Benchmark tasks: name -> (built-in task, its config).
TASKS = {"shapes": ("shapes", None), "shapes-sgd": ("shapes", {"optimizer": "sgd"}), "charlm": ("charlm", None)}
STRATEGIES = {
    "seeded TPE+ASHA": dict(space="from_scratch", sampler="tpe", prune=True, seed_trial=True),
    "random, full budgets": dict(space=WIDE, sampler="random", prune=False, seed_trial=False),
    "TPE+ASHA, wide space": dict(space=WIDE, sampler="tpe", prune=True, seed_trial=False),
    # The seeded search again, its trials run by Ray Tune (ASHAScheduler, 2 at a time on the 2 cores).
    "seeded, Ray backend": dict(space="from_scratch", sampler="tpe", prune=True, seed_trial=True, backend="ray"),
}
SEEDED, RANDOM, WIDE_TPE, RAY = STRATEGIES


def grid_target(task: tunekit.Task, steps: int, grid_seeds: int) -> tuple[float, float, float]:
    """(best mean final loss over the LR grid, its LR, the spread of that LR's losses over seeds)."""
    best, best_lr, best_spread = math.inf, math.nan, math.nan
    for log_lr in np.arange(-4.0, 0.01, 0.5):
        finals = [tunekit.train(task, lr=float(10**log_lr), max_steps=steps, seed=1000 + i, device="cpu").final_loss
                  for i in range(grid_seeds)]
        if not all(math.isfinite(f) for f in finals):
            continue  # a diverging LR is not a candidate
        mean = statistics.fmean(finals)
        if mean < best:
            best, best_lr, best_spread = mean, float(10**log_lr), (max(finals) - min(finals)) / mean
    return best, best_lr, best_spread


def _fmt(x: float | None) -> str:
    return "none" if x is None else f"{x:.0f}"


def compute_to_target(result: tunekit.SearchResult, target: float) -> float:
    spent = result.probe_updates
    for t in sorted(result.trials, key=lambda t: t.get("finished") or 0):
        spent += int(t.get("updates") or 0)
        if t["state"] == "COMPLETE" and t["value"] is not None and t["value"] <= target:
            return float(spent)
    return math.inf


def run_task(label: str, args: argparse.Namespace) -> dict[str, float]:
    name, cfg = TASKS[label]
    task = tunekit.load_task(name, cfg)
    steps = int(task.defaults.get("max_steps", 200))
    best, best_lr, spread = grid_target(task, steps, args.grid_seeds)
    target = best * 1.02
    print(f"task {label}: {steps} updates a trial, {args.trials} trials a search, {args.seeds} seeds")
    print(f"grid-best expected val loss {best:.4f} at lr {best_lr:.3g} (mean of {args.grid_seeds} seeds, "
          f"spread {spread:.1%}); target {target:.4f}", flush=True)
    strategies = {k: v for k, v in STRATEGIES.items() if k in args.strategies}
    table: dict[str, list[float]] = {k: [] for k in strategies}
    spent: dict[str, list[float]] = {k: [] for k in strategies}
    overhead: dict[str, list[float]] = {k: [] for k in strategies}
    wall: dict[str, list[float]] = {k: [] for k in strategies}
    pruned: dict[str, list[int]] = {k: [] for k in strategies}
    for seed in range(args.seeds):
        for sname, kw in strategies.items():
            with tempfile.TemporaryDirectory() as tmp:
                r = tunekit.search(task, kw["space"], trials=args.trials, max_steps=steps, seed=seed, out=Path(tmp),
                                   sampler=kw["sampler"], prune=kw["prune"], seed_trial=kw["seed_trial"],
                                   memory_budget="1GiB", device="cpu", backend=kw.get("backend", "local"))
            c = compute_to_target(r, target)
            table[sname].append(c)
            spent[sname].append(float(r.compute))
            pruned[sname].append(sum(t["state"] == "PRUNED" for t in r.trials))
            trained = sum(t.get("seconds") or 0.0 for t in r.trials)
            overhead[sname].append(r.seconds / trained if trained else math.nan)
            wall[sname].append(r.seconds)
            seed_cfg = ""
            if r.seed_params:
                seed_trial = r.trials[0]
                seed_cfg = (f"  seed trial lr {r.seed_params.get('lr', math.nan):.3g} batch {r.seed_params.get('batch')}"
                            f" -> {seed_trial['state'].lower()} {seed_trial['value'] if seed_trial['value'] is None else round(seed_trial['value'], 4)}"
                            f"; critical batch {_fmt((r.probe or {}).get('critical_batch'))}")
            best_v = math.nan if r.best_value is None else r.best_value
            print(f"  seed {seed} {sname:<22} best {best_v:.4f}  compute to target {c:>7.0f}  "
                  f"(probes {r.probe_updates}, all {r.compute}, pruned {pruned[sname][-1]}/{len(r.trials)}){seed_cfg}",
                  flush=True)
    print(f"\n{'strategy':<22} {'median compute':>15} {'reached':>8} {'misses as spent':>16} {'pruned':>7} {'wall/train':>11} {'wall s':>7}")
    med: dict[str, float] = {}
    low: dict[str, float] = {}  # medians with each miss counted as the compute it spent
    for sname in strategies:
        vals = table[sname]
        med[sname] = statistics.median(vals)
        reached = sum(math.isfinite(v) for v in vals)
        censored = statistics.median([v if math.isfinite(v) else s for v, s in zip(vals, spent[sname])])
        low[sname] = censored
        cens = f"{'>=' if reached < len(vals) else ''}{censored:.0f}"
        print(f"{sname:<22} {med[sname]:>15.0f} {f'{reached}/{len(vals)}':>8} {cens:>16} "
              f"{statistics.median(pruned[sname]):>7.0f} {statistics.median(overhead[sname]):>11.3f} "
              f"{statistics.median(wall[sname]):>7.1f}")
    nan = math.nan

    def ratio_of(a: str, b: str) -> tuple[float, str]:
        """a's median compute over b's, as a number and as printed ('<=' when b's median is a miss)."""
        if a not in med or b not in med or not math.isfinite(med[a]):
            return nan, "n/a"
        if math.isfinite(med[b]):
            return med[a] / med[b], f"{med[a] / med[b]:.3f}"
        # b missed the target in most seeds: its real median is above what it spent, so the
        # ratio is at most a's median over b's median with misses counted as spent.
        return med[a] / low[b], f"<= {med[a] / low[b]:.3f}"

    ratio, ratio_s = ratio_of(SEEDED, RANDOM)
    ratio_wide, ratio_wide_s = ratio_of(SEEDED, WIDE_TPE)
    print(f"{label}: seeded / random-full compute {ratio_s} (target <= 0.5); seeded / tpe-wide {ratio_wide_s}", flush=True)
    if SEEDED in wall and RAY in wall:
        print(f"{label}: Ray backend / local backend, seeded search: wall {statistics.median(wall[RAY]) / statistics.median(wall[SEEDED]):.3f}"
              f" (Ray start-up included), median compute {med[RAY] / med[SEEDED] if math.isfinite(med[SEEDED]) else nan:.3f}", flush=True)
    print()
    return {"ratio": ratio_s, "ratio_wide": ratio_wide_s}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tasks", default="shapes,shapes-sgd", help=f"comma-separated, from {', '.join(TASKS)}")
    ap.add_argument("--seeds", type=int, default=5)
    ap.add_argument("--grid-seeds", type=int, default=3)
    ap.add_argument("--trials", type=int, default=20)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--only", default="", help="run only these strategies (comma-separated: seeded, random, wide, ray); "
                    "the ratios need all three")
    args = ap.parse_args()
    short = {"seeded": SEEDED, "random": RANDOM, "wide": WIDE_TPE, "ray": RAY}
    picked = [w.strip() for w in args.only.split(",") if w.strip()]
    if any(w not in short for w in picked):
        ap.error(f"--only takes seeded, random, wide, ray; got {args.only!r}")
    args.strategies = [short[w] for w in picked] if picked else list(STRATEGIES)
    labels = [t.strip() for t in args.tasks.split(",") if t.strip()]
    unknown = [t for t in labels if t not in TASKS]
    if unknown:
        ap.error(f"unknown task {unknown[0]!r}: use {', '.join(TASKS)}")
    torch.set_num_threads(args.threads)
    print(f"hardware: {hardware()}")
    print("compute: every optimizer update of every trial (pruned ones included) and the probes' own updates\n")
    if RAY in args.strategies:
        try:
            import ray  # noqa: F401
        except ImportError:
            ap.error("the Ray column needs ray[tune]: pip install 'tunekit[ray]', or pass --only seeded,random,wide")
    ratios = {label: run_task(label, args) for label in labels}
    print(f"{'task':<12} {'seeded/random-full':>19} {'seeded/tpe-wide':>16}")
    for label, r in ratios.items():
        print(f"{label:<12} {r['ratio']:>19} {r['ratio_wide']:>16}")


if __name__ == "__main__":
    main()
