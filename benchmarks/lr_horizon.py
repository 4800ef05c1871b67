"""How the best peak LR moves with the run's length, and where lr_find's suggestion sits (issue 21).

The ground truth: for each long-horizon task, warmup + cosine runs of ``tunekit.train`` (its default
schedule: 5% warmup, cosine to 0.1x) over a grid of peak LRs at several run lengths (300, 1,000 and
3,000 updates), a few training seeds each, scored on a fixed held-out set at the end of the run. Every
task's training data is large enough that the longest run never sees a sample twice, so a longer run
means more fresh data, as in the long runs the issue is about, not more epochs.

The grid is quarter-decade spaced in log10 LR. It starts 2.5 decades wide around the task's guess and
grows by a quarter decade at whichever end holds the seed-mean minimum until the minimum has at least
two points on each side. Results are cached in ``benchmarks/data/lr_horizon_grid.json`` after every
grid point (a killed run resumes where it stopped); ``--recompute`` ignores the cache.

Then, without ``--grid-only``: ``lr_find`` as it is today (short runs, whatever the planned run), its
suggestion against the best LR at each length, and its regret at the longest length (interpolated over
log LR on that length's seed-mean curve).

    python -m benchmarks.lr_horizon --grid-only [--tasks a,b] [--seeds 2] [--lengths 300,1000,3000] [--recompute]
    python -m benchmarks.lr_horizon [--tasks a,b] [--seeds 2] [--lengths 300,1000,3000]
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sysconfig
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn
from torch.utils.data import TensorDataset

from benchmarks._common import hardware  # noqa: E402
from benchmarks.lr_tasks import mlp, teacher_regression  # noqa: E402

import tunekit  # noqa: E402
from tunekit.builtin.charlm import VOCAB, CharTransformer, lm_loss  # noqa: E402

GRID_PATH = Path(__file__).resolve().parent / "data" / "lr_horizon_grid.json"
LENGTHS = (300, 1000, 3000)
BATCH = 64
STEP = 0.25  # grid spacing, in decades: grid points are LR = 10 ** (k * STEP) for integer k
HALF_WIDTH = 5  # the starting grid: the guess and 5 quarter-decades either side (11 points, 2.5 decades)
MARGIN = 2  # grid points wanted on each side of the minimum before the grid stops growing
MAX_POINTS = 30  # a grid that keeps growing past this many points is reported as it is
EVAL = {"eval_batches": None, "eval_batch_size": 1024, "progress": False}  # the whole validation set, once
DIVERGED = ("per_seed[s][i] is seed s's final validation loss at lrs[i]; a run that diverged (or ended non-finite) "
            "is flagged in diverged[s][i] and counted as `penalty`: twice the largest finite final loss at that "
            "length (10.0 if none is finite), large enough to never be the minimum, finite so the curve "
            "interpolates; mean[i] averages per_seed over seeds")


# --- the tasks -----------------------------------------------------------------------------


@dataclass(frozen=True)
class Horizon:
    """A long-horizon task: a factory of the ``tunekit.Task`` sized for the longest run, and its metadata."""

    make: Callable[[int], tunekit.Task]  # longest run (updates) -> a task whose train data that run never repeats
    optimizer: str
    guess: float  # log10 of the starting grid's centre
    describe: str


def teacher(n: int, seed: int, dim: int = 32, classes: int = 8) -> TensorDataset:
    """Gaussian inputs labelled by a fixed random tanh teacher plus logit noise; ``seed`` draws the inputs."""
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, dim, generator=g)
    t = torch.Generator().manual_seed(4242)
    w1, w2 = torch.randn(dim, 64, generator=t) / dim ** 0.5, torch.randn(64, classes, generator=t) / 8
    logits = torch.tanh(x @ w1) @ w2 * 4
    return TensorDataset(x, (logits + 0.5 * torch.randn(n, classes, generator=g)).argmax(1))


def _teacher_task(longest: int, name: str, optimizer: Callable[..., torch.optim.Optimizer]) -> tunekit.Task:
    train, val = teacher(longest * BATCH + BATCH, 1), teacher(4096, 2)
    return tunekit.Task(model=lambda: mlp(32, 128, 2, 8), train_data=train, val_data=val,
                        loss=nn.CrossEntropyLoss(), optimizer=optimizer, batch_size=BATCH, name=name)


def teacher_adamw(longest: int) -> tunekit.Task:
    """The teacher MLP with AdamW (weight decay 0.01)."""
    return _teacher_task(longest, "teacher-adamw", lambda p: torch.optim.AdamW(p, lr=1e-3, weight_decay=0.01))


def teacher_sgdm(longest: int) -> tunekit.Task:
    """The teacher MLP with SGD, momentum 0.9."""
    return _teacher_task(longest, "teacher-sgdm", lambda p: torch.optim.SGD(p, lr=1e-2, momentum=0.9))


def regress_rmsprop(longest: int) -> tunekit.Task:
    """MSE regression on a noisy tanh teacher's standardized targets (lr_tasks' generator), RMSprop."""
    data = teacher_regression(longest * BATCH + BATCH + 4096, dim=16, noise=0.3, seed=1971)
    train = TensorDataset(*(t[:-4096] for t in data.tensors))
    val = TensorDataset(*(t[-4096:] for t in data.tensors))
    return tunekit.Task(model=lambda: mlp(16, 128, 2, 1), train_data=train, val_data=val, loss=nn.MSELoss(),
                        optimizer=lambda p: torch.optim.RMSprop(p, lr=1e-3, alpha=0.99),
                        batch_size=BATCH, name="regress-rmsprop")


LM_CONTEXT, LM_BATCH, LM_VAL = 32, 32, 4096
_SKIP_DIRS = {"test", "tests", "idle_test", "site-packages", "__pycache__"}


def stdlib_source() -> tuple[np.ndarray, int]:
    """This Python's standard-library source (every .py file outside test folders, sorted by path), as
    character ids of the charlm vocabulary (other characters dropped), and the number of files read.

    Read from the files rather than through ``inspect.getsource`` of imported modules: the same text,
    without importing hundreds of modules (some of which act on import)."""
    root = Path(sysconfig.get_paths()["stdlib"])
    files = sorted(f for f in root.rglob("*.py") if not _SKIP_DIRS & set(f.relative_to(root).parts[:-1]))
    table = np.full(256, -1, dtype=np.int64)
    for i, c in enumerate(VOCAB):
        table[ord(c)] = i
    chunks = []
    for f in files:
        raw = np.frombuffer(f.read_text(encoding="utf-8", errors="ignore").encode("ascii", "ignore"), np.uint8)
        chunks.append(table[raw])
    ids = np.concatenate(chunks)
    return ids[ids >= 0], len(files)


def charlm_adam(longest: int) -> tunekit.Task:
    """A 1-layer causal Transformer char LM, Adam, on non-overlapping windows of the stdlib source.

    The windows are drawn once, at random (fixed seed), from the whole source, several times more
    windows than the longest run reads: the run reads ``longest * LM_BATCH`` distinct windows, and
    validation is another ``LM_VAL`` of them."""
    ids, _ = stdlib_source()
    n = (len(ids) - 1) // LM_CONTEXT
    x = torch.from_numpy(ids[: n * LM_CONTEXT].reshape(n, LM_CONTEXT))
    y = torch.from_numpy(ids[1: n * LM_CONTEXT + 1].reshape(n, LM_CONTEXT))
    n_train = longest * LM_BATCH + LM_BATCH
    if n < n_train + LM_VAL:
        raise RuntimeError(f"the stdlib source holds {n} windows, fewer than the {n_train + LM_VAL} needed")
    order = torch.randperm(n, generator=torch.Generator().manual_seed(2718))
    train, val = order[:n_train], order[n_train: n_train + LM_VAL]
    return tunekit.Task(model=lambda: CharTransformer(len(VOCAB), 64, 1, 4, LM_CONTEXT),
                        train_data=TensorDataset(x[train], y[train]), val_data=TensorDataset(x[val], y[val]),
                        loss=lm_loss, optimizer=lambda p: torch.optim.Adam(p, lr=1e-3), batch_size=LM_BATCH,
                        name="charlm-adam")


TASKS: dict[str, Horizon] = {
    "teacher-adamw": Horizon(teacher_adamw, "adamw", -2.25,
                             "MLP 32-128-128-8 (ReLU), CE on an 8-class noisy tanh teacher, Gaussian inputs"),
    "teacher-sgdm": Horizon(teacher_sgdm, "sgd-momentum", -1.25,
                            "MLP 32-128-128-8 (ReLU), CE on an 8-class noisy tanh teacher, Gaussian inputs"),
    "regress-rmsprop": Horizon(regress_rmsprop, "rmsprop", -2.75,
                               "MLP 16-128-128-1 (ReLU), MSE on a tanh teacher's standardized targets + noise 0.3"),
    "charlm-adam": Horizon(charlm_adam, "adam", -2.5,
                           f"causal Transformer (1 layer, dim 64, 4 heads), next-char CE, context {LM_CONTEXT}, "
                           "non-overlapping windows of the stdlib's .py source"),
}


# --- the grid ------------------------------------------------------------------------------


def final_loss(task: tunekit.Task, k: int, steps: int, seed: int) -> float | None:
    """The held-out loss at the end of one warmup + cosine run at peak LR 10**(k*STEP); None if it diverged."""
    r = tunekit.train(task, lr=lr_of(k), run_steps=steps, seed=seed, **EVAL)
    return None if r.diverged or not math.isfinite(r.final_loss) else float(r.final_loss)


def lr_of(k: int) -> float:
    return float(10 ** (k * STEP))


def k_of(lr: float) -> int:
    return round(math.log10(lr) / STEP)


def summarize(runs: dict[int, list[float | None]], seeds: int, batch: int, steps: int) -> dict[str, Any]:
    """One length's grid entry (as the JSON holds it) from ``{k: [loss or None per seed]}``."""
    ks = sorted(runs)
    finite = [v for k in ks for v in runs[k][:seeds] if v is not None]
    penalty = 2 * max(finite) if finite else 10.0
    per_seed = [[penalty if runs[k][s] is None else runs[k][s] for k in ks] for s in range(seeds)]
    mean = np.mean(per_seed, axis=0)
    return {"lrs": [lr_of(k) for k in ks], "mean": [float(m) for m in mean], "per_seed": per_seed,
            "diverged": [[runs[k][s] is None for k in ks] for s in range(seeds)], "penalty": penalty,
            "best_lr": lr_of(ks[int(np.argmin(mean))]), "best_lr_fit": fitted_best(ks, mean),
            "seeds": list(range(seeds)), "samples": steps * batch}


def fitted_best(ks: list[int], mean: np.ndarray) -> float:
    """The vertex of a parabola in log10 LR through the grid minimum and up to 2 points either side.

    Near a flat optimum the grid's argmin moves by a point with seed noise; the fit moves less. Where
    the parabola is not convex, the grid's argmin."""
    i = int(np.argmin(mean))
    lo, hi = max(i - MARGIN, 0), min(i + MARGIN, len(ks) - 1)
    x = np.array(ks[lo: hi + 1]) * STEP
    if len(x) < 3:
        return lr_of(ks[i])
    a, b, _ = np.polyfit(x, mean[lo: hi + 1], 2)
    return float(10 ** np.clip(-b / (2 * a), x[0], x[-1])) if a > 0 else lr_of(ks[i])


def cached_runs(entry: dict[str, Any] | None) -> dict[int, list[float | None]]:
    """``{k: [loss or None per seed]}`` back from a cached length entry."""
    if not entry:
        return {}
    runs: dict[int, list[float | None]] = {}
    for i, lr in enumerate(entry["lrs"]):
        runs[k_of(lr)] = [None if entry["diverged"][s][i] else entry["per_seed"][s][i]
                          for s in range(len(entry["per_seed"]))]
    return runs


def grid(task: tunekit.Task, spec: Horizon, steps: int, seeds: int, runs: dict[int, list[float | None]],
         save: Callable[[dict[str, Any]], None]) -> dict[str, Any]:
    """Run the grid at one length, growing it until the seed-mean minimum is interior; ``runs`` (cached
    results, reused) is filled in place and ``save`` is called with the entry after every new grid point."""
    centre = round(spec.guess / STEP)
    lo, hi = min([centre - HALF_WIDTH, *runs]), max([centre + HALF_WIDTH, *runs])
    batch = task.batch_size or 1
    while True:
        for k in range(lo, hi + 1):
            done = runs.setdefault(k, [])
            if len(done) < seeds:
                done.extend(final_loss(task, k, steps, s) for s in range(len(done), seeds))
                ready = {j: runs[j] for j in range(lo, hi + 1) if len(runs.get(j, ())) >= seeds}
                save(summarize(ready, seeds, batch, steps))
        entry = summarize({j: runs[j] for j in range(lo, hi + 1)}, seeds, batch, steps)
        i = int(np.argmin(entry["mean"]))
        if hi - lo + 1 >= MAX_POINTS or MARGIN <= i <= hi - lo - MARGIN:
            entry["complete"] = True
            return entry
        lo, hi = (lo - 1, hi) if i < MARGIN else (lo, hi + 1)


def update_ms(task: tunekit.Task, lr: float, short: int = 20, long: int = 120) -> float:
    """Milliseconds per update: the difference of two runs' times, so the evaluation and set-up cancel."""
    a, b = (tunekit.train(task, lr=lr, run_steps=n, seed=0, **EVAL).seconds for n in (short, long))
    return (b - a) / (long - short) * 1e3


def load(path: Path = GRID_PATH) -> dict[str, Any]:
    if path.exists():
        return json.loads(path.read_text())
    return {"hardware": "", "tasks": {}}


def dump(data: dict[str, Any], path: Path = GRID_PATH) -> None:
    """Write atomically, so an interrupted run leaves the previous file whole."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(f".tmp{os.getpid()}")
    tmp.write_text(json.dumps(data, indent=1) + "\n")
    tmp.replace(path)


def ground_truth(names: list[str], lengths: tuple[int, ...] = LENGTHS, seeds: int = 2, recompute: bool = False,
                 path: Path = GRID_PATH, estimate: bool = True) -> dict[str, Any]:
    """The grids of ``names`` at ``lengths``, from the cache where complete, else computed (and cached).

    Returns the whole cache file's contents: ``{"hardware", "tasks": {name: {"batch", "optimizer",
    "lengths": {str(n): {"lrs", "mean", "per_seed", "best_lr", ...}}, ...}}}``."""
    data = load(path)
    data["hardware"] = hardware()
    data["diverged"] = DIVERGED
    data["schedule"] = "tunekit.train defaults: warmup 5% of the run, cosine to 0.1x the peak, grad-norm clip 1.0"
    tasks = {name: TASKS[name].make(max(lengths)) for name in names}
    todo = [(name, n) for name in names for n in lengths if recompute or not _complete(data, name, n, seeds)]
    if estimate and todo:
        _estimate(tasks, todo, seeds)
    for name in names:
        task, spec = tasks[name], TASKS[name]
        record = data["tasks"].setdefault(name, {"lengths": {}})
        record.update(_describe(task, spec))
        for n in lengths:
            if (name, n) not in todo:  # cached: its summary rebuilt, so fields added since are filled in
                entry = record["lengths"][str(n)]
                fresh = summarize(cached_runs(entry), len(entry["per_seed"]), task.batch_size or 1, n)
                record["lengths"][str(n)] = fresh | {"complete": True, "seconds": entry.get("seconds")}
                continue
            runs = {} if recompute else cached_runs(record["lengths"].get(str(n)))
            start = time.perf_counter()

            def save(entry: dict[str, Any], name: str = name, n: int = n) -> None:
                data["tasks"][name]["lengths"][str(n)] = entry | {"complete": False}
                dump(data, path)

            entry = grid(task, spec, n, seeds, runs, save)
            entry["seconds"] = round(time.perf_counter() - start, 1)
            record["lengths"][str(n)] = entry
            dump(data, path)
            print(f"  {name} @ {n} updates: best lr {entry['best_lr']:.3g} on {len(entry['lrs'])} points "
                  f"({entry['lrs'][0]:.3g}..{entry['lrs'][-1]:.3g}), {entry['seconds']:.0f} s", flush=True)
    dump(data, path)
    return data


def _complete(data: dict[str, Any], name: str, n: int, seeds: int) -> bool:
    entry = data["tasks"].get(name, {}).get("lengths", {}).get(str(n))
    return bool(entry and entry.get("complete") and len(entry["per_seed"]) >= seeds)


def _describe(task: tunekit.Task, spec: Horizon) -> dict[str, Any]:
    return {"batch": task.batch_size, "optimizer": spec.optimizer, "model_data": spec.describe,
            "train_samples": len(task.train_data), "val_samples": len(task.val_data)}  # type: ignore[arg-type]


def _estimate(tasks: dict[str, tunekit.Task], todo: list[tuple[str, int]], seeds: int) -> None:
    """Time one update of each task and print what the uncached grids should cost (before any growth)."""
    total = 0.0
    for name, task in tasks.items():
        steps = sum(n for t, n in todo if t == name)
        if not steps:
            continue
        ms = update_ms(task, 10 ** TASKS[name].guess)
        cost = ms * steps * seeds * (2 * HALF_WIDTH + 1) / 1e3
        total += cost
        print(f"  {name}: {ms:.2f} ms/update; its grids ~{cost / 60:.1f} min", flush=True)
    print(f"  estimated total ~{total / 60:.1f} min on the starting grids (more where a grid grows)", flush=True)


# --- reports -------------------------------------------------------------------------------


def at(entry: dict[str, Any], lr: float) -> float:
    """The seed-mean final loss at ``lr``, interpolated over log10 LR (clamped to the grid)."""
    x = np.log10(entry["lrs"])
    return float(np.interp(min(max(math.log10(lr), x[0]), x[-1]), x, entry["mean"]))


def table(data: dict[str, Any], names: list[str], lengths: list[int]) -> None:
    """Best LR per length (grid argmin, and the parabola fit's in brackets), the shortest/longest ratio of
    each, and how flat the longest run's optimum is: the seed-mean loss at 0.5x and 2x its best over the min."""
    short, long = min(lengths), max(lengths)
    print(f"{'task':16s} " + " ".join(f"{'best@' + str(n) + ' (fit)':>20s}" for n in lengths)
          + f" {'ratio ' + str(short) + '/' + str(long) + ' (fit)':>22s}   at {long}: loss(0.5x)/min loss(2x)/min")
    for name in names:
        entries = data["tasks"][name]["lengths"]
        best = {n: entries[str(n)]["best_lr"] for n in lengths}
        fit = {n: entries[str(n)]["best_lr_fit"] for n in lengths}
        e = entries[str(long)]
        low, high = (at(e, best[long] * f) / min(e["mean"]) for f in (0.5, 2.0))
        print(f"{name:16s} " + " ".join(f"{best[n]:9.3g} ({fit[n]:8.3g})" for n in lengths)
              + f" {best[short] / best[long]:11.2f} ({fit[short] / fit[long]:8.2f})   {low:13.4f} {high:12.4f}")


def lr_find_report(data: dict[str, Any], names: list[str], lengths: list[int], seeds: int) -> None:
    """``lr_find(task, run_steps=longest)`` against the grids: its ratio to each best, its regret at the longest length
    (lr_horizon_eval.py has the full comparison)."""
    long = max(lengths)
    for name in names:
        task, entries = TASKS[name].make(long), data["tasks"][name]["lengths"]
        best = {n: entries[str(n)]["best_lr"] for n in lengths}
        found = [tunekit.lr_find(task, seed=s, run_steps=long, progress=False) for s in range(100, 100 + seeds)]
        lrs = [float(f.suggestion) for f in found]
        e = entries[str(long)]
        regret = [at(e, lr) / min(e["mean"]) - 1 for lr in lrs]
        cost = np.mean([f.samples for f in found]) / e["samples"]
        print(f"{name}: best lr " + ", ".join(f"{best[n]:.3g} at {n} updates" for n in lengths)
              + f"; lr_find {np.median(lrs):.3g} (" + ", ".join(f"{np.median(lrs) / best[n]:.2f}x the {n}-update best"
                                                          for n in lengths)
              + f"); regret at {long} updates mean {100 * np.mean(regret):.2f}%, worst {100 * max(regret):.2f}%; "
              f"cost {100 * cost:.1f}% of the {long}-update run's samples", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--grid-only", action="store_true", help="compute/cache the grids and print their table")
    parser.add_argument("--tasks", default=",".join(TASKS), help=f"comma-separated, of {', '.join(TASKS)}")
    parser.add_argument("--seeds", type=int, default=2)
    parser.add_argument("--lengths", default=",".join(map(str, LENGTHS)))
    parser.add_argument("--recompute", action="store_true", help="ignore the cached grids of these tasks/lengths")
    a = parser.parse_args()
    names = a.tasks.split(",")
    unknown = [n for n in names if n not in TASKS]
    if unknown:
        parser.error(f"unknown task(s) {', '.join(unknown)}: choose from {', '.join(TASKS)}")
    lengths = sorted(int(x) for x in a.lengths.split(","))
    torch.set_num_threads(1)
    print(hardware(), flush=True)
    start = time.perf_counter()
    data = ground_truth(names, tuple(lengths), a.seeds, a.recompute)
    print(f"grids ready in {time.perf_counter() - start:.0f} s ({GRID_PATH})")
    table(data, names, lengths)
    if not a.grid_only:
        lr_find_report(data, names, lengths, a.seeds)


if __name__ == "__main__":
    main()
