"""Search spaces: TOML files of entries, seeded by the probes, sampled by Optuna.

An entry is a training setting (``lr``, ``warmup``, ...) or ``task.NAME`` (a
hyperparameter for the task function's config). Seeded entries take their
bounds from the probes: ``lr`` from the LR range test, ``batch`` from the
batch-size probe (:mod:`tunekit.hpsearch.seeded_space`). See search_spaces/README.md for the keys.
"""

from __future__ import annotations

import difflib
import math
import sys
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any, Optional

from tunekit.errors import UsageError, is_int_at_least, shown

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

__all__ = ["Entry", "SearchSpace", "load_space", "space_path", "list_spaces"]

# The training settings an entry may search or fix. Not max_steps: a search gives each trial the updates its
# budget buys at its batch, so an entry for it would change nothing (the budget is what to set).
TRAIN_KEYS = {"lr", "warmup", "weight_decay", "schedule", "min_lr_ratio", "clip_grad_norm", "batch_size",
              "accumulation_steps", "precision"}
TYPES = ("float", "int", "categorical", "fixed")


@dataclass
class Entry:
    name: str
    type: str
    low: Optional[float] = None
    high: Optional[float] = None
    log: bool = False
    step: Optional[int] = None
    choices: Optional[list[Any]] = None
    value: Any = None
    seeded: Optional[str] = None
    margin: float = 0.5
    scale_with_batch: Optional[str] = None
    around_critical: list[float] = field(default_factory=lambda: [0.25, 0.5, 1.0, 2.0, 4.0])
    # [low, high] in place of low..high where an adaptive optimizer adds weight decay to the gradient (L2)
    adaptive_l2: Optional[list[float]] = None


def _bad(where: str, name: str, msg: str) -> UsageError:
    return UsageError(f"{_said(where)}: entry [{_said(name)}] {msg}")


def _said(text: str, limit: int = 120) -> str:
    """A name or path as a one-line message shows it: as written where it is short and printable, else
    its repr cut to ``limit`` (a quoted TOML key may hold a newline, a path any length)."""
    return text if len(text) <= limit and text.isprintable() else shown(text, limit)


def _not_a_setting(name: str) -> str:
    """Why entry [name] is refused: the names an entry may have (as the file writes them: [lr]), the nearest."""
    if name in ("max_steps", "run_steps"):
        return ("is not searched: a trial's length is what its budget buys at its batch: give the budget instead "
                "(e.g. budget='200updates')")
    near = difflib.get_close_matches(name, sorted(TRAIN_KEYS | {"batch"}), n=1)
    hint = f": did you mean [{near[0]}]?" if near else ""
    return (f"is neither a training setting ({', '.join(f'[{k}]' for k in sorted(TRAIN_KEYS))}, or the seeded "
            f"[batch]) nor [task.NAME]{hint}")


def _is_file(path: Any) -> bool:
    """Whether ``path`` is a file; False for a name the file system refuses (too long, a NUL byte)."""
    try:
        return bool(path.is_file())
    except (OSError, ValueError):
        return False


def _parse_entry(where: str, name: str, raw: Any) -> Entry:
    if not isinstance(raw, dict):
        raise _bad(where, name, f"must be a table, got {shown(raw)}: write [{name}] with type = ...")
    known = {"type", "low", "high", "log", "step", "choices", "value", "seeded", "margin", "scale_with_batch", "around_critical",
             "adaptive_l2"}
    unknown = sorted(set(raw) - known)
    if unknown:
        raise _bad(where, name, f"has an unknown key {shown(unknown[0])}: known keys are {', '.join(sorted(known))}")
    seeded = raw.get("seeded")
    if name == "batch":
        if seeded != "probe":
            raise _bad(where, name, "must be seeded = \"probe\" (for fixed sizes use batch_size and accumulation_steps)")
        around = raw.get("around_critical", [0.25, 0.5, 1.0, 2.0, 4.0])
        if not isinstance(around, list) or not around or not all(isinstance(x, (int, float)) and x > 0 for x in around):
            raise _bad(where, name, f"around_critical must be a list of positive multiples, got {shown(around)}")
        return Entry(name, "categorical", seeded="probe", around_critical=[float(x) for x in around])
    if name not in TRAIN_KEYS and not name.startswith("task."):
        raise _bad(where, name, _not_a_setting(name))
    kind = raw.get("type")
    if kind not in TYPES:
        raise _bad(where, name, f"has type {shown(kind)}: use one of {', '.join(TYPES)}")
    e = Entry(name, kind, seeded=seeded)
    if seeded is not None:
        if name != "lr" or seeded != "lr_find":
            raise _bad(where, name, f"seeded = {shown(seeded)} is not supported here: only [lr] seeded = \"lr_find\" and [batch] seeded = \"probe\"")
        margin = raw.get("margin", 0.5)
        if isinstance(margin, bool) or not isinstance(margin, (int, float)):
            raise _bad(where, name, f"margin must be a number of decades, got {shown(margin)}")
        e.margin = float(margin)
        if not 0 <= e.margin <= 3:
            raise _bad(where, name, f"margin {e.margin} is out of range: give decades between 0 and 3")
        e.scale_with_batch = raw.get("scale_with_batch", "auto")
        if e.scale_with_batch not in ("auto", "linear", "sqrt", "none", "sqrt_below"):
            raise _bad(where, name, f"scale_with_batch {shown(e.scale_with_batch)} is unknown: use auto, linear, sqrt, "
                                    "sqrt_below or none")
    if "adaptive_l2" in raw and kind != "float":
        raise _bad(where, name, "has adaptive_l2 = [low, high], which only a float [weight_decay] takes")
    if kind in ("float", "int"):
        for k in ("low", "high"):
            if not isinstance(raw.get(k), (int, float)) or isinstance(raw.get(k), bool):
                raise _bad(where, name, f"needs a numeric {k}, got {shown(raw.get(k))}")
        for k in ("low", "high"):
            if not _finite(raw[k]):
                raise _bad(where, name, f"needs a finite {k}, got {shown(raw[k])}")
        e.low, e.high, e.log = float(raw["low"]), float(raw["high"]), bool(raw.get("log", False))
        _check_range(where, name, e.low, e.high, e.log)
        if "adaptive_l2" in raw:
            e.adaptive_l2 = _adaptive_l2(where, name, raw["adaptive_l2"], e)
        if kind == "int":
            step = raw.get("step", 1)
            if not is_int_at_least(step):
                raise _bad(where, name, f"step must be a positive integer, got {shown(step)}")
            e.step = step
            if e.log and e.low < 1:
                raise _bad(where, name, f"is a log-scaled int but low is {e.low:g}: a log int range needs low >= 1")
            if e.log and step != 1:
                raise _bad(where, name, "cannot be log-scaled with a step: drop one of them")
    elif kind == "categorical":
        choices = raw.get("choices")
        if not isinstance(choices, list) or not choices:
            raise _bad(where, name, f"needs a non-empty list of choices, got {shown(choices)}")
        e.choices = choices
    else:
        if "value" not in raw:
            raise _bad(where, name, "is fixed but has no value: write value = ...")
        e.value = raw["value"]
    return e


def _finite(x: float) -> bool:
    """A number a float holds and that is not inf or nan (an int past 1e308 does not convert)."""
    try:
        return math.isfinite(float(x))
    except OverflowError:
        return False


def _check_range(where: str, name: str, low: float, high: float, log: bool, what: str = "") -> None:
    if not low < high:
        raise _bad(where, name, f"has {what}low {low:g} >= high {high:g}: low must be below high")
    if log and low <= 0:
        raise _bad(where, name, f"is log-scaled but {what}low is {low:g}: a log range needs low > 0")


def _adaptive_l2(where: str, name: str, raw: Any, e: Entry) -> list[float]:
    """The range ``adaptive_l2 = [low, high]`` of a float [weight_decay] (see SearchSpace.distributions)."""
    if name != "weight_decay" or e.type != "float":
        raise _bad(where, name, "has adaptive_l2 = [low, high], which only a float [weight_decay] takes")
    if (not isinstance(raw, list) or len(raw) != 2
            or not all(isinstance(x, (int, float)) and not isinstance(x, bool) and _finite(x) for x in raw)):
        raise _bad(where, name, f"adaptive_l2 must be [low, high], two finite numbers, got {shown(raw)}")
    _check_range(where, name, float(raw[0]), float(raw[1]), e.log, "adaptive_l2 ")
    return [float(raw[0]), float(raw[1])]


@dataclass
class SearchSpace:
    name: str
    description: str
    entries: dict[str, Entry]

    @property
    def needs_lr_find(self) -> bool:
        return any(e.seeded == "lr_find" for e in self.entries.values())

    @property
    def needs_probe(self) -> bool:
        return "batch" in self.entries

    def fixed(self) -> dict[str, Any]:
        return {n: e.value for n, e in self.entries.items() if e.type == "fixed"}

    def largest_batch(self, ref_batch: int | None) -> int | None:
        """The largest effective batch a [batch] seeded by the probe can offer, given the range test's
        batch: its choices centre at or below ``ref_batch`` (:func:`batch_centre`), so none exceeds
        ``ref_batch`` x its largest multiple. None where the space does not bound it (no [batch], or
        no range-test batch to centre on): the probe then bounds it alone."""
        e = self.entries.get("batch")
        if e is None or e.seeded != "probe" or not ref_batch:
            return None
        return int(2 ** round(math.log2(max(1.0, ref_batch * max(e.around_critical)))))

    def table(self) -> str:
        """One line an entry: what it is, and where a seeded one's values come from."""
        width = max((len(n) for n in self.entries), default=4)
        lines = [f"{self.name}: {self.description}"] if self.description else [self.name]
        for name, e in self.entries.items():
            if e.seeded == "probe":
                what = f"effective batches x {e.around_critical} around the critical batch (from the probe)"
            elif e.seeded == "lr_find":
                what = (f"log range from the range test's descent, +/- {e.margin:g} decades; {e.low:g}..{e.high:g} "
                        f"without a confident range test; rescaled with the batch: {e.scale_with_batch}")
            elif e.type in ("float", "int"):
                what = f"{e.type} {e.low:g}..{e.high:g}" + (" (log)" if e.log else "")
                if e.adaptive_l2:
                    what += f"; {e.adaptive_l2[0]:g}..{e.adaptive_l2[1]:g} where an adaptive optimizer adds it to the gradient (L2)"
            elif e.type == "categorical":
                what = f"one of {e.choices}"
            else:
                what = f"fixed at {e.value!r}"
            lines.append(f"  {name:<{width}}  {what}")
        return "\n".join(lines)


def list_spaces() -> dict[str, str]:
    """Shipped space names and descriptions."""
    out = {}
    for f in sorted(resources.files("tunekit.search_spaces").iterdir(), key=lambda p: p.name):
        if f.name.endswith(".toml"):
            out[f.name[:-5]] = tomllib.loads(f.read_text()).get("description", "")
    return out


def space_path(spec: str | Path) -> str:
    """Where the space's file is: a shipped one inside the package, else the path given."""
    spec_s = str(spec)
    if spec_s.endswith(".toml") or "/" in spec_s:
        return str(Path(spec_s).resolve())
    return str(resources.files("tunekit.search_spaces") / f"{spec_s}.toml")


def load_space(spec: str | Path) -> SearchSpace:
    """A shipped space by name (``from_scratch``) or a TOML file by path."""
    spec_s = str(spec)
    if spec_s.endswith(".toml") or "/" in spec_s:
        path = Path(spec_s)
        if not _is_file(path):
            raise UsageError(f"space file '{_said(spec_s)}' does not exist: give a shipped name ({', '.join(list_spaces())}) "
                             "or a .toml path")
        data, name = path.read_bytes(), path.stem
    else:
        f = resources.files("tunekit.search_spaces") / f"{spec_s}.toml"
        if not _is_file(f):
            raise UsageError(f"unknown space '{_said(spec_s)}': use one of {', '.join(list_spaces())}, or a .toml file")
        data, name = f.read_bytes(), spec_s
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise UsageError(f"space '{_said(spec_s)}' is not UTF-8 text (byte {exc.start}): save it as UTF-8") from None
    try:
        raw = tomllib.loads(text)
    except RecursionError:
        raise UsageError(f"space '{_said(spec_s)}' nests its values too deeply to read: flatten it") from None
    except ValueError as exc:  # TOMLDecodeError; an int past Python's 4,300 digits
        raise UsageError(f"space '{_said(spec_s)}' is not valid TOML: {shown(str(exc), 160)[1:-1]}") from None
    description = raw.pop("description", "")
    entries: dict[str, Entry] = {}
    for key, value in raw.items():
        if key == "task" and isinstance(value, dict):
            for sub, v in value.items():
                entries[f"task.{sub}"] = _parse_entry(spec_s, f"task.{sub}", v)
        else:
            entries[key] = _parse_entry(spec_s, key, value)
    if "batch" in entries and ("batch_size" in entries or "accumulation_steps" in entries):
        raise UsageError(f"{_said(spec_s)}: [batch] (seeded by the probe) and [batch_size]/[accumulation_steps] cannot be combined: keep one")
    return SearchSpace(name, str(description), entries)
