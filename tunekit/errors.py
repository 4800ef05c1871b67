"""Errors that tunekit raises on purpose.

A :class:`UsageError` is the user's to fix: a bad value, an unknown task, a missing
file. Its message is one line that names the bad value and says what to do instead.
The CLI prints it without a traceback and exits with status 2.
"""

from __future__ import annotations

__all__ = ["UsageError", "SetupError", "is_int_at_least", "check_int"]


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
