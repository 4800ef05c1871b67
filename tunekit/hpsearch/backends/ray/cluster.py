"""Starting or joining Ray for the search: loopback, auth tokens, addresses that fail fast, quiet logs,
and whether the workers can load the task."""

from __future__ import annotations

# Imported where used, not at the top: ray; importing this module does not pay for them.
import contextlib
import logging
import os
import secrets
import shutil
import socket
import sys
import sysconfig
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Optional

from tunekit.errors import UsageError

__all__ = ["ray_available", "check_address", "init_ray", "copy_ray_logs", "prepare_env", "tune_logs_quiet",
           "driver_paths", "check_workers_load", "loads_on_a_worker"]


def ray_available() -> bool:
    try:
        import ray  # noqa: F401
        from ray import tune  # noqa: F401
    except ImportError:
        return False
    return True


def check_address(address: str) -> None:
    """Fail fast, in one line, when nothing listens at a HOST:PORT cluster address.

    Ray itself retries a wrong address for minutes while printing warnings.
    A loopback address means this machine's own cluster: it is joined on loopback.
    """
    if address == "auto" or "://" in address:
        return
    host, _, port_s = address.rpartition(":")
    if not host or not port_s.isdigit():
        raise UsageError(f"address {address!r} is neither auto nor HOST:PORT: pass e.g. address=10.0.0.5:6379")
    if host in ("127.0.0.1", "localhost"):
        stay_on_loopback()
    try:
        socket.create_connection((host, int(port_s)), timeout=5).close()
    except OSError as exc:
        raise UsageError(f"address {address}: no Ray cluster answers there ({exc.strerror or exc}): start one with "
                         f"`ray start --head --port={port_s}`, or check the address") from None


def _refresh_ray_config() -> None:
    """Make an already-imported Ray see a changed RAY_AUTH_MODE.

    Ray has no public call for this; its config object re-reads the environment here.
    """
    if "ray" in sys.modules:
        try:
            from ray._raylet import Config

            Config.initialize("")
        except (ImportError, AttributeError):
            pass


def _token_available() -> bool:
    """A Ray auth token where Ray looks for one: RAY_AUTH_TOKEN, RAY_AUTH_TOKEN_PATH or ~/.ray/auth_token."""
    if os.environ.get("RAY_AUTH_TOKEN"):
        return True
    path = os.environ.get("RAY_AUTH_TOKEN_PATH") or str(Path.home() / ".ray" / "auth_token")
    return Path(path).is_file()


def prepare_env(address: Optional[str]) -> None:
    """Environment Ray and Tune read at import: auth for a named cluster, and quiet output."""
    if address and "RAY_AUTH_MODE" not in os.environ and _token_available():
        # Ray turns token authentication on by itself only for address "auto"; a
        # cluster named by HOST:PORT wants the same token, so use it when there is one.
        os.environ["RAY_AUTH_MODE"] = "token"
        _refresh_ray_config()
    if not address and not _token_available():
        # A local Ray with token auth writes a new ~/.ray/auth_token: a token of this
        # process's own, which the workers it starts inherit, keeps auth on and writes nothing.

        os.environ["RAY_AUTH_TOKEN"] = secrets.token_hex(32)
    # Tune's per-trial CSV/JSON/TensorBoard loggers and its console tables are noise
    # next to the study and our own files, and cost time on short trials.
    os.environ.setdefault("TUNE_DISABLE_AUTO_CALLBACK_LOGGERS", "1")
    # A trial's last report may carry no loss (a divergence, an error): by design.
    os.environ["TUNE_DISABLE_STRICT_METRIC_CHECKING"] = "1"
    # Tune's newer console output prints an experiment header even at verbose=0; the older one is silent.
    os.environ["RAY_AIR_NEW_OUTPUT"] = "0"
    os.environ.setdefault("TUNE_WARN_EXCESSIVE_EXPERIMENT_CHECKPOINT_SYNC_THRESHOLD_S", "1000")


def init_ray(address: Optional[str], cpus: Optional[int], gpus: Optional[float]) -> bool:
    """Join ``address`` or start a local Ray quietly; True when this call started it."""
    import ray

    if ray.is_initialized():
        return False
    # The workers import what the driver imports: its sys.path (a notebook's sys.path.insert, the folder
    # a module spec was found in) goes with the job, as Ray's runtime env, before the workers' own
    # PYTHONPATH (Ray expands ${PYTHONPATH} on each worker).
    kwargs: dict[str, Any] = dict(include_dashboard=False, log_to_driver=False, logging_level=logging.ERROR,
                                  configure_logging=True,
                                  runtime_env={"env_vars": {"PYTHONPATH": driver_paths() + os.pathsep + "${PYTHONPATH}"}})
    if address:
        try:
            ray.init(address=address, **kwargs)
        except ConnectionError as exc:
            raise UsageError(f"address {address}: cannot join a Ray cluster there ({str(exc).splitlines()[0]}): "
                             "start one with `ray start --head`, check the address, and give this machine the "
                             "head node's ~/.ray/auth_token (or RAY_AUTH_TOKEN)") from None
        except Exception as exc:
            if "auth" in type(exc).__name__.lower() or "token" in str(exc).lower():
                raise UsageError(f"address {address}: the cluster refused this process ({type(exc).__name__}): "
                                 "copy the head node's ~/.ray/auth_token here, or set RAY_AUTH_TOKEN") from None
            raise
        return True
    stay_on_loopback()
    # address="local": a Ray of its own, even where `ray start` left a cluster on this machine
    # (ray.init() would join that one, with other resources, or refuse num_cpus).
    ray.init(address="local", num_cpus=cpus, num_gpus=gpus, **kwargs)
    return True


def driver_paths() -> str:
    """The driver's own ``sys.path`` folders as a PYTHONPATH, absolute (``""`` is the current folder), in
    order; Python's and the environment's library folders left out, since every worker has its own."""
    libs = [Path(p).resolve() for p in {sys.prefix, sys.base_prefix, *(sysconfig.get_paths()[k] for k in
                                                                       ("stdlib", "platstdlib", "purelib", "platlib"))}]
    paths: list[str] = []
    for entry in sys.path:
        path = Path(os.path.abspath(entry or os.curdir))
        if path.is_dir() and not any(path.resolve().is_relative_to(lib) for lib in libs) and str(path) not in paths:
            paths.append(str(path))
    return os.pathsep.join(paths)


@contextlib.contextmanager
def tune_logs_quiet() -> Iterator[None]:
    """Tune's own log lines (a failed trial's traceback, "Trials did not complete") held back while it runs:
    each trial's error is in the study and the table, its traceback in the trial's folder under the run's
    storage; Ray's logs are copied to ``out/ray_logs``."""
    tune_logger = logging.getLogger("ray.tune")
    level = tune_logger.level
    tune_logger.setLevel(logging.CRITICAL)
    try:
        yield
    finally:
        tune_logger.setLevel(level)


def stay_on_loopback() -> None:
    """A local Ray instance listens on 127.0.0.1, not on the machine's interface.

    Ray reads RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0 when it is imported; for a Ray
    imported before this call, its module constant is set too (no public switch exists).
    """
    os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")
    if os.environ["RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"] == "0":
        try:
            import ray._private.ray_constants as constants

            constants.ENABLE_RAY_CLUSTER = False
        except (ImportError, AttributeError):
            pass


def copy_ray_logs(out_dir: Path) -> None:
    """Ray's own logs go with the results (out/ray_logs), not to the console.

    Ray has no public call that names the session directory; its node object holds it.
    """
    try:
        import ray

        session = Path(ray._private.worker._global_node.get_session_dir_path())  # type: ignore[attr-defined]
    except (ImportError, AttributeError):
        return
    src = session / "logs"
    if src.is_dir():
        dst = out_dir / "ray_logs"
        shutil.rmtree(dst, ignore_errors=True)
        shutil.copytree(src, dst, ignore=shutil.ignore_patterns("*.sock", "events"), dirs_exist_ok=True)


def loads_on_a_worker(task: Any) -> Optional[str]:
    """Runs on a Ray worker: the error that loading the trials' task meets there (a spec's file or module,
    or the modules a Task object needs, given as ``[ref]``), or None when it loads."""
    import ray

    from tunekit.integrations.task_spec import resolve_task_function

    try:
        if isinstance(task, list):
            ray.get(task[0])
        elif isinstance(task, str):
            resolve_task_function(task)
    except Exception as exc:  # noqa: BLE001 - whatever stops the trials, said before the first runs
        said = str(exc) if isinstance(exc, UsageError) else f"{type(exc).__name__}: {exc}"
        return " ".join(said.split())[:500]
    return None


def check_workers_load(task: Any) -> None:
    """Refuse, in one line and before the first trial, a task the Ray workers cannot load (a file or a
    module that only the driver's folder or ``sys.path`` holds, on a cluster of other machines). It costs
    one worker's start and import of the task (about 2.5 s on 2 busy CPU cores), once a search."""
    import ray

    from tunekit.integrations.task_spec import list_tasks

    if isinstance(task, str) and task.strip() in list_tasks():
        return  # a built-in task ships with tunekit, which the workers import already
    error = ray.get(ray.remote(num_cpus=0)(loads_on_a_worker).remote(task))
    if error:
        raise UsageError(f"the Ray workers cannot load the task ({error}): give the task file by a path that every "
                         "machine of the cluster has, or put its module on the workers' PYTHONPATH")
