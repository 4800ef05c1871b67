"""What every stage of one probe shares: the memory it may fill (:class:`Room`, from :func:`budget_bytes`),
the objects and step settings it runs on (:class:`ProbeRun`), its counted real steps and its traces.

The probe's stages (:mod:`.batch_probe`, :mod:`.largest_batch`, :mod:`.throughput`) take one
``ProbeRun`` and put the user's objects back through it between stages.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any, Optional

import torch
from torch import nn

from tunekit.bytesize import parse_bytes
from tunekit.inputs.data import BatchStream, Data
from tunekit.probes.memory_trace import Trace, trace_step
from tunekit.training.step import TrainStep, make_scaler

__all__ = ["Room", "ProbeRun", "CountingStep", "budget_bytes", "trace_at", "cpu_total_bytes", "cpu_available_bytes",
           "CPU_SHARE"]


CPU_SHARE = 4  # of the machine's memory, a CPU probe's default budget


def cpu_total_bytes() -> int:
    return int(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES"))


def cpu_available_bytes() -> int:
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return cpu_total_bytes()


def budget_bytes(memory_budget: int | str | None, dev: torch.device) -> tuple[int, str]:
    """(the memory budget in bytes, where it came from)."""
    if memory_budget is not None:
        return parse_bytes(memory_budget), "given"
    if dev.type == "cuda":
        free, _ = torch.cuda.mem_get_info(dev)
        return int(free + torch.cuda.memory_allocated(dev)), "free GPU memory"
    # A CPU run shares its machine: a quarter of its memory is what one would sensibly take (the whole of
    # the free memory let a Trainer's probe run the whole dataset as one batch, 4.66 GiB, on a shared machine).
    share = cpu_total_bytes() // CPU_SHARE
    available = cpu_available_bytes()
    if available <= share:
        return available, "available RAM"
    return share, f"1/{CPU_SHARE} of this machine's RAM, a CPU run's share; a larger memory_budget for more"


@dataclass
class ProbeRun:
    """What every stage of one probe shares; ``reset`` puts the model back between stages."""

    sub: Any
    data: Data
    dev: torch.device
    snap: Any
    scaler: Any
    seed: int
    k: int  # accumulation_steps
    clip_grad_norm: Optional[float]
    counter: dict[str, int] = field(default_factory=lambda: {"updates": 0, "samples": 0})  # real ones, for the result

    def make_step(self, m: nn.Module, o: torch.optim.Optimizer, k: Optional[int] = None) -> TrainStep:
        """The shared step over ``m`` and ``o`` (the user's, or a trace's copies, which get a scaler of their own)."""
        sub = self.sub
        return CountingStep(self.counter, m, o, sub.compute, device=self.dev, precision=sub.precision,
                             accumulation_steps=self.k if k is None else k, clip_grad_norm=self.clip_grad_norm,
                             scaler=self.scaler if m is sub.model else make_scaler(sub.precision, self.dev))

    def reset(self) -> None:
        self.snap.restore()
        self.sub.model.train()


@dataclass
class Room:
    """The memory a probe may fill, and the largest batch the data allows."""

    budget: int
    source: str  # where the budget came from: given, free GPU memory, available RAM
    headroom: float
    usable: int  # the budget less the headroom
    limit: int  # the dataset's size, or batch_limit
    enforced: Optional[int]  # a given budget, which CUDA enforces on the real steps

    @classmethod
    def of(cls, memory_budget: int | str | None, headroom: float, dev: torch.device, limit: int) -> Room:
        budget, source = budget_bytes(memory_budget, dev)
        return cls(budget, source, headroom, int(budget * (1 - headroom)), limit,
                   budget if memory_budget is not None else None)


class CountingStep(TrainStep):
    """A TrainStep that counts the real updates it makes (not the fake-tensor traces)."""

    def __init__(self, counter: dict[str, int], *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.counter = counter

    def __call__(self, micro_batches: Any) -> Any:
        out = super().__call__(micro_batches)
        self.counter["updates"] += 1
        self.counter["samples"] += int(out.samples)
        return out


def trace_at(run: ProbeRun, b: int) -> Trace:
    k_trace = min(run.k, 2)
    batches = BatchStream(run.data, b, seed=run.seed).take(k_trace)
    return trace_step(run.sub.model, run.sub.optimizer, lambda m, o: run.make_step(m, o, k_trace), batches, run.dev)
