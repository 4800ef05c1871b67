"""Where the LR finder's seed-to-seed spread comes from (issue 51 item 1): a measurement, no change to tunekit.

Spread: log10(max / min) of the answers over the finder seeds (``corpus_lr.spread``), in decades.

1. From the corpus's cached finder runs (benchmarks/data/corpus_lr_finds, 5 seeds a task, no new runs):
   per family, the median and worst spread of tunekit's final suggestion, of the same sweeps' curve-only
   answer (``suggestions["tunekit"]``, what the short runs refine) and where the short runs start
   (``refine_start``: the curve's answer, or half a decade below the blow-up when the curve is not
   confident), of each peer rule, and of raw landmarks of each curve: the LR at the smoothed loss's
   minimum at the default bandwidth (5% of the sweep's span), at 2x and 4x it, at the minimum of an
   exponential moving average (beta 0.9 and 0.98), and the blow-up.
2. New runs on the cheapest task of each family (every task with ``--all``), splitting what the seed
   moves: ``order`` (lr_find's seed varied: the sweep's and the short runs' batch order and dropout; the
   model built from seed 0), ``init`` (lr_find's seed 0; the model built from the varied seed), ``both`` (both varied: today's
   call, rerun on this commit). The pair (0, 0) is shared by the three. Then two ways to spend about twice
   the sweep, both varied: ``2 sweeps`` (``Sweep(repeats=2)``: each rule's median over two sweeps) and
   ``2x sweep`` (``Sweep(sweep_steps=200)``). The report in benchmarks/data was run with ``--all``.

    python -m benchmarks.lr_spread [--tasks a,b | --all] [--seeds 5] [--rerun] [--quick]

The runs are cached in benchmarks/data/lr_spread_runs/ (``--rerun`` runs them again).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import os
import tempfile
from pathlib import Path
from typing import Any

import numpy as np
import torch

import tunekit
from benchmarks.corpus import CORPUS, entry, pick
from benchmarks.corpus_lr import FINDS, PEERS, lightning_rule, spread
from benchmarks.harness import report
from tunekit import StepSettings, Sweep, Task
from tunekit.defaults import SWEEP_STEPS
from tunekit.probes import lr_rules as rules

RUNS = Path(__file__).resolve().parent / "data" / "lr_spread_runs"
CONDITIONS = ("order", "init", "both", "2 sweeps", "2x sweep")
QUICK_TASK = "mlp_huber_sgdm"  # synthetic: no scikit-learn needed
# The answers read from one finder run, in the tables' order: what tunekit returns, then the curve's own.
ANSWERS = ("final", "curve", "start", *PEERS, "min", "min 2h", "min 4h", "ema .9", "ema .98", "blowup")

Spreads = dict[str, dict[str, float]]  # condition (or median, worst family) -> answer -> spread in decades


@dataclasses.dataclass(frozen=True)
class Find:
    """One lr_find's answers: its final suggestion, its curve, and the seeds it ran with."""

    order: int  # lr_find's seed
    init: int  # the seed the model was built from
    suggestion: float | None
    curve: float | None  # the curve's answer, before the short runs
    refined: bool
    confident: bool
    family: str
    lrs: list[float]
    losses: list[float | None]
    seconds: float
    start: float | None = None  # where the short runs started (None: not recorded, read from the curve)
    variant: str = "plain"  # the sweep: the default, "2 sweeps" or "2x sweep" (VARIANTS)
    samples: int = 0  # the training samples lr_find drew (0: not recorded)

    @classmethod
    def from_cache(cls, run: dict[str, Any]) -> Find:
        """A run of benchmarks/data/corpus_lr_finds (its seed both lr_find's and the model's)."""
        return cls(run["seed"], run["seed"], run["suggestion"], run["suggestions"].get("tunekit"), run["refined"],
                   run["confident"], run["family"], run["lrs"], run["losses"], run["seconds"], samples=run["samples"])


def ema_minimum(lrs: list[float], losses: list[float | None], beta: float) -> float | None:
    """The LR at the minimum of the bias-corrected moving average of the losses (cut at the first non-finite)."""
    avg, smoothed = 0.0, []
    for i, v in enumerate(losses):
        if v is None or not math.isfinite(v):
            break
        avg = beta * avg + (1 - beta) * v
        smoothed.append(avg / (1 - beta ** (i + 1)))
    return float(lrs[int(np.argmin(smoothed))]) if len(smoothed) >= 3 else None


def answers(f: Find) -> dict[str, float | None]:
    """Every answer of :data:`ANSWERS` from one finder run."""
    losses = [math.nan if v is None else v for v in f.losses]
    c = rules.prepare(f.lrs, losses, family=f.family)
    ok = len(c.lrs) >= 3
    wide = {k: rules.prepare(f.lrs, losses, bandwidth=k * c.bandwidth, family=f.family) for k in (2, 4)}
    up = rules.blowup(c) if ok else None
    start = f.start
    if start is None:  # refine_start: the curve's answer if the curve alone is confident, else below its blow-up
        sure = ok and rules.assess(c, batch_noise=rules.start_noise(losses)).confident
        start = f.curve if sure and f.curve is not None else (up / 10 ** 0.5 if up is not None else f.curve)
    out: dict[str, float | None] = {"final": f.suggestion, "curve": f.curve, "start": start}
    for p in PEERS:
        out[p] = lightning_rule(f.lrs, f.losses) if p == "lightning" else (rules.RULES[p](c) if ok else None)
    out["min"] = rules.minimum(c) if ok else None
    for k, w in wide.items():
        out[f"min {k}h"] = rules.minimum(w) if ok else None
    out["ema .9"], out["ema .98"] = ema_minimum(f.lrs, f.losses, 0.9), ema_minimum(f.lrs, f.losses, 0.98)
    out["blowup"] = up
    return out


def spreads(finds: list[Find]) -> dict[str, float]:
    per = [answers(f) for f in finds]
    return {a: spread([p[a] for p in per]) for a in ANSWERS}


def cached(name: str, seeds: int) -> list[Find] | None:
    path = FINDS / f"{name}.json"
    if not path.exists():
        return None
    runs = sorted(json.loads(path.read_text())["runs"], key=lambda r: r["seed"])[:seeds]
    return [Find.from_cache(r) for r in runs]


def _fmt(v: float) -> str:
    return "   -" if math.isnan(v) else f"{v:4.2f}"


def cached_table(seeds: int) -> tuple[str, Spreads]:
    """Part 1: the spread of every answer on the cached finds, per family (median / worst task) and overall."""
    by_task = {n: spreads(fs) for n in CORPUS if (fs := cached(n, seeds)) is not None}
    fams: dict[str, list[str]] = {}
    for n in by_task:
        fams.setdefault(CORPUS[n].family, []).append(n)
    head = f"{'family':<13}{'n':>3} " + "".join(f"{a:>12}" for a in ANSWERS)
    lines = [f"1. Spread over {seeds} seeds (decades) of each answer on the same sweeps, from the cached finds "
             "(benchmarks/data/corpus_lr_finds): median over the family's tasks / worst task", head, "-" * len(head)]
    fam_med: dict[str, dict[str, float]] = {}
    for fam, names in fams.items():
        fam_med[fam] = {a: float(np.nanmedian([by_task[n][a] for n in names])) for a in ANSWERS}
        cells = [f"{_fmt(fam_med[fam][a])}/{_fmt(float(np.nanmax([by_task[n][a] for n in names])))}" for a in ANSWERS]
        lines.append(f"{fam:<13}{len(names):>3} " + "".join(f"{c:>12}" for c in cells))
    lines.append("-" * len(head))
    med = {a: float(np.nanmedian([s[a] for s in by_task.values()])) for a in ANSWERS}
    worst_fam = {a: max(m[a] for m in fam_med.values()) for a in ANSWERS}
    lines.append(f"{'all: median':<17}" + "".join(f"{_fmt(med[a]):>12}" for a in ANSWERS))
    lines.append(f"{'worst family':<17}" + "".join(f"{_fmt(worst_fam[a]):>12}" for a in ANSWERS))
    worst = {a: float(np.nanmax([s[a] for s in by_task.values()])) for a in ANSWERS}
    lines.append(f"{'worst task':<17}" + "".join(f"{_fmt(worst[a]):>12}" for a in ANSWERS))
    refined = [n for n in by_task if all(f.refined for f in cached(n, seeds) or [])]
    diff = [by_task[n]["final"] - by_task[n]["curve"] for n in refined]
    lines += ["", f"Refined tasks ({len(refined)} of {len(by_task)}, the others' final answer is the curve's): final minus "
              f"curve spread, median {np.median(diff):+.2f}, smaller on {sum(d < 0 for d in diff)}, larger on "
              f"{sum(d > 0 for d in diff)}; final spread median {np.median([by_task[n]['final'] for n in refined]):.2f}, "
              f"curve {np.median([by_task[n]['curve'] for n in refined]):.2f}.",
              "final: lr_find's suggestion; curve: its curve's rule (suggestions['tunekit']) before the short runs; start: "
              "where the short runs start; valley, steepest, min/10, lightning: the peer rules on the same sweeps; min: "
              "the LR at the smoothed loss's minimum (bandwidth h = 5% of the sweep's span), min 2h/4h: smoothed 2x/4x "
              "wider; ema .9/.98: at the minimum of a moving average; blowup: where the smoothed loss rises 10% over its "
              "minimum for good. '-': fewer than two seeds gave an answer."]
    return "\n".join(lines), {"median": med, "worst family": worst_fam}


def with_init(task: Task, init: int) -> Task:
    """The task with its model built from seed ``init`` whatever seed lr_find builds it with (make_model seeds
    torch's CPU generator inside a fork of it, then calls the factory: seeding again inside wins)."""
    factory = task.model

    def model() -> torch.nn.Module:
        torch.default_generator.manual_seed(init)
        return factory()

    return dataclasses.replace(task, model=model)


def find_once(name: str, order: int, init: int, variant: str = "plain") -> Find:
    """corpus_lr.find_once's call, the model built from ``init`` and lr_find seeded with ``order``; a
    ``variant`` spends twice the sweep: two sweeps (``repeats=2``) or one twice as long."""
    e = entry(name)
    task = e.make()
    if not e.finder_val:
        task = dataclasses.replace(task, val_data=None)
    r = tunekit.lr_find(with_init(task, init), run_steps=e.run_steps, seed=order, progress=False,
                        step=StepSettings(device="cpu"), sweep=VARIANTS[variant])
    losses = [v if v is not None and math.isfinite(v) else None for v in r.losses]
    return Find(order, init, r.suggestion, r.suggestions.get("tunekit"), r.refinement is not None, bool(r.confident),
                str(r.settings.family), [float(x) for x in r.lrs], losses, round(r.seconds, 3),
                r.refinement.start if r.refinement is not None else None, variant, int(r.samples))


# What a condition changes in lr_find's sweep (the default; two sweeps, their rules' median; a sweep twice as long).
VARIANTS = {"plain": Sweep(), "2 sweeps": Sweep(repeats=2), "2x sweep": Sweep(sweep_steps=2 * SWEEP_STEPS)}
Key = tuple[int, int, str]


def pairs(seeds: int) -> dict[str, list[Key]]:
    """Each condition's (order, init, variant). "2 sweeps" takes even seeds: its repeat runs data order seed + 1,
    so no two answers share an order."""
    return {"order": [(s, 0, "plain") for s in range(seeds)], "init": [(0, s, "plain") for s in range(seeds)],
            "both": [(s, s, "plain") for s in range(seeds)],
            "2 sweeps": [(2 * s, 2 * s, "2 sweeps") for s in range(seeds)],
            "2x sweep": [(s, s, "2x sweep") for s in range(seeds)]}


def new_runs(name: str, seeds: int, rerun: bool, root: Path) -> dict[Key, Find]:
    """Every (order, init, variant) the conditions need, read from ``root``/<name>.json or run and added there."""
    path = root / f"{name}.json"
    have = (json.loads(path.read_text()) if path.exists() and not rerun
            else {"command": report.command(), "commit": report.commit(), "runs": []})
    done = {(r["order"], r["init"], r["variant"]): Find(**r) for r in have["runs"]}
    for key in dict.fromkeys(k for ks in pairs(seeds).values() for k in ks):
        if key not in done:
            done[key] = f = find_once(name, *key)
            have["runs"].append(dataclasses.asdict(f))
            path.parent.mkdir(parents=True, exist_ok=True)
            tmp = path.with_suffix(f".tmp{os.getpid()}")
            tmp.write_text(json.dumps(have) + "\n")
            tmp.replace(path)
            print(f"  {name} order {key[0]} init {key[1]} {key[2]}: {f.suggestion or math.nan:.3g} "
                  f"(curve {f.curve or math.nan:.3g}, {f.seconds:.1f}s)", flush=True)
    return done


def cheapest(seeds: int) -> list[str]:
    """The task of each family whose cached finds took the least time (median over seeds)."""
    best: dict[str, tuple[float, str]] = {}
    for n, e in CORPUS.items():
        fs = cached(n, seeds)
        if fs:
            t = float(np.median([f.seconds for f in fs]))
            if e.family not in best or t < best[e.family][0]:
                best[e.family] = (t, n)
    return [n for _, n in best.values()]


SPLIT = ("final", "start", "curve")  # the answers part 2 reports under each condition


def _median(rows: dict[str, dict[str, dict[str, float]]], names: list[str], cond: str, answer: str) -> float:
    """The median over ``names`` of the spread of ``answer`` under ``cond`` (nan where none has it)."""
    v = [rows[n][cond][answer] for n in names if cond in rows[n]]
    return float(np.nanmedian(v)) if v else math.nan


def split_table(names: list[str], seeds: int, rerun: bool, root: Path) -> tuple[str, Spreads, dict[str, Spreads]]:
    """Part 2: per task, the spread under each condition (and the cached all-varied runs), with medians."""
    rows: dict[str, dict[str, dict[str, float]]] = {}
    cost: dict[str, list[float]] = {c: [] for c in CONDITIONS}
    same = compared = start_ok = starts = 0
    for name in names:
        done = new_runs(name, seeds, rerun, root)
        rows[name] = {c: spreads([done[k] for k in ks]) for c, ks in pairs(seeds).items()}
        base = float(np.median([done[k].samples for k in pairs(seeds)["both"]]))
        for c, ks in pairs(seeds).items():
            cost[c].append(float(np.median([done[k].samples for k in ks])) / base)
        for f in done.values():  # the start read back from the curve (as part 1 does) against the one recorded
            if f.variant == "plain" and f.start is not None:
                starts += 1
                got = answers(dataclasses.replace(f, start=None))["start"]
                start_ok += got is not None and abs(math.log10(got / f.start)) < 1e-6
        old = cached(name, seeds)
        if old:
            rows[name]["cached"] = spreads(old)
            for f in old:
                fresh = done.get((f.order, f.init, "plain"))
                if fresh is not None and f.suggestion and fresh.suggestion:
                    compared += 1
                    same += abs(math.log10(f.suggestion / fresh.suggestion)) < 1e-6
    conds = (*CONDITIONS, "cached")
    w = 22
    head = f"{'task':<25}{'family':<13}" + "".join(f"{c:>{w}}" for c in conds)
    lines = [f"2. New runs, {seeds} seeds a condition: spread (decades) of the final suggestion / where the short runs "
             "start / the curve's answer", head, "-" * len(head)]
    for name, r in rows.items():
        lines.append(f"{name:<25}{CORPUS[name].family:<13}" + "".join(
            f"{' / '.join(_fmt(r[c][a]) for a in SPLIT) if c in r else '-':>{w}}" for c in conds))
    lines.append("-" * len(head))
    med = {c: {a: float(np.nanmedian([r[c][a] for r in rows.values() if c in r] or [math.nan])) for a in SPLIT}
           for c in conds}
    mean = {c: {a: float(np.nanmean([r[c][a] for r in rows.values() if c in r] or [math.nan])) for a in SPLIT}
            for c in conds}
    for label, v in (("median over tasks", med), ("mean over tasks", mean)):
        lines.append(f"{label:<38}" + "".join(f"{' / '.join(_fmt(v[c][a]) for a in SPLIT):>{w}}" for c in conds))
    fams: dict[str, list[str]] = {}
    for name in rows:
        fams.setdefault(CORPUS[name].family, []).append(name)
    cheap = [n for n in cheapest(seeds) if n in rows]
    if len(fams) < len(rows):  # more than one task in a family: the families' medians, and the cheapest's
        lines += ["", "Per family (median over its tasks):"]
        for label, names in [*((f"{fam} ({len(ns)})", ns) for fam, ns in fams.items()),
                             ("the cheapest of each family", cheap)]:
            lines.append(f"{label:<38}" + "".join(
                f"{' / '.join(_fmt(_median(rows, names, c, a)) for a in SPLIT):>{w}}" for c in conds))
    by_fam = {fam: {c: {a: _median(rows, ns, c, a) for a in SPLIT} for c in conds} for fam, ns in fams.items()}
    for c in CONDITIONS:
        med[c]["worst family"] = max(f[c]["final"] for f in by_fam.values())
    lines.append(f"{'worst family (final)':<38}" + "".join(f"{_fmt(med[c]['worst family']):>{w}}" for c in CONDITIONS))
    lines.append(f"{'cost (samples) x both':<38}" + "".join(f"{np.median(cost[c]):>{w}.2f}" for c in CONDITIONS))
    for c in CONDITIONS:
        med[c]["cost"] = float(np.median(cost[c]))
    lines += ["order: lr_find's seed varied (the sweep's and the short runs' batch order, dropout), the model built from "
              "seed 0; init: lr_find's seed 0, the model built from the varied seed; both: both varied, as the corpus "
              "calls it, rerun on this commit; 2 sweeps: both varied, Sweep(repeats=2) (each rule's median over two "
              "sweeps of other orders; seeds 0, 2, 4, ...); 2x sweep: both varied, Sweep(sweep_steps=200); cached: "
              "benchmarks/data/corpus_lr_finds (older commits). cost: median of lr_find's samples over 'both''s.",
              f"The rerun 'both' reproduced {same} of {compared} cached suggestions (to 1e-6 decades); part 1's start, "
              f"read back from the curve, matched the recorded one on {start_ok} of {starts} refined runs."]
    return "\n".join(lines), med, by_fam


def _leads(a: float, b: float, names: tuple[str, str]) -> str:
    """Which of two spreads is the larger, or neither (within 0.05 decades)."""
    return "neither leads" if abs(a - b) < 0.05 else f"{names[0] if a > b else names[1]} leads"


def _change(before: float, after: float) -> str:
    return "barely change" if abs(after - before) < 0.05 else "narrow" if after < before else "widen"


def findings(part1: Spreads, part2: Spreads, fams: dict[str, Spreads], n: int) -> str:
    """The plain findings, their figures from the tables."""
    m = part1["median"]
    order, init, both, two, longer = (part2[c] for c in CONDITIONS)
    by_init = [f for f, v in fams.items() if v["init"]["final"] > v["order"]["final"] + 0.1]
    by_order = [f for f, v in fams.items() if v["order"]["final"] > v["init"]["final"] + 0.1]
    return "\n".join([
        "Findings (medians over tasks, decades; suggestions, not decisions):",
        f"- Cached corpus: the curve's answer spreads {m['curve']:.2f} over seeds, where the short runs start "
        f"{m['start']:.2f}, the final answer {m['final']:.2f} (worst family {part1['worst family']['final']:.2f}): the "
        f"short runs {_change(m['curve'], m['final'])} the spread. Peers on the same sweeps: " + ", ".join(f"{p} {m[p]:.2f}" for p in PEERS)
        + f". The curve's minimum spreads {m['min']:.2f}; smoothed 2x/4x wider {m['min 2h']:.2f}/{m['min 4h']:.2f} "
        "(a wider kernel drags the minimum off a sharp valley: more smoothing of one curve is no cure).",
        f"- Split on {n} tasks (final / start): order alone {order['final']:.2f} / {order['start']:.2f}, init alone "
        f"{init['final']:.2f} / {init['start']:.2f}, both {both['final']:.2f} / {both['start']:.2f} (worst family "
        f"{both['worst family']:.2f}): {_leads(order['final'], init['final'], ('order', 'init'))} overall"
        + ("; the two add up." if both["final"] > max(order["final"], init["final"]) + 0.05 else "."),
        f"- By family: init leads in {', '.join(by_init) or 'none'}; order in {', '.join(by_order) or 'none'} (the short "
        "runs all train from the one initial model). From where they start to their answer, the short runs "
        + "; ".join(f"{_change(part2[c]['start'], part2[c]['final'])} the spread under {c} ({part2[c]['start']:.2f} to "
                    f"{part2[c]['final']:.2f})" for c in ("order", "init", "both")) + ".",
        f"- At about 2x: two sweeps {two['final']:.2f} (worst family {two['worst family']:.2f}, samples x{two['cost']:.2f}), "
        f"a sweep twice as long {longer['final']:.2f} (worst family {longer['worst family']:.2f}, x{longer['cost']:.2f}), "
        "against the issue's 0.2 / 0.35 / 2x. Worth trying next: the longer sweep (the curve's points twice as dense), "
        "or short runs from two inits where a Task can build a second model (not measured here).",
    ])


def main() -> None:
    ap = argparse.ArgumentParser(prog="python -m benchmarks.lr_spread", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tasks", default="", help="the tasks of part 2 (default: the cheapest of each family)")
    ap.add_argument("--all", action="store_true", help="part 2 on every corpus task")
    ap.add_argument("--seeds", type=int, default=5)
    ap.add_argument("--rerun", action="store_true", help="run part 2's finds again instead of reading the cache")
    ap.add_argument("--quick", action="store_true", help=f"part 2 on {QUICK_TASK}, two seeds, in a temporary folder")
    args = ap.parse_args()
    torch.set_num_threads(1)
    if args.quick:
        names, seeds, root = [QUICK_TASK], 2, Path(tempfile.mkdtemp(prefix="tk_lr_spread_"))
    else:
        names = list(CORPUS) if args.all else pick(args.tasks) if args.tasks else cheapest(args.seeds)
        seeds, root = args.seeds, RUNS
    part1, med1 = cached_table(5 if args.quick else seeds)
    part2, med2, fams = split_table(names, seeds, args.rerun, root)
    report.write("lr_spread", "Where the LR finder's seed-to-seed spread comes from",
                 "\n\n".join([part1, part2, findings(med1, med2, fams, len(names))]), quick=args.quick)


if __name__ == "__main__":
    main()
