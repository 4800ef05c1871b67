"""Storages that ride out a short outage, and that say why a stale trial failed.

Optuna's storages raise on the first lost connection: a database restart of two seconds, or a
`tunekit serve` restarted, stopped every worker with a traceback and left their trials
RUNNING. Here every public call of the storage is retried with backoff, on connection-level
errors only, for ``retry_for`` seconds; then the worker stops with one line that names the
storage and the last error. Other errors (a bad value, a finished trial) are raised at once.

A retried write whose commit reached the database before the connection dropped runs twice:
harmless for attributes, values and heartbeats; a trial created twice is one more RUNNING
trial without a heartbeat, which the others fail as stale, and a state set twice is refused as
finished, which the callers already take as "another process was first".
"""

from __future__ import annotations

# Imported where used, not at the top: optuna, sqlalchemy; importing this module does not pay for them.
import functools
import time
from collections.abc import Callable
from typing import Any

from tunekit.errors import UsageError
from tunekit.hpsearch.keys import WORKER

__all__ = ["STORAGE_RETRY", "StorageUnreachable", "connection_error", "retrying_class", "stale_reason"]

STORAGE_RETRY = 60.0  # seconds a worker keeps trying a storage that does not answer


class StorageUnreachable(UsageError):
    """The study's storage did not answer for the whole retry time: one line, its URL and last error."""


def connection_error(exc: BaseException) -> bool:
    """Whether ``exc`` (or an error it was raised from) is a lost or refused connection: SQLAlchemy's
    OperationalError / InterfaceError / an invalidated connection, or gRPC's UNAVAILABLE."""
    import sqlalchemy.exc as sa

    seen: BaseException | None = exc
    for _ in range(8):  # the chain is short; never loop on a cycle
        if seen is None:
            return False
        if isinstance(seen, (sa.OperationalError, sa.InterfaceError)):
            return True
        if isinstance(seen, sa.DBAPIError) and seen.connection_invalidated:
            return True
        code = getattr(seen, "code", None)
        if callable(code) and getattr(code(), "name", None) in ("UNAVAILABLE", "DEADLINE_EXCEEDED"):
            return True  # a grpc.RpcError
        seen = seen.__cause__ or seen.__context__
    return False


def _retrying(fn: Callable[..., Any], where: str) -> Callable[..., Any]:
    @functools.wraps(fn)
    def call(self: Any, *args: Any, **kwargs: Any) -> Any:
        retry_for = float(getattr(self, "retry_for", STORAGE_RETRY))
        deadline, wait = time.monotonic() + retry_for, 0.25
        while True:
            try:
                return fn(self, *args, **kwargs)
            except Exception as exc:
                if not connection_error(exc):
                    raise
                if time.monotonic() + wait > deadline:
                    last = _last_error(exc)
                    raise StorageUnreachable(
                        f"storage {where} did not answer for {retry_for:g} s ({last}): check it is up, then "
                        "start the worker again (finished trials are kept; its trial is re-run)") from None
                time.sleep(wait)
                wait = min(2 * wait, 5.0)

    return call


# Methods with no public name that Optuna itself calls on an RDB storage (its cache in front of it,
# and its heartbeat check); retried too, since the public ones do not cover those calls. No
# private attribute is read: these are the storage's own methods, overridden.
OPTUNA_CALLS = ("_get_stale_trial_ids", "_create_new_trial", "_set_trial_param", "_get_best_trial_id", "_get_trials")


def _last_error(exc: BaseException) -> str:
    """The error in one line: a gRPC error's code and details, else its (or its cause's) first line."""
    for e in (exc, exc.__cause__):
        details, code = getattr(e, "details", None), getattr(e, "code", None)
        if callable(details) and callable(code):
            return f"{getattr(code(), 'name', code())}: {details()}"
    return (str(exc.__cause__ or exc).strip().splitlines() or [type(exc).__name__])[0]


def retrying_class(base: type, where: str) -> type:
    """A subclass of the Optuna storage class ``base`` whose public methods (and ``OPTUNA_CALLS``)
    are retried as above."""
    import optuna

    names = {n for n in dir(optuna.storages.BaseStorage) if not n.startswith("_")}
    names |= {"record_heartbeat", "get_heartbeat_interval", *OPTUNA_CALLS}
    methods = {n: _retrying(getattr(base, n), where) for n in sorted(names)
               if callable(getattr(base, n, None)) and n not in ("remove_session", "upgrade")}
    return type(f"Retrying{base.__name__}", (base,), methods)


def stale_reason(trial: Any, grace: Any) -> str:
    """Why a trial whose heartbeat went stale was failed, naming its worker where it recorded one."""
    w = trial.user_attrs.get(WORKER) or {}
    who = f"worker {w.get('host', '?')}:{w.get('pid', '?')}" if w else "its worker"
    return f"{who} stopped: no heartbeat for {grace} s"
