"""How well does the probe's memory model predict a real step's peak memory?

For each model (an MLP, the `shapes` CNN, the `charlm` Transformer) and batch
size, the prediction (a trace on fake tensors at batch 8 and 16, extrapolated,
plus what two real steps at those sizes allocate inside kernels, as the probe does)
is compared with a real step measured in a fresh subprocess: peak resident
memory during the step (VmHWM, reset just before it) minus the resident memory
before it, with glibc's mmap threshold pinned (MALLOC_MMAP_THRESHOLD_=65536) so
that freed tensors go back to the OS. Memory resident before the step
(parameters, buffers, the batch) is subtracted from the prediction too. On CUDA
the comparison is against torch.cuda.max_memory_allocated.

Then the whole probe runs on each task under a budget: the real steps its
search for the largest batch took, and its wall time.

    python benchmarks/probe_accuracy.py
"""

from __future__ import annotations

import copy
import gc
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

import torch
from torch import nn
from torch.utils.data import TensorDataset

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import hardware  # noqa: E402

import tunekit  # noqa: E402
from tunekit.data import BatchStream  # noqa: E402
from tunekit.memory import calibrate, fit_memory_model, real_step_peak, trace_step  # noqa: E402
from tunekit.step import TrainStep  # noqa: E402


def mlp_task(config: dict | None = None) -> tunekit.Task:
    g = torch.Generator().manual_seed(0)
    x = torch.randn(8192, 784, generator=g)
    y = torch.randint(0, 10, (8192,), generator=g)
    return tunekit.Task(
        model=lambda: nn.Sequential(nn.Linear(784, 1024), nn.ReLU(), nn.Linear(1024, 1024), nn.ReLU(), nn.Linear(1024, 10)),
        train_data=TensorDataset(x, y), loss=nn.CrossEntropyLoss(), batch_size=64, name="mlp")


TASKS = {"mlp": "benchmarks.probe_accuracy:mlp_task", "shapes": "shapes", "charlm": "charlm"}
CASES = [("mlp", 64, "fp32"), ("mlp", 1024, "fp32"), ("mlp", 256, "bf16"),
         ("shapes", 256, "fp32"), ("shapes", 2048, "fp32"), ("shapes", 512, "bf16"),
         ("charlm", 64, "fp32"), ("charlm", 512, "fp32"), ("charlm", 64, "bf16")]


def _rss() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def _hwm() -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmHWM"):
                return int(line.split()[1]) * 1024
    raise RuntimeError("no VmHWM")


def measure(spec: str, batch: int, precision: str, device: str) -> dict:
    """Run in the subprocess: one real step, its peak memory above what was resident before it."""
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
    before = _rss()
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")  # reset VmHWM to the current RSS
    step(batches)
    return {"measured": _hwm() - before}


def predict(spec: str, batch: int, precision: str, device: str) -> float:
    dev = torch.device(device)
    task = tunekit.load_task(spec)
    model = task.make_model(0).to(dev)
    traces = {}
    for b in (8, 16):
        mk = lambda m, o: TrainStep(m, o, task.loss_computer(), device=dev, precision=precision)  # noqa: E731
        traces[b] = trace_step(model, task.optimizer, mk, BatchStream(task.train_data, b, seed=0).take(1), dev)
    mm = fit_memory_model(traces)
    # As the probe does: two small real steps (on a copy) calibrate what kernels allocate internally.
    real = {}
    for b in (8, 16):
        twin = copy.deepcopy(model)
        step = TrainStep(twin, task.optimizer(twin.parameters()), task.loss_computer(), device=dev, precision=precision)
        batches = BatchStream(task.train_data, b, seed=0).take(1)
        measured = real_step_peak(lambda: step(batches), dev)
        if measured is not None:
            real[b] = measured
    mm = calibrate(mm, traces, real)
    batch0 = BatchStream(task.train_data, batch, seed=0).take(1)[0]
    resident = mm.static["params"] + mm.static["buffers"] + sum(t.numel() * t.element_size() for t in batch0)
    return mm.peak(batch) - resident


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "--child":
        print(json.dumps(measure(*sys.argv[2:3], int(sys.argv[3]), sys.argv[4], sys.argv[5])))
        return
    device = "cuda" if torch.cuda.is_available() else "cpu"
    print(f"hardware: {hardware()}")
    print(f"device: {device}; CPU measurement: VmHWM delta in a subprocess, MALLOC_MMAP_THRESHOLD_=65536\n")
    print(f"{'model':<8} {'batch':>6} {'prec':>5} {'predicted':>12} {'measured':>12} {'ratio':>7}")
    env = dict(os.environ, MALLOC_MMAP_THRESHOLD_="65536", OMP_NUM_THREADS="1",
               PYTHONPATH=str(Path(__file__).resolve().parents[1]))
    errors = []
    for name, batch, precision in CASES:
        spec = TASKS[name]
        pred = predict(spec, batch, precision, device)
        out = subprocess.run([sys.executable, __file__, "--child", spec, str(batch), precision, device],
                             capture_output=True, text=True, env=env, check=True)
        meas = json.loads(out.stdout.strip().splitlines()[-1])["measured"]
        ratio = pred / meas
        errors.append(abs(ratio - 1))
        print(f"{name:<8} {batch:>6} {precision:>5} {pred / 2**20:>10.2f}MB {meas / 2**20:>10.2f}MB {ratio:>7.3f}", flush=True)
    print(f"\nworst |predicted/measured - 1|: {max(errors):.3f} (target <= 0.05); median {statistics.median(errors):.3f}\n")

    print(f"{'task':<8} {'budget':>8} {'max batch':>10} {'predicted':>10} {'real steps':>11} {'probe wall':>11}")
    steps = []
    for name, budget in (("mlp", "256MiB"), ("shapes", "64MiB"), ("charlm", "512MiB")):
        task = tunekit.load_task(TASKS[name])
        t0 = time.perf_counter()
        r = tunekit.probe(task, memory_budget=budget, device=device, noise_repeats=8)
        steps.append(r.real_steps)
        print(f"{name:<8} {budget:>8} {r.max_batch:>10} {r.predicted_max_batch:>10} {r.real_steps:>11} {time.perf_counter() - t0:>10.1f}s", flush=True)
    print(f"\nmedian real steps to find the largest batch: {statistics.median(steps)} (target <= 3)")


if __name__ == "__main__":
    main()
