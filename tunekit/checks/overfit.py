"""Check 2, overfit a tiny batch: a healthy model, loss and data can memorise a few samples.

The LR comes from a short range test on that batch; the training runs through the shared step.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass
from typing import Any, Optional

import torch
from torch import nn

from tunekit.defaults import CLIP_GRAD_NORM, MIN_LR_RATIO, SCHEDULE, WARMUP
from tunekit.inputs.data import Batch
from tunekit.entry_options import Refine, StepSettings, Sweep
from tunekit.probes.range_test import lr_find
from tunekit.training.schedule import lr_schedule
from tunekit.training.state import Snapshot
from tunekit.training.step import TrainStep, Updates
from tunekit.inputs.task import LossComputer
from tunekit.checks.common import raised
from tunekit.checks.loss import class_layout
from tunekit.results import Finding

__all__ = ["check_overfit", "loss_floor", "overfit_target", "TARGET_FRACTION", "MAX_UPDATES", "RANGE_STEPS"]

CHECK = "overfit"

# "Near the floor": the loss has fallen by 98% of its distance to the floor. A model that can fit
# anything gets there on 4 samples within a few hundred updates; one that cannot (an output that
# cannot reach the targets, labels the model cannot see) stalls far above it.
TARGET_FRACTION = 0.02
MAX_UPDATES = 300  # a few hundred updates, as the triage by hand
RANGE_STEPS = 40  # a short range test on the tiny batch: enough for a descent and its minimum
RETRIES = 2  # a run that diverges is retried at a tenth of the LR
FALLBACK_LR = 1e-3  # the range test saw no descent to suggest from
# Dropout is switched off for the overfit, as by hand: its noise keeps the loss of a few samples
# off the floor in a healthy model. Normalisation stays in training mode.
DROPOUT = (nn.Dropout, nn.Dropout1d, nn.Dropout2d, nn.Dropout3d, nn.AlphaDropout, nn.FeatureAlphaDropout)


def loss_floor(loss: Any, outputs: Optional[torch.Tensor], targets: Optional[torch.Tensor]) -> float:
    """The lowest loss reachable: 0, except for cross-entropy with label smoothing, whose floor is the
    entropy of the smoothed target distribution."""
    eps = float(getattr(loss, "label_smoothing", 0.0) or 0.0)
    if eps <= 0 or outputs is None or targets is None or targets.is_floating_point():
        return 0.0
    dim = class_layout(outputs, targets)
    if dim is None:
        return 0.0
    c = int(outputs.shape[dim])
    hi, lo = 1 - eps + eps / c, eps / c
    return float(-(hi * math.log(hi) + (c - 1) * lo * math.log(lo)))


def overfit_target(initial: float, floor: float) -> float:
    return floor + TARGET_FRACTION * max(initial - floor, 0.0)


def _range_lr(model: nn.Module, optimizer: torch.optim.Optimizer, compute: LossComputer, batch: Batch,
              device: torch.device, precision: str, scaler: Any, clip: Optional[float]) -> tuple[float, bool]:
    """The range test's suggestion on the tiny batch (the model comes back as it was), and whether it had one."""
    res = lr_find(model, [batch], optimizer=optimizer, compute_loss=lambda m, b: compute(m, b)[0],
                  sweep=Sweep(sweep_steps=RANGE_STEPS, min_lr=1e-6, max_lr=10.0),
                  step=StepSettings(device=str(device), precision=precision, scaler=scaler, clip_grad_norm=clip),
                  refine=Refine(enabled=False), progress=False)  # one batch, memorized: no short runs to compare
    lr = res.suggestion or res.suggestions.get("steepest")
    return (float(lr), True) if lr else (FALLBACK_LR, False)


def _train(step: TrainStep, batch: Batch, lr: float, floor: float, initial: Optional[float]) -> tuple[list[float], bool, int]:
    """Up to MAX_UPDATES updates on the same batch, stopping at the target. (losses, diverged, skipped)."""
    lrs = lr_schedule(MAX_UPDATES, lr, WARMUP, SCHEDULE, MIN_LR_RATIO).tolist()
    loop = Updates(step, itertools.repeat(batch), lrs)
    losses: list[float] = []
    for _, _, out in loop:
        losses.append(out.loss)  # the batch's loss before this update: the first is the initial loss
        target = overfit_target(initial if initial is not None else losses[0], floor)
        if len(losses) > 1 and out.loss <= target:
            break
    return losses, loop.diverged_at is not None, loop.skipped


def check_overfit(model: nn.Module, optimizer: torch.optim.Optimizer, compute: LossComputer, batch: Batch, *,
                  device: torch.device, precision: str = "fp32", scaler: Any = None, floor: float = 0.0,
                  initial: Optional[float] = None, clip_grad_norm: Optional[float] = CLIP_GRAD_NORM) -> list[Finding]:
    """Train ``batch`` (a few samples) alone; fail if the loss does not fall near ``floor``.

    ``initial`` (the loss before training) sets the target; by default the first update's loss.
    The evidence holds the curve (``losses``), the ``target``, the LR, and the scaler's skips.
    ``clip_grad_norm`` is the run's clipping (the doctor passes the task's).
    """
    try:
        lr, suggested = _range_lr(model, optimizer, compute, batch, device, precision, scaler, clip_grad_norm)
        snap = Snapshot(model, optimizer, scaler)
        for attempt in range(RETRIES + 1):
            model.train()
            for m in model.modules():
                if isinstance(m, DROPOUT):
                    m.eval()
            step = TrainStep(model, optimizer, compute, device=device, precision=precision,  # type: ignore[arg-type]
                             clip_grad_norm=clip_grad_norm, scaler=scaler)
            losses, diverged, skipped = _train(step, batch, lr, floor, initial)
            if not diverged or attempt == RETRIES:
                break
            snap.restore()
            lr /= 10
    except Exception as exc:
        return [raised(CHECK, exc, "training the tiny batch")]
    return [_judge(losses, diverged, floor, initial, lr, suggested, skipped)]


def _judge(losses: list[float], diverged: bool, floor: float, initial: Optional[float], lr: float, suggested: bool,
           skipped: int) -> Finding:
    start = initial if initial is not None else (losses[0] if losses else math.nan)
    target = overfit_target(start, floor)
    finite = [v for v in losses if math.isfinite(v)]
    best = min(finite) if finite else math.nan
    evidence = {"losses": losses, "target": target, "initial": start, "best": best, "floor": floor, "lr": lr,
                "lr_from_range_test": suggested, "steps": len(losses) + skipped, "skipped": skipped}
    where = f"{len(losses)} updates at lr {lr:.2g}"
    if diverged or not finite:
        return Finding(CHECK, "fail", f"training a tiny batch diverges (non-finite loss) even at lr {lr:.2g}", evidence,
                       "see the nonfinite check; a loss that diverges on 4 samples points at the model or the loss")
    if best <= target:
        return Finding(CHECK, "pass", f"a tiny batch overfits: loss {start:.3g} -> {best:.3g} (target {target:.3g}) in {where}",
                       evidence)
    return Finding(CHECK, "fail", f"a tiny batch does not overfit: loss {start:.3g} -> {best:.3g}, target {target:.3g}"
                   f"{f' (floor {floor:.3g})' if floor else ''}, after {where}", evidence,
                   "the model cannot fit its targets: check the output layer's range (no bounded activation on "
                   "logits), that inputs and labels match, and that the loss compares the right things")


@dataclass(frozen=True)
class OverfitCurve:
    """What the doctor's result and its scaler check take from the overfit finding: the tiny batch's
    curve and target, the updates run and those the fp16 scaler skipped."""

    losses: list[float]
    target: Optional[float]
    steps: int
    skipped: int


def take_curve(findings: list[Finding]) -> Optional[OverfitCurve]:
    """The curve of the overfit finding among ``findings``, lifted out of its evidence (the result keeps
    it once, as ``overfit_losses``); None where the check did not train."""
    for f in findings:
        if f.check == CHECK and "losses" in f.evidence:
            ev = f.evidence
            return OverfitCurve(ev.pop("losses"), ev.get("target"), int(ev.get("steps", 0)), int(ev.get("skipped", 0)))
    return None

