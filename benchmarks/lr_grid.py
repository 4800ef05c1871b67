"""The LR benchmark's ground truth: a grid of full training runs per task (issue 11).

For every task of ``lr_tasks.py``, full warmup + cosine runs through
``tunekit.train`` (the task's batch size and run length, tunekit's default
schedule: 5% warmup, cosine to 10%, gradient clipping at 1.0) at peak LRs
10^(k/3) -- three per decade -- and several seeds each. The final validation
loss of each run goes to ``benchmarks/data/lr_grid.json``, written after every
run: a run already there is not run again, so an interrupted grid resumes.

The grid starts from each task's range and grows by a decade at an end while
the best seed-mean loss sits at that end, or (at the top) while the top LR has
neither diverged nor degraded, i.e. its loss is still less than
L* + 20% of (untrained loss - L*); at most two decades each way.

    python -m benchmarks.lr_grid                  # run what is missing, print the table
    python -m benchmarks.lr_grid --regenerate     # drop the JSON (and cached backbones), rerun all
    python -m benchmarks.lr_grid --tasks a,b [--regenerate] [--seeds 3]
    python -m benchmarks.lr_grid --table          # only print the table of what is there

A diverged run (non-finite loss) is stored with ``final_loss: null``; for the
curve it counts as the untrained model's loss, and a finite final loss above
that is capped at it.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch

from benchmarks._common import hardware  # noqa: E402
from benchmarks.harness.grid import PER_DECADE, capped, curve, fill, lr_of  # noqa: F401  (lr_rules and the tests import them from here)
from benchmarks.lr_tasks import CACHE, TASKS  # noqa: E402

from tunekit.training.loop import TrainConfig  # noqa: E402

GRID_JSON = Path(__file__).resolve().parent / "data" / "lr_grid.json"


# --- the JSON --------------------------------------------------------------------------------


def load(path: Path = GRID_JSON) -> dict[str, Any]:
    if path.exists():
        with open(path) as f:
            return json.load(f)
    return {"version": 1, "tasks": {}}


def save(data: dict[str, Any], path: Path = GRID_JSON) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(f".tmp{os.getpid()}")
    with open(tmp, "w") as f:
        json.dump(data, f, indent=1, sort_keys=False)
        f.write("\n")
    tmp.replace(path)


# --- the curve of one task (shared with lr_rules.py) -------------------------------------------


def loss_at(lr: float | None, log_lrs: np.ndarray, mean: np.ndarray, worst: float) -> float:
    """The seed-mean curve interpolated over log LR; the edge's value beyond the grid; ``worst`` for no LR."""
    if lr is None or not (lr > 0 and math.isfinite(lr)):
        return worst
    return float(np.interp(math.log10(lr), log_lrs, mean))


def summary(entry: dict[str, Any]) -> dict[str, Any]:
    ks, log_lrs, mean = curve(entry)
    i = int(np.argmin(mean))
    best, untrained = float(mean[i]), entry["untrained_loss"]
    top_gap = (float(mean[-1]) - best) / max(untrained - best, 1e-12)
    top_runs = [r for r in entry["runs"] if r["k"] == ks[-1]]
    at_best = [capped(r["final_loss"], untrained) for r in entry["runs"] if r["k"] == ks[i]]
    return {
        "best_lr": lr_of(int(ks[i])), "best_k": int(ks[i]), "L*": best, "untrained": untrained,
        "below": float(mean[i - 1]) if i > 0 else None, "above": float(mean[i + 1]) if i + 1 < len(mean) else None,
        "interior": 0 < i < len(mean) - 1, "top_gap": top_gap,
        "seed_sd": float(np.std(at_best, ddof=1)) if len(at_best) > 1 else math.nan,
        "top_diverged": any(r["diverged"] for r in top_runs), "lo": lr_of(int(ks[0])), "hi": lr_of(int(ks[-1])),
        "points": len(ks), "runs": len(entry["runs"]),
        "seconds_per_run": float(np.mean([r["seconds"] for r in entry["runs"]])) if entry["runs"] else 0.0,
    }


# --- running ------------------------------------------------------------------------------------


def run_task(name: str, data: dict[str, Any], seeds: int, save_to: Path) -> None:
    spec = TASKS[name]
    start = time.perf_counter()
    task = spec.make()
    cfg = TrainConfig.for_task(task)
    entry = data["tasks"].setdefault(name, {})
    if entry.get("seeds") not in (None, seeds):
        print(f"{name}: the JSON holds a grid of {entry['seeds']} seeds; asked for {seeds}: rerun with --regenerate",
              file=sys.stderr)
        sys.exit(2)
    entry.update(classes=spec.classes(), doc=(spec.make.__doc__ or "").strip(), seeds=seeds,
                 train_config={k: getattr(cfg, k) for k in ("max_steps", "batch_size", "warmup", "schedule",
                                                             "min_lr_ratio", "clip_grad_norm", "eval_batches",
                                                             "eval_batch_size")},
                 trainable_parameters=sum(p.numel() for p in task.make_model(0).parameters() if p.requires_grad))
    new = fill(entry, task, spec.grid, seeds, lambda: save(data, save_to))
    s = summary(entry)
    print(f"{name}: {s['points']} LRs {s['lo']:.3g}..{s['hi']:.3g} x {seeds} seeds, {new} new runs "
          f"in {time.perf_counter() - start:.0f}s ({s['seconds_per_run']:.2f}s/run); best lr {s['best_lr']:.3g}, "
          f"L* {s['L*']:.4f}, untrained {s['untrained']:.4f}, {'interior' if s['interior'] else 'AT AN EDGE'}",
          flush=True)


def table(data: dict[str, Any], names: list[str]) -> str:
    head = (f"{'task':<20}{'optimizer':<14}{'loss':<10}{'arch':<15}{'regime':<9}{'bs':>4}{'steps':>6}"
            f"{'best lr':>10}{'L*':>9}{'sd%':>6}{'L(-1/3)':>9}{'L(+1/3)':>9}{'L0':>8}{'top':>11}  interior  grid")
    lines = [head, "-" * len(head)]
    for name in names:
        entry = data["tasks"].get(name)
        if not entry or not entry.get("runs"):
            continue
        s, c = summary(entry), entry["classes"]
        top = "diverged" if s["top_diverged"] else f"+{100 * s['top_gap']:.0f}%gap"

        def f(v: float | None) -> str:
            return f"{v:9.4f}" if v is not None else f"{'-':>9}"

        lines.append(f"{name:<20}{c['optimizer']:<14}{c['loss']:<10}{c['arch']:<15}{c['regime']:<9}{c['batch']:>4}"
                     f"{c['steps']:>6}{s['best_lr']:>10.3g}{s['L*']:>9.4f}{100 * s['seed_sd'] / s['L*']:>6.2f}{f(s['below'])}{f(s['above'])}"
                     f"{s['untrained']:>8.3f}{top:>11}  {'yes' if s['interior'] else 'NO':<8}  "
                     f"{s['lo']:.0e}..{s['hi']:.0e} ({s['points']}x{entry['seeds']})")
    lines.append("sd%: the seeds' standard deviation of the final loss at the best LR, in % of L* (a regret below "
                 "about sd%/100 is within seed noise)")
    lines.append("L(-1/3), L(+1/3): seed-mean loss a third of a decade below / above the best LR; L0: untrained loss; "
                 "top: the highest LR's runs diverged, or its loss gap over L* as a share of (L0 - L*)")
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tasks", default=",".join(TASKS), help="comma-separated task names (default: all)")
    ap.add_argument("--seeds", type=int, default=3, help="training seeds per LR (default 3)")
    ap.add_argument("--regenerate", action="store_true", help="drop the selected tasks' runs and run them again")
    ap.add_argument("--table", action="store_true", help="print the table of the JSON as it is; run nothing")
    ap.add_argument("--out", type=Path, default=GRID_JSON)
    ap.add_argument("--threads", type=int, default=1)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    names = [t for t in args.tasks.split(",") if t]
    unknown = [n for n in names if n not in TASKS]
    if unknown:
        ap.error(f"unknown task(s) {', '.join(unknown)}: known are {', '.join(TASKS)}")
    data = load(args.out)
    if args.table:
        print(table(data, names))
        return
    if args.regenerate:
        for n in names:
            data["tasks"].pop(n, None)
        if set(names) == set(TASKS) and CACHE.exists():
            for p in CACHE.glob("*.pt"):  # the pretrained backbones too
                p.unlink()
    data["hardware"] = hardware()
    data["command"] = "python -m benchmarks.lr_grid --regenerate"
    data["lrs"] = f"10^(k/{PER_DECADE}), k integer"
    print(f"hardware: {data['hardware']}", flush=True)
    start = time.perf_counter()
    for n in names:
        run_task(n, data, args.seeds, args.out)
    elapsed = time.perf_counter() - start
    data.setdefault("timing", {})["last_invocation_seconds"] = round(elapsed, 1)
    save(data, args.out)
    print(f"\ngrid done in {elapsed:.0f}s\n")
    print(table(data, names))


if __name__ == "__main__":
    main()
