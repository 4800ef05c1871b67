"""What keeping the winner costs: time, disk and memory of a 24-trial search with keep=best, all and none,
beside Optuna used directly with the usual hand-written save of every trial's weights (Optuna keeps none).

Each arm runs in a fresh process (its resident memory is its own), the arms interleaved over repeats;
wall seconds are reported as ratios to keep=none within a repeat. The model carries 4.2M parameters and
a 64 MiB buffer (as an embedding table or a cache would), so a trial that leaks shows at once.

    python -m benchmarks.keep_cost            # 24 trials, 3 repeats
    python -m benchmarks.keep_cost --quick    # 3 trials, 1 repeat
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ARMS = ("none", "best", "all", "optuna_save_each")
STEPS = 30


def regression_data(n: int = 256, dim: int = 8, noise: float = 0.1, seed: int = 0) -> Any:
    """A noisy linear target in ``dim`` features, ``n`` samples (the tests' regression data, kept here so the
    benchmark does not import the test suite)."""
    import torch
    from torch.utils.data import TensorDataset

    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, dim, generator=g)
    w = torch.randn(dim, 1, generator=g)
    return TensorDataset(x, x @ w + noise * torch.randn(n, 1, generator=g))


def heavy_task() -> Any:
    import torch
    from torch import nn

    from tunekit import Task

    class Heavy(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.net = nn.Sequential(nn.Linear(8, 2048), nn.ReLU(), nn.Linear(2048, 2048), nn.ReLU(), nn.Linear(2048, 1))
            self.register_buffer("table", torch.ones(16 * 2**20), persistent=False)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.net(x) + 0 * self.table[:1]

    rss: list[int] = []

    def make() -> nn.Module:
        rss.append(_rss())
        return Heavy()

    task = Task(model=make, train_data=regression_data(256), val_data=regression_data(64, seed=1), loss=nn.MSELoss(),
                batch_size=16, name="heavy", defaults={"lr": 1e-3, "max_steps": STEPS})
    return task, rss


def _rss() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def _disk(folder: Path) -> tuple[int, int]:
    files = [p for p in folder.rglob("*.pt")] if folder.exists() else []
    return len(files), sum(p.stat().st_size for p in files)


def run_arm(arm: str, trials: int, out: Path) -> dict[str, Any]:
    """One arm in this process: its seconds, disk, memory at each trial's start, and whether the kept best
    model scores the best trial's value."""
    import optuna
    import torch

    import tunekit
    from tunekit.training.loop import evaluate

    torch.set_num_threads(1)
    task, rss = heavy_task()
    space_file = out / "space.toml"
    space_file.write_text('[lr]\ntype = "float"\nlog = true\nlow = 1e-4\nhigh = 1e-1\n[warmup]\ntype = "fixed"\n'
                          'value = 0.1\n')
    t0 = time.perf_counter()
    if arm == "optuna_save_each":
        optuna.logging.set_verbosity(optuna.logging.ERROR)
        folder = out / "weights"
        folder.mkdir(parents=True)

        def objective(trial: Any) -> float:
            lr = trial.suggest_float("lr", 1e-4, 1e-1, log=True)
            path = folder / f"trial-{trial.number}.pt"
            result = tunekit.train(task, lr=lr, run_steps=STEPS, warmup=0.1, eval_every=STEPS // 3, progress=False,
                                   on_trained=lambda m: torch.save(m.state_dict(), path))
            return result.final_loss

        study = optuna.create_study(sampler=optuna.samplers.TPESampler(seed=0))
        study.optimize(objective, n_trials=trials)
        seconds, reproduced = time.perf_counter() - t0, None
        starts = list(rss[-trials:])
    else:
        r = tunekit.search(task, str(space_file), trials=trials, budget=f"{STEPS}updates", out=out, progress=False,
                           pruner=tunekit.Halving(evals=3), backend=tunekit.Local(device="cpu"), keep=arm, seed=0)
        seconds = time.perf_counter() - t0
        starts = list(rss[-trials:])  # before best_model() below builds one more
        folder = out / "weights"
        reproduced = None
        if r.best_weights:
            cfg = r.best_config
            m = evaluate(r.best_model(), task.val_data, task.loss_computer(), device=torch.device("cpu"),
                         batch_size=cfg.get("eval_batch_size") or task.batch_size, max_batches=cfg.get("eval_batches"))
            reproduced = abs(m["loss"] - r.best_value) / abs(r.best_value)
    files, size = _disk(folder)
    return {"arm": arm, "seconds": seconds, "files": files, "bytes": size, "rss_first": starts[1] if len(starts) > 1 else starts[0],
            "rss_max": max(starts[1:] or starts), "reproduced_rel_err": reproduced}


def main() -> None:
    from benchmarks.harness import report

    p = argparse.ArgumentParser()
    p.add_argument("--quick", action="store_true")
    p.add_argument("--arm", choices=ARMS)
    p.add_argument("--trials", type=int)
    p.add_argument("--out")
    args = p.parse_args()
    trials = args.trials or (3 if args.quick else 24)
    if args.arm:  # a child: one arm, its figures as JSON
        print(json.dumps(run_arm(args.arm, trials, Path(args.out))))
        return
    repeats = 1 if args.quick else 3
    rows: list[dict[str, Any]] = []
    root = Path(__file__).resolve().parents[1]
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONPATH=str(root), MPLBACKEND="Agg")
    for rep in range(repeats):
        for arm in (ARMS if rep % 2 == 0 else ARMS[::-1]):  # interleaved, the order alternated
            with tempfile.TemporaryDirectory() as tmp:
                cmd = [sys.executable, "-m", "benchmarks.keep_cost", "--arm", arm, "--trials", str(trials), "--out", tmp]
                out = subprocess.run(cmd, capture_output=True, text=True, cwd=root, env=env, check=True).stdout
                rows.append({"repeat": rep, **json.loads(out.strip().splitlines()[-1])})
    lines = [f"{trials} trials of {STEPS} updates, a model of 4.2M parameters (16.8 MB) and a 64 MiB buffer; "
             f"{repeats} repeat(s), each arm in a fresh process, interleaved", "",
             f"{'arm':<18} {'seconds':>8} {'x none':>7} {'files':>6} {'disk MB':>8} {'RSS first MB':>13} "
             f"{'RSS max/first':>14} {'best_model rel err':>19}"]
    for arm in ARMS:
        mine = [r for r in rows if r["arm"] == arm]
        ratio = statistics.median(r["seconds"] / next(o["seconds"] for o in rows if o["arm"] == "none" and o["repeat"] == r["repeat"])
                                  for r in mine)
        err = [r["reproduced_rel_err"] for r in mine if r["reproduced_rel_err"] is not None]
        lines.append(f"{arm:<18} {statistics.median(r['seconds'] for r in mine):>8.1f} {ratio:>7.2f} "
                     f"{max(r['files'] for r in mine):>6} {max(r['bytes'] for r in mine) / 1e6:>8.1f} "
                     f"{statistics.median(r['rss_first'] for r in mine) / 2**20:>13.0f} "
                     f"{max(r['rss_max'] / r['rss_first'] for r in mine):>14.3f} "
                     f"{(f'{max(err):.1e}' if err else '-'):>19}")
    lines += ["", "x none: the arm's wall seconds over keep=none's in the same repeat (median over repeats); the "
              "search arms include their probes. RSS: resident memory as each trial builds its model, after the "
              "first trial, and the largest over the rest relative to it. best_model rel err: the kept model "
              "evaluated again against the best trial's value."]
    report.write("keep_cost", "keep_cost: what keeping the best trial's weights costs", "\n".join(lines), quick=args.quick)


if __name__ == "__main__":
    main()
