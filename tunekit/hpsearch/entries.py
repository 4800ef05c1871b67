"""The entries beside :func:`tunekit.search`, each a search: ``create_study`` (a shared study's creator,
which runs the probes and no trial), ``join_study`` (a worker, whose settings come from the study; the
ones given must agree with it) and ``search_own`` (trials trained by the user's own loop).

They sit beside :mod:`.run` and call down into it, the study's spec (:mod:`.shared`) and the
user's-loop backend (:mod:`.backends.own`): nothing below calls back up.
"""

from __future__ import annotations

import dataclasses
import inspect
from collections.abc import Callable
from typing import Any, Optional

from tunekit.errors import UsageError, deprecated
from tunekit.hpsearch.backends.own import OwnLoop
from tunekit.hpsearch.options import BackendOptions, Local, SharedStudy
from tunekit.hpsearch.run import search, search_with, settings_of
from tunekit.hpsearch.settings import SearchSettings
from tunekit.hpsearch.shared.api import load_spec
from tunekit.hpsearch.shared.spec import StoredSpec
from tunekit.hpsearch.shared.workers import open_storage, space_of
from tunekit.integrations.task_spec import TaskSpec, task_of

__all__ = ["create_study", "join_study", "search_own", "JOIN_SETTINGS"]

# What a joining worker may repeat: the study's own values, as its spec keeps them (and max_steps,
# another way to say the budget); each must agree with the study's.
JOIN_SETTINGS = (*SearchSettings().study_dict(), "max_steps")


def create_study(task: Any = "shapes", space: Any = "from_scratch", *, study: Optional[SharedStudy] = None,
                 **search_args: Any) -> Any:
    """Create the shared ``study``: the probes run here, once; the spec, plan and seed trial are stored.
    Workers then join with :func:`join_study` (``tunekit worker``), given the same SharedStudy.
    ``search_args``: those of :func:`tunekit.search`. Returns the (empty) SearchResult."""
    if study is None:
        if not search_args.get("storage"):  # tunekit 0.1.0: storage=URL, study_name=NAME (FLAT_KEYWORDS, until 0.3.0)
            raise UsageError("create_study needs study=SharedStudy(storage=URL) (postgresql://..., sqlite:///..., or "
                             "a journal file *.log)")
        return search(task, space, run_trials=False, **search_args)
    if not isinstance(study, SharedStudy):
        raise UsageError(f"create_study needs study=SharedStudy(storage=URL), got {study!r}")
    return search(task, space, study=dataclasses.replace(study, run_trials=False), **search_args)


def join_study(study: SharedStudy | str, study_name: Optional[str] = None, *, task: Any = None, out: Any = None,
               backend: BackendOptions = Local(), keep: str = "best", progress: Optional[bool] = None,
               **must_agree: Any) -> Any:
    """Join the shared ``study`` as a worker: run its trials until it holds its count; no probe runs.

    ``must_agree`` (any of :data:`JOIN_SETTINGS`, or ``sampler=``/``pruner=`` objects) are checked against
    the study's and refused in one line when they disagree; those not given are the study's. ``task``
    defaults to the study's (give the same task object when the study was created with one). ``keep``:
    which of this worker's trials keep their weights, in the study's artifact folder when it has one."""
    if isinstance(study, str):  # tunekit 0.1.0: join_study(storage, study_name, worker_id=..., ...), until 0.3.0
        study, backend = _legacy_worker(study, study_name, backend, must_agree)
    unknown = sorted(set(must_agree) - set(JOIN_SETTINGS) - {"sampler", "pruner", "objective"})
    if unknown:
        raise UsageError(f"join_study does not take {unknown[0]}=: a worker takes the study's settings; "
                         f"it may repeat {', '.join(JOIN_SETTINGS)}")
    if not study.name:
        raise UsageError("join_study needs the study's name: pass study=SharedStudy(storage=URL, name=NAME)")
    spec = load_spec(open_storage(study.storage, None, study.heartbeat_grace, study.storage_retry), study.name,
                      study.storage, study.join_timeout)
    if task is None and spec.task is None:
        raise UsageError(f"study '{study.name}' was created with a Task object, not a spec: pass the same task=")
    kw = _the_studys(spec, {k: v for k, v in must_agree.items() if v is not None})
    config = kw.pop("task_config", None)
    if isinstance(task, TaskSpec):
        task, config = task.spec, dict(task.config) or config
    task = spec.task if task is None else task
    task = TaskSpec(task, config) if config and isinstance(task, str) else task
    return search(task, space_of(spec), study=study, backend=backend, out=out, keep=keep, progress=progress, **kw)


def _the_studys(spec: StoredSpec, given: dict[str, Any]) -> dict[str, Any]:
    """The study's settings as :func:`tunekit.search` takes them, with the ones a worker gave over them."""
    values = {k: spec.value(k) for k in JOIN_SETTINGS if spec.holds(k)}  # an older spec lacks the newer settings
    objects = {k: given.pop(k) for k in ("sampler", "pruner") if k in given}
    if "budget" in given or "max_steps" in given:
        values.pop("budget", None)  # search() compares the budget it resolves with the study's
    if "max_steps" in given:
        given["budget"] = f"{given.pop('max_steps')}updates"
    if isinstance(given.get("objective"), str) and given["objective"] != values.get("objective"):
        values.pop("direction", None)  # another objective's own direction, to be told apart in one line
    return SearchSettings.from_spec(values | given) | objects


# 0.1.0's join_study(storage, study_name, ...): deprecated in 0.2.0, removed in 0.3.0.
_WORKER_ARGS = deprecated("join_study(storage, study_name, ...)", "pass join_study(SharedStudy(storage=URL, "
                          "name=NAME, worker_id=..., ...), backend=Local(device=...))")


def _legacy_worker(storage: str, name: Optional[str], backend: BackendOptions,
                   kw: dict[str, Any]) -> tuple[SharedStudy, BackendOptions]:
    """tunekit 0.1.0's join_study(storage, study_name, ...) keywords as a SharedStudy and a backend, warned."""
    old = {"worker_id": "worker_id", "threads": "threads", "grace_period": "heartbeat_grace", "timeout": "join_timeout",
           "time_limit": "time_limit", "storage_retry": "storage_retry"}
    fields = {new: kw.pop(k) for k, new in old.items() if k in kw}
    device = kw.pop("device", None)
    _WORKER_ARGS.warn()
    if device is not None:
        backend = dataclasses.replace(backend, device=device)
    return SharedStudy(storage=storage, name=name, **fields), backend


def search_own(task: Any, space: Any = "from_scratch", *, run: Callable[[Any], Any], **kwargs: Any) -> Any:
    """A search whose trials run in the user's own loop: ``run(trial)`` trains one, typically
    ``Trainer(..., args=replace(args, **trial.training_arguments()), callbacks=[trial.hf_callback()]).train()``
    or ``lightning.Trainer(**trial.lightning_arguments(), callbacks=[trial.lightning_callback()]).fit(module)``.

    ``task`` is what the probes measure (a Trainer, a LightningRun, a Task or a spec); ``kwargs`` are
    :func:`tunekit.search`'s. The trials are pruned by tunekit's rungs through the callbacks' reports,
    one after another in this process, with the memory a finished trial left collected before the next."""
    backend = kwargs.get("backend", Local())
    if not isinstance(backend, Local) and backend != "local":
        raise UsageError(f"search_own runs trials in this process, in your loop: backend={backend!r} "
                         "cannot be used with it; drop backend=")
    if not callable(run):
        raise UsageError(f"run must be a function of one trial, got {run!r}: pass run=lambda trial: ...")
    given = {n: kwargs.pop(n, p.default) for n, p in inspect.signature(search).parameters.items()
             if p.kind is inspect.Parameter.KEYWORD_ONLY}  # search()'s own defaults for what is not given
    settings = settings_of(task, deprecated=kwargs, caller="search_own", **given)
    return search_with(task_of(task), space, settings, OwnLoop(run))
