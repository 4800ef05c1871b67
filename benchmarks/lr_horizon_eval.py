"""lr_find for the run the user plans, on the long-horizon tasks (issue 21): horizon rules chosen leave-one-task-out.

For each task of ``benchmarks/lr_horizon.py`` (fresh data every step; grids at 300, 1,000 and 3,000 updates,
and 15,000 for the three cheap tasks) and 5 finder seeds:

1. the rules, offline from cached refinements at one length H (15 and 30 updates with one seed per LR, 60 and
   120 with two): the curve alone ``c * (N / 200) ** -a``; one length ``best(H) * (N / H) ** -a``; two lengths
   ``from_two_lengths(best(H), best(2H), H, N, saturation=a)``; each ``a`` chosen on the other tasks;
2. ``lr_find(task, run_steps=N)`` as a user calls it, every other setting its default (cached): what its
   5% bought, its suggestion, its ratio to the best LR for N, regret, spread and whole cost.

Regret is interpolated over log LR on the grid's seed-mean curve at N; cost is samples over the N-update
run's samples, the sweep included.

    python -m benchmarks.lr_horizon_eval [--seeds 5] [--tasks a,b]   (the finds are cached in data/)
"""

from __future__ import annotations

import argparse
import json
import math
from pathlib import Path
from typing import Any

import numpy as np
import torch

from benchmarks._common import hardware  # noqa: E402
from benchmarks.lr_horizon import TASKS, at, load  # noqa: E402

import tunekit  # noqa: E402
from tunekit.probes.refine_plan import from_two_lengths  # noqa: E402

FINDS = Path(__file__).resolve().parent / "data" / "lr_horizon_finds.json"
SHORT = {15: 1, 30: 1, 60: 2, 120: 2}  # short-run length -> seeds per LR (the cached refinements)
CURVE_AT = 200  # the planned length the curve's rule was chosen for (the lr_rules tasks: 100-400 updates)
ALPHAS = [round(a, 2) for a in np.arange(0.0, 0.61, 0.05)]
SEEDS0 = 100
FIND_DATA = 3000  # lr_find's tasks hold the data of a 3,000-update run (more than its short runs read)
MORE_GRIDS = Path(__file__).resolve().parent / "data" / "lr_horizon_grid_15k.json"  # longer runs, cheap tasks
PAIRS = [("15", "30"), ("30", "60"), ("60", "120")]  # two lengths, H and 2H, from the cached refinements
GAMMAS = [0.5, 0.75, 1.0, 1.5, 2.0]


def finds(name: str, seeds: int, longest: int) -> dict[str, Any]:
    """The curve and the refinements of ``name`` for each finder seed, from the cache or computed (and cached)."""
    cache = json.loads(FINDS.read_text()) if FINDS.is_file() else {}
    record = cache.setdefault(name, {})
    task = None
    for s in range(SEEDS0, SEEDS0 + seeds):
        got = record.setdefault(str(s), {})
        if "curve" not in got:
            task = task or TASKS[name].make(FIND_DATA)
            c = tunekit.lr_find(task, seed=s, refine=False, progress=False)
            got.update(curve=c.suggestion, curve_samples=c.samples)
        for h, k in SHORT.items():
            if str(h) not in got:
                task = task or TASKS[name].make(FIND_DATA)
                r = tunekit.lr_find(task, seed=s, refine_steps=h, refine_seeds=k, run_steps=h, progress=False)
                ref = r.refinement or {}
                got[str(h)] = {"best": ref.get("best_lr"), "samples": ref.get("samples", 0),
                               "bracketed": ref.get("bracketed"), "lrs": ref.get("lrs"), "scores": ref.get("scores")}
                FINDS.write_text(json.dumps(cache, indent=1))
                print(f"  {name} seed {s} H={h}: best {got[str(h)]['best']}", flush=True)
        FINDS.write_text(json.dumps(cache, indent=1))
    return {s: record[str(s)] for s in range(SEEDS0, SEEDS0 + seeds)}


def lens(grid: dict[str, Any], t: str) -> list[int]:
    """The planned lengths with a complete grid for task ``t``."""
    return sorted(int(n) for n, e in grid[t]["lengths"].items() if e.get("complete"))


def default_calls(name: str, seeds: int, lengths: list[int]) -> dict[int, dict[int, Any]]:
    """``lr_find(task, run_steps=N, seed=s)`` as a user calls it, for each planned length: its suggestion,
    samples and short-run stages (cached)."""
    cache = json.loads(FINDS.read_text()) if FINDS.is_file() else {}
    record = cache.setdefault(name + "@default", {})
    task = None
    for n in lengths:
        for s in range(SEEDS0, SEEDS0 + seeds):
            key = f"{n}/{s}"
            if key not in record:
                task = task or TASKS[name].make(FIND_DATA)
                r = tunekit.lr_find(task, seed=s, run_steps=n, progress=False)
                ref = r.refinement
                two = ref.stages if ref is not None and len(ref.stages) > 1 else []  # as cached: both lengths' stages
                stages = [{"best_lr": st.best_lr, "lrs": st.lrs, "scores": st.scores, "samples": st.samples} for st in two]
                record[key] = {"suggestion": r.suggestion, "samples": r.samples, "lengths": r.settings.refine_lengths,
                               "stages": stages, "best_lr": ref.best_lr if ref is not None else None}
                FINDS.write_text(json.dumps(cache, indent=1))
                print(f"  {name} N={n} seed {s}: {r.suggestion}", flush=True)
    return {n: {s: record[f"{n}/{s}"] for s in range(SEEDS0, SEEDS0 + seeds)} for n in lengths}


def regret(entry: dict[str, Any], lr: float | None) -> float:
    if lr is None or not math.isfinite(lr):
        return at(entry, 1e9) / min(entry["mean"]) - 1  # no suggestion: as bad as the grid's top
    return at(entry, lr) / min(entry["mean"]) - 1


def predict(found: dict[str, Any], how: str, n: int, a: float) -> float | None:
    """The LR a rule predicts for an ``n``-update run: the curve's, or the ``how``-update runs' best, carried
    (``how`` "30+60": from the bests at two lengths, ``a`` the saturation exponent)."""
    if "+" in how:
        h1, h2 = how.split("+")
        b1, b2 = found[h1]["best"], found[h2]["best"]
        if b1 is None or b2 is None:
            return b2
        return from_two_lengths(b1, b2, int(h1), n, saturation=a)
    if how == "curve":
        c = found["curve"]
        return None if c is None else c * (n / CURVE_AT) ** -a
    b = found[how]["best"]
    return None if b is None else b * max(1.0, n / int(how)) ** -a


def score(grid: dict[str, Any], runs: dict[str, dict[int, Any]], names: list[str], hows: list[str],
          lengths: list[int], a: float) -> float:  # noqa: D103
    """Mean regret of the rules ``hows`` at exponent ``a`` over ``names``, lengths and seeds."""
    vals = [regret(grid[t]["lengths"][str(n)], predict(f, how, n, a))
            for t in names for f in runs[t].values() for how in hows for n in lens(grid, t)]
    return float(np.mean(vals))


def loto(grid: dict[str, Any], runs: dict[str, dict[int, Any]], names: list[str], hows: list[str],
         lengths: list[int], grid_of: list[float] | None = None) -> dict[str, float]:
    """The exponent each task gets when it is held out: the best on the other tasks."""
    return {t: min(grid_of or ALPHAS, key=lambda a: score(grid, runs, [o for o in names if o != t], hows, lengths, a))
            for t in names}


KINDS = {"curve": (["curve"], None), "one length": ([str(h) for h in SHORT], None),
         "two lengths": (["+".join(p) for p in PAIRS], GAMMAS)}


def rules_report(grid: dict[str, Any], runs: dict[str, dict[int, Any]], names: list[str], lengths: list[int]) -> None:
    """Each way of carrying the short runs to the planned length, its exponent chosen leave-one-task-out."""
    chosen = {k: loto(grid, runs, names, hows, lengths, g) for k, (hows, g) in KINDS.items()}
    for k, (hows, g) in KINDS.items():
        every = min(g or ALPHAS, key=lambda a: score(grid, runs, names, hows, lengths, a))
        print(f"{k}: exponent on all tasks {every}; held out: " + ", ".join(f"{t} {a}" for t, a in chosen[k].items()))
    print(f"\n{'task':16s} {'N':>5s} {'best':>8s} | {'rule':>10s} {'median':>8s} {'x best':>7s} {'regret':>7s} "
          f"{'worst':>7s} {'spread':>6s} {'cost':>7s}")
    rows: dict[tuple[str, int], list[float]] = {}
    for t in names:
        for n in lens(grid, t):
            entry = grid[t]["lengths"][str(n)]
            for k, (hows, _) in KINDS.items():
                for how in hows:
                    lrs = [predict(f, how, n, chosen[k][t]) for f in runs[t].values()]
                    reg = [regret(entry, lr) for lr in lrs]
                    rows.setdefault((how, n), []).append(float(np.mean(reg)))
                    cost = np.mean([f["curve_samples"] + sum(f[h]["samples"] for h in how.split("+") if h != "curve")
                                    for f in runs[t].values()]) / entry["samples"]
                    _row(t, n, entry["best_lr"], how, lrs, reg, cost)
    print("\nheld-out mean regret over tasks (each with the exponent chosen without it), by rule and planned length:")
    for (how, n), vals in rows.items():
        print(f"  {how:7s} N={n:>5d}: mean {100 * np.mean(vals):6.2f}%, worst task {100 * max(vals):6.2f}%")


def _row(t: str, n: int, best: float, label: str, lrs: list[float | None], reg: list[float], cost: float) -> None:
    ok = [lr for lr in lrs if lr is not None]
    med = float(10 ** np.median(np.log10(ok))) if ok else math.nan
    spread = float(np.log10(max(ok) / min(ok))) if ok else math.nan
    print(f"{t:16s} {n:5d} {best:8.3g} | {label:>10s} {med:8.3g} {med / best:7.2f} {100 * np.mean(reg):6.2f}% "
          f"{100 * max(reg):6.2f}% {spread:6.2f} {100 * cost:6.1f}%")


def defaults_report(grid: dict[str, Any], names: list[str], lengths: list[int], seeds: int) -> None:
    """lr_find as a user calls it (``run_steps=N``, every other setting its default): what its plan bought,
    its suggestion against the best for that N, and its whole cost (sweep included) as a share of the run."""
    print(f"\nlr_find(task, run_steps=N) with its defaults (refine_share 5%), {seeds} seeds:")
    print(f"{'task':16s} {'N':>5s} {'best':>8s} | {'short runs':>10s} {'median':>8s} {'x best':>7s} {'regret':>7s} "
          f"{'worst':>7s} {'spread':>6s} {'cost':>7s}")
    table: list[float] = []
    for t in names:
        calls = default_calls(t, seeds, lens(grid, t))
        for n in lens(grid, t):
            entry = grid[t]["lengths"][str(n)]
            got = list(calls[n].values())
            lrs = [c["suggestion"] for c in got]
            reg = [regret(entry, lr) for lr in lrs]
            table.append(float(np.mean(reg)))
            label = "+".join(map(str, got[0]["lengths"] or [])) or "none"
            _row(t, n, entry["best_lr"], label, lrs, reg, float(np.mean([c["samples"] for c in got])) / entry["samples"])
    print(f"mean regret {100 * np.mean(table):.2f}%, worst task-length {100 * max(table):.2f}%")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=5)
    parser.add_argument("--tasks", default=",".join(TASKS))
    a = parser.parse_args()
    torch.set_num_threads(1)
    print(hardware())
    grid = load()["tasks"]
    for t, more in (load(MORE_GRIDS)["tasks"] if MORE_GRIDS.is_file() else {}).items():
        grid.setdefault(t, more)["lengths"].update({n: e for n, e in more["lengths"].items() if e.get("complete")})
    names = [t for t in a.tasks.split(",") if t in grid and len(lens(grid, t)) >= 3]
    lengths = sorted({n for t in names for n in lens(grid, t)})
    runs = {t: finds(t, a.seeds, FIND_DATA) for t in names}
    rules_report(grid, runs, names, lengths)
    defaults_report(grid, names, lengths, a.seeds)


if __name__ == "__main__":
    main()
