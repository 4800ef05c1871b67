"""The LR suggestion on the whole corpus, family by family, against the rules users have.

For every corpus task: ``tunekit.lr_find(task, run_steps=<the planned run>, seed=s)`` for five finder
seeds, called as a user calls it (a small-data task without its validation set). Each answer is scored by
the task's ground-truth grid (``python -m benchmarks.corpus_grid``): regret = (L(lr) - L*) / L*, L
interpolated over log LR on the seeds' median curve, 10 seeds at the LRs where the best may lie
(``--window 10``; L* their median at the best), 2 elsewhere (``grid.truth``). Beside it, on the same sweeps, the rules users
have: fastai's valley, the steepest slope (torch-lr-finder), the minimum over 10, and Lightning's
``suggestion()`` (the steepest gradient of its smoothed loss, skipping 10 points at the start and 1 at
the end). Spread: log10(max / min) of the five seeds' answers. Cost: the samples lr_find drew, as a
share of the planned run's (run x batch).

Leave-one-family-out (``benchmarks/harness/lofo.py``): among curve-only rules (a point of the curve,
divided by k, one k for all or one per optimizer family), the rule chosen on the other families is
scored on the family left out. tunekit's shipped rule was chosen on the older 12-task LR benchmark:
its tasks that the corpus keeps are marked * (in-sample).

    python -m benchmarks.corpus_lr [--tasks a,b] [--seeds 5] [--seed-from 0] [--refind] [--quick]

Finder runs are cached in benchmarks/data/corpus_lr_finds/ (``--refind`` runs them again).
"""

from __future__ import annotations

import argparse
import dataclasses
import itertools
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
from benchmarks.harness import grid, lofo, report
from tunekit import StepSettings
from tunekit.probes import lr_rules as suggest
from tunekit.probes import short_runs

FINDS = Path(__file__).resolve().parent / "data" / "corpus_lr_finds"
PEERS = ("valley", "steepest", "min/10", "lightning")
DIVISORS = (1, 1.5, 2, 3, 5, 10)
LONG = 1000  # planned runs of at least this many updates are "long" (the LR issue's split)


def in_sample() -> set[str]:
    """The corpus tasks tunekit's shipped LR rule was chosen on (the older 12-task benchmark)."""
    from benchmarks.lr_tasks import TASKS

    return set(TASKS)


def lightning_rule(lrs: list[float], losses: list[float], skip_begin: int = 10, skip_end: int = 1) -> float | None:
    """Lightning's ``_LRFinder.suggestion()``: its loss is an exponential moving average (beta 0.98,
    bias-corrected) of the raw losses; the suggestion is the LR at the steepest (most negative)
    gradient of that curve, the first ``skip_begin`` and last ``skip_end`` points left out."""
    beta, avg, smoothed = 0.98, 0.0, []
    for i, v in enumerate(losses):
        if v is None or not math.isfinite(v):
            break
        avg = beta * avg + (1 - beta) * v
        smoothed.append(avg / (1 - beta ** (i + 1)))
    y = np.array(smoothed[skip_begin: len(smoothed) - skip_end])
    if len(y) < 2:
        return None
    return float(lrs[skip_begin + int(np.gradient(y).argmin())])


def find_once(name: str, seed: int, in_hand: bool = False) -> dict[str, Any]:
    """One lr_find of the task: told its planned run; or (``in_hand``) called as a notebook user calls it,
    on a model in hand with its data, loss and optimizer and no length, so its default decides."""
    e = entry(name)
    task = e.make()
    if not e.finder_val:
        task = dataclasses.replace(task, val_data=None)
    if in_hand:
        model = task.make_model(seed)
        r = tunekit.lr_find(model, task.train_data, task.loss, task.make_optimizer(model),
                            compute_loss=task.compute_loss, val_data=task.val_data,
                            step=StepSettings(batch_size=task.batch_size,
                                              accumulation_steps=task.defaults.get("accumulation_steps"), device="cpu"),
                            seed=seed, progress=False)
    else:
        r = tunekit.lr_find(task, run_steps=e.run_steps, seed=seed, progress=False, step=StepSettings(device="cpu"))
    ref = r.refinement
    losses = [v if v is not None and math.isfinite(v) else None for v in r.losses]
    return {"seed": seed, "suggestion": r.suggestion, "suggestions": r.suggestions,
            "lightning": lightning_rule(r.lrs, losses), "lrs": list(r.lrs), "losses": losses,
            "family": r.settings.family, "samples": int(r.samples), "sweep_updates": len(r.lrs),
            "refine_updates": int(ref.updates or 0) if ref else 0, "refined": ref is not None, "confident": bool(r.confident),
            "seconds": round(r.seconds, 3), "not_refined": r.settings.not_refined, "run_steps": r.settings.run_steps,
            # The short runs (their best before the carry, whether the blow-up capped it): what an interval may use.
            "short_lrs": list(ref.last.lrs) if ref else [], "short_scores": _finite(ref.last.scores) if ref else [],
            "short_best": ref.best_lr if ref else None, "capped": bool(ref.capped) if ref else False,
            "passes": r.settings.run_passes, "passes_divisor": ref.passes_divisor if ref else 1.0,
            "interval": list(r.interval) if r.interval else None}


def _finite(xs: list[float]) -> list[float | None]:
    return [x if x is not None and math.isfinite(x) else None for x in xs]


def finds(name: str, seeds: int, refind: bool, root: Path = FINDS, in_hand: bool = False,
          first: int = 0) -> list[dict[str, Any]]:
    """Finder seeds ``first`` .. ``first + seeds - 1`` of the task, from the cache in ``root`` or run (and cached)."""
    path = root / f"{name}.json"
    have = json.loads(path.read_text()) if path.exists() and not refind else {"command": report.command(),
                                                                              "commit": report.commit(), "runs": []}
    done = {r["seed"] for r in have["runs"]}
    for s in range(first, first + seeds):
        if s not in done:
            have["runs"].append(find_once(name, s, in_hand))
            path.parent.mkdir(parents=True, exist_ok=True)
            tmp = path.with_suffix(f".tmp{os.getpid()}")
            tmp.write_text(json.dumps(have) + "\n")
            tmp.replace(path)
    return sorted((r for r in have["runs"] if first <= r["seed"] < first + seeds), key=lambda r: r["seed"])


def spread(lrs: list[float | None]) -> float:
    v = [x for x in lrs if x]
    return float(math.log10(max(v) / min(v))) if len(v) >= 2 else math.nan


@dataclasses.dataclass
class TaskScore:
    name: str
    truth: grid.Truth
    picks: dict[str, list[float | None]]  # rule -> the seeds' LRs
    share: float  # lr_find's samples / the planned run's
    refined: bool
    diverged_lr: float | None = None  # the lowest grid LR at which a planned run diverged (any seed)

    def diverged(self, rule: str) -> int:
        """How many of the rule's answers sit at or above (within a sixth of a decade of) a grid LR that diverged."""
        if self.diverged_lr is None:
            return 0
        return sum(1 for lr in self.picks[rule] if lr and lr * 10 ** (1 / 6) >= self.diverged_lr)

    def regret(self, rule: str) -> float:
        return float(np.mean([self.truth.regret(lr) for lr in self.picks[rule]]))

    def normalised(self, rule: str) -> float:
        """The mean over seeds of (L(lr) - L*) / (L_untrained - L*): the share of the learnable loss the LR loses."""
        return float(np.mean([self.truth.normalised(lr) for lr in self.picks[rule]]))


def score_task(name: str, runs: list[dict[str, Any]], truth: grid.Truth, root: Path = grid.GRIDS) -> TaskScore:
    e = CORPUS[name]
    picks: dict[str, list[float | None]] = {"tunekit": [r["suggestion"] for r in runs]}
    for p in PEERS:
        picks[p] = [r["lightning"] if p == "lightning" else r["suggestions"].get(p) for r in runs]
    planned = e.run_steps * e.batch
    g = grid.load(name, root=root)
    bad = [r["lr"] for r in (g or {}).get("runs", []) if r["diverged"]]
    return TaskScore(name, truth, picks, float(np.median([r["samples"] / planned for r in runs])),
                     any(r["refined"] for r in runs), min(bad) if bad else None)


def curve_rules() -> dict[str, Any]:
    rules: dict[str, Any] = {f"{a}/{k:g}": suggest.divided(a, k) for a in suggest.ANCHORS for k in DIVISORS}
    for a in suggest.ANCHORS:
        for ks in DIVISORS:
            for ka in DIVISORS:
                rules[f"{a}/(sgd {ks:g}, adaptive {ka:g})"] = suggest.divided(a, {"sgd": ks, "adaptive": ka})
    return rules


def lofo_table(scores: dict[str, TaskScore], runs: dict[str, list[dict[str, Any]]]) -> str:
    rules = curve_rules()
    regret: dict[str, dict[str, float]] = {r: {} for r in rules}
    for name, ts in scores.items():
        curves = [suggest.prepare(r["lrs"], [math.nan if v is None else v for v in r["losses"]], family=r["family"])
                  for r in runs[name]]
        for rname, rule in rules.items():
            regret[rname][name] = float(np.mean([ts.truth.regret(rule(c) if len(c.lrs) >= 3 else None) for c in curves]))
    held = lofo.select(regret, {n: CORPUS[n].family for n in scores})
    lines = ["Leave-one-family-out among curve-only rules (each family's rule chosen on the other families):",
             f"{'held-out family':<16}{'rule chosen on the others':<33}{'mean':>8}{'worst':>8}   tunekit's shipped rule: mean / worst"]
    for fam, h in held.items():
        ship = [scores[t].regret("tunekit") for t in h.scores]
        lines.append(f"{fam:<16}{h.rule:<33}{100 * h.mean:7.1f}%{100 * h.worst:7.1f}%   "
                     f"{100 * np.mean(ship):.1f}% / {100 * max(ship):.1f}%")
    means = [h.mean for h in held.values()]
    lines.append(f"over families: held-out mean {100 * np.mean(means):.1f}%, worst family {100 * max(means):.1f}%")
    return "\n".join(lines)


PASSES = (0.0, 0.1, 0.2, 0.3, 0.5)


def passes_table(scores: dict[str, TaskScore], runs: dict[str, list[dict[str, Any]]]) -> str:
    """The curve's own suggestion carried to the planned run's passes over its data (divided by passes**k), k
    chosen leave-one-family-out on the normalised regret: what lr_find gives where no short runs check it
    (tunekit.probes.short_runs.CURVE_PASSES)."""
    norm: dict[str, dict[str, float]] = {f"k={k:g}": {} for k in PASSES}
    for name, ts in scores.items():
        lrs = [r["suggestions"].get("tunekit") for r in runs[name]]
        passes = [max(1.0, r.get("passes") or 1.0) for r in runs[name]]
        for k in PASSES:
            norm[f"k={k:g}"][name] = float(np.mean([ts.truth.normalised(lr / p ** k if lr else None)
                                                    for lr, p in zip(lrs, passes)]))
    held = lofo.select(norm, {n: CORPUS[n].family for n in scores})
    lines = ["The curve's suggestion alone, divided by the planned run's passes over its data to the power k (k chosen "
             "on the other families;", "normalised regret, mean over tasks; lr_find does this where no short runs "
             "check the curve: CURVE_PASSES):",
             f"{'held-out family':<16}{'chosen':>8}{'held out':>10}{'k=0':>8}   passes (median over tasks)"]
    for fam, h in held.items():
        flat = np.mean([norm["k=0"][t] for t in h.scores])
        passes = np.median([np.median([r.get("passes") or 0 for r in runs[t]]) for t in h.scores])
        lines.append(f"{fam:<16}{h.rule:>8}{100 * h.mean:9.2f}%{100 * flat:7.2f}%   {passes:.1f}")
    lines.append(f"over families: held out {100 * np.mean([h.mean for h in held.values()]):.2f}%, k=0 "
                 f"{100 * np.mean([np.mean([norm['k=0'][t] for t in h.scores]) for h in held.values()]):.2f}%")
    return "\n".join(lines)


SHORT_FROM = (1.0, 2.0, 4.0, 8.0)  # passes where the short runs' carry starts to divide
SHORT_RATES = (0.0, 0.25, 0.5, 0.75, 1.0)


def short_passes_table(scores: dict[str, TaskScore], runs: dict[str, list[dict[str, Any]]]) -> str:
    """The short runs' carried number divided by (passes / from) ** rate for a planned run of more passes over its
    data than ``from`` (at most 10**SHORT_PASSES_MOST), (from, rate) chosen leave-one-family-out on the normalised
    regret: tunekit.probes.short_runs.SHORT_PASSES_FROM, SHORT_PASSES. Finds without short runs keep their number."""
    norm: dict[str, dict[str, float]] = {}
    for start, rate in itertools.product(SHORT_FROM, SHORT_RATES):
        if rate == 0 and start != SHORT_FROM[0]:
            continue
        key = "none" if rate == 0 else f"{start:g}:{rate:g}"
        norm[key] = {}
        for name, ts in scores.items():
            lrs = []
            for r in runs[name]:
                lr = r["suggestion"]
                if lr and r.get("short_best") is not None:  # before lr_find's own division, then this rule's
                    lr = lr * r.get("passes_divisor", 1.0) / short_runs.passes_divisor(r.get("passes"), start, rate)
                lrs.append(lr)
            norm[key][name] = float(np.mean([ts.truth.normalised(lr) for lr in lrs]))
    held = lofo.select(norm, {n: CORPUS[n].family for n in scores})
    shipped = f"{short_runs.SHORT_PASSES_FROM:g}:{short_runs.SHORT_PASSES:g}"
    lines = ["The short runs' carried number divided by (passes / from) ** rate beyond `from` passes over the data "
             f"(at most {10 ** short_runs.SHORT_PASSES_MOST:.2g}x), from:rate chosen on the other families;",
             f"normalised regret, mean over tasks; lr_find ships {shipped} (SHORT_PASSES_FROM, SHORT_PASSES):",
             f"{'held-out family':<16}{'chosen':>8}{'held out':>10}{'none':>8}{shipped:>8}"]
    for fam, h in held.items():
        none = np.mean([norm["none"][t] for t in h.scores])
        ship = np.mean([norm[shipped][t] for t in h.scores]) if shipped in norm else math.nan
        lines.append(f"{fam:<16}{h.rule:>8}{100 * h.mean:9.2f}%{100 * none:7.2f}%{100 * ship:7.2f}%")
    mean = lambda key: 100 * np.mean([np.mean([norm[key][t] for t in h.scores]) for h in held.values()])  # noqa: E731
    lines.append(f"over families: held out {100 * np.mean([h.mean for h in held.values()]):.2f}%, none {mean('none'):.2f}%"
                 + (f", {shipped} in-sample {mean(shipped):.2f}%" if shipped in norm else ""))
    return "\n".join(lines)


def family_table(scores: dict[str, TaskScore]) -> str:
    fams: dict[str, list[TaskScore]] = {}
    for ts in scores.values():
        fams.setdefault(CORPUS[ts.name].family, []).append(ts)
    head = (f"{'family':<13}{'n':>3}  {'tunekit mean':>12}{'worst':>8}{'spread':>8}{'cost':>7}{'div':>5}  "
            + "".join(f"{p + ' mean/worst':>21}" for p in PEERS))
    lines = ["Regret at the planned run, per family (mean over tasks of the mean over finder seeds; worst task):",
             head, "-" * len(head)]
    overall: dict[str, list[float]] = {r: [] for r in ("tunekit", *PEERS)}
    for fam, tss in fams.items():
        cells = []
        for r in ("tunekit", *PEERS):
            regs = [ts.regret(r) for ts in tss]
            overall[r].append(float(np.mean(regs)))
            cells.append((100 * float(np.mean(regs)), 100 * max(regs)))
        sp = float(np.nanmedian([spread(ts.picks["tunekit"]) for ts in tss]))
        cost = float(np.median([ts.share for ts in tss]))
        div = sum(ts.diverged("tunekit") for ts in tss)
        lines.append(f"{fam:<13}{len(tss):>3}  {cells[0][0]:11.1f}%{cells[0][1]:7.1f}%{sp:8.2f}{100 * cost:6.1f}%{div:>5}  "
                     + "".join(f"{m:12.1f}% /{w:6.1f}%" for m, w in cells[1:]))
    lines.append("-" * len(head))
    lines.append("over families (mean of family means; worst family): " + ", ".join(
        f"{r} {100 * np.mean(v):.1f}% / {100 * max(v):.1f}%" for r, v in overall.items()))
    for label, keep in (("planned runs < 1,000 updates", lambda e: e.run_steps < LONG),
                        (">= 1,000 updates", lambda e: e.run_steps >= LONG)):
        sel = [ts for ts in scores.values() if keep(CORPUS[ts.name])]
        if sel:
            lines.append(f"{label}: tunekit mean {100 * np.mean([ts.regret('tunekit') for ts in sel]):.1f}%, "
                         f"worst task {100 * max(ts.regret('tunekit') for ts in sel):.1f}% ({len(sel)} tasks)")
    lines.append("spread: median over the family's tasks of log10(max/min) of the 5 seeds' suggestions (decades); "
                 "cost: median of lr_find's samples / the planned run's; div: suggestions at or above (within a sixth "
                 "of a decade of) an LR whose planned run diverged on the grid")
    return "\n".join(lines)


def normalised_table(scores: dict[str, TaskScore]) -> str:
    """Per family, each rule's mean normalised regret (its worst task beside), the lowest marked; then the shipped
    rule's spread over the seeds (median over tasks, worst family): what the LR issue's done-when reads."""
    fams: dict[str, list[TaskScore]] = {}
    for ts in scores.values():
        fams.setdefault(CORPUS[ts.name].family, []).append(ts)
    rules = ("tunekit", *PEERS)
    head = f"{'family':<13}" + "".join(f"{r + ' mean/worst':>22}" for r in rules) + "  lowest"
    lines = ["Normalised regret (L(lr) - L*) / (L_untrained - L*), per family (mean over tasks of the mean over seeds; "
             "worst task); the grid's L* and untrained loss:", head, "-" * len(head)]
    lowest = 0
    for fam, tss in fams.items():
        cells = {r: [ts.normalised(r) for ts in tss] for r in rules}
        best = min(rules, key=lambda r: float(np.mean(cells[r])))
        lowest += best == "tunekit"
        lines.append(f"{fam:<13}" + "".join(f"{100 * np.mean(v):13.2f}% /{100 * max(v):5.1f}%" for v in cells.values())
                     + f"  {best}")
    spreads = {ts.name: spread(ts.picks["tunekit"]) for ts in scores.values()}
    worst = max(np.nanmedian([spreads[t.name] for t in tss]) for tss in fams.values())
    lines += ["-" * len(head), f"tunekit's mean is the lowest of the {len(rules)} rules on {lowest} of {len(fams)} "
              f"families; its spread over the seeds: median {np.nanmedian(list(spreads.values())):.2f} decades over "
              f"{len(spreads)} tasks, worst family {worst:.2f}"]
    return "\n".join(lines)


def task_table(scores: dict[str, TaskScore]) -> str:
    inside = in_sample()
    head = (f"{'task':<25}{'family':<13}{'run':>5}{'best lr':>9}{'tunekit (median)':>17}{'x best':>7}{'regret':>8}"
            f"{'spread':>7}{'cost':>7}{'seed sd':>8}  " + "".join(f"{p:>10}" for p in PEERS))
    lines = ["Per task (* the shipped rule's own benchmark: in-sample):", head, "-" * len(head)]
    for name, ts in scores.items():
        e = CORPUS[name]
        v = [x for x in ts.picks["tunekit"] if x]
        med = float(10 ** np.median(np.log10(v))) if v else math.nan
        lines.append(f"{name + ('*' if name in inside else ''):<25}{e.family:<13}{e.run_steps:>5}{ts.truth.best_lr:9.3g}"
                     f"{med:17.3g}{med / ts.truth.best_lr:7.2f}{100 * ts.regret('tunekit'):7.1f}%"
                     f"{spread(ts.picks['tunekit']):7.2f}{100 * ts.share:6.1f}%{100 * ts.truth.seed_sd:7.1f}%  "
                     + "".join(f"{100 * ts.regret(p):9.1f}%" for p in PEERS))
    lines.append("seed sd: the grid's seed-to-seed sd of the final loss at the best LR, as a share of L* (a regret "
                 "under it is within seed noise)")
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(prog="python -m benchmarks.corpus_lr", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tasks", default="")
    ap.add_argument("--seeds", type=int, default=5)
    ap.add_argument("--refind", action="store_true")
    ap.add_argument("--seed-from", type=int, default=0, help="the first finder seed (fresh seeds: 5, cached apart in "
                    "corpus_lr_finds_seeds5 and reported as corpus_lr_seeds5: the same code on seeds nothing was chosen on)")
    ap.add_argument("--quick", action="store_true", help="two tiny synthetic tasks, two seeds, in a temporary folder")
    ap.add_argument("--in-hand", action="store_true", help="not told the planned run: the model in hand, its data, "
                    "loss and optimizer (scored at the task's planned run); cached apart, reported as corpus_lr_in_hand")
    args = ap.parse_args()
    torch.set_num_threads(1)
    if args.quick:
        names, seeds = ["mlp_huber_sgdm", "mlp_bce_adam"], 2  # synthetic: no scikit-learn needed
        tmp = Path(tempfile.mkdtemp(prefix="tk_corpus_lr_"))
        grid_root, finds_root = tmp / "grid", tmp / "finds"
    else:
        names = pick(args.tasks) if args.tasks else list(CORPUS)
        seeds, grid_root, finds_root = args.seeds, grid.GRIDS, FINDS.with_name(FINDS.name + "_in_hand") if args.in_hand else FINDS
        if args.seed_from:
            finds_root = finds_root.with_name(f"{finds_root.name}_seeds{args.seed_from}")
    scores, runs = {}, {}
    for name in names:
        if not args.quick and grid.load(name, root=grid_root) is None:
            print(f"{name}: no grid yet (python -m benchmarks.corpus_grid --tasks {name}): left out", flush=True)
            continue
        truth = grid.ensure(name, 1 if args.quick else 2, root=grid_root, quiet=True)
        if not args.quick:  # 10 seeds where the best may lie (L*: their median at the best), 2 elsewhere
            truth = grid.truth(name, grid_root)
        runs[name] = finds(name, seeds, args.refind, finds_root, args.in_hand, args.seed_from)
        scores[name] = score_task(name, runs[name], truth, grid_root)
        print(f"  {name}: regret {100 * scores[name].regret('tunekit'):.1f}%", flush=True)
    if not scores:
        raise SystemExit("no task has a grid yet: run python -m benchmarks.corpus_grid first")
    body = "\n\n".join([family_table(scores), normalised_table(scores), lofo_table(scores, runs),
                         passes_table(scores, runs), short_passes_table(scores, runs), task_table(scores)])
    if args.in_hand:
        told = [f"{n}: {int(np.median([r['run_steps'] for r in runs[n]])):,} updates assumed, "
                f"{CORPUS[n].run_steps:,} planned" for n in scores]
        body = ("Not told the planned run (a model in hand: its default length), scored at the task's planned run:\n"
                + body + "\n\nThe planned run each call assumed (median over seeds):\n" + "\n".join(told))
    report_name = ("corpus_lr_in_hand" if args.in_hand else "corpus_lr") + (f"_seeds{args.seed_from}" if args.seed_from else "")
    title = "The LR suggestion on the task corpus, by family" + (
        f" (finder seeds {args.seed_from}-{args.seed_from + seeds - 1}: nothing was chosen on them)" if args.seed_from else "")
    report.write(report_name, title, body, quick=args.quick)


if __name__ == "__main__":
    main()
