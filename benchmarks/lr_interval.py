"""An LR interval with stated coverage (issue 51 item 2): candidate rules, chosen leave-one-family-out.

No training: it reads the cached finder runs (benchmarks/data/corpus_lr_finds, 5 seeds a task, each with its
sweep's curve and final suggestion) and the planned run's LR grids. Each candidate rule turns one finder
run into an interval (low, high) with one constant:

- ``band``: c decades either side of the suggestion; ``band up`` / ``band down``: c decades on one side,
  c/2 on the other; ``band doubt``: c decades, 2c where the finder was not confident; ``band checked``: 2c
  also where no short runs checked the suggestion; ``band carried``: ``band checked``, its top raised to c
  decades over the short runs' carried best where the sweep's blow-up capped the suggestion below it;
  ``band passes``: ``band carried``, that best divided for the run's passes as the suggestion is;
- ``bottom``: the LRs where the smoothed curve is within a fraction f of its descent (start to minimum)
  above its minimum, divided as the suggestion rule divides the minimum, stretched to hold the suggestion;
- ``rules``: the range the rules' suggestions span (the final one with the curve's tunekit, steepest,
  min/10), widened by c decades each side.

The truth: the best LR of the planned run. Where the 10-seed grid around the best exists
(benchmarks/data/corpus_search_grid; ``python -m benchmarks.corpus_grid --window 10``), each of its LRs counts
by its chance of being the best (``grid.best_odds``: the seeds resampled, the best by their median);
elsewhere the 2-seed grid's best by the seeds' mean. Both grids have 3 LRs a decade, so a best is known to
its grid cell, a sixth of a decade either side: a (task, finder seed) pair counts as the odds-weighted share
of those cells inside its interval (``Pair.holds``; a family's coverage is the mean over its pairs). The
strict figure (the grid LRs themselves inside) and the old one (the cell of the 10 seeds' median best alone)
are reported beside it. A run with no interval (no suggestion) is a miss.

Choice: for each family, among every (rule, constant) whose median width over the other 8 families' pairs
is at most 1 decade (the issue's bound), the narrowest that covers >= 80% of the pairs in each of them;
where none does, the one covering that in the most of them, then the best worst-family coverage. Its coverage
and median width on the family left out are that family's held-out figures. What ships is the same choice made
on all 9 families (in-sample).

    python -m benchmarks.lr_interval [--quick]
"""

from __future__ import annotations

import argparse
import json
import math
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional

import numpy as np

from benchmarks.corpus import CORPUS
from benchmarks.corpus_lr import FINDS
from benchmarks.harness import grid, report
from tunekit.probes import lr_rules as rules
from tunekit.probes.short_runs import SHORT_SHIFT

SEARCH_GRIDS = Path(__file__).resolve().parent / "data" / "corpus_search_grid"
CELL = 1 / (2 * grid.PER_DECADE)  # half a grid step, in decades: how well a grid knows its best LR
COVER = 0.8  # the share of (task, seed) pairs an interval must cover in every family
MAX_WIDTH = 1.0  # decades: the bound on the median width
QUICK_TASK = "digits_mlp_adamw"
BANDS = tuple(round(0.05 * i, 2) for i in range(1, 41))  # c, decades: 0.05 .. 2.0
LEVELS = (0.01, 0.02, 0.05, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7)  # f, of the descent

Interval = Optional[tuple[float, float]]


@dataclass(frozen=True)
class Pair:
    """One finder run of one task, and the planned run's best LR it is judged by."""

    task: str
    family: str
    seed: int
    best_lr: float
    ten_seeds: bool  # the best is the 10-seed grid's (else the 2-seed grid's)
    suggestion: Optional[float]
    confident: bool
    suggestions: dict[str, Optional[float]]
    curve: rules.Curve
    checked: bool = False  # short runs checked the suggestion (a refinement with a best)
    capped: bool = False  # the sweep's blow-up held it below their carried best
    short_best: Optional[float] = None  # their best, before the carry
    odds: tuple[tuple[float, float], ...] = ()  # (grid LR, the chance it is the best: grid.best_odds)
    passes_divisor: float = 1.0  # what lr_find divided the short runs' carried number by for the run's passes

    def holds(self, iv: Interval, cell: float = CELL) -> float:
        """The chance ``iv`` holds the best LR: each grid LR's share of the bootstrap's draws times the share
        of its cell inside (:func:`covers`); the median's best alone where there are no odds."""
        if not self.odds:
            return covers(iv, self.best_lr, cell)
        return sum(w * covers(iv, lr, cell) for lr, w in self.odds)


def band(c: float, below: float = 1.0, above: float = 1.0) -> Callable[[Pair], Interval]:
    """``below * c`` decades under the suggestion to ``above * c`` over it."""
    def rule(p: Pair) -> Interval:
        if below == above:  # the shipped function, as a confident finder run gets it
            return rules.interval(p.suggestion, c, p.curve)
        s = p.suggestion
        return None if s is None else (s / 10 ** (below * c), s * 10 ** (above * c))
    return rule


def band_doubt(c: float) -> Callable[[Pair], Interval]:
    """c decades either side of the suggestion; 2c where the finder was not confident (the shipped function)."""
    def rule(p: Pair) -> Interval:
        return rules.interval(p.suggestion, c, p.curve, confident=p.confident)
    return rule


def band_checked(c: float) -> Callable[[Pair], Interval]:
    """c decades either side of the suggestion; 2c where the finder was not confident or no short runs checked it."""
    def rule(p: Pair) -> Interval:
        return rules.interval(p.suggestion, c, p.curve, confident=p.confident and p.checked)
    return rule


def band_carried(c: float, passes: bool = False) -> Callable[[Pair], Interval]:
    """``band checked``, its top raised to c decades over the short runs' carried best where the blow-up capped
    it; ``passes``: that best divided for the run's passes as the suggestion is (the shipped function)."""
    def rule(p: Pair) -> Interval:
        divisor = p.passes_divisor if passes else 1.0
        reach = p.short_best * 10 ** SHORT_SHIFT / divisor if p.capped and p.short_best else None
        return rules.interval(p.suggestion, c, p.curve, confident=p.confident and p.checked, reach=reach)
    return rule


def bottom(f: float) -> Callable[[Pair], Interval]:
    """The curve's bottom at level f, divided as the shipped rule divides the minimum, holding the suggestion."""
    def rule(p: Pair) -> Interval:
        got = rules.bottom_range(p.curve, f) if len(p.curve.lrs) >= 3 else None
        if got is None or p.suggestion is None:
            return None
        div = rules.divisor(p.curve.family)
        return min(got[0] / div, p.suggestion), max(got[1] / div, p.suggestion)
    return rule


def rules_span(c: float) -> Callable[[Pair], Interval]:
    """The span of the final suggestion and the curve's tunekit, steepest and min/10, widened by c decades."""
    def rule(p: Pair) -> Interval:
        got = [v for v in (p.suggestion, *(p.suggestions.get(k) for k in ("tunekit", "steepest", "min/10"))) if v]
        if p.suggestion is None or not got:
            return None
        return min(got) / 10 ** c, max(got) * 10 ** c
    return rule


def candidates() -> dict[str, Callable[[Pair], Interval]]:
    """Every (rule, constant), named as the report names them."""
    out: dict[str, Callable[[Pair], Interval]] = {}
    for c in BANDS:
        out[f"band {c:g}"] = band(c)
        out[f"band up {c:g}"] = band(c, 0.5, 1.0)
        out[f"band down {c:g}"] = band(c, 1.0, 0.5)
        out[f"band doubt {c:g}"] = band_doubt(c)
        out[f"band checked {c:g}"] = band_checked(c)
        out[f"band carried {c:g}"] = band_carried(c)
        out[f"band passes {c:g}"] = band_carried(c, passes=True)
    for f in LEVELS:
        out[f"bottom {f:g}"] = bottom(f)
    for c in BANDS[:20]:
        out[f"rules {c:g}"] = rules_span(c)
    return out


def covers(iv: Interval, best: float, cell: float = CELL) -> float:
    """The share of the best LR's grid cell (``cell`` decades either side of it) inside the interval: the
    chance that it holds the best, were the best anywhere in its cell. ``cell=0``: 1 if it holds the best LR."""
    if iv is None:
        return 0.0
    lo, hi, b = math.log10(iv[0]), math.log10(iv[1]), math.log10(best)
    if cell <= 0:
        return float(lo - 1e-9 <= b <= hi + 1e-9)
    return max(0.0, min(hi, b + cell) - max(lo, b - cell)) / (2 * cell)


def width(iv: Interval) -> float:
    return math.nan if iv is None else float(math.log10(iv[1] / iv[0]))


def best_lr(name: str) -> tuple[float, bool, tuple[tuple[float, float], ...]]:
    """The planned run's best LR: the 10-seed grid's (seeds' median) where it exists, with each of its LRs'
    chance of being the best (``grid.best_odds``); else the 2-seed grid's (mean), no odds."""
    path = SEARCH_GRIDS / f"{name}.json"
    if path.exists():
        g = json.loads(path.read_text())
        odds = tuple((grid.lr_of(k), w) for k, w in grid.best_odds(g).items() if w > 0)
        return grid.Truth.of(g, np.median).best_lr, True, odds
    g = grid.load(name)
    if g is None:
        raise SystemExit(f"no grid for {name}: python -m benchmarks.corpus_grid --tasks {name}")
    return grid.Truth.of(g).best_lr, False, ()


def pairs(names: list[str]) -> list[Pair]:
    out = []
    for name in names:
        best, ten, odds = best_lr(name)
        for r in json.loads((FINDS / f"{name}.json").read_text())["runs"]:
            losses = [math.nan if v is None else v for v in r["losses"]]
            curve = rules.prepare(r["lrs"], losses, family=r["family"])
            out.append(Pair(name, CORPUS[name].family, r["seed"], best, ten, r["suggestion"], bool(r["confident"]),
                            r["suggestions"], curve, r.get("short_best") is not None, bool(r.get("capped")),
                            r.get("short_best"), odds, r.get("passes_divisor", 1.0)))
    return out


@dataclass(frozen=True)
class Score:
    """A rule's figures on a set of pairs, per family: coverage (:meth:`Pair.holds`), strict (the best's grid
    LRs themselves inside, by their odds), at the median's best (the cell of the 10 seeds' median best alone);
    widths."""

    coverage: dict[str, float]
    strict: dict[str, float]
    widths: list[float]
    point: dict[str, float] = field(default_factory=dict)

    @property
    def worst(self) -> float:
        return min(self.coverage.values())

    @property
    def short(self) -> int:
        """Families covered under COVER."""
        return sum(v < COVER for v in self.coverage.values())

    @property
    def median_width(self) -> float:
        w = [x for x in self.widths if math.isfinite(x)]
        return float(np.median(w)) if w else math.inf


def score(intervals: list[Interval], ps: list[Pair]) -> Score:
    fams: dict[str, list[tuple[float, float, float]]] = {}
    for iv, p in zip(intervals, ps):
        fams.setdefault(p.family, []).append((p.holds(iv), p.holds(iv, 0.0), covers(iv, p.best_lr)))
    mean = lambda i: {f: float(np.mean([t[i] for t in v])) for f, v in fams.items()}  # noqa: E731
    return Score(mean(0), mean(1), [width(iv) for iv in intervals], mean(2))


def choose(table: dict[str, list[Interval]], ps: list[Pair], keep: Callable[[Pair], bool],
           max_width: float = MAX_WIDTH) -> str:
    """Among the rules whose median width over the kept pairs is at most ``max_width`` decades: the narrowest
    covering >= COVER of the kept pairs in every family; where none does, the one covering that in the most
    families, then the best worst-family coverage (ties: the narrower, then the first listed)."""
    idx = [i for i, p in enumerate(ps) if keep(p)]
    sub = [ps[i] for i in idx]
    scored = {name: score([ivs[i] for i in idx], sub) for name, ivs in table.items()}
    within = [n for n, s in scored.items() if s.median_width <= max_width] or list(scored)
    ok = [n for n in within if scored[n].worst >= COVER]
    if ok:
        return min(ok, key=lambda n: (scored[n].median_width, -scored[n].worst))
    return min(within, key=lambda n: (scored[n].short, -scored[n].worst, scored[n].median_width))


def held_out_table(table: dict[str, list[Interval]], ps: list[Pair]) -> tuple[str, str]:
    """Per family: the rule chosen on the others and its held-out figures; then all 9 (what ships)."""
    fams = list(dict.fromkeys(p.family for p in ps))
    head = (f"{'held-out family':<16}{'n':>4}{'chosen on the other families':>30}{'coverage':>10}{'strict':>8}"
            f"{'median width':>14}{'median best':>13}")
    lines = ["Held out: each family's rule chosen on the other families (coverage: the chance it holds the best LR, "
             "each grid LR weighted by its bootstrap odds of being the best, each counting the share of its cell "
             "inside; strict: those grid LRs themselves inside; width in decades; median best: the share of the cell "
             "of the 10 seeds' median best alone, the figure before odds)", head, "-" * len(head)]
    pooled: list[tuple[Interval, Pair]] = []
    for fam in fams:
        rule = choose(table, ps, lambda p, fam=fam: p.family != fam) if len(fams) > 1 else next(iter(table))
        idx = [i for i, p in enumerate(ps) if p.family == fam]
        s = score([table[rule][i] for i in idx], [ps[i] for i in idx])
        pooled += [(table[rule][i], ps[i]) for i in idx]
        lines.append(f"{fam:<16}{len(idx):>4}{rule:>30}{100 * s.coverage[fam]:9.0f}%{100 * s.strict[fam]:7.0f}%"
                     f"{s.median_width:14.2f}{100 * s.point[fam]:12.0f}%")
    lines.append("-" * len(head))
    cov = np.mean([p.holds(iv) for iv, p in pooled])
    strict = np.mean([p.holds(iv, 0.0) for iv, p in pooled])
    point = np.mean([covers(iv, p.best_lr) for iv, p in pooled])
    w = np.nanmedian([width(iv) for iv, _ in pooled])
    lines.append(f"{'overall':<16}{len(pooled):>4}{'(held out, pooled)':>30}{100 * cov:9.0f}%{100 * strict:7.0f}%"
                 f"{w:14.2f}{100 * point:12.0f}%")
    shipped = choose(table, ps, lambda p: True)
    s = score(table[shipped], ps)
    ship = [f"In-sample, chosen on all {len(fams)} families (what ships): {shipped}; median width {s.median_width:.2f} "
            "decades", f"{'family':<16}{'coverage':>10}{'strict':>8}{'median best':>13}"]
    ship += [f"{f:<16}{100 * s.coverage[f]:9.0f}%{100 * s.strict[f]:7.0f}%{100 * s.point[f]:12.0f}%" for f in fams]
    return "\n".join(lines), "\n".join(ship)


def rule_table(table: dict[str, list[Interval]], ps: list[Pair]) -> str:
    """Each rule in-sample: its best worst-family coverage at a median width <= 1 decade, and the width it
    needs to cover >= 80% in every family."""
    kinds = list(dict.fromkeys(n.rsplit(" ", 1)[0] for n in table))
    head = (f"{'rule':<12}{'at <= 1 decade: constant':>26}{'worst family':>14}{'mean family':>13}{'width':>7}"
            f"{'   80% everywhere: constant':>28}{'width':>7}")
    lines = ["Each rule in-sample (all families): its best worst-family coverage at a median width <= 1 decade; "
             "the narrowest constant covering >= 80% in every family at any width ('-': none does)",
             head, "-" * len(head)]
    for kind in kinds:
        sub = {n: v for n, v in table.items() if n.rsplit(" ", 1)[0] == kind}
        n = choose(sub, ps, lambda p: True)
        s = score(sub[n], ps)
        wide = choose(sub, ps, lambda p: True, max_width=math.inf)
        w = score(sub[wide], ps)
        far = (f"{wide.rsplit(' ', 1)[1]:>28}{w.median_width:7.2f}" if w.worst >= COVER else f"{'-':>28}{'':>7}")
        near = (f"{n.rsplit(' ', 1)[1]:>26}{100 * s.worst:13.0f}%{100 * np.mean(list(s.coverage.values())):12.0f}%"
                f"{s.median_width:7.2f}" if s.median_width <= MAX_WIDTH else f"{'-':>26}{'':>33}")
        lines.append(f"{kind:<12}{near}{far}")
    return "\n".join(lines)


def task_table(ps: list[Pair], rule: Callable[[Pair], Interval]) -> str:
    lines = ["Per task, the shipped rule (in-sample): best LR (10: the 10-seed grid's), coverage summed over the seeds, "
             "log10(best / suggestion) per seed", f"{'task':<25}{'family':<14}{'best lr':>9}{'':>4}{'covered':>9}  offsets"]
    for name in dict.fromkeys(p.task for p in ps):
        sub = [p for p in ps if p.task == name]
        hit = sum(p.holds(rule(p)) for p in sub)  # a chance for each seed
        off = " ".join("   -" if p.suggestion is None else f"{math.log10(p.best_lr / p.suggestion):+5.2f}" for p in sub)
        lines.append(f"{name:<25}{sub[0].family:<14}{sub[0].best_lr:9.3g}{'10' if sub[0].ten_seeds else '':>4}"
                     f"{hit:>6.1f}/{len(sub)}  {off}")
    return "\n".join(lines)


def curve_only(ps: list[Pair], rule: str) -> str:
    """The shipped band around the curve's own suggestion (what ``refine=False`` returns), on the same pairs."""
    c = float(rule.rsplit(" ", 1)[1])
    doubt = rule.startswith("band doubt")  # the final result's confidence stands in for the curve's own
    unchecked = rule.startswith(("band checked", "band carried", "band passes"))  # no short runs checked it: twice the width
    got = [rules.interval(p.suggestions.get("tunekit"), c, p.curve,
                          confident=not unchecked and (p.confident or not doubt)) for p in ps]
    s = score(got, ps)
    return (f"The same band around the curve's suggestion alone (lr_find(refine=False); in-sample; the final result's "
            f"confidence standing in for the curve's own): coverage "
            f"{100 * np.mean([p.holds(iv) for iv, p in zip(got, ps)]):.0f}% pooled, worst family "
            f"{100 * s.worst:.0f}% ({min(s.coverage, key=lambda f: s.coverage[f])})")


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(prog="python -m benchmarks.lr_interval", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help=f"one task ({QUICK_TASK}) from the cache")
    args = ap.parse_args(argv)
    names = [QUICK_TASK] if args.quick else [n for n in CORPUS if (FINDS / f"{n}.json").exists()]
    ps = pairs(names)
    table = {name: [rule(p) for p in ps] for name, rule in candidates().items()}
    held, ship = held_out_table(table, ps)
    shipped = choose(table, ps, lambda p: True)
    body = "\n\n".join([f"{len(ps)} (task, finder seed) pairs over {len(names)} tasks; the best LR from the 10-seed "
                        f"grid for {len({p.task for p in ps if p.ten_seeds})} tasks, the 2-seed grid for the rest.",
                        held, ship, curve_only(ps, shipped) if shipped.startswith("band ") else "",
                        rule_table(table, ps), task_table(ps, candidates()[shipped])])
    report.write("lr_interval", "An LR interval with stated coverage, chosen leave-one-family-out", body,
                 quick=args.quick)


if __name__ == "__main__":
    main()
