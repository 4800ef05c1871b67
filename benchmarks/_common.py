"""Shared bits of the benchmarks: the hardware line, a median helper, and a recorder of printed figures."""

from __future__ import annotations

import contextlib
import io
import os
import platform
import statistics
import sys
from collections.abc import Iterator
from typing import TextIO

import torch


def hardware() -> str:
    cpu = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    cpu = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    gpu = torch.cuda.get_device_name(0) if torch.cuda.is_available() else "no GPU"
    return (f"{cpu}, {os.cpu_count()} cores, torch {torch.__version__} ({torch.get_num_threads()} threads), "
            f"{gpu}, Python {platform.python_version()}")


def median(xs: list[float]) -> float:
    return statistics.median(xs)


class Tee(io.TextIOBase):
    """A text stream that writes through to another and keeps what passed: a script's printed
    figures, printed as they come, then the body of its report."""

    def __init__(self, stream: TextIO) -> None:
        self.stream, self.parts = stream, []

    def write(self, s: str) -> int:
        self.stream.write(s)
        self.parts.append(s)
        return len(s)

    def flush(self) -> None:
        self.stream.flush()

    def text(self) -> str:
        return "".join(self.parts)


@contextlib.contextmanager
def recorded() -> Iterator[Tee]:
    """``with recorded() as out: ...``: what the block prints still goes to stdout, and ``out.text()``
    holds it afterwards."""
    tee = Tee(sys.stdout)
    with contextlib.redirect_stdout(tee):
        yield tee
