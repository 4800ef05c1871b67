"""Out of memory, recognised and recovered from: the one answer for the probe, its measuring child
and a search's trials.

torch raises ``torch.OutOfMemoryError`` on every accelerator, but its CPU allocator raises a plain
``RuntimeError`` when malloc fails, and Python's own allocations ``MemoryError``: all three are an
out-of-memory error here. Freeing collects what was dropped (reference cycles included), gives the
GPU's cached blocks back, and returns glibc's free heap pages to the system.
"""

from __future__ import annotations

# Imported where used, not at the top: torch; importing this module does not pay for it.
import contextlib
import ctypes
import gc
from collections.abc import Iterator

__all__ = ["is_oom", "free_memory", "trim_heap", "collecting_young", "CPU_ALLOCATOR_FAILED"]

# PyTorch's CPU allocator raises a plain RuntimeError when malloc fails; its message is the one sign.
CPU_ALLOCATOR_FAILED = "DefaultCPUAllocator: can't allocate memory"


def is_oom(exc: BaseException) -> bool:
    """Whether ``exc`` is an out-of-memory error, on any device (a batch too large, not a bug)."""
    import torch

    return isinstance(exc, (torch.OutOfMemoryError, MemoryError)) or CPU_ALLOCATOR_FAILED in str(exc)


def free_memory() -> None:
    """What was dropped (a step's tensors, a finished trial's model, once unreferenced) collected, the GPU's
    cached blocks given back, and the heap's free pages returned to the system, before the next try or trial
    (transformers issue 13019: one process's trials grew GPU memory until it ran out)."""
    import torch

    gc.collect()
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        torch.cuda.empty_cache()
    trim_heap()


@contextlib.contextmanager
def collecting_young() -> Iterator[None]:
    """Within, a collection (``free_memory``'s) looks only at objects made since the block began.

    A full collection walks every object the process tracks: torch's and Optuna's modules, the user's
    notebook (300k objects and more), a fifth of a second or more a call on a small CPU, once a trial.
    What existed before the block is set aside for its while (``gc.freeze``, the standard library's
    public call for this) and handed back at its end, to be collected as before: cyclic garbage among
    it waits until then. A trial's model, optimizer and frames are made inside, and go as they did.
    Where objects are frozen already (a server before its fork, an enclosing block), nothing changes."""
    if gc.get_freeze_count():
        yield
        return
    gc.freeze()
    try:
        yield
    finally:
        gc.unfreeze()


def trim_heap() -> None:
    """The heap pages freed given back to the system: glibc keeps them (fragmented among the next trial's
    blocks, the process grew 37% over 10 trials of a 4.2M-parameter model, all freed); ``malloc_trim(0)``
    returns them. Elsewhere (macOS, musl) there is no such call, and nothing to do."""
    try:
        trim = ctypes.CDLL(None).malloc_trim
    except (OSError, AttributeError):
        return
    trim(0)
