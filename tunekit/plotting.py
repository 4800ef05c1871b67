"""Plot helpers. matplotlib is imported here, lazily, never at ``import tunekit``."""

from __future__ import annotations

import io
import os
from collections.abc import Callable
from typing import Any

from tunekit.files import write_file

__all__ = ["pyplot", "new_axes", "figure_png", "save_plot"]


def pyplot() -> Any:
    """matplotlib.pyplot, imported on first use."""
    # matplotlib falls back to the headless Agg backend where there is no
    # display, and a notebook keeps the backend it chose.
    import matplotlib.pyplot as plt

    return plt


def new_axes(ax: Any = None, figsize: tuple[float, float] = (6.4, 4.0)) -> Any:
    """``ax`` if given, else the Axes of a new figure."""
    if ax is not None:
        return ax
    plt = pyplot()
    _, ax = plt.subplots(figsize=figsize)
    return ax


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
    """PNG bytes of ``fig``, closed after, for notebooks' ``_repr_png_``."""
    plt = pyplot()
    buf = io.BytesIO()
    fig.tight_layout()
    fig.savefig(buf, format="png", dpi=100)
    plt.close(fig)
    return buf.getvalue()
