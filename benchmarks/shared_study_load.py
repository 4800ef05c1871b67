"""Many workers on one PostgreSQL study, some killed and the database restarted under them (issue 24).

A real PostgreSQL (pgserver's binaries, on a Unix socket) holds one study created by `tunekit study
create`; W `tunekit worker` processes (default 32) join it. Its trials are short (40 updates that
sleep 20 ms: under a second of training), so the storage's traffic weighs. While they run, a tenth
of the workers are SIGKILLed at random times, and the database is restarted once (`pg_ctl -m fast
restart`: every connection cut, refused for a moment). The same trials then run in one process on
SQLite.

Figures: usable trials against those asked; duplicates (two usable trials with the same params);
trials left RUNNING once the workers are done; live trials failed (a FAIL whose worker was not
killed, surplus ones aside); workers that exited other than 0 (killed ones aside); and a trial's
time in the study beside its training (from asked to told, less the training's own seconds:
claiming, sampling, reporting, telling; on a machine of few cores, also the wait for a core), p50
and p99, against the one process.

    python -m benchmarks.shared_study_load [--workers 32] [--trials 96] [--grace 10]
    python -m benchmarks.shared_study_load --quick   # 2 workers, 4 trials, the chaos within 4 s, no single
                                                     # process: a smoke run

The figures are written to benchmarks/data/shared_study_load_report.txt (a quick run's to a temporary folder).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import random
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from benchmarks._common import recorded  # noqa: E402
from benchmarks.harness import report  # noqa: E402
from benchmarks.shared_study import ROOT, SPACE, Postgres, _popen, _study  # noqa: E402

TASK = f"{Path(__file__).resolve().parent / 'shared_study.py'}:make_task"


def _cli(*args: str) -> list[str]:
    return [sys.executable, "-m", "tunekit", *args]


def quantile(xs: list[float], q: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, max(0, math.ceil(q * len(xs)) - 1))] if xs else math.nan


def overheads(study: Any) -> list[float]:
    """Per usable trial: its time in the study (asked, claimed, sampled, trained, reported, told) less the
    training's own seconds: what the study's coordination and storage cost it."""
    from tunekit.hpsearch.study import excluded

    skip = excluded(study)
    return [(t.datetime_complete - t.datetime_start).total_seconds() - float(t.user_attrs.get("seconds", 0.0))
            for t in study.trials if t.state.is_finished() and t.number not in skip and t.datetime_complete
            and t.datetime_start and "seconds" in t.user_attrs]


def figures(study: Any, asked: int, killed: set[int]) -> dict[str, Any]:
    from tunekit.hpsearch.study import excluded

    skip = excluded(study)
    usable = [t for t in study.trials if t.state.is_finished() and t.number not in skip]
    configs = [json.dumps(t.params, sort_keys=True) for t in usable]
    false_fails = [t.number for t in study.trials if t.state.name == "FAIL"
                   and t.user_attrs.get("worker", {}).get("pid") not in killed
                   and not str(t.user_attrs.get("reason", "")).startswith("surplus")]
    waits = overheads(study)
    return {"usable": len(usable), "asked": asked, "complete": sum(t.state.name == "COMPLETE" for t in usable),
            "duplicates": len(configs) - len(set(configs)), "false_fails": false_fails,
            "running_left": sum(t.state.name == "RUNNING" for t in study.trials),
            "p50": quantile(waits, 0.5), "p99": quantile(waits, 0.99), "n_waits": len(waits)}


def run_single(tmp: Path, space: Path, trials: int) -> dict[str, Any]:
    import optuna

    out = tmp / "single"
    p = _popen(_cli("search", "--task", TASK, "--space", str(space), "--trials", str(trials), "--max-steps", "40",
                    "--no-prune", "--device", "cpu", "--quiet", "--out", str(out), "--study", "one"), tmp)
    _, err = p.communicate()
    assert p.returncode == 0, err.decode()[-2000:]
    study = optuna.load_study(study_name="one", storage=f"sqlite:///{out / 'study.db'}")
    return figures(study, trials, set())


def chaos(url: str, procs: list[subprocess.Popen[bytes]], n_kill: int, restart: Any, seed: int, after: int = 5,
          span: float = 20.0) -> dict[str, Any]:
    """Once ``after`` trials finish, SIGKILL ``n_kill`` random workers at random moments within ``span`` seconds
    and restart the database once, in its middle half."""
    rng = random.Random(seed)
    deadline = time.time() + 600
    while time.time() < deadline:
        try:
            done = sum(t.state.is_finished() for t in _study(url, "load").trials)
        except Exception:  # noqa: BLE001 - the study not there yet, or the database restarting
            done = 0
        if done >= after:
            break
        time.sleep(0.5)
    victims = rng.sample(procs, n_kill)
    events: list[tuple[float, str]] = ([(rng.uniform(0, span), "kill") for _ in victims]
                                       + [(rng.uniform(span / 4, 3 * span / 4), "restart")])
    start, killed, restarted = time.time(), set(), 0.0
    for at, what in sorted(events):
        time.sleep(max(0.0, start + at - time.time()))
        if what == "restart":
            t0 = time.time()
            restart()
            restarted = time.time() - t0
        else:
            v = victims.pop()
            if v.poll() is None:
                os.killpg(v.pid, signal.SIGKILL)
                v.wait()
                killed.add(v.pid)
    return {"killed": killed, "restart_s": restarted}


def run_shared(tmp: Path, space: Path, trials: int, workers: int, grace: int, url: str, restart: Any,
               chaos_kw: dict[str, Any] | None = None) -> dict[str, Any]:
    created = subprocess.run(_cli("study", "create", "--task", TASK, "--space", str(space), "--trials", str(trials),
                                  "--max-steps", "40", "--no-prune", "--device", "cpu", "--quiet", "--storage", url,
                                  "--study", "load", "--out", str(tmp / "created")),
                             cwd=tmp, capture_output=True, text=True,
                             env=dict(os.environ, OMP_NUM_THREADS="1", MPLBACKEND="Agg", PYTHONPATH=str(ROOT)))
    assert created.returncode == 0, created.stderr[-2000:]
    t0 = time.time()
    procs = [_popen(_cli("worker", "--storage", url, "--study", "load", "--heartbeat-grace", str(grace), "--threads",
                         "1", "--quiet"), tmp) for _ in range(workers)]
    box: dict[str, Any] = {}
    th = threading.Thread(target=lambda: box.update(chaos(url, procs, max(1, workers // 10), restart, 0,
                                                           **(chaos_kw or {}))))
    th.start()
    errors = {}
    for p in procs:
        _, err = p.communicate()
        errors[p.pid] = (p.returncode, err.decode()[-400:])
    th.join()
    wall = time.time() - t0
    bad_exits = {pid: e for pid, e in errors.items() if pid not in box["killed"] and e[0] != 0}
    res = figures(_study(url, "load"), trials, box["killed"])
    return {**res, "killed": len(box["killed"]), "restart_s": box["restart_s"], "bad_exits": bad_exits, "wall_s": wall}


def line(label: str, r: dict[str, Any]) -> str:
    extra = (f", {r['killed']} killed, database restarted ({r['restart_s']:.1f} s), "
             f"{len(r['bad_exits'])} other worker exits" if "killed" in r else "")
    return (f"{label:<34} {r['usable']}/{r['asked']} usable ({r['complete']} complete), {r['duplicates']} duplicates, "
            f"{r['running_left']} left RUNNING, {len(r['false_fails'])} live trials failed, time per trial beside "
            f"training p50 {1000 * r['p50']:.0f} ms, p99 {1000 * r['p99']:.0f} ms ({r['n_waits']} trials){extra}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--workers", type=int, default=32)
    ap.add_argument("--trials", type=int, default=96)
    ap.add_argument("--grace", type=int, default=10, help="heartbeat grace period (s)")
    ap.add_argument("--quick", action="store_true",
                    help="2 workers, 4 trials, grace 5 s, the kill and the restart within 4 s of the first trial's end, "
                    "and no single-process run: a smoke run, not a figure")
    a = ap.parse_args()
    chaos_kw: dict[str, Any] = {}
    if a.quick:
        a.workers, a.trials, a.grace = 2, 4, 5
        chaos_kw = {"after": 1, "span": 4.0}
    # Each worker holds a few connections (its trials, its heartbeat, its reaper): room for them all.
    with tempfile.TemporaryDirectory(prefix="tunekit-load-") as tmp_s, Postgres(max(200, 8 * a.workers)) as pg:
        tmp = Path(tmp_s)
        (tmp / "space.toml").write_text(SPACE)
        shared = run_shared(tmp, tmp / "space.toml", a.trials, a.workers, a.grace, pg.url("load"), pg.restart, chaos_kw)
        single = None if a.quick else run_single(tmp, tmp / "space.toml", a.trials)
    with recorded() as out:
        if single is not None:
            print(line("1 process, SQLite", single))
        print(line(f"{a.workers} workers, PostgreSQL", shared))
        for pid, (code, err) in shared["bad_exits"].items():
            print(f"  worker {pid} exited {code}: {err.strip().splitlines()[-1] if err.strip() else ''}")
        ok = (shared["usable"] == a.trials and shared["duplicates"] == 0 and shared["running_left"] == 0
              and not shared["false_fails"] and not shared["bad_exits"])
        ratio = f"{shared['p99'] / single['p99']:.1f}x" if single is not None else "n/a (no single-process run)"
        print(f"{'PASS' if ok else 'FAIL'}: exact N {shared['usable'] == a.trials}, 0 duplicates {shared['duplicates'] == 0}, "
              f"0 left RUNNING {shared['running_left'] == 0}, 0 live trials failed {not shared['false_fails']}, "
              f"no other worker exit {not shared['bad_exits']}; p99 per trial beside training, shared / single: "
              f"{ratio}; wall {shared['wall_s']:.0f} s")
    report.write("shared_study_load", f"{a.workers} workers on one PostgreSQL study, some killed, the database "
                 f"restarted ({a.trials} trials)", out.text(), quick=a.quick)


if __name__ == "__main__":
    main()
