"""Errors that tunekit raises on purpose.

A :class:`UsageError` is the user's to fix: a bad value, an unknown task, a missing
file. Its message is one line that names the bad value and says what to do instead.
The CLI prints it without a traceback and exits with status 2.
"""

from __future__ import annotations

__all__ = ["UsageError", "SetupError", "is_int_at_least", "check_int", "shown"]


class UsageError(ValueError):
    """Bad input from the user. The message names the bad value and the fix."""


class SetupError(UsageError):
    """A task that cannot train at all, whatever its settings: a loss that is not a scalar tensor,
    labels past the model's classes, an optimizer built on another model. A search stops on it
    (every trial would fail the same way) instead of failing each trial."""


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
