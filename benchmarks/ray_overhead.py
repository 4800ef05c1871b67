"""What does running trials on Ray Tune cost, next to the local backend?

The same search (the same trials: `shapes`, a fixed LR space, no early stopping,
TPE) runs on the local backend and on the Ray backend, with trials sized to
last about one second each. For each backend:

- wall time of the trial phase: the search's own time, without Ray's start-up
  (ray.init, timed separately, once per process or cluster) and without the
  result files;
- trial time: the sum of the trials' own training time, measured inside each
  trial (the task built, the model trained and evaluated);
- per-trial scheduling overhead: the mean gap between one trial's end (the
  study told) and the next trial's start (its training begun), over the one
  trial at a time runs, from the second trial on, over the mean trial time. It
  is what each further trial pays: asking the sampler, placing the trial,
  resetting a reused worker, reporting, telling the study;
- start-up: the time to the first trial's start (for Ray: the first worker
  process started and tunekit and torch imported in it), paid once a search;
  ray.init is timed apart, paid once a process or cluster;
- end-to-end: Ray's wall time over the local backend's, the same search.

It also watches the driver's memory (RSS) over a longer run of short trials:
it should stay flat as trials finish.

    python -m benchmarks.ray_overhead [--trials 20] [--target-seconds 1.0] [--memory-trials 60]
    python -m benchmarks.ray_overhead --quick   # 3 trials of about 0.2 s, one at a time only, 4 memory
                                                # trials: a smoke run

The tables are written to benchmarks/data/ray_overhead_report.txt (a quick run's to a temporary folder).
Ray runs on loopback, with an auth token of this process's own (nothing written to ~/.ray).
"""

from __future__ import annotations

import argparse
import logging
import os
import secrets
import statistics
import tempfile
import threading
import time
from pathlib import Path

import torch

from benchmarks._common import recorded  # noqa: E402
from benchmarks.harness import report  # noqa: E402

import tunekit  # noqa: E402

SPACE = """
description = "fixed-LR space for the overhead benchmark"
[lr]
type = "float"
log = true
low = 1e-3
high = 3e-2
"""


def steps_for(seconds: float) -> int:
    """Updates of `shapes` that take about `seconds` here, evaluation included."""
    task = tunekit.load_task("shapes")
    tunekit.train(task, lr=3e-3, run_steps=10, device="cpu")  # warm-up
    t0 = time.perf_counter()
    tunekit.train(task, lr=3e-3, run_steps=60, eval_every=60, device="cpu")
    per = (time.perf_counter() - t0) / 60
    return max(10, int(round(seconds / per)))


def run(backend: str, space: Path, trials: int, steps: int, concurrent: int, cpus: float) -> dict[str, float]:
    chosen = (tunekit.Ray(device="cpu", cpus_per_trial=cpus, max_concurrent=concurrent) if backend == "ray"
              else tunekit.Local(device="cpu"))
    t0 = time.time()
    r = tunekit.search("shapes", str(space), trials=trials, budget=f"{steps}updates", pruner=tunekit.NoPruning(evals=1),
                       backend=chosen, seed=0)
    done = sorted((t for t in r.trials if t["state"] == "COMPLETE"), key=lambda t: t["finished"])
    assert len(done) == trials, [t["state"] for t in r.trials]
    # A trial's start: its end (the study told) less its own training time.
    starts = [t["finished"] - t["seconds"] for t in done]
    gaps = [starts[k] - done[k - 1]["finished"] for k in range(1, len(done))]
    return {"wall": r.seconds, "train": sum(t["seconds"] for t in done), "n": len(done),
            "trial": statistics.mean(t["seconds"] for t in done[1:]), "gap": statistics.mean(gaps),
            "startup": starts[0] - t0}


class RSSWatch:
    """Samples this process's resident memory every 0.2 s."""

    def __init__(self) -> None:
        import psutil

        self.proc, self.samples, self.stop = psutil.Process(), [], threading.Event()
        self.thread = threading.Thread(target=self._loop, daemon=True)

    def _loop(self) -> None:
        while not self.stop.is_set():
            self.samples.append((time.perf_counter(), self.proc.memory_info().rss))
            time.sleep(0.2)

    def __enter__(self) -> "RSSWatch":
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        self.thread.join()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--trials", type=int, default=20)
    ap.add_argument("--target-seconds", type=float, default=1.0)
    ap.add_argument("--memory-trials", type=int, default=60)
    ap.add_argument("--quick", action="store_true",
                    help="3 trials of about 0.2 s, one at a time only (no row of as many trials as cores), "
                    "4 memory trials: a smoke run, not a figure")
    args = ap.parse_args()
    if args.quick:
        args.trials, args.target_seconds, args.memory_trials = 3, 0.2, 4
    torch.set_num_threads(1)
    os.environ["RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"] = "0"
    if not (os.environ.get("RAY_AUTH_TOKEN") or os.environ.get("RAY_AUTH_TOKEN_PATH")):
        # A local Ray with token auth writes ~/.ray/auth_token unless given one: a token of this process's
        # own, inherited by its workers, keeps auth on and writes nothing.
        os.environ["RAY_AUTH_TOKEN"] = secrets.token_hex(32)
    with recorded() as out:
        measure(args)
    report.write("ray_overhead", "Trials on Ray Tune against the local backend", out.text(), quick=args.quick)


def measure(args: argparse.Namespace) -> None:
    steps = steps_for(args.target_seconds)
    print(f"task shapes, {steps} updates a trial (about {args.target_seconds:g} s here), {args.trials} trials, no pruning\n")

    import ray

    t0 = time.perf_counter()
    ray.init(address="local", num_cpus=os.cpu_count(), include_dashboard=False, log_to_driver=False, logging_level=logging.ERROR)
    startup = time.perf_counter() - t0
    with tempfile.TemporaryDirectory() as tmp:
        space = Path(tmp) / "fixed.toml"
        space.write_text(SPACE)
        # --quick: trials one at a time only (each further Ray worker process costs seconds to start).
        ncpu = 1 if args.quick else os.cpu_count() or 1
        rows = []
        # The local backend runs one trial at a time in this process: compare it with one Ray trial at a time.
        configs = [("local", "local", 1), ("ray, 1 at a time", "ray", 1)]
        if ncpu > 1:
            configs.append((f"ray, {ncpu} at a time", "ray", ncpu))
        for name, backend, conc in configs:
            m = run(backend, space, args.trials, steps, conc, 1)
            rows.append((name, conc, m))
            print(f"  {name:<18} wall {m['wall']:7.2f} s, trials {m['train']:7.2f} s, start-up {m['startup']:5.2f} s",
                  flush=True)

        print(f"\nray.init (once a process): {startup:.1f} s")
        print(f"{'backend':<20} {'wall s':>7} {'trials s':>9} {'s/trial':>8} {'start-up s':>11} {'gap ms':>7} {'overhead/trial':>15}")
        for name, conc, m in rows:
            # Gaps mean something only when trials follow one another.
            gap, per = (f"{m['gap'] * 1000:.1f}", f"{m['gap'] / m['trial']:.1%}") if conc == 1 else ("-", "-")
            print(f"{name:<20} {m['wall']:>7.2f} {m['train']:>9.2f} {m['trial']:>8.2f} {m['startup']:>11.2f} "
                  f"{gap:>7} {per:>15}")
        local, ray1 = rows[0][2], rows[1][2]
        print(f"\nRay wall / local wall, same search, one trial at a time: {ray1['wall'] / local['wall']:.3f} "
              f"(start-up included; without it {(ray1['wall'] - ray1['startup']) / (local['wall'] - local['startup']):.3f})")
        if ncpu > 1:
            print(f"Ray wall / local wall, {ncpu} trials at a time on {ncpu} cores: {rows[2][2]['wall'] / local['wall']:.3f}")
        print(f"per-trial scheduling overhead on {ray1['trial']:.2f} s trials (Ray, 1 at a time): "
              f"{ray1['gap'] / ray1['trial']:.1%} (target < 10%); local backend: {local['gap'] / local['trial']:.1%}")

        # Driver memory across many short trials.
        with RSSWatch() as watch:
            run("ray", space, args.memory_trials, 10, ncpu, 1)
        s = watch.samples
        if len(s) >= 6:
            t_start, t_end = s[0][0], s[-1][0]
            at = lambda frac: max(rss for t, rss in s if t <= t_start + frac * (t_end - t_start)) / 2**20  # noqa: E731
            print(f"\ndriver RSS over {args.memory_trials} short Ray trials: peak by 1/3 of the run {at(1 / 3):.0f} MiB, "
                  f"by 2/3 {at(2 / 3):.0f} MiB, at the end {at(1.0):.0f} MiB "
                  f"(growth over the last 2/3: {at(1.0) - at(1 / 3):+.0f} MiB)")
    ray.shutdown()


if __name__ == "__main__":
    main()
