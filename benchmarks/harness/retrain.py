"""A search's chosen configuration trained again at fresh seeds: what its best trial is worth in expectation.

A search's best final loss is the least of several noisy runs (one run's loss at the grid's best LR varies
by 16-135% of L* from seed to seed on this corpus), so "reached the target" counts lucky seeds as well as
good configurations. The user trains the configuration again; this trains the best trial's run again at
seeds no search used and reports the median. An LR-free peer's run is trained again the same way.
:func:`confirmed` measures what a search would gain by confirming its best few trials at extra seeds.
"""

from __future__ import annotations

import hashlib
import json
import math
import statistics
from pathlib import Path
from typing import Any, Optional

import tunekit

from benchmarks.harness import lr_free

Run = dict[str, Any]
SEEDS = (100, 101, 102, 103, 104)  # no search seed (0-9) nor grid seed (0-9) is among them
PEERS = ("random", "optuna_sh", "ray_asha")  # searches whose trials train through search_efficiency.train_trial
CONFIRM_SEEDS = (200, 201)  # the confirming runs' seeds: none of SEEDS, so the choice is judged on fresh runs
CONFIRM_TOP = 3


def ranked(run: Run) -> list[dict[str, Any]]:
    """The complete trials, least value first (equals in trial order)."""
    done = [t for t in run["trials"] if t["state"] == "COMPLETE" and t["value"] is not None]
    return sorted(done, key=lambda t: (t["value"], t.get("number") or 0))


def best_trial(run: Run) -> Optional[dict[str, Any]]:
    """The complete trial with the least value (the first of equals), None where none completed."""
    return next(iter(ranked(run)), None)


def final_loss(arm: str, task: tunekit.Task, trial: dict[str, Any], fte: int, seed: int, steps: int, batch: int) -> float:
    """``trial``'s run trained again at ``seed``, as its arm trained it; inf where it diverged."""
    from benchmarks import search_efficiency as se

    if arm in ("schedulefree", "prodigy"):
        value = lr_free.run(arm, task, steps, batch, seed)["trials"][0]["value"]
    elif arm in PEERS:  # its params through the peers' own training call
        value = se.train_trial(task, trial["params"], fte, seed).final_loss
    elif trial.get("config"):  # tunekit: the run its trial trained, as tunekit.train takes it
        value = tunekit.train(task, dict(trial["config"]), seed=seed, device="cpu", progress=False).final_loss
    else:
        raise ValueError(f"{arm}'s trial {trial.get('number')} carries no config: run the arm again "
                         "(benchmarks/search_efficiency.py keeps each trial's)")
    return float(value) if value is not None and math.isfinite(value) else math.inf


def key_of(trial: dict[str, Any]) -> str:
    """What the cached losses belong to: the trial's params and config."""
    blob = json.dumps([trial.get("params"), trial.get("config")], sort_keys=True, default=str)
    return hashlib.sha1(blob.encode()).hexdigest()[:16]


def losses(cache: Path, arm: str, name: str, seed: int, task: Any, trial: dict[str, Any], fte: int, steps: int,
           batch: int, seeds: tuple[int, ...], built: list[Any]) -> list[float]:
    """``trial``'s run trained again at ``seeds``, cached one file a configuration under ``cache``.
    ``task``: a callable that builds the task, called once (into ``built``) on the first miss."""
    path = cache / name / f"{arm}_seed{seed}_{key_of(trial)}.json"
    saved = json.loads(path.read_text()) if path.exists() else {}
    for s in seeds:
        if str(s) not in saved:
            if not built:
                built.append(task())
            saved[str(s)] = final_loss(arm, built[0], trial, fte, s, steps, batch)
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(json.dumps(saved, indent=1))
    return [saved[str(s)] for s in seeds]


def retrained(cache: Path, arm: str, name: str, seed: int, task: Any, run: Run, fte: int, steps: int,
              batch: int, seeds: tuple[int, ...] = SEEDS) -> Optional[float]:
    """The median over ``seeds`` of the best trial's run trained again; None where no trial completed."""
    trial = best_trial(run)
    if trial is None:
        return None
    return statistics.median(losses(cache, arm, name, seed, task, trial, fte, steps, batch, seeds, []))


def confirmed(cache: Path, arm: str, name: str, seed: int, task: Any, run: Run, fte: int, steps: int, batch: int,
              top: int = CONFIRM_TOP, extra: tuple[int, ...] = CONFIRM_SEEDS) -> tuple[Optional[float], int]:
    """What confirming would choose: of the ``top`` best complete trials, the one with the least mean of its
    value and its runs at ``extra`` seeds; returns that configuration's median over :data:`SEEDS` and the
    confirming runs' samples. (None, 0) where nothing completed."""
    done = ranked(run)[:top]
    if not done:
        return None, 0
    built: list[Any] = []
    means = [statistics.mean([t["value"], *losses(cache, arm, name, seed, task, t, fte, steps, batch, extra, built)])
             for t in done]
    chosen = done[min(range(len(done)), key=lambda j: means[j])]
    at = losses(cache, arm, name, seed, task, chosen, fte, steps, batch, SEEDS, built)
    return statistics.median(at), sum(int(t["samples"]) for t in done) * len(extra)
