"""Which value should a rung judge a trial by? Raw loss, a cooldown branch's loss, or an EMA's (issue 50).

For each task, 6 LRs around its ground-truth grid's best (the grid's points k-3 .. k+2, thirds of a
decade: 1.67 decades, the best fourth) x 3 seeds, each trained in full with ``tunekit.train`` at 8
evaluations. At the rungs a 24-trial search uses at rf 3 (evaluation 3 of 8; with two rungs 1 and 3)
it records each candidate rung value:

- ``raw``: the validation loss (what rungs read today);
- ``cool0.1``, ``cool0.2``: the loss after a cooldown branch of that fraction of the updates so far
  (:func:`tunekit.training.branch.run_cooldown`, the run's own step, everything put back);
- ``ema``: the loss of an EMA of the weights whose half-life is a tenth of the updates so far.

Per task and candidate: Spearman's rho between the rung value (per seed) and the configuration's mean
final loss over seeds, averaged over seeds; and how often (over seeds and rungs) the configuration best in
expectation (lowest mean final) is cut by keep-top-1/3 among the 6 (ASHA's rule with tunekit's 1% tie).
The candidate is chosen leave-one-family-out (:mod:`benchmarks.harness.lofo`) on the score
cut rate + (1 - rho) / 4. Runs are cached in benchmarks/data/rung_fairness/<task>.json.

    python -m benchmarks.rung_fairness            # the tasks below, then the report
    python -m benchmarks.rung_fairness --quick    # two cheap tasks (two families), 2 seeds, 4 LRs, in a temporary folder
    python -m benchmarks.rung_fairness --report   # the report from the cached runs
"""

from __future__ import annotations

import argparse
import copy
import json
import math
import tempfile
from pathlib import Path
from typing import Any

import numpy as np
import torch

from benchmarks.corpus import CORPUS, build, pick
from benchmarks.harness import grid, lofo, report

TASKS = ("photo_pixels_long_sgdm", "long_adam", "digits_mlp_sgdm", "photo_patches_cnn_adam", "photo_pixels_huber_sgdm",
         "lstm_torchsrc_adam", "gpt_torchsrc_long")
OFFSETS = (-3, -2, -1, 0, 1, 2)  # grid points (thirds of a decade) around the grid's best
SEEDS = 3
EVALS = 8
RUNGS = (1, 3)  # the rungs of a 24-trial search at rf 3: (3,) by default, (1, 3) with two rungs
FRACTIONS = (0.1, 0.2)
EMA_SHARE = 0.1  # the EMA's half-life as a share of the updates so far
KEEP = 3  # keep the best 1/KEEP at a rung
TIE = 0.01
CANDIDATES = ("raw", *(f"cool{f}" for f in FRACTIONS), "ema")
ROOT = Path(__file__).resolve().parent / "data" / "rung_fairness"


class _Watched:
    """The task's model and optimizer as train() builds them, and an EMA of the weights kept by a step hook."""

    def __init__(self, task: Any) -> None:
        self.task, self.model, self.optimizer = task, None, None
        self.ema: list[torch.Tensor] = []
        self.t, self.paused = 0, False
        make_model, make_optimizer = task.make_model, task.make_optimizer

        def model_of(seed: int = 0) -> Any:
            self.model = make_model(seed)
            return self.model

        def optimizer_of(model: Any) -> Any:
            self.optimizer = make_optimizer(model)
            self.ema = [p.detach().clone() for p in model.parameters()]
            self.optimizer.register_step_post_hook(self._average)
            return self.optimizer

        task.make_model, task.make_optimizer = model_of, optimizer_of  # type: ignore[method-assign]

    @torch.no_grad()
    def _average(self, *_: Any) -> None:
        if self.paused:
            return
        self.t += 1
        beta = 0.5 ** (1.0 / max(EMA_SHARE * self.t, 1e-9))
        for e, p in zip(self.ema, self.model.parameters()):  # type: ignore[union-attr]
            e.lerp_(p.detach(), 1.0 - beta)

    def ema_model(self) -> Any:
        out = copy.deepcopy(self.model)
        with torch.no_grad():
            for e, p in zip(self.ema, out.parameters()):
                p.copy_(e)
        return out


def run_one(name: str, lr: float, seed: int) -> dict[str, Any]:
    """One full run at ``lr`` and ``seed``, with each candidate's value at each rung."""
    import tunekit
    from tunekit import TrainConfig
    from tunekit.training.branch import branch_seed, run_cooldown
    from tunekit.training.schedule import lr_schedule
    from tunekit.training.step import TrainStep

    task = build(name)
    w = _Watched(task)
    cfg = TrainConfig.for_task(task, lr=lr, seed=seed, device="cpu")
    every = cfg.max_steps // EVALS
    rungs: dict[str, dict[str, float]] = {}
    lrs = lr_schedule(cfg.max_steps, cfg.lr, cfg.warmup, cfg.schedule, cfg.min_lr_ratio)

    def measure(model: Any) -> float:
        return float(tunekit.evaluate(model, task.val_data, task.loss_computer(), device=torch.device("cpu"),
                                      batch_size=cfg.eval_batch_size or task.batch_size or cfg.batch_size,
                                      max_batches=cfg.eval_batches)["loss"])

    def callback(at: int, metrics: dict[str, float]) -> None:
        k = at // every
        if k not in RUNGS:
            return
        values = {"raw": float(metrics["loss"]), "ema": measure(w.ema_model())}
        step = TrainStep(w.model, w.optimizer, task.loss_computer(), device=torch.device("cpu"),  # type: ignore[arg-type]
                         accumulation_steps=cfg.accumulation_steps, clip_grad_norm=cfg.clip_grad_norm)
        w.paused = True
        for f in FRACTIONS:
            n = max(1, int(round(f * at)))
            out = run_cooldown(step, task.train_data, cfg.batch_size, branch_seed(seed, at), float(lrs[at - 1]), n,
                               lambda: {"loss": measure(w.model)})
            values[f"cool{f}"] = float(out.metrics["loss"])
            values[f"cool{f}_updates"] = out.updates
        w.paused = False
        rungs[str(k)] = values

    result = tunekit.train(task, cfg, eval_every=every, callback=callback, progress=False)
    final = float(result.final_loss) if not result.diverged else math.inf
    return {"lr": lr, "seed": seed, "final": final, "updates": int(result.updates), "rungs": rungs,
            "seconds": float(result.seconds)}


def measure_task(name: str, root: Path, offsets: tuple[int, ...], seeds: int) -> dict[str, Any]:
    path = root / f"{name}.json"
    data = json.loads(path.read_text()) if path.exists() else {"task": name, "family": CORPUS[name].family,
                                                               "command": report.command(), "runs": []}
    base = grid.load(name)
    ks, _, mean = grid.curve(base)
    best_k = int(ks[int(np.argmin(mean))])
    data["untrained"], data["grid_best_k"] = base["untrained_loss"], best_k
    done = {(r["k"], r["seed"]) for r in data["runs"]}
    for off in offsets:
        for seed in range(seeds):
            k = best_k + off
            if (k, seed) in done:
                continue
            run = run_one(name, grid.lr_of(k), seed) | {"k": k}
            data["runs"].append(run)
            root.mkdir(parents=True, exist_ok=True)
            path.write_text(json.dumps(data, indent=1))
            print(f"{name} k={k} seed={seed} final={run['final']:.4f} {run['seconds']:.1f}s", flush=True)
    return data


def _rank(xs: np.ndarray) -> np.ndarray:
    from scipy.stats import rankdata

    return rankdata(np.where(np.isfinite(xs), xs, np.inf))


def score_task(data: dict[str, Any]) -> dict[str, dict[str, float]]:
    """Per candidate: rho (mean over seeds and rungs), cut (share of seeds x rungs where the best config is cut)."""
    untrained = data["untrained"]
    runs = data["runs"]
    ks = sorted({r["k"] for r in runs})
    seeds = sorted({r["seed"] for r in runs})
    by = {(r["k"], r["seed"]): r for r in runs}
    final = np.array([np.mean([grid.capped(by[k, s]["final"], untrained) for s in seeds]) for k in ks])
    best = int(np.argmin(final))
    out: dict[str, dict[str, float]] = {}
    for cand in CANDIDATES:
        rhos, cuts, at3 = [], [], []
        for s in seeds:
            for rung in map(str, RUNGS):
                v = np.array([by[k, s]["rungs"].get(rung, {}).get(cand, math.inf) for k in ks], dtype=float)
                v = np.where(np.isfinite(v), v, untrained * 10)
                if np.ptp(v) > 0:
                    rhos.append(float(np.corrcoef(_rank(v), _rank(final))[0, 1]))
                cut = sorted(v)[max(0, len(v) // KEEP - 1)]
                cuts.append(float(v[best] > cut + TIE * abs(cut)))
                if rung == str(RUNGS[-1]):
                    at3.append(cuts[-1])
        out[cand] = {"rho": float(np.mean(rhos)) if rhos else math.nan, "cut": float(np.mean(cuts)),
                     "cut_last": float(np.mean(at3))}
    share = [r["rungs"][rung][f"cool{f}_updates"] / r["updates"] for r in runs for rung in r["rungs"] for f in FRACTIONS]
    out["_share"] = {f"cool{f}": float(np.mean([r["rungs"][g][f"cool{f}_updates"] / r["updates"] for r in runs
                                                for g in r["rungs"]])) for f in FRACTIONS} if share else {}
    out["_best_lr"] = {"lr": grid.lr_of(ks[best]), "k_offset": ks[best] - (ks[len(ks) // 2] if ks else 0)}
    return out


def body(datas: list[dict[str, Any]]) -> str:
    lines = [f"Rung values at evaluations {RUNGS} of {EVALS} (a 24-trial search at rf {KEEP}); "
             f"{len(OFFSETS)} LRs (grid points {OFFSETS[0]:+d}..{OFFSETS[-1]:+d} thirds of a decade around the grid's "
             f"best) x seeds; rho: Spearman of the rung value against the configuration's mean final loss (mean over "
             "seeds and rungs); cut: share of seeds x rungs where the configuration best in expectation is cut by "
             f"keep-top-1/{KEEP} (1% tie); cut@{RUNGS[-1]}: at the default ladder's one rung alone. All figures in this table are in-sample (measured, nothing fitted).", ""]
    head = f"{'task':26s} {'family':13s} {'best k':>6s} " + " ".join(f"{c:>20s}" for c in CANDIDATES)
    lines += [head, " " * 48 + " ".join(f"{'rho   cut cut@' + str(RUNGS[-1]):>20s}" for _ in CANDIDATES)]
    scores: dict[str, dict[str, float]] = {c: {} for c in CANDIDATES}
    family_of: dict[str, str] = {}
    shares: dict[str, list[float]] = {}
    for d in datas:
        s = score_task(d)
        family_of[d["task"]] = d["family"]
        for c in CANDIDATES:
            scores[c][d["task"]] = s[c]["cut"] + (1 - s[c]["rho"]) / 4
        for f, v in s["_share"].items():
            shares.setdefault(f, []).append(v)
        ks = sorted({r["k"] for r in d["runs"]})
        best_off = ks.index(min(ks, key=lambda k: np.mean([grid.capped(r["final"], d["untrained"]) for r in d["runs"]
                                                           if r["k"] == k]))) + ks[0] - d["grid_best_k"]
        lines.append(f"{d['task']:26s} {d['family']:13s} {best_off:+6d} " +
                     " ".join(f"{s[c]['rho']:+.2f} {s[c]['cut']:5.2f} {s[c]['cut_last']:5.2f}".rjust(20) for c in CANDIDATES))
    lines += ["", "best k: where the best mean final loss fell, in grid points from the grid's best (this run's seeds).",
              "Cooldown updates per branch as a share of the trial's updates (mean over rungs): " +
              ", ".join(f"{f} {np.mean(v):.3f}" for f, v in shares.items()) +
              f" (a trial past both rungs {RUNGS} pays the sum: {sum(RUNGS) / EVALS:.3f} x the fraction).", ""]
    lines += ["Leave-one-family-out choice (score = cut + (1 - rho) / 4, lower better; ties: the earlier candidate):",
              f"{'family left out':16s} {'chosen on the others':22s} {'held-out score':>14s} {'raw on it':>10s}"]
    held = lofo.select(scores, family_of)
    for fam, h in held.items():
        raw = np.mean([scores["raw"][t] for t in h.scores])
        lines.append(f"{fam:16s} {h.rule:22s} {h.mean:14.3f} {raw:10.3f}")
    overall = {c: float(np.mean(list(v.values()))) for c, v in scores.items()}
    lines += ["", "All families (in-sample): " + ", ".join(f"{c} {v:.3f}" for c, v in overall.items())]
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tasks", default=",".join(TASKS))
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--report", action="store_true")
    args = ap.parse_args()
    torch.set_num_threads(1)
    names = ["digits_mlp_sgdm", "photo_pixels_huber_sgdm"] if args.quick else pick(args.tasks)
    root = Path(tempfile.mkdtemp()) if args.quick else ROOT
    offsets, seeds = ((-1, 0, 1, 2), 2) if args.quick else (OFFSETS, SEEDS)
    datas = []
    for name in names:
        if args.report:
            path = root / f"{name}.json"
            if path.exists():
                datas.append(json.loads(path.read_text()))
            continue
        datas.append(measure_task(name, root, offsets, seeds))
    report.write("rung_fairness", "Rung values fair to high learning rates (issue 50)", body(datas), quick=args.quick)


if __name__ == "__main__":
    main()
