"""Plot helpers. matplotlib is imported here, lazily, never at ``import tunekit``."""

from __future__ import annotations

# Imported where used, not at the top: matplotlib; importing this module does not pay for them.
import contextlib
import contextvars
import io
import os
from collections.abc import Callable, Iterator
from typing import Any

from tunekit.files import write_file

__all__ = ["pyplot", "new_axes", "new_figure", "offscreen", "figure_png", "save_plot"]

# Inside offscreen(): new figures are plain Figures, unknown to pyplot, so no backend shows them.
_OFFSCREEN = contextvars.ContextVar("tunekit_offscreen", default=False)


def pyplot() -> Any:
    """matplotlib.pyplot, imported on first use."""
    # matplotlib falls back to the headless Agg backend where there is no
    # display, and a notebook keeps the backend it chose.
    import matplotlib.pyplot as plt

    return plt


@contextlib.contextmanager
def offscreen() -> Iterator[None]:
    """Figures made in the block are drawn only to be encoded: no window opens, no inline backend shows them."""
    token = _OFFSCREEN.set(True)
    try:
        yield
    finally:
        _OFFSCREEN.reset(token)


def new_figure(figsize: tuple[float, float] = (6.4, 4.0)) -> Any:
    """A new figure: pyplot's (a notebook shows it, plt.show() too), or a bare one inside :func:`offscreen`."""
    if _OFFSCREEN.get():
        from matplotlib.figure import Figure

        return Figure(figsize=figsize)
    return pyplot().figure(figsize=figsize)


def new_axes(ax: Any = None, figsize: tuple[float, float] = (6.4, 4.0)) -> Any:
    """``ax`` if given, else the Axes of a new figure (:func:`new_figure`)."""
    if ax is not None:
        return ax
    return new_figure(figsize).subplots()


def _figure_of(drawn: Any) -> Any:
    """The Figure of what a plot returned: an Axes or a Figure."""
    from matplotlib.figure import Figure

    return drawn if isinstance(drawn, Figure) else drawn.figure


def save_plot(draw: Callable[..., Any], path: str, **kwargs: Any) -> None:
    """Draw into a new figure (``draw`` returns its Axes or Figure) and write it to ``path``."""
    plt = pyplot()

    fig = _figure_of(draw(**kwargs))
    fig.tight_layout()
    buf = io.BytesIO()
    fig.savefig(buf, format=os.path.splitext(path)[1][1:] or "png", dpi=110)
    plt.close(fig)
    write_file(path, buf.getvalue())


def figure_png(fig: Any) -> bytes:
    """PNG bytes of ``fig``, closed after (an inline backend would show a pyplot figure again)."""
    plt = pyplot()
    buf = io.BytesIO()
    fig.tight_layout()
    fig.savefig(buf, format="png", dpi=100)
    plt.close(fig)
    return buf.getvalue()
