"""Shared bits of the benchmarks: the hardware line, and a median helper."""

from __future__ import annotations

import os
import platform
import statistics

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
