"""What ``tunekit doctor`` found: findings, and the evidence worth a picture.

This module imports no torch (only json, numpy and, to plot, matplotlib lazily),
so a saved doctor.json loads quickly anywhere.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from collections.abc import Callable
from typing import Any, ClassVar, Literal, Optional, Union

import numpy as np

from tunekit.errors import UsageError
from tunekit.plotting import new_axes, new_figure
from tunekit.results.base import Record, Result

__all__ = ["Finding", "DoctorResult", "DoctorSettings", "STATUSES"]


@dataclass
class DoctorSettings(Record):
    """What one ``doctor`` checked: the run it was told of (``lr``, ``warmup``, ``run_steps``), the step's
    settings as resolved, and where the objects came from. A 0.1.0 file's ``steps`` is ``run_steps``."""

    _renamed: ClassVar[dict[str, str]] = {"steps": "run_steps", "from": "adapted_from"}

    lr: Optional[float] = None
    warmup: Optional[Union[int, float]] = None
    run_steps: Optional[int] = None
    batch_size: Optional[int] = None
    accumulation_steps: Optional[int] = None
    clip_grad_norm: Optional[float] = None
    precision: Optional[str] = None
    device: Optional[str] = None
    seed: Optional[int] = None
    memory_budget: Optional[Union[int, str]] = None
    anomaly: bool = False
    overfit_floor: Optional[float] = None
    adapted_from: Optional[dict[str, Any]] = None
    extra: dict[str, Any] = field(default_factory=dict)  # keys this version does not know, kept as saved

Status = Literal["pass", "warn", "fail", "info"]
STATUSES: tuple[str, ...] = ("fail", "warn", "pass", "info")  # the order the report shows them in


@dataclass
class Finding:
    """One line of the report: what a check saw, the evidence, and what to do about it."""

    check: str
    status: Status
    message: str
    evidence: dict[str, Any] = field(default_factory=dict)
    fix: str = ""

    def __post_init__(self) -> None:
        if self.status not in STATUSES:
            raise UsageError(f"Finding status must be one of {', '.join(STATUSES)}, got {self.status!r}: "
                             "pass e.g. status='warn'")

    def line(self) -> str:
        fix = f"  -> {self.fix}" if self.fix and self.status in ("fail", "warn") else ""
        return f"[{self.status.upper():>4}] {self.check:<13} {self.message}{fix}"


@dataclass
class DoctorResult(Result):
    """Every finding of a doctor run, the per-layer gradient norms and the tiny-batch curve.

    ``grad_norms`` maps a layer (module) name to its gradient norm over its
    parameter norm; ``overfit_losses`` is the tiny-batch training curve.
    """

    _stem = "doctor"

    findings: list[dict[str, Any]]
    task: str = "model"
    grad_norms: dict[str, float] = field(default_factory=dict)
    overfit_losses: list[float] = field(default_factory=list)
    overfit_target: Optional[float] = None
    seconds: float = 0.0
    settings: DoctorSettings = field(default_factory=DoctorSettings)

    def __post_init__(self) -> None:  # a dict given (by hand, or from a 0.1.0 file) becomes its record
        self.settings = DoctorSettings.of(self.settings or {})  # type: ignore[assignment]

    @classmethod
    def build(cls, findings: list[Finding], **kwargs: Any) -> "DoctorResult":
        return cls(findings=[asdict(f) for f in findings], **kwargs)

    def items(self) -> list[Finding]:
        """The findings as :class:`Finding` objects."""
        return [Finding(**f) for f in self.findings]

    def restate(self, say: Callable[[str], str]) -> None:
        """Each finding's message and fix as ``say`` words them: a Trainer's user is told its ``learning_rate=``."""
        for f in self.findings:
            f["message"], f["fix"] = say(f["message"]), say(f["fix"])

    def count(self, status: str) -> int:
        return sum(f["status"] == status for f in self.findings)

    @property
    def failed(self) -> bool:
        return self.count("fail") > 0

    @property
    def exit_code(self) -> int:
        """What the CLI exits with: 1 when a check failed, else 0."""
        return 1 if self.failed else 0

    def by_check(self, check: str) -> list[Finding]:
        return [f for f in self.items() if f.check == check]

    def __repr__(self) -> str:
        return (f"DoctorResult(task={self.task!r}, fail={self.count('fail')}, warn={self.count('warn')}, "
                f"pass={self.count('pass')}, info={self.count('info')})")

    def table(self) -> str:
        """The report: failures first, then warnings, passes and information, one line each."""
        order = {s: i for i, s in enumerate(STATUSES)}
        items = sorted(self.items(), key=lambda f: order[f.status])  # stable: checks keep their order
        lines = [f.line() for f in items]
        verdict = "FAILED" if self.failed else "ok"
        lines.append(f"doctor {self.task}: {verdict}: {self.count('fail')} failed, {self.count('warn')} warned, "
                     f"{self.count('pass')} passed in {self.seconds:.1f}s")
        return "\n".join(lines)

    def plot(self, ax: Any = None) -> Any:
        """The headline: per-layer gradient norms (:meth:`plot_grad_norms`); returns the Axes.

        :meth:`plot_overview` draws it beside the tiny-batch loss curve.
        """
        return self.plot_grad_norms(ax)

    def plot_overview(self, fig: Any = None) -> Any:
        """Gradient flow (left) and the tiny-batch loss curve (right) on ``fig``; returns the Figure."""
        fig = fig if fig is not None else new_figure((11, 4.2))
        left, right = fig.subplots(1, 2)
        self.plot_grad_norms(left)
        self.plot_overfit(right)
        return fig

    def figure(self) -> Any:
        return self.plot_overview()

    def plot_grad_norms(self, ax: Any = None) -> Any:
        """|grad| / |param| per layer, on a log axis, in model order; returns the Axes."""
        ax = new_axes(ax)
        names = list(self.grad_norms)
        values = [self.grad_norms[n] for n in names]
        shown = [v if (math.isfinite(v) and v > 0) else np.nan for v in values]
        if names and any(np.isfinite(shown)):
            ax.barh(range(len(names)), shown, color="C0")
            ax.set_yticks(range(len(names)), [n or "(model)" for n in names], fontsize="x-small")
            ax.invert_yaxis()  # the first layer at the top
            ax.set_xscale("log")
        else:
            ax.text(0.5, 0.5, "no gradient norms measured", ha="center", va="center", transform=ax.transAxes)
        ax.set_xlabel("|grad| / |param| per layer")
        ax.set_title("gradient flow")
        return ax

    def plot_overfit(self, ax: Any = None) -> Any:
        """The tiny-batch training loss against updates, with the target; returns the Axes."""
        ax = new_axes(ax)
        if self.overfit_losses:
            ax.plot(range(1, len(self.overfit_losses) + 1), self.overfit_losses, color="C1", label="tiny-batch loss")
            if self.overfit_target is not None:
                ax.axhline(self.overfit_target, color="C2", ls="--", label=f"target {self.overfit_target:.3g}")
            if all(v > 0 for v in self.overfit_losses if math.isfinite(v)):
                ax.set_yscale("log")
            ax.legend(fontsize="small")
        else:
            ax.text(0.5, 0.5, "the tiny-batch overfit did not run", ha="center", va="center", transform=ax.transAxes)
        ax.set_xlabel("update")
        ax.set_ylabel("training loss")
        ax.set_title("overfit a tiny batch")
        return ax
