"""One progress bar for every long-running piece of tunekit (tqdm, shown only on a terminal)."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

__all__ = ["bar"]


class _Silent:
    """What a disabled bar is: every call does nothing."""

    def update(self, n: int = 1) -> None:
        pass

    def set_postfix_str(self, s: str = "", refresh: bool = True) -> None:
        pass

    def set_postfix(self, *args: Any, **kwargs: Any) -> None:
        pass


@contextlib.contextmanager
def bar(total: int, desc: str, unit: str, enabled: bool = True) -> Iterator[Any]:
    """A bar of ``total`` ``unit``s, closed however the block ends (Ctrl-C included)."""
    if not enabled or not total:
        yield _Silent()
        return
    from tqdm.auto import tqdm

    # disable=None: no bar when stderr is not a terminal (CI logs, pipes).
    b = tqdm(total=total, desc=desc, unit=unit, leave=False, dynamic_ncols=True, disable=None)
    try:
        yield b
    finally:
        b.close()
