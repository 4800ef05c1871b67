"""One server for a team, a dashboard, and the study's files as Optuna artifacts.

- :func:`serve`: Optuna's gRPC storage proxy in front of an RDB storage (``run_grpc_proxy_server``);
  workers then use ``--storage grpc://HOST:PORT``. It listens on 127.0.0.1 unless told otherwise:
  the proxy has no authentication or encryption of its own.
- :func:`dashboard`: optuna-dashboard on a study's storage (an optional extra), with its artifacts.
- :func:`attach`: files (the range test's and the probe's JSON and plots, search.png) uploaded to
  the study through Optuna's artifact store, so a dashboard shows them beside the trials.
"""

from __future__ import annotations

# Imported where used, not at the top: grpc, numpy, optuna, optuna_dashboard;
# importing this module does not pay for them.
import threading
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any, Optional

from tunekit.errors import UsageError
from tunekit.hpsearch.keys import ARTIFACTS_KEY

__all__ = ["serve", "dashboard", "attach", "storage_url"]


def storage_url(target: str) -> str:
    """A study's storage from DIR (a search's output folder: its study.db) or a URL / journal file."""
    if "://" in target or target.endswith((".log", ".jsonl", ".journal")):
        return target
    db = Path(target) / "study.db"
    if not db.is_file():
        raise UsageError(f"'{target}' holds no study.db: give a directory written by tunekit search, or a storage URL")
    return f"sqlite:///{db.resolve()}"


def serve(storage: str, host: str = "127.0.0.1", port: int = 13000, dashboard_port: Optional[int] = None,
          artifacts: Optional[str] = None, on_ready: Optional[Callable[[], None]] = None) -> None:
    """Serve ``storage`` (an RDB URL) to workers over gRPC until interrupted; optionally the dashboard too.
    ``on_ready`` is called once the storage is open, just before serving."""
    from tunekit.hpsearch.shared.workers import open_storage

    if "://" not in storage or storage.startswith("grpc://"):
        raise UsageError(f"serve proxies a database (postgresql://..., sqlite:///...), not {storage!r}: "
                         "a journal file needs no server, give the workers its path")
    try:
        import grpc  # noqa: F401 - Optuna's proxy needs it
    except ImportError:
        raise UsageError("tunekit serve needs grpcio: pip install 'tunekit[serve]'") from None
    import optuna

    store = open_storage(storage, None)
    if dashboard_port is not None:
        threading.Thread(target=dashboard, args=(storage,), kwargs=dict(host=host, port=dashboard_port,
                         artifacts=artifacts), daemon=True).start()
    if on_ready is not None:
        on_ready()
    optuna.storages.run_grpc_proxy_server(store, host=host, port=port)


def dashboard(target: str, host: str = "127.0.0.1", port: int = 8080, artifacts: Optional[str] = None,
              on_ready: Optional[Callable[[], None]] = None) -> None:
    """optuna-dashboard on the study's storage (DIR, URL or journal file) until interrupted."""
    try:
        import optuna_dashboard
    except ImportError:
        raise UsageError("tunekit dashboard needs optuna-dashboard: pip install 'tunekit[dashboard]'") from None
    from tunekit.hpsearch.shared.workers import open_storage

    store = open_storage(storage_url(target), None)
    folder = artifacts or _artifact_folder(store)
    store_a = _artifact_store(folder) if folder else None
    if on_ready is not None:
        on_ready()
    optuna_dashboard.run_server(store, host=host, port=port, artifact_store=store_a)


def _artifact_folder(store: Any) -> Optional[str]:
    import optuna

    for name in optuna.get_all_study_names(store):
        folder = optuna.load_study(study_name=name, storage=store).user_attrs.get(ARTIFACTS_KEY)
        if folder:
            return str(folder)
    return None


def _artifact_store(folder: str) -> Any:
    from optuna.artifacts import FileSystemArtifactStore

    Path(folder).mkdir(parents=True, exist_ok=True)
    return FileSystemArtifactStore(str(Path(folder).resolve()))


def attach(study: Any, folder: str, files: list[Path]) -> list[str]:
    """Upload ``files`` (those that exist) to ``study`` through the artifact store in ``folder``; their ids.

    The folder is noted in the study, so that a report or a dashboard finds the files."""
    from optuna.artifacts import upload_artifact

    store = _artifact_store(folder)
    if study.user_attrs.get(ARTIFACTS_KEY) != str(Path(folder).resolve()):
        study.set_user_attr(ARTIFACTS_KEY, str(Path(folder).resolve()))
    ids = []
    with warnings.catch_warnings():  # "experimental" in Optuna's words
        warnings.simplefilter("ignore")
        for f in files:
            if f.is_file():
                ids.append(upload_artifact(artifact_store=store, file_path=str(f), study_or_trial=study))
    return ids
