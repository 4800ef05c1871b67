"""Short real runs after the range test, on the whole corpus: the data the LR rule's carry is chosen on.

For every corpus task and finder seed: ``tunekit.lr_find(task, run_steps=<the planned run>, seed=s,
refine_steps=H, refine_seeds=1)`` for each short-run length H, called as a user calls it (a small-data
task without its validation set). Each call records the curve's suggestion, where the short runs
started, their LRs and scores, their best (the parabola's vertex), and what they cost. Nothing here is
chosen: ``benchmarks/corpus_lr.py --carry`` chooses the carry from a short run's best to the planned
run leave-one-family-out on these records and scores it on the task grids.

    python -m benchmarks.corpus_refine [--tasks a,b] [--seeds 5] [--lengths 12,20,33] [--jobs 2]
    python -m benchmarks.corpus_refine --quick   # two synthetic tasks, one seed, two short lengths: seconds

Records are cached in benchmarks/data/corpus_refine/ (one file a task; a missing (seed, H) is run); a quick
run's go to a temporary folder, and its table to a temporary report.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import os
import tempfile
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

import torch

import tunekit
from benchmarks.corpus import CORPUS, entry, pick
from benchmarks.harness import report
from tunekit import Refine, StepSettings

RECORDS = Path(__file__).resolve().parent / "data" / "corpus_refine"
# --quick's tasks (and lr_carry's): synthetic (no scikit-learn), two families, short planned runs.
QUICK_TASKS = ("mlp_huber_sgdm", "mlp_bce_adam")
QUICK_LENGTHS = [10, 20]


def refine_once(name: str, seed: int, steps: int, hold_out: float | None = None) -> dict[str, Any]:
    e = entry(name)
    task = e.make()
    if not e.finder_val:
        task = dataclasses.replace(task, val_data=None)
    r = tunekit.lr_find(task, run_steps=e.run_steps, seed=seed,
                        refine=Refine(steps=steps, seeds=1, hold_out_share=hold_out), step=StepSettings(device="cpu"),
                        progress=False)
    ref = r.refinement
    stage = ref.stages[0] if ref is not None and ref.stages else None
    sweep_updates = len(r.lrs)
    return {"seed": seed, "steps": steps, "suggestion": r.suggestion,
            "curve": ref.curve_suggestion if ref is not None else r.suggestion,
            "start": ref.start if ref is not None else None, "confident": bool(r.confident),
            "lrs": list(stage.lrs) if stage else [],
            "scores": [s if math.isfinite(s) else None for s in stage.scores] if stage else [],
            "best": stage.best_lr if stage else None, "bracketed": bool(stage.bracketed) if stage else False,
            "sweep_updates": sweep_updates, "refine_updates": len(stage.lrs) * steps if stage else 0,
            "samples": int(r.samples), "sweep_lrs": list(r.lrs),
            "sweep_losses": [v if v is not None and math.isfinite(v) else None for v in r.losses],
            "seconds": round(r.seconds, 3), "scored_on": ref.scored_on.value if ref and ref.scored_on else None}


def record_task(name: str, seeds: int, lengths: list[int], root: Path, hold_out: float | None = None) -> str:
    """Run the missing (seed, H) records of task ``name`` into ``root/name.json``; the task's name."""
    torch.set_num_threads(1)
    path = root / f"{name}.json"
    have = json.loads(path.read_text()) if path.exists() else {"command": report.command(), "commit": report.commit(),
                                                               "runs": []}
    done = {(r["seed"], r["steps"]) for r in have["runs"]}
    for steps in lengths:
        for s in range(seeds):
            if (s, steps) in done:
                continue
            have["runs"].append(refine_once(name, s, steps, hold_out))
            root.mkdir(parents=True, exist_ok=True)
            tmp = path.with_suffix(f".tmp{os.getpid()}")
            tmp.write_text(json.dumps(have) + "\n")
            tmp.replace(path)
    return name


def load(name: str, root: Path = RECORDS) -> list[dict[str, Any]]:
    path = root / f"{name}.json"
    return json.loads(path.read_text())["runs"] if path.exists() else []


def main() -> None:
    ap = argparse.ArgumentParser(prog="python -m benchmarks.corpus_refine", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tasks", default="")
    ap.add_argument("--seeds", type=int, default=5)
    ap.add_argument("--lengths", default="12,20,33")
    ap.add_argument("--jobs", type=int, default=1)
    ap.add_argument("--hold-out", type=float, default=None,
                    help="without val_data, score the short runs on this share of the training data held out")
    ap.add_argument("--out", default=str(RECORDS))
    ap.add_argument("--quick", action="store_true", help="two synthetic tasks, one seed, lengths 10 and 20, in a "
                    "temporary folder")
    args = ap.parse_args()
    if args.quick:
        quick()
        return
    names = pick(args.tasks) if args.tasks else list(CORPUS)
    lengths = [int(x) for x in args.lengths.split(",")]
    with ProcessPoolExecutor(args.jobs) as pool:
        for done in pool.map(record_task, names, [args.seeds] * len(names), [lengths] * len(names),
                             [Path(args.out)] * len(names), [args.hold_out] * len(names)):
            print(f"  {done}: done", flush=True)


def quick() -> None:
    """The records' code path on :data:`QUICK_TASKS`, into a temporary folder, and a table of what they hold."""
    root = Path(tempfile.mkdtemp(prefix="tk_corpus_refine_"))
    lines = [f"records in {root}", f"{'task':<18}{'seed':>5}{'H':>4}{'curve':>11}{'short best':>12}{'suggestion':>12}"
             f"{'updates':>9}"]
    for name in QUICK_TASKS:
        record_task(name, 1, QUICK_LENGTHS, root)
        for r in load(name, root):
            best = f"{r['best']:.3g}" if r["best"] else "-"
            lines.append(f"{name:<18}{r['seed']:>5}{r['steps']:>4}{r['curve']:>11.3g}{best:>12}{r['suggestion']:>12.3g}"
                         f"{r['sweep_updates'] + r['refine_updates']:>9}")
    report.write("corpus_refine", "Short real runs after the range test", "\n".join(lines), quick=True)


if __name__ == "__main__":
    main()
