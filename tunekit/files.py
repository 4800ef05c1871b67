"""Whole-file writes, below results and plots (both write through here)."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

__all__ = ["write_file"]


def _umask() -> int:
    """The process's umask, read without changing it where the system tells (Linux)."""
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except (OSError, ValueError, IndexError):
        pass
    # Elsewhere the only way is to set it and put it back: for that instant another thread's new
    # file would get no umask at all, hence only as the fallback.
    mask = os.umask(0o077)  # the strictest while it lasts, not 0
    os.umask(mask)
    return mask


def write_file(path: str | Path, data: str | bytes) -> None:
    """Write ``path`` whole or not at all: a process killed mid-write leaves the old file.

    The data go to a temporary file beside it, which then replaces it (atomic on POSIX and
    Windows), so a search killed while it writes its report can still be resumed and reported.
    The file gets the mode an ordinary write would (0666 less the umask), not mkstemp's 0600,
    so teammates can read a shared output folder. A missing folder on the way is made.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)  # a file in a new folder: the folder is made
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data.encode() if isinstance(data, str) else data)
        os.chmod(tmp, 0o666 & ~_umask())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
