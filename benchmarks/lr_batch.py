"""How the best peak LR moves with the batch, measured, and which rescaling rule predicts it (issue 19).

The search samples one LR (the LR at the range test's batch B0) and rescales it to each trial's
batch B by a rule: LR(B) = LR(B0) x (B / B0)^alpha. tunekit's default (``plan.lr_rule_for``) is
linear (alpha 1) for SGD and square root (alpha 0.5) for adaptive optimizers. This measures
the best LR at B0/4 .. 4 B0 on the tasks of ``search_tasks.py`` under both budgets a trial can
have:

- ``samples``: every batch draws the same samples (the task's full run at B0), so a smaller
  batch makes more updates (a budget in samples, epochs, tokens or updates, or device time
  where a step's time grows with the batch, as on a CPU);
- ``updates``: every batch makes the task's number of updates (device time on a device that
  is not saturated: a larger batch costs no more time per step).

For each (task, budget, batch): final validation losses over an LR grid (3 a decade, one decade
either side of the task's best LR at B0, times the batch ratio's square root so that both
rules' predictions stay inside), averaged over 2 training seeds; the best LR is the
parabola's vertex through the grid's minimum and its neighbours (log LR). Each rule's regret
at a batch is (L(rule's LR) - L*) / L*, L interpolated over log LR on the mean curve,
L* the curve's minimum; a task's regret is the mean over its batches other than B0.

Rules: an exponent below B0 and one above it, each in 0, 0.25, 0.5, 0.75, 1, for all optimizers,
or per optimizer family (SGD; adaptive; a family absent from the tasks a rule is chosen on gets
the one for all). ``--loto``: for each task the rule is chosen on the other tasks (the lowest
mean regret, per budget) and its regret on the held-out task is the figure. Printed beside it:
tunekit's rule (chosen from these figures, so in-sample) and the textbook one it replaced
(linear for SGD, square root for adaptive optimizers, whatever the budget).

    python -m benchmarks.lr_batch [--tasks a,b] [--loto]   # runs what the cache lacks

Runs are cached in ``benchmarks/.cache/lr_batch/TASK.json`` (``--cache DIR``); one process per
core (``--tasks``) fills them in parallel. The tables are written to benchmarks/data/lr_batch_report.txt.

    python -m benchmarks.lr_batch --quick   # a smoke run, not a figure: mlp_sgd and long_adam shrunk (16 hidden
                                            # units, 2,048 samples, 40 updates), batches B0/2..2 B0, 1 seed, --loto,
                                            # in a temporary folder (its report too)
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch

from benchmarks._common import recorded  # noqa: E402
from benchmarks.harness import report as harness_report  # noqa: E402
from benchmarks.search_tasks import TASKS  # noqa: E402

import tunekit  # noqa: E402
from tunekit.hpsearch.plan import lr_rule_for  # noqa: E402
from tunekit.probes.lr_rules import bracket_minimum  # noqa: E402

MULTS = (0.25, 0.5, 1.0, 2.0, 4.0)  # batches, as multiples of the task's own
SEEDS = (1000, 1001)
SPAN = 1.0  # decades either side of the centre
PER_DECADE = 3
ALPHAS = (0.0, 0.25, 0.5, 0.75, 1.0)
BUDGETS = ("samples", "updates")
EVALS = 8
# The task's best LR at its own batch (benchmarks/search_efficiency.py's grid, seeds 1000..1002):
# the grid of every batch centres on it.
CENTRE = {"cnn_adamw": 0.0215, "mlp_sgd": 0.0464, "tiny_lm": 0.00464, "long_adam": 0.01}
DEFAULT_CACHE = Path(__file__).resolve().parent / ".cache" / "lr_batch"
# --quick: an SGD task and an adaptive one (so that --loto has a rule to choose), shrunk; 3 batches, 1 seed.
QUICK_CONFIG = {"mlp_sgd": {"hidden": 16, "n_train": 2048, "max_steps": 40},
                "long_adam": {"hidden": 16, "n_train": 2048, "max_steps": 40}}
QUICK_MULTS, QUICK_SEEDS = (0.5, 1.0, 2.0), (1000,)


def family(task: tunekit.Task) -> str:
    opt = task.make_optimizer(task.make_model(0))
    return "sgd" if isinstance(opt, torch.optim.SGD) else "adaptive"


Alpha = tuple[float, float]  # the exponent below the reference batch, and above it
ALPHA_OF: dict[str, Alpha] = {"linear": (1.0, 1.0), "sqrt": (0.5, 0.5), "none": (0.0, 0.0), "sqrt_below": (0.5, 0.0)}


def tunekit_alpha(fam: str, budget: str) -> Alpha:
    """tunekit's rule (``plan.lr_rule_for``) for this family and budget, as exponents."""
    opt = torch.optim.SGD([torch.zeros(1)], lr=0.1) if fam == "sgd" else torch.optim.AdamW([torch.zeros(1)])
    return ALPHA_OF[lr_rule_for(opt, budget)]


def textbook_alpha(fam: str) -> Alpha:
    """The rule tunekit had before this benchmark: linear for SGD, square root for adaptive optimizers."""
    return (1.0, 1.0) if fam == "sgd" else (0.5, 0.5)


def grid_lrs(centre: float, mult: float) -> list[float]:
    """LRs 3 a decade over centre x mult^0.5 +/- SPAN decades (and a little wider, toward where the
    linear rule points), on a lattice shared by all batches."""
    mid = math.log10(centre) + 0.5 * math.log10(mult)
    lo, hi = mid - SPAN + min(0.0, 0.5 * math.log10(mult)), mid + SPAN + max(0.0, 0.5 * math.log10(mult))
    base = math.log10(centre)
    ks = range(math.floor((lo - base) * PER_DECADE), math.ceil((hi - base) * PER_DECADE) + 1)
    return [round(10 ** (base + k / PER_DECADE), 12) for k in ks]


def run_point(task: tunekit.Task, budget: str, batch: int, lr: float, seed: int) -> float:
    """One run's final validation loss (inf if it diverged)."""
    b0, steps = int(task.batch_size), int(task.defaults["max_steps"])
    updates = max(2, steps * b0 // batch) if budget == "samples" else steps
    r = tunekit.train(task, lr=lr, batch_size=batch, run_steps=updates, eval_every=max(1, updates // EVALS),
                      eval_batches=None, seed=seed, device="cpu", warmup=0.05, min_lr_ratio=0.1)
    return float(r.final_loss) if math.isfinite(r.final_loss) and not r.diverged else math.inf


def fill(name: str, cache: Path, config: dict[str, Any] | None = None, mults: tuple[float, ...] = MULTS,
         seeds: tuple[int, ...] = SEEDS) -> dict[str, Any]:
    """Every (budget, batch, lr, seed) point of one task (built with ``config``), run where the cache lacks it."""
    path = cache / f"{name}.json"
    data = json.loads(path.read_text()) if path.is_file() else {"points": {}, "seconds": 0.0}
    task = TASKS[name](config)
    data["family"], data["batch"] = family(task), int(task.batch_size)
    for budget in BUDGETS:
        for mult in mults:
            batch = max(1, int(task.batch_size * mult))
            for lr in grid_lrs(CENTRE[name], mult):
                for seed in seeds:
                    key = f"{budget}/{batch}/{lr:g}/{seed}"
                    if key in data["points"]:
                        continue
                    t0 = time.perf_counter()
                    data["points"][key] = run_point(task, budget, batch, lr, seed)
                    data["seconds"] += time.perf_counter() - t0
                    path.parent.mkdir(parents=True, exist_ok=True)
                    path.write_text(json.dumps(data))
        print(f"  {name}: {budget} done ({data['seconds']:.0f} s so far)", flush=True)
    return data


def curves(data: dict[str, Any]) -> dict[str, dict[int, tuple[list[float], list[float]]]]:
    """budget -> batch -> (log10 LRs ascending, mean final loss over seeds; inf if any seed diverged)."""
    acc: dict[tuple[str, int, float], list[float]] = {}
    for key, loss in data["points"].items():
        budget, batch, lr, _ = key.split("/")
        acc.setdefault((budget, int(batch), float(lr)), []).append(loss if loss is not None else math.inf)
    out: dict[str, dict[int, tuple[list[float], list[float]]]] = {}
    for (budget, batch, lr), losses in sorted(acc.items()):
        xs, ys = out.setdefault(budget, {}).setdefault(batch, ([], []))
        xs.append(math.log10(lr))
        ys.append(statistics.fmean(losses) if all(math.isfinite(v) for v in losses) else math.inf)
    return out


def loss_at(xs: list[float], ys: list[float], x: float) -> float:
    """The mean curve at log LR ``x``: interpolated, the edge's value beyond it; a diverged
    neighbour counts as the worst finite loss on the curve (the rule pointed at divergence)."""
    worst = max(v for v in ys if math.isfinite(v))
    vals = [v if math.isfinite(v) else worst for v in ys]
    return float(np.interp(x, xs, vals))


def best_x(xs: list[float], ys: list[float]) -> float:
    worst = max(v for v in ys if math.isfinite(v))
    return bracket_minimum(xs, [v if math.isfinite(v) else worst * 10 for v in ys])


def regret(data: dict[str, Any], budget: str, alpha: float | Alpha) -> float:
    """Mean regret over the batches other than B0 of LR(B) = best LR(B0) x (B / B0)^alpha (alpha: one
    exponent, or one below B0 and one above)."""
    below, above = (alpha, alpha) if isinstance(alpha, (int, float)) else alpha
    cs, b0 = curves(data)[budget], data["batch"]
    x0 = best_x(*cs[b0])
    out = []
    for batch, (xs, ys) in cs.items():
        if batch == b0:
            continue
        star = min(loss_at(xs, ys, x) for x in np.linspace(xs[0], xs[-1], 200))
        x = x0 + (below if batch < b0 else above) * math.log10(batch / b0)
        out.append((loss_at(xs, ys, x) - star) / star)
    return statistics.fmean(out)


def slopes(data: dict[str, Any], budget: str) -> dict[int, float]:
    """Measured alpha per batch: log(best LR(B) / best LR(B0)) / log(B / B0)."""
    cs, b0 = curves(data)[budget], data["batch"]
    x0 = best_x(*cs[b0])
    return {b: (best_x(*c) - x0) / math.log10(b / b0) for b, c in cs.items() if b != b0}


def rules() -> dict[str, dict[str, Alpha]]:
    """Candidate rules: exponents (below B0, above it) for all optimizers, or per family."""
    pairs = [(b, a) for b in ALPHAS for a in ALPHAS]
    out = {f"all {b:g}/{a:g}": {"sgd": (b, a), "adaptive": (b, a)} for b, a in pairs}
    for s in pairs:
        for a in pairs:
            out[f"sgd {s[0]:g}/{s[1]:g}, adaptive {a[0]:g}/{a[1]:g}"] = {"sgd": s, "adaptive": a}
    return out


def report(all_data: dict[str, dict[str, Any]], loto: bool) -> None:
    names = list(all_data)
    for budget in BUDGETS:
        print(f"\nbudget: {budget} (every batch {'draws the same samples' if budget == 'samples' else 'makes the same updates'})")
        print(f"{'task':<11} {'family':<9} " + " ".join(f"B0x{m:g}".rjust(7) for m in MULTS if m != 1.0)
              + "   (measured alpha: log best-LR ratio / log batch ratio)")
        for n in names:
            s = slopes(all_data[n], budget)
            b0 = all_data[n]["batch"]
            print(f"{n:<11} {all_data[n]['family']:<9} " + " ".join(f"{s.get(int(b0 * m), math.nan):7.2f}" for m in MULTS if m != 1.0))
        print(f"{'task':<11} " + " ".join(f"a={a:g}".rjust(7) for a in ALPHAS)
              + "   tunekit  textbook (regret, mean over batches)")
        for n in names:
            d = all_data[n]
            print(f"{n:<11} " + " ".join(f"{regret(d, budget, a):7.4f}" for a in ALPHAS)
                  + f"   {regret(d, budget, tunekit_alpha(d['family'], budget)):.4f}"
                  + f"   {regret(d, budget, textbook_alpha(d['family'])):.4f}")
        if loto:
            loto_table(all_data, budget)


def loto_table(all_data: dict[str, dict[str, Any]], budget: str) -> None:
    cand = rules()
    print(f"leave-one-task-out ({budget}): the rule with the lowest mean regret on the other tasks, its held-out regret")
    held = []
    for n in all_data:
        others = [m for m in all_data if m != n]

        def mean_regret(rule: dict[str, float]) -> float:
            return statistics.fmean(regret(all_data[m], budget, rule[all_data[m]["family"]]) for m in others)

        # A per-family rule needs the family among the other tasks; otherwise only one-alpha rules.
        fams = {all_data[m]["family"] for m in others}
        pool = {k: r for k, r in cand.items() if k.startswith("all") or len(fams) == 2}
        name = min(pool, key=lambda k: (mean_regret(pool[k]), k))
        r = regret(all_data[n], budget, pool[name][all_data[n]["family"]])
        d = all_data[n]
        now = regret(d, budget, tunekit_alpha(d["family"], budget))
        before = regret(d, budget, textbook_alpha(d["family"]))
        held.append((r, now, before))
        print(f"  {n:<11} chosen {name:<30} held-out {r:.4f}   tunekit's rule {now:.4f}   textbook {before:.4f}")
    print(f"  mean held-out {statistics.fmean(h[0] for h in held):.4f}; tunekit's rule {statistics.fmean(h[1] for h in held):.4f}"
          f" (in-sample: chosen on these tasks); textbook {statistics.fmean(h[2] for h in held):.4f}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tasks", default=",".join(CENTRE))
    ap.add_argument("--cache", type=Path, default=DEFAULT_CACHE)
    ap.add_argument("--loto", action="store_true")
    ap.add_argument("--report", action="store_true", help="only report what the cache holds")
    ap.add_argument("--quick", action="store_true",
                    help="a smoke run, not a figure: mlp_sgd and long_adam shrunk (16 hidden units, 2,048 samples, 40 "
                    "updates), batches B0/2..2 B0, 1 seed, --loto, in a temporary folder")
    args = ap.parse_args()
    torch.set_num_threads(1)
    if args.quick:
        args.tasks, args.loto, args.report = ",".join(QUICK_CONFIG), True, False
        args.cache = Path(tempfile.mkdtemp(prefix="tk_lr_batch_"))
    names = [t for t in args.tasks.split(",") if t]
    bad = [t for t in names if t not in CENTRE]
    if bad:
        ap.error(f"unknown task {bad[0]!r}: use {', '.join(CENTRE)}")
    data = {}
    for n in names:
        if args.report:
            data[n] = json.loads((args.cache / f"{n}.json").read_text())
        elif args.quick:
            data[n] = fill(n, args.cache, QUICK_CONFIG[n], QUICK_MULTS, QUICK_SEEDS)
        else:
            data[n] = fill(n, args.cache)
    with recorded() as out:
        report(data, args.loto)
    harness_report.write("lr_batch", "LR vs batch: the best LR's move with the batch, and the rules that predict it",
                         out.text(), quick=args.quick)


if __name__ == "__main__":
    main()
