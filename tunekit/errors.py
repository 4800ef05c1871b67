"""Errors that tunekit raises on purpose.

A :class:`UsageError` is the user's to fix: a bad value, an unknown task, a missing
file. Its message is one line that names the bad value and says what to do instead.
The CLI prints it without a traceback and exits with status 2.
"""

from __future__ import annotations

import math
import numbers
import warnings
from typing import Any, Optional

from tunekit.defaults import CLIP_GRAD_NORM

__all__ = ["UsageError", "SetupError", "is_int_at_least", "check_int", "check_number", "renamed", "take_renamed",
           "CLIP_HINT"]

#: The fix a bad ``clip_grad_norm`` is told, wherever it is checked.
CLIP_HINT = f"None disables clipping: pass e.g. clip_grad_norm={CLIP_GRAD_NORM:g}"


class UsageError(ValueError):
    """Bad input from the user. The message names the bad value and the fix."""


class SetupError(UsageError):
    """A task that cannot train at all, whatever its settings: a loss that is not a scalar tensor,
    labels past the model's classes, an optimizer built on another model. A search stops on it
    (every trial would fail the same way) instead of failing each trial."""


def is_int_at_least(value: object, minimum: int = 1) -> bool:
    """A real int (not a bool) that is at least ``minimum``."""
    return isinstance(value, int) and not isinstance(value, bool) and value >= minimum


def check_int(name: str, value: object, minimum: int = 1, hint: str = "") -> None:
    """Raise a one-line UsageError unless ``value`` is an int >= ``minimum``; ``hint`` says the fix."""
    if not is_int_at_least(value, minimum):
        rule = "a positive integer" if minimum == 1 else f"an integer >= {minimum}"
        raise UsageError(f"{name} must be {rule}, got {value!r}" + (f": {hint}" if hint else ""))


def _number_rule(minimum: Optional[float], maximum: Optional[float], above: Optional[float],
                 below: Optional[float], finite: bool) -> str:
    """The rule ``check_number`` enforces, in words: "a positive number", "a number in [0, 1]", ..."""
    if above == 0 and minimum is None and maximum is None and below is None:
        return "a positive number" if finite else "a positive number (inf allowed)"
    low = f"[{minimum:g}" if minimum is not None else (f"({above:g}" if above is not None else None)
    high = f"{maximum:g}]" if maximum is not None else (f"{below:g})" if below is not None else None)
    if low is not None and high is not None:
        return f"a number in {low}, {high}"
    if low is not None:
        return f"a number {'>=' if minimum is not None else '>'} {low[1:]}"
    if high is not None:
        return f"a number {'<=' if maximum is not None else '<'} {high[:-1]}"
    return "a finite number" if finite else "a number"


def check_number(name: str, value: Any, *, minimum: Optional[float] = None, maximum: Optional[float] = None,
                 positive: bool = False, above: Optional[float] = None, below: Optional[float] = None,
                 finite: bool = True, hint: str = "") -> float:
    """``value`` as a float, or a one-line UsageError naming it and the fix (``hint``, e.g. "pass e.g. lr=3e-4").

    Refuses a bool (``lr=True`` is no LR), a non-number, NaN, and inf unless ``finite=False``;
    ``positive`` means > 0, ``minimum``/``maximum`` are inclusive bounds, ``above``/``below`` exclusive.
    One validator for every number a user passes, so each says its rule the same way.
    """
    if positive:
        above = 0.0 if above is None else max(above, 0.0)
    rule = _number_rule(minimum, maximum, above, below, finite)
    ok = isinstance(value, numbers.Real) and not isinstance(value, bool) and not math.isnan(value)
    if ok:
        v = float(value)
        ok = ((not finite or math.isfinite(v)) and (minimum is None or v >= minimum)
              and (maximum is None or v <= maximum) and (above is None or v > above) and (below is None or v < below))
    if not ok:
        raise UsageError(f"{name} must be {rule}, got {value!r}" + (f": {hint}" if hint else ""))
    return float(value)


def renamed(old: str, new: str, value: Any = None, *, where: str = "", stacklevel: int = 3) -> None:
    """Warn, the same way at every entry point, that ``old`` is now ``new`` (a DeprecationWarning).

    ``where`` names the function (``lr_find``) so the warning says which call to change; the
    old name keeps working for one release. ``value`` is shown in the fix when given.
    """
    call = f"{where}(...)" if where else "this call"
    fix = f"{new}={value!r}" if value is not None else f"{new}=..."
    warnings.warn(f"{old}= in {call} is renamed {new}= and will be removed in the next release: pass {fix}",
                  DeprecationWarning, stacklevel=stacklevel)


def take_renamed(kwargs: dict[str, Any], old: str, new: str, current: Any, *, where: str,
                 unset: Any = None) -> Any:
    """``current`` (the new keyword's value), else the old keyword's from ``kwargs`` with a :func:`renamed`
    warning; both given is refused in one line. Removes ``old`` from ``kwargs``."""
    if old not in kwargs:
        return current
    value = kwargs.pop(old)
    if current is not unset and current is not value:
        raise UsageError(f"{where}() got both {old}= (its old name) and {new}=: pass only {new}={current!r}")
    renamed(old, new, value, where=where, stacklevel=4)
    return value
