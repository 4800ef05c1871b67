"""The memory model of one training step, as numbers: per-phase fits of peak bytes against the batch.

Pure arithmetic (numpy, no torch), so a saved probe's model is read and plotted without training
code; :mod:`tunekit.probes.memory_trace` traces the step and fits this model.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Optional

import numpy as np

__all__ = ["MemoryModel", "PhaseFit"]


@dataclass
class PhaseFit:
    """A phase's peak bytes as a function of the batch size.

    peak(b) = max over ``lines`` of (fixed + per_sample * b): each moment of the
    phase holds an affine amount of memory in b, and the phase's peak is the
    largest of them, a convex, piecewise-linear function. ``fixed`` and
    ``per_sample`` are the line that is largest at large batches.
    """

    fixed: float
    per_sample: float
    lines: list[tuple[float, float]] = field(default_factory=list)

    def __call__(self, batch: float) -> float:
        if not self.lines:
            return self.fixed + self.per_sample * batch
        return max(a + c * batch for a, c in self.lines)


@dataclass
class MemoryModel:
    """Per-phase linear fits of peak bytes, plus the static components.

    ``static`` holds parameters, gradients, buffers and optimizer state, in bytes.
    ``traces`` holds the traced peaks: {batch size: {phase: bytes}}.
    """

    phases: dict[str, PhaseFit]
    static: dict[str, int]
    traces: dict[int, dict[str, int]] = field(default_factory=dict)
    accumulation_steps: int = 1
    # Memory that kernels allocate internally, below the dispatcher, where no trace
    # sees it (RNN and cuDNN workspaces, CPU im2col buffers), less what the trace counts
    # and a real step does not take: measured on real steps near the recommended batch.
    extra: Optional[PhaseFit] = None

    def peak(self, batch: int | float) -> float:
        """Predicted peak bytes of one step at micro-batch ``batch``: the largest phase, plus kernel-internal memory."""
        top = max(fit(batch) for fit in self.phases.values())
        return top + (self.extra(batch) if self.extra is not None else 0.0)

    def peak_phase(self, batch: int | float) -> str:
        return max(self.phases, key=lambda p: self.phases[p](batch))

    def activations(self, batch: int | float) -> float:
        """Bytes held by the forward pass beyond the static state, at ``batch``."""
        base = self.static["params"] + self.static["buffers"] + self.static["optimizer"]
        if self.accumulation_steps > 1:
            base += self.static["grads"]
        return max(0.0, self.phases["forward"](batch) - base)

    def largest_batch(self, budget_bytes: float, limit: int = 1 << 24) -> int:
        """The largest micro-batch whose predicted peak fits ``budget_bytes`` (0 if none)."""
        best = None
        ea, ec = (self.extra.fixed, self.extra.per_sample) if self.extra is not None else (0.0, 0.0)
        for fit in self.phases.values():
            for a, c in fit.lines or [(fit.fixed, fit.per_sample)]:
                a, c = a + ea, c + ec
                if c <= 0:
                    continue
                b = int(np.floor((budget_bytes - a) / c))
                best = b if best is None else min(best, b)
        if best is None:  # nothing grows with the batch
            best = limit if self.peak(1) <= budget_bytes else 0
        best = min(max(best, 0), limit)
        while best > 0 and self.peak(best) > budget_bytes:  # float rounding at the edge
            best -= 1
        return best

    def to_dict(self) -> dict[str, Any]:
        return {
            "phases": {k: {"fixed": v.fixed, "per_sample": v.per_sample, "lines": [list(x) for x in v.lines]}
                       for k, v in self.phases.items()},
            "static": dict(self.static),
            "traces": {str(k): v for k, v in self.traces.items()},
            "accumulation_steps": self.accumulation_steps,
            "extra": None if self.extra is None else {"fixed": self.extra.fixed, "per_sample": self.extra.per_sample},
        }
