"""What every result object shares: JSON in and out, a plot for notebooks, whole-file writes."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any, TypeVar

from tunekit.files import write_file

__all__ = ["Result", "write_file"]

R = TypeVar("R", bound="Result")


class Result:
    """Mixin for the result dataclasses: ``to_json``/``from_json`` and ``_repr_png_`` from ``plot``."""

    # Fields saved as JSON lists that the dataclass holds as tuples.
    _tuple_fields: tuple[str, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)  # type: ignore[call-overload, no-any-return]

    def to_json(self, path: str | Path | None = None) -> str:
        """The result as JSON text; also written to ``path`` when given."""
        text = json.dumps(self.to_dict(), indent=1, default=str)
        if path is not None:
            write_file(path, text)
        return text

    @classmethod
    def from_json(cls: type[R], text_or_path: str | Path) -> R:
        """A result from JSON text or from the path of a file that holds it."""
        text = str(text_or_path)
        if not text.lstrip().startswith("{"):
            text = Path(text_or_path).read_text()
        data = json.loads(text)
        for name in cls._tuple_fields:
            if data.get(name) is not None:
                data[name] = tuple(data[name])
        return cls(**data)

    def plot(self, ax: Any = None) -> Any:  # pragma: no cover - each result draws its own
        """Draw the result on ``ax`` (a new figure's Axes if None) and return that Axes.

        Every result plots this way; one that has more to show adds ``plot_*`` methods that take
        and return an Axes the same way, and a :meth:`figure` that puts them together.
        """
        raise NotImplementedError

    def figure(self) -> Any:
        """The figure a notebook shows for this result: by default its :meth:`plot`."""
        return self.plot().figure

    def _repr_png_(self) -> bytes:
        """Notebooks show a result as its figure."""
        from tunekit.plotting import figure_png

        return figure_png(self.figure())
