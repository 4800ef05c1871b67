"""The peers that make tuning unnecessary: Schedule-Free AdamW and Prodigy, at their defaults.

Each trains a fresh model of the task for the planned run (its updates, its batch) through
``tunekit.train``, the same step and data order as every other arm, and is scored on the task's
validation data like a search's trial. Their defaults, as their READMEs give them:

- ``schedulefree.AdamWScheduleFree`` (lr 0.0025, no weight decay) at a constant LR, no schedule; the
  optimizer is switched to train mode before the first update and to eval mode (the averaged weights)
  before the evaluation, and a model with BatchNorm has its statistics recomputed at those weights
  from 50 training batches without gradients (counted in the samples), as the README advises;
- ``prodigyopt.Prodigy`` (lr 1.0, no weight decay) under the task's own schedule (tunekit's warmup +
  cosine; constant where the task's recipe is), with ``safeguard_warmup=True`` where there is warmup.
"""

from __future__ import annotations

import dataclasses
import math
import time
from typing import Any

import torch
from torch import nn

import tunekit

BN_BATCHES = 50


def _caught(task: tunekit.Task, make_opt: Any) -> tuple[tunekit.Task, dict[str, Any]]:
    """The task with its model and optimizer caught as they are built, and no validation run of its own."""
    held: dict[str, Any] = {}

    def model() -> nn.Module:
        held["model"] = task.model()
        return held["model"]

    def optimizer(params: Any) -> torch.optim.Optimizer:
        held["opt"] = make_opt(params)
        return held["opt"]

    return dataclasses.replace(task, model=model, optimizer=optimizer, val_data=None), held


def _score(task: tunekit.Task, model: nn.Module) -> float:
    return float(tunekit.evaluate(model, task.val_data, task.loss_computer(), device=torch.device("cpu"),
                                  batch_size=int(task.defaults.get("eval_batch_size") or 256))["loss"])


def _recompute_batchnorm(task: tunekit.Task, model: nn.Module, batch: int, seed: int) -> int:
    """BatchNorm statistics recomputed at the current weights; returns the samples read."""
    norms = [m for m in model.modules() if isinstance(m, (nn.BatchNorm1d, nn.BatchNorm2d, nn.BatchNorm3d))]
    if not norms or not any(p.requires_grad for m in norms for p in m.parameters()):
        return 0  # none, or frozen (a frozen backbone keeps its statistics)
    for m in norms:
        m.reset_running_stats()
        m.momentum = None  # a cumulative average over the batches below
    loader = torch.utils.data.DataLoader(task.train_data, batch_size=batch, shuffle=True,
                                         generator=torch.Generator().manual_seed(seed))
    compute, seen = task.loss_computer(), 0
    model.train()
    with torch.no_grad():
        for i, b in enumerate(loader):
            if i == BN_BATCHES:
                break
            compute(model, b)
            seen += batch
    return seen


def run(name: str, task: tunekit.Task, steps: int, batch: int, seed: int) -> dict[str, Any]:
    """One run of ``name`` ("schedulefree" or "prodigy"), in the record form of a search's single trial."""
    cfg = tunekit.TrainConfig.for_task(task)
    if name == "schedulefree":
        import schedulefree

        def make(params: Any) -> torch.optim.Optimizer:
            opt = schedulefree.AdamWScheduleFree(params)
            opt.train()
            return opt

        lr, settings = 0.0025, {"schedule": "constant", "warmup": 0.0, "min_lr_ratio": 1.0}
    elif name == "prodigy":
        import prodigyopt

        warm = cfg.warmup not in (0, 0.0)
        make, lr, settings = (lambda p: prodigyopt.Prodigy(p, lr=1.0, safeguard_warmup=warm)), 1.0, {}
    else:
        raise ValueError(f"unknown LR-free peer {name!r}")
    caught, held = _caught(task, make)
    t0 = time.perf_counter()
    r = tunekit.train(caught, lr=lr, run_steps=steps, batch_size=batch, seed=seed, device="cpu", progress=False,
                      weight_decay=0.0, **settings)
    extra = 0
    if name == "schedulefree":
        held["opt"].eval()
        extra = _recompute_batchnorm(task, held["model"], batch, seed)
    value = math.inf if r.diverged else _score(task, held["model"])
    seconds = time.perf_counter() - t0
    state = "COMPLETE" if math.isfinite(value) else "FAIL"
    trial = {"number": 0, "state": state, "value": value if math.isfinite(value) else None,
             "samples": int(r.samples) + extra, "updates": int(r.updates), "seconds": seconds, "finished": time.time(),
             "params": {"optimizer": name, "lr": lr, **settings}}
    return {"probe_samples": 0, "probe_updates": 0, "probe_seconds": 0.0, "trials": [trial], "seconds": seconds}
