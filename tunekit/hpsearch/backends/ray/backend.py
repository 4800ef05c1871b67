"""The Ray Tune backend: the same study, its trials placed and run by a Tuner.

Ray places and runs the trials (CPUs, GPUs, machines, retries); Optuna keeps
the study and decides early stopping, as on the local backend:

- ``StudySearcher`` asks the study for each trial's params (the enqueued seed
  trial and design first, then TPE) and hands the worker its :class:`TrialConfig`;
- ``PrunerScheduler`` reports each evaluation to the study and stops a trial
  when the study's pruner (successive halving on samples) says so;
- ``Recorder`` turns each trial's end into an :class:`Outcome` and records it
  through :func:`tunekit.hpsearch.trial.record`, the path the local backend uses.

Ray's own ``OptunaSearch`` reports a stopped trial as COMPLETE with its partial
value, which mixes short and full runs in TPE's model; here it is PRUNED.
"""

from __future__ import annotations

# Imported where used, not at the top: optuna, ray, torch; importing this module does not pay for them.
import dataclasses
import math
import os
import time
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional

from tunekit.errors import SetupError, UsageError
from tunekit.hpsearch.backends.base import Work
from tunekit.hpsearch.backends.ray.cluster import (check_address, check_workers_load, copy_ray_logs, init_ray, prepare_env,
                                                   ray_available, tune_logs_quiet)
from tunekit.hpsearch.keep import Keeper, settle
from tunekit.hpsearch.keys import ATTEMPTS, REASON
from tunekit.hpsearch.plan import Plan, TrialConfig, split_batch
from tunekit.hpsearch.settings import SearchSettings
from tunekit.hpsearch.study import finished_count, note_interrupted
from tunekit.hpsearch.trial import (INTERRUPTED, Outcome, RungBranches, evaluation_reporter, final_step, keep_weights,
                                   outcome_of, record, run_config, start_attrs)
from tunekit.objective import objective_of
from tunekit.training.memory import collecting_young, free_memory

__all__ = ["RayBackend", "run_ray", "check_packing", "fits", "largest_micro_batch"]

DONE_KEY = "tunekit_done"    # the trial's last report: how it ended
ERROR_KEY = "tunekit_error"  # the trial's own error text (Ray's error files may lag behind callbacks)


def check_packing(gpus_per_trial: float, need_bytes: float, gpu_bytes: float, what: str) -> None:
    """Refuse fractional GPUs that pack more trials on a GPU than its memory holds.

    ``need_bytes`` is one trial's predicted peak (from the probe's memory
    model), ``gpu_bytes`` the usable memory of one GPU.
    """
    if not 0 < gpus_per_trial < 1:
        return
    per_gpu = int(math.floor(1 / gpus_per_trial + 1e-9))
    if per_gpu * need_bytes > gpu_bytes:
        n_fit = max(1, int(gpu_bytes // max(need_bytes, 1)))
        gib = 2**30
        raise UsageError(
            f"gpus_per_trial={gpus_per_trial:g} packs {per_gpu} trials on a GPU, but one trial needs up to "
            f"{need_bytes / gib:.2f} GiB ({what}) and a GPU has {gpu_bytes / gib:.2f} GiB usable: "
            f"use gpus_per_trial={1 / n_fit:g} or more")


def fits(resources: dict[str, float], cpus: float, gpus: float) -> int:
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


# --- the trainable: runs on a Ray worker ------------------------------------------

_TASK_CACHE: dict[str, Any] = {}


def trainable(config: dict[str, Any], task: Any = None) -> None:
    """One trial: train through the shared step, report each evaluation (in samples seen) to Tune."""
    with collecting_young():  # the collection after the trial walks what the trial made, not the worker
        _trial(config, task)


def _trial(config: dict[str, Any], task: Any) -> None:
    import ray
    import torch
    from ray import tune

    if config.get("config_error"):
        _report({ERROR_KEY: config["config_error"], DONE_KEY: "FAIL"})
        return
    torch.set_num_threads(max(1, int(float(config.get("cpus") or 1))))
    gpu_ids = [str(g) for g in ray.get_gpu_ids()]
    train_cfg = dict(config["train"])
    if train_cfg.get("device", "auto") == "auto":
        # Ray sets CUDA_VISIBLE_DEVICES to this trial's GPUs, so "cuda" is one of
        # them; without a GPU, never take one on our own.
        train_cfg["device"] = "cuda" if gpu_ids and torch.cuda.is_available() else "cpu"
    cfg = TrialConfig(train_cfg, config.get("task_cfg") or {}, int(config.get("eval_samples") or 0),
                      config.get("objective", "loss"), config.get("direction", "minimize"),
                      rung_cooldown=config.get("rung_cooldown"), branch_evals=tuple(config.get("branch_evals") or ()))
    worker = {"node": ray.util.get_node_ip_address(), "cluster": ray.get_runtime_context().gcs_address,
              "pid": os.getpid(), "gpu_ids": gpu_ids, "device": train_cfg["device"], "started": time.time()}
    curve: list[list[float]] = []
    last: dict[str, float] = {}
    branches = RungBranches()
    value_of = evaluation_reporter(cfg, curve, last, branches)
    label = objective_of(cfg).label
    t0 = time.perf_counter()

    def report(step: int, metrics: dict[str, float]) -> None:
        value = value_of(step, metrics)
        if step < int(train_cfg["max_steps"]):  # the last evaluation ends the trial, below
            tune.report({"value": _finite(value, cfg.direction), "samples": cfg.reported(step),
                         "seen": curve[-1][0] + branches.samples, "updates": step + branches.updates,
                         "val_loss": last.get("loss"), "label": label, "curve": curve, "worker": worker,
                         "rung_values": branches.values, "branch_samples": branches.samples})

    keeper = Keeper(**config["keep"]) if config.get("keep") else None
    weights: dict[str, Any] = {}  # the trained model's state_dict (Keeper.snapshot), where weights are kept
    try:
        # A Task object comes as a reference, fetched here: a module it needs that this worker cannot
        # import is the trial's own error, with its text, not Ray's failure to start the trial.
        task = ray.get(task[0]) if isinstance(task, list) else task
        result = run_config(task if task is not None else config["task"], cfg, report, cache=_TASK_CACHE,
                            trained=weights if keeper is not None else None)
    except SetupError as exc:
        # The task cannot train whatever the params: no retry; the driver stops the search on it.
        _report({ERROR_KEY: f"SetupError: {exc}", DONE_KEY: "FAIL", "curve": curve, "worker": worker})
        return
    except Exception as exc:
        # Ray hands callbacks the error only through files it may not have written yet:
        # send the text as a last report, then fail (Ray retries up to --max-failures).
        _report({ERROR_KEY: f"{type(exc).__name__}: {exc}"[:2000], "curve": curve, "worker": worker})
        raise
    outcome = outcome_of(result, curve, time.perf_counter() - t0, final_step(cfg), objective_of(cfg), branches)
    # Written in the run's storage; the driver, which holds the study, removes those the best makes surplus.
    keep_weights(keeper, weights, outcome, int(config["number"]), cfg)
    weights.clear()
    free_memory()  # the worker is reused for the next trial
    worker["finished"] = time.time()
    tune.report({DONE_KEY: outcome.state, "value": outcome.value, "samples": outcome.samples,
                 "updates": outcome.updates, "seconds": outcome.seconds, "error": outcome.error,
                 "diverged": outcome.diverged, "curve": curve, "worker": worker, "initial_loss": outcome.initial_loss,
                 "final_step": outcome.final_step, "val_loss": outcome.val_loss, "weights": outcome.weights,
                 "rung_values": outcome.rung_values, "branch_samples": outcome.branch_samples})


def _finite(value: float, direction: str = "minimize") -> float:
    """A value the scheduler can compare: a non-finite one is the worst, and arithmetic stays finite."""
    value = float(value)
    return value if math.isfinite(value) else (1e300 if direction == "minimize" else -1e300)


def _report(metrics: dict[str, Any]) -> None:
    from ray import tune

    try:
        tune.report(metrics)
    except RuntimeError:  # outside a Tune session: Ray's error files remain
        pass


# --- driver side --------------------------------------------------------------------


@dataclass
class Ledger:
    """The driver's account of this run's Optuna trials, shared by the searcher and the recorder.

    ``book`` holds the trials asked and not yet told. Tune retries a trial whose actor dies
    within ``max_failures``, but gives up on one that fails while it is being (re)started,
    a second failure of the same dead actor included, though its failures are under the limit.
    Such a trial goes to ``again`` and runs as a new Tune trial, the same Optuna trial:
    the requested count finishes, and each trial is recorded once.
    """

    n_trials: int
    max_failures: int = 0
    book: dict[int, Any] = field(default_factory=dict)
    configs: dict[int, dict[str, Any]] = field(default_factory=dict)
    again: list[int] = field(default_factory=list)
    spent: dict[int, int] = field(default_factory=dict)  # failures in earlier Tune trials of the same number
    asked: int = 0
    setup_error: Optional[str] = None  # a trial's SetupError: the task cannot train, and the search stops

    def failures(self, trial: Any) -> int:
        """Failures of this Optuna trial so far, over all the Tune trials that ran it."""
        return self.spent.get(trial.config.get("number"), 0) + _tune_failures(trial)

    def run_again(self, trial: Any) -> bool:
        """Queue a trial Tune gave up on within ``max_failures``; False when it has had its retries."""
        number, failed = trial.config.get("number"), self.failures(trial)
        if number not in self.book or failed > self.max_failures:  # its retries, over all its Tune trials, are spent
            return False
        self.spent[number] = failed  # the new Tune trial counts its own failures from 0
        self.again.append(number)
        return True


def _tune_failures(trial: Any) -> int:
    """How often Tune's trial has failed (its own count, from 0 for each Tune trial)."""
    return int(getattr(trial, "num_failures", 0) or 0)


def _searcher(study: Any, dists: dict[str, Any], make_config: Callable[[dict[str, Any], dict[str, Any]], TrialConfig],
              ledger: Ledger, out_of_time: Callable[[], bool] = lambda: False) -> Any:
    from ray.tune.search import Searcher

    class StudySearcher(Searcher):
        """A Tune searcher that asks the Optuna study: enqueued trials first, then its sampler."""

        def suggest(self, trial_id: str) -> Optional[dict[str, Any]]:
            if ledger.setup_error is not None:
                return Searcher.FINISHED  # every trial would fail the same way
            if ledger.again:
                return ledger.configs[ledger.again.pop(0)]
            if ledger.asked >= ledger.n_trials or out_of_time():
                # Done once nothing runs that could still need another go (the device time spent:
                # no new trial, and those running finish).
                return None if ledger.book else Searcher.FINISHED
            ledger.asked += 1
            trial = study.ask(fixed_distributions=dists)
            ledger.book[trial.number] = trial
            ledger.configs[trial.number] = config = self._config(trial)
            return config

        @staticmethod
        def _config(trial: Any) -> dict[str, Any]:
            try:
                cfg = make_config(dict(trial.params), trial.user_attrs)  # a confirmation run's seed is its own
            except UsageError as exc:
                # A config that cannot run (no micro-batch fits) fails as its own trial.
                return {"number": trial.number, "config_error": f"{type(exc).__name__}: {exc}"}
            for key, value in start_attrs(cfg).items():
                trial.set_user_attr(key, value)
            return {"number": trial.number, "train": cfg.train, "task_cfg": cfg.task, "eval_samples": cfg.eval_samples,
                    "objective": cfg.objective, "direction": cfg.direction, "rung_cooldown": cfg.rung_cooldown,
                    "branch_evals": list(cfg.branch_evals)}

        def on_trial_complete(self, trial_id: str, result: Optional[dict[str, Any]] = None, error: bool = False) -> None:
            pass  # the recorder tells the study, with the error text Ray gives only to callbacks

    return StudySearcher(metric="value", mode="min" if study.direction.name == "MINIMIZE" else "max")


def _scheduler(book: dict[int, Any], prune: bool) -> Any:
    from ray.tune.schedulers import FIFOScheduler, TrialScheduler

    class PrunerScheduler(FIFOScheduler):
        """Each evaluation goes to the study; the study's pruner stops the trial or lets it go on."""

        def on_trial_result(self, tune_controller: Any, trial: Any, result: dict[str, Any]) -> str:
            ot = book.get(trial.config.get("number"))
            if ot is None or "value" not in result or DONE_KEY in result:
                return TrialScheduler.CONTINUE
            ot.report(float(result["value"]), int(result["samples"]))
            return TrialScheduler.STOP if prune and ot.should_prune() else TrialScheduler.CONTINUE

    return PrunerScheduler()


def _recorder(study: Any, ledger: Ledger, on_end: Callable[[str], None], keeper: Optional[Keeper] = None) -> Any:
    from ray.tune import Callback

    book = ledger.book

    class Recorder(Callback):
        """Each trial's end, as an Outcome recorded in the study."""

        def on_trial_complete(self, iteration: int, trials: list, trial: Any, **info: Any) -> None:
            ot = book.pop(trial.config.get("number"), None)
            if ot is not None:
                outcome = _outcome(trial.last_result or {})
                setup = (outcome.error or "").startswith("SetupError: ")
                if setup and ledger.setup_error is None:
                    ledger.setup_error = outcome.error[len("SetupError: "):]  # type: ignore[index]
                elif ledger.setup_error is not None and not (trial.last_result or {}).get(DONE_KEY):
                    outcome.state, outcome.error = "FAIL", f"stopped with the search: {ledger.setup_error}"
                    setup = True
                self._end(ot, outcome)
                if setup:
                    note_interrupted(study, [ot.number])  # once the task is mended, --resume runs it

        def on_trial_recover(self, iteration: int, trials: list, trial: Any, **info: Any) -> None:
            # A trial Tune runs again (its node died, or it raised, within --max-failures): the same
            # Optuna trial, recorded once when it ends; its attempts are noted meanwhile.
            ot = book.get(trial.config.get("number"))
            if ot is not None:
                ot.set_user_attr(ATTEMPTS, ledger.failures(trial) + 1)

        def on_trial_error(self, iteration: int, trials: list, trial: Any, **info: Any) -> None:
            number = trial.config.get("number")
            if ledger.run_again(trial):
                book[number].set_user_attr(ATTEMPTS, ledger.spent[number] + 1)
                return
            ot = book.pop(number, None)
            if ot is None:
                return
            last = trial.last_result or {}
            outcome = _outcome(last)
            outcome.state, outcome.error = "FAIL", last.get(ERROR_KEY) or _error_text(trial)
            ot.set_user_attr(ATTEMPTS, max(1, ledger.failures(trial)))
            self._end(ot, outcome)

        @staticmethod
        def _end(ot: Any, outcome: Outcome) -> None:
            record(study, ot, outcome)
            settle(study, keeper)
            on_end(outcome.state)

    return Recorder()


def _outcome(last: dict[str, Any]) -> Outcome:
    """A trial's end from its last report: its own verdict, else stopped by the scheduler (PRUNED)."""
    curve = [list(p) for p in last.get("curve") or []]
    seen = int(last.get("seen") or last.get("samples") or (curve[-1][0] if curve else 0))
    state = last.get(DONE_KEY) or "PRUNED"
    reason = (f"pruned at {int(last['samples'])} samples with {last.get('label', 'value')} {float(last['value']):.4f}"
              if state == "PRUNED" and "samples" in last and "value" in last else None)
    # A trial stopped by the scheduler reports no final value: its value is in the study's
    # intermediate values, and its updates are those of its last report.
    value = last.get("value") if last.get(DONE_KEY) else None
    return Outcome(state, value, curve, seen, int(last.get("updates") or 0),
                   float(last.get("seconds") or last.get("time_total_s") or 0.0),
                   last.get("error") or last.get(ERROR_KEY), bool(last.get("diverged")), last.get("worker"),
                   last.get("initial_loss"), last.get("final_step"), reason, last.get("val_loss"),
                   last.get("weights") if state == "COMPLETE" else None,
                   [list(p) for p in last.get("rung_values") or []], int(last.get("branch_samples") or 0))


def _error_text(trial: Any) -> str:
    """The root exception of a failed Ray trial, as 'Type: message'."""
    text = ""
    try:
        text = trial.get_error() or ""
    except (AttributeError, OSError):
        pass
    lines = [ln for ln in str(text).strip().splitlines() if ln.strip()]
    return lines[-1].strip() if lines else "trial failed (no error recorded by Ray)"


class RayBackend:
    """Ray Tune places and runs the trials (see the module's docstring)."""

    concurrent = True  # trials run at once

    def check(self, settings: SearchSettings) -> None:
        """Ray Tune is installed, and an address given answers: before the probes run."""
        if not ray_available():
            raise UsageError("backend=ray needs Ray Tune: pip install 'tunekit[ray]' (or 'ray[tune]')")
        if settings.backend.address:
            check_address(settings.backend.address)  # a wrong address fails at once

    def check_plan(self, settings: SearchSettings, plan: Plan, dists: dict[str, Any], probe: Optional[Any]) -> None:
        """Fractional GPUs must hold the trials they pack, by the probe's memory model."""
        gpus = settings.backend.gpus_per_trial
        if not (0 < gpus < 1 and probe is not None and str(probe.device).startswith("cuda")):
            return
        micro = largest_micro_batch(plan, dists)
        check_packing(gpus, probe.predicted_peak(micro), probe.usable_bytes,
                      f"micro-batch {micro}, by the probe's memory model")

    def run(self, work: Work) -> None:
        """The search's trials in one Tuner, then, once they are done, the confirmation runs they queue in
        another (:meth:`Work.goal` queues them; the searcher takes queued trials first)."""
        while not work.out_of_time():
            finished = finished_count(work.study)
            n_trials = work.goal() - finished
            if n_trials <= 0:
                return
            run_ray(work, n_trials)
            if finished_count(work.study) == finished:  # nothing ended (every trial stopped early): no loop
                return


def largest_micro_batch(plan: Plan, dists: dict[str, Any]) -> int:
    """The largest micro-batch any trial of the space runs."""
    if "batch" in dists:
        return max(split_batch(int(b), plan.max_micro)[0] for b in dists["batch"].choices)
    if "batch_size" in dists:
        d = dists["batch_size"]
        return int(max(d.choices) if hasattr(d, "choices") else d.high)
    return int(plan.fixed.get("batch_size") or plan.task_batch)


def run_ray(work: Work, n_trials: int) -> None:
    """Run ``n_trials`` trials of ``work.study`` on Ray Tune; every outcome lands in the study."""
    s, study, out_dir = work.settings.backend, work.study, work.settings.out
    address, max_failures, max_concurrent = s.address, s.max_failures, s.max_concurrent
    cpus_per_trial, gpus_per_trial = s.cpus_per_trial, s.gpus_per_trial
    num_cpus, num_gpus = (s.ray_init or {}).get("num_cpus"), (s.ray_init or {}).get("num_gpus")
    prepare_env(address)
    if not ray_available():
        raise UsageError("backend=ray needs Ray Tune: pip install 'tunekit[ray]' (or 'ray[tune]')")
    import ray
    from ray import tune

    started = init_ray(address, num_cpus, num_gpus)
    ledger = Ledger(n_trials, max_failures)
    book = ledger.book
    try:
        if max_concurrent is None:
            # Tune lets a custom searcher keep only one trial pending unless a limit is
            # given, which starts trials one at a time: give the limit the cluster allows.
            max_concurrent = fits(ray.cluster_resources(), cpus_per_trial, gpus_per_trial)
        run_fn: Any = trainable
        shipped: Any = work.task
        if not isinstance(work.task, str):
            shipped = [ray.put(work.task)]  # shipped once through the object store, fetched by each trial
            run_fn = tune.with_parameters(trainable, task=shipped)
        check_workers_load(shipped)
        root = Path(s.storage_path) if s.storage_path else (out_dir / "ray" if out_dir is not None else None)
        if root is None:
            import tempfile

            root = Path(tempfile.mkdtemp(prefix="tunekit-ray-"))  # never ~/ray_results
        tuner = tune.Tuner(
            tune.with_resources(run_fn, {"cpu": cpus_per_trial, "gpu": gpus_per_trial}),
            param_space={"task": work.task if isinstance(work.task, str) else None, "cpus": cpus_per_trial,
                         "keep": dataclasses.asdict(work.keeper) if work.keeper is not None else None},
            tune_config=tune.TuneConfig(search_alg=_searcher(study, work.dists, work.config, ledger, work.out_of_time),
                                        scheduler=_scheduler(book, work.settings.prune),
                                        num_samples=n_trials * (1 + max_failures),  # room for trials run again
                                        max_concurrent_trials=max_concurrent, reuse_actors=True),
            run_config=tune.RunConfig(
                name=study.study_name, storage_path=str(root.resolve()), verbose=0,
                failure_config=tune.FailureConfig(max_failures=max_failures),
                checkpoint_config=tune.CheckpointConfig(checkpoint_at_end=False),
                callbacks=[_recorder(study, ledger, work.on_end, work.keeper)], log_to_file=True, stop=_setup_stopper(ledger)),
        )
        with warnings.catch_warnings(), tune_logs_quiet():
            # Optuna warns that ask-and-tell trials send no heartbeat: the driver here is
            # one process, and it marks its unfinished trials itself (below).
            warnings.filterwarnings("ignore", message=".*[Hh]eartbeat.*")
            tuner.fit()
        if ledger.setup_error is not None:
            raise SetupError(ledger.setup_error)
        if book:
            # Tune ends quietly on Ctrl-C; the caller must know, as with the local backend.
            raise KeyboardInterrupt("search interrupted: run it again with --resume")
    finally:
        _fail_unfinished(study, book)
        if started:
            if out_dir is not None:
                copy_ray_logs(out_dir)
            ray.shutdown()


def _setup_stopper(ledger: Ledger) -> Any:
    """A Tune stopper that ends every trial once one has met a SetupError."""
    from ray.tune.stopper import Stopper

    class SetupStop(Stopper):
        def __call__(self, trial_id: str, result: dict[str, Any]) -> bool:
            return ledger.setup_error is not None

        def stop_all(self) -> bool:
            return ledger.setup_error is not None

    return SetupStop()


def _fail_unfinished(study: Any, book: dict[int, Any]) -> None:
    """Trials asked but never told (Ctrl-C, a crash) are failed and noted for --resume to run again."""
    import optuna

    numbers = list(book)
    for ot in book.values():
        try:
            ot.set_user_attr(REASON, INTERRUPTED)  # on the trial, for dashboards and reports
        except optuna.exceptions.UpdateFinishedTrialError:
            pass  # it finished meanwhile: the tell below leaves it as it is
        study.tell(ot, state=optuna.trial.TrialState.FAIL, skip_if_finished=True)
    if numbers:
        note_interrupted(study, numbers)
    book.clear()
