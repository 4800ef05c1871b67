"""``tunekit.search``: a seeded Optuna search with ASHA early stopping, through the shared step.

1. The probes the space needs run first (or their saved JSON is used): the LR
   range test bounds the LR, the batch-size probe gives the effective batches
   that fit near the critical batch.
2. The seed configuration (the suggested LR, the recommended batch) is
   enqueued as the first trial.
3. Trials train through :func:`tunekit.train`, reporting validation loss at
   each evaluation; Optuna's SuccessiveHalvingPruner (asynchronous successive
   halving, ASHA) stops the weak ones, which are recorded as PRUNED, never as
   complete. A diverged or failing trial is recorded as FAIL with its error.
4. The study lives in an Optuna storage (SQLite in the output directory by
   default), so a search can be resumed and shared between processes.
"""

from __future__ import annotations

import csv
import json
import math
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional

import numpy as np

from .errors import UsageError, check_int
from .results import Result
from .loading import load_task
from .space import SearchSpace, load_space, lr_bounds_from_curve
from .task import Task
from .train import TrainConfig, train

__all__ = ["search", "SearchResult", "make_storage"]


INTERRUPTED = "interrupted; re-run on --resume"


class TrialDiverged(Exception):
    """A trial whose loss became non-finite (recorded as FAIL with diverged=True)."""


@dataclass
class SearchResult(Result):
    study_name: str
    storage: str
    space: str
    direction: str
    best_value: Optional[float]
    best_params: dict[str, Any]
    best_config: dict[str, Any]
    trials: list[dict[str, Any]]
    seed_params: dict[str, Any]
    distributions: dict[str, str]
    probe_updates: int = 0
    seconds: float = 0.0
    lr_find: Optional[dict[str, Any]] = None
    probe: Optional[dict[str, Any]] = None

    @property
    def compute(self) -> int:
        """Optimizer updates spent: every trial's, plus the probes'."""
        return self.probe_updates + sum(int(t.get("updates") or 0) for t in self.trials)

    def write_csv(self, path: str | Path) -> None:
        keys = sorted({k for t in self.trials for k in t.get("params", {})})
        with open(path, "w", newline="") as f:
            w = csv.writer(f)
            w.writerow(["number", "state", "value", "updates", "seconds", "diverged", "error", *keys])
            for t in self.trials:
                w.writerow([t["number"], t["state"], t["value"], t.get("updates"), t.get("seconds"),
                            t.get("diverged", False), t.get("error", ""), *[t["params"].get(k) for k in keys]])

    # --- plots: each takes ax=None and returns it ---------------------------------
    def plot_best(self, ax: Any = None) -> Any:
        """Best value so far against compute spent (optimizer updates, probes included)."""
        from .plotting import new_axes

        ax = new_axes(ax)
        spent, best, xs, ys = self.probe_updates, math.inf, [], []
        for t in sorted(self.trials, key=lambda t: t.get("finished") or 0):
            spent += int(t.get("updates") or 0)
            if t["state"] == "COMPLETE" and t["value"] is not None:
                best = min(best, t["value"])
            if math.isfinite(best):
                xs.append(spent)
                ys.append(best)
        if self.probe_updates:
            ax.axvline(self.probe_updates, color="0.6", ls=":", label="probes' cost")
        ax.step(xs, ys, where="post", color="C3", label="best so far")
        ax.set_xlabel("optimizer updates spent")
        ax.set_ylabel("best validation loss")
        ax.legend(fontsize="small")
        return ax

    def plot_curves(self, ax: Any = None) -> Any:
        """Validation curves of every trial; pruned ones faded, the best one bold."""
        from .plotting import new_axes

        ax = new_axes(ax)
        best = min((t for t in self.trials if t["state"] == "COMPLETE" and t["value"] is not None),
                   key=lambda t: t["value"], default=None)
        for t in self.trials:
            curve = t.get("curve") or []
            if not curve:
                continue
            xs, ys = zip(*curve)
            if t is best:
                ax.plot(xs, ys, "o-", color="C3", lw=2.2, ms=3, label=f"best (trial {t['number']})", zorder=3)
            elif t["state"] == "PRUNED":
                ax.plot(xs, ys, "o-", color="0.5", lw=0.8, ms=3, alpha=0.4)
            else:
                ax.plot(xs, ys, "o-", color="C0", lw=1.0, ms=3, alpha=0.8)
        ax.plot([], [], "o-", color="C0", label="complete")
        ax.plot([], [], "o-", color="0.5", alpha=0.4, label="pruned")
        ax.set_yscale("log")
        ax.set_xlabel("optimizer update")
        ax.set_ylabel("validation loss")
        ax.legend(fontsize="small")
        return ax

    def plot_lr(self, ax: Any = None) -> Any:
        """Final (or last) validation loss against the trial's LR."""
        from .plotting import new_axes

        ax = new_axes(ax)
        for state, style in (("COMPLETE", dict(color="C0", label="complete")), ("PRUNED", dict(color="0.6", label="pruned (last value)")),
                             ("FAIL", dict(color="C3", marker="x", label="diverged/failed"))):
            pts = [(t["config"]["lr"], (t["curve"][-1][1] if t.get("curve") else None)) for t in self.trials
                   if t["state"] == state and t.get("config", {}).get("lr")]
            if state == "FAIL":
                top = max([p[1] for p in pts if p[1] is not None] + [t["value"] for t in self.trials if t["value"] is not None] + [1.0])
                pts = [(lr, top) for lr, _ in pts]
            pts = [p for p in pts if p[1] is not None]
            if pts:
                ax.scatter(*zip(*pts), **style)  # type: ignore[arg-type]
        ax.set_xscale("log")
        ax.set_yscale("log")
        from matplotlib.ticker import NullFormatter

        ax.xaxis.set_minor_formatter(NullFormatter())
        ax.set_xlabel("learning rate (as trained)")
        ax.set_ylabel("validation loss")
        ax.legend(fontsize="small")
        return ax

    def importances(self) -> dict[str, float]:
        """Optuna's parameter importances over the completed trials (empty with fewer than 3)."""
        import optuna

        done = [t for t in self.trials if t["state"] == "COMPLETE" and t["value"] is not None]
        names = sorted({k for t in done for k in t["params"]})
        multi = [n for n in names if len({json.dumps(t["params"].get(n)) for t in done}) > 1]
        if len(done) < 3 or not multi:
            return {}
        study = optuna.create_study(direction="minimize")
        dists = {n: optuna.distributions.json_to_distribution(self.distributions[n]) for n in multi}
        for t in done:
            if all(n in t["params"] for n in multi):
                study.add_trial(optuna.trial.create_trial(params={n: t["params"][n] for n in multi},
                                                          distributions=dists, value=t["value"]))
        try:
            return dict(optuna.importance.get_param_importances(study))
        except (RuntimeError, ValueError):
            return {}

    def plot_importances(self, ax: Any = None) -> Any:
        from .plotting import new_axes

        ax = new_axes(ax)
        imp = self.importances()
        if imp:
            names = list(imp)[::-1]
            ax.barh(names, [imp[n] for n in names], color="C2")
        else:
            ax.text(0.5, 0.5, "too few completed trials", ha="center", va="center", transform=ax.transAxes)
        ax.set_xlabel("importance (Optuna)")
        return ax

    def plot(self, ax: Any = None) -> Any:
        """All four plots; ``ax`` may be a 2x2 array of Axes. Returns the array."""
        from .plotting import _pyplot

        if ax is None:
            _, ax = _pyplot().subplots(2, 2, figsize=(11, 7.5))
        axes = np.asarray(ax).reshape(2, 2)
        self.plot_best(axes[0, 0])
        self.plot_curves(axes[0, 1])
        self.plot_lr(axes[1, 0])
        self.plot_importances(axes[1, 1])
        axes[0, 0].figure.suptitle(f"search {self.study_name}: best {self.best_value if self.best_value is None else f'{self.best_value:.4f}'}")
        return axes

    def table(self) -> str:
        counts: dict[str, int] = {}
        for t in self.trials:
            counts[t["state"]] = counts.get(t["state"], 0) + 1
        lines = [f"{'trial':>5} {'state':>9} {'value':>9} {'updates':>8}  params"]
        for t in sorted(self.trials, key=lambda t: (t["value"] is None, t["value"] if t["value"] is not None else 0)):
            val = "" if t["value"] is None else f"{t['value']:.4f}"
            note = " (diverged)" if t.get("diverged") else (f" ({t['error'][:40]})" if t.get("error") else "")
            params = ", ".join(f"{k}={_fmt(v)}" for k, v in sorted(t["params"].items()))
            lines.append(f"{t['number']:>5} {t['state']:>9} {val:>9} {t.get('updates') or 0:>8}  {params}{note}")
        lines.append("trials: " + ", ".join(f"{v} {k.lower()}" for k, v in sorted(counts.items()))
                     + f"; compute {self.compute} updates ({self.probe_updates} in probes)")
        if self.best_value is not None:
            lines.append(f"best value {self.best_value:.4f}: " + ", ".join(f"{k}={_fmt(v)}" for k, v in sorted(self.best_config.items())))
        return "\n".join(lines)


def _fmt(v: Any) -> str:
    return f"{v:.3g}" if isinstance(v, float) else str(v)


def make_storage(url: str | None, out: Path | None) -> Any:
    """An Optuna storage: a SQLAlchemy URL, a journal file (*.log, *.jsonl), or SQLite in ``out``."""
    import optuna

    if url is None:
        if out is None:
            return None
        url = f"sqlite:///{(out / 'study.db').resolve()}"
    if "://" not in url:
        if not url.endswith((".log", ".jsonl", ".journal")):
            raise UsageError(f"storage {url!r} is neither a URL (sqlite:///study.db, postgresql://...) nor a journal file (*.log)")
        from optuna.storages.journal import JournalFileBackend

        if not Path(url).resolve().parent.is_dir():
            raise UsageError(f"storage {url!r}: the folder {str(Path(url).parent)!r} does not exist: create it or give another path")
        try:
            return optuna.storages.JournalStorage(JournalFileBackend(url))
        except OSError as exc:
            raise UsageError(f"storage {url!r} cannot be opened ({exc.strerror}): give a writable path") from None
    try:
        import warnings

        with warnings.catch_warnings():  # heartbeats are "experimental" in Optuna's words
            warnings.simplefilter("ignore")
            # Heartbeats let the other workers of a shared study re-run a trial whose process died.
            return optuna.storages.RDBStorage(
                url, heartbeat_interval=10, grace_period=60,
                heartbeat_stale_trial_callback=optuna.storages.RetryHeartbeatStaleTrialCallback(max_retry=1))
    except (ImportError, ValueError) as exc:
        raise UsageError(f"storage {url!r} cannot be opened: {exc}") from None
    except Exception as exc:  # sqlalchemy's errors, without importing it here
        raise UsageError(f"storage {url!r} cannot be opened: {type(exc).__name__}: {str(exc).splitlines()[0]}") from None


def _trial_dict(t: Any) -> dict[str, Any]:
    ua = t.user_attrs
    return {
        "number": t.number, "state": t.state.name, "value": t.value, "params": dict(t.params),
        "config": ua.get("config", {}), "curve": ua.get("curve", []), "updates": ua.get("updates"),
        "seconds": ua.get("seconds"), "diverged": bool(ua.get("diverged", False)), "error": ua.get("error"),
        **({"worker": ua["worker"]} if "worker" in ua else {}), **({"attempts": ua["attempts"]} if "attempts" in ua else {}),
        "finished": t.datetime_complete.timestamp() if t.datetime_complete else None,
    }


def search(
    task: str | Task = "shapes",
    space: str | SearchSpace = "from_scratch",
    *,
    trials: int = 12,
    max_steps: int | None = None,
    storage: str | None = None,
    study_name: str | None = None,
    resume: bool = False,
    seed: int = 0,
    out: str | Path | None = None,
    lr_find_result: Any = None,
    probe_result: Any = None,
    backend: str = "local",
    sampler: str = "tpe",
    seed_trial: bool = True,
    prune: bool = True,
    reduction_factor: int = 3,
    grace_period: int | None = None,
    eval_every: int | None = None,
    memory_budget: str | None = None,
    device: str = "auto",
    progress: bool = False,
    cpus_per_trial: float = 1,
    gpus_per_trial: float = 0,
    max_concurrent: int | None = None,
    max_failures: int = 0,
    address: str | None = None,
    storage_path: str | None = None,
    ray_init: dict[str, Any] | None = None,
) -> SearchResult:
    """Search a space for the best training configuration of ``task``.

    ``task`` is a spec (``shapes``, ``pkg.mod:fn``, ``file.py:fn``), whose
    function receives the space's ``task.*`` entries, or a :class:`Task`.
    ``trials`` is the total number of finished trials the study should hold,
    so a resumed search runs only what is missing. ``lr_find_result`` and
    ``probe_result`` (results or JSON paths) replace the probes.

    Early stopping is asynchronous successive halving: rungs at
    ``grace_period`` optimizer updates (default: the first evaluation) times
    powers of ``reduction_factor``; the best 1/``reduction_factor`` at a rung go on.

    ``backend="ray"`` runs the trials with Ray Tune (its ASHAScheduler, the
    same study): ``cpus_per_trial``, ``gpus_per_trial`` (0.5 packs two trials
    on a GPU), ``max_concurrent``, ``max_failures`` (retries of a raising
    trial), ``address`` (``auto`` or ``HOST:PORT`` of a running cluster) and
    ``storage_path`` (Tune's trial directories; a shared filesystem for
    several machines). ``ray_init`` passes ``num_cpus``/``num_gpus`` to a
    local Ray instance.
    """
    import optuna

    if backend not in ("local", "ray"):
        raise UsageError(f"backend {backend!r} is unknown: use local or ray")
    if backend == "ray":
        from .ray_backend import ray_available

        if not ray_available():
            raise UsageError("--backend ray needs Ray Tune: pip install 'tunekit[ray]' (or 'ray[tune]')")
        if address:
            from .ray_backend import check_address

            check_address(address)  # before the probes: a wrong address fails at once
    check_int("trials", trials, hint="pass e.g. --trials 12")
    check_int("reduction_factor", reduction_factor, minimum=2, hint="pass e.g. --reduction-factor 3")
    if grace_period is not None:
        check_int("grace_period", grace_period, hint="pass e.g. --grace-period 25")
    check_int("max_failures", max_failures, minimum=0, hint="pass e.g. --max-failures 2")
    if max_concurrent is not None:
        check_int("max_concurrent", max_concurrent, hint="pass e.g. --max-concurrent 4")
    for flag, v in (("cpus_per_trial", cpus_per_trial), ("gpus_per_trial", gpus_per_trial)):
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not (v >= 0 and math.isfinite(v)):
            raise UsageError(f"{flag} must be a number >= 0, got {v!r}: pass e.g. --{flag.replace('_', '-')} 1")
    if cpus_per_trial <= 0 and gpus_per_trial <= 0:
        raise UsageError("a trial needs some resource: give --cpus-per-trial or --gpus-per-trial above 0")
    if gpus_per_trial > 1 and gpus_per_trial != int(gpus_per_trial):
        raise UsageError(f"gpus_per_trial {gpus_per_trial:g} is above 1 but not whole: use a fraction below 1 or a whole number")
    if backend == "local" and (address or storage_path or gpus_per_trial or max_concurrent or max_failures):
        raise UsageError("--address, --storage-path, --gpus-per-trial, --max-concurrent and --max-failures apply to "
                         "--backend ray: add --backend ray, or drop them")
    if sampler not in ("tpe", "random"):
        raise UsageError(f"sampler {sampler!r} is unknown: use tpe or random")
    sp = space if isinstance(space, SearchSpace) else load_space(space)
    has_task_entries = any(n.startswith("task.") for n in sp.entries)
    if isinstance(task, Task) and has_task_entries:
        raise UsageError(f"space '{sp.name}' varies task hyperparameters (task.*): pass the task as a spec (pkg.mod:fn) whose function takes a config")
    fixed_task_cfg = {n[5:]: v for n, v in sp.fixed().items() if n.startswith("task.")}
    base_task = load_task(task, fixed_task_cfg or None) if not isinstance(task, Task) else task
    if base_task.val_data is None:
        raise UsageError("search needs validation data to compare and prune trials: give the task val_data")
    base_cfg = TrainConfig.for_task(base_task, device=device)
    steps = int(max_steps if max_steps is not None else base_cfg.max_steps)
    if steps < 2:
        raise UsageError(f"max_steps must be >= 2, got {steps}: pass e.g. --max-steps 200")
    if eval_every is not None:
        check_int("eval_every", eval_every)
    every = int(eval_every or max(1, steps // 8))
    out_dir = Path(out) if out is not None else None
    if out_dir is not None:
        out_dir.mkdir(parents=True, exist_ok=True)
    start = time.perf_counter()

    # 1. The study, before any probe runs: a clash or a bad storage fails at once.
    # Failed and diverged trials are in the table and in search.json, with their
    # errors: Optuna's own per-trial warnings would only repeat them as noise.
    optuna.logging.set_verbosity(optuna.logging.ERROR)
    store = make_storage(storage, out_dir)
    name = study_name or f"tunekit-{base_task.name}-{sp.name}"
    existing = _study_exists(store, name)
    if existing and not resume and storage is None:
        raise UsageError(f"study '{name}' already exists in {out_dir}: pass --resume to continue it, or another --out or --study")
    stored_dists: dict[str, str] = {}
    if existing:
        stored_dists = optuna.load_study(study_name=name, storage=store).user_attrs.get("tunekit_distributions", {})
        # A study keeps the probes it was seeded with: reuse them rather than probe again.
        if out_dir is not None:
            if lr_find_result is None and (out_dir / "lr_find.json").is_file():
                lr_find_result = out_dir / "lr_find.json"
            if probe_result is None and (out_dir / "probe.json").is_file():
                probe_result = out_dir / "probe.json"

    # 2. Probes, or their saved results.
    probe_updates = 0
    lf = _load_result(lr_find_result, "lr_find")
    pr = _load_result(probe_result, "probe")
    if sp.needs_lr_find and lf is None:
        from .lr_find import lr_find

        lf = lr_find(base_task, device=device, seed=seed, progress=progress)
        probe_updates += len(lf.losses)
        if out_dir is not None:
            lf.to_json(out_dir / "lr_find.json")
    if sp.needs_probe and pr is None:
        from .probe import probe

        pr = probe(base_task, memory_budget=memory_budget, device=device, seed=seed, progress=progress)
        probe_updates += pr.updates
        if out_dir is not None:
            pr.to_json(out_dir / "probe.json")
    dists = sp.distributions(lf, pr)
    if stored_dists:  # the space a study started with stays its space
        dists = {n: optuna.distributions.json_to_distribution(d) for n, d in stored_dists.items()}
    fixed = sp.fixed()
    if backend == "ray" and 0 < gpus_per_trial < 1 and pr is not None and str(pr.device).startswith("cuda"):
        from .ray_backend import check_packing

        micro = _largest_micro_batch(dists, fixed, pr, base_cfg.batch_size or base_task.batch_size or 1)
        check_packing(gpus_per_trial, pr.predicted_peak(micro), pr.usable_bytes,
                      f"micro-batch {micro}, by the probe's memory model")
    ref_batch = None
    if lf is not None:
        ref_batch = (lf.settings.get("batch_size") or base_task.batch_size or 1) * (lf.settings.get("accumulation_steps") or 1)

    def to_config(params: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
        """A trial's params -> (training settings, task config)."""
        values = {**fixed, **params}
        train_cfg: dict[str, Any] = {"max_steps": steps, "eval_every": every, "seed": seed, "device": device}
        task_cfg = dict(fixed_task_cfg)
        for name, v in values.items():
            if name.startswith("task."):
                task_cfg[name[5:]] = v
            elif name == "batch":
                micro, k = _split_batch(int(v), pr)
                train_cfg["batch_size"], train_cfg["accumulation_steps"] = micro, k
            else:
                train_cfg[name] = v
        lr_entry = sp.entries.get("lr")
        if lr_entry is not None and lr_entry.scale_with_batch and ref_batch and "batch" in values:
            ratio = int(values["batch"]) / ref_batch
            train_cfg["lr"] = train_cfg["lr"] * (ratio if lr_entry.scale_with_batch == "linear" else math.sqrt(ratio))
        return train_cfg, task_cfg

    task_cache: dict[str, Task] = {}

    def configure(trial: optuna.trial.Trial, params: dict[str, Any]) -> dict[str, Any]:
        """A trial's params -> what its run needs; the settings are kept on the trial."""
        train_cfg, task_cfg = to_config(params)
        trial.set_user_attr("config", {k: v for k, v in train_cfg.items() if k not in ("device",)})
        return {"train_cfg": train_cfg, "task_cfg": task_cfg}

    def objective(trial: optuna.trial.Trial) -> float:
        params = {name: _suggest(trial, name, d) for name, d in dists.items()}
        run = configure(trial, params)
        train_cfg, task_cfg = run["train_cfg"], run["task_cfg"]
        curve: list[list[float]] = []
        t0 = time.perf_counter()

        def report(step: int, metrics: dict[str, float]) -> None:
            curve.append([step, metrics["loss"]])
            trial.set_user_attr("curve", curve)
            trial.set_user_attr("updates", step)
            trial.set_user_attr("seconds", time.perf_counter() - t0)
            if prune and step < steps:
                trial.report(metrics["loss"], step)
                if trial.should_prune():
                    raise optuna.TrialPruned(f"pruned at update {step} with validation loss {metrics['loss']:.4f}")

        try:
            result = run_config(task, train_cfg, task_cfg, report, cache=task_cache)
        except optuna.TrialPruned:
            raise
        except KeyboardInterrupt:
            trial.set_user_attr("error", INTERRUPTED)  # Optuna records it as FAIL; --resume runs it again
            raise
        except UsageError as exc:
            trial.set_user_attr("error", f"UsageError: {exc}")
            raise
        except Exception as exc:
            trial.set_user_attr("error", f"{type(exc).__name__}: {exc}")
            raise
        trial.set_user_attr("updates", result.updates)
        trial.set_user_attr("seconds", time.perf_counter() - t0)
        if result.diverged:
            trial.set_user_attr("diverged", True)
            trial.set_user_attr("error", f"diverged at update {result.diverged_at}")
            raise TrialDiverged(f"diverged at update {result.diverged_at}")
        return float(result.final_loss)

    # 3. The study: new, joined, or resumed.
    n_before = len(optuna.load_study(study_name=name, storage=store).trials) if existing else 0
    smp: optuna.samplers.BaseSampler = (
        _tpe(seed + n_before, max(3, min(10, trials // 3)), parallel=backend == "ray")
        if sampler == "tpe" else optuna.samplers.RandomSampler(seed=seed + n_before)
    )
    # ASHA's rungs (both backends): unless --grace-period says otherwise, the standard
    # ladder steps / rf**k, ..., steps / rf (rounded up, so no rung falls on the last
    # update), with k such that at least rf trials are expected to finish
    # (trials / rf**k >= rf). More rungs leave one or two complete trials out of a small
    # search, and put the first rung where trials that differ in warmup, LR and batch are
    # ranked by how fast they start, not where they end (short-horizon bias, Wu et al.
    # 2018; a larger batch has also seen more samples per update).
    rungs = max(1, int(math.log(max(trials, 1)) / math.log(max(reduction_factor, 2)) + 1e-9) - 1)
    rung0 = int(grace_period or max(every, -(-steps // reduction_factor**rungs)))
    pruner = (optuna.pruners.SuccessiveHalvingPruner(min_resource=rung0, reduction_factor=reduction_factor)
              if prune else optuna.pruners.NopPruner())
    study = optuna.create_study(study_name=name, storage=store, sampler=smp, pruner=pruner,
                                direction="minimize", load_if_exists=True)
    if not stored_dists:
        study.set_user_attr("tunekit_distributions", {n: optuna.distributions.distribution_to_json(d) for n, d in dists.items()})
    if resume:
        if storage is None:
            # Our own storage, one process: a trial left RUNNING was killed with it.
            for t in study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.RUNNING,)):
                study._storage.set_trial_user_attr(t._trial_id, "error", INTERRUPTED)
                study._storage.set_trial_state_values(t._trial_id, optuna.trial.TrialState.FAIL)
        else:
            # A shared storage: other workers may be running; only trials whose
            # heartbeat stopped are dead (Optuna's retry callback re-enqueues them).
            optuna.storages.fail_stale_trials(study)
        # Interrupted trials (killed, or stopped with Ctrl-C) run again with their params, once.
        # A finished trial cannot take attributes, so the study keeps the list.
        requeued = set(study.user_attrs.get("tunekit_requeued", []))
        for t in study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.FAIL,)):
            if t.user_attrs.get("error") == INTERRUPTED and t.number not in requeued:
                requeued.add(t.number)
                study.enqueue_trial(dict(t.params), skip_if_exists=False)
        study.set_user_attr("tunekit_requeued", sorted(requeued))
    seed_params = _seed_params(sp, dists, lf, pr, ref_batch) if seed_trial else {}
    if seed_trial and not study.trials:
        study.enqueue_trial(seed_params)

    # 4. Run until the study holds `trials` finished trials.
    finished_states = (optuna.trial.TrialState.COMPLETE, optuna.trial.TrialState.PRUNED, optuna.trial.TrialState.FAIL)
    interrupted = {t.number for t in study.get_trials(deepcopy=False) if t.user_attrs.get("error") == INTERRUPTED}
    done = sum(1 for t in study.get_trials(deepcopy=False, states=finished_states) if t.number not in interrupted)
    remaining = max(0, trials - done)
    bar = _Bar(remaining, progress)
    callbacks = [optuna.study.MaxTrialsCallback(trials + len(interrupted), states=finished_states), bar.callback]
    try:  # the bar closes however the trials end (Ctrl-C included)
        if remaining and backend == "ray":
            from .ray_backend import run_ray

            run_ray(study=study, dists=dists, make_config=lambda trial: configure(trial, dict(trial.params)),
                    task=task, steps=steps, n_trials=remaining, prune=prune, grace_period=rung0,
                    reduction_factor=reduction_factor, cpus_per_trial=cpus_per_trial, gpus_per_trial=gpus_per_trial,
                    max_concurrent=max_concurrent, max_failures=max_failures, address=address,
                    storage_path=storage_path, out_dir=out_dir, on_end=lambda t, state: bar.update(study, state),
                    **(ray_init or {}))
        elif remaining:
            study.optimize(objective, n_trials=remaining, catch=(Exception,), callbacks=callbacks)
    finally:
        bar.close()

    all_trials = [_trial_dict(t) for t in study.get_trials(deepcopy=False)]
    complete = [t for t in all_trials if t["state"] == "COMPLETE" and t["value"] is not None]
    best = min(complete, key=lambda t: t["value"]) if complete else None
    result = SearchResult(
        study_name=name, storage=str(getattr(store, "url", storage or "in-memory")), space=sp.name, direction="minimize",
        best_value=best["value"] if best else None, best_params=best["params"] if best else {},
        best_config=best["config"] if best else {}, trials=all_trials, seed_params=seed_params,
        distributions={n: optuna.distributions.distribution_to_json(d) for n, d in dists.items()},
        probe_updates=probe_updates, seconds=time.perf_counter() - start,
        lr_find={"suggestion": lf.suggestion, "lr_bounds": list(lr_bounds_from_curve(lf, sp.entries["lr"].margin))} if lf is not None and "lr" in sp.entries else None,
        probe={"max_batch": pr.max_batch, "critical_batch": pr.critical_batch, "knee_batch": pr.knee_batch} if pr is not None else None,
    )
    if out_dir is not None:
        write_report(result, out_dir)
    return result


def run_config(task: str | Task, train_cfg: dict[str, Any], task_cfg: dict[str, Any] | None, report: Any,
               cache: dict[str, Task] | None = None) -> Any:
    """One trial's training run, for either backend: the task built with its config, then train().

    ``cache`` keeps the last task built, so trials with the same task config
    (most of them) do not rebuild its data; train() starts a fresh model each time.
    """
    if isinstance(task, Task):
        run_task = task
    else:
        key = json.dumps([task, task_cfg or {}], sort_keys=True, default=str)
        run_task = cache.get(key) if cache is not None else None
        if run_task is None:
            run_task = load_task(task, task_cfg or None)
            if cache is not None:
                cache.clear()
                cache[key] = run_task
    return train(run_task, train_cfg, callback=report)


def _tpe(seed: int, startup: int, parallel: bool) -> Any:
    import warnings

    import optuna

    with warnings.catch_warnings():  # constant_liar is "experimental" in Optuna's words
        warnings.simplefilter("ignore")
        # With trials running in parallel, constant_liar keeps TPE from proposing
        # the same point to every free worker.
        return optuna.samplers.TPESampler(seed=seed, n_startup_trials=startup, constant_liar=parallel)


def write_report(result: SearchResult, out_dir: Path) -> None:
    from .plotting import save_plot

    result.to_json(out_dir / "search.json")
    result.write_csv(out_dir / "trials.csv")
    save_plot(lambda: result.plot()[0, 0], str(out_dir / "search.png"))


def _suggest(trial: Any, name: str, dist: Any) -> Any:
    import optuna.distributions as d

    if isinstance(dist, d.FloatDistribution):
        return trial.suggest_float(name, dist.low, dist.high, log=dist.log)
    if isinstance(dist, d.IntDistribution):
        return trial.suggest_int(name, dist.low, dist.high, log=dist.log, step=dist.step)
    return trial.suggest_categorical(name, dist.choices)


def _largest_micro_batch(dists: dict[str, Any], fixed: dict[str, Any], pr: Any, default: int) -> int:
    """The largest micro-batch any trial of the space will run (what bounds its memory)."""
    if "batch" in dists:
        return max(_split_batch(int(b), pr)[0] for b in dists["batch"].choices)
    if "batch_size" in dists:
        d = dists["batch_size"]
        return int(max(d.choices) if hasattr(d, "choices") else d.high)
    return int(fixed.get("batch_size") or default)


def _split_batch(effective: int, pr: Any) -> tuple[int, int]:
    """The fastest (micro-batch, accumulation) pair for an effective batch that the probe says fits."""
    from .probe import plan_batches

    plan = plan_batches(effective, pr.max_batch, pr.throughput, pr.memory_model())
    if not plan:
        raise UsageError(f"effective batch {effective} has no micro-batch that fits (largest {pr.max_batch})")
    return int(plan[0]["micro_batch"]), int(plan[0]["accumulation_steps"])


def _seed_params(sp: SearchSpace, dists: dict[str, Any], lf: Any, pr: Any, ref_batch: int | None) -> dict[str, Any]:
    """The configuration the probes recommend: suggested LR, batch at the probe's centre, mid values elsewhere."""
    import optuna.distributions as d

    params: dict[str, Any] = {}
    for name, dist in dists.items():
        if name == "lr" and lf is not None and lf.suggestion:
            params[name] = float(np.clip(lf.suggestion, dist.low, dist.high))
        elif name == "batch":
            # The choice nearest the centre the choices were built on: the LR's own batch when the
            # probe's interval allows it (see space.batch_centre), so the suggested LR applies as found.
            from .space import batch_centre

            centre = batch_centre(pr, ref_batch)
            params[name] = min(dist.choices, key=lambda b: abs(math.log(b) - math.log(centre)))
        elif isinstance(dist, d.FloatDistribution):
            params[name] = float(math.sqrt(dist.low * dist.high) if dist.log else (dist.low + dist.high) / 2)
        elif isinstance(dist, d.IntDistribution):
            params[name] = int(dist.low + round((dist.high - dist.low) / 2 / dist.step) * dist.step)
        else:
            params[name] = dist.choices[0]
    return params


def _load_result(value: Any, kind: str) -> Any:
    if value is None or not isinstance(value, (str, Path)):
        return value
    path = Path(value)
    if not path.is_file():
        raise UsageError(f"--{kind.replace('_', '-')} file '{path}' does not exist: run tunekit {kind.replace('_', '-')} first, or drop the flag")
    if kind == "lr_find":
        from .lr_find import LRFindResult

        return LRFindResult.from_json(path)
    from .probe import ProbeResult

    return ProbeResult.from_json(path)


def _study_exists(store: Any, name: str) -> bool:
    import optuna

    if store is None:
        return False
    try:
        return any(s.study_name == name for s in optuna.get_all_study_summaries(store))
    except Exception:
        return False


class _Bar:
    """One progress bar over the trials, with the best value so far."""

    def __init__(self, total: int, enabled: bool) -> None:
        self.bar = None
        if enabled and total:
            from tqdm.auto import tqdm

            self.bar = tqdm(total=total, desc="search", unit="trial", leave=False, dynamic_ncols=True, disable=None)

    def callback(self, study: Any, trial: Any) -> None:
        self.update(study, trial.state.name)

    def update(self, study: Any, state: str) -> None:
        if self.bar is None:
            return
        try:
            best = f"{study.best_value:.4f}"
        except ValueError:
            best = "-"
        self.bar.set_postfix_str(f"best {best}, last {state.lower()}", refresh=False)
        self.bar.update(1)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()
            self.bar = None
