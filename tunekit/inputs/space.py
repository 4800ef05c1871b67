"""Search spaces: TOML files of entries, seeded by the probes, sampled by Optuna.

An entry is a training setting (``lr``, ``warmup``, ...) or ``task.NAME`` (a
hyperparameter for the task function's config). Seeded entries take their
bounds from the probes: ``lr`` from the LR range test, ``batch`` from the
batch-size probe. See search_spaces/README.md for the keys.
"""

from __future__ import annotations

import math
import sys
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any, Optional

import numpy as np

from tunekit.errors import UsageError, is_int_at_least, shown

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

__all__ = ["Entry", "SearchSpace", "load_space", "space_path", "list_spaces", "lr_bounds_from_curve", "batch_centre", "batch_choices",
           "reference_batch"]

TRAIN_KEYS = {"lr", "warmup", "weight_decay", "schedule", "min_lr_ratio", "clip_grad_norm", "batch_size",
              "accumulation_steps", "precision", "max_steps"}
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
        raise _bad(where, name, f"is neither a training setting ({', '.join(sorted(TRAIN_KEYS))}) nor task.NAME")
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

    def distributions(self, lr_find: Any = None, probe: Any = None, max_batch: int | None = None,
                      adaptive_l2: bool = False) -> dict[str, Any]:
        """Optuna distributions, with seeded entries' bounds taken from the probes' results.

        ``max_batch`` caps a seeded batch's choices (a search passes the largest batch
        its sample budget leaves enough updates for). ``adaptive_l2``: the optimizer is adaptive and
        adds weight decay to the gradient (L2: torch's Adam, RMSprop...), and a [weight_decay] with an
        ``adaptive_l2`` range takes that range.
        """
        import optuna.distributions as d

        out: dict[str, Any] = {}
        for name, e in self.entries.items():
            if e.seeded == "probe":
                out[name] = d.CategoricalDistribution(batch_choices(e, probe, reference_batch(lr_find), max_batch))
            elif e.seeded == "lr_find" and lr_find is not None and lr_find.confident:
                low, high = lr_bounds_from_curve(lr_find, e.margin)
                out[name] = d.FloatDistribution(low, high, log=True)
            elif e.type == "float":
                low, high = e.adaptive_l2 if e.adaptive_l2 and adaptive_l2 else (e.low, e.high)
                out[name] = d.FloatDistribution(low, high, log=e.log)  # type: ignore[arg-type]
            elif e.type == "int":
                out[name] = d.IntDistribution(int(e.low), int(e.high), log=e.log, step=1 if e.log else (e.step or 1))  # type: ignore[arg-type]
            elif e.type == "categorical":
                out[name] = d.CategoricalDistribution(e.choices)  # type: ignore[arg-type]
        return out

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


def reference_batch(lr_find: Any) -> int | None:
    """The effective batch the LR range test ran at (None without a range test, or one saved without it)."""
    if lr_find is None or not lr_find.settings.get("batch_size"):
        return None
    return int(lr_find.settings["batch_size"]) * int(lr_find.settings.get("accumulation_steps") or 1)


def batch_centre(probe: Any, ref_batch: int | None = None) -> float:
    """The effective batch the choices centre on: the critical batch the probe measured, moved as far
    toward ``ref_batch`` (the batch the LR range test ran at) as the estimate's bootstrap interval allows.

    Why: the noise scale from a few repeats is noisy (on the built-in tasks the estimate moves by a
    factor of 3 to 10 between probe seeds, more than its own interval says), while the range test's LR
    holds only at the batch it was found at. So when the reference batch is a plausible critical batch
    (inside the interval) the search centres on it and the seed trial needs no LR rescaling; only an
    estimate that confidently excludes it moves the centre, and then only to the interval's nearer edge,
    and only down: trials draw a fixed number of samples, and below the critical batch a smaller batch
    needs no more samples to reach a loss while above it a larger one needs more (McCandlish et al.,
    2018), so a critical batch above the reference batch is no reason to leave it.
    Without a reference batch, the point estimate (or the throughput knee, or the largest batch) is
    the centre; without a noise-scale estimate (it can fail), the reference batch is.
    """
    if probe is None:
        raise UsageError("the space's [batch] is seeded by the probe: run it (tunekit probe) or pass probe=FILE")
    crit = probe.critical_batch or probe.knee_batch or probe.max_batch
    interval = getattr(probe, "critical_batch_range", None)
    if ref_batch and not (probe.critical_batch and interval):
        return float(ref_batch)
    if not ref_batch or not probe.critical_batch or not interval:
        return float(max(crit, 1))
    high = max(interval[1], crit)
    return float(max(1.0, min(float(ref_batch), high)))


def batch_choices(entry: Entry, probe: Any, ref_batch: int | None = None, max_batch: int | None = None) -> list[int]:
    """Effective batches around :func:`batch_centre` (powers of two) that the probe says fit, as (micro x accumulation).

    ``ref_batch`` (the LR range test's effective batch) is added when it lies within the choices'
    span, so the seed trial can pair the suggested LR with the batch it was measured at.
    Choices are capped at the dataset's size and at ``max_batch``.
    """
    centre = batch_centre(probe, ref_batch)
    n = min(probe.dataset_size or 2**30, max_batch or 2**30)
    out: list[int] = []
    for mult in entry.around_critical:
        eff = int(2 ** round(math.log2(max(1.0, centre * mult))))
        eff = max(1, min(eff, n))
        if eff not in out:
            out.append(eff)
    if ref_batch and min(out) <= ref_batch <= max(out) and ref_batch not in out:
        out.append(int(ref_batch))
    return sorted(out)


# The best peak LR of a warmup + cosine run lies up to this many times above the LR at the
# range test's smoothed minimum (benchmarks/lr_rules.py, 12 tasks: 0.2x to 25x).
PEAK_ABOVE_MINIMUM = 25.0


def lr_bounds_from_curve(result: Any, margin: float) -> tuple[float, float]:
    """From where the range-test loss starts to fall, less ``margin`` decades, to
    :data:`PEAK_ABOVE_MINIMUM` times the LR of its minimum (below divergence), or ``margin``
    decades above it if that is more.

    "Starts to fall": the first LR at which the smoothed loss has covered 10% of
    its drop from the start to the minimum. The upper end is where the range test's
    own error says the best peak LR may still be: a bound at the minimum itself shut
    the search out of the optimum whenever the curve read low (a CNN's curve at 10x
    below its best LR left no trial there).
    """
    from tunekit.probes.lr_rules import prepare

    c = prepare(result.lrs, result.losses)
    if len(c.smooth) < 3:
        raise UsageError("the range test has too few finite points to bound the LR: rerun it with more steps")
    end = int(np.argmin(c.smooth))
    start = float(c.smooth[0])
    drop = start - float(c.smooth[end])
    if end < 2 or drop <= 0:
        # No descent: fall back to a decade each side of the suggestion, or of the minimum.
        centre = result.suggestion or float(c.lrs[end])
        return centre / 10 ** (1 + margin), centre * 10 ** (1 + margin)
    i = int(np.argmax(c.smooth[: end + 1] <= start - 0.1 * drop))
    low, high = float(c.lrs[i]), float(c.lrs[end])
    if result.diverged_at_lr:
        high = min(high, float(result.diverged_at_lr))
    return low / 10**margin, high * max(PEAK_ABOVE_MINIMUM, 10**margin)


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
