"""Shared studies: one study, many workers, on any machine.

- **Created once.** Exactly one process creates the study: ``optuna.create_study`` without
  ``load_if_exists`` refuses every other with ``DuplicatedStudyError``, atomically, in the
  storage itself. That process runs the probes and stores the study's spec (:data:`SPEC_KEY`):
  the task and its settings, the space, the trial count, the budget, the seeds, the probes'
  results, each batch's micro-batch split and tunekit's version. Every other worker waits for
  the spec, runs no probe, and refuses a setting that disagrees with it.
- **Workers.** A worker is ``host:pid`` (or a given id); its sampler seed is derived from the
  study's sampler seed and that id, so no two workers propose the same points.
- **Slots.** :func:`claim` makes the trial count exact under races (the rule is there).
- **Stopped workers.** A trial whose worker stopped (its heartbeat went stale, or, on a
  storage without heartbeats, its process is gone from this host) is failed with the reason
  ``worker HOST:PID stopped``, does not count, and is re-run once with its params.
"""

from __future__ import annotations

# Imported where used, not at the top: optuna, torch, tqdm; importing this module does not pay for them.
import contextlib
import dataclasses
import json
import os
import socket
import threading
import time
import warnings
import zlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Optional

from tunekit.errors import UsageError
from tunekit.hpsearch.keys import (CREATOR_KEY, DESIGN_KEY, ENQUEUED_KEY, ERROR, PLAN_KEY, REASON, REQUEUE_REASON, RETRY_OF,
                                   SPEC_KEY, STOPPED_PREFIX, SURPLUS, WORKER, WORKER_PREFIX)
from tunekit.hpsearch.confirm import rerun_attrs
from tunekit.hpsearch.resilient import STORAGE_RETRY
from tunekit.hpsearch.settings import SPEC_COMPARED
from tunekit.hpsearch.shared.spec import StoredSpec
from tunekit.hpsearch.study import excluded, fail_trial, make_storage, stopped
from tunekit.inputs.space import Entry, SearchSpace
from tunekit.integrations.task_spec import same_task
from tunekit.processes import alive

__all__ = ["worker_id", "worker_seed", "register_worker", "default_threads", "claim", "counts", "claim_creation",
           "wait_for_spec", "check_spec", "creator_gave_up", "end_creation", "TAKEN_OVER",
           "on_stale_trial", "reap_stopped", "reap_every", "reaping", "open_storage", "set_threads", "SPEC_CHECKED"]

# The settings a joining worker must share with the study, as written (the others, the budget,
# seed and evals, are checked through the plan they resolve to, by check_resume).
SPEC_CHECKED = ("version", "task", "space", *SPEC_COMPARED)


def open_storage(url: str | None, out: Optional[Path], heartbeat_grace: Optional[int] = None,
                 retry_for: float = STORAGE_RETRY) -> Any:
    """The study's storage, whose heartbeats fail a stopped worker's trial the shared-study way
    (:func:`on_stale_trial`: the reason noted, one re-run), retried ``retry_for`` seconds when it does not answer."""
    return make_storage(url, out, heartbeat_grace, on_stale=on_stale_trial, retry_for=retry_for)


def worker_id() -> str:
    return f"{socket.gethostname()}:{os.getpid()}"


def worker_seed(sampler_seed: int, wid: str) -> int:
    """The worker's own sampler seed: the study's, mixed with the worker's id (reproducible for a given id)."""
    return zlib.crc32(f"{sampler_seed}/{wid}".encode())


def register_worker(study: Any, wid: str, seed: int, threads: Optional[int]) -> None:
    study.set_user_attr(WORKER_PREFIX + wid, {"host": socket.gethostname(), "pid": os.getpid(), "seed": seed,
                                              "threads": threads, "started": time.time()})


def set_threads(n: Optional[int]) -> Optional[int]:
    """Set torch's threads to ``n`` (None: leave them); the threads before, to restore."""
    if n is None:
        return None
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(n)
    return before


def default_threads(study: Any) -> int:
    """This machine's cores divided among the study's live workers on it (this one included)."""
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    host = socket.gethostname()
    live = {w.get("pid") for k, w in study.user_attrs.items()
            if k.startswith(WORKER_PREFIX) and isinstance(w, dict) and w.get("host") == host and alive(int(w["pid"]))}
    return max(1, cores // max(1, len(live | {os.getpid()})))


# --- the exact trial budget ------------------------------------------------------------


def claim(study: Any, number: int, target: int) -> bool:
    """Whether trial ``number`` may run: it holds one of the study's ``target`` slots.

    The rule: the slots are the first ``target`` live trials in number order, a live trial being
    one that waits, runs, or finished and counts (not interrupted, stopped or surplus). Trial k
    runs iff fewer than ``target`` live trials have a number below k. Optuna numbers trials in
    creation order (under a lock on the study row in an RDB, in log order in a journal) and a
    number never changes, so every worker reaches the same answer for k, whatever the
    interleaving: of the trials racing for the last slots, the lowest-numbered run, and the rest
    are told FAIL as surplus before they train. A live trial that later stops frees its slot.
    """
    skip = excluded(study)  # every other state is live: WAITING, RUNNING, COMPLETE, PRUNED, FAIL
    if number in skip:  # a confirmation run another worker queued too: its first copy runs
        return False
    return sum(1 for t in study.get_trials(deepcopy=False) if t.number < number and t.number not in skip) < target


def counts(study: Any) -> tuple[int, int]:
    """(finished trials that count, trials running now)."""
    import optuna

    S = optuna.trial.TrialState
    skip = excluded(study)
    finished = running = 0
    for t in study.get_trials(deepcopy=False, states=(S.COMPLETE, S.PRUNED, S.FAIL, S.RUNNING)):
        if t.number in skip:
            continue
        running += t.state == S.RUNNING
        finished += t.state != S.RUNNING
    return finished, running


def mark_surplus(trial: Any, target: int) -> None:
    trial.set_user_attr(SURPLUS, True)
    reason = f"surplus: the study's {target} trials were taken by others; not run"
    trial.set_user_attr(ERROR, reason)
    trial.set_user_attr(REASON, reason)


# --- creation and joining -------------------------------------------------------------


# The creator of a study, until it has stored its spec, writes who it is and that it is alive: a
# creator that died while probing (its process gone from this host, or silent for CREATOR_STALE
# seconds) is taken over by the next process that creates the study with the same settings
# (`study create` or `search --storage` again); workers, which have no settings to create with,
# are told so at once instead of waiting.
CREATOR_BEAT = 2.0
CREATOR_STALE = 30.0
TAKEN_OVER = "taken over"  # what wait_for_spec returns to the process that takes a dead creator's place


def claim_creation(store: Any, name: str, direction: str = "minimize") -> bool:
    """True in the one process that creates study ``name``; False in every other (it exists)."""
    import optuna

    try:
        optuna.create_study(study_name=name, storage=store, direction=direction)
    except optuna.exceptions.DuplicatedStudyError:
        return False
    _become_creator(store, name, 0)
    return True


def _become_creator(store: Any, name: str, generation: int) -> None:
    """Note this process as the study's creator, and keep noting that it is alive (a daemon thread)
    until the spec is stored, the study is gone, or another generation took over."""
    import optuna

    me = {"host": socket.gethostname(), "pid": os.getpid(), "generation": generation}
    study = optuna.load_study(study_name=name, storage=store)
    study.set_user_attr(CREATOR_KEY, {**me, "alive": time.time()})

    def beat() -> None:
        while True:
            time.sleep(CREATOR_BEAT)
            try:
                attrs = optuna.load_study(study_name=name, storage=store).user_attrs
                if SPEC_KEY in attrs or (attrs.get(CREATOR_KEY) or {}).get("generation") != generation:
                    return
                study.set_user_attr(CREATOR_KEY, {**me, "alive": time.time()})
            except KeyError:  # the study was deleted
                return
            except Exception:  # noqa: BLE001 - a storage hiccup: the next beat tries again
                continue

    threading.Thread(target=beat, name="tunekit-creator", daemon=True).start()


def creator_gave_up(store: Any, name: str) -> None:
    """A creator whose set-up failed before it stored the spec: marked dead, for the next to take over."""
    import optuna

    study = optuna.load_study(study_name=name, storage=store)
    mine = study.user_attrs.get(CREATOR_KEY) or {}
    if SPEC_KEY not in study.user_attrs and mine.get("pid") == os.getpid() and mine.get("host") == socket.gethostname():
        study.set_user_attr(CREATOR_KEY, {**mine, "alive": 0.0})


def end_creation(store: Any, name: str) -> None:
    """Once the spec is stored: the marker study of a takeover, if there was one, is removed."""
    import optuna

    gen = int((optuna.load_study(study_name=name, storage=store).user_attrs.get(CREATOR_KEY) or {}).get("generation", 0))
    for g in range(1, gen + 1):  # this takeover's, and any of a taker-over that died in its turn
        with contextlib.suppress(KeyError):
            optuna.delete_study(study_name=_marker(name, g), storage=store)


def _marker(name: str, generation: int) -> str:
    return f"{name}.tunekit-creator-{generation}"


def _creator_dead(creator: Optional[dict[str, Any]]) -> bool:
    if not creator:
        return False  # a creator from before the notes, or one that has not written yet
    if creator.get("host") == socket.gethostname() and creator.get("pid") and not alive(int(creator["pid"])):
        return True
    return time.time() - float(creator.get("alive", 0.0)) > CREATOR_STALE


def _take_over(store: Any, name: str, creator: dict[str, Any]) -> bool:
    """Whether this process takes a dead creator's place: the one that creates the next generation's
    marker study (as atomic as the study's own creation)."""
    import optuna

    gen = int(creator.get("generation", 0)) + 1
    try:
        optuna.create_study(study_name=_marker(name, gen), storage=store)
    except optuna.exceptions.DuplicatedStudyError:
        return False
    _become_creator(store, name, gen)
    return True


def wait_for_spec(store: Any, name: str, timeout: float = 1800.0, poll: float = 0.5,
                  take_over: bool = False) -> Any:
    """The study's spec, once its creator has stored it; None for a study with a plan but no spec (an
    older tunekit's). If its creator died first: with ``take_over`` (a process that has the settings to
    create it with), :data:`TAKEN_OVER` in the one that takes its place; else refused in one line, as
    is a wait past ``timeout`` seconds."""
    import optuna

    deadline = time.monotonic() + timeout
    while True:
        attrs = optuna.load_study(study_name=name, storage=store).user_attrs
        if SPEC_KEY in attrs:
            return StoredSpec.from_stored(attrs[SPEC_KEY])
        if PLAN_KEY in attrs and DESIGN_KEY in attrs:
            return None
        creator = attrs.get(CREATOR_KEY)
        if _creator_dead(creator) and not take_over:
            raise UsageError(f"study '{name}': its creator ({creator['host']}:{creator['pid']}) stopped before it stored "
                             "the study's settings: run the same tunekit study create again to finish it (or tunekit "
                             "study delete it)")
        if _creator_dead(creator) and _take_over(store, name, creator):
            attrs = optuna.load_study(study_name=name, storage=store).user_attrs
            if SPEC_KEY in attrs:  # it was finished just before: nothing to take over
                end_creation(store, name)
                return StoredSpec.from_stored(attrs[SPEC_KEY])
            return TAKEN_OVER
        if time.monotonic() > deadline:
            raise UsageError(f"study '{name}' has had no settings for {timeout:.0f}s: the worker that created it is still "
                             "probing, or died; wait and join again, or delete the study and create it again")
        time.sleep(poll)


def check_spec(stored: StoredSpec, mine: dict[str, Any], name: str) -> None:
    """Refuse, in one line, a worker whose settings disagree with the study's (``mine``: as stored)."""
    for key in SPEC_CHECKED:
        if key == "task" and stored.holds(key) and same_task(stored.value(key), mine.get(key)):
            continue  # the same file where this machine keeps it, or a study stored with a relative path
        if stored.holds(key) and _norm(stored.value(key)) != _norm(mine.get(key)):
            # The fix names the parameter as key=...; the CLI says it as its flag.
            fix = ("install the study's tunekit version" if key == "version"
                   else f"leave out {key}=... to take the study's")
            raise UsageError(f"study '{name}' was created with {key} = {stored.value(key)!r}, this run has "
                             f"{mine.get(key)!r}: {fix}, or use another study name")


def _norm(value: Any) -> Any:
    return json.loads(json.dumps(value, sort_keys=True, default=str))


def spec_probes(spec: StoredSpec) -> tuple[Any, Any]:
    """The range test and batch probe the study was created with (no worker runs them again)."""
    lf = pr = None
    if spec.lr_find is not None:
        from tunekit.probes.range_test import LRFindResult

        lf = LRFindResult.from_json(json.dumps(spec.lr_find))
    if spec.probe is not None:
        from tunekit.results import ProbeResult

        pr = ProbeResult.from_json(json.dumps(spec.probe))
    return lf, pr


def space_of(spec: StoredSpec) -> Any:
    """The study's search space, from its spec."""
    sp = spec.space
    return SearchSpace(sp["name"], sp.get("description", ""), {n: Entry(**e) for n, e in sp["entries"].items()})


def space_dict(sp: Any) -> dict[str, Any]:
    # Keys added to Entry later are left out where unset: a study created before them still matches.
    later = ("adaptive_l2",)
    return {"name": sp.name, "description": sp.description,
            "entries": {n: {k: v for k, v in dataclasses.asdict(e).items() if not (k in later and v is None)}
                        for n, e in sp.entries.items()}}


# --- stopped workers ------------------------------------------------------------------


def _where(trial: Any) -> str:
    w = trial.user_attrs.get(WORKER) or {}
    return f"{w.get('host', '?')}:{w.get('pid', '?')}" if w else "unknown"


def note_stopped(study: Any, trial: Any, reason: str) -> None:
    """Note why ``trial`` failed, and queue its one re-run (a re-run that stops is not re-run again)."""
    study.set_user_attr(f"{STOPPED_PREFIX}{trial.number}", reason)
    _queue_rerun(study, trial, reason)


def _queue_rerun(study: Any, trial: Any, reason: str) -> None:
    if RETRY_OF in trial.user_attrs:
        return
    params = dict(trial.params) or trial.user_attrs.get(ENQUEUED_KEY)
    if params:  # else it died before the sampler drew any: nothing to re-run
        study.enqueue_trial(params, user_attrs={ENQUEUED_KEY: params, RETRY_OF: trial.number, REQUEUE_REASON: reason,
                                                **rerun_attrs(trial.user_attrs)}, skip_if_exists=False)


def on_stale_trial(study: Any, trial: Any) -> None:
    """Optuna's heartbeat callback: called once, in the one worker that failed the stale trial (whose
    reason the storage put on it: study.stale_reason)."""
    note_stopped(study, trial, trial.user_attrs.get(REASON) or f"worker {_where(trial)} stopped")


def reap_stopped(study: Any, store: Any = None, workers: Optional[list[str]] = None) -> list[int]:
    """Fail the trials whose worker stopped, note why, queue their re-runs; their numbers.

    On an RDB storage: trials whose heartbeat is older than the grace period (Optuna's
    ``fail_stale_trials``, then :func:`on_stale_trial`). On any storage: RUNNING trials of a
    process of this host that is gone, and those of the ``workers`` named (``host:pid``)."""
    import optuna

    before = set(_stopped_numbers(study))
    with warnings.catch_warnings():  # "experimental" in Optuna's words
        warnings.simplefilter("ignore")
        optuna.storages.fail_stale_trials(study)  # no-op without heartbeats (a journal file)
    host, named = socket.gethostname(), set(workers or ())
    for t in study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.RUNNING,)):
        w = t.user_attrs.get(WORKER) or {}
        dead = (w.get("host") == host and w.get("pid") and not alive(int(w["pid"]))) or _where(t) in named
        if not dead:
            continue
        reason = f"worker {_where(t)} stopped"
        # Noted before the trial is failed: no worker ever counts it as a finished trial meanwhile.
        study.set_user_attr(f"{STOPPED_PREFIX}{t.number}", reason)
        if _fail(study, store, t, reason):
            _queue_rerun(study, t, reason)
        elif study.get_trials(deepcopy=False)[t.number].state != optuna.trial.TrialState.FAIL:
            # It ended on its own just before its process did: it counts after all (Optuna keeps
            # study attributes for good, so the note is emptied rather than removed).
            study.set_user_attr(f"{STOPPED_PREFIX}{t.number}", "")
    return sorted(set(_stopped_numbers(study)) - before)


def reap_every(store: Any) -> float:
    """Seconds between a worker's background checks for stopped workers: a quarter of the heartbeat
    grace period (RDB), within 0.5..5 s; 2 s on storages without heartbeats (a process gone from this
    host is found at once)."""
    grace = getattr(store, "grace_period", None)
    return min(5.0, max(0.5, grace / 4)) if grace else 2.0


@contextlib.contextmanager
def reaping(study: Any, store: Any, every: float) -> Iterator[None]:
    """While the body runs (a worker training its trials), stopped workers' trials are reaped every
    ``every`` seconds on a thread of its own: a dead worker's trial is failed and queued again within
    its grace period and one check, not when this worker's own trial ends."""
    stop = threading.Event()

    def watch() -> None:
        while not stop.wait(every):
            try:
                reap_stopped(study, store)
            except Exception:  # noqa: BLE001 - a storage error is the main loop's to report (it reaps between trials)
                continue

    thread = threading.Thread(target=watch, name="tunekit-reaper", daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join(timeout=every + 30)


def _stopped_numbers(study: Any) -> list[int]:
    return list(stopped(study))


def _fail(study: Any, store: Any, trial: Any, reason: str) -> bool:
    """Fail another process's trial, its reason on it (for dashboards); True in the one process whose call did it."""
    return fail_trial(study, store, trial.number, reason)
