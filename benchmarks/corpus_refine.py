"""Short real runs after the range test, on the whole corpus: the data the LR rule's carry is chosen on.

For every corpus task and finder seed: ``tunekit.lr_find(task, run_steps=<the planned run>, seed=s,
refine_steps=H, refine_seeds=1)`` for each short-run length H, called as a user calls it (a small-data
task without its validation set). Each call records the curve's suggestion, where the short runs
started, their LRs and scores, their best (the parabola's vertex), and what they cost. Nothing here is
chosen: ``benchmarks/corpus_lr.py --carry`` chooses the carry from a short run's best to the planned
run leave-one-family-out on these records and scores it on the task grids.

    python -m benchmarks.corpus_refine [--tasks a,b] [--seeds 5] [--lengths 12,20,33] [--jobs 2]

Records are cached in benchmarks/data/corpus_refine/ (one file a task; a missing (seed, H) is run).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import os
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

import torch

import tunekit
from benchmarks.corpus import CORPUS, entry, pick
from benchmarks.harness import report

RECORDS = Path(__file__).resolve().parent / "data" / "corpus_refine"


def refine_once(name: str, seed: int, steps: int, hold_out: float | None = None) -> dict[str, Any]:
    e = entry(name)
    task = e.make()
    if not e.finder_val:
        task = dataclasses.replace(task, val_data=None)
    r = tunekit.lr_find(task, run_steps=e.run_steps, seed=seed, refine_steps=steps, refine_seeds=1,
                        hold_out_share=hold_out, progress=False, device="cpu")
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


def _task(name: str, seeds: int, lengths: list[int], root: Path, hold_out: float | None = None) -> str:
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
    args = ap.parse_args()
    names = pick(args.tasks) if args.tasks else list(CORPUS)
    lengths = [int(x) for x in args.lengths.split(",")]
    with ProcessPoolExecutor(args.jobs) as pool:
        for done in pool.map(_task, names, [args.seeds] * len(names), [lengths] * len(names),
                             [Path(args.out)] * len(names), [args.hold_out] * len(names)):
            print(f"  {done}: done", flush=True)


if __name__ == "__main__":
    main()
