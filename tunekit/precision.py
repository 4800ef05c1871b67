"""The precisions a training step runs in, and the one check of a precision given by a user.

No torch here: results and the CLI read precisions without importing it.
"""

from __future__ import annotations

from typing import Literal, cast, get_args

from tunekit.errors import UsageError

__all__ = ["Precision", "PRECISIONS", "check_precision"]

# fp32; bf16 autocast; fp16 autocast with a GradScaler.
Precision = Literal["fp32", "bf16", "fp16"]
PRECISIONS: tuple[Precision, ...] = get_args(Precision)


def check_precision(value: object) -> Precision:
    """``value`` as a Precision, or a one-line UsageError naming it and the choices."""
    if value not in PRECISIONS:
        raise UsageError(f"precision {value!r} is unknown: use one of {', '.join(PRECISIONS)}")
    return cast(Precision, value)
