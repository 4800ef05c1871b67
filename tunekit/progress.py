"""One progress bar for every long-running piece of tunekit, and the one rule for when it shows.

``progress=None`` (every entry point's default) means auto: a bar where a person is watching (a
Jupyter kernel, or stderr on a terminal), none in scripts, pipes and CI (``CI`` set), and none
for work that runs inside another tunekit bar (a search's trials, the doctor's range test).
``True`` or ``False`` decide it outright.
"""

from __future__ import annotations

# Imported where used, not at the top: tqdm; importing this module does not pay for them.
import contextlib
import os
import sys
import threading
import warnings
from collections.abc import Iterator
from typing import Any, Optional

__all__ = ["bar", "show_progress"]

# Bars open now, in any thread: a search's trials may run in the local backend's threads.
_open_bars = 0
_lock = threading.Lock()


class _Silent:
    """What a disabled bar is: every call does nothing."""

    def update(self, n: int = 1) -> None:
        pass

    def set_postfix_str(self, s: str = "", refresh: bool = True) -> None:
        pass

    def set_postfix(self, *args: Any, **kwargs: Any) -> None:
        pass


def show_progress(progress: Optional[bool] = None) -> bool:
    """Whether to draw a bar: ``progress`` if given, else whether a person is watching (the module's rule)."""
    if progress is not None:
        return bool(progress)
    if _open_bars or in_ci():
        return False
    return in_notebook() or _stderr_is_terminal()


def in_ci() -> bool:
    """Whether ``CI`` is set (to anything but empty, 0 or false), as CI services do."""
    return os.environ.get("CI", "").strip().lower() not in ("", "0", "false", "no")


def in_notebook() -> bool:
    """Whether this process is a Jupyter kernel (the test tqdm.auto makes)."""
    ipython = sys.modules.get("IPython")  # never imported here: a kernel has imported it already
    if ipython is None:
        return False
    try:
        shell = ipython.get_ipython()
        return shell is not None and "IPKernelApp" in shell.config
    except Exception:  # an odd IPython: no notebook then
        return False


def _stderr_is_terminal() -> bool:
    try:
        return bool(sys.stderr is not None and sys.stderr.isatty())
    except (AttributeError, ValueError):  # a replaced or closed stderr
        return False


@contextlib.contextmanager
def _counted() -> Iterator[None]:
    """Counts a bar as open (shown or not) while the block runs: what runs inside it is not watched."""
    global _open_bars
    with _lock:
        _open_bars += 1
    try:
        yield
    finally:
        with _lock:
            _open_bars -= 1


def _tqdm() -> Any:
    """tqdm.auto's class: a widget in a notebook with ipywidgets, else the text bar."""
    from tqdm import TqdmWarning

    with warnings.catch_warnings():
        # Without ipywidgets tqdm.auto falls back to the text bar, which Jupyter shows well, and
        # warns; the warning would be the first thing in the user's cell.
        warnings.simplefilter("ignore", TqdmWarning)
        from tqdm.auto import tqdm
    return tqdm


@contextlib.contextmanager
def bar(total: int, desc: str, unit: str, enabled: Optional[bool] = None) -> Iterator[Any]:
    """A bar of ``total`` ``unit``s (``enabled`` as :func:`show_progress` reads it), closed however the block ends."""
    shown = bool(total) and show_progress(enabled)
    with _counted():
        if not shown:
            yield _Silent()
            return
        # disable=False: show_progress has decided (tqdm's own test would hide it in a notebook).
        b = _tqdm()(total=total, desc=desc, unit=unit, leave=False, dynamic_ncols=True, disable=False)
        try:
            yield b
        finally:
            b.close()
