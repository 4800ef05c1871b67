"""A memory model of one training step, traced on fake tensors.

The shared step is run under PyTorch's ``FakeTensorMode``: every tensor has a
shape, dtype and device but no storage, so tracing a step costs no real memory
and almost no time. A ``TorchDispatchMode`` counts the bytes of every storage
that the step creates and frees, and records the peak of each phase (forward,
backward, optimizer step). Traces at a few batch sizes give, per phase, a fit

    peak(b) = fixed + per_sample * b,

and the step's peak at batch b is the largest of the phases' predictions.

The trace runs the very step that training runs (:class:`~tunekit.training.step.TrainStep`,
with its precision, accumulation, clipping and optimizer), so what it counts is
what a run allocates: parameters, gradients, optimizer state, autocast copies,
activations and the temporaries of backward and of the optimizer.
"""

from __future__ import annotations

# Imported where used, not at the top: torch._subclasses.fake_tensor, torch.profiler, torch.profiler._memory_profiler;
# importing this module does not pay for them.
import contextlib
import copy
import gc
import inspect
import math
import os
import sys
import weakref
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any, Optional

import numpy as np
import torch
from torch import nn
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten, tree_map

from tunekit.results.memory_model import MemoryModel, PhaseFit  # re-exported: the probe and the benchmarks read them here

__all__ = ["MemoryModel", "PhaseFit", "StorageCounter", "Trace", "trace_step", "fit_memory_model", "static_bytes",
           "real_step_peak", "resident_peak", "allocator_peak", "calibrate"]

PHASES = ("forward", "backward", "optimizer")


class StorageCounter(TorchDispatchMode):
    """Counts live storage bytes of the tensors created inside it, and peaks per phase.

    A storage is counted once (views share it) from the op that creates it
    until Python lets go of it. ``mark(name)`` closes a phase: it records the
    peak since the previous mark and starts the next phase from the current level.
    """

    def __init__(self, device: torch.device | None = None) -> None:
        super().__init__()
        self.device = device
        self.live = 0
        self.peak = 0
        self.phase_peaks: list[tuple[str, int]] = []
        self.timeline: list[int] = []  # live bytes after each allocation
        self.phase_ends: list[tuple[str, int]] = []  # (phase, index into timeline where it ends)
        self._seen: dict[int, Any] = {}

    def track(self, tensors: Sequence[torch.Tensor]) -> None:
        """Count tensors made outside the mode (parameters, inputs)."""
        for t in tensors:
            self._add(t)

    def _add(self, t: Any) -> None:
        if not isinstance(t, torch.Tensor):
            return
        if self.device is not None and t.device.type != self.device.type:
            return
        try:
            st = t.untyped_storage()
        except (RuntimeError, NotImplementedError):
            return
        key = id(st)
        if key in self._seen:
            return
        nbytes = int(st.nbytes())

        def release(_: Any, key: int = key, nbytes: int = nbytes) -> None:
            if self._seen.pop(key, None) is not None:
                self.live -= nbytes

        self._seen[key] = weakref.ref(st, release)
        self.live += nbytes
        self.peak = max(self.peak, self.live)
        self.timeline.append(self.live)

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        out = func(*args, **(kwargs or {}))
        for t in tree_flatten(out)[0]:
            self._add(t)
        return out

    def mark(self, name: str) -> None:
        self.phase_peaks.append((name, self.peak))
        self.phase_ends.append((name, len(self.timeline)))
        self.peak = self.live
        self.timeline.append(self.live)  # the next phase starts from here


def static_bytes(model: nn.Module, optimizer: torch.optim.Optimizer | None = None) -> dict[str, int]:
    """Exact bytes of parameters, gradients (one per trainable parameter), buffers and optimizer state."""
    params = list({id(p): p for p in model.parameters()}.values())
    out = {
        "params": sum(p.numel() * p.element_size() for p in params),
        "grads": sum(p.numel() * p.element_size() for p in params if p.requires_grad),
        "buffers": sum(b.numel() * b.element_size() for b in model.buffers()),
        "optimizer": 0,
    }
    if optimizer is not None:
        out["optimizer"] = sum(
            v.numel() * v.element_size()
            for state in optimizer.state.values()
            for v in state.values()
            if isinstance(v, torch.Tensor)
        )
    return out


def _fake_copy(model: nn.Module, fm: Any) -> nn.Module:
    """A copy of ``model`` whose parameters and buffers are fake tensors (no real memory)."""
    memo: dict[int, Any] = {}
    for p in model.parameters():
        if id(p) not in memo:
            memo[id(p)] = nn.Parameter(fm.from_tensor(p.detach()), requires_grad=p.requires_grad)
    for b in model.buffers():
        if id(b) not in memo:
            memo[id(b)] = fm.from_tensor(b)
    # Plain tensor attributes (a mask, a constant) would otherwise be copied for real.
    for m in model.modules():
        for v in vars(m).values():
            if isinstance(v, torch.Tensor) and id(v) not in memo:
                memo[id(v)] = fm.from_tensor(v)
    try:
        return copy.deepcopy(model, dict(memo))
    except Exception:  # an attribute that refuses to copy (a lock, a file, a client): shared, not copied
        _share_uncopyable(model, memo)
        return copy.deepcopy(model, memo)


def _share_uncopyable(model: nn.Module, memo: dict[int, Any]) -> None:
    """Mark in ``memo`` every module attribute that does not deep-copy (a ``threading.Lock``, an open
    file) as itself, so the fake copy shares it: the trace only needs the copy's tensors to be fake."""
    for m in model.modules():
        for name, v in vars(m).items():
            if name in ("_parameters", "_buffers", "_modules") or id(v) in memo:
                continue
            try:
                copy.deepcopy(v, dict(memo))
            except Exception:
                memo[id(v)] = v


def _fake_optimizer(optimizer: torch.optim.Optimizer | Callable[..., torch.optim.Optimizer], model: nn.Module,
                    fake: nn.Module) -> torch.optim.Optimizer:
    """The user's optimizer rebuilt over the fake parameters, with the same groups and hyperparameters."""
    if not isinstance(optimizer, torch.optim.Optimizer):
        return optimizer([p for p in fake.parameters() if p.requires_grad])
    mapping = {id(p): q for p, q in zip(model.parameters(), fake.parameters())}
    groups = []
    for g in optimizer.param_groups:
        group = {k: v for k, v in g.items() if k != "params"}
        group["params"] = [mapping[id(p)] for p in g["params"] if id(p) in mapping]
        groups.append(group)
    accepted = inspect.signature(type(optimizer).__init__).parameters
    defaults = {k: v for k, v in optimizer.defaults.items() if k in accepted}
    return type(optimizer)(groups, **defaults)


@dataclass
class Trace:
    """One traced step: peak bytes per phase, and the live-bytes timeline split into phases."""

    peaks: dict[str, int]
    static: dict[str, int]
    segments: dict[str, list[int]]  # phase -> live bytes after each allocation in it (all micro-batches)
    resident: int = 0  # bytes live before the step: parameters, buffers, the micro-batches


def _marked_step(step: Any, batches: Sequence[Any], mark: Callable[[str], None]) -> None:
    """The shared step's pieces in its order, with a mark after each phase; no value is read, so
    it runs on fake tensors (the loss check and the GradScaler's update are the caller's, not memory)."""
    step.zero_grad()
    for batch in batches:
        loss, _ = step.forward(batch)
        mark("forward")
        step.backward(loss)
        mark("backward")
    step.apply(assume_finite=True)  # GradScaler.step would read found_inf, which a fake tensor cannot give
    mark("optimizer")


def trace_step(
    model: nn.Module,
    optimizer: torch.optim.Optimizer | Callable[..., torch.optim.Optimizer],
    make_step: Callable[[nn.Module, torch.optim.Optimizer], Any],
    batches: Sequence[Any],
    device: torch.device,
) -> Trace:
    """Trace one shared step on fake tensors.

    ``make_step(model, optimizer)`` builds the TrainStep to trace; ``batches``
    are its K real micro-batches, which are converted to fake tensors.
    """
    from torch._subclasses.fake_tensor import FakeTensorMode

    fm = FakeTensorMode(allow_non_fake_inputs=False)
    fake = _fake_copy(model, fm)
    fake_batches = [tree_map(lambda t: fm.from_tensor(t.to(device)) if isinstance(t, torch.Tensor) else t, b) for b in batches]
    with fm:
        fake_opt = _fake_optimizer(optimizer, model, fake)
        step = make_step(fake, fake_opt)
        counter = StorageCounter(device)
        counter.track(list(fake.parameters()) + list(fake.buffers()))
        # The micro-batches are resident before the step; count them as such.
        counter.track([t for b in fake_batches for t in tree_flatten(b)[0] if isinstance(t, torch.Tensor)])
        counter.peak = counter.live
        resident = counter.live
        with counter:
            _marked_step(step, fake_batches, counter.mark)
        peaks: dict[str, int] = {}
        for name, value in counter.phase_peaks:
            peaks[name] = max(peaks.get(name, 0), value)
        segments: dict[str, list[int]] = {p: [] for p in PHASES}
        start = 0
        for name, end in counter.phase_ends:
            segments[name].extend(counter.timeline[start : end + 1])
            start = end
        static = static_bytes(fake, fake_opt)
    return Trace(peaks, static, segments, resident)


def _upper_envelope(lines: list[tuple[float, float]]) -> list[tuple[float, float]]:
    """The lines that are the maximum somewhere on b >= 1 (the rest can never be the peak)."""
    best: dict[float, float] = {}
    for a, c in lines:  # per slope, only the highest intercept matters
        best[c] = max(best.get(c, -math.inf), a)
    cand = sorted(best.items())  # by slope
    hull: list[tuple[float, float]] = []
    for c, a in cand:
        while hull:
            c0, a0 = hull[-1]
            if a + c * 1.0 >= a0 + c0 * 1.0:  # dominates the previous line from b = 1 on (steeper, higher at 1)
                hull.pop()
                continue
            if len(hull) >= 2:
                c1, a1 = hull[-2]
                # Drop hull[-1] if it is never on top between hull[-2] and the new line.
                if (a0 - a1) * (c - c0) <= (a - a0) * (c0 - c1):
                    hull.pop()
                    continue
            break
        hull.append((c, a))
    return [(a, c) for c, a in hull]


def fit_memory_model(traces: dict[int, Trace], accumulation_steps: int = 1) -> MemoryModel:
    """Fit each phase's peak as a function of the batch size from traces at two or more sizes.

    When the traces at the two largest sizes make the same allocations in the
    same order (the usual case: a step's control flow does not depend on the
    batch size), every moment of the step gets its own line through the two
    sizes, and the phase's peak is their upper envelope: exact for any batch
    size when tensor sizes are affine in the batch. Otherwise each phase's peak
    is fitted by least squares.
    """
    sizes = sorted(traces)
    static = traces[sizes[-1]].static
    peaks = {b: traces[b].peaks for b in sizes}
    phases: dict[str, PhaseFit] = {}
    if len(sizes) >= 2:
        b1, b2 = sizes[-2], sizes[-1]
        t1, t2 = traces[b1].segments, traces[b2].segments
        if all(len(t1[p]) == len(t2[p]) and t1[p] for p in PHASES):
            for p in PHASES:
                y1, y2 = np.asarray(t1[p], dtype=np.float64), np.asarray(t2[p], dtype=np.float64)
                slope = (y2 - y1) / (b2 - b1)
                lines = _upper_envelope(list(zip((y1 - slope * b1).tolist(), slope.tolist())))
                top = max(lines, key=lambda ac: (ac[1], ac[0]))
                phases[p] = PhaseFit(top[0], top[1], lines)
            return MemoryModel(phases, static, peaks, accumulation_steps)
    xs = np.array(sizes, dtype=np.float64)
    for p in PHASES:
        ys = np.array([peaks[b].get(p, 0) for b in sizes], dtype=np.float64)
        if len(sizes) == 1:
            phases[p] = PhaseFit(float(ys[0]), 0.0)
            continue
        slope, intercept = np.polyfit(xs, ys, 1)
        phases[p] = PhaseFit(float(intercept), float(max(slope, 0.0)))
    return MemoryModel(phases, static, peaks, accumulation_steps)


def real_step_peak(run_step: Callable[[], Any], device: torch.device) -> Optional[int]:
    """Peak bytes that one real step takes above the level before it, or None where it cannot be measured.

    CUDA: ``torch.cuda.max_memory_allocated``. CPU: the peak resident memory of the process
    (:func:`resident_peak`), where Linux lets it be reset; elsewhere the allocator events of
    PyTorch's profiler (:func:`allocator_peak`).
    """
    if device.type == "cuda":
        torch.cuda.synchronize(device)
        before = torch.cuda.memory_allocated(device)
        torch.cuda.reset_peak_memory_stats(device)
        run_step()
        torch.cuda.synchronize(device)
        return int(torch.cuda.max_memory_allocated(device) - before)
    if _can_reset_peak_rss():
        return resident_peak(run_step)
    return allocator_peak(run_step)


def _read_proc(path: str, field: str) -> int:
    with open(path) as f:
        for line in f:
            if line.startswith(field):
                return int(line.split()[1]) * 1024
    raise OSError(f"no {field} in {path}")


def _can_reset_peak_rss() -> bool:
    try:
        _read_proc("/proc/self/status", "VmHWM")
        with open("/proc/self/clear_refs", "w"):
            pass
        return True
    except OSError:
        return False


def _libc() -> Any:
    try:
        import ctypes

        libc = ctypes.CDLL(None)
        return libc if hasattr(libc, "mallopt") and hasattr(libc, "malloc_trim") else None
    except OSError:
        return None


# glibc's mallopt parameters; what they are set to while a step is measured, and after.
M_TRIM_THRESHOLD, M_MMAP_THRESHOLD = -1, -3
PINNED_MMAP_THRESHOLD = 64 * 1024
# Where glibc's dynamic thresholds end in a training loop: the mmap threshold grows to its
# maximum (32 MiB on 64-bit) as tensors are freed, and trimming waits for twice that.
GROWN_MMAP_THRESHOLD = 32 * 1024 * 1024
GROWN_TRIM_THRESHOLD = 2 * GROWN_MMAP_THRESHOLD


@contextlib.contextmanager
def _tensors_in_own_pages() -> Iterator[None]:
    """During the measured step, every allocation over 64 KiB is mmapped and unmapped when freed.

    Otherwise glibc serves tensors of up to 32 MiB from its heap, where freed chunks stay
    resident and fragment: the same step at the same batch then reads far apart from one run
    to the next. Pinned, resident memory follows the live tensors, as in a fresh process
    started with MALLOC_MMAP_THRESHOLD_=65536.

    glibc has no way back to its dynamic thresholds, so they are left where those end in a
    training loop: left at the static defaults (128 KiB), every later step's tensors were
    mmapped and unmapped again, and the search's trials, which run in the probe's process, ran
    slower (the measurements: benchmarks/data/constants_history.md).
    """
    libc = _libc()
    if libc is None:  # not glibc: measured as it is
        yield
        return
    libc.malloc_trim(0)  # hand free heap pages back, so that what the step reuses shows in RSS
    libc.mallopt(M_MMAP_THRESHOLD, PINNED_MMAP_THRESHOLD)
    try:
        yield
    finally:
        libc.mallopt(M_MMAP_THRESHOLD, GROWN_MMAP_THRESHOLD)
        libc.mallopt(M_TRIM_THRESHOLD, GROWN_TRIM_THRESHOLD)


def resident_peak(run_step: Callable[[], Any]) -> int:
    """Peak resident memory during ``run_step`` above the resident memory before it (Linux).

    Resident, not allocated: a kernel may allocate a workspace it only partly touches (the
    fused LSTM of oneDNN allocates about twice what it writes), and untouched pages take no
    memory. The high-water mark is reset through /proc/self/clear_refs just before the step.
    """
    gc.collect()
    with _tensors_in_own_pages():
        before = _read_proc("/proc/self/status", "VmRSS")
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")  # resets VmHWM to the current RSS
        run_step()
        return max(0, _read_proc("/proc/self/status", "VmHWM") - before)


def allocator_peak(run_step: Callable[[], Any]) -> Optional[int]:
    """Peak bytes allocated through PyTorch's CPU allocator during ``run_step``: the allocator
    events that the profiler records (``profile_memory=True``), which include what kernels
    allocate internally; None with a torch that lacks the memory profiler."""
    try:
        from torch.profiler import ProfilerActivity, profile
        # No public API reads the profiler's allocation timeline: this private module is the one way.
        from torch.profiler._memory_profiler import Action, MemoryProfile
    except ImportError:
        return None
    with _quiet_fd2(), profile(activities=[ProfilerActivity.CPU], profile_memory=True, record_shapes=True) as prof:
        run_step()
    try:
        timeline = MemoryProfile(prof.profiler.kineto_results).timeline
    except (RuntimeError, AttributeError, KeyError, IndexError):  # a private format this torch changed
        return None
    live = peak = 0
    for _, action, _, size in sorted(timeline, key=lambda r: r[0]):
        if action == Action.CREATE:
            live += size
        elif action == Action.DESTROY:
            live -= size
        peak = max(peak, live)
    return int(peak)


@contextlib.contextmanager
def _quiet_fd2() -> Any:
    """Silence what the profiler's C++ side prints on stderr (start/stop banners, allocator notes)."""
    sys.stderr.flush()
    try:
        saved = os.dup(2)
    except OSError:
        yield
        return
    devnull = os.open(os.devnull, os.O_WRONLY)
    try:
        os.dup2(devnull, 2)
        yield
    finally:
        sys.stderr.flush()
        os.dup2(saved, 2)
        os.close(saved)
        os.close(devnull)


def calibrate(model: MemoryModel, traces: dict[int, Trace], real: dict[int, int]) -> MemoryModel:
    """Add the memory that real steps take beyond the trace, proportional to the batch size.

    ``real`` maps batch sizes to :func:`real_step_peak` results, in the order they were
    measured; the extra at each is (real peak) - (traced peak above the resident state), and
    may be negative where the trace over-counts. The extra is taken as proportional to the
    batch, through the last point (the one nearest the batch the probe recommends), as kernel
    workspaces (RNNs, im2col, attention) are (the fused LSTM's: benchmarks/data/constants_history.md).
    No fixed part is fitted: a line through two measured points puts their noise into its
    intercept, and on CPU a step's resident memory moves by a few MiB with the heap's state anyway.
    """
    sizes = [b for b in real if b in traces]
    if not sizes:
        return model
    last = sizes[-1]
    extra = real[last] - (max(traces[last].peaks.values()) - traces[last].resident)
    model.extra = PhaseFit(0.0, float(extra) / last)
    return model
