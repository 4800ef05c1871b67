"""The objects a search is built from, one per concept, as Optuna takes a sampler and a pruner.

``search(task, space, sampler=TPE(), pruner=Halving(), backend=Local(), study=Study(), probes=ProbeSettings())``.
Each object is frozen and checks its values when it is made. Its fields are the only list of its
settings: the CLI's flags are generated from them (:func:`flag_of`), a shared study's spec is
made of them (the fields with a ``spec`` key), and a test checks that the CLI covers each one.

This module imports nothing heavy: the CLI reads it to build its parser.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from collections.abc import Iterator
from typing import Any, ClassVar, Optional

from tunekit.defaults import RUNG_COOLDOWN, RUNG_VALUE, RUNG_VALUES
from tunekit.errors import UsageError, check_int, check_number
from tunekit.option_fields import dest_of, flag_of, opt
from tunekit.hpsearch.budget import parse_duration
from tunekit.hpsearch.resilient import STORAGE_RETRY

__all__ = ["TPE", "RandomSampler", "Halving", "NoPruning", "Local", "Ray", "Study", "SharedStudy", "ProbeSettings",
           "Confirm",
           "Sampler", "Pruner", "BackendOptions", "STORAGE_RETRY", "JOIN_TIMEOUT", "CONCEPTS", "SELECTED_BY", "flag_of",
           "dest_of", "cli_fields"]

JOIN_TIMEOUT = 1800.0  # seconds a joining worker waits for the study's creator to store its spec


def cli_fields(concept: str) -> Iterator[tuple[type, dataclasses.Field[Any]]]:
    """Each class of ``concept`` with each of its fields that the CLI has a flag for."""
    for cls in CONCEPTS[concept][1].values():
        for f in dataclasses.fields(cls):
            if f.metadata.get("cli"):
                yield cls, f


def _number(owner: str, name: str, value: Any, *, minimum: float = 0.0, example: Any = 1) -> None:
    """A finite number >= ``minimum`` (never a bool), or one line naming the value and the fix."""
    check_number(f"{owner}({name}=...)", value, minimum=minimum, hint=f"pass e.g. {name}={example}")


def _optional_int(owner: str, name: str, value: Any, minimum: int, example: int) -> None:
    if value is not None:
        check_int(f"{owner}({name}=...)", value, minimum=minimum, hint=f"pass e.g. {name}={example}")


# --- the sampler: which configuration a trial tries -------------------------------------------------


@dataclass(frozen=True)
class Sampler:
    """Optuna's sampler after a design of first trials placed from the probes."""

    kind: ClassVar[str] = ""
    seed: Optional[int] = opt(None, "seed of the sampler (default: the search's --seed)", flag="--sampler-seed",
                              spec="sampler_seed", kind="seed", metavar="N")
    design: Optional[int] = opt(None, "trials placed around the seeded LR before the sampler takes over "
                                "(default: 5 with a seeded LR)", spec="design", kind="count", metavar="N")
    seed_trial: bool = opt(True, "the probes' configuration as the first trial (default; --no-seed-trial: none)",
                           spec="seed_trial", kind="bool")

    def __post_init__(self) -> None:
        name = type(self).__name__
        _optional_int(name, "design", self.design, 0, 5)
        if self.seed is not None:
            check_int(f"{name}(seed=...)", self.seed, minimum=0, hint="pass e.g. seed=0")


@dataclass(frozen=True)
class TPE(Sampler):
    """Optuna's TPESampler, seeded; after the design, early trials draw their LR near the best so far."""

    kind: ClassVar[str] = "tpe"
    guided: bool = opt(True, "after the design, draw early trials' LR near the best trial's, TPE taking over as "
                       "trials accrue (default; --no-guided: TPE alone)", spec="guided", kind="bool")


@dataclass(frozen=True)
class RandomSampler(Sampler):
    """Optuna's RandomSampler, seeded: the baseline."""

    kind: ClassVar[str] = "random"


# --- the pruner: which trials stop early --------------------------------------------------------------


@dataclass(frozen=True)
class Pruner:
    """How trials report (``evals`` times each) and which stop early."""

    kind: ClassVar[str] = ""
    evals: int = opt(8, "evaluations per trial, each reported to the pruner (default 8)", spec="evals", kind="int",
                     metavar="N")

    def __post_init__(self) -> None:
        check_int(f"{type(self).__name__}(evals=...)", self.evals, hint="evaluations per trial: pass e.g. evals=8")


@dataclass(frozen=True)
class NoPruning(Pruner):
    """Every trial runs its whole budget; it still reports ``evals`` times."""

    kind: ClassVar[str] = "none"


@dataclass(frozen=True)
class Halving(Pruner):
    """Successive halving on samples seen: at each rung the best 1 / ``reduction_factor`` go on."""

    kind: ClassVar[str] = "halving"
    reduction_factor: int = opt(3, "successive halving keeps the best 1/N at each rung (default 3)",
                                spec="reduction_factor", kind="int", metavar="N")
    rungs: Optional[int] = opt(None, "early-stopping rungs, at budget/rf**N .. budget/rf (default: as many as leave rf "
                               "trials expected to finish, none before the first complete trial had started to learn)",
                               spec="rungs", kind="count", metavar="N")
    first_rung: Optional[float] = opt(None, "the first rung as a fraction of the budget (instead of --rungs)",
                                      spec="first_rung", kind="float", metavar="F")
    rung_value: str = opt(RUNG_VALUE, "what a rung compares: raw (the evaluation's value) or cooldown (the value "
                          f"after a short LR cooldown branch, fair to high LRs) (default {RUNG_VALUE})",
                          spec="rung_value", choices=RUNG_VALUES, metavar="V")
    rung_cooldown: float = opt(RUNG_COOLDOWN, "the cooldown branch's updates as a share of the updates so far "
                               f"(default {RUNG_COOLDOWN})", spec="rung_cooldown", kind="positive", metavar="F")

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.rung_value not in RUNG_VALUES:
            raise UsageError(f"Halving(rung_value=...) must be one of {', '.join(RUNG_VALUES)}, got {self.rung_value!r}: "
                             "pass e.g. rung_value='cooldown'")
        check_number("Halving(rung_cooldown=...)", self.rung_cooldown, positive=True, maximum=1,
                     hint="a share of the updates so far: pass e.g. rung_cooldown=0.1")
        check_int("Halving(reduction_factor=...)", self.reduction_factor, minimum=2, hint="pass e.g. reduction_factor=3")
        _optional_int("Halving", "rungs", self.rungs, 0, 2)
        if self.first_rung is not None and (isinstance(self.first_rung, bool) or not isinstance(self.first_rung, (int, float))
                                            or not 0 < self.first_rung < 1):
            raise UsageError(f"Halving(first_rung=...) must be a fraction of the budget in (0, 1), got "
                             f"{self.first_rung!r}: pass e.g. first_rung=0.1")
        if self.rungs is not None and self.first_rung is not None:
            raise UsageError("give Halving rungs=N or first_rung=F, not both")


# --- the backend: where trials run ---------------------------------------------------------------------


@dataclass(frozen=True)
class BackendOptions:
    """Where the probes and trials run."""

    kind: ClassVar[str] = ""
    device: str = opt("auto", "cpu, cuda, cuda:N or auto (default)")

    def trial_folder(self) -> Optional[str]:
        """Where the trials write their files, when the backend has such a folder (Ray's storage path)."""
        return None


@dataclass(frozen=True)
class Local(BackendOptions):
    """Trials one after another in this process."""

    kind: ClassVar[str] = "local"


@dataclass(frozen=True)
class Ray(BackendOptions):
    """Ray Tune runs the trials, across this machine's devices or a cluster's."""

    kind: ClassVar[str] = "ray"
    cpus_per_trial: float = opt(1, "CPUs per trial (default 1)", kind="seconds", metavar="N")
    gpus_per_trial: float = opt(0, "GPUs per trial; 0.5 runs two trials on a GPU if its memory holds them (default 0)",
                                kind="seconds", metavar="N")
    max_concurrent: Optional[int] = opt(None, "trials at once (default: as many as resources allow)", kind="int",
                                        metavar="N")
    max_failures: int = opt(0, "retries of a trial that raises (default 0)", kind="count", metavar="N")
    address: Optional[str] = opt(None, "join a running Ray cluster: auto or HOST:PORT (default: start a local one)",
                                 metavar="ADDR")
    storage_path: Optional[str] = opt(None, "Tune's trial directories; a shared filesystem for several machines "
                                      "(default DIR/ray)", metavar="DIR")
    ray_init: Optional[dict[str, Any]] = opt(None, "keywords for ray.init", cli=False)

    def trial_folder(self) -> Optional[str]:
        """Tune's trial directories, where the trials write (and keep their weights)."""
        return self.storage_path

    def __post_init__(self) -> None:
        for name in ("cpus_per_trial", "gpus_per_trial"):
            _number("Ray", name, getattr(self, name))
        if self.cpus_per_trial <= 0 and self.gpus_per_trial <= 0:
            raise UsageError("a trial needs some resource: pass e.g. Ray(cpus_per_trial=1), or gpus_per_trial above 0")
        if self.gpus_per_trial > 1 and self.gpus_per_trial != int(self.gpus_per_trial):
            raise UsageError(f"Ray(gpus_per_trial=...) {self.gpus_per_trial:g} is above 1 but not whole: use a fraction "
                             "below 1 or a whole number")
        check_int("Ray(max_failures=...)", self.max_failures, minimum=0, hint="pass e.g. max_failures=2")
        _optional_int("Ray", "max_concurrent", self.max_concurrent, 1, 4)


# --- the study: where trials are kept ---------------------------------------------------------------


@dataclass(frozen=True)
class Study:
    """A study of this process, kept in ``out``/study.db (or in memory without ``out``)."""

    name: Optional[str] = opt(None, "study name (default tunekit-TASK-SPACE)", flag="--study", metavar="NAME")
    resume: bool = opt(False, "continue the study: keep finished trials, re-run interrupted ones", kind="bool")
    time_limit: Any = opt(None, "the study's device time (its trials' and probes' measured seconds) after which no trial "
                          "starts: 2h, 30min, 90s (running trials finish)", metavar="TIME")

    def __post_init__(self) -> None:
        object.__setattr__(self, "time_limit", parse_duration(self.time_limit, "time_limit"))


@dataclass(frozen=True)
class SharedStudy:
    """One study in a storage that many workers share: the first creates it and runs the probes, the others
    join it and take its spec (:mod:`tunekit.hpsearch.shared`)."""

    storage: str = opt("", "SQLAlchemy URL, journal file or grpc://HOST:PORT of a shared study (default: sqlite in DIR)",
                       metavar="URL")
    name: Optional[str] = opt(None, "study name (default tunekit-TASK-SPACE)", flag="--study", metavar="NAME")
    time_limit: Any = opt(None, "the study's device time (its trials' and probes' measured seconds) after which no trial "
                          "starts: 2h, 30min, 90s (running trials finish)", metavar="TIME")
    worker_id: Optional[str] = opt(None, "this worker's name, from which its sampler seed comes (default HOST:PID)",
                                   metavar="ID")
    threads: Optional[int] = opt(None, "torch threads of this worker (default: the cores divided among the study's "
                                 "workers on this machine)", kind="int", metavar="N")
    heartbeat_grace: Optional[int] = opt(None, "seconds without a heartbeat after which a worker's trial is failed and "
                                         "re-run once (default 60; RDB storages)", kind="int", metavar="S")
    storage_retry: float = opt(STORAGE_RETRY, "seconds to keep retrying a database or tunekit serve that does not "
                               "answer (a restart) before stopping (default 60)", kind="seconds", metavar="S")
    join_timeout: float = opt(JOIN_TIMEOUT, "how long to wait for the study's creator to store its settings (default "
                              "1800)", flag="--timeout", kind="seconds", metavar="S")
    artifacts: Optional[str] = opt(None, "Optuna artifact store (a folder every machine sees): the probes' JSON and "
                                   "plots, and the report's search.png, attached to the study for optuna-dashboard",
                                   metavar="DIR")
    resume: bool = opt(False, "continue the study: keep finished trials, re-run interrupted ones", kind="bool")
    run_trials: bool = opt(True, "False: create the study and run no trial", cli=False)

    def __post_init__(self) -> None:
        if not self.storage or not isinstance(self.storage, str):
            raise UsageError(f"SharedStudy needs storage=URL (postgresql://..., sqlite:///..., or a journal file *.log), "
                             f"got {self.storage!r}")
        object.__setattr__(self, "time_limit", parse_duration(self.time_limit, "time_limit"))
        _optional_int("SharedStudy", "threads", self.threads, 1, 4)
        _optional_int("SharedStudy", "heartbeat_grace", self.heartbeat_grace, 2, 60)
        _number("SharedStudy", "storage_retry", self.storage_retry, example=60)
        _number("SharedStudy", "join_timeout", self.join_timeout, example=1800)


# --- what the probes start from ---------------------------------------------------------------------


@dataclass(frozen=True)
class ProbeSettings:
    """Saved probe results to start from instead of running the probes, the probe's memory budget, and
    how the search's own range test runs."""

    lr_find: Any = opt(None, "a saved lr_find.json (or its LRFindResult) instead of running the range test",
                       metavar="FILE")
    probe: Any = opt(None, "a saved probe.json (or its ProbeResult) instead of running the probe", metavar="FILE")
    memory_budget: Optional[str] = opt(None, "memory budget of the probe (e.g. 8GiB)", metavar="SIZE")
    lr_sweep_steps: Optional[int] = opt(None, "the range test's updates (default: lr-find's, 100)", kind="int",
                                        metavar="N")
    # Off by default: in a search the design's trials run at the planned length around the curve's
    # suggestion, which is what the short runs estimate, for less (benchmarks/data/corpus_search_report.txt).
    lr_refine: bool = opt(False, "run the range test's short runs around its suggestion before the search (default: "
                          "the curve alone; the design's full-length trials around it check it)", kind="bool")

    def __post_init__(self) -> None:
        _optional_int(type(self).__name__, "lr_sweep_steps", self.lr_sweep_steps, 10, 100)


# --- confirmation: the best trials run again at fresh seeds -------------------------------------------


@dataclass(frozen=True)
class Confirm:
    """Once the study holds its trials, its ``top`` best complete trials each run again ``seeds`` times with
    the same params at fresh seeds, never pruned; the configuration with the best mean over its runs is the
    answer (a study's best single value is the luckiest of many noisy runs). The runs are the study's
    trials: counted in its compute and its time limit.

    Off by default (``top=0``): chosen leave-one-family-out on the benchmark corpus, each study's answer trained
    again at fresh seeds against L* + 2% of the learnable loss, no setting reached that target in more held-out
    studies than off, so off costs less for the same (benchmarks/data/corpus_search_retrain_report.txt).
    Where its runs cannot all run (the study's time limit), the result says how many did (``confirm_note``)."""

    top: int = opt(0, "after the search, run its N best complete trials again at fresh seeds and answer with the "
                   "best mean (default 0: off; chosen leave-one-family-out on the benchmark corpus)",
                   flag="--confirm-top", spec="confirm_top", kind="count", metavar="N")
    seeds: int = opt(2, "the fresh seeds each confirmed trial runs at (default 2)", flag="--confirm-seeds",
                     spec="confirm_seeds", kind="int", metavar="K")

    def __post_init__(self) -> None:
        check_int("Confirm(top=...)", self.top, minimum=0, hint="the best trials to run again: pass e.g. top=3, or "
                  "top=0 for none")
        check_int("Confirm(seeds=...)", self.seeds, minimum=1, hint="fresh seeds per confirmed trial: pass e.g. seeds=2")


# Each concept: the CLI flag that picks its class, and its classes by that flag's value.
CONCEPTS: dict[str, tuple[Optional[str], dict[str, type]]] = {
    "sampler": ("--sampler", {"tpe": TPE, "random": RandomSampler}),
    "pruner": ("--no-prune", {"halving": Halving, "none": NoPruning}),
    "backend": ("--backend", {"local": Local, "ray": Ray}),
    "study": ("--storage", {"local": Study, "shared": SharedStudy}),
    "probes": (None, {"": ProbeSettings}),
    "confirm": (None, {"": Confirm}),
}
# How a command line picks each class, said when a flag of another class is given.
SELECTED_BY = {TPE: "--sampler tpe", RandomSampler: "--sampler random", Halving: "pruning (no --no-prune)",
               NoPruning: "--no-prune", Local: "--backend local", Ray: "--backend ray", Study: "no --storage",
               SharedStudy: "--storage URL", ProbeSettings: "", Confirm: ""}
