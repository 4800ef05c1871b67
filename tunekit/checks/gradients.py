"""Check 1, gradient flow: does a backward reach every parameter that should learn, and evenly?"""

from __future__ import annotations

import math
from typing import Optional

import numpy as np
import torch
from torch import nn

from tunekit.defaults import CLIP_GRAD_NORM
from tunekit.inputs.data import Batch
from tunekit.training.state import Snapshot
from tunekit.training.step import TrainStep
from tunekit.inputs.task import LossComputer
from tunekit.checks.common import forward, raised
from tunekit.results import Finding

__all__ = ["check_gradient_flow", "layer_ratios", "VANISHING", "EXPLODING"]

CHECK = "gradients"

# A layer whose |grad|/|param| is 1000x below the median layer's moves, relative to its own
# size, three decades less per update than the typical layer: in a run of a few thousand
# updates it effectively stays at its initialisation. Healthy nets (CNNs, Transformers,
# LSTMs) keep their layers within about two decades of each other at initialisation.
VANISHING = 1e-3
# The mirror image: a layer 1000x above the median takes steps that are huge for its size
# at any LR that suits the rest of the model.
EXPLODING = 1e3
# Relative comparisons need a few layers to make a median of.
MIN_LAYERS = 3
# The LR of the one update after which blocked gradients are looked at again: an ordinary small LR
# moves a zero-initialised weight off zero and changes little else.
RECHECK_LR = 1e-3
# Names listed in one line of the report; the evidence holds them all.
SHOWN = 4


def _names(names: list[str]) -> str:
    more = f" and {len(names) - SHOWN} more" if len(names) > SHOWN else ""
    return ", ".join(names[:SHOWN]) + more


def layer_ratios(model: nn.Module) -> tuple[dict[str, float], set[str]]:
    """|grad| / |param| of each module's own trainable parameters (after a backward), in model order,
    and the names of the embedding layers (their gradient is sparse by nature: only the rows looked up)."""
    ratios: dict[str, float] = {}
    sparse: set[str] = set()
    for name, module in model.named_modules():
        params = [p for p in module.parameters(recurse=False) if p.requires_grad and p.grad is not None]
        if not params:
            continue
        w = math.sqrt(sum(float(p.detach().float().pow(2).sum()) for p in params))
        g = math.sqrt(sum(float(p.grad.detach().float().pow(2).sum()) for p in params))  # type: ignore[union-attr]
        if w > 0:  # a zero-initialised layer (a bias alone) has no scale to compare with
            ratios[name] = g / w
        if isinstance(module, (nn.Embedding, nn.EmbeddingBag)):
            sparse.add(name)
    return ratios, sparse


def _blocked(model: nn.Module) -> tuple[list[str], list[str]]:
    """(parameters that require grad but got no gradient, those whose gradient is all zeros)."""
    none = [n for n, p in model.named_parameters() if p.requires_grad and p.grad is None]
    zero = [n for n, p in model.named_parameters() if p.requires_grad and p.grad is not None and not bool(p.grad.any())]
    return none, zero


def _still_blocked(model: nn.Module, optimizer: torch.optim.Optimizer, compute: LossComputer,
                   batch: Batch, clip: Optional[float]) -> tuple[list[str], list[str]]:
    """:func:`_blocked` after one update of the shared step, which is undone afterwards.

    A zero-initialised layer (a residual branch's last layer or norm gain, a zero head) blocks the
    gradient of the layers before it at initialisation only; one update moves it off zero. A
    detached path or a constant branch blocks them after any number of updates.
    """
    snap = Snapshot(model, optimizer)
    try:
        device = next(model.parameters()).device
        step = TrainStep(model, optimizer, compute, device=device, clip_grad_norm=clip)
        step.set_lr(RECHECK_LR)
        step([batch])
        model.zero_grad(set_to_none=True)
        forward(model, compute, batch).loss.float().backward()
        return _blocked(model)
    finally:
        snap.restore()


def _missing(model: nn.Module, none: list[str], zero: list[str]) -> list[Finding]:
    """Parameters that require grad but got none, or an all-zero one; frozen ones as information."""
    out: list[Finding] = []
    frozen = [n for n, p in model.named_parameters() if not p.requires_grad]
    if none:
        out.append(Finding(CHECK, "fail", f"no gradient reaches {len(none)} parameter(s) that require grad: {_names(none)}",
                           {"no_grad": none}, "a detached path (.detach(), .item(), .data, numpy) or an unused layer "
                           "cuts them off: connect them to the loss, or set requires_grad=False"))
    if zero:
        out.append(Finding(CHECK, "fail", f"all-zero gradient in {len(zero)} parameter(s): {_names(zero)}",
                           {"zero_grad": zero}, "a constant branch (torch.where with a constant condition, a mask "
                           "of zeros, a multiplication by 0) or dead units block them: check that path"))
    if frozen:
        out.append(Finding(CHECK, "info", f"{len(frozen)} parameter(s) frozen (requires_grad=False): {_names(frozen)}",
                           {"frozen": frozen}, "if they should train, set requires_grad=True"))
    return out


def _not_optimized(model: nn.Module, optimizer: Optional[torch.optim.Optimizer]) -> list[Finding]:
    """Parameters that require grad but that the optimizer does not hold: they get gradients and
    never change (a layer added after the optimizer was built, a param group forgotten)."""
    if optimizer is None:
        return []
    held = {id(p) for g in optimizer.param_groups for p in g["params"]}
    missing = [n for n, p in model.named_parameters() if p.requires_grad and id(p) not in held]
    if not missing:
        return []
    return [Finding(CHECK, "fail", f"{len(missing)} trainable parameter(s) are not in the optimizer, so never "
                    f"updated: {_names(missing)}", {"not_in_optimizer": missing},
                    "build the optimizer after the model is complete, from model.parameters()")]


def _spread(ratios: dict[str, float], sparse: set[str]) -> list[Finding]:
    """Layers whose relative gradient is far below (vanishing) or far above (exploding) the median layer's."""
    finite = {n: r for n, r in ratios.items() if math.isfinite(r) and r > 0}
    if len(finite) < MIN_LAYERS:
        return []
    median = float(np.median(list(finite.values())))
    low = [n for n, r in finite.items() if r < VANISHING * median and n not in sparse]
    high = [n for n, r in finite.items() if r > EXPLODING * median]
    out: list[Finding] = []
    if low and high:  # one gradient decaying through the depth: the same fault seen from both ends
        span = math.log10(max(finite[n] for n in high) / min(finite[n] for n in low))
        return [Finding(CHECK, "warn", f"gradients spread over {span:.0f} decades of |grad|/|param|: vanishing in "
                        f"{_names(low)}, largest in {_names(high)}", {"vanishing": low, "exploding": high,
                        "median_ratio": median}, "use normalisation layers, residual connections, ReLU/GELU "
                        "instead of sigmoid/tanh, or a better initialisation")]
    if low:
        worst = min(finite[n] for n in low)
        out.append(Finding(CHECK, "warn", f"vanishing gradients in {len(low)} layer(s): {_names(low)} "
                           f"(|grad|/|param| down to {worst / median:.1e} of the median layer's {median:.2e})",
                           {"vanishing": low, "median_ratio": median}, "use a normalisation layer, residual "
                           "connections, ReLU/GELU instead of sigmoid/tanh, or a better initialisation"))
    if high:
        worst = max(finite[n] for n in high)
        out.append(Finding(CHECK, "warn", f"exploding gradients in {len(high)} layer(s): {_names(high)} "
                           f"(|grad|/|param| up to {worst / median:.1e} times the median layer's {median:.2e})",
                           {"exploding": high, "median_ratio": median}, "lower the initial weight scale, add "
                           "normalisation, or clip the gradient norm"))
    return out


def check_gradient_flow(model: nn.Module, compute: LossComputer, batch: Batch,
                        optimizer: Optional[torch.optim.Optimizer] = None, *,
                        clip_grad_norm: Optional[float] = CLIP_GRAD_NORM) -> list[Finding]:
    """One backward of ``batch``'s loss, then what reached each parameter, and (given the ``optimizer``)
    whether it will update every parameter that requires grad. Given the optimizer, a parameter
    without a gradient is looked at again after one update (undone): only one that stays blocked fails.

    The last finding's evidence holds ``ratios``: |grad|/|param| per layer, for the plot.
    ``clip_grad_norm`` is the run's clipping, for that one update (the doctor passes the task's).
    """
    model.train()
    model.zero_grad(set_to_none=True)
    try:
        forward(model, compute, batch).loss.float().backward()
    except Exception as exc:
        return [raised(CHECK, exc, "the forward or backward")]
    grads = [p.grad for p in model.parameters() if p.grad is not None]
    if any(not bool(torch.isfinite(g).all()) for g in grads):
        return [Finding(CHECK, "info", "gradients are not finite: see the nonfinite check; gradient flow not judged")]
    ratios, sparse = layer_ratios(model)
    none, zero = _blocked(model)
    if (none or zero) and optimizer is not None:
        try:
            later_none, later_zero = _still_blocked(model, optimizer, compute, batch, clip_grad_norm)
        except Exception as exc:
            return [raised(CHECK, exc, "one update")]
        blocked = none + zero
        none, zero = [n for n in blocked if n in later_none], [n for n in blocked if n in later_zero]
    out = _missing(model, none, zero) + _not_optimized(model, optimizer) + _spread(ratios, sparse)
    if not any(f.status in ("fail", "warn") for f in out):
        out.append(Finding(CHECK, "pass", f"every trainable parameter gets a gradient; {len(ratios)} layers within "
                           f"{math.log10(VANISHING ** -1):.0f} decades of the median |grad|/|param|"))
    summary = next((f for f in reversed(out) if f.status != "info"), out[-1])
    summary.evidence["ratios"] = ratios
    return out


def take_ratios(findings: list[Finding]) -> dict[str, float]:
    """The per-layer |grad|/|param| ratios of the gradient-flow findings, lifted out of their evidence
    (the result keeps them once, as ``grad_norms``)."""
    for f in findings:
        if f.check == CHECK and "ratios" in f.evidence:
            return dict(f.evidence.pop("ratios"))
    return {}

