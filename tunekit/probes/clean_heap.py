"""Real steps measured in a child process whose heap starts clean.

On the CPU a step's peak memory is the process's peak resident memory (VmHWM, reset before the
step). In a process that has worked a while, glibc's heap holds free chunks that count as resident
though no live tensor holds them, so the same step reads more after other work, and two probes in one
notebook would give two answers; glibc's heap cannot be reset in place. So the steps run in a child
started with glibc's mmap threshold pinned at 64 KiB (``MALLOC_MMAP_THRESHOLD_``): every tensor over
64 KiB gets its own pages and returns them when freed. The child gets a ``cloudpickle`` copy of the
model, optimizer and loss, runs one warm-up step, and measures each step from the same state; the
user's objects are not touched. One child serves every probe of the process (:func:`steps_child`).
Where it cannot be used (not Linux with glibc, objects that do not pickle), :func:`available` and
:meth:`CleanHeapSteps.load` say why, and the caller measures in process.
"""

from __future__ import annotations

# Imported where used, not at the top: cloudpickle, numpy, torch, tqdm; importing this module does not pay for them.
import atexit
import contextlib
import ctypes
import gc
import os
import pickle
import platform
import select
import signal
import struct
import subprocess
import sys
import threading
import traceback
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, Optional

from tunekit.training.memory import is_oom

PINNED_MMAP_THRESHOLD = 64 * 1024
_HEADER = struct.Struct("<Q")


class ChildStepError(RuntimeError):
    """The step failed in the child for a reason other than memory (the caller reruns it in process,
    where the user's own error is raised as theirs)."""


class ChildOutOfMemory(RuntimeError):
    """The step ran out of memory in the child (an allocation failed, or the kernel killed the child)."""


def available() -> Optional[str]:
    """None where steps can be measured in a clean child process, else the reason they cannot."""
    if sys.platform != "linux":
        return f"peak resident memory is read from /proc on Linux, not on {sys.platform}"
    if platform.libc_ver()[0] != "glibc":
        return "the C library is not glibc, whose MALLOC_MMAP_THRESHOLD_ pins the heap"
    try:
        import cloudpickle  # noqa: F401
    except ImportError:
        return "cloudpickle is not installed"
    return None


@dataclass(frozen=True)
class StepSettings:
    """What the child needs, besides the objects, to build the shared step."""

    precision: str
    accumulation_steps: int
    clip_grad_norm: Optional[float]
    seed: int
    threads: int


@dataclass(frozen=True)
class Measured:
    """One measured step: peak resident bytes above the level before it, and the samples it drew
    (with the warm-up step's, where one ran)."""

    peak_bytes: int
    samples: int


class CleanHeapSteps:
    """A child process that runs real steps of one model and measures their peak resident memory.

    Started at construction (it imports torch while the caller pickles the objects); :meth:`load`
    sends them, :meth:`measure` runs one step from their state as sent; :meth:`close` ends it.
    """

    def __init__(self) -> None:
        self.replaced = 0  # children that died (the kernel's OOM killer, a signal) and were started again
        self._loaded: Optional[tuple[Any, StepSettings]] = None  # the objects a replacement is sent again
        self._start()

    def _start(self) -> None:
        to_child_r, self._to_child = os.pipe()
        self._from_child, from_child_w = os.pipe()
        env = dict(os.environ, MALLOC_MMAP_THRESHOLD_=str(PINNED_MMAP_THRESHOLD))
        self._proc = subprocess.Popen(
            [sys.executable, "-m", "tunekit.probes.clean_heap", str(to_child_r), str(from_child_w)],
            pass_fds=(to_child_r, from_child_w), env=env, stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        os.close(to_child_r)
        os.close(from_child_w)
        self.warm = False

    def load(self, model: Any, optimizer: Any, compute: Any, settings: StepSettings) -> Optional[str]:
        """Send the objects; None when the child holds them, else why it cannot (they do not pickle)."""
        self._loaded = ((model, optimizer, compute), settings)  # references: a replacement pickles them again
        return self._send_loaded()

    def _send_loaded(self) -> Optional[str]:
        import cloudpickle

        assert self._loaded is not None
        objects, settings = self._loaded
        try:
            payload = cloudpickle.dumps(objects)
        except Exception as exc:  # any object of the user's may refuse to pickle
            return f"the model, optimizer or loss could not be copied to a child process ({type(exc).__name__}: {exc})"
        self.warm = False  # a new model's first step initialises its kernels: warmed up again
        reply = self._call(("load", list(sys.path), settings, payload))
        if reply[0] != "ok":
            return f"the child process could not load them ({reply[1].strip().splitlines()[-1]})"
        return None

    def replace(self) -> Optional[str]:
        """A fresh child in place of one that died, sent the objects the dead one held; None when it holds
        them, else why it cannot."""
        self.close()
        self._start()
        self.replaced += 1
        return self._send_loaded() if self._loaded is not None else None

    def measure(self, batches: list[Any], warm_up: Optional[list[Any]] = None) -> Measured:
        """Peak resident bytes of one step on ``batches`` (its micro-batches) from the sent state.

        ``warm_up``: micro-batches of a small step run once before, unmeasured. Raises
        :class:`ChildOutOfMemory` or :class:`ChildStepError`."""
        import cloudpickle

        reply = self._call(("measure", cloudpickle.dumps(batches), None if warm_up is None else cloudpickle.dumps(warm_up)))
        if reply[0] == "ok":
            self.warm = True
            return Measured(int(reply[1]), int(reply[2]))
        if reply[0] == "oom":
            raise ChildOutOfMemory(reply[1])
        raise ChildStepError(reply[1])

    def unload(self) -> None:
        """Drop the objects the child holds (the probe is done with them)."""
        self._loaded = None
        if self.alive():
            self._call(("unload",))

    def alive(self) -> bool:
        return self._proc.poll() is None

    def close(self) -> None:
        for fd in (self._to_child, self._from_child):
            try:
                os.close(fd)
            except OSError:
                pass
        if self._proc.poll() is None:
            try:
                self._proc.wait(timeout=5)  # it exits when its pipe closes
            except subprocess.TimeoutExpired:
                self._proc.kill()
                self._proc.wait()

    def __enter__(self) -> CleanHeapSteps:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def _call(self, message: tuple[Any, ...]) -> tuple[Any, ...]:
        try:
            _send(self._to_child, pickle.dumps(message, protocol=pickle.HIGHEST_PROTOCOL))
            data = _receive(self._from_child, self._proc)
        except (BrokenPipeError, EOFError):
            data = None
        if data is None:  # the child is gone: the kernel's OOM killer, or a crash in a library
            code = self._proc.wait()
            if code == -signal.SIGKILL:
                return ("oom", "the child process was killed (out of memory)")
            return ("error", f"the child process exited with code {code}")
        return pickle.loads(data)


_shared: Optional[CleanHeapSteps] = None
_shared_lock = threading.Lock()


@contextlib.contextmanager
def steps_child() -> Iterator[CleanHeapSteps]:
    """The process's measuring child: started at the first use, kept for the next (it exits with this
    process), its objects dropped when the caller is done. A thread that finds it in use gets one of
    its own for the while."""
    global _shared
    if not _shared_lock.acquire(blocking=False):
        with CleanHeapSteps() as own:
            yield own
        return
    try:
        if _shared is None or not _shared.alive():
            _shared = CleanHeapSteps()
            atexit.register(_shared.close)
        try:
            yield _shared
        finally:
            _shared.unload()
    finally:
        _shared_lock.release()


def _send(fd: int, data: bytes) -> None:
    view = memoryview(_HEADER.pack(len(data)) + data)
    while view:
        view = view[os.write(fd, view):]


def _read_exact(fd: int, n: int, proc: Optional[subprocess.Popen[bytes]]) -> Optional[bytes]:
    chunks, got = [], 0
    while got < n:
        if proc is not None:  # wait for data while the child lives; a dead child sends no more
            ready, _, _ = select.select([fd], [], [], 1.0)
            if not ready:
                if proc.poll() is not None:
                    return None
                continue
        chunk = os.read(fd, min(n - got, 1 << 20))
        if not chunk:
            return None
        chunks.append(chunk)
        got += len(chunk)
    return b"".join(chunks)


def _receive(fd: int, proc: Optional[subprocess.Popen[bytes]] = None) -> Optional[bytes]:
    head = _read_exact(fd, _HEADER.size, proc)
    if head is None:
        return None
    return _read_exact(fd, _HEADER.unpack(head)[0], proc)


# ---- the child ------------------------------------------------------------------------------------

def _status(field: str) -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field):
                return int(line.split()[1]) * 1024
    raise OSError(f"no {field} in /proc/self/status")


def _child(read_fd: int, write_fd: int) -> None:
    import tunekit.training.step  # noqa: F401  (torch and the step load while the parent pickles the objects)

    # This process's own modules set aside for good (gc.freeze): each measurement's collection walks what
    # the measurement made, not torch's 300k objects (a fifth of a second each, twice a step).
    gc.freeze()

    libc = ctypes.CDLL(None)
    state: dict[str, Any] = {}
    while True:
        data = _receive(read_fd)
        if data is None:
            return
        message = pickle.loads(data)
        try:
            if message[0] == "unload":
                state.clear()
                reply = ("ok",)
            elif message[0] == "load":
                _, path, settings, payload = message
                sys.path[:] = path
                import torch

                torch.set_num_threads(settings.threads)
                pickle.loads(payload)  # fails here, not at the first step, if a class cannot be found
                state.update(settings=settings, payload=payload)
                reply: tuple[Any, ...] = ("ok",)
            else:
                _, batches, warm_up = message
                warm_samples = 0 if warm_up is None else int(_step(state, pickle.loads(warm_up)).samples)
                reply = _measured_step(state, pickle.loads(batches), libc)
                reply = (*reply[:2], reply[2] + warm_samples)
        except Exception as exc:
            reply = ("oom" if is_oom(exc) else "error", "".join(traceback.format_exception(exc)))
        gc.collect()
        _send(write_fd, pickle.dumps(reply, protocol=pickle.HIGHEST_PROTOCOL))


def _build(state: dict[str, Any]) -> Any:
    """A fresh copy of the sent objects, and the shared step over them."""
    import torch

    from tunekit.training.step import TrainStep

    s: StepSettings = state["settings"]
    model, optimizer, compute = pickle.loads(state["payload"])
    torch.manual_seed(s.seed)  # the same dropout masks at every measurement
    return TrainStep(model, optimizer, compute, device=torch.device("cpu"), precision=s.precision,  # type: ignore[arg-type]
                     accumulation_steps=s.accumulation_steps, clip_grad_norm=s.clip_grad_norm)


def _step(state: dict[str, Any], batches: list[Any]) -> Any:
    step = _build(state)
    out = step(batches)
    del step
    return out


def _measured_step(state: dict[str, Any], batches: list[Any], libc: Any) -> tuple[Any, ...]:
    step = _build(state)
    gc.collect()
    libc.malloc_trim(0)  # small free heap pages go back, so that what the step reuses shows in RSS
    before = _status("VmRSS")
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")  # resets VmHWM to the current RSS
    out = step(batches)
    peak = max(0, _status("VmHWM") - before)
    samples = int(out.samples)
    del step, out
    return ("ok", peak, samples)


if __name__ == "__main__":
    _child(int(sys.argv[1]), int(sys.argv[2]))
