"""``python -m benchmarks.corpus --list | --families | --check [--tasks a,b]``: the corpus, by task or
by family; ``--check`` builds each task and trains its planned run once at its optimizer's LR
(seconds and final validation loss)."""

from __future__ import annotations

import argparse
import time

import torch

from benchmarks.corpus import CORPUS, families


def main() -> None:
    ap = argparse.ArgumentParser(prog="python -m benchmarks.corpus", description=__doc__)
    ap.add_argument("--list", action="store_true", help="one line a task (the default)")
    ap.add_argument("--families", action="store_true", help="the families and their tasks")
    ap.add_argument("--check", action="store_true", help="build each task and train its planned run once")
    ap.add_argument("--tasks", default="", help="comma-separated names (with --check)")
    args = ap.parse_args()
    if args.families:
        for fam, entries in families().items():
            real = sum(e.real for e in entries)
            print(f"{fam:13s} {len(entries)} tasks ({real} real): {', '.join(e.name for e in entries)}")
        return
    if args.check:
        import tunekit

        torch.set_num_threads(1)
        names = args.tasks.split(",") if args.tasks else list(CORPUS)
        for name in names:
            t0 = time.perf_counter()
            task = CORPUS[name].make()
            built = time.perf_counter() - t0
            lr = task.make_optimizer(task.make_model(0)).param_groups[0]["lr"]
            r = tunekit.train(task, lr=lr, seed=0, device="cpu", progress=False)
            print(f"{name:26s} built {built:5.1f}s  run {r.seconds:6.1f}s  lr {lr:g}  final {r.final_loss:.4f}", flush=True)
        return
    print(f"{'task':26s} {'family':13s} {'data':4s} {'optimizer':13s} {'batch':>5s} {'run':>5s}  {'schedule':13s} what")
    for e in CORPUS.values():
        print(f"{e.name:26s} {e.family:13s} {'real' if e.real else 'syn':4s} {e.optimizer:13s} {e.batch:5d} "
              f"{e.run_steps:5d}  {e.schedule:13s} {e.data}{'' if e.finder_val else ' (finder: no val)'}")
    n, fams, syn = len(CORPUS), len(families()), sum(not e.real for e in CORPUS.values())
    print(f"\n{n} tasks in {fams} families; {syn} synthetic ({syn / n:.0%})")


if __name__ == "__main__":
    main()
