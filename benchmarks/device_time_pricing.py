"""What a trial under a budget in device time costs, against the budget it was given: its evaluations
priced (the probe's timed validation batch, paid out of the budget first) or not (its updates alone, as
before).

For one corpus task a family (``--all``: every task; a trial costs one planned run, 9 per task): the budget is one default run's measured seconds (``tunekit.train``, its evaluations
included); one search's probes (range test and probe) are stored and both arms run from them, 4 trials each,
no pruning, the arms' order alternating task by task. Per trial: its measured device seconds over its
budget (what a user pays for what they asked) and over its predicted seconds.

    python -m benchmarks.device_time_pricing                 # one task a family
    python -m benchmarks.device_time_pricing --all           # every corpus task
    python -m benchmarks.device_time_pricing --tasks a,b     # these (a quick run: the report to a temporary folder)
"""

from __future__ import annotations

import argparse
import dataclasses
import statistics
import tempfile
import time
import warnings
from pathlib import Path
from typing import Any

TRIALS = 4
# One task of each family, in the corpus's order of families.
ONE_A_FAMILY = ("mlp_sgdm_ce", "digits_cnn_adamw", "tiny_lm", "photo_pixels_mse_adam", "digits_small_cnn_adamw",
                "long_adam", "digits_head_cnn_adam", "hf_digits_cls", "const_digits_cnn_sgdm")
ARMS = ("unpriced", "priced")


def _search(name: str, budget: float, out: Path, stored: Any) -> list[dict[str, Any]]:
    import tunekit
    from benchmarks.corpus import build
    from tunekit import Local, NoPruning

    r = tunekit.search(build(name), trials=TRIALS, budget=f"{budget:.4f}s", seed=1, pruner=NoPruning(),
                       out=out, progress=False, backend=Local(device="cpu"), probes=stored)
    return [{"seconds": float(t["seconds"]), "predicted": float(t["predicted_seconds"]), "budget": budget,
             "updates": int(t["updates"])} for t in r.trials if t.get("seconds") and t.get("predicted_seconds")]


def row(name: str, i: int) -> dict[str, Any]:
    import tunekit
    from benchmarks.corpus import build
    from tunekit import Local, NoPruning, ProbeSettings

    with warnings.catch_warnings(), tempfile.TemporaryDirectory() as tmp:
        warnings.simplefilter("ignore")
        tunekit.train(build(name), progress=False)  # first-use costs
        t0 = time.perf_counter()
        tunekit.train(build(name), progress=False)
        budget = time.perf_counter() - t0
        seeded = tunekit.search(build(name), trials=1, budget=f"{budget:.4f}s", seed=1, pruner=NoPruning(),
                                out=Path(tmp) / "seed", progress=False, backend=Local(device="cpu"))
        probed = tunekit.ProbeResult.load(Path(tmp) / "seed" / "probe.json")
        # The unpriced arm: the same probe without its timed validation batch, as a probe saved before it was timed
        # (its trials' updates priced alone).
        stored = {arm: ProbeSettings(lr_find=Path(tmp) / "seed" / "lr_find.json",
                                     probe=probed if arm == "priced" else dataclasses.replace(probed, eval_time=None))
                  for arm in ARMS}
        out: dict[str, Any] = {"task": name, "budget": budget, "eval": probed.eval_time, "plan": seeded.plan}
        for arm in (ARMS if i % 2 == 0 else ARMS[::-1]):
            out[arm] = _search(name, budget, Path(tmp) / arm, stored[arm])
    return out


def _med(trials: list[dict[str, Any]], key: str) -> float:
    return statistics.median(t["seconds"] / t[key] for t in trials) if trials else float("nan")


def table(rows: list[dict[str, Any]]) -> str:
    lines = [f"{'task':<26} {'budget s':>8} {'eval s':>7}  " + "  ".join(
        f"{a + ': x budget':>18} {'x predicted':>11} {'updates':>7}" for a in ARMS)]
    for r in rows:
        ev = r["plan"].get("eval_seconds")
        lines.append(f"{r['task']:<26} {r['budget']:>8.2f} {ev if ev is not None else float('nan'):>7.3f}  " + "  ".join(
            f"{_med(r[a], 'budget'):>18.2f} {_med(r[a], 'predicted'):>11.2f} "
            f"{statistics.median(t['updates'] for t in r[a]) if r[a] else 0:>7.0f}" for a in ARMS))
    lines.append("")
    for a in ARMS:
        per_task = [_med(r[a], "budget") for r in rows if r[a]]
        pred = [_med(r[a], "predicted") for r in rows if r[a]]
        over = sum(x > 1.05 for x in per_task)
        lines.append(f"{a}: a trial's measured seconds / its budget: median over tasks {statistics.median(per_task):.2f}, "
                     f"range {min(per_task):.2f}-{max(per_task):.2f}, over 1.05x on {over} of {len(per_task)}; "
                     f"/ its predicted seconds: median {statistics.median(pred):.2f}, range {min(pred):.2f}-{max(pred):.2f}")
    lines.append(f"each task: the median of its {TRIALS} trials (seed 1, no pruning, the same stored probes in both arms); "
                 "budget: one default run's measured seconds (tunekit.train, evaluations included); eval s: one "
                 "evaluation's predicted seconds (the probe's timed validation batch)")
    return "\n".join(lines)


def main() -> None:
    from benchmarks._common import recorded
    from benchmarks.corpus import CORPUS, pick
    from benchmarks.harness import report

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tasks", help="comma-separated corpus tasks (default: one a family)")
    ap.add_argument("--all", action="store_true", help="every corpus task")
    args = ap.parse_args()
    names = pick(args.tasks) if args.tasks else list(CORPUS) if args.all else list(ONE_A_FAMILY)
    with recorded() as out:
        rows = []
        for i, name in enumerate(names):
            try:
                rows.append(row(name, i))
            except ImportError as exc:
                print(f"{name:<26} not run: {exc}", flush=True)
                continue
            print(table(rows[-1:]).splitlines()[1], flush=True)
        print()
        print(table(rows))
    report.write("device_time_pricing", "A trial's device time against its budget: evaluations priced or not",
                 out.text(), quick=bool(args.tasks))


if __name__ == "__main__":
    main()
