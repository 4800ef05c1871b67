"""The shared training step: one optimizer update over K micro-batches.

This is the only code in tunekit that trains. ``train()``, the LR range test,
the batch-size probe and every search trial call :class:`TrainStep`, so what
they measure is what a real run does.

One update, top to bottom:

1. zero the gradients;
2. for each of the K micro-batches: forward under autocast, scale the loss by
   1/K (and by the GradScaler's factor in fp16), backward;
3. read the mean loss once (the only host sync of the step); if it is not
   finite, drop the gradients and report divergence;
4. unscale (fp16), clip by global norm and read the norm;
5. step the optimizer, through the scaler in fp16. A step the scaler skips for
   overflow is reported as skipped, so the caller does not count it as an update.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

import torch
from torch import nn

from tunekit.inputs.data import Batch, batch_size_of, to_device
from tunekit.errors import SetupError, UsageError
from tunekit.precision import Precision, check_precision
from tunekit.inputs.task import LossComputer, loss_problem

__all__ = ["StepOutput", "TrainStep", "Updates", "resolve_device", "autocast_context", "make_scaler"]


def resolve_device(device: str | torch.device | None) -> torch.device:
    """``"auto"``/None picks CUDA when present, else CPU."""
    if device is None or device == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    try:
        dev = torch.device(device)
    except (RuntimeError, TypeError):
        raise UsageError(f"device {device!r} is not a device: use cpu, cuda, cuda:N or auto") from None
    if dev.type == "cuda" and not torch.cuda.is_available():
        raise UsageError(f"device {device!r} asked for, but this machine has no CUDA GPU: pass device=cpu")
    if dev.type not in ("cpu", "cuda"):
        raise UsageError(f"device {device!r} is not supported: use cpu, cuda, cuda:N or auto")
    return dev


def autocast_context(precision: Precision, device: torch.device) -> contextlib.AbstractContextManager[None]:
    if precision == "fp32":
        return contextlib.nullcontext()
    dtype = torch.bfloat16 if precision == "bf16" else torch.float16
    return torch.autocast(device_type=device.type, dtype=dtype)


def make_scaler(precision: Precision, device: torch.device) -> torch.amp.GradScaler | None:
    """A GradScaler for fp16, None otherwise (bf16 has fp32's range and needs none)."""
    if precision != "fp16":
        return None
    return torch.amp.GradScaler(device.type)


@dataclass
class StepOutput:
    """What one update reports."""

    loss: float  # mean loss over the K micro-batches (unscaled)
    grad_norm: float  # global gradient norm before clipping (nan when the step was dropped)
    skipped: bool  # the GradScaler skipped the optimizer step (fp16 overflow)
    finite: bool  # False: the loss was NaN/inf, no update was made
    samples: int  # samples seen in this update


class TrainStep:
    """One optimizer update: accumulation, mixed precision, clipping.

    The caller sets the LR with :meth:`set_lr` before each call, so any schedule
    (cosine for training, an exponential sweep for the LR range test) drives the
    same step. The ratios between the optimizer's param-group LRs, as the user's
    optimizer factory set them, are kept.
    """

    def __init__(
        self,
        model: nn.Module,
        optimizer: torch.optim.Optimizer,
        compute: LossComputer,
        *,
        device: torch.device,
        precision: Precision = "fp32",
        accumulation_steps: int = 1,
        clip_grad_norm: float | None = None,
        scaler: torch.amp.GradScaler | None = None,
    ) -> None:
        precision = check_precision(precision)
        if accumulation_steps < 1:
            raise UsageError(f"accumulation_steps must be >= 1, got {accumulation_steps}")
        self.model = model
        self.optimizer = optimizer
        self.compute = compute
        self.device = device
        self.precision = precision
        self.accumulation_steps = accumulation_steps
        # An infinite max_norm makes clip_grad_norm_ a pure norm computation.
        self.max_norm = math.inf if clip_grad_norm is None else float(clip_grad_norm)
        self.scaler = scaler if scaler is not None else make_scaler(precision, device)
        self.params = [p for g in optimizer.param_groups for p in g["params"]]
        # The largest group LR is the reference, so a frozen group at LR 0 stays frozen.
        base = max(float(g["lr"]) for g in optimizer.param_groups)
        self.lr_ratios = [float(g["lr"]) / base if base > 0 else 1.0 for g in optimizer.param_groups]

    def set_lr(self, lr: float) -> None:
        for group, ratio in zip(self.optimizer.param_groups, self.lr_ratios):
            group["lr"] = lr * ratio

    def forward(self, batch: Batch) -> tuple[torch.Tensor, int]:
        """Forward of one micro-batch under autocast: (loss, samples)."""
        batch = to_device(batch, self.device)
        with autocast_context(self.precision, self.device):
            loss, _, _ = self.compute(self.model, batch)
        problem = loss_problem(loss, self.compute)  # its type and shape only: no sync
        if problem is not None:
            raise SetupError(": ".join(problem))
        return loss, batch_size_of(batch)

    def backward(self, loss: torch.Tensor) -> None:
        """Backward of one micro-batch's loss, scaled by 1/K (and by the GradScaler in fp16)."""
        scaled = loss.float() / self.accumulation_steps
        if self.scaler is not None:
            scaled = self.scaler.scale(scaled)
        scaled.backward()

    def zero_grad(self) -> None:
        self.optimizer.zero_grad(set_to_none=True)

    def accumulate(self, micro_batches: Sequence[Batch]) -> tuple[torch.Tensor, int]:
        """Zero the gradients, then forward and backward each micro-batch: (summed loss, samples).

        The loss stays a tensor: nothing here reads a value, so the memory tracer runs
        the same pieces on fake tensors."""
        self.zero_grad()
        total: torch.Tensor | None = None
        samples = 0
        for batch in micro_batches:
            loss, n = self.forward(batch)
            self.backward(loss)
            total = loss.detach().float() if total is None else total + loss.detach().float()
            samples += n
        return total, samples  # type: ignore[return-value]

    def apply(self, assume_finite: bool = False) -> torch.Tensor:
        """Unscale (fp16), clip by global norm and step the optimizer: the norm before clipping, unread.

        The GradScaler's ``update`` is left to the caller, which reads the scale to learn of a skip.
        ``assume_finite`` steps without the scaler's check for inf/NaN gradients, which reads a value:
        for the memory trace on fake tensors, where none can be read (a finite step is the one that
        allocates the optimizer's memory)."""
        if self.scaler is not None:
            self.scaler.unscale_(self.optimizer)
        norm = nn.utils.clip_grad_norm_(self.params, self.max_norm)
        if self.scaler is None or assume_finite:
            self.optimizer.step()
        else:
            self.scaler.step(self.optimizer)
        return norm

    def __call__(self, micro_batches: Sequence[Batch]) -> StepOutput:
        """One update: accumulate, read the loss (the one host sync), apply."""
        if len(micro_batches) != self.accumulation_steps:
            k = self.accumulation_steps
            raise UsageError(f"a step takes accumulation_steps={k} micro-batches, got {len(micro_batches)}: "
                             f"pass a list of {k}, e.g. BatchStream(data, batch_size).take({k})")
        total, samples = self.accumulate(micro_batches)
        loss_value = float(total) / self.accumulation_steps
        if not math.isfinite(loss_value):
            # Divergence: drop these gradients rather than step on them.
            self.zero_grad()
            return StepOutput(loss_value, math.nan, skipped=False, finite=False, samples=samples)
        # The scaler skips optimizer.step() on inf/nan gradients and lowers its
        # scale; a lower scale after update() is how we learn that it skipped.
        scale_before = self.scaler.get_scale() if self.scaler is not None else 0.0
        norm = self.apply()
        skipped = False
        if self.scaler is not None:
            self.scaler.update()
            skipped = self.scaler.get_scale() < scale_before
        return StepOutput(loss_value, float(norm), skipped=skipped, finite=True, samples=samples)


class Updates:
    """Drive a :class:`TrainStep` for up to ``max_steps`` counted updates.

    Iterating yields ``(update, lr, output)`` for each update that counted. A
    step the GradScaler skipped is retried at the same LR and not yielded, so
    schedules and sweeps advance per real update. A non-finite loss ends the
    iteration with ``diverged_at`` set; so do ``max_skips_in_a_row`` skips in a
    row (fp16 that never recovers is divergence too).
    """

    def __init__(
        self,
        step: TrainStep,
        batches: Iterator[Batch],
        lrs: Sequence[float],
        *,
        max_skips_in_a_row: int = 50,
    ) -> None:
        self.step = step
        self.batches = batches
        self.lrs = lrs
        self.max_skips_in_a_row = max_skips_in_a_row
        self.skipped = 0
        self.diverged_at: int | None = None
        self.last: StepOutput | None = None

    def __iter__(self) -> Iterator[tuple[int, float, StepOutput]]:
        k = self.step.accumulation_steps
        skips_in_a_row = 0
        update = 0
        while update < len(self.lrs):
            lr = float(self.lrs[update])
            self.step.set_lr(lr)
            out = self.step([next(self.batches) for _ in range(k)])
            self.last = out
            if not out.finite:
                self.diverged_at = update
                return
            if out.skipped:
                self.skipped += 1
                skips_in_a_row += 1
                if skips_in_a_row >= self.max_skips_in_a_row:
                    self.diverged_at = update
                    return
                continue
            skips_in_a_row = 0
            yield update, lr, out
            update += 1
