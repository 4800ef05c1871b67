"""Run the corpus's ground-truth LR grids (benchmarks/harness/grid.py says how), one task after another.

    python -m benchmarks.corpus_grid [--tasks a,b] [--shard I/N] [--seeds 2] [--lengths] [--window 10 [--whole]]

``--shard I/N`` runs every N-th task from the I-th (one process a core: ``--shard 0/2`` and ``1/2``);
``--lengths`` also grids the long-horizon tasks at a quarter of their planned run; ``--window S`` then runs
the grid's best LR and its neighbours at S seeds (benchmarks/data/corpus_search_grid: the best LR the
LR interval is judged by, and the search's targets); ``--whole``, at every LR of the grid (the noisy
families, small-data, dict-batch and constant-lr: issue 51 asks 5 seeds or more at every LR there).
"""

from __future__ import annotations

import argparse
from pathlib import Path

import torch

from benchmarks.corpus import CORPUS, pick
from benchmarks.harness import grid

WINDOWS = grid.WINDOWS


def main() -> None:
    ap = argparse.ArgumentParser(prog="python -m benchmarks.corpus_grid", description=__doc__)
    ap.add_argument("--tasks", default="")
    ap.add_argument("--shard", default="0/1")
    ap.add_argument("--seeds", type=int, default=2)
    ap.add_argument("--lengths", action="store_true")
    ap.add_argument("--window", type=int, default=0, help="seeds for the best LR and its neighbours (0: none)")
    ap.add_argument("--whole", action="store_true", help="the window spans the whole grid (the noisy families)")
    args = ap.parse_args()
    torch.set_num_threads(1)
    names = pick(args.tasks) if args.tasks else list(CORPUS)
    i, n = map(int, args.shard.split("/"))
    for name in names[i::n]:
        grid.ensure(name, args.seeds)
        if args.lengths and CORPUS[name].family == "long-horizon":
            grid.ensure(name, args.seeds, steps=CORPUS[name].run_steps // 4)
        if args.window:
            grid.window(name, args.window, WINDOWS, whole=args.whole)


if __name__ == "__main__":
    main()
