"""The fields of tunekit's option objects, and the one shim that keeps an entry point's flat keywords.

An option object (``Sweep``, ``StepSettings``, ``TPE``, ...) is a frozen dataclass whose fields say what
the CLI needs to know of them (:func:`opt`): the CLI's flags are generated from the fields, so a field
added is a flag added. :func:`grouped_keywords` lets ``lr_find(min_lr=...)`` still work for a release as
``lr_find(sweep=Sweep(min_lr=...))``. This module imports nothing heavy: the CLI reads it to build its parser.
"""

from __future__ import annotations

import dataclasses
import functools
import inspect
from collections.abc import Callable, Sequence
from dataclasses import field
from typing import Any, Optional, TypeVar

from tunekit.errors import UsageError, deprecated, shown

__all__ = ["opt", "flag_of", "dest_of", "flag_fields", "grouped_keywords"]

F = TypeVar("F", bound=Callable[..., Any])


def opt(default: Any, help: str, *, flag: Optional[str] = None, spec: Optional[str] = None, kind: str = "str",
        cli: bool = True, metavar: Optional[str] = None, choices: Optional[Sequence[str]] = None,
        old: Optional[str] = None, older: Optional[str] = None) -> Any:
    """A field with what the CLI and a shared study need to know of it.

    ``flag``: its CLI flag (default ``--field-name``); ``cli=False``: Python only (a dict, a function).
    ``spec``: its key in a shared study's spec, where it defines the study (workers must agree).
    ``kind``: how the CLI parses it: str, int, count (int >= 0), float, positive, seconds (>= 0), seed, bool,
    clip (a norm or "none"), warmup (a fraction or updates), sizes (``4,8,16``); ``choices``: its values.
    ``old``: the entry point's flat keyword it replaces, where that is not its name; ``older``: 0.1.0's name of
    that keyword (``steps`` for ``sweep_steps``), kept the same way (:func:`grouped_keywords`)."""
    return field(default=default, metadata={"help": help, "flag": flag, "spec": spec, "kind": kind, "cli": cli,
                                            "metavar": metavar, "choices": tuple(choices) if choices else None,
                                            "old": old, "older": older})


def flag_of(f: dataclasses.Field[Any]) -> str:
    """The CLI flag of an option's field (``--no-NAME`` for a switch that is on by default)."""
    named = f.metadata.get("flag") or "--" + f.name.replace("_", "-")
    if f.metadata.get("kind") == "bool" and f.default is True:
        return "--no-" + named.removeprefix("--")
    return named


def dest_of(f: dataclasses.Field[Any]) -> str:
    """Where argparse puts an option's flag: the flag's words with underscores."""
    return flag_of(f).removeprefix("--").removeprefix("no-").replace("-", "_")


def flag_fields(cls: type) -> list[dataclasses.Field[Any]]:
    """The fields of an option class that the CLI has a flag for."""
    return [f for f in dataclasses.fields(cls) if f.metadata.get("cli")]


def grouped_keywords(**groups: type) -> Callable[[F], F]:
    """A decorator: ``fn(name=value)``, where ``name`` is a field of the object that ``fn``'s parameter
    ``group`` takes (``@grouped_keywords(sweep=Sweep)``), still works as ``fn(group=Cls(name=value))``
    with a DeprecationWarning; a flat keyword given beside its group's object is refused in one line.
    A field whose ``old`` name is its group's (``refine=False``) takes a bool given for the group.
    The one place where an entry point's 0.1 keywords are kept."""
    owner = {name: (group, cls, f.name) for group, cls in groups.items() for f in dataclasses.fields(cls)
             for name in (f.metadata.get("old") or f.name, f.metadata.get("older")) if name}

    def wrap(fn: F) -> F:
        own = set(inspect.signature(fn).parameters)
        # one registered shim per group (tunekit.errors.deprecated: removed in tunekit 0.3.0)
        shims = {group: deprecated(f"{fn.__name__}'s flat {cls.__name__} keywords", f"pass {group}={cls.__name__}(...)")
                 for group, cls in groups.items()}

        @functools.wraps(fn)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            given: dict[str, dict[str, Any]] = {}
            for old in [k for k in kwargs if k in owner and (k not in own or isinstance(kwargs[k], bool))]:
                group, cls, name = owner[old]
                if old != group and group in kwargs and not (group in owner and isinstance(kwargs[group], bool)):
                    raise UsageError(f"{fn.__name__}() got both {old}= and {group}=: pass only {group}="
                                     f"{cls.__name__}({name}=...)")
                twin = next((k for k in given.get(group, {}) if owner[k][2] == name), None)
                if twin is not None:  # 0.1.0's name and 0.2's flat one for the same field
                    raise UsageError(f"{fn.__name__}() got both {twin}= and {old}=: pass only {group}="
                                     f"{cls.__name__}({name}=...)")
                given.setdefault(group, {})[old] = kwargs.pop(old)
            for group, values in given.items():
                cls = groups[group]
                listed = ", ".join(f"{owner[old][2]}=..." for old in values)
                shims[group].warn(f"{fn.__name__}({', '.join(f'{n}=' for n in values)})",
                                  f"pass {group}={cls.__name__}({listed})")
                kwargs[group] = cls(**{owner[old][2]: value for old, value in values.items()})
            for group, cls in groups.items():
                if group in kwargs and not isinstance(kwargs[group], cls):
                    raise UsageError(f"{fn.__name__}({group}=...) takes a {cls.__name__}, got {shown(kwargs[group])}: "
                                     f"pass {group}={cls.__name__}(...)")
            return fn(*args, **kwargs)
        return wrapper  # type: ignore[return-value]
    return wrap
