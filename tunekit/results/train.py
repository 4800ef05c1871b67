"""One training run's result: its curve, its evaluations, how it ended.

No training code here (no torch): loading and plotting a saved result is quick.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Optional

import numpy as np

from tunekit.objective import Objective
from tunekit.plotting import new_axes
from tunekit.results.base import Result

__all__ = ["TrainResult"]


@dataclass
class TrainResult(Result):
    """The curve of one run. ``evals`` holds one dict per evaluation (``step`` plus metrics)."""

    _stem = "train"

    config: dict[str, Any]
    task: str
    steps: list[int] = field(default_factory=list)
    lrs: list[float] = field(default_factory=list)
    losses: list[float] = field(default_factory=list)
    grad_norms: list[float] = field(default_factory=list)
    evals: list[dict[str, float]] = field(default_factory=list)
    updates: int = 0
    samples: int = 0
    skipped_steps: int = 0
    diverged: bool = False
    diverged_at: Optional[int] = None
    stopped_early: bool = False
    seconds: float = 0.0
    device: str = "cpu"

    @property
    def final_loss(self) -> float:
        """Validation loss of the last evaluation, else the mean of the last 10 training losses."""
        if self.diverged:
            return math.inf
        if self.evals:
            return float(self.evals[-1]["loss"])
        tail = self.losses[-10:]
        return float(np.mean(tail)) if tail else math.nan

    def table(self, rows: int = 8) -> str:
        """A short table of the curve: train loss averaged over each stretch, and evaluations."""
        cfg = self.config
        lines = [
            f"task {self.task}: lr {cfg['lr']:.3g}, {cfg['schedule']} after {cfg['warmup']} warmup, "
            f"batch {cfg['batch_size']} x {cfg['accumulation_steps']} accumulation, {cfg['precision']}, {self.device}"
        ]
        evals = {int(e["step"]): e for e in self.evals}
        n = len(self.losses)
        if n:
            edges = np.unique(np.linspace(0, n, min(rows, n) + 1).astype(int))
            lines.append(f"{'update':>8} {'lr':>10} {'train loss':>11} {'val loss':>9} {'val acc':>8}")
            for lo, hi in zip(edges[:-1], edges[1:]):
                step = self.steps[hi - 1] + 1
                # The row's last evaluation: one falls inside most rows, not on their last update.
                ev = evals.get(max((e for e in evals if self.steps[lo] < e <= step), default=-1)) or {}
                val = f"{ev['loss']:.4f}" if "loss" in ev else ""
                acc = f"{ev['accuracy']:.3f}" if "accuracy" in ev else ""
                lines.append(f"{step:>8} {self.lrs[hi - 1]:>10.3g} {np.mean(self.losses[lo:hi]):>11.4f} {val:>9} {acc:>8}")
        if self.diverged:
            lines.append(f"DIVERGED at update {self.diverged_at}: the loss became non-finite; try a lower lr")
        else:
            last = self.evals[-1] if self.evals else {}
            final = f"val loss {last['loss']:.4f}" if last else f"train loss {self.final_loss:.4f}"
            if "accuracy" in last:
                final += f", val accuracy {last['accuracy']:.3f}"
            lines.append(f"final {final} after {self.updates} updates ({self.samples} samples) in {self.seconds:.1f}s")
        if self.skipped_steps:
            lines.append(f"{self.skipped_steps} steps skipped by the fp16 GradScaler (not counted as updates)")
        return "\n".join(lines)

    def compared_with(self, trial: dict[str, Any], objective: str = "loss") -> str:
        """Whether this run reproduced a search's ``trial`` (a :meth:`SearchResult.trial`): the same final
        value of the search's ``objective`` (its validation loss, accuracy, or the task's metric)."""
        mine = self.final_loss if objective == "loss" or not self.evals else self.final_value(objective)
        if trial.get("value") is None:  # pruned or failed: it ran no whole budget to compare with
            return (f"trial {trial['number']} of the search ended {trial.get('state', 'early').lower()}, with no final "
                    f"{objective} to compare with; this run: {mine}")
        same = "the same" if mine == trial["value"] else "NOT the same"
        return (f"trial {trial['number']} of the search: {objective} {trial['value']}; this run: {mine} ({same})")

    def final_value(self, metric: str) -> float:
        """The last evaluation's ``metric`` (perplexity: exp of its loss); NaN where it has none."""
        last = self.evals[-1] if self.evals else {}
        if metric not in last and not (metric == "perplexity" and "loss" in last):
            return math.nan
        return Objective(metric, "minimize").value(last)

    def __repr__(self) -> str:  # the curves run to kilobytes: table() has the detail
        state = f"diverged at update {self.diverged_at}" if self.diverged else f"final loss {self.final_loss:.4g}"
        return f"TrainResult(task={self.task!r}, lr={self.config.get('lr'):.3g}, updates={self.updates}, {state})"

    def plot(self, ax: Any = None) -> Any:
        """Training loss (and validation loss) against optimizer updates; returns the Axes."""
        ax = new_axes(ax)
        ax.plot(self.steps, self.losses, lw=0.8, alpha=0.6, label="train loss")
        if self.evals:
            ax.plot([e["step"] for e in self.evals], [e["loss"] for e in self.evals], "o-", label="val loss")
        if self.diverged and self.diverged_at is not None:
            ax.axvline(self.diverged_at, color="red", ls="--", label="diverged")
        ax.set_xlabel("optimizer update")
        ax.set_ylabel("loss")
        ax.set_title(f"{self.task}: lr={self.config.get('lr'):.3g}")
        ax.legend()
        return ax
