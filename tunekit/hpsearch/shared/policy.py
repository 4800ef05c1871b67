"""How a search holds its study: one process's own (:class:`OneProcess`) or one of many workers'
(:class:`ManyWorkers`), behind one interface, :class:`StudyPolicy`.

The search chooses once, where the study is opened (:func:`policy_of`); from there on the stages
and the backends call the policy's methods (open the storage, claim a slot, reap stopped workers,
where weights go, whose seconds count) and never ask which study they hold.
"""

from __future__ import annotations

# Imported where used, not at the top: optuna; importing this module does not pay for them.
import contextlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional, Protocol

from tunekit.errors import UsageError
from tunekit.hpsearch.keep import weights_folder
from tunekit.hpsearch.keys import ARTIFACTS_KEY, SPEC_KEY, WALL_SECONDS_KEY
from tunekit.hpsearch.options import SharedStudy, Study
from tunekit.hpsearch.shared.server import attach
from tunekit.hpsearch.shared.spec import StoredSpec
from tunekit.hpsearch.shared.workers import (TAKEN_OVER, claim, claim_creation, counts, creator_gave_up,
                                             default_threads, end_creation, open_storage, reap_every, reap_stopped,
                                             reaping, register_worker, set_threads, wait_for_spec, worker_id,
                                             worker_seed)
from tunekit.hpsearch.study import finished_count, mark_interrupted, requeue_interrupted, stopped

__all__ = ["StudyPolicy", "OneProcess", "ManyWorkers", "policy_of", "probed", "settle_in", "store_spec"]


def probed(out_dir: Path) -> bool:
    """Whether a search's probes saved their results in ``out_dir``."""
    return any((out_dir / f"{name}.json").is_file() for name in ("lr_find", "probe"))


class StudyPolicy(Protocol):
    """What differs between a study of one process and one shared by workers, asked of the study itself."""

    @property
    def worker(self) -> str:
        """This worker's id (host:pid, or the one given)."""

    @property
    def parallel(self) -> bool:
        """Whether other trials may run while this one does (the sampler then lies about them)."""

    @property
    def runs_trials(self) -> bool:
        """False: a shared study's creator that runs none."""

    @property
    def whose(self) -> str:
        """Whose trials a message counts: " of this search", " this worker ran"."""

    @property
    def artifacts(self) -> Optional[str]:
        """This worker's artifact folder (a shared study's), where the probes' files go."""

    def open_storage(self, out_dir: Optional[Path]) -> Any:
        """The study's storage (None: in memory)."""

    def find(self, store: Any, name: str, existing: bool, out_dir: Optional[Path],
             direction: str) -> tuple[Optional[StoredSpec], bool]:
        """The study's spec (a joining worker's) and whether the study exists, its clashes refused."""

    def own_file(self, out_dir: Optional[Path]) -> Optional[Path]:
        """The study file this search would make itself, removed if it is refused before the study holds anything."""

    def gave_up(self, store: Any, name: str) -> None:
        """The set-up failed before the spec was stored: say so in the study, for the next creator."""

    def created(self, store: Any, name: str) -> None:
        """The spec is stored: the creation is over."""

    def sampler_seed(self, seed: int, store: Any, name: str, existing: bool) -> int:
        """This process's sampler seed, from the study's ``seed``."""

    def resume(self, study: Any, store: Any) -> None:
        """Trials that died with their process failed, the interrupted ones queued again."""

    def become_worker(self, study: Any, seed: int) -> Optional[int]:
        """This process registered where the study keeps its workers, its torch threads set; the threads before."""

    def weights_folder(self, study: Any, settings: Any) -> Optional[str]:
        """Where this process keeps trials' weights (None: nowhere)."""

    def seconds(self, study: Any, elapsed: float) -> float:
        """The seconds the result reports: this run's, or the study's over every run of it."""

    def claim(self, study: Any, number: int, target: int) -> bool:
        """Whether trial ``number`` holds one of the study's ``target`` slots (else it is surplus)."""

    def counts(self, study: Any) -> tuple[int, int]:
        """(finished trials that count, trials running now)."""

    def reap(self, study: Any, store: Any) -> None:
        """Trials of stopped workers failed and queued again."""

    def reaping(self, study: Any, store: Any) -> contextlib.AbstractContextManager[None]:
        """While the body runs, stopped workers' trials are reaped in the background."""

    def stopped(self, study: Any) -> set[int]:
        """Trials failed under their worker (reaped: their worker seemed stopped)."""

    def storage_url(self, store: Any) -> str:
        """Where the study is kept, as the report says it (before its password is hidden)."""


@dataclass(frozen=True)
class OneProcess:
    """A study of this process alone, in ``out``/study.db or in memory: no other worker, no slot to claim."""

    options: Study
    worker: str = field(default_factory=worker_id)
    parallel: bool = False
    runs_trials: bool = True
    whose: str = " of this search"
    artifacts: Optional[str] = None

    def open_storage(self, out_dir: Optional[Path]) -> Any:
        return open_storage(None, out_dir)

    def find(self, store: Any, name: str, existing: bool, out_dir: Optional[Path],
             direction: str) -> tuple[Optional[StoredSpec], bool]:
        if existing and not self.options.resume:
            raise UsageError(f"study '{name}' already exists in {out_dir}: pass resume=True to continue it, or another "
                             "out=DIR or study=NAME")
        if self.options.resume and out_dir is not None and not existing and not probed(out_dir):
            raise UsageError(f"resume: there is no study '{name}' in {out_dir} to continue: drop resume=True to start one")
        # (A folder with the probes' files but no study: a search killed during its probes. It goes on, with them.)
        return None, existing

    def own_file(self, out_dir: Optional[Path]) -> Optional[Path]:
        return out_dir / "study.db" if out_dir is not None else None

    def gave_up(self, store: Any, name: str) -> None:
        """Nobody waits for this study's spec."""

    def created(self, store: Any, name: str) -> None:
        """Nobody waits for this study's spec."""

    def sampler_seed(self, seed: int, store: Any, name: str, existing: bool) -> int:
        """The study's, moved on by the trials it holds (a resumed search does not replay the first run's proposals)."""
        import optuna

        return seed + (len(optuna.load_study(study_name=name, storage=store).trials) if existing else 0)

    def resume(self, study: Any, store: Any) -> None:
        mark_interrupted(study, store)  # on our own storage, a RUNNING trial died with the process
        requeue_interrupted(study)

    def become_worker(self, study: Any, seed: int) -> Optional[int]:
        return None

    def weights_folder(self, study: Any, settings: Any) -> Optional[str]:
        return weights_folder(settings.keep, study.study_name, settings.out, settings.backend.trial_folder(),
                              lasting=False)

    def seconds(self, study: Any, elapsed: float) -> float:
        """The study's wall seconds over every run of it, kept in the study: a resume adds its own."""
        total = float(study.user_attrs.get(WALL_SECONDS_KEY, 0.0)) + elapsed
        study.set_user_attr(WALL_SECONDS_KEY, total)
        return total

    def claim(self, study: Any, number: int, target: int) -> bool:
        return True

    def counts(self, study: Any) -> tuple[int, int]:
        return finished_count(study), 0

    def reap(self, study: Any, store: Any) -> None:
        """No other worker to stop."""

    def reaping(self, study: Any, store: Any) -> contextlib.AbstractContextManager[None]:
        return contextlib.nullcontext()

    def stopped(self, study: Any) -> set[int]:
        return set()

    def storage_url(self, store: Any) -> str:
        return str(getattr(store, "url", None) or "in-memory")


@dataclass(frozen=True)
class ManyWorkers:
    """One study in a storage many workers share (:mod:`tunekit.hpsearch.shared.workers` has the rules)."""

    options: SharedStudy
    worker: str = ""
    parallel: bool = True
    whose: str = " this worker ran"

    def __post_init__(self) -> None:
        object.__setattr__(self, "worker", self.options.worker_id or self.worker or worker_id())

    @property
    def runs_trials(self) -> bool:
        return self.options.run_trials

    @property
    def artifacts(self) -> Optional[str]:
        return self.options.artifacts

    def open_storage(self, out_dir: Optional[Path]) -> Any:
        st = self.options
        return open_storage(st.storage, out_dir, st.heartbeat_grace, st.storage_retry)

    def find(self, store: Any, name: str, existing: bool, out_dir: Optional[Path],
             direction: str) -> tuple[Optional[StoredSpec], bool]:
        """The first process creates the study; every other waits for its spec (and takes a dead creator's place)."""
        if not existing and claim_creation(store, name, direction):
            return None, False
        spec = wait_for_spec(store, name, self.options.join_timeout, take_over=True)  # None: an older tunekit's study
        if spec == TAKEN_OVER:  # its creator died before storing the spec: this process finishes the creation
            return None, True
        return spec, existing

    def own_file(self, out_dir: Optional[Path]) -> Optional[Path]:
        return None

    def gave_up(self, store: Any, name: str) -> None:
        creator_gave_up(store, name)

    def created(self, store: Any, name: str) -> None:
        end_creation(store, name)

    def sampler_seed(self, seed: int, store: Any, name: str, existing: bool) -> int:
        """Its own, from the study's and its id: no two workers propose the same points."""
        return worker_seed(seed, self.worker)

    def resume(self, study: Any, store: Any) -> None:
        reap_stopped(study, store)  # other workers may be running: only trials whose worker stopped are dead
        requeue_interrupted(study)

    def become_worker(self, study: Any, seed: int) -> Optional[int]:
        n = self.options.threads or default_threads(study)
        register_worker(study, self.worker, seed, n)
        return set_threads(n)

    def weights_folder(self, study: Any, settings: Any) -> Optional[str]:
        """The study's artifact folder where it has one (every worker sees it); a temporary folder stays."""
        artifacts = self.artifacts or study.user_attrs.get(ARTIFACTS_KEY)
        return weights_folder(settings.keep, study.study_name, settings.out, settings.backend.trial_folder(),
                              artifacts=artifacts, lasting=True)

    def seconds(self, study: Any, elapsed: float) -> float:
        return elapsed

    def claim(self, study: Any, number: int, target: int) -> bool:
        return claim(study, number, target)

    def counts(self, study: Any) -> tuple[int, int]:
        return counts(study)

    def reap(self, study: Any, store: Any) -> None:
        reap_stopped(study, store)

    def reaping(self, study: Any, store: Any) -> contextlib.AbstractContextManager[None]:
        return reaping(study, store, reap_every(store))

    def stopped(self, study: Any) -> set[int]:
        return set(stopped(study))

    def storage_url(self, store: Any) -> str:
        return str(getattr(store, "url", None) or self.options.storage)


def policy_of(options: Study | SharedStudy) -> StudyPolicy:
    """The policy of a search's study object, chosen once."""
    return ManyWorkers(options) if isinstance(options, SharedStudy) else OneProcess(options)


def settle_in(policy: StudyPolicy, study: Any, store: Any, spec: Optional[StoredSpec], seed: int, resume: bool,
              out_dir: Optional[Path]) -> Optional[int]:
    """This process in the opened study, in this order: a resume's dead trials failed and the interrupted
    queued again; the spec stored by the study's creator (``spec``: None for a joining worker), last, since
    joining workers wait for it; this worker registered. Returns the torch threads before (None: unchanged)."""
    if resume:
        policy.resume(study, store)
    if spec is not None and SPEC_KEY not in study.user_attrs:
        store_spec(study, spec, policy.artifacts, out_dir)
        policy.created(store, study.study_name)
    return policy.become_worker(study, seed)


def store_spec(study: Any, spec: StoredSpec, artifacts: Optional[str], out_dir: Optional[Path]) -> None:
    """The study's spec (and, with an ``artifacts`` folder, the probes' files in ``out_dir`` attached to the study)."""
    if artifacts is not None and out_dir is not None:
        attach(study, artifacts, [Path(out_dir) / f"{n}.{x}" for n in ("lr_find", "probe") for x in ("json", "png")])
    study.set_user_attr(SPEC_KEY, spec.to_stored())
