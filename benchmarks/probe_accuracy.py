"""How well does the probe predict a real step's peak memory, and the largest batch that fits?

Models (benchmarks/probe_models.py): an MLP, the `shapes` CNN, a 2-layer LSTM classifier, a
causal Transformer fed dict batches, and a deep pre-norm residual MLP without and with
activation checkpointing, in fp32 and bf16. For each, the probe runs under a stated budget
with headroom 0; its answer is the recommended batch. Then at 4 batch sizes (1/64, 1/8 and
1/2 of the recommended batch, and the recommended batch) three predictions of one step's
peak memory are set against a measurement:

* probe v2: the probe's final memory model (fake-tensor traces, calibrated on the real steps
  near the recommended batch that confirmed it);
* small: the probe before issue 14, calibrated on two real steps at batch 8 and 16 (the
  allocator timeline of PyTorch's profiler);
* naive: 16 bytes a parameter (weights, gradients, AdamW's two moments) plus the activations
  that the forward pass saves.

The measurement is one real step in a fresh subprocess: peak resident memory during the step
(VmHWM, reset just before it) minus the resident memory before it, with glibc's mmap threshold
pinned (MALLOC_MMAP_THRESHOLD_=65536) so that freed tensors go back to the OS, and the heap's
free pages handed back (malloc_trim) just before the step, as the probe measures its own steps.
Memory resident before the step (parameters, buffers, the batch) is subtracted from the
predictions too. On CUDA the measurement is torch.cuda.max_memory_allocated.

The instrument's resolution: a small step is measured a second time without malloc_trim.
Then free heap pages left by the warm-up absorb part of the step, and the two readings differ
by a few MiB whatever the model predicts (the bf16 CNN at batch 496: 18 MiB trimmed, 4-8 MiB
not). A point where they differ by more than the 5% target is below what RSS resolves; it is
listed, with both readings and the peak of PyTorch's CPU allocator (the profiler's count of
allocated bytes, what CUDA's max_memory_allocated counts on a GPU), and not scored.

Each probe runs in a fresh subprocess too, as a user's run would (without the pinned mmap
threshold: the probe pins it itself while it measures a step).

The true largest batch is searched with that measurement: the line through the measurements
at 1/2 and 1 of the recommended batch gives a first guess, then brackets of 0.3% are measured
until one batch fits and the next does not.

    python -m benchmarks.probe_accuracy [MODEL ...]   # every case, or only these models' (mlp, cnn, ...)
    python -m benchmarks.probe_accuracy --quick       # the fp32 MLP under 64 MiB only, at its recommended
                                                      # batch, one search step for the true largest: a smoke run

The tables are written to benchmarks/data/probe_accuracy_report.txt (a quick run's to a temporary folder).
"""

from __future__ import annotations

import argparse
import copy
import gc
import json
import math
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import torch
from torch.utils._pytree import tree_flatten

from benchmarks._common import recorded  # noqa: E402
from benchmarks.harness import report  # noqa: E402

import tunekit  # noqa: E402
from tunekit.bytesize import parse_bytes  # noqa: E402
from tunekit.inputs.data import BatchStream  # noqa: E402
from tunekit.probes.memory_trace import MemoryModel, PhaseFit, allocator_peak, calibrate, fit_memory_model, trace_step  # noqa: E402
from tunekit.training.step import TrainStep  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
# (model, precision, budget)
CASES = [("mlp", "fp32", "256MiB"), ("mlp", "bf16", "256MiB"), ("cnn", "bf16", "256MiB"),
         ("lstm", "bf16", "512MiB"), ("lstm", "fp32", "512MiB"), ("gpt", "fp32", "2GiB"), ("gpt", "bf16", "512MiB"),
         ("deep", "fp32", "512MiB"), ("deep_ckpt", "fp32", "256MiB")]
TARGET = 0.05
# A step that raises VmHWM by less than this is not measured: the warm-up step leaves kernel
# scratchpads and heap chunks resident that a small step reuses (the bf16 CNN reads 0 at batch 240).
MIN_MEASURABLE = 4 * 2**20
# Steps above this are large enough that the heap's slack is far below 5% of them: one reading.
RESOLVED_ABOVE = 256 * 2**20


def spec_of(name: str) -> str:
    return f"benchmarks.probe_models:{name}_task"


def _rss() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def _hwm() -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmHWM"):
                return int(line.split()[1]) * 1024
    raise RuntimeError("no VmHWM")


def measure(spec: str, batch: int, precision: str, device: str, trim: bool = True, alloc: bool = False) -> dict:
    """Run in the subprocess: one real step, its peak memory above what was resident before it
    (``alloc``: the peak of PyTorch's CPU allocator instead, as the profiler records it)."""
    torch.set_num_threads(1)
    dev = torch.device(device)
    task = tunekit.load_task(spec)
    model = task.make_model(0).to(dev)
    batches = BatchStream(task.train_data, batch, seed=0).take(1)
    # Warm-up on a copy: kernels, thread pools and allocator caches are not the step's memory.
    twin = copy.deepcopy(model)
    TrainStep(twin, task.optimizer(twin.parameters()), task.loss_computer(), device=dev, precision=precision)(batches)
    del twin
    gc.collect()
    step = TrainStep(model, task.optimizer(model.parameters()), task.loss_computer(), device=dev, precision=precision)
    if dev.type == "cuda":
        torch.cuda.synchronize()
        before = torch.cuda.memory_allocated(dev)
        torch.cuda.reset_peak_memory_stats(dev)
        step(batches)
        return {"measured": torch.cuda.max_memory_allocated(dev) - before}
    if alloc:
        return {"measured": allocator_peak(lambda: step(batches))}
    if trim:
        import ctypes

        ctypes.CDLL(None).malloc_trim(0)  # free heap pages go back, as the probe's own measurement does
    before = _rss()
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")  # reset VmHWM to the current RSS
    step(batches)
    return {"measured": _hwm() - before}


def measured(spec: str, batch: int, precision: str, device: str, trim: bool = True, alloc: bool = False) -> int:
    env = dict(os.environ, MALLOC_MMAP_THRESHOLD_="65536", OMP_NUM_THREADS="1", PYTHONPATH=str(ROOT))
    out = subprocess.run([sys.executable, __file__, "--child", spec, str(batch), precision, device, str(int(trim)),
                          str(int(alloc))],
                         capture_output=True, text=True, env=env, check=True)
    return int(json.loads(out.stdout.strip().splitlines()[-1])["measured"])


def resident(task: tunekit.Task, model: torch.nn.Module, batch: int) -> int:
    """Bytes resident before the step: parameters, buffers and the batch."""
    b0 = BatchStream(task.train_data, batch, seed=0).take(1)[0]
    tensors = [t for t in tree_flatten(b0)[0] if isinstance(t, torch.Tensor)]
    return (sum(p.numel() * p.element_size() for p in model.parameters())
            + sum(b.numel() * b.element_size() for b in model.buffers()) + sum(t.numel() * t.element_size() for t in tensors))


def small_model(task: tunekit.Task, precision: str, dev: torch.device) -> MemoryModel:
    """The probe before issue 14: traces at 8 and 16, two real steps there measured by the allocator timeline."""
    model = task.make_model(0).to(dev)
    mk = lambda m, o: TrainStep(m, o, task.loss_computer(), device=dev, precision=precision)  # noqa: E731
    traces = {b: trace_step(model, task.optimizer, mk, BatchStream(task.train_data, b, seed=0).take(1), dev) for b in (8, 16)}
    real = {}
    for b in (8, 16):
        twin = copy.deepcopy(model)
        step = mk(twin, task.optimizer(twin.parameters()))
        batches = BatchStream(task.train_data, b, seed=0).take(1)
        peak = allocator_peak(lambda: step(batches))
        if peak is not None:
            real[b] = peak
    return _calibrate_v1(fit_memory_model(traces), traces, real)


def _calibrate_v1(mm: MemoryModel, traces: dict, real: dict[int, int]) -> MemoryModel:
    """The calibration of the probe before issue 14: the extra memory as the line through the two points."""
    if len(real) < 2:
        return calibrate(mm, traces, real)
    (b1, b2) = sorted(real)[:2]
    e1, e2 = (real[b] - (max(traces[b].peaks.values()) - traces[b].resident) for b in (b1, b2))
    slope = (e2 - e1) / (b2 - b1)
    mm.extra = PhaseFit(float(e2 - slope * b2), float(slope))
    return mm


def small_peak(mm: MemoryModel, b: int) -> float:
    """As it predicted then: the extra memory never below zero."""
    top = max(f(b) for f in mm.phases.values())
    return top + (max(0.0, mm.extra(b)) if mm.extra is not None else 0.0)


def naive_peak(mm: MemoryModel, b: int) -> float:
    n_params = mm.static["params"] / 4  # fp32 master weights
    return 16 * n_params + mm.activations(b)


def true_largest(spec: str, precision: str, device: str, budget: int, total: Any, rec: int, half: int,
                 limit: int, max_runs: int = 8) -> tuple[int, int]:
    """(the largest batch whose measured total fits ``budget``, subprocess runs it took: at most ``max_runs``).

    ``total(b)`` is the measured peak plus the resident bytes, with the measurements at the
    recommended batch and half of it cached."""
    slope = (total(rec) - total(half)) / max(rec - half, 1)
    guess = min(limit, rec + int((budget - total(rec)) / max(slope, 1.0)))
    lo, hi, runs = 0, limit + 1, 0
    for b in (rec, guess):
        if b in (lo, hi):
            continue
        runs += b != rec
        lo, hi = (max(lo, b), hi) if total(b) <= budget else (lo, min(hi, b))
    while hi - lo > max(1, int(0.003 * lo)) and runs < max_runs:
        if lo == 0:
            b = hi // 2
        elif hi > limit:
            b = min(limit, int(lo * 1.05) + 1)
        else:
            b = (lo + hi) // 2 if runs >= 3 else min(hi - 1, lo + max(1, int(0.003 * lo)))
        runs += 1
        lo, hi = (max(lo, b), hi) if total(b) <= budget else (lo, min(hi, b))
    return lo, runs


def probe_case(name: str, precision: str, budget_text: str, device: str) -> dict[str, Any]:
    """Run in the subprocess: the probe, as a user's fresh process runs it, under the budget with headroom 0."""
    torch.set_num_threads(1)
    t0 = time.perf_counter()
    r = tunekit.probe(tunekit.load_task(spec_of(name)), memory_budget=budget_text, headroom=0.0, precision=precision,
                      device=device, throughput_points=0, noise_repeats=0)
    return {"result": json.loads(r.to_json()), "wall": time.perf_counter() - t0}


def probe_in_child(name: str, precision: str, budget_text: str, device: str) -> tuple[tunekit.ProbeResult, float]:
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONPATH=str(ROOT))
    out = subprocess.run([sys.executable, __file__, "--probe", name, precision, budget_text, device],
                         capture_output=True, text=True, env=env, check=True)
    got = json.loads(out.stdout.strip().splitlines()[-1])
    return tunekit.ProbeResult.from_json(json.dumps(got["result"])), got["wall"]


def run_case(name: str, precision: str, budget_text: str, device: str, divisors: tuple[int, ...] = (16, 4, 2, 1),
             max_runs: int = 8) -> dict[str, Any]:
    """The probe's answer, its predictions at the recommended batch over ``divisors`` against measurements,
    and the true largest batch (searched in at most ``max_runs`` measurements past the first ones)."""
    spec = spec_of(name)
    task = tunekit.load_task(spec)
    dev = torch.device(device)
    budget = parse_bytes(budget_text)
    r, wall = probe_in_child(name, precision, budget_text, device)
    model = task.make_model(0)
    small = small_model(task, precision, dev)
    cache: dict[int, int] = {}

    def meas(b: int) -> int:
        if b not in cache:
            cache[b] = measured(spec, b, precision, device)
        return cache[b]

    rec = r.max_batch
    points = sorted({max(1, rec // k) for k in divisors})
    rows: list[dict[str, Any]] = []
    unresolved: list[dict[str, Any]] = []
    for b in points:
        res = resident(task, model, b)
        m = meas(b)
        slack = measured(spec, b, precision, device, trim=False) if device == "cpu" and m < RESOLVED_ABOVE else m
        v2 = (r.predicted_peak(b) - res) / m
        if m < MIN_MEASURABLE or abs(slack / m - 1) > TARGET:
            counted = measured(spec, b, precision, device, alloc=True)
            unresolved.append({"batch": b, "measured": m, "untrimmed": slack, "v2": v2, "allocated": counted,
                               "v2_alloc": (r.predicted_peak(b) - res) / counted})
            print(f"{name:<10} {precision:>5} {b:>7} {m / 2**20:>10.1f}MiB {v2:>9.3f}   (untrimmed {slack / 2**20:.1f}MiB: "
                  f"below what RSS resolves, not scored; allocated {counted / 2**20:.1f}MiB, ratio "
                  f"{unresolved[-1]['v2_alloc']:.3f})", flush=True)
            continue
        rows.append({"batch": b, "measured": m, "v2": v2,
                     "small": (small_peak(small, b) - res) / m, "naive": (naive_peak(small, b) - res) / m})
        print(f"{name:<10} {precision:>5} {b:>7} {m / 2**20:>10.1f}MiB {rows[-1]['v2']:>9.3f} {rows[-1]['small']:>9.3f} "
              f"{rows[-1]['naive']:>9.3f}{'  <- recommended' if b == rec else ''}", flush=True)
    limit = r.dataset_size or rec
    true, runs = true_largest(spec, precision, device, budget, lambda b: meas(b) + resident(task, model, b),
                              rec, max(1, rec // 2), limit, max_runs)
    small_pred = small.largest_batch(budget, limit)
    return {"name": name, "precision": precision, "budget": budget_text, "rows": rows, "unresolved": unresolved,
            "rec": rec, "true": true,
            "small_rec": small_pred, "real_steps": r.real_steps, "samples": r.samples, "wall": wall, "runs": runs,
            "capped": rec == limit}


def summary(cases: list[dict[str, Any]]) -> None:
    print(f"\n{'model':<10} {'prec':>5} {'budget':>7} | {'worst |ratio-1|: v2':>19} {'small':>7} {'naive':>7} | "
          f"{'largest: probe':>14} {'true':>7} {'err':>7} {'small':>7} {'err':>7} | {'steps':>5} {'wall':>6}")
    for c in cases:
        worst = {arm: max(abs(row[arm] - 1) for row in c["rows"]) for arm in ("v2", "small", "naive")}
        err = c["rec"] / c["true"] - 1
        serr = c["small_rec"] / c["true"] - 1
        print(f"{c['name']:<10} {c['precision']:>5} {c['budget']:>7} | {worst['v2']:>19.3f} {worst['small']:>7.3f} "
              f"{worst['naive']:>7.3f} | {c['rec']:>14} {c['true']:>7} {err:>+7.3f} {c['small_rec']:>7} {serr:>+7.3f} | "
              f"{c['real_steps']:>5} {c['wall']:>5.1f}s" + ("  (capped by the dataset)" if c["capped"] else ""))
    for arm in ("v2", "small", "naive"):
        errs = [abs(row[arm] - 1) for c in cases for row in c["rows"]]
        print(f"peak error, {arm:<5}: median {statistics.median(errs):.3f}, worst {max(errs):.3f} over {len(errs)} points"
              + (f" (target <= {TARGET})" if arm == "v2" else ""))
    left = [(c["name"], c["precision"], u) for c in cases for u in c["unresolved"]]
    print(f"points below the instrument's resolution (not scored): {len(left)}" + "".join(
        f"\n  {n} {p} batch {u['batch']}: {u['measured'] / 2**20:.1f} MiB trimmed, {u['untrimmed'] / 2**20:.1f} MiB not; "
        f"v2 ratio {u['v2']:.3f} to the trimmed reading; PyTorch's allocator peak {u['allocated'] / 2**20:.1f} MiB, "
        f"v2 ratio {u['v2_alloc']:.3f} to it" for n, p, u in left))
    errs = [c["rec"] / c["true"] - 1 for c in cases]
    print(f"largest batch, probe v2: worst {max(abs(e) for e in errs):.3f} off the true largest, "
          f"{sum(e > 0 for e in errs)} of {len(errs)} above it (target: within {TARGET}, never above)")
    serrs = [c["small_rec"] / c["true"] - 1 for c in cases]
    print(f"largest batch, small:    worst {max(abs(e) for e in serrs):.3f}, {sum(e > 0 for e in serrs)} of {len(serrs)} above")
    print(f"real steps to calibrate and confirm: median {statistics.median(c['real_steps'] for c in cases)}, "
          f"max {max(c['real_steps'] for c in cases)} (target: median <= 3)")


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "--child":
        print(json.dumps(measure(sys.argv[2], int(sys.argv[3]), sys.argv[4], sys.argv[5], sys.argv[6] == "1",
                                 sys.argv[7] == "1")))
        return
    if len(sys.argv) > 1 and sys.argv[1] == "--probe":
        print(json.dumps(probe_case(*sys.argv[2:6])))
        return
    ap = argparse.ArgumentParser(prog="python -m benchmarks.probe_accuracy", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("models", nargs="*", help="only these models' cases")
    ap.add_argument("--quick", action="store_true",
                    help="the fp32 MLP under 64 MiB only, at its recommended batch, one search step for the true "
                    "largest (5 subprocesses): a smoke run")
    args = ap.parse_args()
    only = set(args.models)
    device = "cuda" if torch.cuda.is_available() else "cpu"
    torch.set_num_threads(1)
    cases = [c for c in CASES if not only or c[0] in only]
    kw: dict[str, Any] = {}
    if args.quick:
        cases, kw = [("mlp", "fp32", "64MiB")], {"divisors": (1,), "max_runs": 1}
    with recorded() as out:
        print(f"device: {device}; measurement: VmHWM delta in a subprocess, MALLOC_MMAP_THRESHOLD_=65536, heap "
              "trimmed before the step (as the probe measures); headroom 0\n")
        print(f"{'model':<10} {'prec':>5} {'batch':>7} {'measured':>13} {'v2 ratio':>9} {'small':>9} {'naive':>9}")
        t0 = time.perf_counter()
        summary([run_case(n, p, bud, device, **kw) for n, p, bud in cases])
        print(f"benchmark wall time {time.perf_counter() - t0:.0f}s")
    report.write("probe_accuracy", "The probe's memory predictions and largest batch against measured steps",
                 out.text(), quick=args.quick)


if __name__ == "__main__":
    main()
