"""The Ray Tune backend of :func:`tunekit.search`: the same study, its trials run by a Tuner.

Ray places and runs the trials (CPUs, GPUs, machines, retries); Optuna keeps
the study. Three pieces connect them:

- ``_StudySearcher`` asks the study for each trial's parameters (TPE, with the
  enqueued seed trial first);
- Ray's ``ASHAScheduler`` stops weak trials at rungs counted in optimizer
  updates;
- ``_Recorder`` (a Tune callback) writes every trial's curve and end state
  into the study: COMPLETE only when the trial trained its full budget,
  PRUNED when the scheduler stopped it (with its intermediate values), FAIL
  with the error or the divergence. Ray's own ``OptunaSearch`` reports a
  stopped trial as COMPLETE with its partial value, which mixes short and
  full runs in TPE's model.

The study, not Tune's experiment state, is what a resume restores: TPE goes on
from every finished trial, and interrupted trials run again (see search()).
Trials report through the same shared training step as the local backend.
"""

from __future__ import annotations

import logging
import math
import os
import shutil
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, Optional

from .errors import UsageError

__all__ = ["run_ray", "check_packing", "ray_available"]

# A trial's end, as the recorder reads it from the trial's last report.
COMPLETE_KEY = "tunekit_complete"
ERROR_KEY = "tunekit_error"
RAW_KEY = "tunekit_loss"  # the loss as measured; "loss" is what the scheduler compares
WORST = 1e300  # a non-finite loss, for the scheduler: the worst value, yet arithmetic stays finite


def _for_scheduler(loss: float) -> float:
    loss = float(loss)
    return min(loss, WORST) if math.isfinite(loss) or loss == math.inf else WORST


def ray_available() -> bool:
    try:
        import ray  # noqa: F401
        from ray import tune  # noqa: F401
    except ImportError:
        return False
    return True


def check_packing(gpus_per_trial: float, need_bytes: float, gpu_bytes: float, what: str) -> None:
    """Refuse fractional GPUs that pack more trials on a GPU than its memory holds.

    ``need_bytes`` is one trial's predicted peak (from the probe's memory
    model), ``gpu_bytes`` the usable memory of one GPU.
    """
    if not 0 < gpus_per_trial < 1:
        return
    per_gpu = int(math.floor(1 / gpus_per_trial + 1e-9))
    if per_gpu * need_bytes > gpu_bytes:
        fits = max(1, int(gpu_bytes // max(need_bytes, 1)))
        gib = 2**30
        raise UsageError(
            f"--gpus-per-trial {gpus_per_trial:g} packs {per_gpu} trials on a GPU, but one trial needs up to "
            f"{need_bytes / gib:.2f} GiB ({what}) and a GPU has {gpu_bytes / gib:.2f} GiB usable: "
            f"use --gpus-per-trial {1 / fits:g} or more")


def _error_text(trial: Any) -> str:
    """The root exception of a failed Ray trial, as 'Type: message'."""
    err: Any = None
    try:
        err = trial.get_pickled_error()
    except Exception:
        err = None
    while err is not None and getattr(err, "cause", None) is not None and err.cause is not err:
        err = err.cause  # RayTaskError wraps the trainable's own exception
    if err is None:
        text = ""
        try:
            text = trial.get_error() or ""
        except Exception:
            pass
        lines = [ln for ln in str(text).strip().splitlines() if ln.strip()]
        return lines[-1].strip() if lines else "trial failed (no error recorded by Ray)"
    msg = str(err).strip().splitlines()
    return f"{type(err).__name__}: {msg[-1] if msg else ''}".rstrip(": ")


# --- the trainable: runs on a Ray worker ------------------------------------------


_TASK_CACHE: dict[str, Any] = {}


def _trainable(config: dict[str, Any], task: Any = None) -> None:
    """One trial: train through the shared step, report each evaluation to Tune."""
    import ray
    import torch
    from ray import tune

    from .search import run_config

    if config.get("config_error"):
        _report_error(config["config_error"], {})
        raise RuntimeError(config["config_error"])
    cpus = float(config.get("cpus") or 1)
    torch.set_num_threads(max(1, int(cpus)))
    gpu_ids = [str(g) for g in ray.get_gpu_ids()]
    train_cfg = dict(config["train_cfg"])
    if train_cfg.get("device", "auto") == "auto":
        # The device Ray gave this trial: Ray sets CUDA_VISIBLE_DEVICES to its GPUs,
        # so "cuda" is one of them; without a GPU, never take one on our own.
        train_cfg["device"] = "cuda" if gpu_ids and torch.cuda.is_available() else "cpu"
    ctx = ray.get_runtime_context()
    worker = {"node": ray.util.get_node_ip_address(), "cluster": ctx.gcs_address, "pid": os.getpid(),
              "gpu_ids": gpu_ids, "device": train_cfg["device"], "started": time.time()}
    steps = int(train_cfg["max_steps"])
    t0 = time.perf_counter()

    def report(step: int, metrics: dict[str, float]) -> None:
        if step < steps:  # the last evaluation is reported below, marked complete
            tune.report({"loss": _for_scheduler(metrics["loss"]), RAW_KEY: float(metrics["loss"]), "updates": int(step),
                         "seconds": time.perf_counter() - t0, "worker": worker})

    spec = task if task is not None else config["task"]
    try:
        # The task is built once per worker process: reused workers skip building its data.
        result = run_config(spec, train_cfg, config.get("task_cfg"), report, cache=_TASK_CACHE)
    except Exception as exc:
        # Ray hands callbacks the error only through files it may not have written yet:
        # send the text as a last report (no "loss": the scheduler ignores it), then fail.
        _report_error(f"{type(exc).__name__}: {exc}", worker)
        raise
    worker["finished"] = time.time()
    end: dict[str, Any] = {"updates": int(result.updates), "seconds": time.perf_counter() - t0, "worker": worker}
    if result.diverged:
        # No "loss" key: the scheduler ignores this report, the recorder marks the trial FAIL.
        end.update(diverged=True, diverged_at=int(result.diverged_at or result.updates))
    else:
        end.update({"loss": _for_scheduler(result.final_loss), RAW_KEY: float(result.final_loss), COMPLETE_KEY: True})
    tune.report(end)


def _report_error(text: str, worker: dict[str, Any]) -> None:
    from ray import tune

    lines = text.strip().splitlines() or [text]
    try:
        tune.report({ERROR_KEY: lines[0][:2000], "worker": worker})
    except Exception:  # outside a Tune session, or the session is gone: Ray's error files remain
        pass


# --- driver side --------------------------------------------------------------------


class _StudySearcher:
    """A Tune searcher that asks an Optuna study: enqueued trials first, then its sampler."""

    def __new__(cls, *args: Any, **kwargs: Any) -> Any:  # built lazily: ray is imported only here
        from ray.tune.search import Searcher

        class StudySearcher(Searcher):
            def __init__(self, study: Any, dists: dict[str, Any], make_config: Callable[[dict[str, Any]], dict[str, Any]],
                         book: dict[int, Any]) -> None:
                super().__init__(metric="loss", mode="min")
                self.study, self.dists, self.make_config, self.book = study, dists, make_config, book

            def suggest(self, trial_id: str) -> Optional[dict[str, Any]]:
                trial = self.study.ask(fixed_distributions=self.dists)
                self.book[trial.number] = trial
                try:
                    return {"number": trial.number, **self.make_config(trial)}
                except Exception as exc:
                    # A config that cannot run (e.g. no micro-batch fits) fails as its own trial:
                    # the trainable raises it, the recorder keeps it, the search goes on.
                    return {"number": trial.number, "config_error": f"{type(exc).__name__}: {exc}"}

            def on_trial_complete(self, trial_id: str, result: Optional[dict[str, Any]] = None, error: bool = False) -> None:
                pass  # the recorder tells the study, with the error text Ray gives only to callbacks

        return StudySearcher(*args, **kwargs)


def _states() -> Any:
    import optuna

    return optuna.trial.TrialState


def _make_recorder(study: Any, book: dict[int, Any], on_end: Callable[[Any, str], None]) -> Any:
    from ray.tune import Callback

    class Recorder(Callback):
        """Writes each trial's curve and end state into the Optuna study."""

        def on_trial_result(self, iteration: int, trials: list, trial: Any, result: dict, **info: Any) -> None:
            ot = book.get(trial.config.get("number"))
            if ot is not None and ERROR_KEY in result:
                ot.set_user_attr("error", str(result[ERROR_KEY]))
            if ot is None or "loss" not in result:
                return
            step = int(result["updates"])
            loss = float(result.get(RAW_KEY, result["loss"]))
            curve = ot.user_attrs.get("curve", [])
            if COMPLETE_KEY not in result:
                # Intermediate values, as Optuna's pruners and dashboard expect them.
                ot.report(loss, step)
            curve = [*curve, [step, loss]]
            ot.set_user_attr("curve", curve)
            ot.set_user_attr("updates", step)
            ot.set_user_attr("seconds", float(result.get("seconds", 0.0)))
            ot.set_user_attr("worker", result.get("worker", {}))

        def on_trial_complete(self, iteration: int, trials: list, trial: Any, **info: Any) -> None:
            ot = book.pop(trial.config.get("number"), None)
            if ot is None:
                return
            last = trial.last_result or {}
            S = _states()
            self._common(ot, last)
            if last.get(COMPLETE_KEY):
                study.tell(ot, float(last.get(RAW_KEY, last["loss"])))
                on_end(ot, "COMPLETE")
            elif last.get("diverged"):
                ot.set_user_attr("diverged", True)
                ot.set_user_attr("error", f"diverged at update {last.get('diverged_at')}")
                study.tell(ot, state=S.FAIL)
                on_end(ot, "FAIL")
            else:
                # Stopped by the scheduler before its budget: pruned, never complete.
                study.tell(ot, state=S.PRUNED)
                on_end(ot, "PRUNED")

        def on_trial_error(self, iteration: int, trials: list, trial: Any, **info: Any) -> None:
            ot = book.pop(trial.config.get("number"), None)
            if ot is None:
                return
            self._common(ot, trial.last_result or {})
            if not (ot.user_attrs.get("error") and (trial.last_result or {}).get(ERROR_KEY)):
                ot.set_user_attr("error", _error_text(trial))
            ot.set_user_attr("attempts", int(getattr(trial, "num_failures", 1) or 1))
            study.tell(ot, state=_states().FAIL)
            on_end(ot, "FAIL")

        @staticmethod
        def _common(ot: Any, last: dict[str, Any]) -> None:
            if "updates" in last:
                ot.set_user_attr("updates", int(last["updates"]))
            if "seconds" in last:
                ot.set_user_attr("seconds", float(last["seconds"]))
            if "worker" in last:
                ot.set_user_attr("worker", last["worker"])

    return Recorder()


def check_address(address: str) -> None:
    """Fail fast, in one line, when nothing listens at a HOST:PORT cluster address.

    Ray itself retries a wrong address for minutes while printing warnings.
    A loopback address means this machine's own cluster: it is joined on loopback.
    """
    import socket

    if address == "auto" or "://" in address:
        return
    host, _, port_s = address.rpartition(":")
    if not host or not port_s.isdigit():
        raise UsageError(f"--address {address!r} is neither auto nor HOST:PORT: pass e.g. --address 10.0.0.5:6379")
    if host in ("127.0.0.1", "localhost"):
        _stay_on_loopback()
    try:
        socket.create_connection((host, int(port_s)), timeout=5).close()
    except OSError as exc:
        raise UsageError(f"--address {address}: no Ray cluster answers there ({exc.strerror or exc}): start one with "
                         f"`ray start --head --port={port_s}`, or check the address") from None


def _refresh_ray_config() -> None:
    """Make an already-imported Ray see a changed RAY_AUTH_MODE."""
    import sys

    if "ray" in sys.modules:
        try:
            from ray._raylet import Config

            Config.initialize("")
        except Exception:
            pass


def _token_available() -> bool:
    """A Ray auth token where Ray looks for one: RAY_AUTH_TOKEN, RAY_AUTH_TOKEN_PATH or ~/.ray/auth_token."""
    if os.environ.get("RAY_AUTH_TOKEN"):
        return True
    path = os.environ.get("RAY_AUTH_TOKEN_PATH") or str(Path.home() / ".ray" / "auth_token")
    return Path(path).is_file()


def _init_ray(address: Optional[str], cpus: Optional[int], gpus: Optional[float]) -> bool:
    """Join ``address`` or start a local Ray quietly; True when this call started it."""
    import ray

    if ray.is_initialized():
        return False
    kwargs: dict[str, Any] = dict(include_dashboard=False, log_to_driver=False, logging_level=logging.ERROR,
                                  configure_logging=True)
    if address:
        try:
            ray.init(address=address, **kwargs)
        except ConnectionError as exc:
            raise UsageError(f"--address {address}: cannot join a Ray cluster there ({str(exc).splitlines()[0]}): "
                             "start one with `ray start --head`, check the address, and give this machine the "
                             "head node's ~/.ray/auth_token (or RAY_AUTH_TOKEN)") from None
        except Exception as exc:
            if "auth" in type(exc).__name__.lower() or "token" in str(exc).lower():
                raise UsageError(f"--address {address}: the cluster refused this process ({type(exc).__name__}): "
                                 "copy the head node's ~/.ray/auth_token here, or set RAY_AUTH_TOKEN") from None
            raise
        return True
    _stay_on_loopback()
    ray.init(num_cpus=cpus, num_gpus=gpus, **kwargs)
    return True


def _stay_on_loopback() -> None:
    """A local Ray instance listens on 127.0.0.1, not on the machine's interface.

    Ray reads RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0 when it is imported; the module
    constant is set too, for a Ray imported before this call.
    """
    os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")
    if os.environ["RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"] == "0":
        try:
            import ray._private.ray_constants as constants

            constants.ENABLE_RAY_CLUSTER = False
        except (ImportError, AttributeError):
            pass


def run_ray(
    *,
    study: Any,
    dists: dict[str, Any],
    make_config: Callable[[Any], dict[str, Any]],
    task: Any,
    steps: int,
    n_trials: int,
    prune: bool,
    grace_period: int,
    reduction_factor: int,
    cpus_per_trial: float,
    gpus_per_trial: float,
    max_concurrent: Optional[int],
    max_failures: int,
    address: Optional[str],
    storage_path: Optional[str],
    out_dir: Optional[Path],
    on_end: Callable[[Any, str], None],
    num_cpus: Optional[int] = None,
    num_gpus: Optional[float] = None,
) -> None:
    """Run ``n_trials`` trials of ``study`` on Ray Tune; every outcome lands in the study."""
    if address and "RAY_AUTH_MODE" not in os.environ and _token_available():
        # Ray turns token authentication on by itself only for address "auto"; a
        # cluster named by HOST:PORT wants the same token, so use it when there is one.
        # (Ray reads the mode when it is imported, hence before the import.)
        os.environ["RAY_AUTH_MODE"] = "token"
        _refresh_ray_config()
    if not ray_available():
        raise UsageError("--backend ray needs Ray Tune: pip install 'tunekit[ray]' (or 'ray[tune]')")
    # Tune's per-trial CSV/JSON/TensorBoard loggers and its console tables are noise
    # next to the study and our own files, and cost time on short trials.
    os.environ.setdefault("TUNE_DISABLE_AUTO_CALLBACK_LOGGERS", "1")
    # A trial's last report may carry no loss (a divergence, an error): by design, so
    # the scheduler ignores it. Tune would otherwise reject it.
    os.environ["TUNE_DISABLE_STRICT_METRIC_CHECKING"] = "1"
    # Tune's newer console output prints an experiment header even at verbose=0; the older one is silent.
    os.environ["RAY_AIR_NEW_OUTPUT"] = "0"
    os.environ.setdefault("TUNE_WARN_EXCESSIVE_EXPERIMENT_CHECKPOINT_SYNC_THRESHOLD_S", "1000")
    import ray
    from ray import tune
    from ray.tune.schedulers import ASHAScheduler, FIFOScheduler

    started = _init_ray(address, num_cpus, num_gpus)
    book: dict[int, Any] = {}
    try:
        if max_concurrent is None:
            # Tune lets a custom searcher keep only one trial pending unless a limit is
            # given, which starts trials one at a time: give the limit the cluster allows.
            max_concurrent = _fits(ray.cluster_resources(), cpus_per_trial, gpus_per_trial)
        searcher = _StudySearcher(study, dists, make_config, book)
        scheduler = (ASHAScheduler(time_attr="updates", metric="loss", mode="min", max_t=steps,
                                   grace_period=grace_period, reduction_factor=reduction_factor)
                     if prune else FIFOScheduler())
        if prune:
            restore_rungs(scheduler, study)
        resources = {"cpu": cpus_per_trial, "gpu": gpus_per_trial}
        trainable: Any = _trainable
        if not isinstance(task, str):
            trainable = tune.with_parameters(_trainable, task=task)  # shipped once through the object store
        root = Path(storage_path) if storage_path else (out_dir / "ray" if out_dir is not None else None)
        tuner = tune.Tuner(
            tune.with_resources(trainable, resources),
            param_space={"task": task if isinstance(task, str) else None, "cpus": cpus_per_trial},
            tune_config=tune.TuneConfig(search_alg=searcher, scheduler=scheduler,
                                        num_samples=n_trials, max_concurrent_trials=max_concurrent,
                                        reuse_actors=True),
            run_config=tune.RunConfig(
                name=study.study_name, storage_path=str(root.resolve()) if root is not None else None, verbose=0,
                failure_config=tune.FailureConfig(max_failures=max_failures),
                checkpoint_config=tune.CheckpointConfig(checkpoint_at_end=False),
                callbacks=[_make_recorder(study, book, on_end)],
                log_to_file=True),
        )
        import warnings

        with warnings.catch_warnings():
            # Optuna warns that ask-and-tell trials send no heartbeat: the driver here is
            # one process, and it marks its unfinished trials itself (below).
            warnings.filterwarnings("ignore", message=".*Heartbeat.*")
            tuner.fit()
        if book:
            # Tune ends quietly on Ctrl-C; the caller must know, as with the local backend.
            raise KeyboardInterrupt("search interrupted: run it again with --resume")
    finally:
        # Trials asked but never told (Ctrl-C, a crash) are marked for --resume to run again.
        from .search import INTERRUPTED

        for ot in list(book.values()):
            try:
                ot.set_user_attr("error", INTERRUPTED)
                study.tell(ot, state=_states().FAIL)
            except Exception:
                pass
        book.clear()
        if started:
            if out_dir is not None:
                _copy_ray_logs(out_dir)
            ray.shutdown()


def restore_rungs(scheduler: Any, study: Any) -> int:
    """Give a new ASHAScheduler the rung values of the study's finished trials.

    A resumed search (or one joining a study) then prunes against everything
    already run, as Optuna's own pruner does, instead of promoting the first
    new trials past empty rungs. Returns the number of values restored.
    """
    brackets = getattr(scheduler, "_brackets", None)
    if not brackets:
        return 0
    done = (_states().COMPLETE, _states().PRUNED)
    n = 0
    for t in study.get_trials(deepcopy=False, states=done):
        values = sorted(t.intermediate_values.items())
        if t.state == _states().COMPLETE and t.value is not None:
            values.append((int(t.user_attrs.get("updates") or 0), float(t.value)))
        for bracket in brackets:
            for milestone, recorded in bracket._rungs:
                # What ASHA would have recorded: the first report at or past the rung, as a reward.
                hit = next((v for step, v in values if step >= milestone), None)
                if hit is not None and math.isfinite(hit):
                    recorded[f"study-trial-{t.number}"] = -float(hit)
                    n += 1
    return n


def _fits(resources: dict[str, float], cpus: float, gpus: float) -> int:
    """How many trials the cluster's resources hold at once."""
    n = []
    if cpus > 0:
        n.append(int(resources.get("CPU", 0) // cpus + 1e-9))
    if gpus > 0:
        n.append(int(resources.get("GPU", 0) / gpus + 1e-9))
    if not n or min(n) < 1:
        have = f"{resources.get('CPU', 0):g} CPUs and {resources.get('GPU', 0):g} GPUs"
        raise UsageError(f"a trial asks for {cpus:g} CPUs and {gpus:g} GPUs but the Ray cluster has {have}: "
                         "lower --cpus-per-trial/--gpus-per-trial")
    return min(n)


def _copy_ray_logs(out_dir: Path) -> None:
    """Ray's own logs go with the results (out/ray_logs), not to the console."""
    try:
        import ray

        session = Path(ray._private.worker._global_node.get_session_dir_path())  # type: ignore[attr-defined]
        src = session / "logs"
        if src.is_dir():
            dst = out_dir / "ray_logs"
            shutil.rmtree(dst, ignore_errors=True)
            shutil.copytree(src, dst, ignore=shutil.ignore_patterns("*.sock", "events"), dirs_exist_ok=True)
    except Exception:
        pass
