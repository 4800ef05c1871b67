"""How many training samples does each search strategy spend before it reaches a target loss?

On the benchmark's own tasks (``search_tasks.py``: a BatchNorm CNN with AdamW,
an MLP with SGD, a tiny char-level Transformer with AdamW, and a long-trial MLP with
Adam, 2,400 updates a full trial), over several seeds,
each strategy searches with the same budget per trial, 1 FTE ("full-trial
equivalent": the task's ``max_steps`` x its default batch, in samples); a trial
at batch B runs ``budget // B`` optimizer updates. Strategies:

- ``tunekit``: ``tunekit.search(task, "from_scratch", trials=N, budget="<FTE>samples")``,
  its probes' samples counted first;
- ``random``: Optuna's RandomSampler over a wide space (LR 1e-6..1 log, batch
  16..256, warmup 0..0.1, weight decay 1e-3..0.1 log, cosine or linear decay),
  every trial to the full budget;
- ``optuna_sh``: Optuna's TPESampler + SuccessiveHalvingPruner (defaults) over
  the wide space, reporting the validation loss at 8 evaluations (step = samples);
- ``ray_asha``: Ray Tune with OptunaSearch + ASHAScheduler (time_attr samples,
  grace period budget/8) over the wide space, one trial at a time on 1 CPU; a
  trial counts only if it trained its full budget.

The peers' trials train through ``tunekit.train`` (search seed s trains every
trial with seed s), evaluating the whole validation set at a fixed batch size.

Target: 1.02 x the best known loss of the task, the smaller of (a) the best mean
final loss over an LR grid at the task's default settings (3 LRs a decade, 1e-4
to 1, each trained with seeds 1000..1002) and (b) every strategy's best
completed trial over all its seeds. Samples to target: the samples of every
trial, pruned and failed ones included, in completion order (probes first),
until the first completed trial at or below the target; inf if none. The same is
counted in optimizer updates and in device seconds (each trial's measured seconds on its
one CPU thread, evaluations included; tunekit's probes' seconds first). Medians
are over seeds, so a median is finite only when at least half the seeds reach
the target; "misses as spent" counts each miss as the samples it spent (a lower
bound on what it would need).

Every run (task, strategy, seed) and the grid are cached as JSON under
``--cache``, so an interrupted run resumes, tasks can run in separate processes,
and ``--report`` prints the tables from the cache without training:

    python -m benchmarks.search_efficiency --tasks cnn_adamw,mlp_sgd &
    python -m benchmarks.search_efficiency --tasks tiny_lm &
    wait; python -m benchmarks.search_efficiency --report

The report also gives tunekit's seconds per update against the peers' loop at the same
batch (both train through ``tunekit.train``; tunekit's trials also write each evaluation to
their SQLite study), and tunekit's predicted / measured trial seconds. Those trials ran at
other times, under other load: ``--per-update`` times the two paths at one config instead,
interleaved (tunekit's trial path through a search of a fully fixed space, which runs no
probes; the peers' through train with an in-memory Optuna study), and prints the median of
the paired ratios.

Options: ``--seeds N`` (default 5 a task, 3 for tiny_lm), ``--trials N`` (24),
``--strategies tunekit,random,optuna_sh,ray_asha``. A cached run is reused while
its task's FTE is unchanged: delete the cache after changing a task otherwise.

The tables are written to benchmarks/data/search_efficiency_report.txt (``--per-update``'s to
search_efficiency_per_update_report.txt). ``--quick`` is a smoke run, not a figure: the corpus's
mlp_bce_adam (100 updates of a small MLP), 1 seed, 4 trials, tunekit, random and optuna_sh (not
ray_asha unless --strategies names it: Ray's start-up alone takes longer than the rest), an LR grid of
every other LR and one seed, all in a temporary folder (its report too).
"""

from __future__ import annotations

import argparse
import functools
import inspect
import json
import math
import os
import secrets
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, Optional

# Ray reads these when imported: stay on loopback, send no usage stats, keep Tune quiet.
os.environ["RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"] = "0"
if not (os.environ.get("RAY_AUTH_TOKEN") or os.environ.get("RAY_AUTH_TOKEN_PATH")):
    # A local Ray >= 2.5x turns token auth on and writes ~/.ray/auth_token: a token of this
    # process's own, in the environment its workers inherit, keeps auth on and writes nothing.
    os.environ["RAY_AUTH_TOKEN"] = secrets.token_hex(32)
os.environ.setdefault("RAY_AUTH_MODE", "token")
os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
os.environ.setdefault("TUNE_DISABLE_AUTO_CALLBACK_LOGGERS", "1")
os.environ.setdefault("RAY_AIR_NEW_OUTPUT", "0")

import torch  # noqa: E402

from benchmarks.harness import costs  # noqa: E402
from benchmarks._common import recorded  # noqa: E402
from benchmarks.harness import report as harness_report  # noqa: E402
from benchmarks.search_tasks import TASKS  # noqa: E402

import tunekit  # noqa: E402

STRATEGIES = ("tunekit", "random", "optuna_sh", "ray_asha")
PEERS = STRATEGIES[1:]
# tunekit with other settings, to choose its defaults on the same runs: --variant NAME=JSON adds
# the strategy tunekit_NAME, which passes the JSON's keys to tunekit.search.
VARIANTS: dict[str, dict[str, Any]] = {"tunekit": {}}
DEFAULT_SEEDS = {"cnn_adamw": 5, "mlp_sgd": 5, "tiny_lm": 3, "long_adam": 5}
BATCHES = [16, 32, 64, 128, 256]
FINISHED = ("COMPLETE", "PRUNED", "FAIL")
EVALS = 8  # evaluations a trial
GRID_LRS = [round(10 ** (-4 + k / 3), 10) for k in range(13)]  # 1e-4 .. 1, 3 a decade
GRID_SEEDS = (1000, 1001, 1002)
MARGIN = 1.02
WORST = 1e300  # a diverged trial's loss, for Ray's scheduler: the worst, yet finite
DEFAULT_CACHE = Path(__file__).resolve().parent / ".cache" / "search_efficiency"
QUICK_TASK = "mlp_bce_adam"  # --quick's task, from the corpus: 100 updates of a small MLP on a synthetic teacher

Run = dict[str, Any]  # one search: its trials (state, value, samples, finished, params), probes, seconds


# --- training one trial ------------------------------------------------------------------


def fte_of(task: tunekit.Task) -> int:
    """Samples of one full trial: max_steps x the default batch."""
    return int(task.defaults["max_steps"]) * int(task.batch_size or 1)


def train_trial(task: tunekit.Task, params: dict[str, Any], budget: int, seed: int,
                callback: Optional[Callable[[int, dict[str, float]], Any]] = None) -> tunekit.TrainResult:
    """``budget // batch`` updates at ``params``, evaluating the whole validation set about 8 times."""
    batch = int(params["batch_size"])
    updates = max(1, budget // batch)
    return tunekit.train(task, lr=float(params["lr"]), batch_size=batch, run_steps=updates,
                         warmup=float(params["warmup"]), weight_decay=float(params["weight_decay"]),
                         schedule=params["schedule"], min_lr_ratio=0.1, eval_every=max(1, updates // EVALS),
                         eval_batches=None, seed=seed, device="cpu", callback=callback)


def wide_space(trial: Any, batches: tuple[int, ...] = tuple(BATCHES)) -> dict[str, Any]:
    """The wide, unseeded space (an Optuna define-by-run function); returns the constants."""
    trial.suggest_float("lr", 1e-6, 1.0, log=True)
    trial.suggest_categorical("batch_size", list(batches))
    trial.suggest_float("warmup", 0.0, 0.1)
    trial.suggest_float("weight_decay", 1e-3, 0.1, log=True)
    trial.suggest_categorical("schedule", ["cosine", "linear"])
    return {"min_lr_ratio": 0.1}


def record(number: int, state: str, value: Optional[float], samples: int, params: dict[str, Any],
           updates: int = 0, seconds: float = 0.0, batch: Optional[int] = None) -> dict[str, Any]:
    """One trial as the report reads it: its end, its value, and what it cost in samples, optimizer
    updates and device seconds (the trial's wall time on its one CPU thread, evaluations included)."""
    value = None if value is None or not math.isfinite(value) else float(value)
    return {"number": number, "state": state, "value": value, "samples": int(samples), "updates": int(updates),
            "seconds": float(seconds), "batch": int(batch or params.get("batch_size") or 0),
            "finished": time.time(), "params": params}


# --- the strategies ----------------------------------------------------------------------


def batches_for(task: tunekit.Task) -> tuple[int, ...]:
    """The wide space's batches that the task's training data can fill (a user with 120 samples does
    not try 256)."""
    n = len(task.train_data) if hasattr(task.train_data, "__len__") else None
    fits = tuple(b for b in BATCHES if n is None or b <= n)
    return fits or (min(BATCHES),)


def run_optuna(task: tunekit.Task, budget: int, seed: int, n_trials: int, sampler: Any, pruner: Any) -> Run:
    """An ask-and-tell Optuna study over the wide space; intermediate losses reported against samples."""
    import optuna

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    study = optuna.create_study(direction="minimize", sampler=sampler, pruner=pruner)
    trials = []
    for number in range(n_trials):
        trial = study.ask()
        params = {**wide_space(trial, batches_for(task)), **trial.params}
        batch = int(params["batch_size"])
        updates = max(1, budget // batch)
        seen = [0]
        t0 = time.perf_counter()

        def report(step: int, metrics: dict[str, float]) -> None:
            seen[0] = step * batch
            if step < updates:  # the last evaluation is the trial's value, told below
                trial.report(float(metrics["loss"]), step * batch)
                if trial.should_prune():
                    raise optuna.TrialPruned()

        try:
            result = train_trial(task, params, budget, seed, report)
        except optuna.TrialPruned:
            study.tell(trial, state=optuna.trial.TrialState.PRUNED)
            trials.append(record(number, "PRUNED", None, seen[0], params, seen[0] // batch, time.perf_counter() - t0))
            continue
        cost = (result.samples, params, result.updates, time.perf_counter() - t0)
        if result.diverged or not math.isfinite(result.final_loss):
            study.tell(trial, state=optuna.trial.TrialState.FAIL)
            trials.append(record(number, "FAIL", None, *cost))
        else:
            study.tell(trial, result.final_loss)
            trials.append(record(number, "COMPLETE", result.final_loss, *cost))
    return {"probe_samples": 0, "trials": trials}


def run_random(task: tunekit.Task, budget: int, seed: int, n_trials: int) -> Run:
    import optuna

    return run_optuna(task, budget, seed, n_trials, optuna.samplers.RandomSampler(seed=seed), optuna.pruners.NopPruner())


def run_optuna_sh(task: tunekit.Task, budget: int, seed: int, n_trials: int) -> Run:
    import optuna

    return run_optuna(task, budget, seed, n_trials, optuna.samplers.TPESampler(seed=seed),
                      optuna.pruners.SuccessiveHalvingPruner())


_WORKER_TASKS: dict[str, tunekit.Task] = {}


def task_by_name(name: str) -> tunekit.Task:
    """One of this benchmark's own tasks, else a corpus task (benchmarks/corpus)."""
    if name in TASKS:
        return TASKS[name](None)
    from benchmarks.corpus import build

    return build(name)


def _ray_trial(config: dict[str, Any], task_name: str, budget: int, seed: int) -> None:
    """One Ray Tune trial: reports loss and samples at each evaluation, the last one marked complete."""
    from ray import tune

    torch.set_num_threads(1)
    if task_name not in _WORKER_TASKS:  # built once a worker: reused actors skip building the data
        _WORKER_TASKS[task_name] = task_by_name(task_name)
    task = _WORKER_TASKS[task_name]
    batch = int(config["batch_size"])
    updates = max(1, budget // batch)
    t0 = time.perf_counter()

    def report(step: int, metrics: dict[str, float]) -> None:
        if step < updates:
            tune.report({"loss": _finite(metrics["loss"]), "samples": step * batch, "updates": step,
                         "seconds": time.perf_counter() - t0, "t": time.time()})

    result = train_trial(task, config, budget, seed, report)
    end = {"samples": int(result.samples), "updates": int(result.updates), "seconds": time.perf_counter() - t0,
           "t": time.time()}
    if result.diverged or not math.isfinite(result.final_loss):
        tune.report({**end, "loss": WORST, "diverged": True})
    else:
        tune.report({**end, "loss": float(result.final_loss), "complete": True})


def _finite(loss: float) -> float:
    return float(loss) if math.isfinite(loss) else WORST


def start_ray() -> float:
    """Start a local 1-CPU Ray instance on loopback (once a process); returns its start-up seconds."""
    import ray

    if ray.is_initialized():
        return 0.0
    t0 = time.perf_counter()
    # The workers import this module as benchmarks.search_efficiency: the repository's root on their path.
    root = str(Path(__file__).resolve().parents[1])
    path = os.pathsep.join(p for p in (root, os.environ.get("PYTHONPATH", "")) if p)
    ray.init(address="local", num_cpus=1, include_dashboard=False, log_to_driver=False, logging_level="ERROR",
             runtime_env={"env_vars": {"PYTHONPATH": path}})
    host = ray.util.get_node_ip_address()
    if host != "127.0.0.1":
        raise SystemExit(f"Ray listens on {host}, not on loopback: refusing to run")
    return time.perf_counter() - t0


def run_ray_asha(task_name: str, budget: int, seed: int, n_trials: int) -> Run:
    """Ray Tune: OptunaSearch (TPE) + ASHAScheduler on samples, one trial at a time."""
    import warnings

    from ray import tune
    from ray.tune.schedulers import ASHAScheduler
    from ray.tune.search.optuna import OptunaSearch

    import optuna

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    start_ray()
    with tempfile.TemporaryDirectory(prefix="tk_ray_") as storage:
        tuner = tune.Tuner(
            tune.with_resources(tune.with_parameters(_ray_trial, task_name=task_name, budget=budget, seed=seed),
                                {"cpu": 1}),
            tune_config=tune.TuneConfig(
                search_alg=OptunaSearch(space=functools.partial(wide_space, batches=batches_for(task_by_name(task_name))),
                                        metric="loss", mode="min", seed=seed),
                scheduler=ASHAScheduler(time_attr="samples", max_t=budget, grace_period=budget // EVALS,
                                        metric="loss", mode="min"),
                num_samples=n_trials, max_concurrent_trials=1, reuse_actors=True),
            run_config=tune.RunConfig(storage_path=storage, verbose=0),
        )
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            grid = tuner.fit()
        results = [grid[i] for i in range(len(grid))]
    trials = [_ray_record(i, r) for i, r in enumerate(sorted(results, key=lambda r: (r.metrics or {}).get("t", math.inf)))]
    return {"probe_samples": 0, "trials": trials}


def _ray_record(number: int, result: Any) -> dict[str, Any]:
    last = result.metrics or {}
    params = dict(result.config or {})
    if result.error is not None or last.get("diverged"):
        state, value = "FAIL", None
    elif last.get("complete"):
        state, value = "COMPLETE", float(last["loss"])
    else:
        state, value = "PRUNED", None  # stopped by the scheduler before its budget
    rec = record(number, state, value, int(last.get("samples", 0)), params, int(last.get("updates", 0)),
                 float(last.get("seconds", 0.0)))
    rec["finished"] = last.get("t")
    return rec


def tunekit_has_budget() -> bool:
    return "budget" in inspect.signature(tunekit.search).parameters


def run_tunekit(task: tunekit.Task, budget: int, seed: int, n_trials: int, **kw: Any) -> Run:
    """tunekit's seeded search; its probes' samples are counted before its trials'."""
    search: Any = tunekit.search  # `budget` is new: typed loosely until every checkout has it
    with tempfile.TemporaryDirectory(prefix="tk_search_") as out:
        sweep = kw.pop("lr_sweep_share", None)  # the range test's updates as a share of one trial's
        steps = max(30, min(100, round(sweep * budget / int(task.batch_size or 1)))) if sweep else None
        probes = tunekit.ProbeSettings(memory_budget="1GiB", lr_refine=kw.pop("lr_refine", False), lr_sweep_steps=steps)
        r = search(task, kw.pop("space", "from_scratch"), trials=n_trials, budget=f"{budget}samples", seed=seed,
                   out=out, backend=tunekit.Local(device="cpu"), probes=probes, **kw)
    ran = [t for t in r.trials if t["state"] in FINISHED]
    if len(ran) < len(r.trials):  # e.g. enqueued trials the search never ran
        left = sorted({t["state"] for t in r.trials} - set(FINISHED))
        print(f"    note: {len(r.trials) - len(ran)} tunekit trial(s) never ran ({', '.join(left)}): left out", flush=True)
    missing = [t.get("number") for t in ran if t.get("samples") is None]
    if missing:
        print(f"    warning: tunekit trials {missing} carry no 'samples'; counted as 0", flush=True)
    trials = [{"number": t.get("number"), "state": t["state"], "value": t.get("value"),
               "samples": int(t.get("samples") or 0), "updates": int(t.get("updates") or 0),
               "seconds": float(t.get("seconds") or 0.0), "predicted_seconds": t.get("predicted_seconds"),
               "batch": int(t.get("effective_batch") or 0), "finished": t.get("finished"), "params": t.get("params", {}),
               "config": t.get("config"),  # the run it trained, as tunekit.train takes it (harness/retrain.py)
               "diverged": bool(t.get("diverged")),
               # a confirmation run (Confirm): the trial it runs again, and which of its fresh seeds
               **({"confirm_of": t["confirm_of"], "repeat": t.get("repeat")} if t.get("confirm_of") is not None else {})}
              for t in ran]
    # The probes' updates: the batch probe counts its own; the range test runs one update a point.
    probe_updates = int((r.probe or {}).get("updates") or 0) + int((r.lr_find or {}).get("updates") or 0)
    return {"probe_samples": int(getattr(r, "probe_samples", 0) or 0), "probe_updates": probe_updates,
            "probe_seconds": float(getattr(r, "probe_seconds", 0.0) or 0.0), "trials": trials,
            "tunekit_seconds": float(getattr(r, "seconds", math.nan)), "lr_find": getattr(r, "lr_find", None)}


def run_strategy(strategy: str, task_name: str, task: tunekit.Task, budget: int, seed: int, n_trials: int,
                 variants: Optional[dict[str, dict[str, Any]]] = None) -> Run:
    """One search; its wall seconds leave out Ray's start-up (once a process, reported apart). ``variants``:
    tunekit's arms besides :data:`VARIANTS` (name -> keywords of :func:`run_tunekit`)."""
    ray_startup = start_ray() if strategy == "ray_asha" else 0.0
    t0 = time.perf_counter()
    tunekits = {**VARIANTS, **(variants or {})}
    if strategy in tunekits:
        run = run_tunekit(task, budget, seed, n_trials, **dict(tunekits[strategy]))
    elif strategy == "random":
        run = run_random(task, budget, seed, n_trials)
    elif strategy == "optuna_sh":
        run = run_optuna_sh(task, budget, seed, n_trials)
    else:
        run = run_ray_asha(task_name, budget, seed, n_trials)
    run.update(task=task_name, strategy=strategy, seed=seed, trials_asked=n_trials, fte=budget,
               seconds=time.perf_counter() - t0)
    if ray_startup:
        run["ray_startup_seconds"] = ray_startup
    return run


# --- the cache ---------------------------------------------------------------------------


def save_json(path: Path, obj: Any) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(obj, indent=1, default=str))
    tmp.replace(path)


def load_json(path: Path) -> Optional[Any]:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


def run_path(cache: Path, task: str, strategy: str, seed: int, trials: int) -> Path:
    return cache / task / f"{strategy}_seed{seed}_trials{trials}.json"


def load_run(cache: Path, task: str, strategy: str, seed: int, trials: int, fte: int) -> Optional[Run]:
    run = load_json(run_path(cache, task, strategy, seed, trials))
    return run if run is not None and run.get("fte") == fte else None  # a changed task invalidates its runs


def prepare_cache(cache: Path) -> None:
    cache.mkdir(parents=True, exist_ok=True)
    ignore = cache.parent / ".gitignore" if cache.parent.name == ".cache" else cache / ".gitignore"
    if not ignore.exists():
        ignore.write_text("*\n")


# --- the LR grid -------------------------------------------------------------------------


def lr_grid(task_name: str, task: tunekit.Task, cache: Path, train: bool) -> dict[str, Any]:
    """Final losses at GRID_LRS x GRID_SEEDS at the task's defaults, trained where missing (if ``train``)."""
    path = cache / task_name / "grid.json"
    fte = fte_of(task)
    grid = load_json(path)
    if grid is None or grid.get("fte") != fte:
        grid = {"fte": fte, "points": {}, "seconds": []}
    steps = int(task.defaults["max_steps"])
    for lr in GRID_LRS:
        for s in GRID_SEEDS:
            key = f"{lr:g}/{s}"
            if key in grid["points"] or not train:
                continue
            t0 = time.perf_counter()
            r = tunekit.train(task, lr=lr, run_steps=steps, eval_every=max(1, steps // EVALS), eval_batches=None,
                              seed=s, device="cpu")
            grid["seconds"].append(time.perf_counter() - t0)
            grid["points"][key] = r.final_loss if math.isfinite(r.final_loss) else None
            save_json(path, grid)
    return grid


def grid_means(grid: dict[str, Any]) -> dict[float, float]:
    """LR -> mean final loss over the grid seeds (inf if any seed diverged or is missing)."""
    means = {}
    for lr in GRID_LRS:
        finals = [grid["points"].get(f"{lr:g}/{s}") for s in GRID_SEEDS]
        means[lr] = statistics.fmean(finals) if all(f is not None for f in finals) else math.inf  # type: ignore[arg-type]
    return means


# --- analysis ----------------------------------------------------------------------------


# One counting of costs for every search benchmark: benchmarks/harness/costs.py.
samples_to_target, samples_spent = costs.to_target, costs.spent
completion_order, best_value = costs.completion_order, costs.best_value


def median(xs: list[float]) -> float:
    return statistics.median(xs) if xs else math.nan


def ratio_text(a: dict[str, float], b: dict[str, float]) -> str:
    """a's median samples to target over b's; a bound from the misses-as-spent median where one missed."""
    if math.isfinite(a["median"]) and math.isfinite(b["median"]):
        return f"{a['median'] / b['median']:.3f}"
    if math.isfinite(a["median"]):  # b's real median is above what it spent
        return f"<= {a['median'] / b['spent_median']:.3f}"
    if math.isfinite(b["median"]):
        return f">= {a['spent_median'] / b['median']:.3f}"
    return "n/a (both missed in most seeds)"


# --- the report --------------------------------------------------------------------------


def report_task(task_name: str, task: tunekit.Task, cache: Path, seeds: int, n_trials: int,
                strategies: list[str]) -> str:
    """Print the task's target derivation and table; return its summary line."""
    fte = fte_of(task)
    runs = {s: [r for seed in range(seeds) if (r := load_run(cache, task_name, s, seed, n_trials, fte))]
            for s in strategies}
    grid = lr_grid(task_name, task, cache, train=False)
    means = grid_means(grid)
    grid_lr = min(means, key=lambda lr: means[lr])
    searched = {s: min((best_value(r) for r in rs), default=math.inf) for s, rs in runs.items()}
    best_s = min(searched, key=lambda s: searched[s]) if searched else None
    best = min(means[grid_lr], searched.get(best_s, math.inf) if best_s else math.inf)
    if not math.isfinite(best):
        print(f"{task_name}: no grid and no completed trial cached yet\n")
        return f"{task_name}: nothing cached"
    target = MARGIN * best
    expected = MARGIN * means[grid_lr]
    print(f"task {task_name}: 1 FTE = {task.defaults['max_steps']} updates x batch {task.batch_size} = {fte} samples; "
          f"full trial {median(grid['seconds']):.2f} s (median of {len(grid['seconds'])} grid runs)")
    curve = ", ".join(f"{lr:.2g}: {means[lr]:.3f}" for lr in GRID_LRS[::2])
    print(f"  grid (mean final loss over seeds {GRID_SEEDS[0]}..{GRID_SEEDS[-1]}) {curve}")
    print(f"  seed noise at the grid's best LR: {seed_spread(grid, grid_lr):.1%} (max - min over seeds, of the mean)")
    horizon(task_name, task, cache, train=False)
    line = ""
    for label, tgt, why in (
            ("best known", target, f"{MARGIN} x min(grid best {means[grid_lr]:.4f} at lr {grid_lr:.3g}, best searched "
             f"{searched.get(best_s, math.inf):.4f} by {best_s}) = {target:.4f}"),
            ("best expected", expected, f"{MARGIN} x the grid's best mean over seeds = {expected:.4f} (a config as good "
             "as the best known one on average, not one lucky seed)")):
        print(f"  target, {label}: {why}")
        stats = {s: strategy_stats(rs, tgt, fte) for s, rs in runs.items() if rs}
        print_table(stats, strategies, seeds)
        summary, ratio = summary_line(task_name, stats)
        if ratio:
            print(f"  {ratio}")
        for variant in [v for v in stats if v in VARIANTS and v != "tunekit"]:
            _, vratio = summary_line(task_name, {**{k: v for k, v in stats.items() if k in PEERS}, "tunekit": stats[variant]})
            if vratio:
                print(f"  {variant}: {vratio}")
        line += f"{summary} [target {label}]\n"
    print(per_update_line(runs))
    print()
    return line


def per_update_line(runs: dict[str, list[Run]]) -> str:
    """tunekit's seconds per update against the peers' loop at the same batch (complete trials, medians),
    and how its predicted seconds compare with those measured: the seconds columns compare only if
    both train the same way."""
    def per_update(strategies: list[str]) -> dict[int, float]:
        by: dict[int, list[float]] = {}
        for s in strategies:
            for r in runs.get(s, []):
                for t in r["trials"]:
                    if t["state"] == "COMPLETE" and t.get("updates") and t.get("batch"):
                        by.setdefault(int(t["batch"]), []).append(t["seconds"] / t["updates"])
        return {b: statistics.median(v) for b, v in by.items()}

    tk, peers = per_update(["tunekit"]), per_update([s for s in runs if s in PEERS])
    common = sorted(set(tk) & set(peers))
    if not common:
        return "  per-update time: no batch shared by tunekit's and the peers' complete trials"
    cells = ", ".join(f"batch {b}: {tk[b] * 1e3:.2f} / {peers[b] * 1e3:.2f} ms = {tk[b] / peers[b]:.3f}" for b in common)
    pred = [t["predicted_seconds"] / t["seconds"] for r in runs.get("tunekit", []) for t in r["trials"]
            if t["state"] == "COMPLETE" and t.get("predicted_seconds") and t.get("seconds")]
    said = f"; tunekit's predicted / measured trial seconds: median {statistics.median(pred):.2f}" if pred else ""
    return (f"  per-update time, tunekit / peers' loop (incl. evaluations; runs made at other times, under other load: "
            f"--per-update times them interleaved): {cells}{said}")


# --- per-update time, interleaved ------------------------------------------------------------


def _peer_trials(task: tunekit.Task, params: dict[str, Any], budget: int, n: int) -> list[float]:
    """Seconds per update of ``n`` trials at ``params`` through the peers' loop (optuna_sh's: an
    in-memory study, a report and a pruning check at each evaluation)."""
    import optuna

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    study = optuna.create_study(direction="minimize", pruner=optuna.pruners.SuccessiveHalvingPruner())
    out = []
    for _ in range(n):
        trial = study.ask()
        batch, updates = int(params["batch_size"]), max(1, budget // int(params["batch_size"]))

        def report(step: int, metrics: dict[str, float]) -> None:
            if step < updates:
                trial.report(float(metrics["loss"]), step * batch)
                trial.should_prune()  # asked as a peer asks; a lone trial at one config is never pruned

        t0 = time.perf_counter()
        result = train_trial(task, params, budget, 0, report)
        out.append((time.perf_counter() - t0) / max(1, result.updates))
        study.tell(trial, result.final_loss)
    return out


def _tunekit_trials(task: tunekit.Task, params: dict[str, Any], budget: int, n: int) -> list[float]:
    """Seconds per update of ``n`` trials at ``params`` through tunekit's own trial path (a space whose
    entries are all fixed: no probes; its SQLite study, rungs and reports as in any search)."""
    entries = {**params, "min_lr_ratio": 0.1}
    text = "".join(f"[{k}]\ntype = \"fixed\"\nvalue = {json.dumps(v)}\n" for k, v in entries.items())
    with tempfile.TemporaryDirectory(prefix="tk_per_update_") as out:
        space = Path(out) / "fixed.toml"
        space.write_text(text)
        r = tunekit.search(task, str(space), trials=n, budget=f"{budget}samples", seed=0, out=out,
                           backend=tunekit.Local(device="cpu"), probes=tunekit.ProbeSettings(memory_budget="1GiB"),
                           progress=False)
    return [t["seconds"] / t["updates"] for t in r.trials if t["state"] == "COMPLETE" and t.get("updates")]


def per_update_check(task_name: str, task: tunekit.Task, cache: Path, repeats: int = 9, n: int = 1) -> str:
    """tunekit's trial path against the peers' loop at the same config, the arms interleaved (the one
    first alternates) so that the machine's load falls on both: median seconds per update of each, and
    the median of the paired ratios, at the task's batch and at half and twice it."""
    grid = grid_means(lr_grid(task_name, task, cache, train=False))
    lr = min(grid, key=grid.get) if grid else float(task.defaults.get("lr") or 1e-3)
    budget, b0 = fte_of(task), int(task.batch_size or 32)
    cells = []
    for batch in (b for b in BATCHES if b0 // 2 <= b <= b0 * 2):
        params = {"lr": lr, "batch_size": batch, "warmup": 0.05, "weight_decay": 0.01, "schedule": "cosine"}
        tk, peer, ratios = [], [], []
        for r in range(repeats):
            arms = (_tunekit_trials, _peer_trials) if r % 2 == 0 else (_peer_trials, _tunekit_trials)
            got = {arm: arm(task, params, budget, n) for arm in arms}
            tk += got[_tunekit_trials]
            peer += got[_peer_trials]
            ratios.append(statistics.median(got[_tunekit_trials]) / statistics.median(got[_peer_trials]))
        cells.append(f"batch {batch}: {statistics.median(tk) * 1e3:.3f} / {statistics.median(peer) * 1e3:.3f} ms, "
                     f"paired ratio {statistics.median(ratios):.3f} (range {min(ratios):.3f}-{max(ratios):.3f})")
    return (f"{task_name}: per-update time, tunekit's trial path / the peers' loop, interleaved "
            f"({repeats} repeats x {n} trials an arm, lr {lr:g}):\n  " + "\n  ".join(cells))


def seed_spread(grid: dict[str, Any], lr: float) -> float:
    """(max - min) / mean of the final losses over the grid's seeds at one LR."""
    finals = [v for k, v in grid["points"].items() if v is not None and math.isclose(float(k.split("/")[0]), lr, rel_tol=1e-4)]
    return (max(finals) - min(finals)) / statistics.fmean(finals) if len(finals) > 1 else math.nan


def strategy_stats(runs: list[Run], target: float, fte: int) -> dict[str, float]:
    to_target = [samples_to_target(r, target) / fte for r in runs]
    spent = [samples_spent(r) / fte for r in runs]
    extra = {}
    for cost in ("updates", "seconds"):
        to = [samples_to_target(r, target, cost) for r in runs]
        extra[cost] = median(to)
        extra[f"{cost}_spent"] = median([v if math.isfinite(v) else samples_spent(r, cost) for v, r in zip(to, runs)])
    return {
        **extra,
        "n": len(runs),
        "reached": sum(math.isfinite(v) for v in to_target),
        "median": median(to_target),
        "spent_median": median([v if math.isfinite(v) else s for v, s in zip(to_target, spent)]),
        "wall": median([r["seconds"] for r in runs]),
        "pruned": median([sum(t["state"] == "PRUNED" for t in r["trials"]) for r in runs]),
        "failed": median([sum(t["state"] == "FAIL" for t in r["trials"]) for r in runs]),
    }


def print_table(stats: dict[str, dict[str, float]], strategies: list[str], seeds: int) -> None:
    print("  (to target: medians over seeds, probes included; updates = optimizer updates; device s = the trials' "
          "and probes' measured seconds; wall s leaves out Ray's start-up, once a process)")
    print(f"  {'strategy':<14} {'FTE to target':>13} {'misses as spent':>16} {'updates':>8} {'device s':>9} "
          f"{'reached':>8} {'wall s':>7} {'pruned':>7} {'failed':>7}")
    for s in strategies:
        st = stats.get(s)
        if st is None:
            print(f"  {s:<14} {'(no cached runs)':>13}")
            continue
        missed = ">=" if st["reached"] < st["n"] else ""
        print(f"  {s:<14} {st['median']:>13.2f} {missed + format(st['spent_median'], '.2f'):>16} "
              f"{st['updates']:>8.0f} {st['seconds']:>9.1f} "
              f"{str(st['reached']) + '/' + str(st['n']):>8} {st['wall']:>7.1f} {st['pruned']:>7.0f} {st['failed']:>7.0f}"
              + (f"   ({seeds - st['n']} seeds not cached)" if st["n"] < seeds else ""))


def summary_line(task_name: str, stats: dict[str, dict[str, float]]) -> tuple[str, str]:
    """(the task's summary line, the tunekit / best-peer ratio line or "")."""
    peers = {s: st for s, st in stats.items() if s in PEERS}
    if not peers:
        return f"{task_name}: no peer runs cached", ""
    best_peer = min(peers, key=lambda s: (peers[s]["median"], peers[s]["spent_median"]))
    bp = peers[best_peer]
    peer_text = f"best peer {best_peer} {bp['median']:.2f} FTE ({bp['reached']}/{bp['n']} reached)"
    if "tunekit" not in stats:
        why = "no cached runs" if tunekit_has_budget() else "skipped: tunekit.search has no budget parameter"
        return f"{task_name}: tunekit n/a ({why}); {peer_text}", ""
    tk = stats["tunekit"]
    ratio = ratio_text(tk, bp)
    costs = ", ".join(f"{cost} {_cost_ratio(tk, peers, cost)}" for cost in ("updates", "seconds"))
    return (f"{task_name}: tunekit / best peer samples to target {ratio}; {costs}; "
            f"tunekit {tk['median']:.2f} FTE ({tk['reached']}/{tk['n']} reached), {peer_text}",
            f"tunekit / {best_peer} (median samples to target): {ratio}; tunekit / best peer in {costs}")


def _cost_ratio(tk: dict[str, float], peers: dict[str, dict[str, float]], cost: str) -> str:
    """tunekit's median ``cost`` to target over the best peer's in that cost (the peer may differ by cost)."""
    finite = {s: st[cost] for s, st in peers.items() if math.isfinite(st[cost])}
    if not finite or not math.isfinite(tk[cost]):
        return "n/a"
    best = min(finite, key=lambda s: finite[s])
    return f"{tk[cost] / finite[best]:.3f} (vs {best})"


# --- short-horizon bias -------------------------------------------------------------------


def horizon(task_name: str, task: tunekit.Task, cache: Path, train: bool) -> None:
    """How well a trial's loss at the k-th of 8 evaluations ranks its final loss, on samples.

    12 configs around the grid's best LR (x 1/10, 1/3, 1, 3) at three batches (half, the
    task's, double; the same samples each), seed 0: the rank correlation (Spearman) of the
    loss at each evaluation with the final loss, and whether the best final config would
    survive a cut to the best third there (what a rung with reduction factor 3 does).
    """
    path = cache / task_name / "horizon.json"
    curves = load_json(path)
    if curves is None:
        if not train:
            return
        grid = lr_grid(task_name, task, cache, train=False)
        means = grid_means(grid)
        best_lr = min(means, key=lambda lr: means[lr])
        fte, b = fte_of(task), int(task.batch_size)
        curves = []
        for mult in (0.1, 1 / 3, 1.0, 3.0):
            for batch in (b // 2, b, 2 * b):
                params = {"lr": best_lr * mult, "batch_size": batch, "warmup": 0.05, "weight_decay": 0.01,
                          "schedule": "cosine"}
                r = train_trial(task, params, fte, seed=0)
                curves.append({"params": params, "evals": [e["loss"] for e in r.evals]})
        save_json(path, curves)
    finals = [c["evals"][-1] for c in curves]
    rank = lambda xs: [sorted(xs).index(x) for x in xs]  # noqa: E731
    best = finals.index(min(finals))
    cells = []
    for k in range(min(len(c["evals"]) for c in curves) - 1):
        at = [c["evals"][k] for c in curves]
        rho = _pearson(rank(at), rank(finals))
        kept = sorted(range(len(at)), key=lambda i: at[i])[: max(1, len(at) // 3)]
        cells.append(f"{k + 1}/8: {rho:.2f}{'' if best in kept else ' (best cut)'}")
    print(f"  short-horizon bias (rank correlation with the final loss, 12 configs): {', '.join(cells)}")


def _pearson(a: list[float], b: list[float]) -> float:
    ma, mb = statistics.fmean(a), statistics.fmean(b)
    cov = sum((x - ma) * (y - mb) for x, y in zip(a, b))
    return cov / math.sqrt(sum((x - ma) ** 2 for x in a) * sum((y - mb) ** 2 for y in b))


# --- main --------------------------------------------------------------------------------


def run_task(task_name: str, args: argparse.Namespace, seeds: int) -> None:
    """Train what the cache lacks for this task: the grid, then every (seed, strategy) run."""
    task = task_by_name(task_name)
    fte = fte_of(task)
    print(f"{task_name}: grid of {len(GRID_LRS)} LRs x {len(GRID_SEEDS)} seeds, then {seeds} seeds x "
          f"{', '.join(args.strategies)} at {args.trials} trials of {fte} samples", flush=True)
    lr_grid(task_name, task, args.cache, train=True)
    horizon(task_name, task, args.cache, train=True)
    for seed in range(seeds):
        for strategy in args.strategies:
            if load_run(args.cache, task_name, strategy, seed, args.trials, fte) is not None:
                continue
            if strategy in VARIANTS and not tunekit_has_budget():
                continue  # said once, in main
            run = run_strategy(strategy, task_name, task, fte, seed, args.trials)
            save_json(run_path(args.cache, task_name, strategy, seed, args.trials), run)
            states = [t["state"] for t in run["trials"]]
            print(f"  seed {seed} {strategy:<10} best {best_value(run):.4f}  spent {samples_spent(run) / fte:5.2f} FTE  "
                  f"pruned {states.count('PRUNED')} failed {states.count('FAIL')}  {run['seconds']:.1f} s"
                  + (f" (+ {run['ray_startup_seconds']:.1f} s Ray start-up)" if "ray_startup_seconds" in run else ""),
                  flush=True)


def parse_args() -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tasks", default=",".join(TASKS), help=f"comma-separated, from {', '.join(TASKS)}")
    ap.add_argument("--strategies", default=None, help="comma-separated, from " + ", ".join(STRATEGIES) + " (default: all)")
    ap.add_argument("--seeds", type=int, default=None, help="searches a (task, strategy); default 5, 3 for tiny_lm")
    ap.add_argument("--trials", type=int, default=24, help="trials a search")
    ap.add_argument("--cache", type=Path, default=DEFAULT_CACHE, help="folder of the cached runs and grids")
    ap.add_argument("--report", action="store_true", help="print the tables from the cache; train nothing")
    ap.add_argument("--per-update", action="store_true",
                    help="only time tunekit's trial path against the peers' loop, interleaved, and print the ratios")
    ap.add_argument("--quick", action="store_true",
                    help=f"a smoke run, not a figure: {QUICK_TASK}, 1 seed, 4 trials, tunekit, random and optuna_sh "
                    "(ray_asha only if --strategies names it), an LR grid of every other LR and one seed, in a "
                    "temporary folder")
    ap.add_argument("--variant", action="append", default=[], metavar="NAME=JSON",
                    help="also run tunekit with these search() settings, as strategy tunekit_NAME "
                    "(e.g. r1='{\"rungs\": 1}'; name it in --strategies)")
    args = ap.parse_args()
    for v in args.variant:
        name, _, kw = v.partition("=")
        VARIANTS[f"tunekit_{name}"] = json.loads(kw)
    if args.strategies is None:
        args.strategies = ",".join(s for s in STRATEGIES if not (args.quick and s == "ray_asha"))
    args.tasks = [t.strip() for t in args.tasks.split(",") if t.strip()]
    args.strategies = [s.strip() for s in args.strategies.split(",") if s.strip()]
    known_strategies = (*STRATEGIES, *[v for v in VARIANTS if v not in STRATEGIES])
    for kind, picked, known in (("task", args.tasks, TASKS), ("strategy", args.strategies, known_strategies)):
        bad = [p for p in picked if p not in known]
        if bad:
            ap.error(f"unknown {kind} {bad[0]!r}: use {', '.join(known)}")
    args.strategies = [s for s in known_strategies if s in args.strategies]  # a fixed column order
    if args.quick:
        global GRID_LRS, GRID_SEEDS
        args.tasks, args.seeds, args.trials = [QUICK_TASK], 1, 4
        args.cache = Path(tempfile.mkdtemp(prefix="tk_search_efficiency_"))
        GRID_LRS, GRID_SEEDS = GRID_LRS[::2], GRID_SEEDS[:1]
    return args


def main() -> None:
    args = parse_args()
    torch.set_num_threads(1)
    prepare_cache(args.cache)
    compute = ("compute: training samples drawn by every trial (pruned and failed ones included) and by tunekit's "
               "probes; 1 FTE = one full trial's samples\n")
    if "tunekit" in args.strategies and not tunekit_has_budget():
        print("tunekit arm skipped: tunekit.search has no `budget` parameter yet\n", flush=True)
    if args.per_update:
        with recorded() as out:
            for name in args.tasks:
                print(per_update_check(name, task_by_name(name), args.cache), flush=True)
        harness_report.write("search_efficiency_per_update", "Per-update time, tunekit's trial path against the "
                             "peers' loop", out.text(), quick=args.quick)
        return
    try:
        if not args.report:
            for name in args.tasks:
                run_task(name, args, args.seeds or DEFAULT_SEEDS[name])
            print()
        with recorded() as out:
            print(compute)
            summaries = [report_task(name, task_by_name(name), args.cache, args.seeds or DEFAULT_SEEDS[name],
                                     args.trials, args.strategies) for name in args.tasks]
            print()
            for line in summaries:
                print(line)
    finally:
        if "ray" in sys.modules:
            import ray

            ray.shutdown()
    harness_report.write("search_efficiency", f"Samples to a target loss, by search strategy ({args.trials} trials a "
                         "search)", out.text(), quick=args.quick)


if __name__ == "__main__":
    main()
