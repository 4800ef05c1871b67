"""Whether a process of this machine runs: the one answer for stopped workers, dead creators and the
temporary files a killed write left."""

from __future__ import annotations

import os

__all__ = ["alive"]


def alive(pid: int) -> bool:
    """Whether process ``pid`` of this machine runs. A zombie (killed, not yet waited for by its parent)
    does not: it will never write again. Another user's process does."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process: alive
        return True
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rpartition(")")[2].split()[0] != "Z"
    except (OSError, IndexError):  # no /proc (macOS): os.kill said it exists
        return True
