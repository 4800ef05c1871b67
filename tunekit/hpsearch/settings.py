"""Every setting of a search, in one frozen object built once from the caller's arguments.

:class:`SearchSettings` holds the study's own values (trials, budget, objective, seed) and one
object per concept (:mod:`.options`: the sampler, the pruner, the backend, the study, the probes, the
confirmation of the best trials).
A shared study's spec is made from the fields that define it (:meth:`SearchSettings.study_dict`),
and a worker that joins is rebuilt from it (:meth:`SearchSettings.from_spec`).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional

from tunekit.errors import UsageError, check_int, deprecated
from tunekit.hpsearch.budget import parse_budget
from tunekit.hpsearch.keep import KEEP
from tunekit.hpsearch.options import (CONCEPTS, BackendOptions, Confirm, Halving, Local, NoPruning, ProbeSettings,
                                      Pruner, Sampler, SharedStudy, Study, TPE)
from tunekit.objective import Objective

__all__ = ["SearchSettings", "SPEC_COMPARED", "from_keywords", "LEGACY"]


@dataclass(frozen=True)
class SearchSettings:
    """The settings of one search (see :func:`tunekit.search` for each)."""

    trials: int = 12
    budget: Any = None  # what one full trial may draw: "4000samples", "2epochs", "1e6tokens", "200updates", "10min"
    objective: Any = "loss"  # a metric's name, fn(model, val_data) -> float, or an Objective: always an Objective once built
    seed: int = 0
    task_config: Optional[dict[str, Any]] = None  # a task spec's config (TaskSpec), fixed task.* entries of the space
    sampler: Sampler = field(default_factory=TPE)
    pruner: Pruner = field(default_factory=Halving)
    backend: BackendOptions = field(default_factory=Local)
    study: Study | SharedStudy = field(default_factory=Study)
    probes: ProbeSettings = field(default_factory=ProbeSettings)
    confirm: Confirm = field(default_factory=Confirm)  # the best trials run again at fresh seeds (off by default)
    out: Optional[Path] = None
    keep: str = "best"  # which trials' trained weights are written (tunekit.hpsearch.keep)
    progress: Optional[bool] = None  # None: a bar where a person is watching (tunekit.progress)

    def __post_init__(self) -> None:
        # Normalised once, so the spec, the plan and the report all see the same values: the objective as
        # given (a name, a function or an Objective) is an Objective from here on (a bad one fails here).
        object.__setattr__(self, "objective", Objective.of(self.objective))
        self._check()
        if self.sampler.seed is None:
            object.__setattr__(self, "sampler", dataclasses.replace(self.sampler, seed=self.seed))
        if self.out is not None and not isinstance(self.out, Path):
            object.__setattr__(self, "out", Path(self.out))

    @property
    def shared(self) -> bool:
        """Whether the study lives in a storage that other workers may share."""
        return isinstance(self.study, SharedStudy)

    @property
    def prune(self) -> bool:
        return isinstance(self.pruner, Halving)

    @property
    def sampler_seed(self) -> int:
        assert self.sampler.seed is not None  # set from the seed when the settings were built
        return self.sampler.seed

    def study_dict(self) -> dict[str, Any]:
        """The values that define the study, as its spec keeps them (the keys of older tunekits kept)."""
        halving = self.pruner if isinstance(self.pruner, Halving) else Halving(evals=self.pruner.evals)
        out = {"task_config": self.task_config, "trials": self.trials, "budget": self.budget, "seed": self.seed,
               "sampler": self.sampler.kind, "prune": self.prune}
        for obj in (self.sampler, halving, self.confirm):
            out.update({f.metadata["spec"]: getattr(obj, f.name) for f in dataclasses.fields(obj) if f.metadata.get("spec")})
        return out | {"objective": self.objective.name, "direction": self.objective.direction}

    @staticmethod
    def from_spec(spec: dict[str, Any]) -> dict[str, Any]:
        """The keyword arguments of :class:`SearchSettings` that a stored spec defines (an older spec lacks some)."""
        def fields_of(cls: type) -> dict[str, Any]:
            return {f.name: spec[f.metadata["spec"]] for f in dataclasses.fields(cls)
                    if f.metadata.get("spec") in spec}
        sampler_cls = CONCEPTS["sampler"][1].get(spec.get("sampler", "tpe"), TPE)
        pruner_cls = Halving if spec.get("prune", True) else NoPruning
        out: dict[str, Any] = {k: spec[k] for k in ("trials", "budget", "seed", "task_config") if k in spec}
        out["task_config"] = out.get("task_config") or None
        out["sampler"], out["pruner"] = sampler_cls(**fields_of(sampler_cls)), pruner_cls(**fields_of(pruner_cls))
        out["confirm"] = Confirm(**fields_of(Confirm))
        if "objective" in spec:
            out["objective"] = Objective.of(spec["objective"], spec.get("direction"))
        return out

    def replace(self, **changes: Any) -> "SearchSettings":
        """A copy with ``changes`` (validated again)."""
        return dataclasses.replace(self, **changes)

    # --- validation: every refusal names the value and the fix -----------------------------

    def _check(self) -> None:
        check_int("trials", self.trials, hint="pass e.g. trials=12")
        check_int("seed", self.seed, minimum=0, hint="pass e.g. seed=0")
        parse_budget(self.budget)
        for name, kind, example in (("sampler", Sampler, "TPE()"), ("pruner", Pruner, "Halving() or NoPruning()"),
                                    ("backend", BackendOptions, "Local() or Ray()"),
                                    ("study", (Study, SharedStudy), "Study() or SharedStudy(storage=URL)"),
                                    ("probes", ProbeSettings, "ProbeSettings(lr_find='lr_find.json')"),
                                    ("confirm", Confirm, "Confirm(top=3, seeds=2)")):
            if not isinstance(getattr(self, name), kind):
                raise UsageError(f"{name} must be a tunekit object such as {example}, got {getattr(self, name)!r}: "
                                 f"pass e.g. {name}={example.split(' or ')[0]}")
        if self.keep not in KEEP:
            raise UsageError(f"keep {self.keep!r} is unknown: use best (the best trial's weights), all (every "
                             "finished trial's) or none")
        name = self.objective.name
        if self.shared and self.objective.fn is not None:
            raise UsageError(f"a shared study's objective must be a name every worker can find, got a function "
                             f"({name}): give the task metrics={{'{name}': fn}} and pass objective='{name}'")


# Compared as written when a worker joins; the others (budget, seed, evals, objective) through the
# plan they resolve to (a budget of 2epochs and one of 4000samples may be the same budget).
SPEC_COMPARED = ("task_config", "trials", "sampler", "prune",
                 *(f.metadata["spec"] for cls in (Sampler, Halving, Confirm) for f in dataclasses.fields(cls)
                   if f.metadata.get("spec") and f.name != "evals"))


# The keywords of tunekit 0.1.0's search(), each with the object and field that now holds it: deprecated in
# 0.2.0, removed in 0.3.0 (with from_keywords, run.py's **deprecated and search_own's **kwargs).
FLAT_KEYWORDS = deprecated("search()'s flat keywords (max_steps=, storage=, lr_find_result=, ...)",
                           "pass one object per concept: sampler=, pruner=, backend=, study=, probes=")
LEGACY: dict[str, tuple[str, str]] = {
    "sampler_seed": ("sampler", "seed"), "design": ("sampler", "design"), "seed_trial": ("sampler", "seed_trial"),
    "reduction_factor": ("pruner", "reduction_factor"), "rungs": ("pruner", "rungs"),
    "first_rung": ("pruner", "first_rung"), "evals": ("pruner", "evals"),
    **{name: ("backend", name) for name in ("device", "cpus_per_trial", "gpus_per_trial", "max_concurrent",
                                            "max_failures", "address", "storage_path", "ray_init")},
    "study_name": ("study", "name"), "resume": ("study", "resume"), "time_limit": ("study", "time_limit"),
    "grace_period": ("study", "heartbeat_grace"),
    **{name: ("study", name) for name in ("storage", "worker_id", "threads", "storage_retry", "join_timeout",
                                          "artifacts", "run_trials")},
    "lr_find_result": ("probes", "lr_find"), "probe_result": ("probes", "probe"),
    "memory_budget": ("probes", "memory_budget"),
}


def from_keywords(kw: dict[str, Any], legacy: dict[str, Any], caller: str = "search") -> dict[str, Any]:
    """``kw`` (the new keywords) with the old flat keywords in ``legacy`` folded into their objects.

    Each old keyword still works until tunekit 0.3.0, with a DeprecationWarning that names its own new form
    (``max_steps=30``: ``budget='30updates'``); one set both ways with two values is refused."""
    unknown = sorted(set(legacy) - set(LEGACY) - {"sampler", "prune", "backend", "direction", "max_steps", "task_config"})
    if unknown:
        raise UsageError(f"{caller}() got an unexpected keyword {unknown[0]}=: see help(tunekit.{caller}) for its "
                         "parameters (sampler=TPE(...), pruner=Halving(...), backend=Local()/Ray(...), "
                         "study=Study()/SharedStudy(...), probes=ProbeSettings(...))")
    kw, legacy = dict(kw), dict(legacy)
    for concept in ("sampler", "backend"):  # 0.x named them: sampler="random", backend="ray"
        if isinstance(kw.get(concept), str):
            legacy[concept] = kw.pop(concept)
    if not legacy:
        return kw
    said = dict(legacy)  # as the caller wrote them, for the warning
    kw["task_config"] = legacy.pop("task_config", None) or None
    objective, direction = kw.get("objective", "loss"), legacy.pop("direction", None)
    if direction is not None:
        if isinstance(objective, Objective) and objective.direction != direction:
            raise UsageError(f"objective={_objective_shown(objective)} and direction={direction!r} disagree: give the "
                             f"direction once, in objective=Objective({objective.name!r}, ...)")
        kw["objective"] = Objective.of(objective.name if isinstance(objective, Objective) else objective, direction)
    max_steps = legacy.pop("max_steps", None)
    if max_steps is not None:
        if kw.get("budget") is not None:
            raise UsageError("give the budget once: budget (e.g. budget=4000samples) or max_steps, not both")
        if isinstance(max_steps, bool) or not isinstance(max_steps, int) or max_steps < 2:
            raise UsageError(f"max_steps must be >= 2, got {max_steps!r}: pass e.g. budget='200updates'")
        kw["budget"] = f"{max_steps}updates"
    kinds = {"sampler": legacy.pop("sampler", None), "pruner": None if legacy.pop("prune", True) else "none",
             "backend": legacy.pop("backend", None), "study": "shared" if legacy.get("storage") else None}
    if "prune" in said and said["prune"]:
        kinds["pruner"] = "halving"
    for concept in ("sampler", "pruner", "backend", "study", "probes"):
        olds = {k: f for k, (c, f) in LEGACY.items() if c == concept and k in legacy}
        fields = {f: legacy.pop(k) for k, f in olds.items()}
        if concept == "study" and kinds["study"] is None:
            fields.pop("storage", None)
        picked = next((f"{k}={_shown(said[k])}" for k, c in _KIND_KEYWORDS.items() if c == concept and k in said), "")
        kw[concept] = _object_of(concept, kinds.get(concept), kw.get(concept), fields, olds, picked)
    FLAT_KEYWORDS.warn(f"{caller}({', '.join(f'{k}=' for k in said)})", _replacements(said, kw))
    return kw


# The old keywords that pick a concept's class rather than set one of its fields.
_KIND_KEYWORDS = {"sampler": "sampler", "prune": "pruner", "backend": "backend", "storage": "study"}


def _replacements(said: dict[str, Any], kw: dict[str, Any]) -> str:
    """The fix for old keywords ``said``: each with the new keyword that replaces it, as ``kw`` now holds it."""
    new_of: dict[str, list[str]] = {}  # the replacement -> the old keywords it replaces
    for old, value in said.items():
        if old == "max_steps":
            new = f"budget={kw['budget']!r}"
        elif old == "direction":
            new = f"objective={_objective_shown(Objective.of(kw['objective']))}"
        elif old == "task_config":
            new = f"task=TaskSpec(spec, {_shown(value)})"
        else:
            concept = _KIND_KEYWORDS.get(old) or LEGACY[old][0]
            new = f"{concept}={_object_shown(kw[concept])}"
        new_of.setdefault(new, []).append(f"{old}={_shown(value)}")
    return "each has its object: pass " + ", ".join(f"{new} (for {', '.join(olds)})" for new, olds in new_of.items())


def _shown(value: Any) -> str:
    """A value as the user would write it, or ``...`` for one too long to repeat (a result object)."""
    if isinstance(value, Path):
        value = str(value)
    text = repr(value)
    return text if isinstance(value, (str, int, float, bool, type(None))) or len(text) <= 40 else "..."


def _objective_shown(objective: Objective) -> str:
    return f"Objective({objective.name!r}, {objective.direction!r})"


def _set_fields(obj: Any) -> dict[str, Any]:
    """The fields of an option object that differ from their defaults (what its maker set)."""
    return {f.name: getattr(obj, f.name) for f in dataclasses.fields(obj) if getattr(obj, f.name) != f.default}


def _object_shown(obj: Any) -> str:
    """An option object as it would be written: its class and the fields set, ``Local(device='cpu')``."""
    return f"{type(obj).__name__}({', '.join(f'{k}={_shown(v)}' for k, v in _set_fields(obj).items())})"


def _object_of(concept: str, kind: Optional[str], given: Any, fields: dict[str, Any], olds: dict[str, str],
               picked: str = "") -> Any:
    """The concept's object from an old keyword's kind (``sampler="random"``, said as ``picked``) and its old
    fields (``olds``: the old keyword of each field); the object given too may not say otherwise."""
    classes = CONCEPTS[concept][1]
    if kind is not None and kind not in classes:
        raise UsageError(f"{concept} {kind!r} is unknown: pass {concept}="
                         f"{' or '.join(f'{c.__name__}()' for k, c in classes.items() if k)}")
    cls = classes[kind] if kind is not None else (type(given) if given is not None else next(iter(classes.values())))
    if not fields and kind is None:
        return given
    if given is not None:
        _check_agree(concept, given, cls, fields, olds, picked)
    base = {f.name: getattr(given, f.name) for f in dataclasses.fields(given)} if isinstance(given, cls) else {}
    names = {f.name for f in dataclasses.fields(cls)}
    wrong = sorted(set(fields) - names)
    if wrong:
        owner = next((k for k, c in classes.items() if wrong[0] in {f.name for f in dataclasses.fields(c)}), "another")
        raise UsageError(f"{wrong[0]}=... applies to {concept}={owner}, not {cls.__name__}: pass "
                         f"{concept}={CONCEPTS[concept][1].get(owner, cls).__name__}(...), or drop it")
    return cls(**(base | fields))


def _check_agree(concept: str, given: Any, cls: type, fields: dict[str, Any], olds: dict[str, str],
                 picked: str) -> None:
    """An object given with settings of its own and an old keyword that says otherwise (``pruner=Halving(evals=6)``
    with ``evals=4``, or with ``prune=False``): refused, rather than one silently winning."""
    mine = _set_fields(given)
    if not isinstance(given, cls) and (mine or type(given) is not next(iter(CONCEPTS[concept][1].values()))):
        # (the default object, given by no one, gives way silently)
        raise UsageError(f"{concept}={_object_shown(given)} and {picked} disagree: pass the {concept} once, as "
                         f"{concept}={cls.__name__}(...)")
    for name, value in fields.items():
        if name in mine and mine[name] != value:
            old = next(k for k, f in olds.items() if f == name)
            raise UsageError(f"{concept}={_object_shown(given)} and {old}={_shown(value)} disagree: give {name} once, "
                             f"in {concept}={type(given).__name__}({name}=...)")
