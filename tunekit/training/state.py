"""Snapshot and restore what a probe touches, so the user's objects come back bitwise.

A probe (the LR range test, the batch-size probe) trains the user's own model
and optimizer. :func:`preserved` takes a snapshot on the CPU, never on the GPU
where it would eat the memory being probed, and puts everything back when the
block ends, whether it ends normally, by an exception or by Ctrl-C:

* every parameter, gradient and buffer (non-persistent buffers included);
* each module's train/eval mode;
* the optimizer's state and param groups (LRs included);
* the GradScaler's state;
* the RNG states of torch (CPU and every CUDA device), numpy and ``random``.
"""

from __future__ import annotations

# Imported where used, not at the top: torch.utils.data; importing this module does not pay for them.
import copy
import random
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import numpy as np
import torch
from torch import nn

__all__ = ["Snapshot", "preserved", "seed_everything_for"]


def seed_everything_for(seed: int, device: torch.device) -> None:
    """Seed the CPU generator, and the CUDA generator of ``device`` only.

    ``torch.manual_seed`` would reseed every GPU (or queue a seed for CUDA's
    start), which is state outside what a run forks and puts back.
    """
    torch.default_generator.manual_seed(seed)
    if device.type == "cuda":
        with torch.cuda.device(device):
            torch.cuda.manual_seed(seed)


def _to_cpu(obj: Any) -> Any:
    if isinstance(obj, torch.Tensor):
        return obj.detach().to("cpu", copy=True)
    if isinstance(obj, dict):
        return {k: _to_cpu(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return type(obj)(_to_cpu(v) for v in obj)
    return copy.deepcopy(obj)


class Snapshot:
    """A CPU copy of a model, optimizer, scaler and the RNGs, that can be put back."""

    def __init__(self, model: nn.Module | None = None, optimizer: torch.optim.Optimizer | None = None,
                 scaler: torch.amp.GradScaler | None = None, data: Any = None) -> None:
        self.model = model
        self.optimizer = optimizer
        self.scaler = scaler
        self.tensors: list[tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]] = []
        self.modes: list[tuple[nn.Module, bool]] = []
        tensors: list[torch.Tensor] = []
        if model is not None:
            tensors += list(model.parameters()) + list(model.buffers())
            self.modes = [(m, m.training) for m in model.modules()]
        if optimizer is not None:  # it may hold tensors that are not in the model
            tensors += [p for g in optimizer.param_groups for p in g["params"]]
        seen: set[int] = set()
        for t in tensors:
            if id(t) in seen:  # tied weights
                continue
            seen.add(id(t))
            grad = t.grad.detach().to("cpu", copy=True) if t.grad is not None else None
            self.tensors.append((t, t.detach().to("cpu", copy=True), grad))
        # A DataLoader's own generators advance as it is iterated.
        self.generators = [(g, g.get_state()) for g in _generators(data)]
        self.optim_state = _to_cpu(optimizer.state_dict()) if optimizer is not None else None
        self.scaler_state = _to_cpu(scaler.state_dict()) if scaler is not None else None
        self.torch_rng = torch.get_rng_state()
        on_cuda = any(t.is_cuda for t, _, _ in self.tensors)
        self.cuda_rng = (torch.cuda.get_rng_state_all()
                         if torch.cuda.is_available() and (torch.cuda.is_initialized() or on_cuda) else None)
        self.numpy_rng = np.random.get_state()
        self.python_rng = random.getstate()

    @torch.no_grad()
    def restore(self) -> None:
        for t, value, grad in self.tensors:
            if t.shape != value.shape:  # a probe never resizes, but be exact if something did
                t.data = value.to(t.device)
            else:
                t.copy_(value)
            if isinstance(t, nn.Parameter) or t.requires_grad:
                t.grad = grad.to(t.device) if grad is not None else None
        for m, mode in self.modes:
            m.training = mode
        if self.optimizer is not None and self.optim_state is not None:
            # load_state_dict moves the state to each parameter's device; a deep
            # copy keeps the snapshot reusable (between repeats).
            self.optimizer.state.clear()
            self.optimizer.load_state_dict(copy.deepcopy(self.optim_state))
        if self.scaler is not None and self.scaler_state is not None:
            self.scaler.load_state_dict(copy.deepcopy(self.scaler_state))
            # An interrupted step can leave the optimizer marked "unscaled" in the
            # scaler; load_state_dict does not clear that, so reset it.
            per_opt = getattr(self.scaler, "_per_optimizer_states", None)
            if per_opt is not None:
                per_opt.clear()
        for g, state in self.generators:
            g.set_state(state)
        torch.set_rng_state(self.torch_rng)
        if self.cuda_rng is not None:
            torch.cuda.set_rng_state_all(self.cuda_rng)
        np.random.set_state(self.numpy_rng)
        random.setstate(self.python_rng)


def _generators(data: Any) -> list[torch.Generator]:
    from torch.utils.data import DataLoader

    if not isinstance(data, DataLoader):
        return []
    found = [data.generator, getattr(data.sampler, "generator", None),
             getattr(getattr(data, "batch_sampler", None), "sampler", None) and getattr(data.batch_sampler.sampler, "generator", None)]
    out: list[torch.Generator] = []
    for g in found:
        if isinstance(g, torch.Generator) and all(g is not o for o in out):
            out.append(g)
    return out


@contextmanager
def preserved(model: nn.Module | None = None, optimizer: torch.optim.Optimizer | None = None,
              scaler: torch.amp.GradScaler | None = None, data: Any = None) -> Iterator[Snapshot]:
    """Run a block on the user's objects and put them back exactly, however it ends."""
    snap = Snapshot(model, optimizer, scaler, data)
    try:
        yield snap
    finally:
        snap.restore()
