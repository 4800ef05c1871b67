"""What every result object shares: JSON in and out, its summary and plot in a notebook, whole-file writes."""

from __future__ import annotations

import base64
import dataclasses
import html
import json
from pathlib import Path
from typing import Any, ClassVar, Optional, TypeVar

from tunekit.errors import UsageError, deprecated
from tunekit.files import write_file
from tunekit.plotting import figure_png, offscreen, save_plot

__all__ = ["Result", "Record", "write_file"]

R = TypeVar("R", bound="Result")
T = TypeVar("T", bound="Record")


# A record read or written by a key tunekit 0.1.0 saved (r.settings["steps"] for r.settings.sweep_steps):
# deprecated in 0.2.0, removed in 0.3.0. A 0.1.0 file's keys still load (Record.of renames them silently).
OLD_KEYS = deprecated("a result record's 0.1.0 key (r.settings['steps'])", "use its new name (r.settings.sweep_steps)")


class Record:
    """Mixin for a result's typed parts (its settings, an lr_find refinement): built from a saved dict
    (:meth:`of`: old keys renamed by ``_renamed``, unknown ones kept in ``extra`` where the record has it),
    and read by key as the dicts they replace were (``r.settings["run_steps"]``); a 0.1.0 key read that
    way warns (:data:`OLD_KEYS`)."""

    _renamed: ClassVar[dict[str, str]] = {}  # a saved key's old name -> the attribute

    @classmethod
    def of(cls: type[T], saved: Any) -> Optional[T]:
        """The record from itself, a saved dict, or None (None stays None)."""
        if saved is None or isinstance(saved, cls):
            return saved
        known = {f.name for f in dataclasses.fields(cls)}  # type: ignore[arg-type]
        values: dict[str, Any] = {}
        extra: dict[str, Any] = {}
        for key, value in dict(saved).items():
            name = cls._renamed.get(key, key)
            if name in known:
                values[name] = value
            else:
                extra[key] = value
        if "extra" in known:
            values["extra"] = {**values.get("extra", {}), **extra}
        return cls(**values)

    def _name(self, key: str) -> str:
        name = self._renamed.get(key, key)
        if name != key:
            OLD_KEYS.warn(f"{type(self).__name__}[{key!r}]", f"use .{name} (or [{name!r}])")
        if name in {f.name for f in dataclasses.fields(self)} or isinstance(getattr(type(self), name, None), property):  # type: ignore[arg-type]
            return name
        return ""

    def __getitem__(self, key: str) -> Any:
        name = self._name(key)
        if name:
            return getattr(self, name)
        extra = getattr(self, "extra", None)
        if isinstance(extra, dict) and key in extra:
            return extra[key]
        raise KeyError(key)

    def get(self, key: str, default: Any = None) -> Any:
        """``self[key]``, else ``default``: as ``dict.get`` read the dict this record replaces."""
        try:
            value = self[key]
        except KeyError:
            return default
        return default if value is None else value

    def __contains__(self, key: object) -> bool:
        return isinstance(key, str) and self.get(key) is not None

    def __setitem__(self, key: str, value: Any) -> None:
        name = self._name(key)
        if name:
            setattr(self, name, value)
        elif isinstance(getattr(self, "extra", None), dict):
            self.extra[key] = value  # type: ignore[attr-defined]
        else:
            raise KeyError(key)


class Result:
    """Mixin for the result dataclasses: ``to_json``/``from_json``, ``save``, and a notebook's display
    (the summary and the figure, :meth:`_repr_mimebundle_`)."""

    # Fields saved as JSON lists that the dataclass holds as tuples.
    _tuple_fields: tuple[str, ...] = ()
    # The name of the files save() writes (NAME.json, NAME.png); each result sets its own.
    _stem: ClassVar[str] = "result"
    # A saved key's old name -> the field, as a Record's: a file saved before a rename loads silently.
    _renamed: ClassVar[dict[str, str]] = {}

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
        data = {cls._renamed.get(key, key): value for key, value in json.loads(text).items()}
        for name in cls._tuple_fields:
            if data.get(name) is not None:
                data[name] = tuple(data[name])
        return cls(**data)

    @classmethod
    def load(cls: type[R], saved: Any) -> R | None:
        """A saved result given as itself, or as its JSON file (None stays None); refused in one line
        when the file is missing or holds another kind of result."""
        if saved is None or isinstance(saved, cls):
            return saved
        flag = cls._stem.replace("_", "-")
        if not isinstance(saved, (str, Path)):
            raise UsageError(f"a saved {cls._stem} result must be a {cls.__name__} or its JSON file, got "
                             f"{type(saved).__name__}: pass the path of a {cls._stem}.json")
        path = Path(saved)
        if not path.is_file():
            raise UsageError(f"the saved {cls._stem} file '{path}' does not exist: run tunekit {flag} first, or leave it out")
        try:
            return cls.from_json(path)
        except (TypeError, ValueError, KeyError) as exc:
            raise UsageError(f"'{path}' is not a {cls._stem}.json of this tunekit ({type(exc).__name__}): "
                             f"run tunekit {flag} again") from None

    def save(self, out_dir: str | Path, name: str | None = None) -> list[Path]:
        """Write NAME.json and NAME.png (its :meth:`figure`) into ``out_dir`` (made if missing); return their paths.

        ``name`` defaults to the result's own (``lr_find``, ``probe``, ``doctor``, ``train``,
        ``search``), the names the CLI writes; a result with more files writes them in between.
        """
        out, name = Path(out_dir), name or self._stem
        if out.exists() and not out.is_dir():
            raise UsageError(f"cannot save into '{out}': it is a file, not a folder; pass a folder's path")
        out.mkdir(parents=True, exist_ok=True)  # a new folder is made, as the CLI's --out makes it
        paths = [out / f"{name}.json"]
        self.to_json(paths[0])
        paths += self._save_more(out)
        paths.append(out / f"{name}.png")
        save_plot(self.figure, str(paths[-1]))
        return paths

    def _save_more(self, out: Path) -> list[Path]:
        """Files beyond the JSON and the plot that :meth:`save` writes (none by default); their paths."""
        return []

    def table(self) -> str:  # pragma: no cover - each result says its own
        """The result as a short text table."""
        raise NotImplementedError

    def summary(self) -> str:
        """What the CLI prints for this result: by default its :meth:`table`."""
        return self.table()

    @property
    def exit_code(self) -> int:
        """What the CLI exits with once it has shown this result: 0, unless the result failed a check."""
        return 0

    def plot(self, ax: Any = None) -> Any:  # pragma: no cover - each result draws its own
        """Draw the result on ``ax`` (a new figure's Axes if None) and return that Axes.

        Every result plots this way; one that has more to show adds ``plot_*`` methods that take
        and return an Axes the same way, and a :meth:`figure` that puts them together.
        """
        raise NotImplementedError

    def figure(self) -> Any:
        """The figure a notebook shows for this result: by default its :meth:`plot`."""
        return self.plot().figure

    def _repr_png_(self) -> bytes | None:
        """The result's figure as PNG bytes, drawn off-screen: no backend shows it a second time.
        None when the figure cannot be drawn (the HTML display says why, under the summary)."""
        try:
            return self._png()
        except Exception:
            return None

    def _png(self) -> bytes:
        with offscreen():
            fig = self.figure()
        return figure_png(fig)

    def _repr_mimebundle_(self, include: Any = None, exclude: Any = None) -> dict[str, str]:
        """A notebook's display: the summary above the figure (text/html), the figure alone (image/png)."""
        # One drawing for both; IPython adds text/plain (the short repr, for consoles) and applies
        # include/exclude to what this returns.
        png, error = None, None
        try:
            png = base64.b64encode(self._png()).decode("ascii")
        except Exception as e:  # a plot that fails must not hide the findings: say so under them
            error = f"{type(e).__name__}: {e}"
        return {"text/html": _html(self.summary(), png, error), **({"image/png": png} if png else {})}


def _html(text: str, png: str | None, error: str | None) -> str:
    """``text`` in a <pre>, then the base64 PNG as an <img>, or the error that kept it from being drawn."""
    parts = [f'<pre style="white-space: pre-wrap">{html.escape(text, quote=False)}</pre>']
    if png is not None:
        parts.append(f'<img src="data:image/png;base64,{png}" style="max-width: 100%" alt="figure"/>')
    else:
        parts.append(f"<p>no figure: {html.escape(str(error), quote=False)}</p>")
    return "<div>" + "".join(parts) + "</div>"
