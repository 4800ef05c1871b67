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
# Draws of a random module's output, and how far above the noise their mean may sit from the eval
# output before the module is called biased (unbiased draws give a ratio near 1 on any output of more
# than a few dozen values; a dropout of p = 0.1 that does not rescale gives 1 + 16 * 0.1 / 0.9, about 2.8).
DRAWS = 16
BIAS_RATIO = 1.6


def _output_fn(model: nn.Module, compute: LossComputer, batch: Batch) -> Callable[..., torch.Tensor]:
    """A function returning the model's output (or, where it is hidden, the loss) on ``batch``, with
    the RNG reseeded (``seed``) so that only the mode, not the dropout draw, can change it."""
    def run(seed: int = 0) -> torch.Tensor:
        with torch.random.fork_rng(devices=[]), torch.no_grad():
            torch.manual_seed(seed)
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


def _differing(model: nn.Module, run: Callable[..., torch.Tensor], base: torch.Tensor,
               buffers: _Buffers) -> list[tuple[str, nn.Module, bool]]:
    """The modules whose own train flag, set alone (every other module in eval), changes the output,
    each with whether the change is expected (torch's dropout or normalisation, or :func:`_dropout_like`)."""
    found = []
    for name, module in model.named_modules():
        module.training = True  # this module only: .train() would recurse into its children
        try:
            changed = not _same(run(), base)
        finally:
            module.training = False
            buffers.restore()
        if changed:
            # torch's dropout and normalisation are expected by their type: only other modules pay the draws.
            expected = isinstance(module, EXPECTED_MODE_MODULES) or _dropout_like(module, run, buffers)
            found.append((name or type(model).__name__, module, expected))
    return found


def _dropout_like(module: nn.Module, run: Callable[..., torch.Tensor], buffers: _Buffers) -> bool:
    """Whether ``module``'s train mode acts as an inverted dropout: its own output is random (another
    RNG seed gives another one) and right on average (the mean over seeds is its eval output, within
    the noise). Dropout applied functionally from a module's flag, as the attention of Hugging Face's
    models does, passes; a mode bug (a fixed change) or a dropout that does not rescale by 1/(1-p) does not."""
    module.training = True
    try:
        draws = [_own_output(module, run, seed) for seed in range(DRAWS)]
    finally:
        module.training = False
        buffers.restore()
    base = _own_output(module, run, 0)
    if base is None or any(d is None or d.shape != base.shape for d in draws):
        return False
    devs = torch.stack([d - base for d in draws])
    if _same(draws[1], draws[0]):
        return False  # not random: a fixed change of the output
    mean = devs.mean(0)
    spread = float(((devs - mean) ** 2).sum()) / (DRAWS - 1)  # one draw's variance, summed over the output
    # Unbiased draws: the squared norm of their mean is spread / DRAWS (in expectation); a bias adds to it.
    return float((mean ** 2).sum()) * DRAWS <= BIAS_RATIO * spread


def _own_output(module: nn.Module, run: Callable[..., torch.Tensor], seed: int) -> torch.Tensor | None:
    """Every floating tensor ``module`` outputs during one forward of the model (seeded), as one flat vector."""
    captured: list[torch.Tensor] = []

    def hook(_: nn.Module, __: object, out: object) -> None:
        captured.extend(t.detach().float().flatten() for t in _tensors(out) if t.is_floating_point())
    handle = module.register_forward_hook(hook)
    try:
        run(seed)
    finally:
        handle.remove()
    return torch.cat(captured) if captured else None


def _tensors(out: object) -> list[torch.Tensor]:
    if isinstance(out, torch.Tensor):
        return [out]
    if isinstance(out, dict):
        out = list(out.values())
    if isinstance(out, (list, tuple)):
        return [t for o in out for t in _tensors(o)]
    return []


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
    expected = [f"{n} ({type(m).__name__})" for n, m, ok in found if ok]
    other = [f"{n} ({type(m).__name__})" for n, m, ok in found if not ok]
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
