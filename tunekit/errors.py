"""Errors that tunekit raises on purpose.

A :class:`UsageError` is the user's to fix: a bad value, an unknown task, a missing
file. Its message is one line that names the bad value and says what to do instead.
The CLI prints it without a traceback and exits with status 2.
"""

from __future__ import annotations

import dataclasses
import inspect
import math
import numbers
import os
import warnings
from typing import Any, Optional

from tunekit.defaults import CLIP_GRAD_NORM

__all__ = ["UsageError", "SetupError", "NoTrialSucceeded", "is_int_at_least", "check_int", "check_number",
           "Deprecated", "deprecated", "SHIMS", "DEPRECATED_IN", "REMOVED_IN", "CLIP_HINT", "shown",
           "HintedWarning", "warn_at_caller"]


#: The fix a bad ``clip_grad_norm`` is told, wherever it is checked.
CLIP_HINT = f"None disables clipping: pass e.g. clip_grad_norm={CLIP_GRAD_NORM:g}"


class UsageError(ValueError):
    """Bad input from the user. The message names the bad value and the fix."""


class SetupError(UsageError):
    """A task that cannot train at all, whatever its settings: a loss that is not a scalar tensor,
    labels past the model's classes, an optimizer built on another model. A search stops on it
    (every trial would fail the same way) instead of failing each trial."""


class HintedWarning(UserWarning):
    """A warning whose fix is a list of keyword hints (``name=value``), so that each caller hears it in its
    own words: from Python the keywords, on the CLI the command's flags, without the hints it has no flag for.

    ``str()`` is the Python message: ``said``, then "pass A, B or C" and ``ending``."""

    def __init__(self, said: str, hints: tuple[str, ...] = (), ending: str = "") -> None:
        self.said, self.hints, self.ending = said, tuple(hints), ending
        super().__init__(self.text(self.hints))

    def text(self, hints: tuple[str, ...]) -> str:
        """The message with only ``hints`` (the CLI's: those the command has a flag for)."""
        if not hints:
            return self.said
        listed = hints[0] if len(hints) == 1 else f"{', '.join(hints[:-1])} or {hints[-1]}"
        return f"{self.said}: pass {listed}{self.ending}"


def warn_at_caller(warning: Warning) -> None:
    """Warn at the first frame outside tunekit, the user's line that called it, however deep in tunekit the
    warning arose (a fixed ``stacklevel`` points inside tunekit from a deeper call)."""
    here = os.path.dirname(os.path.abspath(__file__)) + os.sep
    here_frame = inspect.currentframe()
    frame, level = (here_frame.f_back if here_frame is not None else None), 2  # level 2: the caller
    while frame is not None and frame.f_code.co_filename.startswith(here):
        frame, level = frame.f_back, level + 1
    warnings.warn(warning, stacklevel=level)


class NoTrialSucceeded(RuntimeError):
    """Every trial a search ran failed: nothing to return as its best. The message is one line naming
    the first failure's cause; ``result`` is the search's result, already written where ``out`` said
    (each trial with its error), so nothing is lost."""

    def __init__(self, message: str, result: Any = None) -> None:
        super().__init__(message)
        self.result = result


def is_int_at_least(value: object, minimum: int = 1) -> bool:
    """A real int (not a bool) that is at least ``minimum``."""
    return isinstance(value, int) and not isinstance(value, bool) and value >= minimum


def shown(value: object, limit: int = 60) -> str:
    """``repr(value)`` for a one-line message: at most about ``limit`` characters, cut in the middle.
    An int too long to print (Python refuses past 4,300 digits) by its size; a value whose repr fails
    (such an int inside a list, nesting past the recursion limit) by its type."""
    if isinstance(value, int) and not isinstance(value, bool) and value.bit_length() > 4 * limit:
        return f"an integer of about {round(value.bit_length() * 0.30103)} digits"
    try:
        text = repr(value)
    except Exception:  # noqa: BLE001 - ValueError past the digit limit, RecursionError, a repr of the user's that raises
        return f"a {type(value).__name__} that cannot be shown"
    if len(text) > limit:
        keep = max(1, (limit - 3) // 2)
        text = f"{text[:keep]}...{text[-keep:]}"
    return text


def check_int(name: str, value: object, minimum: int = 1, hint: str = "") -> None:
    """Raise a one-line UsageError unless ``value`` is an int >= ``minimum``; ``hint`` says the fix."""
    if not is_int_at_least(value, minimum):
        rule = "a positive integer" if minimum == 1 else f"an integer >= {minimum}"
        raise UsageError(f"{name} must be {rule}, got {shown(value)}" + (f": {hint}" if hint else ""))


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
        raise UsageError(f"{name} must be {rule}, got {shown(value)}" + (f": {hint}" if hint else ""))
    return float(value)


# The compatibility policy: a shim (an old keyword, flag or saved key that still works) is deprecated in
# one minor release, warns with a DeprecationWarning that names its new form, and is removed in the next.
#: The release that deprecated today's shims.
DEPRECATED_IN = "0.2.0"
#: The release that removes them.
REMOVED_IN = "0.3.0"


@dataclasses.dataclass(frozen=True)
class Deprecated:
    """One compatibility shim: the ``old`` form it keeps working, the ``new`` one, the release that
    deprecated it (``since``) and the one that removes it (``removed_in``), as Optuna's ``@deprecated`` names them."""

    old: str
    new: str
    since: str = DEPRECATED_IN
    removed_in: str = REMOVED_IN

    def message(self, old: str = "", new: str = "") -> str:
        """``old is deprecated since tunekit X and removed in tunekit Y: new`` (``old``/``new`` override the
        shim's own words with the caller's, e.g. the values it was given)."""
        return (f"{old or self.old} is deprecated since tunekit {self.since} and removed in tunekit "
                f"{self.removed_in}: {new or self.new}")

    def warn(self, old: str = "", new: str = "") -> None:
        """Warn with :meth:`message` as a DeprecationWarning at the user's line (:func:`warn_at_caller`)."""
        warn_at_caller(DeprecationWarning(self.message(old, new)))


#: Every shim, registered as its module is imported (tests/test_deprecations.py checks each one's versions).
SHIMS: list[Deprecated] = []


def deprecated(old: str, new: str, *, since: str = DEPRECATED_IN, removed_in: str = REMOVED_IN) -> Deprecated:
    """Register a compatibility shim (at module level, so importing tunekit lists them all; the CLI's old flags
    as its parser is built) and return it: ``_OLD = deprecated("train(max_steps=)", "pass run_steps=")``, then
    ``_OLD.warn()`` where it is used. The same shim registered again is listed once."""
    shim = Deprecated(old, new, since, removed_in)
    if shim not in SHIMS:
        SHIMS.append(shim)
    return shim
