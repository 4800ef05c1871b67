"""The LR range test's sweep: the LR raised over N updates of the shared step from the user's objects,
stopped where the loss blows up, and the curve read by the rules of :mod:`.lr_rules`.

:class:`LRSetup` is what the sweeps and the refinement's short runs (:mod:`.refine`) of one
:func:`~tunekit.lr_find` share.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Optional

import numpy as np
import torch
from torch import nn

from tunekit.inputs.data import BatchStream, Data
from tunekit.probes.lr_rules import DEFAULT_RULE, NOISE_MARGIN, NOISE_POINTS, RULES, assess, prepare, start_noise
from tunekit.results import LRFindResult
from tunekit.results.lr_find import Doubt, LRFindSettings
from tunekit.training.loop import evaluate
from tunekit.training.state import seed_everything_for
from tunekit.training.step import TrainStep, Updates

__all__ = ["LRSetup", "sweeps", "blown_up", "curve_result"]


@dataclass
class LRSetup:
    """What the sweeps and the short runs of one ``lr_find`` share: the objects and the step's settings."""

    model: Any  # what the user passed, a Task or a model: the short runs take the Task's schedule
    user_model: nn.Module
    optimizer: torch.optim.Optimizer
    compute: Any
    data: Data
    val_data: Data | None
    device: torch.device
    precision: Any
    batch_size: int | None
    accumulation_steps: int
    clip_grad_norm: float | None
    scaler: Any
    seed: int
    threshold: float  # diverge_threshold
    noise: float = 0.0  # the loss's noise at the first sweep's start (lr_rules.start_noise): no short run stops on it
    schedule: Optional[str] = None  # the planned run's decay, where given (else the Task's recipe, else train's)

    def make_step(self) -> TrainStep:
        """A step over the user's objects, as training runs it, the model in train mode."""
        self.user_model.train()
        return TrainStep(self.user_model, self.optimizer, self.compute, device=self.device, precision=self.precision,
                         accumulation_steps=self.accumulation_steps, clip_grad_norm=self.clip_grad_norm,
                         scaler=self.scaler)

    def mean_loss(self, data: Data, max_batches: int) -> float:
        """The model's mean loss on the first ``max_batches`` batches of ``data``: a fixed subset."""
        return evaluate(self.user_model, data, self.compute, device=self.device, precision=self.precision,
                        batch_size=self.batch_size, max_batches=max_batches)["loss"]


def sweeps(setup: LRSetup, initial: Any, lrs: np.ndarray, repeats: int, val_batches: int | None,
            steps_bar: Any) -> list[dict[str, Any]]:
    """``repeats`` sweeps over ``lrs`` (data orders seed, seed + 1, ...); each point the training loss,
    or with ``val_batches`` the loss on that many validation batches."""
    runs = []
    for r in range(repeats):
        if r > 0:  # each repeat starts from the same weights and optimizer state
            initial.restore()
        seed_everything_for(setup.seed + r, setup.device)
        batches = BatchStream(setup.data, setup.batch_size, seed=setup.seed + r)
        val_loss = (lambda: setup.mean_loss(setup.val_data, val_batches)) if val_batches is not None else None
        runs.append(_sweep(setup.make_step(), batches, lrs, setup.threshold, steps_bar, val_loss))
    return runs


def blown_up(losses: list[float], best: float, threshold: float, noise: float = 0.0) -> tuple[bool, float]:
    """(whether the run has blown up, the best recent loss so far): divergence on a robust, lag-free
    signal, the median of the last three losses against the best such median so far, above ``threshold``
    times it and by more than ``NOISE_MARGIN`` times the start's ``noise`` (lr_rules.start_noise): a
    heavy-tailed loss's spikes are not divergence. (sorted() on three floats, not np.median: it is called every
    update; the cost is in benchmarks/data/constants_history.md.)"""
    last = sorted(losses[-3:])
    recent = float(last[len(last) // 2]) if len(last) % 2 else (last[0] + last[1]) / 2
    best = min(best, recent)
    return len(losses) >= 5 and recent > threshold * best and recent - best > NOISE_MARGIN * noise, best


def _sweep(step: TrainStep, batches: BatchStream, lrs: np.ndarray, threshold: float, steps_bar: Any,
           val_loss: Callable[[], float] | None) -> dict[str, Any]:
    """One sweep through the shared step; stops on divergence."""
    rec_lrs: list[float] = []
    rec_losses: list[float] = []
    samples = 0
    best, noise = math.inf, 0.0
    diverged_at: float | None = None
    loop = Updates(step, batches, lrs.tolist())
    for _, lr, out in loop:
        samples += int(out.samples)
        loss = val_loss() if val_loss is not None else out.loss
        rec_lrs.append(lr)
        rec_losses.append(loss)
        steps_bar.update(1)
        if not math.isfinite(loss):
            diverged_at = lr
            break
        if len(rec_losses) <= NOISE_POINTS:  # the loss's noise, measured while the LR is too low to move it
            noise = start_noise(rec_losses)
        blown, best = blown_up(rec_losses, best, threshold, noise)
        if blown:
            diverged_at = lr
            break
    if loop.diverged_at is not None:
        diverged_at = float(lrs[loop.diverged_at])
        rec_lrs.append(diverged_at)
        rec_losses.append(math.nan)
    if len(rec_lrs) < len(lrs):  # a sweep stopped early: its steps count as done
        steps_bar.update(len(lrs) - len(rec_lrs))
    return {"lrs": rec_lrs, "losses": rec_losses, "diverged_at_lr": diverged_at, "skipped": loop.skipped, "samples": samples,
            "noise": noise}


def _suggest(lrs: list[float], losses: list[float], family: str | None = None,
             noise: float | None = None) -> tuple[dict[str, float | None], Any, Any]:
    curve = prepare(lrs, losses, family=family)
    suggestions = {name: (rule(curve) if len(curve.lrs) >= 3 else None) for name, rule in RULES.items()}
    return suggestions, curve, assess(curve, batch_noise=noise)


def curve_result(runs: list[dict[str, Any]], settings: LRFindSettings, seconds: float) -> LRFindResult:
    """The curve's result: the first sweep's curve, each rule's suggestion (the median over repeats), and
    how far to trust it (the curve's assessment; a spread over a decade between repeats is a doubt)."""
    per_run = []
    for run in runs:
        sugg, curve, a = _suggest(run["lrs"], run["losses"], settings.family, run.get("noise"))
        per_run.append((run, sugg, curve, a))
    run0, sugg0, curve0, a0 = per_run[0]
    suggestions = dict(sugg0)
    reasons = list(a0.reasons)
    doubts = [Doubt.CURVE] * len(reasons)
    confidence, confident = a0.confidence, a0.confident
    lr_range = None
    suggestion = suggestions.get(DEFAULT_RULE)
    if len(runs) > 1:
        # Robust aggregate: the median in log LR of each rule over the repeats.
        for name in RULES:
            vals = [s[name] for _, s, _, _ in per_run if s[name] is not None]
            suggestions[name] = float(10 ** np.median(np.log10(vals))) if vals else None
        defaults = [s[DEFAULT_RULE] for _, s, _, _ in per_run if s[DEFAULT_RULE] is not None]
        suggestion = suggestions[DEFAULT_RULE]
        if defaults:
            lr_range = (float(min(defaults)), float(max(defaults)))
            spread = math.log10(lr_range[1] / lr_range[0])
            if spread > 1.0:
                doubts.append(Doubt.SPREAD)
                reasons.append(f"the suggestion spans {spread:.1f} decades over {len(runs)} repeats")
        confidence = float(np.median([a.confidence for *_, a in per_run]))
        confident = sum(a.confident for *_, a in per_run) > len(runs) / 2 and Doubt.SPREAD not in doubts
    if suggestion is None:
        confident = False
        if not reasons:
            doubts.append(Doubt.NO_SUGGESTION)
            reasons.append("no descending stretch in the curve")
    return LRFindResult(
        lrs=list(run0["lrs"]),
        losses=list(run0["losses"]),
        smoothed=curve0.smooth.tolist(),
        suggestions=suggestions,
        default_rule=DEFAULT_RULE,
        suggestion=suggestion,
        confidence=float(confidence),
        confident=bool(confident),
        reasons=reasons,
        diverged=run0["diverged_at_lr"] is not None,
        diverged_at_lr=run0["diverged_at_lr"],
        noise=run0.get("noise"),
        seconds=seconds,
        settings=settings,
        skipped_steps=int(sum(run["skipped"] for run in runs)),
        samples=int(sum(run["samples"] for run in runs)),
        repeats=[{"lrs": c.lrs.tolist(), "smoothed": c.smooth.tolist(), "suggestions": s, "skipped": run["skipped"]}
                 for run, s, c, _ in per_run] if len(runs) > 1 else [],
        lr_range=lr_range,
        doubts=doubts,
    )
