"""Score tunekit's LR suggestion rules against the LR benchmark's ground truth (issue 11).

For every task of ``lr_tasks.py`` with a grid in ``benchmarks/data/lr_grid.json``
(see ``lr_grid.py``), five range tests with lr_find's default settings (seeds
100..104; 100 updates from 1e-7 to 10; clipping, accumulation and precision the
task's, as train) are run once and their curves kept in
``benchmarks/data/lr_find_curves.json``. Every rule is applied to the same
curves, and its regret on a task is the mean over the curves of

    (L(suggested LR) - L*) / L*,

L interpolated over log LR on the grid's seed-mean curve (diverged runs count
as the untrained loss; beyond the grid, the edge's value; no suggestion at all
counts as the untrained loss).

``--loto``: leave-one-task-out selection among the candidates (a point of the
curve, ``suggest.ANCHORS``, divided by k in DIVISORS, one k for all or one per
optimizer family): for each task the rule is chosen on the other tasks and only
its regret on the held-out task is the figure. Then the default's spread over
the seeds per task and its regret by lr_find's confidence. ``--repeats R``: the
spread of ``lr_find(task, repeats=R)``. ``--cost``: the finder against the same
number of plain updates, interleaved.

    python -m benchmarks.lr_rules [--tasks a,b] [--refind] [--loto] [--repeats 3] [--cost]
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

from benchmarks._common import hardware  # noqa: E402
from benchmarks.lr_grid import GRID_JSON, curve, load, loss_at, summary  # noqa: E402
from benchmarks.lr_tasks import TASKS  # noqa: E402

import tunekit  # noqa: E402
from tunekit.probes import lr_rules as suggest  # noqa: E402
from tunekit.probes.range_test import TASK_DEFAULT  # noqa: E402

CURVES_JSON = GRID_JSON.parent / "lr_find_curves.json"
FINDER_SEEDS = (100, 101, 102, 103, 104)
Rule = Callable[[suggest.Curve], "float | None"]


# --- range tests (cached) -------------------------------------------------------------------------


def read_cache(path: Path, refind: bool, key: str) -> dict[str, Any]:
    """A cached JSON of calls, {key: {task: runs}, ...}, or an empty one when missing or ``refind``."""
    data: dict[str, Any] = {}
    if path.exists() and not refind:
        with open(path) as f:
            data = json.load(f)
    data.setdefault(key, {})
    return data


def write_cache(path: Path, data: dict[str, Any], settings: str) -> None:
    """Write the cache atomically (a rerun interrupted mid-write keeps the old file), with its settings."""
    data["settings"] = settings
    data["hardware"] = hardware()
    tmp = path.with_suffix(f".tmp{os.getpid()}")
    with open(tmp, "w") as f:
        json.dump(data, f)
    tmp.replace(path)


def curves_path(clip: Any) -> Path:
    if clip is TASK_DEFAULT:
        return CURVES_JSON
    return CURVES_JSON.with_name("lr_find_curves_noclip.json" if clip is None else f"lr_find_curves_clip{clip:g}.json")


def range_tests(names: list[str], refind: bool, clip: Any = TASK_DEFAULT,
                seeds: tuple[int, ...] = FINDER_SEEDS) -> dict[str, list[dict[str, Any]]]:
    """``len(seeds)`` range tests per task with lr_find's defaults (clipping: the task's, as train), cached."""
    path = curves_path(clip)
    data = read_cache(path, refind, "tasks")
    for name in names:
        have = data["tasks"].get(name, [])
        if len(have) >= len(seeds):
            continue
        task = TASKS[name].make()
        runs = []
        for seed in seeds:
            found = tunekit.lr_find(task, seed=seed, device="cpu", clip_grad_norm=clip, refine=False)
            runs.append({"seed": seed, "lrs": found.lrs, "losses": [v if math.isfinite(v) else None for v in found.losses],
                         "suggestion": found.suggestion, "confident": found.confident, "reasons": found.reasons,
                         "family": found.settings.family, "clip_grad_norm": found.settings.clip_grad_norm,
                         "samples": found.samples, "seconds": round(found.seconds, 3)})
        data["tasks"][name] = runs
        picked = ", ".join(f"{r['suggestion']:.3g}" if r["suggestion"] else "None" for r in runs)
        print(f"  range tests of {name}: {picked} ({sum(r['seconds'] for r in runs):.1f}s)", flush=True)
        write_cache(path, data, f"tunekit.lr_find(task, seed=s, device='cpu', clip_grad_norm={clip!r}, refine=False), "
                                f"otherwise its defaults, s in {seeds}")
    return {n: data["tasks"][n][: len(seeds)] for n in names}


def curves_of(runs: list[dict[str, Any]]) -> list[suggest.Curve]:
    return [suggest.prepare(r["lrs"], [math.nan if v is None else v for v in r["losses"]], family=r.get("family"))
            for r in runs]


# --- candidate rules -------------------------------------------------------------------------------
# A small family: a point of the curve (suggest.ANCHORS) divided by k, k one of DIVISORS, either one k
# for every task or one per optimizer family (sgd / adaptive, from lr_find's settings["family"]).

DIVISORS = (1, 1.5, 2, 3, 5, 10)
FAMILIES = ("sgd", "adaptive")


def candidates() -> dict[str, Rule]:
    return {f"{a}/{k:g}": suggest.divided(a, k) for a in suggest.ANCHORS for k in DIVISORS}


def family_of(name: str, tests: dict[str, list[dict[str, Any]]]) -> str:
    return str(tests[name][0].get("family") or ("sgd" if TASKS[name].optimizer.startswith("sgd") else "adaptive"))


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
    k = len(tests[names[0]])
    lines = [f"regret (L(suggested) - L*) / L* per rule, mean over {k} range tests (lower is better; in-sample for "
             "the default, whose rule was chosen on these tasks: --loto has the held-out figure);",
             f"'default' is the median over the {k} range tests of the default rule's LR, 'spread' their log10(max/min),",
             f"'conf' how many of the {k} range tests lr_find called confident", "", head, "-" * len(head)]
    for n in names:
        s = summary(grid["tasks"][n])
        dl = [x for x in picks[d][n] if x]
        med = float(10 ** np.median(np.log10(dl))) if dl else math.nan
        ratio = math.log10(med / s["best_lr"]) if dl else math.nan
        conf = sum(bool(suggest.assess(c).confident) for c in curves_of(tests[n]))
        lines.append(f"{n:<20}{s['best_lr']:>9.3g}{med:>10.3g}{ratio:>+13.2f}{spread(picks[d][n]):>8.2f}{conf:>4}/{k}"
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


def loto_select(names: list[str], regret: dict[str, dict[str, float]], tests: dict[str, list[dict[str, Any]]],
                held: str) -> tuple[str, str | None, dict[str, float] | None]:
    """The rule chosen on every task but ``held``: (anchor, one-k candidate name or None, per-family k or None).

    Two kinds compete: "anchor/k" with one k, and "anchor/k(family)" with k chosen per optimizer family on
    the other tasks of that family; the one with the lower mean regret over the other tasks wins."""
    others = [m for m in names if m != held]

    def mean(rule: str, tasks: list[str]) -> float:
        return float(np.mean([regret[rule][m] for m in tasks]))

    one = min(regret, key=lambda r: mean(r, others))
    best_fam: tuple[float, str, dict[str, float]] | None = None
    for a in suggest.ANCHORS:
        ks: dict[str, float] = {}
        for fam in FAMILIES:
            same = [m for m in others if family_of(m, tests) == fam] or others
            ks[fam] = min(DIVISORS, key=lambda k: mean(f"{a}/{k:g}", same))
        score = float(np.mean([regret[f"{a}/{ks[family_of(m, tests)]:g}"][m] for m in others]))
        if best_fam is None or score < best_fam[0]:
            best_fam = (score, a, ks)
    assert best_fam is not None
    if mean(one, others) <= best_fam[0]:
        return one.split("/")[0], one, None
    return best_fam[1], None, best_fam[2]


def spec_name(anchor: str, one: str | None, ks: dict[str, float] | None) -> str:
    return one if one is not None else f"{anchor}/(" + ",".join(f"{f} {k:g}" for f, k in (ks or {}).items()) + ")"


def loto_table(names: list[str], grid: dict[str, Any], tests: dict[str, list[dict[str, Any]]]) -> tuple[str, dict[str, float]]:
    """The held-out table, and each task's held-out regret."""
    rules = candidates()
    regret, _ = regrets_of(rules, names, grid, tests)
    head = f"{'held-out task':<20}{'family':>9}{'rule chosen on the other 11':>30}{'held-out regret':>17}{'old default':>12}"
    lines = [f"leave-one-task-out selection among {len(rules)} one-k rules (anchor/k, anchors "
             f"{', '.join(suggest.ANCHORS)}; k in {', '.join(f'{k:g}' for k in DIVISORS)}) and "
             f"{len(suggest.ANCHORS)} per-family rules (anchor/k(family), k chosen per optimizer family);",
             "each task's figure is the regret of the rule chosen without it (mean over its range tests)", "",
             head, "-" * len(head)]
    old_rules = {"old": suggest.geometric_steepest_min}
    old, _ = regrets_of(old_rules, names, grid, tests)
    held, picks = [], []
    for n in names:
        anchor, one, ks = loto_select(names, regret, tests, n)
        if one is not None:
            r = regret[one][n]
        else:
            assert ks is not None
            r = regret[f"{anchor}/{ks[family_of(n, tests)]:g}"][n]
        held.append(r)
        picks.append(spec_name(anchor, one, ks))
        lines.append(f"{n:<20}{family_of(n, tests):>9}{picks[-1]:>30}{r:>17.3f}{old['old'][n]:>12.3f}")
    lines.append("-" * len(head))
    lines.append(f"{'mean':<59}{np.mean(held):>17.3f}{np.mean([old['old'][n] for n in names]):>12.3f}")
    lines.append(f"{'worst':<59}{max(held):>17.3f}{max(old['old'][n] for n in names):>12.3f}")
    lines.append(f"{'median':<59}{np.median(held):>17.3f}")
    counts = {p: picks.count(p) for p in dict.fromkeys(picks)}
    lines.append("chosen: " + ", ".join(f"{p} x{c}" for p, c in sorted(counts.items(), key=lambda t: -t[1])))
    lines.append("")
    lines.append("in-sample mean regret of the best one-k candidates (for reference; not a held-out number):")
    for r in sorted(rules, key=lambda r: np.mean([regret[r][m] for m in names]))[:8]:
        lines.append(f"  {r:<14}{np.mean([regret[r][m] for m in names]):.3f}  worst {max(regret[r][m] for m in names):.3f}")
    return "\n".join(lines), dict(zip(names, held))


def stability_and_confidence(names: list[str], grid: dict[str, Any], tests: dict[str, list[dict[str, Any]]]) -> str:
    """The default's spread over the range tests per task, and its regret by lr_find's confidence."""
    rule = suggest.RULES[suggest.DEFAULT_RULE]
    rows, points = [], []  # points: (confidence, confident, regret) per range test
    for n in names:
        entry = grid["tasks"][n]
        _, log_lrs, mean = curve(entry)
        best = float(mean.min())
        lrs, regs = [], []
        for c in curves_of(tests[n]):
            lr = rule(c) if len(c.lrs) >= 3 else None
            a = suggest.assess(c)
            reg = (loss_at(lr, log_lrs, mean, entry["untrained_loss"]) - best) / best
            lrs.append(lr)
            regs.append(reg)
            points.append((a.confidence, a.confident and lr is not None, reg))
        rows.append((n, lrs, spread(lrs), regs))
    k = len(tests[names[0]])
    head = f"{'task':<20}{'spread':>8}  " + "".join(f"{'seed ' + str(r['seed']):>11}" for r in tests[names[0]])
    lines = [f"default rule ({suggest.DEFAULT_RULE}: {suggest.DEFAULT_SPEC[0]}/{suggest.DEFAULT_SPEC[1]}) over {k} "
             "range-test seeds: its LR per seed, spread = log10(max/min) in decades", "", head, "-" * len(head)]
    for n, lrs, sp, _ in rows:
        lines.append(f"{n:<20}{sp:>8.2f}  " + "".join(f"{('none' if x is None else f'{x:.3g}'):>11}" for x in lrs))
    sps = [sp for _, _, sp, _ in rows]
    lines.append("-" * len(head))
    lines.append(f"spread: median {np.nanmedian(sps):.2f}, mean {np.nanmean(sps):.2f}, max {np.nanmax(sps):.2f} decades "
                 f"(target: median <= 0.15)")
    lines += ["", f"regret of the default by lr_find's confidence ({len(points)} range tests, {k} per task):",
              f"{'bucket':<34}{'tests':>6}{'mean regret':>13}{'median':>8}{'worst':>8}"]
    conf = np.array([p[0] for p in points])
    flag = np.array([p[1] for p in points])
    reg = np.array([p[2] for p in points])
    t1, t2 = np.quantile(conf, [1 / 3, 2 / 3])
    buckets = [("confident", flag), ("not confident", ~flag),
               (f"confidence <= {t1:.2f} (low third)", conf <= t1),
               (f"{t1:.2f} < confidence <= {t2:.2f}", (conf > t1) & (conf <= t2)),
               (f"confidence > {t2:.2f} (high third)", conf > t2)]
    for label, m in buckets:
        if m.any():
            lines.append(f"{label:<34}{int(m.sum()):>6}{reg[m].mean():>13.3f}{np.median(reg[m]):>8.3f}{reg[m].max():>8.3f}")
        else:
            lines.append(f"{label:<34}{0:>6}")
    return "\n".join(lines)


def repeats_table(names: list[str], grid: dict[str, Any], refind: bool, repeats: int) -> str:
    """What a user gets from lr_find(task, repeats=R): its suggestion (the median over the repeats) for 5 seeds.

    Seeds 100, 100 + R, ...: each call's repeats draw seeds s .. s + R - 1, none shared between calls."""
    path = CURVES_JSON.with_name(f"lr_find_repeats{repeats}.json")
    data = read_cache(path, refind, "tasks")
    seeds = [FINDER_SEEDS[0] + repeats * i for i in range(len(FINDER_SEEDS))]
    for n in names:
        if len(data["tasks"].get(n, [])) >= len(seeds):
            continue
        task = TASKS[n].make()
        data["tasks"][n] = []
        for s in seeds:
            r = tunekit.lr_find(task, seed=s, device="cpu", repeats=repeats, refine=False)
            data["tasks"][n].append({"seed": s, "suggestion": r.suggestion, "confident": r.confident,
                                     "confidence": r.confidence, "samples": r.samples, "seconds": round(r.seconds, 3)})
        write_cache(path, data, f"tunekit.lr_find(task, seed=s, device='cpu', repeats={repeats}, refine=False), "
                                f"s in {seeds}")
    head = f"{'task':<20}{'spread':>8}{'regret':>8}{'samples/call':>14}  " + "".join(f"{'seed ' + str(s):>11}" for s in seeds)
    lines = [f"lr_find(task, repeats={repeats}): the default suggestion (median over the {repeats} repeats) for "
             f"{len(seeds)} seeds; spread = log10(max/min) in decades, regret the mean over the seeds", "",
             head, "-" * len(head)]
    sps, regs = [], []
    for n in names:
        entry = grid["tasks"][n]
        _, log_lrs, mean = curve(entry)
        best = float(mean.min())
        runs = data["tasks"][n]
        lrs = [r["suggestion"] for r in runs]
        reg = float(np.mean([(loss_at(lr, log_lrs, mean, entry["untrained_loss"]) - best) / best for lr in lrs]))
        sps.append(spread(lrs))
        regs.append(reg)
        lines.append(f"{n:<20}{sps[-1]:>8.2f}{reg:>8.3f}{np.mean([r['samples'] for r in runs]):>14.0f}  "
                     + "".join(f"{('none' if x is None else f'{x:.3g}'):>11}" for x in lrs))
    lines.append("-" * len(head))
    lines.append(f"spread: median {np.nanmedian(sps):.2f}, mean {np.nanmean(sps):.2f}, max {np.nanmax(sps):.2f} decades; "
                 f"regret (in-sample rule) mean {np.mean(regs):.3f}, worst {max(regs):.3f}")
    return "\n".join(lines)


# The candidates (refine_steps, refine_seeds), chosen leave-one-task-out (50 updates lost on every task set).
REFINE_CONFIGS = {"100": (100, 1), "200": (200, 1), "100x2": (100, 2)}
SPREAD_TARGET = 0.15  # decades, the bound on the median task's spread over seeds


def refined_path(key: str) -> Path:
    return CURVES_JSON.with_name(f"lr_find_refined_H{key}.json")


def refined_runs(names: list[str], refind: bool, only: str | None = None) -> dict[str, dict[str, list[dict[str, Any]]]]:
    """lr_find(task, seed=s, refine_steps=H, refine_seeds=S) for the finder seeds and each candidate (or
    ``only``), cached per candidate: {key: {task: runs}}."""
    out: dict[str, Any] = {}
    for h in REFINE_CONFIGS if only is None else (only,):
        path = refined_path(h)
        steps, seeds = REFINE_CONFIGS[h]
        data = read_cache(path, refind, "runs")
        for n in names:
            if len(data["runs"].get(n, [])) >= len(FINDER_SEEDS):
                continue
            task = TASKS[n].make()
            data["runs"][n] = []
            for seed in FINDER_SEEDS:
                r = tunekit.lr_find(task, seed=seed, device="cpu", refine_steps=steps, refine_seeds=seeds)
                data["runs"][n].append({"seed": seed, "suggestion": r.suggestion, "confident": r.confident,
                                        "confidence": r.confidence,
                                        "curve_suggestion": (r.refinement or {}).get("curve_suggestion"),
                                        "refinement": r.refinement, "samples": r.samples, "seconds": round(r.seconds, 3)})
            print(f"  refined (H={h}) {n}: " + ", ".join("none" if x["suggestion"] is None else f"{x['suggestion']:.3g}"
                                                       for x in data["runs"][n]), flush=True)
            write_cache(path, data, f"tunekit.lr_find(task, seed=s, device='cpu', refine_steps={steps}, "
                                    f"refine_seeds={seeds}), s in {FINDER_SEEDS}")
        out[h] = data["runs"]
    return out


def refined_table(names: list[str], grid: dict[str, Any], refind: bool) -> str:
    """The refined suggestion: per task its regret (H chosen on the other tasks), spread, cost; confidence buckets."""
    runs = refined_runs(names, refind)
    regret: dict[str, dict[str, float]] = {}
    for h in REFINE_CONFIGS:
        regret[h] = {}
        for n in names:
            entry = grid["tasks"][n]
            _, log_lrs, mean = curve(entry)
            best = float(mean.min())
            regret[h][n] = float(np.mean([(loss_at(r["suggestion"], log_lrs, mean, entry["untrained_loss"]) - best) / best
                                          for r in runs[h][n]]))
    spreads_of = {k: {n: spread([r["suggestion"] for r in runs[k][n]]) for n in names} for k in REFINE_CONFIGS}
    head = (f"{'held-out task':<20}{'H chosen':>9}{'best lr':>9}{'refined':>9}{'spread':>8}{'regret':>8}"
            f"{'curve only':>11}{'samples':>9}{'x sweep':>8}")
    lines = ["lr_find(task) refined by short warmup + cosine runs (the default): refine_steps H (x refine_seeds) chosen "
             f"among {', '.join(REFINE_CONFIGS)} on the other 11 tasks (the lowest mean regret among those whose median "
             f"spread there is <= {SPREAD_TARGET} decades), its regret on the held-out one (mean over {len(FINDER_SEEDS)} "
             "seeds); 'curve only' is the held-out regret of the curve's rule (--loto), 'x sweep' the samples "
             "against the 100-update sweep alone", "", head, "-" * len(head)]
    held, spreads, points = [], [], []
    curve_only = loto_table(names, grid, range_tests(names, False))[1]
    for n in names:
        others = [m for m in names if m != n]
        # The figures are constraints: among the candidates stable enough on the other tasks
        # (median spread over seeds <= 0.15 decades), the lowest mean regret on them; none stable, all.
        stable = [k for k in regret if np.nanmedian([spreads_of[k][m] for m in others]) <= SPREAD_TARGET] or list(regret)
        h = min(stable, key=lambda k: (np.mean([regret[k][m] for m in others]), list(REFINE_CONFIGS).index(k)))
        lrs = [r["suggestion"] for r in runs[h][n]]
        s = summary(grid["tasks"][n])
        med = float(10 ** np.median(np.log10([x for x in lrs if x]))) if any(lrs) else math.nan
        sweep = TASKS[n].batch * 100
        samples = float(np.mean([r["samples"] for r in runs[h][n]]))
        held.append(regret[h][n])
        spreads.append(spread(lrs))
        entry = grid["tasks"][n]
        _, log_lrs, mean = curve(entry)
        best = float(mean.min())
        for r in runs[h][n]:
            points.append((r["confidence"], r["confident"] and r["suggestion"] is not None,
                           (loss_at(r["suggestion"], log_lrs, mean, entry["untrained_loss"]) - best) / best))
        lines.append(f"{n:<20}{h:>9}{s['best_lr']:>9.3g}{med:>9.3g}{spreads[-1]:>8.2f}{held[-1]:>8.3f}"
                     f"{curve_only.get(n, math.nan):>11.3f}{samples:>9.0f}{samples / sweep:>8.1f}")
    lines.append("-" * len(head))
    lines.append(f"held-out regret: mean {np.mean(held):.3f}, worst {max(held):.3f} (targets: mean <= 0.03, worst <= 0.10); "
                 f"spread over seeds: median {np.nanmedian(spreads):.2f} decades (target <= 0.15)")
    for h in REFINE_CONFIGS:
        lines.append(f"  in-sample with H={h}: mean {np.mean(list(regret[h].values())):.3f}, "
                     f"worst {max(regret[h].values()):.3f}, median spread {np.nanmedian(list(spreads_of[h].values())):.2f}")
    flag = np.array([p[1] for p in points])
    reg = np.array([p[2] for p in points])
    lines += ["", f"regret of the refined suggestion by its confidence ({len(points)} calls):",
              f"{'bucket':<20}{'calls':>6}{'mean regret':>13}{'median':>8}{'worst':>8}"]
    for label, m in (("confident", flag), ("not confident", ~flag)):
        if m.any():
            lines.append(f"{label:<20}{int(m.sum()):>6}{reg[m].mean():>13.3f}{np.median(reg[m]):>8.3f}{reg[m].max():>8.3f}")
    return "\n".join(lines)


COST_TASKS = ("mlp_huber_sgdm", "mlp_bce_adam", "head_cnn_adam", "lstm_charlm_adam")


def cost_table(rounds: int = 7) -> str:
    """lr_find(task) against the same number of plain updates of the shared step, interleaved in one run.

    The plain side builds what a user would to train that many updates: a fresh model and optimizer, a
    TrainStep (clipped at 1.0, like the finder's default) and a BatchStream, at a constant LR. Both sides
    are timed whole, so lr_find's fixed per-call costs (state snapshot and restore, seeding, the rules)
    count. The ratio is of the medians over ``rounds`` alternating pairs, after one warm-up pair."""
    from tunekit.inputs.data import BatchStream
    from tunekit.training.step import TrainStep, Updates, resolve_device

    dev = resolve_device("cpu")
    lines = [f"cost: lr_find(task) vs the same number of plain TrainStep updates, interleaved, median of {rounds} "
             "pairs (1 thread, on one core of its own)", "",
             f"{'task':<20}{'updates':>8}{'lr_find s':>11}{'plain s':>9}{'ratio':>7}"]
    ratios = []
    for n in COST_TASKS:
        task = TASKS[n].make()
        found = tunekit.lr_find(task, seed=0, device="cpu")
        # Every update it ran, the refinement's short runs included (their scoring passes are overhead).
        updates = found.samples // task.batch_size

        def finder() -> float:
            t = time.perf_counter()
            tunekit.lr_find(task, seed=0, device="cpu")
            return time.perf_counter() - t

        def plain() -> float:
            t = time.perf_counter()
            model = task.make_model(0).to(dev)
            model.train()
            step = TrainStep(model, task.make_optimizer(model), task.loss_computer(), device=dev, precision="fp32",
                             clip_grad_norm=1.0)
            for _ in Updates(step, BatchStream(task.train_data, task.batch_size, seed=0), [1e-4] * updates):
                pass
            return time.perf_counter() - t

        finder(), plain()  # warm-up
        a, b = [], []
        for i in range(rounds):
            if i % 2:
                b.append(plain())
                a.append(finder())
            else:
                a.append(finder())
                b.append(plain())
        ratios.append(float(np.median(a) / np.median(b)))
        lines.append(f"{n:<20}{updates:>8}{np.median(a):>11.3f}{np.median(b):>9.3f}{ratios[-1]:>7.2f}")
    lines.append(f"cost ratio: max {max(ratios):.2f}, median {np.median(ratios):.2f} (target <= 1.15)")
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tasks", default=None, help="comma-separated task names (default: all with a grid)")
    ap.add_argument("--refind", action="store_true", help="rerun the range tests instead of reading the cached curves")
    ap.add_argument("--loto", action="store_true", help="also leave-one-task-out rule selection")
    ap.add_argument("--finder-clip", default="task",
                    help="run the range tests with clip_grad_norm=X, or 'none' (default 'task': lr_find's default, "
                         "the task's clipping as in train); their curves go to lr_find_curves_clipX.json / _noclip")
    ap.add_argument("--repeats", type=int, default=0,
                    help="also the spread of lr_find(task, repeats=R)'s suggestion over 5 seeds (cached)")
    ap.add_argument("--refined", action="store_true",
                    help="also the refined suggestion (lr_find's default): held-out regret, spread, cost (cached)")
    ap.add_argument("--refine-only", choices=list(REFINE_CONFIGS), default=None,
                    help="only run (and cache) the refined range tests with refine_steps=H, for a second process")
    ap.add_argument("--cost", action="store_true", help="only the interleaved cost of lr_find against plain updates")
    ap.add_argument("--threads", type=int, default=1)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    grid = load()
    names = args.tasks.split(",") if args.tasks else [n for n in TASKS if grid["tasks"].get(n, {}).get("runs")]
    missing = [n for n in names if not grid["tasks"].get(n, {}).get("runs")]
    if missing:
        sys.exit(f"no grid for {', '.join(missing)}: run python -m benchmarks.lr_grid --tasks {','.join(missing)}")
    print(f"hardware: {hardware()}", flush=True)
    if args.cost:
        print(cost_table())
        return
    if args.refine_only is not None:
        refined_runs(names, args.refind, only=args.refine_only)
        return
    start = time.perf_counter()
    clip = TASK_DEFAULT if args.finder_clip == "task" else None if args.finder_clip == "none" else float(args.finder_clip)
    tests = range_tests(names, args.refind, clip)
    if clip is not TASK_DEFAULT:
        print(f"range tests with clip_grad_norm={clip} (lr_find's default is the task's, as train)")
    print(f"range tests ready in {time.perf_counter() - start:.0f}s\n")
    print(before_table(names, grid, tests))
    if args.loto:
        print()
        print(loto_table(names, grid, tests)[0])
    print()
    print(stability_and_confidence(names, grid, tests))
    if args.repeats > 1:
        print()
        print(repeats_table(names, grid, args.refind, args.repeats))
    if args.refined:
        print()
        print(refined_table(names, grid, args.refind))


if __name__ == "__main__":
    main()
