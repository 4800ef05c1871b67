"""Three workers on one PostgreSQL study against one process: the same trials.

A real PostgreSQL 16 (pgserver's binaries, on a Unix socket in a temporary folder) holds the
study. Three `tunekit search --storage URL --study NAME` processes start together on a fresh
database (so the first of them creates the study and runs the probes, the others join), and
run the same search as one process on its own SQLite study: a fixed-LR-range space, no early
stopping, trials of about a second whose training sleeps a little each update (so that the
workers, on a machine of few cores, measure the coordination and not the contention for CPU).

Figures:
- trials per worker, duplicates (two usable trials with the same params), usable trials
  against the requested count, trials left RUNNING;
- per-trial overhead: a trial's wall time in the study (start to end) minus its own training
  time, plus the gap from a worker's trial end to its next trial start; shared against one;
- with one worker SIGKILLed mid-trial: the time from the kill to the start of the dead trial's
  re-run, and the same counts. The survivors are on the same machine, so they see at once
  that its process is gone;
- with one worker frozen mid-trial (SIGSTOP: its process lives, its heartbeat stops, as with
  a hung or cut-off machine): the same, found by the heartbeat's grace period G alone.

    python -m benchmarks.shared_study [--trials 12] [--grace 5]
    python -m benchmarks.shared_study --quick   # the run with a worker SIGKILLed only, 6 trials: a smoke run

The figures are written to benchmarks/data/shared_study_report.txt (a quick run's to a temporary folder).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Optional

from benchmarks._common import recorded  # noqa: E402
from benchmarks.harness import report  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
SPACE = """
description = "fixed-LR space for the shared-study benchmark"
[lr]
type = "float"
log = true
low = 1e-3
high = 1e-1
"""


def make_task(config: dict[str, Any] | None = None) -> Any:
    """A small regression whose updates sleep 20 ms: a trial of 40 updates lasts about a second."""
    import torch
    from torch import nn

    from tunekit import Task

    g = torch.Generator().manual_seed(0)
    x, w = torch.randn(320, 8, generator=g), torch.randn(8, 1, generator=g)
    y = x @ w + 0.1 * torch.randn(320, 1, generator=g)
    data = torch.utils.data.TensorDataset(x[:256], y[:256])
    val = torch.utils.data.TensorDataset(x[256:], y[256:])

    def compute(model: nn.Module, batch: Any) -> torch.Tensor:
        time.sleep(0.02)
        return nn.functional.mse_loss(model(batch[0]), batch[1])

    return Task(model=lambda: nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 1)), train_data=data,
                val_data=val, compute_loss=compute, batch_size=16, name="sleepy")


def _args(space: Path, trials: int, extra: list[str]) -> list[str]:
    return [sys.executable, "-m", "tunekit", "search", "--task", f"{Path(__file__).resolve()}:make_task",
            "--space", str(space), "--trials", str(trials), "--max-steps", "40", "--no-prune", "--device", "cpu",
            "--quiet", *extra]


def _popen(cmd: list[str], cwd: Path) -> subprocess.Popen[bytes]:
    env = dict(os.environ, OMP_NUM_THREADS="1", MPLBACKEND="Agg", PYTHONPATH=str(ROOT))
    return subprocess.Popen(cmd, cwd=cwd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                            start_new_session=True)


def _study(url: str, name: str) -> Any:
    import optuna

    from tunekit.hpsearch.study import make_storage

    return optuna.load_study(study_name=name, storage=make_storage(url, None))


def figures(url: str, name: str, trials: int) -> dict[str, Any]:
    from tunekit.hpsearch.study import excluded

    study = _study(url, name)
    skip = excluded(study)
    usable = [t for t in study.trials if t.state.is_finished() and t.number not in skip]
    per: dict[str, list[Any]] = {}
    for t in usable:
        w = t.user_attrs.get("worker", {})
        per.setdefault(f"{w.get('host')}:{w.get('pid')}", []).append(t)
    overheads, gaps = [], []
    for ts in per.values():
        ts.sort(key=lambda t: t.datetime_start)
        overheads += [(t.datetime_complete - t.datetime_start).total_seconds() - float(t.user_attrs["seconds"]) for t in ts]
        gaps += [(b.datetime_start - a.datetime_complete).total_seconds() for a, b in zip(ts, ts[1:])]
    configs = [json.dumps(t.params, sort_keys=True) for t in usable]
    return {"usable": len(usable), "requested": trials, "duplicates": len(configs) - len(set(configs)),
            "running_left": sum(t.state.name == "RUNNING" for t in study.trials),
            "per_worker": sorted((len(v) for v in per.values()), reverse=True),
            "overhead_s": statistics.mean(overheads) + (statistics.mean(gaps) if gaps else 0.0),
            "train_s": statistics.mean(float(t.user_attrs["seconds"]) for t in usable)}


def run_single(tmp: Path, space: Path, trials: int) -> dict[str, Any]:
    out = tmp / "single"
    t0 = time.perf_counter()
    p = _popen(_args(space, trials, ["--out", str(out), "--study", "one"]), tmp)
    _, err = p.communicate()
    assert p.returncode == 0, err.decode()[-2000:]
    return {**figures(f"sqlite:///{out / 'study.db'}", "one", trials), "wall_s": time.perf_counter() - t0}


def run_shared(tmp: Path, space: Path, trials: int, url: str, name: str, kill: str, grace: int) -> dict[str, Any]:
    extra = ["--storage", url, "--study", name, "--heartbeat-grace", str(grace)]
    t0 = time.perf_counter()
    procs = [_popen(_args(space, trials, [*extra, "--out", str(tmp / f"{name}{i}")]), tmp) for i in range(3)]
    killed: dict[str, Any] = {}
    if kill:
        killed = _kill_mid_trial(url, name, procs[0], signal.SIGKILL if kill == "kill" else signal.SIGSTOP)
    for p in procs[1 if kill else 0:]:
        _, err = p.communicate()
        assert p.returncode == 0, err.decode()[-2000:]
    res = {**figures(url, name, trials), "wall_s": time.perf_counter() - t0}
    if kill == "freeze":
        os.killpg(procs[0].pid, signal.SIGKILL)
        procs[0].wait()
    if kill:
        study = _study(url, name)
        rerun = [t for t in study.trials if t.user_attrs.get("tunekit_retry_of") == killed["number"] and t.datetime_start]
        res["recovery_s"] = rerun[0].datetime_start.timestamp() - killed["at"] if rerun else None
        res["reason"] = study.user_attrs.get(f"tunekit_stopped:{killed['number']}")
    return res


def _kill_mid_trial(url: str, name: str, victim: subprocess.Popen[bytes], sig: int) -> dict[str, Any]:
    """Send ``sig`` to ``victim`` once it trains a trial; (that trial's number, when)."""
    deadline = time.time() + 300
    while time.time() < deadline:
        try:
            running = [t for t in _study(url, name).trials if t.state.name == "RUNNING" and t.params
                       and t.user_attrs.get("worker", {}).get("pid") == victim.pid]
        except KeyError:  # the study is not there yet
            running = []
        if running:
            time.sleep(0.3)  # into its training
            os.killpg(victim.pid, sig)
            if sig == signal.SIGKILL:
                victim.wait()
            return {"number": running[0].number, "at": time.time()}
        time.sleep(0.1)
    raise AssertionError("the victim never started a trial")


class Postgres:
    """A PostgreSQL of pgserver's binaries, on a Unix socket in a temporary folder, while the ``with`` lasts:
    ``url(db)`` a fresh database's URL, ``restart()`` a fast restart (connections cut)."""

    def __init__(self, max_connections: Optional[int] = None) -> None:
        self.max_connections = max_connections

    def __enter__(self) -> "Postgres":
        import pgserver

        self.data = tempfile.mkdtemp(prefix="tunekit-pg-")
        self.srv = pgserver.get_server(self.data, cleanup_mode="stop")
        self.uri = self.srv.get_uri()
        if self.max_connections:
            self._sql(f"ALTER SYSTEM SET max_connections = {self.max_connections}")
            self.restart()
        return self

    def _sql(self, statement: str) -> None:
        import psycopg

        with psycopg.connect(self.uri, autocommit=True) as conn:
            conn.execute(statement)

    def url(self, db: str) -> str:
        self._sql(f"CREATE DATABASE {db}")
        return self.uri.replace("/postgres?", f"/{db}?")

    def restart(self) -> None:
        import pgserver

        pgserver.pg_ctl(["-w", "-m", "fast", "restart"], pgdata=self.srv.pgdata, user=self.srv.system_user, timeout=60)

    def __exit__(self, *exc: Any) -> None:
        import pgserver

        # After a restart pgserver no longer takes the server for its own, and its cleanup leaves it running.
        with contextlib.suppress(Exception):
            pgserver.pg_ctl(["-w", "-m", "fast", "stop"], pgdata=self.srv.pgdata, user=self.srv.system_user, timeout=60)
        self.srv.cleanup()
        shutil.rmtree(self.data, ignore_errors=True)


def _line(label: str, r: dict[str, Any]) -> str:
    extra = f", recovery {r['recovery_s']:.1f} s after the kill ({r['reason']})" if "recovery_s" in r else ""
    return (f"{label:<28} {r['usable']}/{r['requested']} usable, {r['duplicates']} duplicates, {r['running_left']} "
            f"left RUNNING, trials per worker {r['per_worker']}, train {r['train_s']:.2f} s/trial, overhead "
            f"{1000 * r['overhead_s']:.0f} ms/trial, wall {r['wall_s']:.1f} s{extra}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--trials", type=int, default=12)
    ap.add_argument("--grace", type=int, default=5, help="heartbeat grace period of the killed run (s)")
    ap.add_argument("--quick", action="store_true",
                    help="the run with a worker SIGKILLed only, 6 trials (no single process, no plain shared run, "
                    "no frozen worker): a smoke run, not a figure")
    a = ap.parse_args()
    if a.quick:
        a.trials = 6  # two a worker: the victim gets one to be killed in
    # --quick: the run with a worker SIGKILLed only (each run starts processes that take seconds to start).
    runs = [("shared", "", "3 workers, PostgreSQL"), ("killed", "kill", "3 workers, 1 SIGKILLed"),
            ("frozen", "freeze", f"3 workers, 1 frozen (grace {a.grace} s)")]
    if a.quick:
        runs = runs[1:2]
    with tempfile.TemporaryDirectory(prefix="tunekit-bench-") as tmp_s, Postgres() as pg:
        tmp = Path(tmp_s)
        (tmp / "space.toml").write_text(SPACE)
        urls = [pg.url(db) for db, _, _ in runs]
        single = None if a.quick else run_single(tmp, tmp / "space.toml", a.trials)
        got = {db: run_shared(tmp, tmp / "space.toml", a.trials, url, db[0], kill=kill, grace=a.grace)
               for (db, kill, _), url in zip(runs, urls)}
    with recorded() as out:
        if single is not None:
            print(_line("1 process, SQLite", single))
        for db, _, label in runs:
            print(_line(label, got[db]))
        if single is not None and "shared" in got:
            shared = got["shared"]
            print(f"per-trial overhead, shared / single: {shared['overhead_s'] / single['overhead_s']:.2f} "
                  f"({1000 * (shared['overhead_s'] - single['overhead_s']):+.0f} ms a trial, on trials of "
                  f"{single['train_s']:.2f} s)")
    report.write("shared_study", f"Three workers on one PostgreSQL study against one process ({a.trials} trials)",
                 out.text(), quick=a.quick)


if __name__ == "__main__":
    main()
