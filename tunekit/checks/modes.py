"""Check 6, train/eval modes: which modules make the output differ between train() and eval()?"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import nn

from tunekit.inputs.data import Batch
from tunekit.inputs.task import LossComputer
from tunekit.checks.common import forward, outputs_of, raised
from tunekit.results import Finding

__all__ = ["check_modes", "EXPECTED_MODE_MODULES"]

CHECK = "modes"

# The modules of torch whose output depends on the mode by design: dropout (of every kind,
# also inside the recurrent and attention layers) and normalisation by batch statistics.
EXPECTED_MODE_MODULES: tuple[type[nn.Module], ...] = (
    nn.Dropout, nn.Dropout1d, nn.Dropout2d, nn.Dropout3d, nn.AlphaDropout, nn.FeatureAlphaDropout,
    nn.BatchNorm1d, nn.BatchNorm2d, nn.BatchNorm3d, nn.SyncBatchNorm, nn.InstanceNorm1d, nn.InstanceNorm2d,
    nn.InstanceNorm3d, nn.RNNBase, nn.MultiheadAttention, nn.TransformerEncoderLayer, nn.TransformerDecoderLayer,
    nn.TransformerEncoder, nn.TransformerDecoder, nn.Transformer,
)
# Outputs equal to this relative tolerance are the same output (eval-mode fast paths of torch's
# Transformer layers reorder float sums).
RTOL = 1e-4


def _output_fn(model: nn.Module, compute: LossComputer, batch: Batch) -> Callable[[], torch.Tensor]:
    """A function returning the model's output (or, where it is hidden, the loss) on ``batch``, with
    the RNG reseeded so that only the mode, not the dropout draw, can change it."""
    def run() -> torch.Tensor:
        with torch.random.fork_rng(devices=[]), torch.no_grad():
            torch.manual_seed(0)
            out, _ = outputs_of(model, compute, batch)
            if out is None:
                out = forward(model, compute, batch).loss
            return out.detach().float().clone()
    return run


def _same(a: torch.Tensor, b: torch.Tensor) -> bool:
    if a.shape != b.shape:
        return False
    finite = a[torch.isfinite(a)]
    scale = float(finite.abs().max()) if finite.numel() else 0.0
    return bool(torch.allclose(a, b, rtol=RTOL, atol=RTOL * max(scale, 1e-12), equal_nan=True))


class _Buffers:
    """The model's buffers, to put back after a forward in train mode (BatchNorm updates its running stats)."""

    def __init__(self, model: nn.Module) -> None:
        self.saved = [(b, b.detach().clone()) for b in model.buffers()]

    @torch.no_grad()
    def restore(self) -> None:
        for b, value in self.saved:
            b.copy_(value)


def _differing(model: nn.Module, run: Callable[[], torch.Tensor], base: torch.Tensor,
               buffers: _Buffers) -> list[tuple[str, nn.Module]]:
    """The modules whose own train flag, set alone (every other module in eval), changes the output."""
    found = []
    for name, module in model.named_modules():
        module.training = True  # this module only: .train() would recurse into its children
        try:
            changed = not _same(run(), base)
        finally:
            module.training = False
            buffers.restore()
        if changed:
            found.append((name or type(model).__name__, module))
    return found


def check_modes(model: nn.Module, compute: LossComputer, batch: Batch) -> list[Finding]:
    """Compare train() and eval() outputs on ``batch``; name the modules that make them differ, and
    warn about those that are neither dropout nor normalisation."""
    run = _output_fn(model, compute, batch)
    buffers = _Buffers(model)
    try:
        model.eval()
        base = run()
        model.train()
        same = _same(run(), base)
        buffers.restore()
        if same:
            return [Finding(CHECK, "pass", "train() and eval() give the same output")]
        model.eval()
        found = _differing(model, run, base, buffers)
    except Exception as exc:
        return [raised(CHECK, exc, "the forward")]
    expected = [f"{n} ({type(m).__name__})" for n, m in found if isinstance(m, EXPECTED_MODE_MODULES)]
    other = [f"{n} ({type(m).__name__})" for n, m in found if not isinstance(m, EXPECTED_MODE_MODULES)]
    out: list[Finding] = []
    if other:
        out.append(Finding(CHECK, "warn", f"{', '.join(other)} changes the output between train() and eval(), and is "
                           "neither dropout nor normalisation", {"modules": other},
                           "check that its self.training branch is meant (an inverted dropout rescales by 1/(1-p))"))
    if expected:
        out.append(Finding(CHECK, "info", f"train() and eval() differ through {', '.join(expected[:4])}"
                           f"{' and more' if len(expected) > 4 else ''} (dropout/normalisation, as expected)",
                           {"modules": expected}))
    if not found:  # the whole model differs, but no single module alone does: modules interact
        out.append(Finding(CHECK, "info", "train() and eval() differ, through several modules together"))
    return out
