"""The carry from short runs to the planned run, chosen leave-one-family-out on the corpus.

Reads the short-run records of ``benchmarks/corpus_refine.py`` (the range test, then short runs at
half decades around its suggestion, at several lengths H) and replays the refinement as lr_find
would run it under its budget of short runs (at most ``BUDGET // H`` of them: the
first three, the bracket's extensions, then the polish, in lr_find's order). A rule is the short
runs' length H and how their best carries to the planned run: a shift in decades, a weight on the
curve's suggestion, and a cap below the sweep's blow-up (raised where the short runs' best lies above it:
``lift``), then a division for the planned run's passes over its data (``passes``). For each family the rule with the lowest
mean normalised regret (L - L*) / (L_untrained - L*) over the other families' tasks is chosen (a raw
regret (L - L*) / L* lets a task whose best loss is near zero, as on small data, choose for all), and
scored on the family left out. The constants lr_find ships (tunekit/probes/short_runs.py: SHORT_*) were
the rule chosen on every family when they were set (what moved them since, and what did not:
benchmarks/data/constants_history.md); the figures to quote are the held-out ones.

    python -m benchmarks.lr_carry [--select normalised|capped|mean] [--kind one|two|both] [--no-val curve|train|DIR]
    python -m benchmarks.lr_carry --oracle     # what no carry of these measurements can beat (in-sample bounds)
    python -m benchmarks.lr_carry --quick      # two synthetic tasks' records and grids, made in a temporary folder

Tasks whose finder has no validation data (the small-data family) get the curve's suggestion, as lr_find
gives it them (``--no-val train``: short runs scored on the training data; ``--no-val DIR``: the records of
``benchmarks/corpus_refine.py --hold-out S --out DIR``).

Regret is the grid's (benchmarks/harness/grid.py), at the planned run, on the seeds' median curve: 10 seeds
where the best may lie (the window, ``grid.truth``), 2 elsewhere; normalised, and raw ((L(lr) - L*) / L*) beside it.
"""

from __future__ import annotations

import argparse
import itertools
import json
import math
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks.corpus import CORPUS
from benchmarks.corpus_lr import FINDS  # each task's passes over its data, as lr_find computed them
from benchmarks.corpus_refine import QUICK_LENGTHS, QUICK_TASKS, load, record_task
from benchmarks.harness import grid, lofo, report
from tunekit.defaults import REFINE_SHARE
from tunekit.probes.short_runs import (SHORT_CAP, SHORT_LIFT, SHORT_LIFT_FROM, SHORT_PASSES, SHORT_PASSES_FROM,
                                       SHORT_RUNS, SHORT_SHIFT, SHORT_STEPS, passes_divisor)
from tunekit.probes import lr_rules

BUDGET = SHORT_RUNS * SHORT_STEPS  # what lr_find's one-length refinement may spend at least
STEP = 0.5  # the short runs' lattice, decades (tunekit.probes.refine.REFINE_OFFSETS)
SHIFTS = tuple(np.round(np.arange(-1.0, 0.51, 0.125), 3))
WEIGHTS = (1.0, 0.75, 0.5)
# At most blow-up / 10**cap: a safety rule, not fitted (half a decade below the blow-up is where lr_find's
# refinement already starts when the curve is unsure); --caps tries others.
CAPS: tuple[float | None, ...] = (0.5,)
PER_LENGTH = (0.0, -0.25, -0.5)


@dataclass(frozen=True)
class Replay:
    """One record's refinement replayed under the budget: its best (log10) or None, the runs spent."""

    best: float | None
    runs: int


def budget_of(run_steps: int) -> int:
    """What lr_find's refinement may spend on a planned run too short for two lengths, as
    tunekit.probes.short_runs.short_runs_for sizes it: its share of the run, at least BUDGET updates."""
    return max(int(REFINE_SHARE * run_steps), min(BUDGET, run_steps))


def replay(rec: dict[str, Any], budget: int = BUDGET, start: float | None = None) -> Replay:
    """The refinement lr_find runs with at most ``budget // H`` short runs, from the record's runs
    (started at the record's start, else at ``start``, a log10 LR)."""
    have = {round(math.log10(lr), 6): (s if s is not None else math.inf) for lr, s in zip(rec["lrs"], rec["scores"])}
    if start is None:
        start = math.log10(rec["start"]) if rec["start"] is not None else None
    if not have or start is None:
        return Replay(None, 0)
    most = budget // rec["steps"]
    centre = round(start / STEP) * STEP
    tried: dict[float, float] = {}

    def at(x: float) -> bool:
        x = round(x, 6)
        if x in tried:
            return True
        if len(tried) >= most or x not in have:
            return False
        tried[x] = have[x]
        return True

    for off in (-STEP, 0.0, STEP):
        at(centre + off)
    if len(tried) < 3:
        return Replay(None, len(tried))
    for _ in range(3):
        xs = sorted(tried)
        nxt = lr_rules.bracket_next(xs, [tried[x] for x in xs], STEP)
        if nxt is None or not at(nxt):
            break
    xs = sorted(tried)
    ys = [tried[x] for x in xs]
    if lr_rules.bracket_next(xs, ys, STEP) is None and math.isfinite(min(ys)):
        pol = lr_rules.bracket_polish(xs, ys)
        if pol is not None:
            at(pol)
    xs = sorted(tried)
    ys = [tried[x] for x in xs]
    if not math.isfinite(min(ys)):
        return Replay(None, len(tried))
    return Replay(lr_rules.bracket_minimum(xs, ys), len(tried))


@dataclass(frozen=True)
class Rule:
    steps: int
    shift: float
    weight: float
    cap: float | None
    per_length: float = 0.0  # decades per decade of the planned run's length over the short runs'
    # (from, rate): the cap rises ``rate`` decades per decade the short runs' best lies over ``from`` decades
    # above the blow-up; None: it does not
    lift: tuple[float, float] | None = None
    # (from, rate): then divided by (passes / from) ** rate for a run of more passes over its data (lr_find's
    # passes_divisor, at most its 10**SHORT_PASSES_MOST); None: not
    passes: tuple[float, float] | None = None

    @property
    def name(self) -> str:
        cap = "none" if self.cap is None else f"{self.cap:g}"
        lift = f" lift={self.lift[1]:g}@{self.lift[0]:g}" if self.lift else ""
        passes = f" passes={self.passes[1]:g}@{self.passes[0]:g}" if self.passes else ""
        return f"H={self.steps} shift={self.shift:+.3f} w={self.weight:g} cap={cap}{lift}{passes} p={self.per_length:g}"

    def answer(self, rec: dict[str, Any], rp: Replay, up: float | None, run_steps: int,
               passes: float | None = None) -> float | None:
        curve = rec["curve"]
        if rp.best is None:
            x = math.log10(curve) if curve else None
        else:
            x = (self.weight * rp.best + (1 - self.weight) * (math.log10(curve) if curve else rp.best) + self.shift
                 + self.per_length * math.log10(run_steps / (10 * self.steps)))
        if x is None:
            return None
        if self.cap is not None and up is not None and rp.best is not None:  # lr_find caps the carry, not the curve
            rise = self.lift[1] * max(0.0, rp.best - math.log10(up) - self.lift[0]) if self.lift else 0.0
            x = min(x, math.log10(up) - self.cap + rise)
        if self.passes and rp.best is not None:  # lr_find divides the carried number, after the cap
            x -= math.log10(passes_divisor(passes, *self.passes))
        return float(10 ** x)


def run_passes(name: str) -> float | None:
    """The planned run's passes over its data, as lr_find computed them in corpus_lr's finds (None without)."""
    path = FINDS / f"{name}.json"
    runs = json.loads(path.read_text())["runs"] if path.exists() else []
    return runs[0].get("passes") if runs else None


def blowup_of(rec: dict[str, Any], sweep_steps: int = 100) -> float | None:
    """The sweep's blow-up, else the LR it stopped at (as lr_find caps the carry)."""
    c = lr_rules.prepare(rec["sweep_lrs"], [math.nan if v is None else v for v in rec["sweep_losses"]])
    up = lr_rules.blowup(c) if len(c.lrs) >= 3 else None
    return up or (rec["sweep_lrs"][-1] if len(rec["sweep_lrs"]) < sweep_steps else None)


def diverges(g: dict[str, Any], lr: float | None) -> bool:
    """Whether the grid's runs diverged at or below ``lr`` (any seed, at a grid LR <= lr * 10**(1/6))."""
    if lr is None:
        return False
    return any(r["diverged"] for r in g["runs"] if r["lr"] <= lr * 10 ** (1 / 6))


@dataclass(frozen=True)
class TwoLengths:
    """Short runs at ``short`` updates (at most ``short_runs``), then at ``long`` updates around their best
    (the rest of the budget): the move of the best between the lengths, times ``gain`` per decade of
    length, carried on to the planned run (at most ``most`` decades), plus ``shift``."""

    short: int
    long: int
    short_runs: int
    gain: float
    most: float
    shift: float

    @property
    def name(self) -> str:
        return (f"H={self.short}x{self.short_runs}+{self.long} gain={self.gain:g} most={self.most:g} "
                f"shift={self.shift:+.3f}")

    def answer(self, a: dict[str, Any], b: dict[str, Any], run_steps: int) -> tuple[float | None, int]:
        ra = replay(a, min(self.short * self.short_runs, budget_of(run_steps)))
        if ra.best is None:
            return a["curve"], ra.runs * self.short
        rb = replay(b, budget_of(run_steps) - ra.runs * self.short, start=ra.best)
        spent = ra.runs * self.short + rb.runs * self.long
        if rb.best is None:
            return float(10 ** (ra.best + self.shift)), spent
        slope = (rb.best - ra.best) / math.log10(self.long / self.short)
        move = float(np.clip(self.gain * slope * math.log10(run_steps / self.long), -self.most, self.most))
        return float(10 ** (rb.best + move + self.shift)), spent


def main() -> None:
    ap = argparse.ArgumentParser(prog="python -m benchmarks.lr_carry", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--select", choices=("normalised", "mean", "capped"), default="normalised",
                    help="what the rule is chosen on: the mean normalised regret (L - L*) / (L_untrained - L*), the "
                         "mean regret (L - L*) / L*, or the mean of min(regret, 1)")
    ap.add_argument("--kind", choices=("one", "two", "both"), default="both")
    ap.add_argument("--caps", default="", help="caps to try besides the safety rule's, e.g. none,0.25")
    ap.add_argument("--lifts", default="", help="besides none and the shipped SHORT_LIFT_FROM:SHORT_LIFT, how many "
                    "decades the cap rises per decade the short runs' best lies above the blow-up, from how far "
                    "above it, e.g. 0:1.5,0.25:3")
    ap.add_argument("--oracle", action="store_true",
                    help="the in-sample bounds: each task's (or family's) best shift of the short runs' best, and "
                         "the grid's own seed-to-seed regret; writes lr_carry_oracle_report.txt")
    ap.add_argument("--no-val", default="curve", help="tasks without validation data: curve (lr_find's rule), train, "
                    "or a records folder")
    ap.add_argument("--quick", action="store_true", help="the records and one-seed grids of two synthetic tasks, "
                    "made in a temporary folder; the report to a temporary file")
    args = ap.parse_args()
    caps = CAPS + tuple(None if c == "none" else float(c) for c in args.caps.split(",") if c)
    folder = args.no_val not in ("curve", "train")
    if args.quick:
        recs, grid_root = quick_inputs()
    else:
        recs, grid_root = {n: load(n, Path(args.no_val)) if folder and not CORPUS[n].finder_val else load(n)
                           for n in CORPUS}, grid.GRIDS
    if args.no_val == "curve":  # no short runs: the curve's suggestion, whatever the rule
        recs = {n: [{**r, "lrs": [], "scores": []} if not CORPUS[n].finder_val else r for r in rs]
                for n, rs in recs.items()}
    recs = {n: r for n, r in recs.items() if r and grid.load(n, root=grid_root) is not None}
    if args.oracle:
        oracle(recs, args.select == "normalised")
        return
    grids = {n: grid.load(n, root=grid_root) for n in recs}
    truths = {n: grid.truth(n, grid_root) if grid_root == grid.GRIDS else grid.Truth.of(grids[n]) for n in recs}
    lengths = sorted({r["steps"] for rs in recs.values() for r in rs})
    by = {n: {(r["seed"], r["steps"]): r for r in rs} for n, rs in recs.items()}
    seeds = {n: sorted({r["seed"] for r in rs}) for n, rs in recs.items()}
    # answers[rule][task] = [(lr, refinement updates) per seed]
    answers: dict[str, dict[str, list[tuple[float | None, int]]]] = {}
    if args.kind in ("one", "both"):
        lifts = tuple(dict.fromkeys((None, (SHORT_LIFT_FROM, SHORT_LIFT),
                                     *(tuple(map(float, v.split(":"))) for v in args.lifts.split(",") if v))))
        carries = (None, (SHORT_PASSES_FROM, SHORT_PASSES))
        passes = {n: None if args.quick else run_passes(n) for n in recs}
        for rule in (Rule(*x) for x in itertools.product(lengths, SHIFTS, WEIGHTS, caps, PER_LENGTH, lifts, carries)):
            answers[rule.name] = {}
            for n in recs:
                out = []
                for sd in seeds[n]:
                    r = by[n].get((sd, rule.steps))
                    if r is None:
                        continue
                    rp = replay(r, budget_of(CORPUS[n].run_steps))
                    out.append((rule.answer(r, rp, blowup_of(r) if rule.cap is not None else None,
                                            CORPUS[n].run_steps, passes[n]), rp.runs * rule.steps))
                answers[rule.name][n] = out
    if args.kind in ("two", "both"):
        for a, b in itertools.combinations(lengths, 2):
            for runs, gain, most, shift in itertools.product((3, 4), (0.0, 0.25, 0.5, 0.75, 1.0), (0.5, 1.0),
                                                             SHIFTS):
                if runs * a >= BUDGET:
                    continue
                rule2 = TwoLengths(a, b, runs, gain, most, shift)
                answers[rule2.name] = {n: [rule2.answer(by[n][(sd, a)], by[n][(sd, b)], CORPUS[n].run_steps)
                                           for sd in seeds[n] if (sd, a) in by[n] and (sd, b) in by[n]]
                                       for n in recs}
    regret: dict[str, dict[str, float]] = {}
    for name, per in answers.items():
        regret[name] = {}
        for n, out in per.items():
            regs = [truths[n].normalised(lr) if args.select == "normalised" else truths[n].regret(lr) for lr, _ in out]
            if regs:
                regret[name][n] = float(np.mean(np.minimum(regs, 1.0) if args.select == "capped" else regs))
    fam = {n: CORPUS[n].family for n in recs}
    held = lofo.select(regret, fam)
    lines = [f"Leave-one-family-out (chosen on: {args.select} regret over the other families' tasks); "
             f"the short runs may spend max(5% of the run, {BUDGET}) updates",
             f"{'held-out family':<14}{'n':>3}  {'rule chosen on the others':<48}{'norm':>7}{'mean':>8}{'worst':>8}"
             f"{'spread':>8}{'cost':>7}{'diverged':>9}   the curve's rule (before): mean / worst"]
    fam_means, fam_worst, fam_norms = [], [], []
    for f, h in held.items():
        got = {t: answers[h.rule][t] for t in h.scores}
        regs = [float(np.mean([truths[t].regret(lr) for lr, _ in got[t]])) for t in got]
        norms = [float(np.mean([truths[t].normalised(lr) for lr, _ in got[t]])) for t in got]
        spreads = [_spread([lr for lr, _ in got[t]]) for t in got]
        cost = [np.median([(by[t][(0, lengths[0])]["sweep_updates"] + u) / CORPUS[t].run_steps for _, u in got[t]])
                for t in got]
        div = sum(diverges(grids[t], lr) for t in got for lr, _ in got[t])
        ship = [float(np.mean([truths[t].regret(r["curve"]) for r in recs[t] if r["steps"] == lengths[0]]))
                for t in got]
        fam_means.append(np.mean(regs))
        fam_worst.append(max(regs))
        fam_norms.append(np.mean(norms))
        lines.append(f"{f:<14}{len(regs):>3}  {h.rule:<48}{100 * np.mean(norms):6.2f}%{100 * np.mean(regs):7.1f}%{100 * max(regs):7.1f}%"
                     f"{np.nanmedian(spreads):8.2f}{100 * np.median(cost):6.0f}%{div:>9}   "
                     f"{100 * np.mean(ship):.1f}% / {100 * max(ship):.1f}%")
    lines.append(f"over families: held-out normalised {100 * np.mean(fam_norms):.2f}% (worst family "
                 f"{100 * max(fam_norms):.2f}%); raw mean {100 * np.mean(fam_means):.1f}%, worst family "
                 f"{100 * max(fam_means):.1f}%, worst task {100 * max(fam_worst):.1f}%")
    lines.append("norm: the mean normalised regret (L - L*) / (L_untrained - L*), the share of the learnable loss lost; "
                 "mean, worst: the raw regret (L - L*) / L*")
    allfit = min(regret, key=lambda r: float(np.mean(list(regret[r].values()))))
    lines.append(f"the rule chosen on every family (in-sample): {allfit}")
    shipped = Rule(SHORT_STEPS, SHORT_SHIFT, 1.0, SHORT_CAP, 0.0, (SHORT_LIFT_FROM, SHORT_LIFT),
                   (SHORT_PASSES_FROM, SHORT_PASSES)).name
    if shipped in regret:  # what lr_find runs, on the same replay (in-sample: its constants were chosen here)
        by_fam = {f: np.mean([regret[shipped][t] for t in held[f].scores]) for f in held}
        lines.append(f"the rule lr_find ships, {shipped} (in-sample): " + ", ".join(
            f"{f} {100 * v:.2f}%" for f, v in by_fam.items()) + f"; over families {100 * np.mean(list(by_fam.values())):.2f}%")
    print("\n".join(lines))
    report.write("lr_carry", "The carry from short runs to the planned run, leave-one-family-out", "\n".join(lines),
                 quick=args.quick)


def quick_inputs() -> tuple[dict[str, list[dict[str, Any]]], Path]:
    """--quick's records (corpus_refine's, one seed at two lengths) and one-seed grids of the synthetic
    QUICK_TASKS, made in a temporary folder: the records by task, and the grids' folder."""
    tmp = Path(tempfile.mkdtemp(prefix="tk_lr_carry_"))
    for name in QUICK_TASKS:
        record_task(name, 1, QUICK_LENGTHS, tmp / "records")
        grid.ensure(name, 1, root=tmp / "grid", quiet=True)
    return {name: load(name, tmp / "records") for name in QUICK_TASKS}, tmp / "grid"


ORACLE_SHIFTS = tuple(np.round(np.arange(-1.5, 1.5001, 0.0625), 4))


def oracle(recs: dict[str, list[dict[str, Any]]], norm: bool = True) -> None:
    """Lower bounds no carry of these measurements can beat, each fitted in-sample on the grid it is scored on.

    - per task: the short runs' best (as lr_find reads it under its budget; the curve's suggestion where
      there are none) times the one factor that is best for that task over its seeds;
    - per family: one factor per family, best for the family's tasks (what a rule that knew the family's
      own ideal correction would give);
    - the grid against itself: each grid seed's own best LR, scored on the seed-mean curve.
    What is left under the per-task bound is the seed-to-seed variation of the measurements themselves.
    ``norm``: in normalised regret (else the raw regret).
    """
    truths = {n: grid.truth(n) for n in recs}

    def metric(n: str, lr: float) -> float:
        return truths[n].normalised(lr) if norm else truths[n].regret(lr)

    fam = {n: CORPUS[n].family for n in recs}
    families = list(dict.fromkeys(fam.values()))

    def base(n: str, r: dict[str, Any], curve_only: bool) -> float:
        if r["curve"] is None:
            return math.log10(truths[n].best_lr)  # no suggestion: the best a bound can assume
        if curve_only or not r["lrs"]:
            return math.log10(r["curve"])
        b = replay(r, budget_of(CORPUS[n].run_steps)).best
        return math.log10(r["curve"]) if b is None else b

    def reg(n: str, xs: list[float], s: float) -> float:
        return float(np.mean([metric(n, 10 ** (x + s)) for x in xs]))

    lines = ["In-sample bounds (fitted on the grids they are scored on: no rule chosen out of sample can beat them).",
             f"Mean {'normalised' if norm else 'raw'} regret per family at the planned run; the short runs as lr_find "
             "runs them under its budget "
             f"(max(5% of the run, {BUDGET} updates)).",
             f"{'bound':<52}" + "".join(f"{f[:11]:>12}" for f in families) + f"{'mean':>8}{'w/o small':>10}"
             f"{'spread':>8}"]

    def row(label: str, per_family: dict[str, float], spread: float) -> None:
        fm = [per_family[f] for f in families]
        rest = [per_family[f] for f in families if f != "small-data"]
        lines.append(f"{label:<52}" + "".join(f"{100 * v:11.2f}%" for v in fm) + f"{100 * np.mean(fm):7.2f}%"
                     f"{100 * np.mean(rest):9.2f}%{spread:8.2f}")

    lengths = sorted({r["steps"] for rs in recs.values() for r in rs})
    for h in lengths + ["all"]:
        for curve_only in ((False, True) if h == lengths[-1] else (False,)):
            xs: dict[str, list[float]] = {}
            for n, rs in recs.items():
                per_seed: dict[int, list[float]] = {}
                for r in rs:
                    if h == "all" or r["steps"] == h:
                        per_seed.setdefault(r["seed"], []).append(base(n, r, curve_only))
                xs[n] = [float(np.mean(v)) for v in per_seed.values()]
            task = {n: min(reg(n, xs[n], s) for s in ORACLE_SHIFTS) for n in recs}
            family = {f: min(float(np.mean([reg(n, xs[n], s) for n in recs if fam[n] == f])) for s in ORACLE_SHIFTS)
                      for f in families}
            spread = float(np.median([max(v) - min(v) for v in xs.values() if len(v) > 1]))
            what = ("the curve's suggestion" if curve_only else
                    f"short runs of {h}" if h != "all" else f"mean of the bests at {'+'.join(map(str, lengths))}")
            row(f"{what}, best factor per task", {f: float(np.mean([task[n] for n in recs if fam[n] == f]))
                                                  for f in families}, spread)
            row(f"{what}, best factor per family", family, spread)
    self_reg: dict[str, float] = {}
    for n in recs:
        g = grid.load(n)
        assert g is not None
        regs = []
        for sd in sorted({r["seed"] for r in g["runs"]}):
            mine = [r for r in g["runs"] if r["seed"] == sd and not r["diverged"]]
            if mine:
                regs.append(metric(n, min(mine, key=lambda r: grid.capped(r["final_loss"], g["untrained_loss"]))["lr"]))
        self_reg[n] = float(np.mean(regs)) if regs else math.nan
    row("the grid: one seed's own best LR", {f: float(np.nanmean([self_reg[n] for n in recs if fam[n] == f]))
                                             for f in families}, math.nan)
    lines += ["spread: median over tasks of the decades between the seeds' extremes (the rule's own input, before "
              "any factor);",
              "small-data: lr_find has no validation data to score short runs on there, so every row holds the curve's "
              "suggestion;",
              "'mean of the bests' spends three lengths' runs, about 2.6x what lr_find may spend: a bound for more data."]
    report.write("lr_carry_oracle", "What no carry of the short runs can beat: in-sample bounds", "\n".join(lines))


def _spread(lrs: list[float | None]) -> float:
    v = [x for x in lrs if x]
    return float(math.log10(max(v) / min(v))) if len(v) >= 2 else math.nan


if __name__ == "__main__":
    main()
