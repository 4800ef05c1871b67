"""Ground-truth LR grids: the planned run, trained in full at 3 LRs a decade, several seeds each.

One JSON file a task and run length under ``benchmarks/data/corpus_grid/`` (``NAME.json`` for the
planned run, ``NAME@STEPS.json`` for another length), written after every run, so an interrupted grid
resumes, and each holding the command that made it. The grid starts from the corpus entry's range and
grows a decade at an end while the best seed-mean loss sits at that end, or (at the top) while the top
LR has neither diverged nor degraded (its loss under L* + 20% of (untrained - L*)); at most two decades
each way. A diverged run counts as the untrained loss.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

import tunekit
from tunekit import TrainConfig

PER_DECADE = 3
DEGRADED = 0.2  # the top LR has degraded when its loss exceeds L* + DEGRADED * (untrained - L*)
MAX_EXTEND = 2  # decades each way beyond the starting range
ODDS_DRAWS = 4000  # bootstrap draws for :func:`best_odds`
PLAUSIBLE = 0.05  # a window grows at an end whose LR is the best in at least this share of the draws
GRIDS = Path(__file__).resolve().parent.parent / "data" / "corpus_grid"
WINDOWS = GRIDS.with_name("corpus_search_grid")  # :func:`window`'s, 10 seeds around the best


def lr_of(k: int) -> float:
    return float(10 ** (k / PER_DECADE))


def capped(loss: float | None, untrained: float) -> float:
    return untrained if loss is None or not math.isfinite(loss) else min(loss, untrained)


def curve(grid: dict[str, Any], stat: Callable[[Any], Any] = np.mean) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(k values, log10 LRs, the mean, or ``stat``, of the seeds' capped final losses) over the LRs that
    have all their seeds (``grid["seeds"]``, or a merged grid's ``seeds_at`` for that LR: :func:`merged`)."""
    untrained = grid["untrained_loss"]
    by_k: dict[int, list[float]] = {}
    for run in grid["runs"]:
        by_k.setdefault(run["k"], []).append(capped(run["final_loss"], untrained))
    n = seeds_at(grid)
    ks = np.array(sorted(k for k, v in by_k.items() if len(v) >= n(k)), dtype=int)
    mean = np.array([stat(by_k[k][:n(k)]) for k in ks])
    return ks, ks / PER_DECADE, mean


def seeds_at(grid: dict[str, Any]) -> Callable[[int], int]:
    """How many seeds the grid holds at LR k: its ``seeds``, or a merged grid's count there."""
    at = {int(k): v for k, v in grid.get("seeds_at", {}).items()}
    return lambda k: at.get(int(k), grid["seeds"])


def merged(base: dict[str, Any], window: dict[str, Any] | None) -> dict[str, Any]:
    """The grid with the window's LRs replaced by its many seeds (the window's runs include the grid's seeds
    there): one curve over the grid's whole range, 10 seeds where the best may lie, for :meth:`Truth.of` with
    the seeds' median (the issue's L*: the median of 10 seeds at the best LR)."""
    if window is None:
        return base
    n = window["seeds"]
    full = {k for k in {r["k"] for r in window["runs"]} if sum(r["k"] == k for r in window["runs"]) >= n}
    runs = [r for r in base["runs"] if r["k"] not in full] + [r for r in window["runs"] if r["k"] in full]
    return dict(base, runs=sorted(runs, key=lambda r: (r["k"], r["seed"])), seeds_at={k: n for k in full},
                untrained_losses=window.get("untrained_losses", []))


def truth(name: str, root: Path = GRIDS, windows: Path = WINDOWS) -> Truth:
    """The planned run's truth: its grid merged with its 10-seed window where one exists, by the seeds' median."""
    base = load(name, root=root)
    if base is None:
        raise SystemExit(f"no grid for {name}: python -m benchmarks.corpus_grid --tasks {name}")
    return Truth.of(merged(base, load(name, root=windows)), np.median)


def untrained_loss(task: tunekit.Task, seed: int = 0) -> float:
    """The validation loss of the model as ``tunekit.train`` at ``seed`` builds it, before any update."""
    cfg = TrainConfig.for_task(task)
    return float(tunekit.evaluate(task.make_model(seed), task.val_data, task.loss_computer(), device=torch.device("cpu"),
                                  batch_size=cfg.eval_batch_size or task.batch_size, max_batches=cfg.eval_batches)["loss"])


def fill(grid: dict[str, Any], task: tunekit.Task, start: tuple[float, float], seeds: int,
         save: Callable[[], None], **train_kw: Any) -> int:
    """Run what ``grid`` lacks (``grid["runs"]``), growing it as the module says; returns the new runs."""
    grid.setdefault("runs", [])
    grid["seeds"] = seeds
    if "untrained_loss" not in grid:
        grid["untrained_loss"] = untrained_loss(task)
    done = {(r["k"], r["seed"]) for r in grid["runs"]}
    new = 0

    def ensure(k: int) -> None:
        nonlocal new
        new += _run_point(grid, task, k, seeds, done, save, **train_kw)

    k_lo, k_hi = round(start[0] * PER_DECADE), round(start[1] * PER_DECADE)
    for k in range(k_lo, k_hi + 1):
        ensure(k)
    low_limit, high_limit = k_lo - MAX_EXTEND * PER_DECADE, k_hi + MAX_EXTEND * PER_DECADE
    while True:  # grow by a decade at an end the optimum (or a still-healthy top) sits at
        t = Truth.of(grid)
        ks = curve(grid)[0]
        if t.best_k == ks[0] and ks[0] > low_limit:
            for k in range(ks[0] - PER_DECADE, ks[0]):
                ensure(k)
        elif (t.best_k == ks[-1] or (t.top_gap < DEGRADED and not t.top_diverged)) and ks[-1] < high_limit:
            for k in range(ks[-1] + 1, ks[-1] + PER_DECADE + 1):
                ensure(k)
        else:
            break
    grid["runs"].sort(key=lambda r: (r["k"], r["seed"]))
    save()
    return new


def _run_point(grid: dict[str, Any], task: tunekit.Task, k: int, seeds: int, done: set[tuple[int, int]],
               save: Callable[[], None], **train_kw: Any) -> int:
    """Train LR ``lr_of(k)`` at every seed the grid lacks there; returns the new runs."""
    new = 0
    for seed in range(seeds):
        if (k, seed) in done:
            continue
        r = tunekit.train(task, lr=lr_of(k), seed=seed, device="cpu", progress=False, **train_kw)
        final = r.final_loss
        last = r.evals[-1] if r.evals else {}
        grid["runs"].append({"k": k, "lr": lr_of(k), "seed": seed,
                             "final_loss": final if math.isfinite(final) else None,
                             "accuracy": last.get("accuracy"), "diverged": bool(r.diverged),
                             "updates": r.updates, "samples": r.samples, "seconds": round(r.seconds, 3)})
        done.add((k, seed))
        new += 1
        save()
    return new


def best_odds(grid: dict[str, Any], draws: int = ODDS_DRAWS, seed: int = 0) -> dict[int, float]:
    """{k: the share of bootstrap draws in which LR k is the best}: the seeds resampled with replacement, the
    same draw at every LR (a seed is one init and batch order at each), the best by the draws' median.

    Why: where neighbouring LRs end within their seeds' noise of each other, "the best LR" is not one grid
    point; ten seeds say how likely each is. Deterministic (``seed``)."""
    ks = curve(grid, np.median)[0]
    untrained, n = grid["untrained_loss"], grid["seeds"]
    by_k = {int(k): sorted((r for r in grid["runs"] if r["k"] == k), key=lambda r: r["seed"])[:n] for k in ks}
    m = np.array([[capped(r["final_loss"], untrained) for r in by_k[int(k)]] for k in ks])
    pick = np.random.default_rng(seed).integers(0, n, size=(draws, n))
    best = np.argmin(np.median(m[:, pick], axis=2), axis=0)
    share = np.bincount(best, minlength=len(ks)) / draws
    return {int(k): float(v) for k, v in zip(ks, share)}


@dataclass(frozen=True)
class Truth:
    """What a grid says: the seed-mean curve over log LR, its best LR and loss, the untrained loss."""

    log_lrs: np.ndarray
    mean: np.ndarray
    best_k: int
    best_lr: float
    best: float  # L*, the best seed-mean final loss (or the best of the ``stat`` Truth.of was given)
    untrained: float
    top_gap: float
    top_diverged: bool
    interior: bool
    seed_sd: float  # the seeds' sd at the best LR, as a share of L*
    at_best: tuple[float, ...] = ()  # the seeds' capped final losses at the best LR
    untrained_at: tuple[float, ...] = ()  # the untrained model's loss at each seed (a window's; see :func:`window`)

    @classmethod
    def of(cls, grid: dict[str, Any], stat: Callable[[Any], Any] = np.mean) -> Truth:
        ks, log_lrs, mean = curve(grid, stat)
        i = int(np.argmin(mean))
        best, untrained = float(mean[i]), grid["untrained_loss"]
        at_best = [capped(r["final_loss"], untrained) for r in grid["runs"] if r["k"] == ks[i]][:seeds_at(grid)(ks[i])]
        return cls(log_lrs, mean, int(ks[i]), lr_of(int(ks[i])), best, untrained,
                   (float(mean[-1]) - best) / max(untrained - best, 1e-12),
                   any(r["diverged"] for r in grid["runs"] if r["k"] == ks[-1]), 0 < i < len(mean) - 1,
                   float(np.std(at_best, ddof=1)) / best if len(at_best) > 1 and best > 0 else math.nan,
                   tuple(at_best), tuple(grid.get("untrained_losses", ())))

    def loss_at(self, lr: float | None) -> float:
        """The seed-mean curve interpolated over log LR; the edge's value beyond the grid; untrained for none."""
        if lr is None or not (lr > 0 and math.isfinite(lr)):
            return self.untrained
        return float(np.interp(math.log10(lr), self.log_lrs, self.mean))

    def regret(self, lr: float | None) -> float:
        """(L(lr) - L*) / L*: the share of the best final loss that this LR loses."""
        return (self.loss_at(lr) - self.best) / self.best

    def normalised(self, lr: float | None) -> float:
        """(L(lr) - L*) / (L_untrained - L*): the share of the learnable loss that this LR loses."""
        return (self.loss_at(lr) - self.best) / max(self.untrained - self.best, 1e-12)


def path_of(name: str, steps: int | None = None, root: Path = GRIDS) -> Path:
    return root / (f"{name}.json" if steps is None else f"{name}@{steps}.json")


def load(name: str, steps: int | None = None, root: Path = GRIDS) -> dict[str, Any] | None:
    p = path_of(name, steps, root)
    return json.loads(p.read_text()) if p.exists() else None


def ensure(name: str, seeds: int = 2, steps: int | None = None, root: Path = GRIDS, quiet: bool = False) -> Truth:
    """The grid of corpus task ``name`` (its planned run, or ``steps`` updates), run where missing."""
    from benchmarks.corpus import entry
    from benchmarks.harness.report import command, commit

    e = entry(name)
    path = path_of(name, steps, root)
    grid = load(name, steps, root) or {"task": name, "family": e.family, "steps": steps or e.run_steps}
    if grid.get("seeds") not in (None, seeds):
        raise SystemExit(f"{path} holds a grid of {grid['seeds']} seeds, asked for {seeds}: delete it to rerun")
    grid.setdefault("command", command())
    grid.setdefault("commit", commit())
    task = e.make()
    if steps is not None:
        task = dataclasses.replace(task, defaults={**task.defaults, "max_steps": steps})

    save = _saver(path, grid)
    t0 = time.perf_counter()
    new = fill(grid, task, e.grid, seeds, save)
    t = Truth.of(grid)
    if not quiet:
        print(f"{path.stem}: {len(t.log_lrs)} LRs x {seeds} seeds, {new} new runs in {time.perf_counter() - t0:.0f}s; "
              f"best lr {t.best_lr:.3g}, L* {t.best:.4f}, untrained {t.untrained:.4f}"
              f"{'' if t.interior else ', AT AN EDGE'}", flush=True)
    return t


def _saver(path: Path, grid: dict[str, Any]) -> Callable[[], None]:
    def save() -> None:  # whole or not at all: an interrupted grid resumes from the file
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(f".tmp{os.getpid()}")
        tmp.write_text(json.dumps(grid, indent=0) + "\n")
        tmp.replace(path)

    return save


def window(name: str, seeds: int, root: Path, base_root: Path = GRIDS, quiet: bool = False,
           whole: bool = False) -> Truth:
    """The planned run's LRs around the grid's best (its best and both neighbours) at ``seeds`` seeds,
    growing a point at an end while that end is the best (the seeds' median) in at least ``PLAUSIBLE`` of
    :func:`best_odds`'s draws, up to the grid's own range: the best is then not known to lie inside.
    ``whole``: every LR of the grid (the noisy families, where a rule's answer far from the best is scored too).

    Why: where one run's final loss varies by tens of percent from seed to seed (a small validation
    set), the 2-seed grid's L* is itself a draw, and a target 2% above it is a lottery. L* here is the
    seeds' median, what a run at that LR typically ends at: on a bimodal task (a few seeds stuck on
    one hard example) the mean is the outliers'. The untrained model's loss at each of those seeds is
    kept too (``untrained_losses``): the expected target is a share of the learnable loss between them."""
    from benchmarks.corpus import entry
    from benchmarks.harness.report import command, commit

    base = load(name, root=base_root)
    if base is None:
        raise SystemExit(f"no grid for {name}: run python -m benchmarks.corpus_grid --tasks {name} first")
    ks = curve(base)[0]
    best_k = Truth.of(base).best_k
    path = root / f"{name}.json"
    grid = load(name, root=root) or {"task": name, "family": entry(name).family, "steps": entry(name).run_steps,
                                     "around": best_k, "command": command(), "commit": commit(),
                                     "untrained_loss": base["untrained_loss"]}
    if grid["around"] != best_k or grid.get("seeds", seeds) != seeds:
        raise SystemExit(f"{path} holds {grid.get('seeds')} seeds around k={grid['around']}; the grid's best is now "
                         f"k={best_k}, asked for {seeds} seeds: delete it to rerun")
    grid["seeds"] = seeds
    done = {(r["k"], r["seed"]) for r in grid.setdefault("runs", [])}
    task, save, new = entry(name).make(), _saver(path, grid), 0
    lo, hi = (int(ks[0]), int(ks[-1])) if whole else (max(best_k - 1, int(ks[0])), min(best_k + 1, int(ks[-1])))
    while True:
        for k in range(lo, hi + 1):
            new += _run_point(grid, task, k, seeds, done, save)
        have = curve(grid)[0]  # what an earlier run grew counts too
        lo, hi = int(have[0]), int(have[-1])
        odds = best_odds(grid)
        if odds.get(lo, 0.0) >= PLAUSIBLE and lo > ks[0]:
            lo -= 1
        elif odds.get(hi, 0.0) >= PLAUSIBLE and hi < ks[-1]:
            hi += 1
        else:
            break
    t = Truth.of(grid, np.median)
    if len(grid.get("untrained_losses", ())) < seeds:  # the learnable loss's top, at the same seeds as L*
        grid["untrained_losses"] = [untrained_loss(task, s) for s in range(seeds)]
        t = Truth.of(grid, np.median)
    grid["runs"].sort(key=lambda r: (r["k"], r["seed"]))
    save()
    if not quiet:
        print(f"{name}: around the grid's best, {hi - lo + 1} LRs x {seeds} seeds ({new} new runs); best lr "
              f"{t.best_lr:.3g}, L* {t.best:.4f} (2-seed grid: {Truth.of(base).best:.4f}), seeds' quartiles "
              f"{np.percentile(t.at_best, 25):.4f}-{np.percentile(t.at_best, 75):.4f}",
              flush=True)
    return t
