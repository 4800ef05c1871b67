"""Errors that tunekit raises on purpose.

A :class:`UsageError` is the user's to fix: a bad value, an unknown task, a missing
file. Its message is one line that names the bad value and says what to do instead.
The CLI prints it without a traceback and exits with status 2.
"""

from __future__ import annotations

__all__ = ["UsageError"]


class UsageError(ValueError):
    """Bad input from the user. The message names the bad value and the fix."""
