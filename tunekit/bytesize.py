"""Byte sizes as people write them: 512MiB, 8GiB, 2.5GB, 1e9."""

from __future__ import annotations

import re

from tunekit.errors import UsageError

__all__ = ["parse_bytes", "format_bytes"]

_UNITS = {
    "": 1, "b": 1,
    "kb": 10**3, "mb": 10**6, "gb": 10**9, "tb": 10**12,
    "kib": 2**10, "mib": 2**20, "gib": 2**30, "tib": 2**40,
    "k": 2**10, "m": 2**20, "g": 2**30, "t": 2**40,
}


def parse_bytes(text: str | int | float) -> int:
    """Bytes from '512MiB', '8GiB', '2.5GB', '1e9' or a number."""
    if isinstance(text, (int, float)) and not isinstance(text, bool):
        value = float(text)
    else:
        m = re.fullmatch(r"\s*([0-9]*\.?[0-9]+(?:[eE][+-]?[0-9]+)?)\s*([A-Za-z]*)\s*", str(text))
        if not m or m.group(2).lower() not in _UNITS:
            raise UsageError(f"memory size {text!r} is not a size: write it like 512MiB, 8GiB or 2.5GB")
        value = float(m.group(1)) * _UNITS[m.group(2).lower()]
    if not value > 0:
        raise UsageError(f"memory size {text!r} must be positive: write it like 512MiB, 8GiB or 2.5GB")
    return int(value)


def format_bytes(n: float) -> str:
    for unit, scale in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if abs(n) >= scale:
            return f"{n / scale:.2f} {unit}"
    return f"{n:.0f} B"
