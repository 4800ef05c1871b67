"""Score tunekit's LR suggestion rules against the LR benchmark's ground truth (issue 11).

For every task of ``lr_tasks.py`` with a grid in ``benchmarks/data/lr_grid.json``
(see ``lr_grid.py``), three range tests with lr_find's default settings (seeds
100, 101, 102; 100 updates from 1e-7 to 10) are run once and their curves kept
in ``benchmarks/data/lr_find_curves.json``. Every rule of
``tunekit.suggest.RULES`` is applied to the same curves, and its regret on a
task is the mean over the three curves of

    (L(suggested LR) - L*) / L*,

L interpolated over log LR on the grid's seed-mean curve (diverged runs count
as the untrained loss; beyond the grid, the edge's value; no suggestion at all
counts as the untrained loss). Also printed: the default suggestion over the
best grid LR (log10), and its spread over the three range tests in decades,
log10(max / min).

With ``--loto``, leave-one-task-out selection among candidate rules: for each
task, the candidate with the lowest mean regret on the *other* tasks is picked
and its regret on the held-out task is reported (and likewise for a divisor of
the smoothed minimum chosen per optimizer kind, adaptive or SGD, on the other
tasks of that kind).

    python benchmarks/lr_rules.py [--tasks a,b] [--refind] [--loto]
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import hardware  # noqa: E402
from lr_grid import GRID_JSON, curve, load, loss_at, summary  # noqa: E402
from lr_tasks import TASKS  # noqa: E402

import tunekit  # noqa: E402
from tunekit import suggest  # noqa: E402

CURVES_JSON = GRID_JSON.parent / "lr_find_curves.json"
FINDER_SEEDS = (100, 101, 102)
Rule = Callable[[suggest.Curve], "float | None"]


# --- range tests (cached) -------------------------------------------------------------------------


def curves_path(clip: float | None) -> Path:
    return CURVES_JSON if clip is None else CURVES_JSON.with_name(f"lr_find_curves_clip{clip:g}.json")


def range_tests(names: list[str], refind: bool, clip: float | None = None) -> dict[str, list[dict[str, Any]]]:
    data: dict[str, Any] = {}
    path = curves_path(clip)
    if path.exists() and not refind:
        with open(path) as f:
            data = json.load(f)
    data.setdefault("tasks", {})
    for name in names:
        have = data["tasks"].get(name, [])
        if len(have) == len(FINDER_SEEDS):
            continue
        task = TASKS[name].make()
        runs = []
        for seed in FINDER_SEEDS:
            found = tunekit.lr_find(task, seed=seed, device="cpu", clip_grad_norm=clip)
            runs.append({"seed": seed, "lrs": found.lrs, "losses": [v if math.isfinite(v) else None for v in found.losses],
                         "suggestion": found.suggestion, "confident": found.confident, "reasons": found.reasons,
                         "seconds": round(found.seconds, 3)})
        data["tasks"][name] = runs
        picked = ", ".join(f"{r['suggestion']:.3g}" if r["suggestion"] else "None" for r in runs)
        print(f"  range tests of {name}: {picked} ({sum(r['seconds'] for r in runs):.1f}s)", flush=True)
        data["settings"] = (f"tunekit.lr_find(task, seed=s, device='cpu', clip_grad_norm={clip}), otherwise its defaults, "
                            f"s in {FINDER_SEEDS}")
        data["hardware"] = hardware()
        tmp = path.with_suffix(f".tmp{os.getpid()}")
        with open(tmp, "w") as f:
            json.dump(data, f)
        tmp.replace(path)
    return {n: data["tasks"][n] for n in names}


def curves_of(runs: list[dict[str, Any]]) -> list[suggest.Curve]:
    return [suggest.prepare(r["lrs"], [math.nan if v is None else v for v in r["losses"]]) for r in runs]


# --- candidate rules -------------------------------------------------------------------------------


def min_div(k: float) -> Rule:
    def rule(c: suggest.Curve) -> float | None:
        return float(c.lrs[int(np.argmin(c.smooth))] / k) if len(c.smooth) > 1 else None
    return rule


def scaled(rule: Rule, factor: float) -> Rule:
    def scaled_rule(c: suggest.Curve) -> float | None:
        lr = rule(c)
        return None if lr is None else lr * factor
    return scaled_rule


def candidates() -> dict[str, Rule]:
    out: dict[str, Rule] = dict(suggest.RULES)
    for k in (2, 3, 5, 20, 30):
        out[f"min/{k}"] = min_div(k)
    for f in (0.3, 0.5, 2.0, 3.0):
        out[f"tunekit*{f:g}"] = scaled(suggest.tunekit_rule, f)
    for f in (2.0, 3.0, 5.0):
        out[f"steepest*{f:g}"] = scaled(suggest.steepest, f)
    return out


def kind(name: str) -> str:
    return "sgd" if TASKS[name].optimizer.startswith("sgd") else "adaptive"


# --- scoring ----------------------------------------------------------------------------------------


def regrets_of(rules: dict[str, Rule], names: list[str], grid: dict[str, Any],
               tests: dict[str, list[dict[str, Any]]], normalized: bool = False,
               ) -> tuple[dict[str, dict[str, float]], dict[str, dict[str, list]]]:
    """regret[rule][task] (mean over range tests), and the LRs each rule picked.

    ``normalized``: (L - L*) / (L0 - L*) instead, the share of what training can gain that the LR loses."""
    regret: dict[str, dict[str, float]] = {r: {} for r in rules}
    picks: dict[str, dict[str, list]] = {r: {} for r in rules}
    for name in names:
        entry = grid["tasks"][name]
        _, log_lrs, mean = curve(entry)
        best = float(mean.min())
        scale = entry["untrained_loss"] - best if normalized else best
        cs = curves_of(tests[name])
        for r, rule in rules.items():
            lrs = [rule(c) if len(c.lrs) >= 3 else None for c in cs]
            picks[r][name] = lrs
            regret[r][name] = float(np.mean([(loss_at(lr, log_lrs, mean, entry["untrained_loss"]) - best) / scale
                                             for lr in lrs]))
    return regret, picks


def spread(lrs: list[float | None]) -> float:
    v = [x for x in lrs if x]
    return float(math.log10(max(v) / min(v))) if len(v) >= 2 else math.nan


def before_table(names: list[str], grid: dict[str, Any], tests: dict[str, list[dict[str, Any]]]) -> str:
    rules = dict(suggest.RULES)
    regret, picks = regrets_of(rules, names, grid, tests)
    d = suggest.DEFAULT_RULE
    cols = list(rules)
    head = (f"{'task':<20}{'best lr':>9}{'default':>10}{'log10 d/best':>13}{'spread':>8}{'conf':>6}"
            + "".join(f"{c:>10}" for c in cols))
    lines = ["regret (L(suggested) - L*) / L* per rule, mean over 3 range tests (lower is better);",
             "'default' is the median over the 3 range tests of the default rule's LR, 'spread' their log10(max/min),",
             "'conf' how many of the 3 range tests lr_find called confident", "", head, "-" * len(head)]
    for n in names:
        s = summary(grid["tasks"][n])
        dl = [x for x in picks[d][n] if x]
        med = float(10 ** np.median(np.log10(dl))) if dl else math.nan
        ratio = math.log10(med / s["best_lr"]) if dl else math.nan
        conf = sum(bool(r["confident"]) for r in tests[n])
        lines.append(f"{n:<20}{s['best_lr']:>9.3g}{med:>10.3g}{ratio:>+13.2f}{spread(picks[d][n]):>8.2f}{conf:>4}/3"
                     + "".join(f"{regret[c][n]:>10.3f}" for c in cols))
    lines.append("-" * len(head))
    lines.append(f"{'mean':<20}{'':>46}" + "".join(f"{np.mean([regret[c][n] for n in names]):>10.3f}" for c in cols))
    lines.append(f"{'worst':<20}{'':>46}" + "".join(f"{max(regret[c][n] for n in names):>10.3f}" for c in cols))
    worst_task = {c: max(names, key=lambda n: regret[c][n]) for c in cols}
    lines.append("worst task: " + ", ".join(f"{c} {worst_task[c]}" for c in cols))
    spreads = [spread(picks[d][n]) for n in names]
    lines.append(f"default ({d}) suggestion spread over range tests: mean {np.nanmean(spreads):.2f}, "
                 f"max {np.nanmax(spreads):.2f} decades")
    norm, _ = regrets_of(rules, names, grid, tests, normalized=True)
    lines += ["", "the same, normalized: (L(suggested) - L*) / (L0 - L*), L0 the untrained loss "
              "(the share of what training gains that the suggested LR loses; 1 = no better than untrained)",
              f"{'task':<20}" + "".join(f"{c:>10}" for c in cols)]
    lines += [f"{n:<20}" + "".join(f"{norm[c][n]:>10.3f}" for c in cols) for n in names]
    lines.append(f"{'mean':<20}" + "".join(f"{np.mean([norm[c][n] for n in names]):>10.3f}" for c in cols))
    lines.append(f"{'worst':<20}" + "".join(f"{max(norm[c][n] for n in names):>10.3f}" for c in cols))
    return "\n".join(lines)


def loto_table(names: list[str], grid: dict[str, Any], tests: dict[str, list[dict[str, Any]]]) -> str:
    rules = candidates()
    regret, _ = regrets_of(rules, names, grid, tests)
    divisors = (1, 2, 3, 5, 10, 20, 30)
    div_rules = {k: min_div(k) for k in divisors}
    div_regret, _ = regrets_of({f"min/{k}": r for k, r in div_rules.items()}, names, grid, tests)
    lines = [f"leave-one-task-out selection among {len(rules)} candidate rules: " + ", ".join(rules), "",
             f"{'held-out task':<20}{'picked (on the others)':>24}{'held-out regret':>17}{'default':>9}"
             f"{'per-kind min/k':>16}{'regret':>8}"]
    held, held_kind, default = [], [], []
    for n in names:
        others = [m for m in names if m != n]
        pick = min(rules, key=lambda r: np.mean([regret[r][m] for m in others]))
        same = [m for m in others if kind(m) == kind(n)] or others
        kpick = min(divisors, key=lambda k: np.mean([div_regret[f"min/{k}"][m] for m in same]))
        held.append(regret[pick][n])
        held_kind.append(div_regret[f"min/{kpick}"][n])
        default.append(regret[suggest.DEFAULT_RULE][n])
        lines.append(f"{n:<20}{pick:>24}{held[-1]:>17.3f}{default[-1]:>9.3f}{f'{kind(n)} min/{kpick}':>16}"
                     f"{held_kind[-1]:>8.3f}")
    lines.append(f"{'mean':<20}{'':>24}{np.mean(held):>17.3f}{np.mean(default):>9.3f}{'':>16}{np.mean(held_kind):>8.3f}")
    lines.append(f"{'worst':<20}{'':>24}{max(held):>17.3f}{max(default):>9.3f}{'':>16}{max(held_kind):>8.3f}")
    lines.append("")
    lines.append("in-sample mean regret of every candidate (for reference; not a held-out number):")
    for r in sorted(rules, key=lambda r: np.mean([regret[r][m] for m in names])):
        lines.append(f"  {r:<14}{np.mean([regret[r][m] for m in names]):.3f}  worst {max(regret[r][m] for m in names):.3f}")
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tasks", default=None, help="comma-separated task names (default: all with a grid)")
    ap.add_argument("--refind", action="store_true", help="rerun the range tests instead of reading the cached curves")
    ap.add_argument("--loto", action="store_true", help="also leave-one-task-out rule selection")
    ap.add_argument("--finder-clip", type=float, default=None,
                    help="run the range tests with clip_grad_norm=X (default: lr_find's default, no clipping); "
                         "their curves go to lr_find_curves_clipX.json")
    ap.add_argument("--threads", type=int, default=1)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    grid = load()
    names = args.tasks.split(",") if args.tasks else [n for n in TASKS if grid["tasks"].get(n, {}).get("runs")]
    missing = [n for n in names if not grid["tasks"].get(n, {}).get("runs")]
    if missing:
        sys.exit(f"no grid for {', '.join(missing)}: run python benchmarks/lr_grid.py --tasks {','.join(missing)}")
    print(f"hardware: {hardware()}", flush=True)
    start = time.perf_counter()
    tests = range_tests(names, args.refind, args.finder_clip)
    if args.finder_clip is not None:
        print(f"range tests with clip_grad_norm={args.finder_clip:g} (lr_find's default is no clipping)")
    print(f"range tests ready in {time.perf_counter() - start:.0f}s\n")
    print(before_table(names, grid, tests))
    if args.loto:
        print()
        print(loto_table(names, grid, tests))


if __name__ == "__main__":
    main()
