"""Check 3, non-finite values: the first module whose output or gradient turns NaN/Inf, bad data,
and an fp16 scaler that keeps skipping steps."""

from __future__ import annotations

import contextlib
from collections.abc import Sequence
from typing import Any, Optional

import torch
from torch import nn

from tunekit.inputs.data import Batch
from tunekit.inputs.task import LossComputer
from tunekit.checks.common import forward, raised, split_xy, tensors_of
from tunekit.results import Finding

__all__ = ["check_data_finite", "check_nonfinite", "check_scaler_skips", "SKIP_WARN"]

CHECK = "nonfinite"

# The fp16 GradScaler starts at 2**16 and halves on each overflow until the gradients fit, so a
# few skips at the start are its calibration, not a fault. More than a quarter of all steps
# skipped means the gradients overflow fp16's range again and again: the model loses updates.
SKIP_WARN = 0.25
SCALER_CALIBRATION = 8  # skips the scaler may spend finding its scale (2**16 down to 2**8)


def _finite(t: torch.Tensor) -> bool:
    return not t.is_floating_point() or bool(torch.isfinite(t).all())


def check_data_finite(batches: Sequence[Batch]) -> list[Finding]:
    """A NaN or Inf in the inputs or the targets of any of ``batches``."""
    out: list[Finding] = []
    for i, batch in enumerate(batches):
        inputs, targets = split_xy(batch)
        for part, what in ((inputs, "inputs"), (targets, "targets")):
            bad = [t for t in tensors_of(part) if not _finite(t)]
            if bad:
                n = int(sum((~torch.isfinite(t)).sum() for t in bad))
                out.append(Finding(CHECK, "fail", f"{n} NaN/Inf value(s) in the {what} of batch {i}",
                                   {"batch": i, "where": what, "count": n},
                                   f"clean the data: drop or impute the non-finite {what} before training"))
    return out[:2]  # one per part is enough to act on


class _Watch:
    """Forward hooks on every module, and gradient hooks on their inputs and outputs: the first
    place a non-finite value appears, in forward order and in backward order."""

    def __init__(self, model: nn.Module) -> None:
        self.forward_first: Optional[str] = None
        self.events: list[tuple[int, str, str, bool]] = []  # (tensor id, module, "in"/"out", finite)
        self.handles: list[Any] = []
        for name, module in model.named_modules():
            label = f"{name or type(model).__name__} ({type(module).__name__})" if name else type(model).__name__
            self.handles.append(module.register_forward_hook(self._hook(label)))

    def _hook(self, name: str) -> Any:
        def hook(module: nn.Module, inputs: Any, output: Any) -> None:
            outs = [t for t in tensors_of(output) if t.is_floating_point()]
            if self.forward_first is None and not all(_finite(t) for t in outs):
                # Children finish before their parent: the first is the deepest module at fault,
                # unless its own inputs were already bad.
                if all(_finite(t) for t in tensors_of(inputs)):
                    self.forward_first = name
            for kind, ts in (("in", tensors_of(inputs)), ("out", outs)):
                for t in ts:
                    if t.requires_grad:
                        t.register_hook(self._grad_hook(id(t), name, kind))
        return hook

    def _grad_hook(self, tid: int, name: str, kind: str) -> Any:
        def hook(grad: torch.Tensor) -> None:
            self.events.append((tid, name, kind, _finite(grad)))
        return hook

    def backward_first(self) -> Optional[tuple[str, str]]:
        """(module, "in"/"out") where the gradient first turned non-finite in backward."""
        first = next((i for i, e in enumerate(self.events) if not e[3]), None)
        if first is None:
            return None
        tid = self.events[first][0]
        same = [e for e in self.events[first:] if e[0] == tid and not e[3]]
        # The first bad tensor is the output of one module and the input of the next: the NaN came
        # from inside the module that consumed it (its output gradient was still finite). Where no
        # module consumed it, it arrived at a module's output from code between modules. The same
        # tensor may belong to a module and to its parent: name the deepest.
        kind = "in" if any(e[2] == "in" for e in same) else "out"
        name = max((e[1] for e in same if e[2] == kind), key=lambda n: n.count("."))
        return name, kind

    def close(self) -> None:
        for h in self.handles:
            h.remove()


def _forward_backward(model: nn.Module, compute: LossComputer, batch: Batch, watch: _Watch,
                      anomaly: bool) -> Optional[Finding]:
    fw = forward(model, compute, batch)
    if watch.forward_first is not None:
        return Finding(CHECK, "fail", f"the forward output of {watch.forward_first} is the first to become NaN/Inf",
                       {"module": watch.forward_first, "phase": "forward"},
                       "look for log/sqrt/division of values that can be <= 0, or overflow; add an epsilon or clamp")
    if not bool(torch.isfinite(fw.loss.detach()).all()):
        return Finding(CHECK, "fail", f"the loss is {float(fw.loss.detach().float().mean())} on finite outputs",
                       {"phase": "loss"}, "the loss function itself produces NaN/Inf: check its inputs' range "
                       "(e.g. log of probabilities that reach 0)")
    ctx = torch.autograd.detect_anomaly(check_nan=True) if anomaly else contextlib.nullcontext()
    with ctx:
        fw.loss.float().backward()
    where = watch.backward_first()
    if where is not None:
        name, kind = where
        what = f"inside {name} (its output gradient is finite, its input gradient is not)" if kind == "in" \
            else f"arriving at the output of {name}"
        return Finding(CHECK, "fail", f"the gradient first becomes NaN/Inf {what}",
                       {"module": name, "phase": "backward", "side": kind},
                       "a function with an infinite or NaN derivative at the values it sees (sqrt or log at 0, "
                       "the NaN branch of a torch.where, the norm of a zero vector): add an epsilon or clamp its input")
    bad = [n for n, p in model.named_parameters() if p.grad is not None and not _finite(p.grad)]
    if bad:
        return Finding(CHECK, "fail", f"non-finite gradient in parameter '{bad[0]}' ({len(bad)} in all)",
                       {"params": bad, "phase": "backward"}, "an op between modules has an infinite derivative here")
    return None


def check_nonfinite(model: nn.Module, compute: LossComputer, batch: Batch, *, anomaly: bool = False) -> list[Finding]:
    """Run one forward and backward with hooks; name the first module whose output or gradient is NaN/Inf.

    ``anomaly=True`` also runs the backward under ``torch.autograd.detect_anomaly`` (slow).
    """
    model.train()
    model.zero_grad(set_to_none=True)
    watch = _Watch(model)
    try:
        found = _forward_backward(model, compute, batch, watch, anomaly)
    except Exception as exc:
        return [raised(CHECK, exc, "the forward or backward")]
    finally:
        watch.close()
    if found is not None:
        return [found]
    return [Finding(CHECK, "pass", "every module's output and gradient is finite on a batch")]


def check_scaler_skips(skipped: int, steps: int) -> list[Finding]:
    """How often the fp16 GradScaler skipped the optimizer step over ``steps`` attempted steps."""
    if steps <= 0:
        return []
    frac = skipped / steps
    evidence = {"skipped": skipped, "steps": steps}
    if skipped > SCALER_CALIBRATION and frac > SKIP_WARN:
        return [Finding(CHECK, "warn", f"the fp16 GradScaler skipped {skipped} of {steps} steps ({frac:.0%}): "
                        "gradients overflow fp16", evidence, "use bf16, lower the LR, or clip gradients")]
    return [Finding(CHECK, "pass" if skipped == 0 else "info",
                    f"the fp16 GradScaler skipped {skipped} of {steps} steps (its calibration)", evidence)]
